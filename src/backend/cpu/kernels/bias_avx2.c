/* AVX2 bias grad (column sum) and bias-dropout-add: 8-wide ports of bias_avx512.c (same contract
 * as bias_ref.c; the bias grads autograd computes for Megatron's linears, and
 * fusions/fused_bias_dropout.py). The column sum gives each 64-column block to one owner that
 * adds rows in order with the reference's fp32 operations: bit-identical to the reference for
 * any thread count. */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

#define COL_BLOCK 64
#define COL_VECS (COL_BLOCK / VL8)

/* One full 64-column block: eight unmasked accumulators. */
static void col_sum_block(float *db, const float *dy, int64_t rows, int64_t cols)
{
    __m256 a[COL_VECS];
    for (int k = 0; k < COL_VECS; k++)
        a[k] = _mm256_setzero_ps();
    for (int64_t r = 0; r < rows; r++)
        for (int k = 0; k < COL_VECS; k++)
            a[k] = _mm256_add_ps(a[k], _mm256_loadu_ps(dy + r * cols + k * VL8));
    for (int k = 0; k < COL_VECS; k++)
        _mm256_storeu_ps(db + k * VL8, _mm256_add_ps(_mm256_loadu_ps(db + k * VL8), a[k]));
}

void bias_grad_avx2(float *db, const float *dy, int64_t rows, int64_t cols)
{
    int64_t nblk = (cols + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * COL_BLOCK, n = cols - j0 < COL_BLOCK ? cols - j0 : COL_BLOCK;
        if (n == COL_BLOCK) { /* the common case */
            col_sum_block(db + j0, dy + j0, rows, cols);
            continue;
        }
        for (int64_t k = 0; k < n; k += VL8) {
            __m256i t = tail_mask8(n - k);
            __m256 a = _mm256_setzero_ps();
            for (int64_t r = 0; r < rows; r++)
                a = _mm256_add_ps(a, v8_loadu(dy + r * cols + j0 + k, t));
            v8_storeu(db + j0 + k, t, _mm256_add_ps(v8_loadu(db + j0 + k, t), a));
        }
    }
}

void bias_dropout_add_avx2(float *y, const float *x, const float *bias, const float *residual,
                           const uint8_t *keep_mask, float scale, int64_t rows, int64_t cols)
{
    const __m256 vs = _mm256_set1_ps(scale);
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += VL8) {
            __m256i t = tail_mask8(cols - c);
            int64_t i = r * cols + c;
            __m256 v = v8_loadu(x + i, t);
            if (bias)
                v = _mm256_add_ps(v, v8_loadu(bias + c, t));
            if (keep_mask) /* dropped lanes are +0, as the reference's 0.0f */
                v = _mm256_and_ps(_mm256_mul_ps(v, vs), v8_bytes_nonzero(keep_mask + i, cols - c));
            if (residual)
                v = _mm256_add_ps(v8_loadu(residual + i, t), v);
            v8_storeu(y + i, t, v);
        }
}
