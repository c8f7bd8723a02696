/* Peak in-flight micro-batches per model chunk of one pipeline stage, from the order of
 * forward and backward steps of Megatron's schedules (megatron/core/pipeline_parallel/
 * schedules.py, core_v0.12.1: get_pp_rank_microbatches, get_schedule_table). Megatron needs no
 * such count (autograd keeps each graph alive); megatron.c sizes the engine's activation slots
 * with it. */
#include "pipeline_parallel/in_flight.h"

/* Chunk of virtual micro-batch j in get_schedule_table: micro-batches go in groups of `group`,
 * each group through chunk 0, then chunk 1, ...; the last group takes what is left. */
static int chunk_of(int64_t j, int vp, int64_t m, int64_t group)
{
    int64_t first = j / (group * vp) * group; /* first micro-batch of j's group */
    int64_t size = first + group >= m ? m - first : group;
    return (int)((j - first * vp) / size);
}

mc_status mc_pp_in_flight(int pp, int rank, int vp, int64_t num_microbatches, int64_t group,
                          int64_t *per_chunk)
{
    if (pp < 1 || rank < 0 || rank >= pp || vp < 1 || num_microbatches < 1 || group < 0)
        return mc_error(MC_ERR_CONFIG, "in-flight micro-batches: stage %d of %d, %d chunks, %lld "
                        "micro-batches, group %lld: expected 0 <= stage < pp, chunks >= 1, "
                        "micro-batches >= 1", rank, pp, vp, (long long)num_microbatches,
                        (long long)group);
    if (vp == 1) {
        per_chunk[0] = pp - rank < num_microbatches ? pp - rank : num_microbatches;
        return MC_OK;
    }
    if (group == 0)
        group = pp;
    int64_t total = num_microbatches * vp;
    int64_t warmup = (int64_t)(pp - rank - 1) * 2 + (int64_t)(vp - 1) * group;
    if (warmup > total)
        warmup = total;
    int64_t live[64] = {0};
    if (vp > 64)
        return mc_error(MC_ERR_UNSUPPORTED, "in-flight micro-batches: %d model chunks (at most "
                        "64)", vp);
    for (int c = 0; c < vp; c++)
        per_chunk[c] = 0;
    /* forward j on chunk_of(j); backward j on vp - 1 - chunk_of(j) */
    int64_t f = 0, b = 0;
    while (b < total) {
        bool forward = f < total && (f < warmup || f - warmup <= b);
        if (forward) {
            int c = chunk_of(f++, vp, num_microbatches, group);
            if (++live[c] > per_chunk[c])
                per_chunk[c] = live[c];
        } else {
            live[vp - 1 - chunk_of(b++, vp, num_microbatches, group)]--;
        }
    }
    return MC_OK;
}
