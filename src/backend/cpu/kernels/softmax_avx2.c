/* AVX2 + FMA masked softmax for core attention, forward and backward: an 8-wide port of
 * softmax_avx512.c (same contract as softmax_ref.c; mirrors the math of Megatron's
 * FusedScaleMaskSoftmax: scale, masked_fill with -10000, softmax along keys). One row per
 * iteration, rows split statically across threads, so results do not depend on the thread count.
 *
 * Causal rows skip the masked tail: its entries are exp(-10000 - max), which is exactly 0 in
 * fp32 unless every visible score is itself below about -9900; that corner falls back to the
 * general path, so the result is the same as filling the tail. */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

#include <math.h>

/* Row max of where(mask, -10000, v * mult) written back into the row; returns the max. */
static float fill_and_max(float *pr, const uint8_t *mrow, int64_t causal_i, int64_t sk, float mult)
{
    const __m256 vm = _mm256_set1_ps(mult), fill = _mm256_set1_ps(-10000.0f);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 mx = ninf;
    for (int64_t j = 0; j < sk; j += VL8) {
        __m256i t = tail_mask8(sk - j);
        __m256 v = _mm256_mul_ps(v8_loadu(pr + j, t), vm);
        __m256 masked;
        if (mrow) {
            masked = v8_bytes_nonzero(mrow + j, sk - j);
        } else { /* causal: key index j + lane > i */
            __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)j), lane);
            masked = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32((int)causal_i)));
        }
        v = _mm256_blendv_ps(v, fill, masked);
        v8_storeu(pr + j, t, v);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, v, v8_mask_ps(t)));
    }
    return v8_hmax(mx);
}

/* pr[j] = exp(pr[j] - mx) for j < n; returns the sum (lane partials, then a fixed reduction). */
static float exp_sum(float *pr, int64_t n, float mx)
{
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * VL8 <= n; j += 2 * VL8) {
        __m256 e0 = v8_exp(_mm256_sub_ps(_mm256_loadu_ps(pr + j), vmx));
        __m256 e1 = v8_exp(_mm256_sub_ps(_mm256_loadu_ps(pr + j + VL8), vmx));
        _mm256_storeu_ps(pr + j, e0);
        _mm256_storeu_ps(pr + j + VL8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; j < n; j += VL8) {
        __m256i t = tail_mask8(n - j);
        __m256 e = v8_exp(_mm256_sub_ps(v8_loadu(pr + j, t), vmx));
        v8_storeu(pr + j, t, e);
        s0 = _mm256_add_ps(s0, _mm256_and_ps(e, v8_mask_ps(t)));
    }
    return v8_hsum(_mm256_add_ps(s0, s1));
}

static void scale_row(float *pr, int64_t n, float s)
{
    const __m256 vs = _mm256_set1_ps(s);
    for (int64_t j = 0; j < n; j += VL8) {
        __m256i t = tail_mask8(n - j);
        v8_storeu(pr + j, t, _mm256_mul_ps(v8_loadu(pr + j, t), vs));
    }
}

static void zero_row(float *pr, int64_t n)
{
    for (int64_t j = 0; j < n; j += VL8)
        v8_storeu(pr + j, tail_mask8(n - j), _mm256_setzero_ps());
}

static void softmax_row(float *pr, int64_t i, int64_t sk, float mult, const uint8_t *mask)
{
    if (!mask && i + 1 < sk) {
        /* causal: the visible prefix is [0, i]; the tail is the fill value */
        int64_t vis = i + 1;
        float mx = fill_and_max(pr, NULL, i, vis, mult);
        mx = mx > -10000.0f ? mx : -10000.0f;
        float tail = expf(-10000.0f - mx);
        if (tail == 0.0f) {
            float sum = exp_sum(pr, vis, mx);
            scale_row(pr, vis, 1.0f / sum);
            zero_row(pr + vis, sk - vis);
            return;
        }
    }
    float mx = fill_and_max(pr, mask ? mask + i * sk : NULL, i, sk, mult);
    float sum = exp_sum(pr, sk, mx);
    scale_row(pr, sk, 1.0f / sum);
}

void masked_softmax_fwd_avx2(float *p, int64_t bh, int64_t sq, int64_t sk, float mult,
                             const uint8_t *mask)
{
    int64_t rows = bh * sq;
#pragma omp parallel for schedule(static) if (rows * sk > 16384)
    for (int64_t r = 0; r < rows; r++)
        softmax_row(p + r * sk, r % sq, sk, mult, mask);
}

void masked_softmax_bwd_avx2(float *dp, const float *p, int64_t bh, int64_t sq, int64_t sk,
                             float mult)
{
    int64_t rows = bh * sq;
    const __m256 vm = _mm256_set1_ps(mult);
#pragma omp parallel for schedule(static) if (rows * sk > 16384)
    for (int64_t r = 0; r < rows; r++) {
        float *dr = dp + r * sk;
        const float *pr = p + r * sk;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < sk; j += VL8) {
            __m256i t = tail_mask8(sk - j);
            acc = _mm256_fmadd_ps(v8_loadu(dr + j, t), v8_loadu(pr + j, t), acc);
        }
        __m256 d = _mm256_set1_ps(v8_hsum(acc));
        for (int64_t j = 0; j < sk; j += VL8) {
            __m256i t = tail_mask8(sk - j);
            __m256 g = _mm256_mul_ps(v8_loadu(pr + j, t), _mm256_sub_ps(v8_loadu(dr + j, t), d));
            v8_storeu(dr + j, t, _mm256_mul_ps(vm, g));
        }
    }
}
