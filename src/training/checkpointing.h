/* The training side of checkpointing: what to save and load given the arguments (--save,
 * --load, --finetune, --no-save-optim, --no-load-optim, --ckpt-step, --ckpt-format ...), the
 * args Namespace written into a checkpoint, and check_checkpoint_args on loading. Mirrors the
 * argument-aware half of megatron/training/checkpointing.py (Megatron-LM core_v0.12.1); the
 * formats themselves (torch zip/pickle, torch_dist, the state dict names) live below, in
 * src/checkpointing/, and take a plain struct mc_ckpt_options. */
#ifndef MC_TRAINING_CHECKPOINTING_H
#define MC_TRAINING_CHECKPOINTING_H

#include "megatron/checkpoint.h"
#include "training/args.h"

/* The format's options from the arguments: those of saving (dir = --save) or of loading
 * (dir = --load); only the ones that path reads are read (loading needs no --lr). */
void mc_train_ckpt_options(const struct mc_args *a, bool saving, struct mc_ckpt_options *o);

/* save_checkpoint: s->opts from the arguments (with the args Namespace saved from `a`, with
 * consumed_train_samples etc. as the caller set them), then mc_ckpt_save. */
mc_status mc_train_ckpt_save(struct mc_args *a, struct mc_ckpt_state *s, FILE *log);

/* load_checkpoint: s->opts from the arguments, then mc_ckpt_load; the saved args are checked
 * against `a` (check_checkpoint_args: the model shape and the parallel layout) and
 * consumed_train_samples, skipped_train_samples and consumed_valid_samples are restored into
 * `a`, unless --finetune. */
mc_status mc_train_ckpt_load(struct mc_args *a, struct mc_ckpt_state *s, FILE *log, bool *loaded);

/* --async-save (training/async_utils.c, megatron/training/async_utils.py): the run's queue of
 * saves, maybe_finalize_async_save (every rank at the same points: the start of each iteration,
 * blocking = false; the end of train() and of pretrain(), blocking = true; a no-op without
 * --async-save), and after an error the wait for the writers still running (their saves are
 * dropped unfinalized: the tracker keeps the last good checkpoint). */
struct mc_async_queue *mc_train_async_queue(void);
mc_status mc_train_maybe_finalize_async_save(const struct mc_args *a, bool blocking);
void mc_train_async_save_abandon(void);

/* One argument value as it pickles in the args Namespace (torch dtypes, AttnBackend enums);
 * NULL when out of memory. */
struct mc_pk *mc_ckpt_arg_value(struct mc_pk_doc *d, const struct mc_val *v);

#endif
