/* AVX-512 masked softmax for core attention, forward and backward (same contract as
 * softmax_ref.c; mirrors the math of Megatron's FusedScaleMaskSoftmax: scale, masked_fill with
 * -10000, softmax along keys). One row per iteration, rows split statically across threads, so
 * results do not depend on the thread count.
 *
 * Causal rows skip the masked tail: its entries are exp(-10000 - max), which is exactly 0 in
 * fp32 unless every visible score is itself below about -9900; that corner falls back to the
 * general path, so the result is the same as filling the tail. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/vec_avx512.h"

#include <math.h>

/* Row max of where(mask, -10000, v * mult) written back into the row; returns the max. */
static float fill_and_max(float *pr, const uint8_t *mrow, int64_t causal_i, int64_t sk, float mult)
{
    const __m512 vm = _mm512_set1_ps(mult), fill = _mm512_set1_ps(-10000.0f);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < sk; j += VL) {
        __mmask16 t = tail_mask(sk - j);
        __m512 v = _mm512_mul_ps(v_loadu(pr + j, t), vm);
        __mmask16 masked;
        if (mrow) {
            __m128i mb = _mm_maskz_loadu_epi8(t, mrow + j);
            masked = _mm_test_epi8_mask(mb, mb);
        } else { /* causal: key index j + lane > i */
            __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)j),
                                           _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
            masked = _mm512_cmpgt_epi32_mask(idx, _mm512_set1_epi32((int)causal_i));
        }
        v = _mm512_mask_mov_ps(v, masked, fill);
        v_storeu(pr + j, t, v);
        mx = _mm512_mask_max_ps(mx, t, mx, v);
    }
    return v_hmax(mx);
}

/* pr[j] = exp(pr[j] - mx) for j < n; returns the sum (lane partials, then a fixed reduction). */
static float exp_sum(float *pr, int64_t n, float mx)
{
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * VL <= n; j += 2 * VL) {
        __m512 e0 = v_exp(_mm512_sub_ps(_mm512_loadu_ps(pr + j), vmx));
        __m512 e1 = v_exp(_mm512_sub_ps(_mm512_loadu_ps(pr + j + VL), vmx));
        _mm512_storeu_ps(pr + j, e0);
        _mm512_storeu_ps(pr + j + VL, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; j < n; j += VL) {
        __mmask16 t = tail_mask(n - j);
        __m512 e = v_exp(_mm512_sub_ps(v_loadu(pr + j, t), vmx));
        v_storeu(pr + j, t, e);
        s0 = _mm512_mask_add_ps(s0, t, s0, e);
    }
    return v_hsum(_mm512_add_ps(s0, s1));
}

static void scale_row(float *pr, int64_t n, float s)
{
    const __m512 vs = _mm512_set1_ps(s);
    for (int64_t j = 0; j < n; j += VL) {
        __mmask16 t = tail_mask(n - j);
        v_storeu(pr + j, t, _mm512_mul_ps(v_loadu(pr + j, t), vs));
    }
}

static void zero_row(float *pr, int64_t n)
{
    for (int64_t j = 0; j < n; j += VL)
        v_storeu(pr + j, tail_mask(n - j), _mm512_setzero_ps());
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

void masked_softmax_fwd_avx512(float *p, int64_t bh, int64_t sq, int64_t sk, float mult,
                               const uint8_t *mask)
{
    int64_t rows = bh * sq;
#pragma omp parallel for schedule(static) if (rows * sk > 16384)
    for (int64_t r = 0; r < rows; r++)
        softmax_row(p + r * sk, r % sq, sk, mult, mask);
}

void masked_softmax_bwd_avx512(float *dp, const float *p, int64_t bh, int64_t sq, int64_t sk,
                               float mult)
{
    int64_t rows = bh * sq;
    const __m512 vm = _mm512_set1_ps(mult);
#pragma omp parallel for schedule(static) if (rows * sk > 16384)
    for (int64_t r = 0; r < rows; r++) {
        float *dr = dp + r * sk;
        const float *pr = p + r * sk;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < sk; j += VL) {
            __mmask16 t = tail_mask(sk - j);
            acc = _mm512_fmadd_ps(v_loadu(dr + j, t), v_loadu(pr + j, t), acc);
        }
        __m512 d = _mm512_set1_ps(v_hsum(acc));
        for (int64_t j = 0; j < sk; j += VL) {
            __mmask16 t = tail_mask(sk - j);
            __m512 g = _mm512_mul_ps(v_loadu(pr + j, t), _mm512_sub_ps(v_loadu(dr + j, t), d));
            v_storeu(dr + j, t, _mm512_mul_ps(vm, g));
        }
    }
}
