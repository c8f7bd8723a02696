/* What this build of megatron.c refuses to train: the ONE list that both a real run and
 * --dry-run read (a megatron.c addition; Megatron implements every option it parses).
 *
 * Sources, in the order they are reported:
 *   1. whole features given by value (MoE, context parallelism, FSDP, encoder parallelism, ...);
 *   2. every option of the support class UNSUPPORTED (scripts/gen_args_table.py) given with a
 *      value other than its default;
 *   3. settings of supported options this build cannot train yet: interleaved-pipeline chunk
 *      counts, the checkpoint format of --save/--load, mixed precision (--bf16/--fp16),
 *      Megatron tokenizers not implemented here.
 * Marking an option supported is one line: move its dest into SUPPORTED (or NOOP) in
 * scripts/gen_args_table.py and regenerate; a value-level limit is one `refuse(...)` line in
 * refusals.c. */
#ifndef MC_TRAINING_REFUSALS_H
#define MC_TRAINING_REFUSALS_H

#include <stdio.h>

#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MC_MAX_REFUSALS = 48, MC_REFUSAL_LEN = 384 };
enum { MC_MAX_VP_CHUNKS = 64 }; /* interleaved pipelining: model chunks per pipeline rank */

struct mc_refusals {
    int n;                                   /* refusals found (all of them) */
    int kept;                                /* the first min(n, MC_MAX_REFUSALS), in msg */
    char msg[MC_MAX_REFUSALS][MC_REFUSAL_LEN];
};

/* Collects every refusal of a validated namespace (after mc_args_validate: some checks read
 * what validate_args derives). Pure: prints nothing, changes nothing. */
MC_API void mc_args_refusals(const struct mc_args *a, struct mc_refusals *out);

/* The lines a real run prints before it stops (and a dry run prints too): one
 * "NotImplementedError: <message>" per refusal, then "... and N more" if some were not kept. */
MC_API void mc_refusals_print(FILE *f, const struct mc_refusals *r);

#ifdef __cplusplus
}
#endif

#endif
