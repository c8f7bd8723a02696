/* The split shared by the vector dropout-mask kernels (dropout_avx512.c, dropout_avx2.c): the
 * elements outside whole 32-flag groups (8 Philox blocks) go to core/rng.c's scalar definition,
 * the groups to the kernel's own loop, in fixed 256-group chunks over OpenMP when there are many.
 * Every flag depends on its element index alone, so any split gives the same bits. */
#ifndef MC_DROPOUT_SPLIT_H
#define MC_DROPOUT_SPLIT_H

#include "core/rng.h"
#include "megatron.h"

#include <stdint.h>

/* groups g0 .. g1 - 1 (elements 32 g .. 32 g + 31) into keep, which holds element 32 g0 */
typedef void (*mc_dropout_groups_fn)(uint8_t *keep, int64_t g0, int64_t g1, uint64_t seed,
                                     uint32_t c1_hi, uint32_t c2, uint32_t c3, float p);

static inline void mc_dropout_mask_split(mc_dropout_groups_fn groups, uint8_t *keep,
                                         int64_t first, int64_t n, uint64_t seed,
                                         uint32_t c1_hi, uint32_t c2, uint32_t c3, float p)
{
    const int64_t E = 32;
    int64_t g0 = (first + E - 1) / E, g1 = (first + n) / E;
    if (g1 <= g0) { /* no whole group inside */
        mc_rng_dropout_mask(keep, first, n, seed, c1_hi, c2, c3, p);
        return;
    }
    MC_ASSERT(c1_hi < (1u << 16) && (uint64_t)(first + n + 3) / 4 < ((uint64_t)1 << 48));
    int64_t head = g0 * E - first, tail = first + n - g1 * E;
    if (head)
        mc_rng_dropout_mask(keep, first, head, seed, c1_hi, c2, c3, p);
    if (tail)
        mc_rng_dropout_mask(keep + n - tail, g1 * E, tail, seed, c1_hi, c2, c3, p);
    int64_t ng = g1 - g0;
    uint8_t *body = keep + head;
    if (ng * E <= 65536) {
        groups(body, g0, g1, seed, c1_hi, c2, c3, p);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < (ng + 255) / 256; c++) {
        int64_t a = g0 + 256 * c, b = a + 256 < g1 ? a + 256 : g1;
        groups(body + (a - g0) * E, a, b, seed, c1_hi, c2, c3, p);
    }
}

#endif
