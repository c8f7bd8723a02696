/* MockGPTDataset's low-level data (megatron/core/datasets/gpt_dataset.py,
 * MockGPTLowLevelDataset): 100000 documents whose lengths come from
 * numpy.random.default_rng(0).integers(1, 4096, size=100000, dtype=int32) and whose tokens are
 * [1, 2, ..., L-1, eod]. Reproduces numpy's SeedSequence, PCG64 (XSL-RR 128/64) and the
 * Lemire bounded integers that Generator.integers uses, so the document lengths, and hence the
 * indices and caches, equal Megatron's. */
#include "megatron/gpt_dataset.h"

#include <string.h>

__extension__ typedef unsigned __int128 u128;

#define MOCK_SIZE 100000
#define MOCK_MAX_LEN 4096

/* SeedSequence(seed).generate_state(8 words) for a seed below 2^32. */
static void seed_sequence(uint64_t seed, uint32_t out[8])
{
    const uint32_t INIT_A = 0x43b0d7e5U, MULT_A = 0x931e8875U, INIT_B = 0x8b51f9ddU,
                   MULT_B = 0x58f38dedU, MIX_L = 0xca01f9ddU, MIX_R = 0x4973f715U;
    uint32_t entropy[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    int n_entropy = seed >> 32 ? 2 : 1;
    uint32_t hc = INIT_A, pool[4];
#define HASHMIX(v) (v ^= hc, hc *= MULT_A, v *= hc, v ^= v >> 16, v)
    for (int i = 0; i < 4; i++) {
        uint32_t v = i < n_entropy ? entropy[i] : 0;
        pool[i] = HASHMIX(v);
    }
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) {
                uint32_t v = pool[s];
                uint32_t h = HASHMIX(v);
                uint32_t r = MIX_L * pool[d] - MIX_R * h;
                pool[d] = r ^ (r >> 16);
            }
#undef HASHMIX
    uint32_t hb = INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % 4];
        v ^= hb;
        hb *= MULT_B;
        v *= hb;
        v ^= v >> 16;
        out[i] = v;
    }
}

struct pcg64 {
    u128 state, inc;
    int has32;
    uint32_t buf32;
};

static const u128 PCG_MULT = ((u128)0x2360ed051fc65da4ULL << 64) | 0x4385df649fccf645ULL;

static void pcg_step(struct pcg64 *g) { g->state = g->state * PCG_MULT + g->inc; }

static uint64_t pcg_next64(struct pcg64 *g)
{
    pcg_step(g);
    uint64_t hi = (uint64_t)(g->state >> 64), lo = (uint64_t)g->state;
    unsigned rot = (unsigned)(hi >> 58);
    uint64_t x = hi ^ lo;
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t pcg_next32(struct pcg64 *g)
{
    if (g->has32) {
        g->has32 = 0;
        return g->buf32;
    }
    uint64_t v = pcg_next64(g);
    g->has32 = 1;
    g->buf32 = (uint32_t)(v >> 32);
    return (uint32_t)v;
}

static void pcg_seed(struct pcg64 *g, uint64_t seed)
{
    uint32_t w[8];
    seed_sequence(seed, w);
    uint64_t s[4];
    for (int k = 0; k < 4; k++)
        s[k] = (uint64_t)w[2 * k] | (uint64_t)w[2 * k + 1] << 32;
    u128 initstate = ((u128)s[0] << 64) | s[1], initseq = ((u128)s[2] << 64) | s[3];
    memset(g, 0, sizeof(*g));
    g->inc = (initseq << 1) | 1;
    pcg_step(g);
    g->state += initstate;
    pcg_step(g);
}

void mc_np_pcg64_integers_i32(uint64_t seed, int32_t low, int32_t high, int32_t *out, int64_t n)
{
    struct pcg64 g;
    pcg_seed(&g, seed);
    uint32_t rng = (uint32_t)(high - low - 1), excl = rng + 1;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        if (rng == 0) {
            v = 0;
        } else if (rng == UINT32_MAX) {
            v = pcg_next32(&g);
        } else {
            /* Lemire's multiply-shift with rejection of the biased low products */
            uint64_t m = (uint64_t)pcg_next32(&g) * excl;
            uint32_t left = (uint32_t)m;
            if (left < excl) {
                uint32_t t = (UINT32_MAX - rng) % excl;
                while (left < t) {
                    m = (uint64_t)pcg_next32(&g) * excl;
                    left = (uint32_t)m;
                }
            }
            v = (uint32_t)(m >> 32);
        }
        out[i] = (int32_t)((uint32_t)low + v);
    }
}

struct mock_ctx {
    int64_t eod;
    const int32_t *lengths;
};

/* Document k is [1, 2, ..., L-1, eod]; reads beyond it continue into the next documents as a
 * flat stream would not, so they are refused. */
static mc_status mock_get(void *ctx, int64_t idx, int64_t offset, int64_t length, int64_t *out)
{
    struct mock_ctx *m = ctx;
    int64_t len = m->lengths[idx];
    if (offset < 0 || length < 0 || offset + length > len)
        return mc_error(MC_ERR_CONFIG, "mock document %lld has %lld tokens; asked for [%lld, %lld)",
                        (long long)idx, (long long)len, (long long)offset,
                        (long long)(offset + length));
    for (int64_t i = 0; i < length; i++) {
        int64_t pos = offset + i;
        out[i] = pos == len - 1 ? m->eod : pos + 1;
    }
    return MC_OK;
}

static void mock_close(void *ctx) { mc_free(ctx); }

mc_status mc_gpt_lowlevel_mock(int64_t eod, struct mc_gpt_lowlevel **out)
{
    *out = NULL;
    struct mc_gpt_lowlevel *ll = mc_calloc(1, sizeof(*ll));
    struct mock_ctx *m = mc_calloc(1, sizeof(*m));
    int32_t *len = mc_alloc(sizeof(int32_t) * MOCK_SIZE);
    if (!ll || !m || !len) {
        mc_free(ll);
        mc_free(m);
        mc_free(len);
        return MC_ERR_NOMEM;
    }
    mc_np_pcg64_integers_i32(0, 1, MOCK_MAX_LEN, len, MOCK_SIZE);
    m->eod = eod;
    m->lengths = len;
    ll->n_sequences = MOCK_SIZE;
    ll->sequence_lengths = len;
    ll->owned_lengths = len;
    ll->get = mock_get;
    ll->ctx = m;
    ll->close = mock_close;
    *out = ll;
    return MC_OK;
}

void mc_gpt_lowlevel_free(struct mc_gpt_lowlevel *ll)
{
    if (!ll)
        return;
    if (ll->close)
        ll->close(ll->ctx);
    mc_free(ll->owned_lengths);
    mc_free(ll);
}
