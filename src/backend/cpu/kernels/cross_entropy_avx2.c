/* AVX2 + FMA vocab-parallel cross-entropy pieces: 8-wide ports of cross_entropy_avx512.c (same
 * contract as cross_entropy_ref.c; the local half of Megatron's _VocabParallelCrossEntropy).
 * Rows (tokens) are independent and split statically across threads. The max is exact; sums of
 * exps use fp32 vector partials, which for a 50k vocab are within ~1e-6 relative of the
 * reference's double sum. */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

#include <math.h>

void xent_max_avx2(float *max_local, const float *logits, int64_t n, int64_t v)
{
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        __m256 m0 = ninf, m1 = ninf;
        int64_t j = 0;
        for (; j + 2 * VL8 <= v; j += 2 * VL8) {
            m0 = _mm256_max_ps(m0, _mm256_loadu_ps(lr + j));
            m1 = _mm256_max_ps(m1, _mm256_loadu_ps(lr + j + VL8));
        }
        for (; j < v; j += VL8) { /* lanes past the row are -inf */
            __m256i t = tail_mask8(v - j);
            m0 = _mm256_max_ps(m0, _mm256_blendv_ps(ninf, v8_loadu(lr + j, t), v8_mask_ps(t)));
        }
        max_local[r] = v8_hmax(_mm256_max_ps(m0, m1));
    }
}

void xent_sumexp_avx2(float *sumexp_local, float *target_logit, const float *logits,
                      const float *max, const int64_t *target, int64_t n, int64_t v,
                      int64_t v_start)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        const __m256 vm = _mm256_set1_ps(max[r]);
        __m256 s0 = _mm256_setzero_ps(), s1 = s0;
        int64_t j = 0;
        for (; j + 2 * VL8 <= v; j += 2 * VL8) {
            s0 = _mm256_add_ps(s0, v8_exp(_mm256_sub_ps(_mm256_loadu_ps(lr + j), vm)));
            s1 = _mm256_add_ps(s1, v8_exp(_mm256_sub_ps(_mm256_loadu_ps(lr + j + VL8), vm)));
        }
        for (; j < v; j += VL8) {
            __m256i t = tail_mask8(v - j);
            __m256 e = v8_exp(_mm256_sub_ps(v8_loadu(lr + j, t), vm));
            s0 = _mm256_add_ps(s0, _mm256_and_ps(e, v8_mask_ps(t)));
        }
        sumexp_local[r] = v8_hsum(_mm256_add_ps(s0, s1));
        int64_t tg = target[r] - v_start;
        target_logit[r] = tg >= 0 && tg < v ? lr[tg] - max[r] : 0.0f;
    }
}

void xent_bwd_avx2(float *dlogits, const float *logits, const float *max, const float *sumexp,
                   const int64_t *target, const float *dloss, int64_t n, int64_t v,
                   int64_t v_start)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        float *dr = dlogits + r * v;
        const __m256 vm = _mm256_set1_ps(max[r]);
        const __m256 sc = _mm256_set1_ps((1.0f / sumexp[r]) * dloss[r]);
        int64_t tg = target[r] - v_start;
        for (int64_t j = 0; j < v; j += VL8) {
            __m256i t = tail_mask8(v - j);
            v8_storeu(dr + j, t, _mm256_mul_ps(v8_exp(_mm256_sub_ps(v8_loadu(lr + j, t), vm)), sc));
        }
        if (tg >= 0 && tg < v)
            dr[tg] -= dloss[r];
    }
}
