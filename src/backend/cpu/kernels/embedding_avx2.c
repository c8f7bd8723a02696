/* AVX2 vocab-parallel embedding lookup and grad: an 8-wide port of embedding_avx512.c (same
 * contract as embedding_ref.c; the local part of Megatron's VocabParallelEmbedding). The grad
 * gives each 64-column block of the table to one owner that adds tokens in order, so it is
 * bit-identical to the reference and independent of the thread count. */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

#include <string.h>

#define COL_BLOCK 64

void embedding_fwd_avx2(float *y, const float *w, const int64_t *ids, int64_t n, int64_t h,
                        int64_t vocab_start, int64_t vocab_local)
{
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t t = 0; t < n; t++) {
        int64_t id = ids[t] - vocab_start;
        if (id >= 0 && id < vocab_local)
            memcpy(y + t * h, w + id * h, (size_t)h * sizeof(float));
        else
            memset(y + t * h, 0, (size_t)h * sizeof(float));
    }
}

void embedding_bwd_avx2(float *dw, const float *dy, const int64_t *ids, int64_t n, int64_t h,
                        int64_t vocab_start, int64_t vocab_local)
{
    int64_t nblk = (h + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * COL_BLOCK, w = h - j0 < COL_BLOCK ? h - j0 : COL_BLOCK;
        for (int64_t t = 0; t < n; t++) {
            int64_t id = ids[t] - vocab_start;
            if (id < 0 || id >= vocab_local)
                continue;
            float *d = dw + id * h + j0;
            const float *g = dy + t * h + j0;
            for (int64_t k = 0; k < w; k += VL8) {
                __m256i m = tail_mask8(w - k);
                v8_storeu(d + k, m, _mm256_add_ps(v8_loadu(d + k, m), v8_loadu(g + k, m)));
            }
        }
    }
}
