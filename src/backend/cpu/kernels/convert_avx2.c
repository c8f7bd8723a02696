/* dtype conversion and accumulation with AVX2 + F16C, 8 elements at a time, the same bits as
 * convert_ref.c (core/dtype.c): bf16 widening is a shift; bf16 rounding adds 0x7fff plus the
 * kept lsb and every NaN becomes 0xffff; fp16 goes through VCVTPH2PS / VCVTPS2PH (IEEE, round
 * to nearest even, subnormals kept), with NaNs then replaced by core's sign | 0x7e00. Tails
 * run the scalar reference. tests/unit/backend/test_kernels.c compares every 16-bit pattern
 * and random fp32 patterns bit for bit with convert_ref. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/ref.h"

#include <immintrin.h>
#include <string.h>

static inline __m256 load8(const void *p, enum mc_dtype t, int64_t i)
{
    if (t == MC_DTYPE_F32)
        return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (t == MC_DTYPE_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline void store8(void *p, enum mc_dtype t, int64_t i, __m256 x)
{
    if (t == MC_DTYPE_F32) {
        _mm256_storeu_ps((float *)p + i, x);
        return;
    }
    __m256i u = _mm256_castps_si256(x);
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    __m128i h;
    if (t == MC_DTYPE_F16) {
        h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        /* NaN: sign | 0x7e00, as core/dtype.c (F16C keeps part of the payload) */
        __m256i qn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16),
                                                      _mm256_set1_epi32(0x8000)),
                                     _mm256_set1_epi32(0x7e00));
        __m128i qn16 = _mm_packus_epi32(_mm256_castsi256_si128(qn), _mm256_extracti128_si256(qn, 1));
        __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
        h = _mm_blendv_epi8(h, qn16, m16);
    } else {
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
        r = _mm256_srli_epi32(r, 16);
        r = _mm256_or_si256(r, _mm256_and_si256(nan, _mm256_set1_epi32(0xffff)));
        h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    }
    _mm_storeu_si128((__m128i *)((uint16_t *)p + i), h);
}

static void convert_span(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                         int64_t i0, int64_t i1)
{
    size_t ds = mc_dtype_size(dst_dt), ss = mc_dtype_size(src_dt);
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8)
        store8(dst, dst_dt, i, load8(src, src_dt, i));
    if (i < i1)
        convert_ref((char *)dst + (size_t)i * ds, dst_dt, (const char *)src + (size_t)i * ss,
                    src_dt, i1 - i);
}

void convert_avx2(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                  int64_t n)
{
    if (n <= 0)
        return;
    if (dst_dt == src_dt) {
        memmove(dst, src, (size_t)n * mc_dtype_size(dst_dt));
        return;
    }
    convert_split(convert_span, dst, dst_dt, src, src_dt, n);
}

static void accumulate_span(void *dst, enum mc_dtype dst_dt, const void *src,
                            enum mc_dtype src_dt, int64_t i0, int64_t i1)
{
    size_t ds = mc_dtype_size(dst_dt), ss = mc_dtype_size(src_dt);
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) {
        /* a + b, with a's NaN where a is NaN (accumulate_ref's rule: the operand order of a
         * commutative add, and so the NaN payload, is otherwise the compiler's) */
        __m256 a = load8(dst, dst_dt, i), b = load8(src, src_dt, i);
        __m256 nan_a = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
        store8(dst, dst_dt, i, _mm256_blendv_ps(_mm256_add_ps(a, b), _mm256_add_ps(a, a), nan_a));
    }
    if (i < i1)
        accumulate_ref((char *)dst + (size_t)i * ds, dst_dt, (const char *)src + (size_t)i * ss,
                       src_dt, i1 - i);
}

void accumulate_avx2(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                     int64_t n)
{
    if (n > 0)
        convert_split(accumulate_span, dst, dst_dt, src, src_dt, n);
}
