/* Counter-based random numbers for dropout masks and weight initialization: the role of
 * Megatron's tensor_parallel/random.py (CUDA RNG tracker) and torch's CPU generator, but
 * stateless, so a value depends only on (seed, counter) and never on rank, thread count or the
 * order in which it is drawn. Private header; the exact definitions below are a contract that
 * the PyTorch twin (tests/reference) reproduces bit for bit.
 *
 * Philox4x32-10 (Salmon et al., SC'11; the Random123 / cuRAND generator):
 *   key  = (k0, k1) = (seed & 0xffffffff, seed >> 32)
 *   ctr  = (c0, c1, c2, c3)
 *   round: (hi0, lo0) = 0xD2511F53 * c0 (64-bit product),  (hi1, lo1) = 0xCD9E8D57 * c2
 *          ctr = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
 *   10 rounds; after each of the first 9 the key is bumped k0 += 0x9E3779B9, k1 += 0xBB67AE85
 *   (mod 2^32). Output: the four words of ctr after round 10.
 *   Known answer: key 0, ctr 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
 *
 * Element i of a draw uses block j = i / 4 (j < 2^48) and word w = i % 4 of
 *   philox(key(seed), ctr = (j & 0xffffffff, (j >> 32) | (c1_hi << 16), c2, c3)),
 * with c1_hi = 0 for the normal draws.
 *
 * Dropout (mc_rng_dropout_mask): u = (word >> 8) * 2^-24 (exact in fp32, in [0, 1));
 *   keep iff u >= p (fp32 compare); kept values are scaled by 1 / (1 - p).
 * Normal (mc_rng_normal_fill): block j gives 4 elements from two Box-Muller pairs,
 *   (word0, word1) -> elements 4j, 4j+1 and (word2, word3) -> 4j+2, 4j+3:
 *   u1 = ((a >> 8) + 1) * 2^-24 in (0, 1], u2 = (b >> 8) * 2^-24,
 *   r = sqrt(-2 ln u1) (double), z0 = r cos(2 pi u2), z1 = r sin(2 pi u2),
 *   value = (float)(std * z) computed in double.
 *
 * How the GPT model chooses (c2, c3) is documented in src/models/gpt/gpt_model.c. */
#ifndef MC_CORE_RNG_H
#define MC_CORE_RNG_H

#include <stdint.h>

/* One Philox4x32-10 block. */
void mc_rng_philox(uint32_t out[4], const uint32_t ctr[4], uint64_t seed);

/* keep[k] = keep decision of element first + k, for k in [0, n). c1_hi < 2^16. */
void mc_rng_dropout_mask(uint8_t *keep, int64_t first, int64_t n, uint64_t seed, uint32_t c1_hi,
                         uint32_t c2, uint32_t c3, float p);

/* out[k] = normal(0, std) sample of element first + k, for k in [0, n). */
void mc_rng_normal_fill(float *out, int64_t first, int64_t n, uint64_t seed, uint32_t c2,
                        uint32_t c3, float std);

#endif /* MC_CORE_RNG_H */
