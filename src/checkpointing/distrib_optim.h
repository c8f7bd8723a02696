/* distrib_optim.pt: the distributed optimizer's parameter state in `--ckpt-format torch`
 * checkpoints, as DistributedOptimizer.save_parameter_state / load_parameter_state write and read
 * it (megatron/core/optimizer/distrib_optimizer.py, core_v0.12.1). Private header. */
#ifndef MC_CHECKPOINTING_DISTRIB_OPTIM_H
#define MC_CHECKPOINTING_DISTRIB_OPTIM_H

#include <stdbool.h>

#include "distributed/distrib_optimizer.h"
#include "megatron/gpt.h"

/* Gathers every data-parallel rank's Adam moments (collective over the data-parallel group:
 * every rank calls it) and, on `writer` (data-parallel rank 0), writes `path` through a
 * temporary name. perm[j] is the j-th parameter in the named_parameters() order of the model
 * whose names the checkpoint uses: the file's buffer layout is the one that model has. */
mc_status mc_ckpt_distopt_save(mc_distopt *o, const mc_gpt_model *m, const int64_t *perm,
                               const char *path, bool writer);

/* Reads `path` (each rank reads the file itself: the same values Megatron scatters from
 * data-parallel rank 0) into this rank's shard of the moments and the model's parameters. */
mc_status mc_ckpt_distopt_load(mc_distopt *o, mc_gpt_model *m, const int64_t *perm, const char *path);

#endif /* MC_CHECKPOINTING_DISTRIB_OPTIM_H */
