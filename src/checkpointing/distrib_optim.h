/* distrib_optim.pt: the distributed optimizer's parameter state in `--ckpt-format torch`
 * checkpoints, as DistributedOptimizer.save_parameter_state / load_parameter_state write and read
 * it (megatron/core/optimizer/distrib_optimizer.py, core_v0.12.1). Private header. */
#ifndef MC_CHECKPOINTING_DISTRIB_OPTIM_H
#define MC_CHECKPOINTING_DISTRIB_OPTIM_H

#include <stdbool.h>

#include "checkpointing/torch_pickle.h"
#include "distributed/distrib_optimizer.h"
#include "megatron/gpt.h"

/* One grad buffer of distrib_optim.pt: a model chunk (interleaved pipelining: one per chunk,
 * buffer index = chunk index, as Megatron's DistributedOptimizer numbers the buffers of its
 * per-model-chunk DDPs) and its distributed optimizer. perm[j] is the j-th parameter in the
 * named_parameters() order of the model whose names the checkpoint uses: the file's buffer
 * layout is the one that model has. */
#define MC_CKPT_MAX_CHUNKS 64
struct mc_ckpt_distopt_chunk {
    mc_distopt *o;
    mc_gpt_model *m;
    int64_t *perm;
    enum mc_dtype param_dtype; /* the run's params_dtype: the buffer key (param, grad dtype);
                                  the tensors are fp32 in every precision (the main params) */
    enum mc_dtype grad_dtype;  /* the key's grad dtype */
    /* loading: every fp32 param must be a master of the checkpoint's bf16 weight (round it to
     * that weight). Megatron core_v0.12.1's --bf16 --use-precision-aware-optimizer stores TE's
     * int16 param remainders in 'param' instead, which cannot give the master back. */
    bool check_masters;
};

/* Gathers every data-parallel rank's Adam moments of each chunk (collective over the
 * data-parallel group: every rank calls it) and, on `writer` (data-parallel rank 0), writes
 * `path` through a temporary name, with buffers 0 .. n-1. */
/* The same gathered state as a tree in `d` (*out, on `writer`; NULL elsewhere): the
 * {'buckets_coalesced': True, 0: {...}, ...} of get_parameter_state_dp_zero, which a torch_dist
 * save of sharding type 'dp_zero_gather_scatter' stores as the sharded object
 * optimizer.distributed.dp_group_idx_<i>.param_state. Collective over the data-parallel group;
 * `what` names the checkpoint in errors; d NULL: joins the gather and fails. */
struct mc_pk;
mc_status mc_ckpt_distopt_gather(const struct mc_ckpt_distopt_chunk *ch, int n, mc_pk_doc *d,
                                 const char *what, bool writer, struct mc_pk **out);

mc_status mc_ckpt_distopt_save(const struct mc_ckpt_distopt_chunk *ch, int n, const char *path,
                               bool writer);

/* Reads `path` (each rank reads the file itself: the same values Megatron scatters from
 * data-parallel rank 0) into this rank's shards of the moments and the chunks' parameters; the
 * file must hold exactly n buffers. */
mc_status mc_ckpt_distopt_load(const struct mc_ckpt_distopt_chunk *ch, int n, const char *path);

/* The same from a tree already read (a torch_dist 'dp_zero_gather_scatter' param_state object);
 * `what` names it in errors. */
mc_status mc_ckpt_distopt_load_state(const struct mc_ckpt_distopt_chunk *ch, int n,
                                     const struct mc_pk *root, const char *what);

/* A torch_dist checkpoint's optimizer state in model space (dist_checkpoint.c's 'param_state':
 * parameter index over the chunks -> {exp_avg, exp_avg_sq | momentum_buffer, [fp32_param]},
 * each the rank's whole parameter): this rank's shard of the moments into the optimizers, the
 * fp32 main params (when given) into the chunks' parameters. Any saved data-parallel size. */
mc_status mc_ckpt_distopt_load_model_space(const struct mc_ckpt_distopt_chunk *ch, int n,
                                           const struct mc_pk *param_state);

#endif /* MC_CHECKPOINTING_DISTRIB_OPTIM_H */
