/* The `rng_state` of Megatron's checkpoints (rng_state.h), built from the seed and this rank's
 * place: what Megatron's _set_random_seed / model_parallel_cuda_manual_seed leave in Python's,
 * numpy's and torch's generators (src/core/host_rng.c computes them). Megatron saves the
 * states as they are at save time, after its initialization and training drew from some of
 * them; megatron.c draws nothing from them (its dropout is a function of the seed and the
 * step), so the states after seeding are the ones its run stands for: a Megatron run that
 * loads them restores valid generators, seeded as its own run would have been. */
#include "checkpointing/rng_state.h"

#include <stdio.h>

#include "core/host_rng.h"

static int one(int n) { return n > 1 ? n : 1; }

/* (3, (mt[0], ..., mt[623], 624), None): random.getstate() after random.seed(seed). */
static struct mc_pk *py_random(mc_pk_doc *d, uint64_t seed)
{
    uint32_t mt[MC_MT_N];
    mc_py_random_seed(mt, seed);
    struct mc_pk *t = mc_pk_new(d, MC_PK_TUPLE), *words = mc_pk_new(d, MC_PK_TUPLE);
    for (int i = 0; words && i <= MC_MT_N; i++)
        if (mc_pk_append(d, words, mc_pk_int(d, i < MC_MT_N ? mt[i] : MC_MT_N)))
            return NULL;
    if (!t || !words || mc_pk_append(d, t, mc_pk_int(d, 3)) || mc_pk_append(d, t, words) ||
        mc_pk_append(d, t, mc_pk_none(d)))
        return NULL;
    return t;
}

/* ('MT19937', uint32 array of 624, pos 624, has_gauss 0, cached_gaussian 0.0):
 * np.random.get_state() after np.random.seed(seed). numpy takes seeds in [0, 2^32 - 1] only
 * (Megatron fails for others); the low 32 bits stand for larger ones. */
static struct mc_pk *np_random(mc_pk_doc *d, uint64_t seed)
{
    uint32_t mt[MC_MT_N];
    uint8_t le[4 * MC_MT_N];
    mc_mt_init_genrand(mt, (uint32_t)seed);
    for (int i = 0; i < MC_MT_N; i++)
        for (int k = 0; k < 4; k++)
            le[4 * i + k] = (uint8_t)(mt[i] >> (8 * k));
    const int64_t shape = MC_MT_N;
    struct mc_pk *t = mc_pk_new(d, MC_PK_TUPLE);
    if (!t || mc_pk_append(d, t, mc_pk_str(d, "MT19937")) ||
        mc_pk_append(d, t, mc_pk_ndarray(d, "<u4", 1, &shape, le, sizeof(le))) ||
        mc_pk_append(d, t, mc_pk_int(d, MC_MT_N)) || mc_pk_append(d, t, mc_pk_int(d, 0)) ||
        mc_pk_append(d, t, mc_pk_float(d, 0.0)))
        return NULL;
    return t;
}

/* A 1-D torch.uint8 tensor over a copy of n bytes. */
static struct mc_pk *byte_tensor(mc_pk_doc *d, const uint8_t *p, int64_t n)
{
    uint8_t *copy = mc_pk_doc_alloc(d, (size_t)n);
    if (!copy)
        return NULL;
    for (int64_t k = 0; k < n; k++)
        copy[k] = p[k];
    struct mc_pk *stg = mc_pk_storage(d, MC_DTYPE_U8, n, copy);
    return stg ? mc_pk_tensor(d, stg, 0, 1, &n, NULL) : NULL;
}

static struct mc_pk *cuda_state(mc_pk_doc *d, uint64_t seed)
{
    uint8_t b[MC_TORCH_CUDA_STATE_BYTES];
    mc_torch_cuda_rng_state(b, seed, 0);
    return byte_tensor(d, b, sizeof(b));
}

/* One data-parallel rank's dict (get_rng_state's rng_state). */
static struct mc_pk *rank_state(mc_pk_doc *d, const struct mc_ckpt_state *s, int dp_rank)
{
    const struct mc_ckpt_options *o = &s->opts;
    uint64_t seed = (uint64_t)o->seed + 100u * (uint64_t)s->pp_rank;
    if (o->dp_random_init)
        seed += 10u * (uint64_t)dp_rank;
    /* the expert-tensor-parallel rank (the expert-parallel rank is 0: megatron.c refuses
     * expert parallelism): the rank's place in its expert-tensor group, tp-major like the
     * tensor-parallel group (exact where that size divides the tensor-parallel size) */
    int etp = o->expert_tp_size > 0 ? o->expert_tp_size : one(s->tp_size);
    uint8_t cpu[MC_TORCH_CPU_STATE_BYTES];
    mc_torch_cpu_rng_state(cpu, seed);
    struct mc_pk *r = mc_pk_new(d, MC_PK_DICT), *tr = mc_pk_new(d, MC_PK_DICT);
    if (!r || !tr || mc_pk_set(d, r, "random_rng_state", py_random(d, seed)) ||
        mc_pk_set(d, r, "np_rng_state", np_random(d, seed)) ||
        mc_pk_set(d, r, "torch_rng_state", byte_tensor(d, cpu, sizeof(cpu))) ||
        mc_pk_set(d, r, "cuda_rng_state", cuda_state(d, seed)) ||
        mc_pk_set(d, tr, "data-parallel-rng", cuda_state(d, seed)) ||
        mc_pk_set(d, tr, "model-parallel-rng", cuda_state(d, seed + 2718u + (uint64_t)s->tp_rank)) ||
        mc_pk_set(d, tr, "expert-parallel-rng", cuda_state(d, seed + 1024u + (uint64_t)(s->tp_rank % etp))) ||
        mc_pk_set(d, r, "rng_tracker_states", tr))
        return NULL;
    return r;
}

struct mc_pk *mc_ckpt_rng_state(mc_pk_doc *d, const struct mc_ckpt_state *s)
{
    struct mc_pk *list = mc_pk_new(d, MC_PK_LIST);
    int n = s->opts.dp_random_init ? one(s->dp_size) : 1;
    for (int r = 0; list && r < n; r++)
        if (mc_pk_append(d, list, rank_state(d, s, n > 1 ? r : s->dp_rank)))
            return NULL;
    return list;
}

void mc_ckpt_rng_state_key(char *out, size_t n, const struct mc_ckpt_state *s)
{
    snprintf(out, n, "rng_state/shard_%d.%d_%d.%d", s->pp_rank, s->tp_rank, one(s->pp_size),
             one(s->tp_size));
}
