/* Vectorized fp32 math for the AVX-512 kernels: exp, sigmoid, tanh, erf, masked loads and
 * horizontal reductions. Included only by *_avx512.c files (built with -mavx512f/bw/vl/dq).
 * No Megatron counterpart: CUDA provides these as device intrinsics (expf, tanhf, erff).
 *
 * Accuracy against libm in double, max over dense grids (tests/unit/backend/test_vec_math.c):
 * exp 1.2 ulp (also for denormal results), tanh 1.3 ulp, erf 2.3 ulp (1.2e-7 absolute),
 * sigmoid 3.1 ulp. NaN propagates; exp(+-inf) = inf / 0. */
#ifndef MC_VEC_AVX512_H
#define MC_VEC_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define VL 16 /* floats per vector */

/* Mask with the low n (0..16) lanes set, for ragged tails. */
static inline __mmask16 tail_mask(int64_t n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}

static inline __m512 v_loadu(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void v_storeu(float *p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }

/* exp(x): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial for e^r
 * (Cephes expf coefficients), scaled by 2^n with VSCALEFPS, which produces exact underflow
 * to 0 (and denormals) and overflow to +inf without special cases. NaN propagates. */
static inline __m512 v_exp(__m512 x)
{
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    const __m512 ln2_hi = _mm512_set1_ps(0.693359375f), ln2_lo = _mm512_set1_ps(-2.12194440e-4f);
    /* operand order matters: min/max return the second operand when one is NaN */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(88.8f), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* 1 / (1 + exp(-x)), with the exp argument clamped so that 1 - sigmoid stays finite. */
static inline __m512 v_sigmoid(__m512 x)
{
    __m512 e = v_exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

/* tanh(x): odd polynomial (Cephes tanhf) for |x| < 0.625 where 1 - 2/(e^2x + 1) would cancel,
 * the exp form elsewhere; saturates to +-1 for |x| > 9. */
static inline __m512 v_tanh(__m512 x)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 ax = _mm512_andnot_ps(sign, x);
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-5.70498872745E-3f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.06390887954E-2f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.37397155531E-2f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.33314422036E-1f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-3.33332819422E-1f));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, x2), x, x);
    __m512 e = v_exp(_mm512_add_ps(ax, ax));
    __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                               _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
    big = _mm512_or_ps(big, _mm512_and_ps(x, sign)); /* restore the sign */
    __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}

/* erf(x): Taylor series for |x| < 0.5 (relative accuracy ~1 ulp, keeps erf(x) ~ 2x/sqrt(pi)
 * exact for tiny x); elsewhere erfc via exp(-x^2) times a rational fit (Numerical Recipes'
 * erfcc Chebyshev form, relative error < 1.2e-7). */
static inline __m512 v_erf(__m512 x)
{
    const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f);
    __m512 ax = _mm512_andnot_ps(sign, x);
    __m512 x2 = _mm512_mul_ps(x, x);
    /* 2/sqrt(pi) * (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320 + x^13/9360) */
    __m512 p = _mm512_set1_ps(1.0f / 9360.0f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 1320.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.0f / 216.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 42.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.0f / 10.0f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.0f / 3.0f));
    __m512 small = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, x2), x, x),
                                 _mm512_set1_ps(1.12837916709551257f));
    /* erfc(z) = t exp(-z^2 - 1.26551223 + t(1.00002368 + t(0.37409196 + ...))), t = 1/(1+z/2) */
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.5f), ax, one));
    __m512 q = _mm512_set1_ps(0.17087277f);
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0.82215223f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.48851587f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.13520398f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.27886807f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-0.18628806f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.09678418f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(0.37409196f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(1.00002368f));
    q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(-1.26551223f));
    __m512 erfc = _mm512_mul_ps(t, v_exp(_mm512_sub_ps(q, _mm512_mul_ps(ax, ax))));
    __m512 big = _mm512_or_ps(_mm512_sub_ps(one, erfc), _mm512_and_ps(x, sign));
    __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.5f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(is_small, big, small);
}

static inline float v_hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
static inline float v_hmax(__m512 v) { return _mm512_reduce_max_ps(v); }

#endif /* MC_VEC_AVX512_H */
