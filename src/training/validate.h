/* validate_args: Megatron's argument checks and derived values (megatron/training/arguments.py,
 * validate_args, core_v0.12.1). */
#ifndef MC_TRAINING_VALIDATE_H
#define MC_TRAINING_VALIDATE_H

#include <stdio.h>

#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks `a` in Megatron's order and fills the derived attributes (data_parallel_size,
 * global_batch_size, ffn_hidden_size, kv_channels, params_dtype, ...). `defaults` are the
 * program's args_defaults as (dest, value) string pairs ending with NULL (pretrain_gpt:
 * tokenizer_type GPT2BPETokenizer). Rank 0's messages and the arguments dump go to `out`
 * (NULL: silent), warnings to `warn` (NULL: silent).
 * Failure: MC_ERR_CONFIG with a->err_kind ("AssertionError", "RuntimeError"), a->err (may be
 * "" for Megatron's bare assertions) and a->exit_code 1. --checkpoint-activations ends the
 * program like Megatron: MC_ERR_CONFIG with exit_code 0 and err_kind NULL. */
MC_API mc_status mc_args_validate(struct mc_args *a, const char *const *defaults, FILE *out,
                                  FILE *warn);

#ifdef __cplusplus
}
#endif

#endif /* MC_TRAINING_VALIDATE_H */
