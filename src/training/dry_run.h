/* --dry-run (a megatron.c extension): what pretrain_gpt would set up, without MPI or data. */
#ifndef MC_TRAINING_DRY_RUN_H
#define MC_TRAINING_DRY_RUN_H

#include <stdio.h>

#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* After mc_args_validate: prints (to `out`, rank 0; NULL = silent) the micro-batch calculator
 * lines, the tokenizer's vocab padding, the parallel layout, the options a real run would
 * refuse, report_theoretical_memory's lines and the FLOPs per iteration. Failure:
 * MC_ERR_CONFIG with a->err / a->err_kind set. */
MC_API mc_status mc_dry_run_report(struct mc_args *a, FILE *out);

/* The tokenizer's vocabulary size as Megatron's build_tokenizer reports it, without loading
 * the tokenizer: NullTokenizer vocab_size + 1; GPT2BPETokenizer the entries of --vocab-file
 * (50257 when the file cannot be read, *assumed set). -1 if unknown. */
MC_API int64_t mc_dry_run_vocab_size(const struct mc_args *a, bool *assumed);
/* _vocab_size_with_padding: ceil(orig / (divisible_by * tp)) * (divisible_by * tp). */
MC_API int64_t mc_vocab_padded(int64_t orig, int64_t divisible_by, int64_t tp);

#ifdef __cplusplus
}
#endif

#endif
