/* Philox4x32-10 counter-based generator, dropout keep masks and Box-Muller normals (the exact
 * definitions are in rng.h). Counterpart of the CUDA Philox generator behind Megatron's
 * dropout (tensor_parallel/random.py) and torch's normal_ for CPU initialization. */
#include "core/rng.h"
#include "megatron.h"

#include <math.h>

void mc_rng_philox(uint32_t out[4], const uint32_t ctr[4], uint64_t seed)
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static void block(uint32_t out[4], int64_t j, uint64_t seed, uint32_t c1_hi, uint32_t c2,
                  uint32_t c3)
{
    uint32_t ctr[4] = {(uint32_t)((uint64_t)j & 0xffffffffu),
                       (uint32_t)((uint64_t)j >> 32) | (c1_hi << 16), c2, c3};
    mc_rng_philox(out, ctr, seed);
}

void mc_rng_dropout_mask(uint8_t *keep, int64_t first, int64_t n, uint64_t seed, uint32_t c1_hi,
                         uint32_t c2, uint32_t c3, float p)
{
    int64_t j0 = first / 4, j1 = (first + n + 3) / 4;
    MC_ASSERT(c1_hi < (1u << 16) && (uint64_t)j1 < ((uint64_t)1 << 48));
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t j = j0; j < j1; j++) {
        uint32_t w[4];
        block(w, j, seed, c1_hi, c2, c3);
        for (int k = 0; k < 4; k++) {
            int64_t i = 4 * j + k - first;
            if (i < 0 || i >= n)
                continue;
            float u = (float)(w[k] >> 8) * 0x1p-24f;
            keep[i] = u >= p;
        }
    }
}

void mc_rng_normal_fill(float *out, int64_t first, int64_t n, uint64_t seed, uint32_t c2,
                        uint32_t c3, float std)
{
    const double two_pi = 6.283185307179586476925286766559;
    int64_t j0 = first / 4, j1 = (first + n + 3) / 4;
    MC_ASSERT((uint64_t)j1 < ((uint64_t)1 << 48));
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t j = j0; j < j1; j++) {
        uint32_t w[4];
        block(w, j, seed, 0, c2, c3);
        double z[4];
        for (int k = 0; k < 4; k += 2) {
            double u1 = ((double)(w[k] >> 8) + 1.0) * 0x1p-24;
            double u2 = (double)(w[k + 1] >> 8) * 0x1p-24;
            double r = sqrt(-2.0 * log(u1));
            z[k] = r * cos(two_pi * u2);
            z[k + 1] = r * sin(two_pi * u2);
        }
        for (int k = 0; k < 4; k++) {
            int64_t i = 4 * j + k - first;
            if (i >= 0 && i < n)
                out[i] = (float)((double)std * z[k]);
        }
    }
}
