/* Dropout keep masks with AVX2: dropout_avx512.c's scheme on 4-lane vectors, the same bits as
 * core/rng.c's mc_rng_dropout_mask. Each 64-bit lane holds one Philox4x32-10 block's counter
 * word (VPMULUDQ gives the 32x32->64 products from the low halves; the high halves carry
 * garbage the output step discards); two vectors make a group of 8 blocks, 32 keep flags. */
#include "backend/cpu/kernels/dropout_split.h"
#include "backend/cpu/kernels/kernels_avx2.h"
#include "megatron.h"

#include <immintrin.h>

#define VEC 4    /* Philox blocks per vector */
#define GROUP 8  /* blocks per group: 32 flags, one 32-byte store */

/* The four words of blocks j .. j + 3 as 16 flags: bit 4 l + w is word w of block j + l. */
static void words_to_bits(uint32_t *bits16, __m256i c0, __m256i c1, __m256i w2, __m256i w3,
                          __m256 p)
{
    /* dwords per 64-bit lane: (w0, w1) of a, (w2, w3) of b */
    __m256i a = _mm256_blend_epi32(c0, _mm256_slli_epi64(c1, 32), 0xAA);
    __m256i b = _mm256_blend_epi32(w2, _mm256_slli_epi64(w3, 32), 0xAA);
    __m256i lo = _mm256_unpacklo_epi64(a, b), hi = _mm256_unpackhi_epi64(a, b); /* 0,2 / 1,3 */
    __m256i x01 = _mm256_permute2x128_si256(lo, hi, 0x20);
    __m256i x23 = _mm256_permute2x128_si256(lo, hi, 0x31);
    const __m256 scale = _mm256_set1_ps(0x1p-24f);
    __m256 u01 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x01, 8)), scale);
    __m256 u23 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x23, 8)), scale);
    uint32_t m01 = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(u01, p, _CMP_GE_OQ));
    uint32_t m23 = (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(u23, p, _CMP_GE_OQ));
    *bits16 = m01 | m23 << 8;
}

/* The 32 flags of blocks j .. j + 7 as a 32-bit mask (bit 4 l + w = word w of block j + l). */
static uint32_t group_mask(const uint32_t k0[10], const uint32_t k1[10], int64_t j,
                           uint32_t c1_hi, uint32_t c2, uint32_t c3, __m256 p)
{
    const __m256i m0 = _mm256_set1_epi64x(0xD2511F53u), m1 = _mm256_set1_epi64x(0xCD9E8D57u);
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    const __m256i hi16 = _mm256_set1_epi64x((int64_t)((uint64_t)c1_hi << 16));
    __m256i c0[2], c1[2], w2[2], w3[2];
    for (int v = 0; v < 2; v++) {
        __m256i jj = _mm256_add_epi64(_mm256_set1_epi64x(j + VEC * v), lane);
        c0[v] = jj;
        c1[v] = _mm256_or_si256(_mm256_srli_epi64(jj, 32), hi16);
        w2[v] = _mm256_set1_epi64x(c2);
        w3[v] = _mm256_set1_epi64x(c3);
    }
    for (int r = 0; r < 10; r++) {
        __m256i key0 = _mm256_set1_epi64x(k0[r]), key1 = _mm256_set1_epi64x(k1[r]);
        for (int v = 0; v < 2; v++) {
            __m256i p0 = _mm256_mul_epu32(c0[v], m0), p1 = _mm256_mul_epu32(w2[v], m1);
            c0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[v]), key0);
            c1[v] = p1;
            w2[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), w3[v]), key1);
            w3[v] = p0;
        }
    }
    uint32_t lo, hi;
    words_to_bits(&lo, c0[0], c1[0], w2[0], w3[0], p);
    words_to_bits(&hi, c0[1], c1[1], w2[1], w3[1], p);
    return lo | hi << 16;
}

/* 32 bytes of 0 / 1 from the bits of m */
static __m256i bits_to_bytes(uint32_t m)
{
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                          2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ull);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)m), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(1));
}

/* Whole groups g0 .. g1 (elements 32 g .. 32 g + 31) into keep, which holds element 32 g0. */
static void groups(uint8_t *keep, int64_t g0, int64_t g1, uint64_t seed, uint32_t c1_hi,
                   uint32_t c2, uint32_t c3, float p)
{
    uint32_t k0[10], k1[10];
    k0[0] = (uint32_t)seed;
    k1[0] = (uint32_t)(seed >> 32);
    for (int r = 1; r < 10; r++) {
        k0[r] = k0[r - 1] + 0x9E3779B9u;
        k1[r] = k1[r - 1] + 0xBB67AE85u;
    }
    __m256 pv = _mm256_set1_ps(p);
    for (int64_t g = g0; g < g1; g++)
        _mm256_storeu_si256((__m256i *)(keep + 32 * (g - g0)),
                            bits_to_bytes(group_mask(k0, k1, g * GROUP, c1_hi, c2, c3, pv)));
}

void dropout_mask_avx2(uint8_t *keep, int64_t first, int64_t n, uint64_t seed, uint32_t c1_hi,
                       uint32_t c2, uint32_t c3, float p)
{
    mc_dropout_mask_split(groups, keep, first, n, seed, c1_hi, c2, c3, p);
}
