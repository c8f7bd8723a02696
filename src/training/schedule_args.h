/* get_optimizer_param_scheduler() of megatron/training/training.py: the scheduler's
 * constructor arguments from the command line (core_v0.12.1). */
#ifndef MC_TRAINING_SCHEDULE_ARGS_H
#define MC_TRAINING_SCHEDULE_ARGS_H

#include "optimizer/lr_scheduler.h"
#include "training/args.h"
#include "training/microbatches.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The micro-batch calculator of set_global_variables: constant, or ramp-up from
 * --rampup-batch-size; rank 0's INFO lines to `log`. MC_ERR_CONFIG with Megatron's message. */
MC_API mc_status mc_microbatches_init_from_args(const struct mc_args *a, FILE *log,
                                                struct mc_microbatches *mb);

/* Fills `c` from validated args, writing lr_decay_iters/lr_decay_samples (and train_iters for
 * sample-based runs, via update_train_iters with `mb`, printing "setting training iterations to
 * N" to `log`) back into `a` as Megatron does. MC_ERR_CONFIG "either train-iters or
 * train-samples should be provided." when neither is set (Megatron: Exception) and when --lr is
 * missing (Megatron: TypeError). */
MC_API mc_status mc_opt_sched_config_from_args(struct mc_args *a, struct mc_microbatches *mb,
                                               FILE *log, struct mc_opt_sched_config *c);

#ifdef __cplusplus
}
#endif

#endif
