/* Dropout keep masks with AVX-512: the same bits as core/rng.c's mc_rng_dropout_mask (the
 * definition, in core/rng.h), eight Philox4x32-10 blocks per vector. Each 64-bit lane holds one
 * block's counter word; VPMULUDQ gives the full 32x32->64 products Philox needs. Only the low
 * 32 bits of a lane are ever meaningful: the high halves pick up garbage through the XORs, but
 * VPMULUDQ reads only the low halves, and the output step discards them.
 *
 * The scalar definition costs about 10 ns per element on Zen 4; attention dropout draws one
 * element per (query, key) pair in every forward, recomputed forward and backward, which made
 * it the largest item of a long-context step. */
#include "backend/cpu/kernels/dropout_split.h"
#include "backend/cpu/kernels/kernels_avx512.h"
#include "megatron.h"

#include <immintrin.h>

#define GROUP 8 /* Philox blocks per vector: 32 keep flags */

struct keys {
    __m512i k0[10], k1[10];
};

static void keys_init(struct keys *k, uint64_t seed)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        k->k0[r] = _mm512_set1_epi64(k0);
        k->k1[r] = _mm512_set1_epi64(k1);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* The keep flags of blocks j .. j + 8 * LANES - 1 as LANES masks: bit 4 * l + w of mask v is
 * word w of block j + 8 * v + l. LANES independent vectors hide VPMULUDQ's latency. */
#define LANES 2
static void group_masks(uint32_t out[LANES], const struct keys *k, int64_t j, uint32_t c1_hi,
                        uint32_t c2, uint32_t c3, __m512 p)
{
    const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
    const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i hi16 = _mm512_set1_epi64((uint64_t)c1_hi << 16);
    __m512i c0[LANES], c1[LANES], w2[LANES], w3[LANES];
    for (int v = 0; v < LANES; v++) {
        __m512i jj = _mm512_add_epi64(_mm512_set1_epi64(j + GROUP * v), lane);
        c0[v] = jj; /* low half: j & 0xffffffff */
        c1[v] = _mm512_or_si512(_mm512_srli_epi64(jj, 32), hi16);
        w2[v] = _mm512_set1_epi64(c2);
        w3[v] = _mm512_set1_epi64(c3);
    }
    for (int r = 0; r < 10; r++)
        for (int v = 0; v < LANES; v++) {
            __m512i p0 = _mm512_mul_epu32(c0[v], m0), p1 = _mm512_mul_epu32(w2[v], m1);
            c0[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[v], k->k0[r], 0x96);
            c1[v] = p1;
            w2[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), w3[v], k->k1[r], 0x96);
            w3[v] = p0;
        }
    /* dwords (l, w) in element order: blocks 0-3 from lo, blocks 4-7 from hi */
    const __m512i lo = _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
    const __m512i hi = _mm512_setr_epi32(8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15,
                                         30, 31);
    const __m512 scale = _mm512_set1_ps(0x1p-24f);
    for (int v = 0; v < LANES; v++) {
        __m512i a = _mm512_mask_blend_epi32(0xAAAA, c0[v], _mm512_slli_epi64(c1[v], 32));
        __m512i b = _mm512_mask_blend_epi32(0xAAAA, w2[v], _mm512_slli_epi64(w3[v], 32));
        __m512 u0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(
                                      _mm512_permutex2var_epi32(a, lo, b), 8)), scale);
        __m512 u1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(
                                      _mm512_permutex2var_epi32(a, hi, b), 8)), scale);
        uint32_t first = _mm512_cmp_ps_mask(u0, p, _CMP_GE_OQ);
        uint32_t second = _mm512_cmp_ps_mask(u1, p, _CMP_GE_OQ);
        out[v] = first | second << 16;
    }
}

/* Whole groups g0 .. g1 (elements 32 g .. 32 g + 31) into keep, which holds element 32 g0. */
static void groups(uint8_t *keep, int64_t g0, int64_t g1, uint64_t seed, uint32_t c1_hi,
                   uint32_t c2, uint32_t c3, float p)
{
    struct keys k;
    keys_init(&k, seed);
    __m512 pv = _mm512_set1_ps(p);
    const __m256i one = _mm256_set1_epi8(1);
    uint32_t m[LANES];
    for (int64_t g = g0; g < g1; g += LANES) {
        group_masks(m, &k, g * GROUP, c1_hi, c2, c3, pv);
        for (int v = 0; v < LANES && g + v < g1; v++)
            _mm256_storeu_si256((__m256i *)(keep + 32 * (g + v - g0)),
                                _mm256_maskz_mov_epi8(m[v], one));
    }
}

void dropout_mask_avx512(uint8_t *keep, int64_t first, int64_t n, uint64_t seed, uint32_t c1_hi,
                         uint32_t c2, uint32_t c3, float p)
{
    mc_dropout_mask_split(groups, keep, first, n, seed, c1_hi, c2, c3, p);
}
