/* The activation memory a rank allocates, counted from the arguments (the model's own count,
 * mc_gpt_config_activation_bytes, times the micro-batches each chunk keeps in flight), and
 * --recompute-auto-budget-gb (megatron.c, beyond Megatron): the full recompute with the fewest
 * recomputed layers whose count fits the budget (docs/recompute.md). Private to src/training/. */
#ifndef MC_TRAINING_RECOMPUTE_BUDGET_H
#define MC_TRAINING_RECOMPUTE_BUDGET_H

#include <stdio.h>

#include "megatron/transformer_config.h"
#include "training/args.h"

/* A recompute setting: Megatron's three options. */
struct mc_recompute_setting {
    enum mc_recompute granularity;
    enum mc_recompute_method method;
    int64_t num_layers;
};

/* The activations category one rank of pipeline stage `stage` allocates in training: per model
 * chunk its shared part (scratch, recompute work area) plus one slot per micro-batch in flight
 * (1F1B / interleaved, as the trainer keeps them), and the trainer's three [b, s] fp32 loss
 * buffers. rc NULL: the arguments' own recompute setting. vocab / padded: the tokenizer's size
 * and Megatron's padded one. */
mc_status mc_activation_estimate(const struct mc_args *a, int64_t vocab, int64_t padded,
                                 const struct mc_recompute_setting *rc, int stage, double *bytes);

/* The same for the most loaded pipeline stage (*stage gets it). */
mc_status mc_activation_estimate_max(const struct mc_args *a, int64_t vocab, int64_t padded,
                                     const struct mc_recompute_setting *rc, double *bytes,
                                     int *stage);

/* First in mc_args_validate: --recompute-auto-budget-gb must be a positive number and is not
 * combined with the options it sets (argparse's "not allowed with" error, exit status 2). */
mc_status mc_recompute_budget_check(struct mc_args *a);

/* With --recompute-auto-budget-gb: chooses the setting (none, full block k, or full uniform 1
 * when every layer of a chunk must be rerun) with the fewest recomputed layers per model chunk
 * whose mc_activation_estimate_max fits the budget, writes it into the arguments
 * (--recompute-granularity/-method/-num-layers, so the model, the dry run and the checkpoint's
 * arguments see it) and says so in one line on `out` (NULL: silent). MC_ERR_CONFIG naming the
 * budget and the smallest estimate when even recomputing every layer does not fit. Nothing
 * without the option. */
mc_status mc_recompute_auto_budget(struct mc_args *a, int64_t vocab, int64_t padded, FILE *out);

#endif /* MC_TRAINING_RECOMPUTE_BUDGET_H */
