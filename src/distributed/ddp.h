/* Data-parallel gradient synchronisation, the counterpart of
 * megatron/core/distributed/distributed_data_parallel.py, param_and_grad_buffer.py
 * (_ParamAndGradBucketGroup: start/finish_grad_sync, start/finish_param_sync) and
 * finalize_model_grads.py, core_v0.12.1. Private header. */
#ifndef MC_DDP_H
#define MC_DDP_H

#include "megatron/param_set.h"
#include "distributed/distrib_optimizer.h"
#include "parallel_state/parallel_state.h"

/* Megatron's gradient_scaling_factor: 1/(dp*cp) (grads averaged over data parallel), or 1
 * with --calculate-per-token-loss (grads summed; the caller scales by 1/total_tokens). */
float mc_ddp_grad_scale(const struct mc_parallel_state *ps, bool calculate_per_token_loss);

/* With an fp16 grad buffer (s->grad_dtype F16): x[0, n), grads of s (the grad block, the
 * distributed optimizer's buffer or shards), rounded to fp16 in place, as the result of a
 * sum or scaling Megatron computes in its fp16 buffer (opmath fp32, rounded once). No-op for
 * fp32 grads. */
mc_status mc_ddp_round_grads(const struct mc_param_set *s, float *x, int64_t n);

/* Multiplies every gradient of the set by scale (one pass over the contiguous grad block),
 * rounded to the grad buffer's dtype. */
mc_status mc_ddp_scale_grads(const struct mc_param_set *s, float scale);
/* finish_grad_sync without buckets: scales the set's contiguous grad buffer by scale and
 * all-reduces it (sum) over the data-parallel-with-context group, so every DP replica holds
 * the same averaged grads before the optimizer step. A no-op for one DP rank. */
mc_status mc_ddp_finish_grad_sync(const struct mc_param_set *s,
                                  const struct mc_parallel_state *ps, float scale);

/* DistributedDataParallel's grad sync with buckets (DistributedDataParallel.__init__'s
 * DistributedDataParallelConfig, the options of the same names). */
struct mc_ddp_config {
    bool overlap_grad_reduce;     /* bucket collectives start in backward */
    bool overlap_param_gather;    /* with the distributed optimizer: all-gather before use */
    bool check_for_nan_in_grad;   /* each bucket's local grad norm must be finite */
    bool blocking;                /* MC_DDP_BLOCKING=1: overlap's buckets, blocking calls */
    int64_t bucket_size;          /* mc_pgb_bucket_size; 0 = one bucket */
    float grad_scale;             /* mc_ddp_grad_scale */
};

typedef struct mc_ddp mc_ddp;

/* Buckets the set's grads as Megatron does (with dopt, the distributed optimizer's buckets,
 * whose collectives it runs) and installs its grad-ready and param-use hooks (s->hooks, which
 * the model calls). s, ps and dopt must outlive it. */
mc_status mc_ddp_init(const struct mc_ddp_config *c, struct mc_param_set *s,
                      const struct mc_parallel_state *ps, mc_distopt *dopt, mc_ddp **out);
/* Waits for outstanding collectives, removes the hooks. */
void mc_ddp_free(mc_ddp *d);
int64_t mc_ddp_num_buckets(const mc_ddp *d);
/* Megatron's no_sync: the backward about to run is the step's last micro-batch (true) or not
 * (false); only in the last one do ready buckets start their collectives. */
void mc_ddp_set_last_microbatch(mc_ddp *d, bool last);
/* finish_grad_sync: with overlap, waits for every bucket's collective; without, runs them
 * (blocking) now. The grads (or with dopt its main_grad shards) are then reduced and scaled. */
mc_status mc_ddp_grad_sync(mc_ddp *d);
/* Every outstanding param all-gather waited for (before params are read outside forward). */
mc_status mc_ddp_finish_param_sync(mc_ddp *d);

#endif /* MC_DDP_H */
