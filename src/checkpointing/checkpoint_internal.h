/* Pieces of checkpoint.c (save_checkpoint's state dict) that the checkpoint converter reuses.
 * Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_CHECKPOINT_INTERNAL_H
#define MC_CHECKPOINTING_CHECKPOINT_INTERNAL_H

#include "checkpointing/torch_pickle.h"
#include "training/args.h"

/* RerunStateMachine.state_dict() of a disabled machine at `iteration`. */
struct mc_pk *mc_ckpt_rerun_state(mc_pk_doc *d, int64_t iteration);
/* One argument value as it pickles in the args Namespace (torch dtypes, AttnBackend enums). */
struct mc_pk *mc_ckpt_arg_value(mc_pk_doc *d, const struct mc_val *v);

#endif
