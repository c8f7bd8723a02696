/* CRC-32 of zip (reflected polynomial 0xedb88320) by carry-less multiplication (x86 PCLMULQDQ):
 * the data are folded 64 bytes at a time into four 128-bit remainders, those into one, then a
 * Barrett reduction gives the 32-bit CRC (the method of Intel's white paper "Fast CRC Computation
 * for Generic Polynomials Using PCLMULQDQ", 2009). zlib's crc32 has no counterpart here; torch's
 * miniz computes the same CRC by tables. The folding constants are x^k mod P for the fold
 * distances, bit-reflected; tests/unit/checkpointing/test_crc32.c checks the result against the
 * table-driven CRC. Only torch_zip.c calls this, after checking the CPU (mc_crc32_clmul_usable). */
#include "checkpointing/torch_zip.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

bool mc_crc32_clmul_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

/* One fold: the 128-bit remainder x moved 128 * k bits further (k picked by the constants) and
 * added to the next 16 bytes y. */
CLMUL_TARGET static inline __m128i fold(__m128i x, __m128i k, __m128i y)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), y);
}

/* crc is the running register (not inverted here); n >= 64 and a multiple of 16. */
CLMUL_TARGET uint32_t mc_crc32_clmul(uint32_t crc, const uint8_t *p, size_t n)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL); /* 512-bit fold */
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL); /* 128-bit fold */
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124LL);                /* 96 to 64 bits */
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL); /* P(x), Barrett mu */
    const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)p + 1);
    __m128i x3 = _mm_loadu_si128((const __m128i *)p + 2), x4 = _mm_loadu_si128((const __m128i *)p + 3);
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        x1 = fold(x1, k1k2, _mm_loadu_si128((const __m128i *)p));
        x2 = fold(x2, k1k2, _mm_loadu_si128((const __m128i *)p + 1));
        x3 = fold(x3, k1k2, _mm_loadu_si128((const __m128i *)p + 2));
        x4 = fold(x4, k1k2, _mm_loadu_si128((const __m128i *)p + 3));
    }
    x1 = fold(x1, k3k4, x2);
    x1 = fold(x1, k3k4, x3);
    x1 = fold(x1, k3k4, x4);
    for (; n >= 16; p += 16, n -= 16)
        x1 = fold(x1, k3k4, _mm_loadu_si128((const __m128i *)p));
    /* 128 -> 64 bits, then 64 -> 32 by Barrett reduction. */
    __m128i x2b = _mm_clmulepi64_si128(x1, k3k4, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2b);
    x2b = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), x2b);
    x2b = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
    x2b = _mm_clmulepi64_si128(_mm_and_si128(x2b, mask32), poly, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x2b), 1);
}

#else

bool mc_crc32_clmul_usable(void) { return false; }

uint32_t mc_crc32_clmul(uint32_t crc, const uint8_t *p, size_t n)
{
    (void)p;
    (void)n;
    MC_ASSERT(!"mc_crc32_clmul called where mc_crc32_clmul_usable() is false");
    return crc;
}

#endif
