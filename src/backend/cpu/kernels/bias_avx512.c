/* AVX-512 bias grad (column sum) and bias-dropout-add (same contract as bias_ref.c; the bias
 * grads autograd computes for Megatron's linears, and fusions/fused_bias_dropout.py). The column
 * sum gives each 64-column block to one owner that adds rows in order with the reference's fp32
 * operations: bit-identical to the reference for any thread count. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/vec_avx512.h"

#define COL_BLOCK 64

void bias_grad_avx512(float *db, const float *dy, int64_t rows, int64_t cols)
{
    int64_t nblk = (cols + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * COL_BLOCK, n = cols - j0 < COL_BLOCK ? cols - j0 : COL_BLOCK;
        if (n == COL_BLOCK) { /* the common case: four full vectors, unmasked */
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t r = 0; r < rows; r++) {
                const float *p = dy + r * cols + j0;
                a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p));
                a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + VL));
                a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + 2 * VL));
                a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + 3 * VL));
            }
            float *d = db + j0;
            _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), a0));
            _mm512_storeu_ps(d + VL, _mm512_add_ps(_mm512_loadu_ps(d + VL), a1));
            _mm512_storeu_ps(d + 2 * VL, _mm512_add_ps(_mm512_loadu_ps(d + 2 * VL), a2));
            _mm512_storeu_ps(d + 3 * VL, _mm512_add_ps(_mm512_loadu_ps(d + 3 * VL), a3));
            continue;
        }
        for (int64_t k = 0; k < n; k += VL) {
            __mmask16 t = tail_mask(n - k);
            __m512 a = _mm512_setzero_ps();
            for (int64_t r = 0; r < rows; r++)
                a = _mm512_add_ps(a, v_loadu(dy + r * cols + j0 + k, t));
            v_storeu(db + j0 + k, t, _mm512_add_ps(v_loadu(db + j0 + k, t), a));
        }
    }
}

void bias_dropout_add_avx512(float *y, const float *x, const float *bias, const float *residual,
                             const uint8_t *keep_mask, float scale, int64_t rows, int64_t cols)
{
    const __m512 vs = _mm512_set1_ps(scale);
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += VL) {
            __mmask16 t = tail_mask(cols - c);
            int64_t i = r * cols + c;
            __m512 v = v_loadu(x + i, t);
            if (bias)
                v = _mm512_add_ps(v, v_loadu(bias + c, t));
            if (keep_mask) {
                __m128i kb = _mm_maskz_loadu_epi8(t, keep_mask + i);
                __mmask16 keep = _mm_test_epi8_mask(kb, kb);
                v = _mm512_maskz_mul_ps(keep, v, vs);
            }
            if (residual)
                v = _mm512_add_ps(v_loadu(residual + i, t), v);
            v_storeu(y + i, t, v);
        }
}
