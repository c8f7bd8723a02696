/* pretrain(): the training loop of megatron/training/training.py with pretrain_gpt.py's
 * model, batch and loss (core_v0.12.1), for one process (tp = pp = dp = 1). */
#ifndef MC_TRAINING_TRAINING_H
#define MC_TRAINING_TRAINING_H

#include <time.h>

#include "training/args.h"

/* Runs pretraining with validated args. t0 is the process start (Megatron's _TRAIN_START_TIME).
 * Rank 0's messages and the training lines go to stdout. MC_OK on a normal end, including an
 * exit by --exit-interval, --exit-duration-in-mins or SIGTERM with --exit-signal-handler. */
MC_API mc_status mc_pretrain_gpt(struct mc_args *a, double t0);

/* Monotonic seconds, the clock t0 is taken from. */
MC_API double mc_time_now(void);

#endif
