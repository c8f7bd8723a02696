/* Number of micro-batches per iteration, constant or with batch-size ramp-up. Mirrors
 * megatron/core/num_microbatches_calculator.py and update_train_iters() of
 * megatron/training/training.py (Megatron-LM core_v0.12.1). */
#ifndef MC_TRAINING_MICROBATCHES_H
#define MC_TRAINING_MICROBATCHES_H

#include <stdio.h>

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_microbatches {
    int64_t global_batch_size, micro_batch_size, data_parallel_size;
    bool decrease_if_needed;
    bool rampup;                      /* --rampup-batch-size given */
    int64_t start, increment, rampup_samples;
    double samples_per_increment;     /* rampup_samples / number of increments (Python float) */
    int64_t current;                  /* configured global batch size now (-1 before the first update) */
    int64_t running;                  /* current, rounded down with --decrease-batch-size-if-needed */
    int64_t num_micro_batches;
    FILE *log;                        /* rank 0's INFO lines, or NULL */
};

/* Builds the calculator. `rampup` is NULL or the three strings of --rampup-batch-size
 * (n_rampup values). Errors: MC_ERR_CONFIG with Megatron's assertion message. */
MC_API mc_status mc_microbatches_init(struct mc_microbatches *m, const char *const *rampup,
                                      int n_rampup, int64_t global_batch_size,
                                      int64_t micro_batch_size, int64_t data_parallel_size,
                                      bool decrease_if_needed, FILE *log);
/* update_num_microbatches(consumed_samples, consistency_check). */
MC_API mc_status mc_microbatches_update(struct mc_microbatches *m, int64_t consumed_samples,
                                        bool consistency_check);
/* update_train_iters for sample-based runs: iterations needed for train_samples. */
MC_API int64_t mc_microbatches_train_iters(struct mc_microbatches *m, int64_t train_samples);

#ifdef __cplusplus
}
#endif

#endif
