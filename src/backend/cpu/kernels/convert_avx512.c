/* dtype conversion and accumulation with AVX-512, 16 elements at a time: the rules of
 * convert_avx2.c (the same bits as convert_ref.c) at twice the width. The 16-bit ops of the CPU
 * backend widen and round every operand they stage (half_cpu.h), so on an AVX-512 CPU these
 * passes are a visible share of a bf16 step. bf16 widening is a shift; bf16 rounding adds
 * 0x7fff plus the kept lsb and every NaN becomes 0xffff; fp16 goes through VCVTPH2PS /
 * VCVTPS2PH (IEEE, round to nearest even, subnormals kept), NaNs then replaced by core's
 * sign | 0x7e00. Tails run the scalar reference. tests/unit/backend/test_kernels.c compares
 * every 16-bit pattern and random fp32 patterns bit for bit with convert_ref. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/ref.h"

#include <immintrin.h>
#include <string.h>

static inline __m512 load16(const void *p, enum mc_dtype t, int64_t i)
{
    if (t == MC_DTYPE_F32)
        return _mm512_loadu_ps((const float *)p + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    if (t == MC_DTYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline void store16(void *p, enum mc_dtype t, int64_t i, __m512 x)
{
    if (t == MC_DTYPE_F32) {
        _mm512_storeu_ps((float *)p + i, x);
        return;
    }
    __m512i u = _mm512_castps_si512(x);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m256i h;
    if (t == MC_DTYPE_F16) {
        h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        /* NaN: sign | 0x7e00, as core/dtype.c (F16C keeps part of the payload) */
        __m512i qn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                      _mm512_set1_epi32(0x8000)),
                                     _mm512_set1_epi32(0x7e00));
        h = _mm256_mask_blend_epi16(nan, h, _mm512_cvtepi32_epi16(qn));
    } else {
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
        r = _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16), nan, _mm512_set1_epi32(0xffff));
        h = _mm512_cvtepi32_epi16(r);
    }
    _mm256_storeu_si256((__m256i *)((uint16_t *)p + i), h);
}

static void convert_span(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                         int64_t i0, int64_t i1)
{
    size_t ds = mc_dtype_size(dst_dt), ss = mc_dtype_size(src_dt);
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16)
        store16(dst, dst_dt, i, load16(src, src_dt, i));
    if (i < i1)
        convert_ref((char *)dst + (size_t)i * ds, dst_dt, (const char *)src + (size_t)i * ss,
                    src_dt, i1 - i);
}

void convert_avx512(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
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
    for (; i + 16 <= i1; i += 16) {
        /* a + b, with a's NaN where a is NaN (accumulate_ref's rule) */
        __m512 a = load16(dst, dst_dt, i), b = load16(src, src_dt, i);
        __mmask16 nan_a = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        store16(dst, dst_dt, i, _mm512_mask_add_ps(_mm512_add_ps(a, b), nan_a, a, a));
    }
    if (i < i1)
        accumulate_ref((char *)dst + (size_t)i * ds, dst_dt, (const char *)src + (size_t)i * ss,
                       src_dt, i1 - i);
}

void accumulate_avx512(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                       int64_t n)
{
    if (n > 0)
        convert_split(accumulate_span, dst, dst_dt, src, src_dt, n);
}
