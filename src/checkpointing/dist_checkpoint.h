/* Megatron's torch_dist checkpoints (dist_checkpoint.c). Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_DIST_CHECKPOINT_H
#define MC_CHECKPOINTING_DIST_CHECKPOINT_H

#include "checkpointing/torch_pickle.h"
#include "megatron/checkpoint.h"

/* Whether iter_dir is a torch_dist checkpoint (it has metadata.json). */
bool mc_dist_ckpt_is(const char *iter_dir);

/* This rank's state dict from the torch_dist checkpoint in iter_dir, in the form the torch-format
 * loader reads (args, iteration, model / model<v> with this stage's local names and this rank's
 * tensor-parallel shards, optimizer state by index with param_groups, opt_param_scheduler, ...),
 * whatever layout it was saved with. Tensors are owned by `d`. */
mc_status mc_dist_ckpt_read(mc_pk_doc *d, const struct mc_ckpt_state *s, const char *iter_dir,
                            struct mc_pk **sd);

#endif
