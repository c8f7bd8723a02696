/* AVX-512 vocab-parallel cross-entropy pieces (same contract as cross_entropy_ref.c; the local
 * half of Megatron's _VocabParallelCrossEntropy). Rows (tokens) are independent and split
 * statically across threads. Sums of exps use fp32 vector partials, which for a 50k vocab are
 * within ~1e-6 relative of the reference's double sum. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/vec_avx512.h"

#include <math.h>

void xent_max_avx512(float *max_local, const float *logits, int64_t n, int64_t v)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
        int64_t j = 0;
        for (; j + 2 * VL <= v; j += 2 * VL) {
            m0 = _mm512_max_ps(m0, _mm512_loadu_ps(lr + j));
            m1 = _mm512_max_ps(m1, _mm512_loadu_ps(lr + j + VL));
        }
        for (; j < v; j += VL) {
            __mmask16 t = tail_mask(v - j);
            m0 = _mm512_mask_max_ps(m0, t, m0, v_loadu(lr + j, t));
        }
        max_local[r] = v_hmax(_mm512_max_ps(m0, m1));
    }
}

void xent_sumexp_avx512(float *sumexp_local, float *target_logit, const float *logits,
                        const float *max, const int64_t *target, int64_t n, int64_t v,
                        int64_t v_start)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        const __m512 vm = _mm512_set1_ps(max[r]);
        __m512 s0 = _mm512_setzero_ps(), s1 = s0;
        int64_t j = 0;
        for (; j + 2 * VL <= v; j += 2 * VL) {
            s0 = _mm512_add_ps(s0, v_exp(_mm512_sub_ps(_mm512_loadu_ps(lr + j), vm)));
            s1 = _mm512_add_ps(s1, v_exp(_mm512_sub_ps(_mm512_loadu_ps(lr + j + VL), vm)));
        }
        for (; j < v; j += VL) {
            __mmask16 t = tail_mask(v - j);
            s0 = _mm512_mask_add_ps(s0, t, s0, v_exp(_mm512_sub_ps(v_loadu(lr + j, t), vm)));
        }
        sumexp_local[r] = v_hsum(_mm512_add_ps(s0, s1));
        int64_t tg = target[r] - v_start;
        target_logit[r] = tg >= 0 && tg < v ? lr[tg] - max[r] : 0.0f;
    }
}

void xent_bwd_avx512(float *dlogits, const float *logits, const float *max, const float *sumexp,
                     const int64_t *target, const float *dloss, int64_t n, int64_t v,
                     int64_t v_start)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        float *dr = dlogits + r * v;
        const __m512 vm = _mm512_set1_ps(max[r]);
        const __m512 sc = _mm512_set1_ps((1.0f / sumexp[r]) * dloss[r]);
        int64_t tg = target[r] - v_start;
        for (int64_t j = 0; j < v; j += VL) {
            __mmask16 t = tail_mask(v - j);
            v_storeu(dr + j, t, _mm512_mul_ps(v_exp(_mm512_sub_ps(v_loadu(lr + j, t), vm)), sc));
        }
        if (tg >= 0 && tg < v)
            dr[tg] -= dloss[r];
    }
}
