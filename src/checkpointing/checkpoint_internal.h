/* Pieces of checkpoint.c (save_checkpoint's state dict) that the checkpoint converter
 * (src/tools/checkpoint/) and the training layer's checkpoint policy (src/training/
 * checkpointing.c) reuse. Private header of src/checkpointing/. No command-line arguments here:
 * the format code is told plain options (struct mc_ckpt_options). */
#ifndef MC_CHECKPOINTING_CHECKPOINT_INTERNAL_H
#define MC_CHECKPOINTING_CHECKPOINT_INTERNAL_H

#include "checkpointing/torch_pickle.h"
#include "checkpointing/state_dict_names.h"
#include "megatron/checkpoint.h"

/* RerunStateMachine.state_dict() of a disabled machine at `iteration`. */
struct mc_pk *mc_ckpt_rerun_state(mc_pk_doc *d, int64_t iteration);
/* What a torch_dist save's common.pt keeps of it: {'mode': RerunMode.DISABLED} (the rest is the
 * rerun_state_machine_state sharded object). */
struct mc_pk *mc_ckpt_rerun_common(mc_pk_doc *d);
/* The error for a checkpoint `what` of another tensor / pipeline layout than this run's (its
 * saved args ck), naming the converter command that reshards it. */
mc_status mc_ckpt_layout_error(const struct mc_ckpt_state *s, const char *what, const struct mc_pk *ck);
/* "<path>: no '<key>' in the checkpoint<hint>" (MC_ERR_FORMAT). */
mc_status mc_ckpt_missing(const char *path, const char *key, const char *hint);

/* The optimizer's parameters as the torch format numbers them (dist_checkpoint.c builds the
 * same numbering): their count over every model chunk, the parameter (and its chunk's model) of
 * an optimizer index, and group_order: order[k] (k < total; order needs 2 x total entries) is
 * the optimizer index of state index k, the first *n_first in the first param group. */
int64_t mc_ckpt_total_params(const struct mc_ckpt_state *s);
struct mc_param_view mc_ckpt_opt_param(const struct mc_ckpt_state *s, int64_t gi);
const mc_gpt_model *mc_ckpt_opt_param_model(const struct mc_ckpt_state *s, int64_t gi);
void mc_ckpt_group_order(const struct mc_ckpt_state *s, enum mc_sd_scheme scheme, int64_t *order,
                         int64_t *n_first, bool *first_decay);

/* torch_dist with the distributed optimizer and --no-ckpt-fully-parallel-save (sharding type
 * 'dp_zero_gather_scatter', dist_checkpoint_save.c): DistributedOptimizer.state_dict()
 * ({'optimizer': {'param_groups': [...]}, 'grad_scaler'}) and the parameter state gathered over
 * the data-parallel group (collective; the tree on `writer`, as distrib_optim.pt holds it). */
struct mc_pk *mc_ckpt_distopt_dict(mc_pk_doc *d, const struct mc_ckpt_state *s);
mc_status mc_ckpt_distopt_gather_state(const struct mc_ckpt_state *s, mc_pk_doc *d, bool writer,
                                       struct mc_pk **out);

#endif
