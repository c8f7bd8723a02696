/* Megatron's gradient-buffer index map (_ParamAndGradBuffer of
 * megatron/core/distributed/param_and_grad_buffer.py, core_v0.12.1): where every parameter
 * lives in the contiguous grad (and param) buffer, how the buffer is cut into buckets and how
 * the distributed optimizer pads it. A pure function of the parameter sizes; private header. */
#ifndef MC_PARAM_AND_GRAD_BUFFER_H
#define MC_PARAM_AND_GRAD_BUFFER_H

#include "megatron.h"

struct mc_pgb_range {
    int64_t start, end; /* [start, end) in buffer elements */
    int64_t bucket;     /* bucket id (params); unused for buckets */
};

struct mc_pgb_bucket {
    int64_t start, end;     /* [start, end): padded bucket */
    int64_t numel_unpadded; /* last param end - bucket start */
};

struct mc_pgb_map {
    int64_t n_params;
    struct mc_pgb_range *param; /* [n_params], indexed in FORWARD (state_dict) order */
    int64_t n_buckets;
    struct mc_pgb_bucket *bucket; /* [n_buckets], in buffer order */
    int64_t numel, numel_unpadded;
};

struct mc_pgb_config {
    int dp;                        /* data-parallel world size */
    bool use_distributed_optimizer;
    int64_t bucket_size;           /* 0 = one bucket (Megatron's bucket_size=None) */
    bool pad_buckets_for_high_nccl_busbw;
};

/* DistributedDataParallel's bucket size: --ddp-bucket-size or max(40M, 1M*dp) with
 * --overlap-grad-reduce, none (0) without it or on pipeline ranks after the first. */
int64_t mc_pgb_bucket_size(bool overlap_grad_reduce, int64_t ddp_bucket_size, int dp,
                           int pp_rank);

/* Lays out params of numel[i] (forward order; shared_embedding[i] may be NULL) in reverse
 * order as Megatron does. Fills *out (free with mc_pgb_map_free). */
mc_status mc_pgb_map_init(const struct mc_pgb_config *c, int64_t n, const int64_t *numel,
                          const bool *shared_embedding, struct mc_pgb_map *out);
void mc_pgb_map_free(struct mc_pgb_map *m);

#endif /* MC_PARAM_AND_GRAD_BUFFER_H */
