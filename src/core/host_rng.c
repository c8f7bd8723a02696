/* Seeded states of Python's, numpy's and torch's generators (definitions in host_rng.h).
 * Counterparts: CPython Modules/_randommodule.c (init_genrand, init_by_array, random_seed),
 * numpy/random/src/mt19937/mt19937.c (mt19937_seed), ATen core/MT19937RNGEngine.h and
 * CPUGeneratorImpl.cpp (get_state), cuda/CUDAGeneratorImpl.cpp (get_state). */
#include "core/host_rng.h"

#include <string.h>

void mc_mt_init_genrand(uint32_t mt[MC_MT_N], uint32_t seed)
{
    mt[0] = seed;
    for (uint32_t i = 1; i < MC_MT_N; i++)
        mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
}

void mc_mt_init_by_array(uint32_t mt[MC_MT_N], const uint32_t *key, int n)
{
    mc_mt_init_genrand(mt, 19650218u);
    int i = 1, j = 0;
    for (int k = MC_MT_N > n ? MC_MT_N : n; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        if (++i >= MC_MT_N)
            mt[0] = mt[MC_MT_N - 1], i = 1;
        if (++j >= n)
            j = 0;
    }
    for (int k = MC_MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        if (++i >= MC_MT_N)
            mt[0] = mt[MC_MT_N - 1], i = 1;
    }
    mt[0] = 0x80000000u; /* the top bit set: the table is never all zero */
}

void mc_py_random_seed(uint32_t mt[MC_MT_N], uint64_t seed)
{
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    mc_mt_init_by_array(mt, key, key[1] ? 2 : 1);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int k = 0; k < n; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

void mc_torch_cpu_rng_state(uint8_t out[MC_TORCH_CPU_STATE_BYTES], uint64_t seed)
{
    uint32_t mt[MC_MT_N];
    mc_mt_init_genrand(mt, (uint32_t)seed);
    memset(out, 0, MC_TORCH_CPU_STATE_BYTES);
    put_le(out, seed, 8);   /* the_initial_seed */
    put_le(out + 8, 1, 4);  /* left */
    put_le(out + 12, 1, 4); /* seeded */
    /* next (offset 16) stays 0 */
    for (int i = 0; i < MC_MT_N; i++)
        put_le(out + 24 + 8 * i, mt[i], 8);
}

void mc_torch_cuda_rng_state(uint8_t out[MC_TORCH_CUDA_STATE_BYTES], uint64_t seed, int64_t offset)
{
    put_le(out, seed, 8);
    put_le(out + 8, (uint64_t)offset, 8);
}
