/* numpy's legacy RandomState (MT19937) as Megatron's GPTDataset uses it: RandomState(seed),
 * shuffle() of 1-D arrays, permutation(n) and randint(low, high). Counterpart of numpy 1.24
 * numpy/random/mtrand.pyx + src/legacy/legacy-distributions.c + src/mt19937/mt19937.c, which
 * Megatron calls from megatron/core/datasets/gpt_dataset.py (_build_document_index,
 * _build_shuffle_index). Bit-exact reproduction is the whole point: the document and shuffle
 * indices, hence the sample order, depend on every draw. */
#include "megatron/gpt_dataset.h"

#include <string.h>

#define MT_N 624
#define MT_M 397
#define MT_MATRIX_A 0x9908b0dfU
#define MT_UPPER 0x80000000U
#define MT_LOWER 0x7fffffffU

/* numpy's legacy integer seeding is init_genrand (Knuth's multiplier), not init_by_array. */
mc_status mc_np_rng_seed(struct mc_np_rng *r, int64_t seed)
{
    if (seed < 0 || seed > (int64_t)UINT32_MAX)
        return mc_error(MC_ERR_CONFIG, "numpy RandomState seed %lld is outside [0, 2^32 - 1] "
                        "(numpy raises ValueError for it; check --seed)", (long long)seed);
    r->key[0] = (uint32_t)seed;
    for (int i = 1; i < MT_N; i++)
        r->key[i] = 1812433253U * (r->key[i - 1] ^ (r->key[i - 1] >> 30)) + (uint32_t)i;
    r->pos = MT_N;
    return MC_OK;
}

static void mt_generate(struct mc_np_rng *r)
{
    uint32_t *k = r->key;
    int i;
    for (i = 0; i < MT_N - MT_M; i++) {
        uint32_t y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
        k[i] = k[i + MT_M] ^ (y >> 1) ^ (-(y & 1U) & MT_MATRIX_A);
    }
    for (; i < MT_N - 1; i++) {
        uint32_t y = (k[i] & MT_UPPER) | (k[i + 1] & MT_LOWER);
        k[i] = k[i + (MT_M - MT_N)] ^ (y >> 1) ^ (-(y & 1U) & MT_MATRIX_A);
    }
    uint32_t y = (k[MT_N - 1] & MT_UPPER) | (k[0] & MT_LOWER);
    k[MT_N - 1] = k[MT_M - 1] ^ (y >> 1) ^ (-(y & 1U) & MT_MATRIX_A);
    r->pos = 0;
}

uint32_t mc_np_rng_next32(struct mc_np_rng *r)
{
    if (r->pos >= MT_N)
        mt_generate(r);
    uint32_t y = r->key[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    return y;
}

/* numpy's mt19937_next64: the first 32-bit draw is the high half. */
uint64_t mc_np_rng_next64(struct mc_np_rng *r)
{
    uint64_t hi = mc_np_rng_next32(r);
    return (hi << 32) | mc_np_rng_next32(r);
}

/* random_interval: masked rejection sampling in [0, max]; no draw at all when max == 0. */
uint64_t mc_np_rng_interval(struct mc_np_rng *r, uint64_t max)
{
    if (max == 0)
        return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffULL) {
        while ((v = (mc_np_rng_next32(r) & mask)) > max)
            ;
    } else {
        while ((v = (mc_np_rng_next64(r) & mask)) > max)
            ;
    }
    return v;
}

/* RandomState.shuffle of a 1-D array: Fisher-Yates from the top, j = random_interval(i). The
 * element type does not change the draws, so one loop serves every width. */
#define DEFINE_SHUFFLE(name, type)                                  \
    void name(struct mc_np_rng *r, type *a, int64_t n)              \
    {                                                               \
        for (int64_t i = n - 1; i >= 1; i--) {                      \
            int64_t j = (int64_t)mc_np_rng_interval(r, (uint64_t)i); \
            type t = a[i];                                          \
            a[i] = a[j];                                            \
            a[j] = t;                                               \
        }                                                           \
    }
DEFINE_SHUFFLE(mc_np_rng_shuffle_i32, int32_t)
DEFINE_SHUFFLE(mc_np_rng_shuffle_u32, uint32_t)
DEFINE_SHUFFLE(mc_np_rng_shuffle_i64, int64_t)
DEFINE_SHUFFLE(mc_np_rng_shuffle_i16, int16_t)

void mc_np_rng_permutation(struct mc_np_rng *r, int64_t *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = i;
    mc_np_rng_shuffle_i64(r, out, n);
}

/* RandomState.randint(low, high) for 64-bit output: rng = high - low - 1, then numpy's
 * random_bounded_uint64_fill with masked sampling (32-bit draws while rng fits in 32 bits,
 * a plain next32 when rng == 0xFFFFFFFF, 64-bit draws above). */
mc_status mc_np_rng_randint(struct mc_np_rng *r, int64_t low, int64_t high, int64_t *out,
                            int64_t n)
{
    if (high <= low)
        return mc_error(MC_ERR_CONFIG, "randint: low %lld >= high %lld", (long long)low,
                        (long long)high);
    uint64_t rng = (uint64_t)high - (uint64_t)low - 1;
    for (int64_t i = 0; i < n; i++) {
        uint64_t v;
        if (rng == 0)
            v = 0;
        else if (rng == 0xffffffffULL)
            v = mc_np_rng_next32(r);
        else if (rng == UINT64_MAX)
            v = mc_np_rng_next64(r);
        else
            v = mc_np_rng_interval(r, rng);
        out[i] = (int64_t)((uint64_t)low + v);
    }
    return MC_OK;
}
