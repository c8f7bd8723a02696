/* --dry-run (a megatron.c extension): what pretrain_gpt would set up, without MPI or data. */
#ifndef MC_TRAINING_DRY_RUN_H
#define MC_TRAINING_DRY_RUN_H

#include <stdio.h>

#include "megatron/tokenizer.h"
#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* After mc_args_validate: builds the micro-batch calculator and the LR scheduler as Megatron's
 * start-up does (their errors are reported), and prints (to `out`, rank 0; NULL = silent) the
 * calculator lines, the scheduler lines, the tokenizer's vocab padding, the parallel layout, the options a real run would
 * refuse, report_theoretical_memory's lines and the FLOPs per iteration. start_time is the
 * process start on mc_time_now()'s clock, for "time to initialize megatron". Failure:
 * MC_ERR_CONFIG with a->err / a->err_kind set. */
MC_API mc_status mc_dry_run_report(struct mc_args *a, FILE *out, double start_time);

/* The tokenizer's vocabulary size as Megatron's build_tokenizer reports it: from the real
 * tokenizer when its files load; otherwise NullTokenizer vocab_size + 1, GPT2BPETokenizer the
 * entries of --vocab-file (50257 when unreadable, *assumed set). -1 if unknown. */
MC_API int64_t mc_dry_run_vocab_size(const struct mc_args *a, bool *assumed);
/* _vocab_size_with_padding (mc_tok_padded_vocab_size). */
MC_API int64_t mc_vocab_padded(int64_t orig, int64_t divisible_by, int64_t tp);

/* The tokenizer arguments of build_tokenizer; MindSpeed-LLM's PretrainedFromHF reads its
 * directory from --tokenizer-name-or-path (into ta->tokenizer_model). */
MC_API void mc_tokenizer_args_from(const struct mc_args *a, struct mc_tokenizer_args *ta);
/* Megatron's "> building X tokenizer ..." line, or MindSpeed-LLM's for PretrainedFromHF. */
MC_API void mc_tokenizer_print_building(FILE *f, const struct mc_args *a);
/* args.padded_vocab_size: --padded-vocab-size as given (MindSpeed-LLM; build_tokenizer only
 * pads when it is None), else _vocab_size_with_padding with its " > padded vocab" line on f
 * (NULL: quiet). MC_ERR_CONFIG when the given size is below the tokenizer's or does not split
 * over the tensor-parallel ranks. */
MC_API mc_status mc_vocab_padded_from_args(const struct mc_args *a, int64_t orig, FILE *f,
                                           int64_t *out);

#ifdef __cplusplus
}
#endif

#endif
