/* Vectorized fp32 math for the AVX2 kernels: exp, sigmoid, erf, tail loads/stores and
 * horizontal reductions, 8 lanes wide. The same formulas as vec_avx512.h (Cephes exp
 * polynomial, Numerical Recipes' erfc form); AVX2 has no VSCALEFPS, so the polynomial is scaled
 * by 2^n in two exponent-field halves (by 2^(n/2), then by 2^(n - n/2)), which keeps underflow
 * to denormals/0 and overflow to +inf right. Included only by *_avx2.c files (built with -mavx2
 * -mfma -mf16c) and tests/unit/backend/test_vec_math_avx2.c (accuracy bounds measured there).
 * No Megatron counterpart: CUDA provides these as device intrinsics (expf, erff). */
#ifndef MC_VEC_AVX2_H
#define MC_VEC_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define VL8 8 /* floats per vector */

/* Lane mask with the low n (0..8) lanes set, for ragged tails (maskload/maskstore). */
static inline __m256i tail_mask8(int64_t n)
{
    int k = n >= 8 ? 8 : (int)n;
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), idx);
}

static inline __m256 v8_loadu(const float *p, __m256i m) { return _mm256_maskload_ps(p, m); }
static inline void v8_storeu(float *p, __m256i m, __m256 v) { _mm256_maskstore_ps(p, m, v); }

/* p * 2^n for integral n in [-150, 128]: p times 2^(n/2), then times 2^(n - n/2), each an exact
 * power in the exponent field. Scaling p twice (not p times the product of the powers, which is
 * inf for n = 128) rounds once, at the second multiply, so overflow and denormal results are
 * right. */
static inline __m256 v8_ldexp(__m256 p, __m256 n)
{
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h = _mm256_srai_epi32(ni, 1), l = _mm256_sub_epi32(ni, h);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
    __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(l, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, a), b);
}

/* exp(x): x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial for e^r, times 2^n. NaN propagates. */
static inline __m256 v8_exp(__m256 x)
{
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    /* operand order matters: min/max return the second operand when one is NaN */
    x = _mm256_max_ps(_mm256_set1_ps(-104.0f), _mm256_min_ps(_mm256_set1_ps(88.8f), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* NaN: n converts to INT_MIN; keep the NaN from p (p is NaN there) */
    return v8_ldexp(p, n);
}

/* 1 / (1 + exp(-x)) */
static inline __m256 v8_sigmoid(__m256 x)
{
    __m256 e = v8_exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* erf(x): Taylor series for |x| < 0.5, elsewhere 1 - erfc with erfc from exp(-x^2) times the
 * Numerical Recipes erfcc rational fit (relative error < 1.2e-7), as vec_avx512.h. */
static inline __m256 v8_erf(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(1.0f / 9360.0f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 1320.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.0f / 216.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 42.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.0f / 10.0f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.0f / 3.0f));
    __m256 small = _mm256_mul_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x),
                                 _mm256_set1_ps(1.12837916709551257f));
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), ax, one));
    __m256 q = _mm256_set1_ps(0.17087277f);
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-0.82215223f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(1.48851587f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-1.13520398f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0.27886807f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-0.18628806f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0.09678418f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(0.37409196f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(1.00002368f));
    q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(-1.26551223f));
    __m256 erfc = _mm256_mul_ps(t, v8_exp(_mm256_sub_ps(q, _mm256_mul_ps(ax, ax))));
    __m256 big = _mm256_or_ps(_mm256_sub_ps(one, erfc), _mm256_and_ps(x, sign));
    __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ);
    return _mm256_blendv_ps(big, small, is_small);
}

/* Horizontal sum and max in a fixed order (halves, then pairs, then lanes): the same bits on
 * every call, so row reductions do not depend on the thread count. */
static inline float v8_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float v8_hmax(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* All-ones lanes where the byte p[k] (k < min(n, 8)) is nonzero, zero lanes elsewhere: the
 * uint8 keep/attention masks as a float lane mask (AVX2 has no masked byte load). */
static inline __m256 v8_bytes_nonzero(const uint8_t *p, int64_t n)
{
    uint64_t b = 0;
    if (n >= 8)
        memcpy(&b, p, 8);
    else
        memcpy(&b, p, (size_t)n);
    __m256i w = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)b));
    __m256i zero = _mm256_cmpeq_epi32(w, _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_xor_si256(zero, _mm256_set1_epi32(-1)));
}

static inline __m256 v8_mask_ps(__m256i m) { return _mm256_castsi256_ps(m); }

#endif /* MC_VEC_AVX2_H */
