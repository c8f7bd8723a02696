/* Theoretical memory per rank: report_theoretical_memory() of
 * megatron/training/theoretical_memory_usage.py (Megatron-LM core_v0.12.1). */
#ifndef MC_TRAINING_THEORETICAL_MEMORY_H
#define MC_TRAINING_THEORETICAL_MEMORY_H

#include <stdio.h>

#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_memory_estimate {
    double params_transformer_block, params_mtp_block, params_embedding, params_total;
    double params_most_loaded_shard, params_other_shards; /* other: PP > 1 only */
    double weight_and_optimizer_bytes;
    bool has_activation;        /* sequence parallel + selective recompute (Megatron's formula) */
    double activation_per_layer_bytes; /* one layer, before the division by TP */
    double activation_bytes;
    double interleave_penalty;  /* virtual pipeline only, else 0 */
    int64_t in_flight_microbatches; /* -1 when Megatron prints no such line */
};

/* Computes the estimate; num_microbatches < 0 means None. */
MC_API mc_status mc_memory_estimate(const struct mc_args *a, int64_t padded_vocab_size,
                                    int64_t num_microbatches, struct mc_memory_estimate *e);
/* Prints the lines of report_theoretical_memory(verbose=True). */
MC_API void mc_memory_report(FILE *f, const struct mc_args *a, const struct mc_memory_estimate *e);

#ifdef __cplusplus
}
#endif

#endif
