/* distrib_optim.pt, mirrors DistributedOptimizer.get_parameter_state_dp_zero /
 * save_parameter_state and load_parameter_state_from_dp_zero of
 * megatron/core/optimizer/distrib_optimizer.py (core_v0.12.1), for fp32 training:
 *   {'buckets_coalesced': True,
 *    0: {(torch.float32, torch.float32): {'param': fp32[N], 'exp_avg': fp32[N], 'exp_avg_sq': fp32[N],
 *                                          'numel_unpadded': N}}}
 * one entry per grad buffer (fp32 params and grads: one per model chunk, 0 .. V-1 with
 * interleaved pipelining), each tensor the concatenation over
 * buckets of bucket[0:numel_unpadded] in grad-buffer coordinates (reverse parameter order,
 * 64-element aligned starts with the gaps kept as zeros, the end-of-bucket padding dropped).
 * Megatron gathers the shards on data-parallel rank 0 over gloo; here each rank contributes its
 * shard to an all-reduce (sum over disjoint parts: exact) and rank 0 writes. */
#include "checkpointing/distrib_optim.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "checkpointing/torch_pickle.h"
#include "parallel_state/parallel_state.h"

#define N_KEYS 3
static const char *const keys[N_KEYS] = {"param", "exp_avg", "exp_avg_sq"};

/* Where buffer element x of bucket b sits in the unpadded world tensors. */
static int64_t *world_offsets(const struct mc_pgb_map *mp)
{
    int64_t *off = mc_alloc((size_t)(mp->n_buckets + 1) * sizeof(int64_t));
    if (!off)
        return NULL;
    off[0] = 0;
    for (int64_t b = 0; b < mp->n_buckets; b++)
        off[b + 1] = off[b] + mp->bucket[b].numel_unpadded;
    return off;
}

static mc_status check_adam(const struct mc_distopt_shard *sh, const char *path)
{
    if (!sh->exp_avg)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: --optimizer sgd with --use-distributed-optimizer: "
                        "Megatron core_v0.12.1's distrib_optim.pt holds Adam moments only "
                        "(param, exp_avg, exp_avg_sq); checkpoint SGD without the distributed "
                        "optimizer", path);
    return MC_OK;
}

/* This rank's shard of the moments into (or out of) the padded buffer coordinates of
 * buf[2][numel]. */
static void shard_copy(const struct mc_pgb_map *mp, const struct mc_distopt_shard *sh, float *buf, bool out)
{
    for (int64_t b = 0; b < mp->n_buckets; b++) {
        int64_t per = (mp->bucket[b].end - mp->bucket[b].start) / sh->dp;
        float *at = buf + mp->bucket[b].start + sh->dp_rank * per;
        float *ea = sh->exp_avg + sh->shard_off[b], *es = sh->exp_avg_sq + sh->shard_off[b];
        memcpy(out ? ea : at, out ? at : ea, (size_t)per * sizeof(float));
        memcpy(out ? es : at + mp->numel, out ? at + mp->numel : es, (size_t)per * sizeof(float));
    }
}

/* Where parameter j of the file's layout starts in the unpadded world tensors. */
static int64_t world_at(const struct mc_pgb_map *fm, const int64_t *woff, int64_t j)
{
    const struct mc_pgb_range *r = &fm->param[j];
    return woff[r->bucket] + (r->start - fm->bucket[r->bucket].start);
}

/* Between our buffer (buf[2][numel], params in the model) and the world tensors in the file's
 * layout, parameter by parameter; gaps stay zero. */
static void to_world(const struct mc_pgb_map *mp, const struct mc_pgb_map *fm, const int64_t *woff,
                     const int64_t *perm, const mc_gpt_model *m, const float *buf, float *world[N_KEYS])
{
    for (int64_t j = 0; j < fm->n_params; j++) {
        struct mc_param_view p = mc_gpt_param(m, perm[j]);
        int64_t w = world_at(fm, woff, j), at = mp->param[perm[j]].start;
        memcpy(world[0] + w, p.data, (size_t)p.numel * sizeof(float));
        memcpy(world[1] + w, buf + at, (size_t)p.numel * sizeof(float));
        memcpy(world[2] + w, buf + mp->numel + at, (size_t)p.numel * sizeof(float));
    }
}

/* With ch->check_masters: the checkpoint's fp32 param of p must round to p's bf16 weight
 * (loaded into p.data, widened, before the main params overwrite it) under nearest even or
 * half away from zero, so its bits are the weight's, low half aside, or one below in magnitude. */
static mc_status check_masters(const struct mc_ckpt_distopt_chunk *ch, const char *what,
                               const struct mc_param_view *p, const float *master)
{
    for (int64_t k = 0; ch->check_masters && k < p->numel; k++) {
        uint32_t x, w;
        memcpy(&x, master + k, sizeof(x));
        memcpy(&w, p->data + k, sizeof(w));
        if ((w & 0xffffu) == 0 && ((w >> 16) == (x >> 16) || (w >> 16) == (x >> 16) + 1))
            continue;
        return mc_error(MC_ERR_FORMAT, "%s: the distributed optimizer's fp32 param of %s is not "
                        "the master of its bf16 weight (element %lld: %.9g, weight %.9g). Megatron "
                        "core_v0.12.1 with --bf16 --use-precision-aware-optimizer stores Transformer "
                        "Engine's int16 param remainders there, from which the master cannot be "
                        "rebuilt (Megatron cannot resume it either); add --no-load-optim to load "
                        "the weights alone", what, p->name, (long long)k, (double)master[k],
                        (double)p->data[k]);
    }
    return MC_OK;
}

static mc_status from_world(const struct mc_ckpt_distopt_chunk *ch, const char *what,
                            const struct mc_pgb_map *fm, const int64_t *woff, float *buf,
                            const float *world[N_KEYS])
{
    const struct mc_pgb_map *mp = mc_distopt_map(ch->o);
    for (int64_t j = 0; j < fm->n_params; j++) {
        struct mc_param_view p = mc_gpt_param(ch->m, ch->perm[j]);
        int64_t w = world_at(fm, woff, j), at = mp->param[ch->perm[j]].start;
        mc_status st = check_masters(ch, what, &p, world[0] + w);
        if (st)
            return st;
        memcpy(p.data, world[0] + w, (size_t)p.numel * sizeof(float));
        memcpy(buf + at, world[1] + w, (size_t)p.numel * sizeof(float));
        memcpy(buf + mp->numel + at, world[2] + w, (size_t)p.numel * sizeof(float));
    }
    return MC_OK;
}

/* Buffer `index`'s entry {(params_dtype, grad dtype): {param, exp_avg, exp_avg_sq, numel_unpadded}}
 * (Megatron keys a grad buffer by its param and grad dtype; the tensors are fp32 in every
 * precision). */
static mc_status add_state(mc_pk_doc *d, struct mc_pk *root, int index, float *world[N_KEYS],
                           int64_t n, enum mc_dtype param_dtype, enum mc_dtype grad_dtype)
{
    struct mc_pk *buf = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *dtypes = mc_pk_new(d, MC_PK_TUPLE), *state = mc_pk_new(d, MC_PK_DICT);
    if (!buf || !dtypes || !state)
        return MC_ERR_NOMEM;
    mc_status st = mc_pk_append(d, root, mc_pk_int(d, index));
    st = st ? st : mc_pk_append(d, root, buf);
    st = st ? st : mc_pk_append(d, dtypes, mc_pk_global(d, "torch", mc_dtype_name(param_dtype)));
    st = st ? st : mc_pk_append(d, dtypes, mc_pk_global(d, "torch", mc_dtype_name(grad_dtype)));
    st = st ? st : mc_pk_append(d, buf, dtypes);
    st = st ? st : mc_pk_append(d, buf, state);
    for (int k = 0; !st && k < N_KEYS; k++)
        st = mc_pk_set(d, state, keys[k], mc_pk_tensor(d, mc_pk_storage(d, MC_DTYPE_F32, n, world[k]),
                                                       0, 1, &n, NULL));
    return st ? st : mc_pk_set(d, state, "numel_unpadded", mc_pk_int(d, n));
}

/* Chunk `index`'s buffer: gathered over the data-parallel group, added to root on the writer
 * (the world tensors are allocated in the doc, so they live as long as the tree). */
static mc_status save_chunk(const struct mc_ckpt_distopt_chunk *ch, int index, mc_pk_doc *d,
                            struct mc_pk *root, const char *path, bool writer)
{
    struct mc_distopt_shard sh;
    mc_distopt_shard(ch->o, &sh);
    const struct mc_pgb_map *mp = mc_distopt_map(ch->o);
    struct mc_pgb_map fm = {0};
    mc_status st = check_adam(&sh, path);
    if (st || (st = mc_distopt_map_in_order(ch->o, ch->perm, &fm)))
        return st;
    float *buf = mc_calloc((size_t)(2 * mp->numel), sizeof(float)), *world[N_KEYS] = {NULL};
    int64_t *woff = world_offsets(&fm), n = 0;
    if (!buf || !woff) {
        st = MC_ERR_NOMEM;
        goto cleanup;
    }
    n = woff[fm.n_buckets];
    shard_copy(mp, &sh, buf, false);
    if (sh.dp > 1 && (st = mc_comm_all_reduce(sh.dp_comm, buf, 2 * mp->numel, MC_DTYPE_F32,
                                              MC_COMM_SUM, "distrib_optim.pt gather")))
        goto cleanup;
    if (!writer)
        goto cleanup;
    for (int k = 0; k < N_KEYS; k++) /* zeroed: the gaps between parameters stay 0 */
        if (!(world[k] = mc_pk_doc_alloc(d, (size_t)(n ? n : 1) * sizeof(float)))) {
            st = MC_ERR_NOMEM;
            goto cleanup;
        }
    to_world(mp, &fm, woff, ch->perm, ch->m, buf, world);
    st = add_state(d, root, index, world, n, ch->param_dtype, ch->grad_dtype);
cleanup:
    mc_free(woff);
    mc_free(buf);
    mc_pgb_map_free(&fm);
    return st;
}

mc_status mc_ckpt_distopt_gather(const struct mc_ckpt_distopt_chunk *ch, int n, mc_pk_doc *d,
                                 const char *what, bool writer, struct mc_pk **out)
{
    struct mc_pk *root = d ? mc_pk_new(d, MC_PK_DICT) : NULL;
    mc_status st = root ? mc_pk_set(d, root, "buckets_coalesced", mc_pk_bool(d, true)) : MC_ERR_NOMEM;
    /* every chunk's gather runs on every rank even after a failure: the others wait in it */
    for (int c = 0; c < n; c++) {
        mc_status cst = save_chunk(&ch[c], c, d, root, what, writer && !st);
        st = st ? st : cst;
    }
    if (!st)
        *out = writer ? root : NULL;
    return st;
}

mc_status mc_ckpt_distopt_save(const struct mc_ckpt_distopt_chunk *ch, int n, const char *path,
                               bool writer)
{
    mc_pk_doc *d = NULL;
    struct mc_pk *root = NULL;
    mc_status st = mc_pk_doc_init(&d);
    /* the gather runs even when the doc could not be made (d NULL): the other ranks wait in it */
    mc_status gst = mc_ckpt_distopt_gather(ch, n, st ? NULL : d, path, writer, &root);
    st = st ? st : gst;
    if (!st && writer)
        st = mc_torch_save(d, root, path);
    mc_pk_doc_free(d);
    return st;
}

/* ---- loading ------------------------------------------------------------------------------- */
/* The buffer's state dict {param, exp_avg, exp_avg_sq, numel_unpadded}, checked against ours. */
static mc_status find_state(const struct mc_pk *root, const char *path, int index, int n_buffers,
                             int64_t n, enum mc_dtype param_dtype, enum mc_dtype grad_dtype,
                             const struct mc_pk **out)
{
    const struct mc_pk *buf = NULL;
    for (int64_t i = 0; mc_pk_is_map(root) && i + 1 < root->n; i += 2) {
        const struct mc_pk *k = root->items[i];
        if (k->kind == MC_PK_INT && (k->i < 0 || k->i >= n_buffers))
            return mc_error(MC_ERR_UNSUPPORTED, "%s: grad buffer %lld: this run has %d buffer(s) "
                            "(one per model chunk; mixed dtypes are not supported, and a file of "
                            "another virtual pipeline size does not load)", path, (long long)k->i,
                            n_buffers);
        if (k->kind == MC_PK_INT && k->i == index)
            buf = root->items[i + 1];
    }
    if (!buf || !mc_pk_is_map(buf) || buf->n != 2 || !mc_pk_is_map(buf->items[1]))
        return mc_error(MC_ERR_FORMAT, "%s: expected {'buckets_coalesced': True, %d: {(dtype, "
                        "dtype): {...}}} as Megatron's save_parameter_state writes it (one entry "
                        "per model chunk)", path, index);
    const struct mc_pk *dt = buf->items[0];
    char want[64], want_grad[64];
    snprintf(want, sizeof(want), "torch %s", mc_dtype_name(param_dtype));
    snprintf(want_grad, sizeof(want_grad), "torch %s", mc_dtype_name(grad_dtype));
    if (dt->kind != MC_PK_TUPLE || dt->n != 2 || dt->items[0]->kind != MC_PK_GLOBAL ||
        dt->items[1]->kind != MC_PK_GLOBAL)
        return mc_error(MC_ERR_FORMAT, "%s: grad buffer %d is not keyed by a (param dtype, grad "
                        "dtype) tuple", path, index);
    if (strcmp(dt->items[0]->s, want) || strcmp(dt->items[1]->s, want_grad))
        /* load_parameter_state_from_dp_zero looks its own buffer key up: a KeyError */
        return mc_error(MC_ERR_CONFIG, "%s: grad buffer %d is (torch.%s, torch.%s), this run's is "
                        "(torch.%s, torch.%s): the file was saved in another precision "
                        "(--bf16 / --fp16 / fp32, --accumulate-allreduce-grads-in-fp32), which "
                        "Megatron does not load either (KeyError); resume in the checkpoint's "
                        "precision, or add --no-load-optim to load only the weights", path, index,
                        strchr(dt->items[0]->s, ' ') + 1, strchr(dt->items[1]->s, ' ') + 1,
                        mc_dtype_name(param_dtype), mc_dtype_name(grad_dtype));
    const struct mc_pk *state = buf->items[1], *nu = mc_pk_get(state, "numel_unpadded");
    const struct mc_pk *bc = mc_pk_get(root, "buckets_coalesced");
    if (!bc || bc->kind != MC_PK_BOOL || !bc->b)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: per-bucket (not coalesced) distrib_optim.pt of "
                        "Megatron before core 0.7 is not supported", path);
    if (!nu || nu->kind != MC_PK_INT || nu->i != n)
        return mc_error(MC_ERR_SHAPE, "%s: buffer %d: numel_unpadded %lld, this model's grad "
                        "buffer holds %lld (another model, layout or --ddp-bucket-size?)", path, index,
                        (long long)(nu && nu->kind == MC_PK_INT ? nu->i : -1), (long long)n);
    for (int k = 0; k < N_KEYS; k++) {
        const struct mc_pk *t = mc_pk_get(state, keys[k]);
        if (!t || t->kind != MC_PK_TENSOR || t->dtype != MC_DTYPE_F32 || t->ndim != 1 ||
            t->shape[0] != n || !mc_pk_tensor_contiguous(t))
            return mc_error(MC_ERR_FORMAT, "%s: '%s' is not a contiguous float32 tensor of %lld "
                            "elements", path, keys[k], (long long)n);
    }
    *out = state;
    return MC_OK;
}

static const float *tensor_data(const struct mc_pk *t)
{
    return (const float *)t->storage->data + t->offset;
}

static mc_status load_chunk(const struct mc_ckpt_distopt_chunk *ch, int index, int n_buffers,
                             const struct mc_pk *root, const char *path)
{
    struct mc_distopt_shard sh;
    mc_distopt_shard(ch->o, &sh);
    const struct mc_pgb_map *mp = mc_distopt_map(ch->o);
    struct mc_pgb_map fm = {0};
    mc_status st = check_adam(&sh, path);
    if (st || (st = mc_distopt_map_in_order(ch->o, ch->perm, &fm)))
        return st;
    int64_t *woff = world_offsets(&fm);
    float *buf = mc_calloc((size_t)(2 * mp->numel), sizeof(float));
    const struct mc_pk *state = NULL;
    if (!woff || !buf)
        st = MC_ERR_NOMEM;
    if (!st && !(st = find_state(root, path, index, n_buffers, woff[fm.n_buckets], ch->param_dtype,
                                 ch->grad_dtype, &state))) {
        const float *w[N_KEYS];
        for (int k = 0; k < N_KEYS; k++)
            w[k] = tensor_data(mc_pk_get(state, keys[k]));
        if (!(st = from_world(ch, path, &fm, woff, buf, w)))
            shard_copy(mp, &sh, buf, true);
    }
    mc_free(buf);
    mc_free(woff);
    mc_pgb_map_free(&fm);
    return st;
}

mc_status mc_ckpt_distopt_load_state(const struct mc_ckpt_distopt_chunk *ch, int n,
                                     const struct mc_pk *root, const char *what)
{
    mc_status st = MC_OK;
    for (int c = 0; !st && c < n; c++)
        st = load_chunk(&ch[c], c, n, root, what);
    return st;
}

mc_status mc_ckpt_distopt_load(const struct mc_ckpt_distopt_chunk *ch, int n, const char *path)
{
    mc_pk_doc *d = NULL;
    struct mc_pk *root;
    mc_status st = mc_pk_doc_init(&d);
    st = st ? st : mc_torch_load(d, path, &root);
    st = st ? st : mc_ckpt_distopt_load_state(ch, n, root, path);
    mc_pk_doc_free(d);
    return st;
}

/* ---- torch_dist: the state in model space ---------------------------------------------------- */
/* A float32 tensor of exactly n elements, or NULL. */
static const float *model_space_tensor(const struct mc_pk *t, int64_t n)
{
    if (!t || t->kind != MC_PK_TENSOR || t->storage->dtype != MC_DTYPE_F32 ||
        !mc_pk_tensor_contiguous(t) || mc_pk_tensor_numel(t) != n)
        return NULL;
    return (const float *)t->storage->data + t->offset;
}

/* Parameter i of chunk `ch`: its whole fp32_param (if given) into the model's fp32 params, and
 * the part of each moment inside this rank's shard into the optimizer state. */
static mc_status load_param_space(const struct mc_ckpt_distopt_chunk *ch, const struct mc_distopt_shard *sh,
                                  int64_t i, const struct mc_pk *e, int64_t gi)
{
    const struct mc_pgb_map *mp = mc_distopt_map(ch->o);
    struct mc_param_view p = mc_gpt_param(ch->m, i);
    const struct mc_pgb_range *r = &mp->param[i];
    const struct mc_pgb_bucket *b = &mp->bucket[r->bucket];
    int64_t per = (b->end - b->start) / sh->dp, s0 = b->start + sh->dp_rank * per;
    int64_t lo = r->start > s0 ? r->start : s0, hi = r->end < s0 + per ? r->end : s0 + per;
    const char *names[3] = {"exp_avg", "exp_avg_sq", "fp32_param"};
    float *dst[3] = {sh->exp_avg, sh->exp_avg_sq, NULL};
    if (!sh->exp_avg)
        names[0] = "momentum_buffer", dst[0] = sh->momentum, names[1] = NULL;
    for (int j = 0; j < 3; j++) {
        const struct mc_pk *t = names[j] ? mc_pk_get(e, names[j]) : NULL;
        if (!names[j] || (j == 2 && !t))
            continue; /* no fp32_param: the main params are the weights already loaded */
        const float *v = model_space_tensor(t, p.numel);
        if (!v)
            return mc_error(MC_ERR_FORMAT, "torch_dist optimizer state of %s (parameter %lld): "
                            "no float32 %s of its %lld elements", p.name, (long long)gi, names[j],
                            (long long)p.numel);
        mc_status st = j == 2 ? check_masters(ch, "torch_dist optimizer state", &p, v) : MC_OK;
        if (st)
            return st;
        if (j == 2)
            memcpy(p.data, v, (size_t)p.numel * sizeof(float));
        else if (lo < hi)
            memcpy(dst[j] + sh->shard_off[r->bucket] + (lo - s0), v + (lo - r->start),
                   (size_t)(hi - lo) * sizeof(float));
    }
    return MC_OK;
}

mc_status mc_ckpt_distopt_load_model_space(const struct mc_ckpt_distopt_chunk *ch, int n,
                                           const struct mc_pk *param_state)
{
    int64_t gi = 0;
    for (int c = 0; c < n; c++) {
        struct mc_distopt_shard sh;
        mc_distopt_shard(ch[c].o, &sh);
        for (int64_t i = 0; i < mc_gpt_num_params(ch[c].m); i++, gi++) {
            const struct mc_pk *e = NULL;
            for (int64_t k = 0; k + 1 < param_state->n && !e; k += 2)
                if (param_state->items[k]->kind == MC_PK_INT && param_state->items[k]->i == gi)
                    e = param_state->items[k + 1];
            mc_status st = e ? load_param_space(&ch[c], &sh, i, e, gi)
                             : mc_error(MC_ERR_FORMAT, "torch_dist optimizer state: no entry for "
                                        "parameter %lld", (long long)gi);
            if (st)
                return st;
        }
    }
    return MC_OK;
}
