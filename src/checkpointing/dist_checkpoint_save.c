/* Writing Megatron's `--ckpt-format torch_dist` checkpoints (megatron/core/dist_checkpointing
 * with its torch strategy over torch.distributed.checkpoint, Megatron-LM core_v0.12.1, torch 2.x):
 * the files dist_checkpoint.c reads, in the layout Megatron's writer gives them.
 *   - Every rank plans its items: its model tensors under their global keys (layers stacked on a
 *     prepended axis, tensor-parallel shards as chunks at their offsets, SwiGLU's fc1 as its
 *     [gate; up] halves), the optimizer moments under "optimizer.state.<name>.<key>" with the
 *     same chunks, and the linear layers' `_extra_state` sharded objects. A tensor replicated
 *     across tensor-parallel ranks is written by tensor-parallel rank 0 only, the last stage's
 *     copy of tied embeddings not at all, and only data-parallel rank 0 writes (Megatron's main
 *     replicas, replica_id all zeros).
 *   - The items go to two files per rank, __<rank>_0.distcp and __<rank>_1.distcp, split as
 *     Megatron's FileSystemWriterAsync splits them (thread_count 2, _split_by_size_and_type):
 *     sharded objects round-robin, tensors largest first each onto the lighter file; each file
 *     holds its objects, then its tensors, each one torch.save archive (torch's TORCH_SAVE
 *     serialization format).
 *   - Rank 0 gathers every rank's (key, chunk, file, byte offset, length) and writes `.metadata`,
 *     the pickle of DCP's Metadata (state_dict_metadata: key -> TensorStorageMetadata with the
 *     global size and every chunk, or BytesStorageMetadata; storage_data: MetadataIndex(key,
 *     chunk offset) -> _StorageInfo(file, offset, length); storage_meta; version "1.0.0";
 *     Megatron's mcore_data), then common.pt and metadata.json.
 * The checkpoint directory is written under a temporary name by the caller (checkpoint.c). */
#include "checkpointing/dist_checkpoint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpointing/async_utils.h"
#include "checkpointing/checkpoint_internal.h"
#include "checkpointing/rng_state.h"
#include "checkpointing/torch_pickle.h"
#include "core/dtype.h"
#include "distributed/distrib_optimizer.h"

#define BINS 2 /* FileSystemWriterAsync's thread_count in Megatron's torch_dist save strategy */
#define META "torch.distributed.checkpoint.metadata"

struct item {
    char fqn[640];
    bool bytes;                 /* a sharded object (BYTE_IO), else a tensor chunk */
    const struct mc_pk *obj;    /* the object's value (NULL: None), in plan.objs */
    int nd;
    int64_t g[MC_PK_MAX_DIM];   /* the global shape */
    int64_t off[MC_PK_MAX_DIM]; /* the chunk's offsets and sizes */
    int64_t sz[MC_PK_MAX_DIM];
    enum mc_dtype dt;           /* its dtype: the run's params_dtype for the model, else fp32 */
    const void *data;           /* the chunk, contiguous */
    int64_t numel;
    bool flat;                  /* a flattened range [fs, fe) of the chunk's row-major elements
                                   (the distributed optimizer's state): g/off/sz stay the
                                   chunk's own, DCP sees it reformulated (dcp_geom) */
    int64_t fs, fe;
    int holder;                 /* the data-parallel rank holding it, -1: every one (replicas) */
    int saver;                  /* the data-parallel rank that writes it (distribute) */
    int bucket;
    int file;                   /* k of __<rank>_<k>.distcp */
    uint64_t at, len;           /* where its torch.save archive lies in that file */
};

struct plan {
    struct item *it;
    int64_t n, cap;
    void **owned; /* the 16-bit copies of the model weights (a --bf16/--fp16 run) */
    int64_t n_owned;
    mc_pk_doc *objs; /* the values of the sharded objects (rng_state, the distributed optimizer's) */
};

static void plan_free(struct plan *pl)
{
    for (int64_t k = 0; k < pl->n_owned; k++)
        mc_free(pl->owned[k]);
    mc_free(pl->owned);
    mc_free(pl->it);
    if (pl->objs)
        mc_pk_doc_free(pl->objs);
}

/* A 16-bit run's model weight as the model computes with it: round(main param) in params_dtype
 * (what Float16Module's params hold; the fp32 main params go under optimizer.state.fp32_param). */
static const void *weights_16(struct plan *pl, enum mc_dtype dt, const float *main, int64_t numel)
{
    void **o = mc_alloc((size_t)(pl->n_owned + 1) * sizeof(void *));
    void *w = mc_alloc((size_t)numel * mc_dtype_size(dt) + 1);
    if (!o || !w) {
        mc_free(o), mc_free(w);
        return NULL;
    }
    if (pl->n_owned)
        memcpy(o, pl->owned, (size_t)pl->n_owned * sizeof(void *));
    mc_free(pl->owned);
    o[pl->n_owned++] = w;
    pl->owned = o;
    mc_dtype_from_f32(w, dt, main, numel);
    return w;
}

static struct item *new_item(struct plan *p)
{
    if (p->n == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 256;
        struct item *it = mc_calloc((size_t)cap, sizeof(*it));
        if (!it)
            return NULL;
        if (p->n)
            memcpy(it, p->it, (size_t)p->n * sizeof(*it));
        mc_free(p->it);
        p->it = it;
        p->cap = cap;
    }
    struct item *x = &p->it[p->n++];
    memset(x, 0, sizeof(*x));
    return x;
}

static int tp_of(const struct mc_gpt_config *c)
{
    return c->tensor_model_parallel_size > 1 ? c->tensor_model_parallel_size : 1;
}

/* SwiGLU's fc1 holds [gate_r; up_r] on each tensor-parallel rank, the checkpoint [gate; up]. */
static bool swiglu_fc1(const struct mc_gpt_config *c, const char *key)
{
    return c->activation == MC_ACT_SWIGLU && strstr(key, "mlp.linear_fc1.") && !strstr(key, "layer_norm");
}

/* Whether the parameter has a main replica in this data-parallel group (replica_id (0, 0, *)):
 * not the last stage's copy of tied embeddings, and a tensor replicated across tensor-parallel
 * ranks only on tensor-parallel rank 0. Which data-parallel rank writes it is distribute()'s. */
static bool main_replica(const mc_gpt_model *m, const struct mc_param_view *p)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(m);
    if (p->shared)
        return false; /* the last stage's copy of tied embeddings: replica_id (1, ...) */
    if (!c->untie_embeddings_and_output_weights && !strcmp(p->name, "output_layer.weight"))
        return false;
    return p->partition_dim >= 0 || tp_of(c) == 1 || c->tensor_model_parallel_rank == 0;
}

/* Where a chunk goes: held by data-parallel rank `holder` (-1: by every one) and, for the
 * distributed optimizer's state, the flattened range [fs, fe) of the chunk (fs < 0: all of it). */
struct span {
    int holder;
    int64_t fs, fe;
};
#define EVERY ((struct span){-1, -1, 0})

static mc_status add_item(struct plan *pl, const char *key, int nd, const int64_t *g, const int64_t *off,
                          const int64_t *sz, const void *data, enum mc_dtype dt, struct span sp)
{
    struct item *x = new_item(pl);
    if (!x)
        return MC_ERR_NOMEM;
    snprintf(x->fqn, sizeof(x->fqn), "%s", key);
    x->nd = nd;
    memcpy(x->g, g, (size_t)nd * sizeof(*g));
    memcpy(x->off, off, (size_t)nd * sizeof(*off));
    memcpy(x->sz, sz, (size_t)nd * sizeof(*sz));
    x->numel = 1;
    for (int k = 0; k < nd; k++)
        x->numel *= sz[k];
    x->flat = sp.fs >= 0;
    if (x->flat) {
        x->fs = sp.fs, x->fe = sp.fe;
        x->numel = sp.fe - sp.fs;
    }
    x->dt = dt;
    x->data = data;
    x->holder = sp.holder;
    return MC_OK;
}

/* The chunk(s) of a parameter-shaped tensor `data` under key `key` (with a flattened range:
 * `data` holds elements [fs, fe) of this rank's parameter). SwiGLU's fc1 goes as its two halves
 * (Megatron's apply_swiglu_sharded_factory; a flattened range is cut at the halves' border). */
static mc_status add_tensor(struct plan *pl, const mc_gpt_model *m, const char *key, long layer,
                            const struct mc_param_view *p, const void *data, enum mc_dtype dt,
                            struct span sp)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(m);
    int pre = layer >= 0, tp = tp_of(c), tr = c->tensor_model_parallel_rank;
    int split = p->partition_dim >= 0 && tp > 1 ? p->partition_dim : -1;
    if (p->ndim + pre + 1 > MC_PK_MAX_DIM || strlen(key) >= sizeof(pl->it[0].fqn))
        return mc_error(MC_ERR_UNSUPPORTED, "torch_dist save: %s: key or rank too large", key);
    int halves = split == 0 && swiglu_fc1(c, key) ? 2 : 1;
    if (halves == 2 && p->shape[0] % 2)
        return mc_error(MC_ERR_INTERNAL, "torch_dist save: %s: SwiGLU fc1 with %lld rows",
                        key, (long long)p->shape[0]);
    int64_t half = p->numel / halves, done = 0;
    for (int h = 0; h < halves; h++) {
        int64_t g[MC_PK_MAX_DIM], off[MC_PK_MAX_DIM], sz[MC_PK_MAX_DIM];
        int nd = p->ndim + pre;
        if (pre)
            g[0] = c->num_layers, off[0] = layer, sz[0] = 1;
        for (int k = 0; k < p->ndim; k++) {
            int64_t local = k == 0 ? p->shape[0] / halves : p->shape[k];
            sz[pre + k] = local;
            g[pre + k] = k == split ? p->shape[k] * tp : p->shape[k];
            off[pre + k] = k != split ? 0 : halves == 2 ? h * (p->shape[0] * tp / 2) + tr * local
                                                         : tr * local;
        }
        struct span hs = sp;
        const char *at = (const char *)data + (size_t)(h * half) * mc_dtype_size(dt);
        if (sp.fs >= 0) { /* this half's part of the range, in the half's own elements */
            int64_t lo = sp.fs > h * half ? sp.fs : h * half;
            int64_t hi = sp.fe < (h + 1) * half ? sp.fe : (h + 1) * half;
            if (lo >= hi)
                continue;
            hs.fs = lo - h * half, hs.fe = hi - h * half;
            at = (const char *)data + (size_t)done * mc_dtype_size(dt);
            done += hi - lo;
        }
        mc_status st = add_item(pl, key, nd, g, off, sz, at, dt, hs);
        if (st)
            return st;
    }
    return MC_OK;
}

static mc_status add_object(struct plan *pl, const char *fqn)
{
    struct item *x = new_item(pl);
    if (!x)
        return MC_ERR_NOMEM;
    snprintf(x->fqn, sizeof(x->fqn), "%.600s", fqn);
    x->bytes = true;
    x->holder = -1; /* only data-parallel rank 0 adds its objects */
    return MC_OK;
}

/* The mcore linear layers' `_extra_state` (None for the local spec), a sharded object per
 * global layer: "decoder.layers.self_attention.linear_proj._extra_state/shard_<layer>_<L>". */
static mc_status add_extra_state(struct plan *pl, const mc_gpt_model *m, const char *local,
                                 const char *next_local)
{
    static const char *const linear[] = {"linear_proj", "linear_qkv", "linear_fc1", "linear_fc2", NULL};
    const char *dot = strrchr(local, '.');
    size_t mlen = dot ? (size_t)(dot - local) : 0;
    if (!mlen || strncmp(local, "decoder.layers.", 15) ||
        (next_local && !strncmp(next_local, local, mlen) && next_local[mlen] == '.'))
        return MC_OK; /* not a layer's module, or not its last parameter */
    const char *last = local + mlen;
    while (last > local && last[-1] != '.')
        last--;
    bool lin = false;
    for (int k = 0; linear[k]; k++)
        lin |= (size_t)(local + mlen - last) == strlen(linear[k]) && !strncmp(last, linear[k], strlen(linear[k]));
    if (!lin)
        return MC_OK;
    struct mc_dist_place p;
    mc_status st = mc_dist_ckpt_place(m, local, &p);
    if (st)
        return st;
    char *kd = strrchr(p.key, '.');
    if (kd)
        *kd = 0;
    char fqn[600];
    snprintf(fqn, sizeof(fqn), "%s._extra_state/shard_%ld_%lld", p.key, p.layer,
             (long long)mc_gpt_model_config(m)->num_layers);
    return add_object(pl, fqn);
}

/* RerunStateMachine.state_dict(ckpt_format='torch_dist')'s ShardedObject: key
 * rerun_state_machine_state, global shape (pp, tp) at (pp rank, tp rank), replica_id the
 * data-parallel rank (rank 0 writes it), its value the machine's 'sharded' dict; common.pt keeps
 * {'mode': RerunMode.DISABLED} (checkpoint.c). Megatron's generate_state_dict adds it before the
 * rng_state, whatever --no-save-optim / --no-save-rng say. */
static mc_status plan_rerun_state(struct plan *pl, const struct mc_ckpt_state *s)
{
    if (!(s->writer || !s->barrier))
        return MC_OK;
    if (!pl->objs && mc_pk_doc_init(&pl->objs))
        return MC_ERR_NOMEM;
    char fqn[96];
    mc_dist_ckpt_rerun_key(fqn, sizeof(fqn), s->pp_rank, s->tp_rank, s->pp_size, s->tp_size);
    struct mc_pk *all = mc_ckpt_rerun_state(pl->objs, s->iteration);
    struct mc_pk *data = all ? mc_pk_get(all, "sharded") : NULL;
    mc_status st = data ? add_object(pl, fqn) : MC_ERR_NOMEM;
    if (!st)
        pl->it[pl->n - 1].obj = data;
    return st;
}

void mc_dist_ckpt_rerun_key(char *out, size_t n, int pp_rank, int tp_rank, int pp, int tp)
{
    snprintf(out, n, "rerun_state_machine_state/shard_%d.%d_%d.%d", pp_rank, tp_rank,
             pp > 1 ? pp : 1, tp > 1 ? tp : 1);
}

/* get_rng_state's ShardedObject: key rng_state, global shape (pp, tp) at (pp rank, tp rank),
 * replica_id the data-parallel rank (rank 0 writes it); its data built in plan.objs by rng_state.c.
 * Last in the plan, as generate_state_dict adds it last. */
static mc_status plan_rng_state(struct plan *pl, const struct mc_ckpt_state *s)
{
    if (!s->opts.save_rng || !(s->writer || !s->barrier))
        return MC_OK;
    if (!pl->objs && mc_pk_doc_init(&pl->objs))
        return MC_ERR_NOMEM;
    char fqn[96];
    mc_ckpt_rng_state_key(fqn, sizeof(fqn), s);
    struct mc_pk *data = mc_ckpt_rng_state(pl->objs, s);
    mc_status st = data ? add_object(pl, fqn) : MC_ERR_NOMEM;
    if (!st)
        pl->it[pl->n - 1].obj = data;
    return st;
}

static mc_status plan_model(struct plan *pl, const struct mc_ckpt_state *s, const mc_gpt_model *m)
{
    int64_t n = mc_gpt_num_params(m);
    const struct mc_gpt_config *c = mc_gpt_model_config(m);
    bool objects = (s->writer || !s->barrier) && (tp_of(c) == 1 || c->tensor_model_parallel_rank == 0);
    for (int64_t i = 0; i < n; i++) {
        struct mc_param_view p = mc_gpt_param(m, i);
        struct mc_dist_place pl_;
        mc_status st = mc_dist_ckpt_place(m, p.name, &pl_);
        if (!st && main_replica(m, &p)) {
            const void *w = s->params_dtype == MC_DTYPE_F32 ? (const void *)p.data
                                                            : weights_16(pl, s->params_dtype, p.data, p.numel);
            st = w ? add_tensor(pl, m, pl_.key, pl_.layer, &p, w, s->params_dtype, EVERY) : MC_ERR_NOMEM;
        }
        if (!st && objects)
            st = add_extra_state(pl, m, p.name, i + 1 < n ? mc_gpt_param(m, i + 1).name : NULL);
        if (st)
            return st;
    }
    return MC_OK;
}

/* The optimizer's moments, in the order of its parameter groups (Megatron's
 * optim_state_to_sharding_state): exp_avg and exp_avg_sq (Adam) or momentum_buffer (SGD) per
 * parameter, chunked as the parameter. The step count goes to common.pt. */
static mc_status plan_optimizer(struct plan *pl, const struct mc_ckpt_state *s)
{
    if (!s->opts.save_optim || !s->opt)
        return MC_OK;
    bool moments = mc_opt_step_count(s->opt) > 0; /* torch keeps no state before the first step */
    int64_t n = mc_ckpt_total_params(s), n_first;
    bool first_decay;
    int64_t *order = mc_alloc((size_t)n * 2 * sizeof(int64_t));
    if (!order)
        return MC_ERR_NOMEM;
    mc_ckpt_group_order(s, MC_SD_LOCAL, order, &n_first, &first_decay);
    mc_status st = MC_OK;
    for (int64_t k = 0; k < n && !st && moments; k++) {
        struct mc_param_view p = mc_ckpt_opt_param(s, order[k]);
        const mc_gpt_model *m = mc_ckpt_opt_param_model(s, order[k]);
        struct mc_opt_param_state ps = mc_opt_param_state(s->opt, order[k]);
        struct mc_dist_place where;
        if ((st = mc_dist_ckpt_place(m, p.name, &where)) || !main_replica(m, &p))
            continue;
        const char *names[2] = {"exp_avg", "exp_avg_sq"};
        const float *data[2] = {ps.exp_avg, ps.exp_avg_sq};
        int nn = 2;
        if (!ps.exp_avg) {
            names[0] = "momentum_buffer";
            data[0] = ps.momentum_buffer;
            nn = 1;
        }
        for (int j = 0; j < nn && !st; j++) {
            char key[600];
            snprintf(key, sizeof(key), "optimizer.state.%.16s.%.512s", names[j], where.key);
            st = add_tensor(pl, m, key, where.layer, &p, data[j], MC_DTYPE_F32, EVERY);
        }
    }
    /* Float16OptimizerWithFloat16Params: then its fp32 main params (fp32_from_fp16_params, group
     * by group in the same order), "optimizer.state.fp32_param.<key>" */
    for (int64_t k = 0; k < n && !st && s->params_dtype != MC_DTYPE_F32; k++) {
        struct mc_param_view p = mc_ckpt_opt_param(s, order[k]);
        const mc_gpt_model *m = mc_ckpt_opt_param_model(s, order[k]);
        struct mc_dist_place where;
        if ((st = mc_dist_ckpt_place(m, p.name, &where)) || !main_replica(m, &p))
            continue;
        char key[600];
        snprintf(key, sizeof(key), "optimizer.state.fp32_param.%.512s", where.key);
        st = add_tensor(pl, m, key, where.layer, &p, p.data, MC_DTYPE_F32, EVERY);
    }
    mc_free(order);
    return st;
}

/* The distributed optimizer's state as DistributedOptimizer.sharded_param_state_fs_model_space
 * gives it (sharding_type 'fully_sharded_model_space'): per model chunk, per parameter in its grad
 * buffer's order (buckets in order, each bucket's parameters by their place in it), the part of
 * the parameter inside a data-parallel rank's shard as a flattened range of the parameter's
 * chunk: exp_avg, exp_avg_sq (Adam), then fp32_param (the main param),
 * "optimizer.state.<name>.<key>". Every rank's parts are planned (distribute() weighs them);
 * only this rank's carry data. */
static const struct mc_pgb_map *order_map;
static int by_start(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    int64_t x = order_map->param[i].start, y = order_map->param[j].start;
    return x < y ? -1 : x > y;
}

static mc_status distopt_param(struct plan *pl, const mc_gpt_model *m, const struct mc_pgb_map *mp,
                               const struct mc_distopt_shard *sh, int64_t i)
{
    struct mc_param_view p = mc_gpt_param(m, i);
    struct mc_dist_place where;
    mc_status st = mc_dist_ckpt_place(m, p.name, &where);
    if (st || !main_replica(m, &p))
        return st;
    const struct mc_pgb_range *r = &mp->param[i];
    const struct mc_pgb_bucket *b = &mp->bucket[r->bucket];
    int64_t per = (b->end - b->start) / sh->dp;
    for (int d = 0; d < sh->dp && !st; d++) {
        int64_t lo = r->start > b->start + d * per ? r->start : b->start + d * per;
        int64_t hi = r->end < b->start + (d + 1) * per ? r->end : b->start + (d + 1) * per;
        if (lo >= hi)
            continue;
        struct span sp = {d, lo - r->start, hi - r->start};
        int64_t at = sh->shard_off[r->bucket] + (lo - (b->start + d * per)); /* in our shard */
        bool mine = d == sh->dp_rank;
        const char *names[3] = {"exp_avg", "exp_avg_sq", "fp32_param"};
        const float *data[3] = {mine ? sh->exp_avg + at : NULL, mine ? sh->exp_avg_sq + at : NULL,
                                p.data + sp.fs};
        for (int j = 0; j < 3 && !st; j++) {
            char key[600];
            snprintf(key, sizeof(key), "optimizer.state.%s.%.512s", names[j], where.key);
            st = add_tensor(pl, m, key, where.layer, &p, data[j], MC_DTYPE_F32, sp);
        }
    }
    return st;
}

static mc_status plan_distopt(struct plan *pl, const struct mc_ckpt_state *s)
{
    if (!s->opts.save_optim || !s->distopt)
        return MC_OK;
    int nc = s->n_chunks > 1 ? s->n_chunks : 1;
    mc_status st = MC_OK;
    for (int c = 0; c < nc && !st; c++) {
        mc_distopt *o = nc > 1 ? s->distopts[c] : s->distopt;
        const mc_gpt_model *m = nc > 1 ? s->chunks[c] : s->model;
        const struct mc_pgb_map *mp = mc_distopt_map(o);
        struct mc_distopt_shard sh;
        mc_distopt_shard(o, &sh);
        if (!sh.exp_avg) /* DistributedOptimizer.state_dict() reads Adam's 'step' */
            return mc_error(MC_ERR_UNSUPPORTED, "--save: --optimizer sgd with --use-distributed-optimizer: "
                            "Megatron core_v0.12.1 checkpoints the distributed optimizer's Adam state "
                            "only (its state_dict() reads each parameter's Adam 'step'); checkpoint SGD "
                            "without the distributed optimizer");
        int64_t n = mp->n_params, *idx = mc_alloc((size_t)(n + 1) * sizeof(int64_t));
        if (!idx)
            return MC_ERR_NOMEM;
        for (int64_t i = 0; i < n; i++)
            idx[i] = i;
        order_map = mp;
        qsort(idx, (size_t)n, sizeof(*idx), by_start);
        for (int64_t k = 0; k < n && !st; k++)
            st = distopt_param(pl, m, mp, &sh, idx[k]);
        mc_free(idx);
    }
    return st;
}

/* DistributedOptimizer.sharded_state_dict(sharding_type='dp_zero_gather_scatter'), written
 * without --ckpt-fully-parallel-save: state_dict()'s entries as sharded objects of the
 * model-parallel group (data_parallel_group_idx: the rank in it, pp_rank * tp + tp_rank),
 * "optimizer.distributed.dp_group_idx_<i>.optimizer/shard_0_1" (the torch optimizer's
 * param_groups, each with the step), ".grad_scaler/shard_0_1" (with a loss scaler), then
 * ".param_state/shard_0_1": the state gathered on data-parallel rank 0 as
 * get_parameter_state_dp_zero gives it (the grad buffers' param, exp_avg, exp_avg_sq, as
 * distrib_optim.pt holds them). Only data-parallel rank 0 has them (Megatron's other ranks hold a
 * LocalNonpersistentObject), so it alone writes them. The gather is collective: every rank runs
 * it, `failed` ones too (they join and add nothing). */
static mc_status add_payload(struct plan *pl, int group, const char *name, const struct mc_pk *v)
{
    char fqn[160];
    snprintf(fqn, sizeof(fqn), "optimizer.distributed.dp_group_idx_%d.%s/shard_0_1", group, name);
    mc_status st = add_object(pl, fqn);
    if (!st) {
        pl->it[pl->n - 1].obj = v;
        pl->it[pl->n - 1].holder = 0;
    }
    return st;
}

static mc_status plan_distopt_dp_zero(struct plan *pl, const struct mc_ckpt_state *s, bool failed)
{
    bool first = s->dp_size <= 1 || s->dp_rank == 0;
    struct mc_pk *state = NULL;
    mc_status st = failed ? MC_ERR_INTERNAL : pl->objs ? MC_OK : mc_pk_doc_init(&pl->objs);
    mc_status gst = mc_ckpt_distopt_gather_state(s, st ? NULL : pl->objs, first && !st, &state);
    if (st || (st = gst) || !first)
        return st;
    struct mc_pk *o = mc_ckpt_distopt_dict(pl->objs, s);
    int group = s->pp_rank * (s->tp_size > 1 ? s->tp_size : 1) + s->tp_rank;
    if (!o || !state)
        return MC_ERR_NOMEM;
    st = add_payload(pl, group, "optimizer", mc_pk_get(o, "optimizer"));
    if (!st && mc_pk_get(o, "grad_scaler"))
        st = add_payload(pl, group, "grad_scaler", mc_pk_get(o, "grad_scaler"));
    return st ? st : add_payload(pl, group, "param_state", state);
}

int64_t mc_dist_ckpt_distopt_params(const struct mc_ckpt_state *s, int dp_rank)
{
    int nc = s->n_chunks > 1 ? s->n_chunks : 1;
    int64_t count = 0;
    for (int c = 0; c < nc; c++) {
        mc_distopt *o = nc > 1 ? s->distopts[c] : s->distopt;
        const struct mc_pgb_map *mp = mc_distopt_map(o);
        struct mc_distopt_shard sh;
        mc_distopt_shard(o, &sh);
        for (int64_t i = 0; i < mp->n_params; i++) {
            const struct mc_pgb_range *r = &mp->param[i];
            const struct mc_pgb_bucket *b = &mp->bucket[r->bucket];
            int64_t per = (b->end - b->start) / sh.dp, lo = b->start + dp_rank * per;
            count += r->start < lo + per && r->end > lo;
        }
    }
    return count;
}

/* ---- who writes what: FullyParallelSaveStrategyWrapper (--ckpt-fully-parallel-save) --------- */
/* Megatron's distribute_shards_to_ranks over the data-parallel group: the chunks with a main
 * replica in the group, those held by fewer ranks first, then the larger (bytes), then by shard
 * id (key, global offset, flattened range); each goes to the rank holding it that has the fewest
 * bytes so far (the lower rank on a tie). Every rank computes the same assignment from the same
 * plan, as Megatron's ranks do after exchanging their metadata. Without the wrapper
 * (--no-ckpt-fully-parallel-save) data-parallel rank 0 writes the replicas. */
static const struct item *dist_base;
static int dist_dp;
static int cmp_offsets(const struct item *x, const struct item *y)
{
    for (int k = 0; k < x->nd && k < y->nd; k++)
        if (x->off[k] != y->off[k])
            return x->off[k] < y->off[k] ? -1 : 1;
    return x->nd < y->nd ? -1 : x->nd > y->nd;
}
static int by_coverage(const void *a, const void *b)
{
    const struct item *x = &dist_base[*(const int64_t *)a], *y = &dist_base[*(const int64_t *)b];
    int cx = x->holder < 0 ? dist_dp : 1, cy = y->holder < 0 ? dist_dp : 1;
    int64_t bx = x->numel * (int64_t)mc_dtype_size(x->dt), by = y->numel * (int64_t)mc_dtype_size(y->dt);
    if (cx != cy)
        return cx < cy ? -1 : 1;
    if (bx != by)
        return bx > by ? -1 : 1;
    int c = strcmp(x->fqn, y->fqn);
    if (c)
        return c;
    if ((c = cmp_offsets(x, y)))
        return c;
    if (x->fs != y->fs)
        return x->fs < y->fs ? -1 : 1;
    return x->fe < y->fe ? -1 : x->fe > y->fe;
}

static mc_status distribute(struct plan *pl, int dp, bool parallel)
{
    int64_t *idx = mc_alloc((size_t)(pl->n + 1) * sizeof(int64_t)), nt = 0;
    int64_t *load = mc_calloc((size_t)dp, sizeof(int64_t));
    if (!idx || !load) {
        mc_free(idx), mc_free(load);
        return MC_ERR_NOMEM;
    }
    for (int64_t i = 0; i < pl->n; i++) {
        struct item *x = &pl->it[i];
        x->saver = x->holder >= 0 ? x->holder : 0;
        if (!x->bytes && parallel && dp > 1)
            idx[nt++] = i;
    }
    dist_base = pl->it, dist_dp = dp;
    qsort(idx, (size_t)nt, sizeof(*idx), by_coverage);
    for (int64_t k = 0; k < nt; k++) {
        struct item *x = &pl->it[idx[k]];
        int best = x->holder;
        for (int d = 0; best < 0 && d < dp; d++)
            best = d;
        for (int d = 1; x->holder < 0 && d < dp; d++)
            if (load[d] < load[best])
                best = d;
        x->saver = best;
        load[best] += x->numel * (int64_t)mc_dtype_size(x->dt);
    }
    mc_free(idx), mc_free(load);
    return MC_OK;
}

/* Keeps the items that data-parallel rank `me` holds (held) or writes (!held), in order. */
static void keep(struct plan *pl, int me, bool held)
{
    int64_t n = 0;
    for (int64_t i = 0; i < pl->n; i++) {
        const struct item *x = &pl->it[i];
        if (held ? x->holder < 0 || x->holder == me : x->saver == me)
            pl->it[n++] = *x;
    }
    pl->n = n;
}

/* Megatron's plan lists a key's chunks together, keys in the order they first appear (the
 * layers' stacked keys in layer 0's order, then the later layers' own sharded objects). */
static const struct item *order_base;
static int64_t *first_seen;
static int by_fqn(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    int c = strcmp(order_base[i].fqn, order_base[j].fqn);
    return c ? c : i < j ? -1 : i > j;
}
static int by_first(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    if (first_seen[i] != first_seen[j])
        return first_seen[i] < first_seen[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

static mc_status group_by_key(struct plan *pl)
{
    int64_t n = pl->n, *idx = mc_alloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t *first = mc_alloc((size_t)(n + 1) * sizeof(int64_t));
    struct item *out = mc_alloc((size_t)(n + 1) * sizeof(*out));
    if (!idx || !first || !out) {
        mc_free(idx), mc_free(first), mc_free(out);
        return MC_ERR_NOMEM;
    }
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    order_base = pl->it;
    qsort(idx, (size_t)n, sizeof(*idx), by_fqn);
    for (int64_t k = 0; k < n; k++) /* sorted by (fqn, index): a group's first is its smallest */
        first[idx[k]] = k && !strcmp(pl->it[idx[k]].fqn, pl->it[idx[k - 1]].fqn) ? first[idx[k - 1]] : idx[k];
    first_seen = first;
    qsort(idx, (size_t)n, sizeof(*idx), by_first);
    for (int64_t k = 0; k < n; k++)
        out[k] = pl->it[idx[k]];
    memcpy(pl->it, out, (size_t)n * sizeof(*out));
    mc_free(idx), mc_free(first), mc_free(out);
    return MC_OK;
}

/* ---- the data files ------------------------------------------------------------------------ */
static int64_t item_bytes(const struct item *x) { return x->numel * (int64_t)mc_dtype_size(x->dt); }

static const struct item *sort_base;
static int by_size(const void *a, const void *b)
{
    const int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    int64_t si = item_bytes(&sort_base[i]), sj = item_bytes(&sort_base[j]);
    if (si != sj)
        return si > sj ? -1 : 1;
    return i < j ? -1 : i > j; /* Python's sort is stable */
}

/* _split_by_size_and_type into BINS buckets; *seq: the items in the order they are written
 * (bucket by bucket: its objects, then its tensors as assigned). */
static mc_status split(struct plan *pl, int64_t *seq, int *files)
{
    int64_t nb = 0, nt = 0, *tens = mc_alloc((size_t)(pl->n + 1) * sizeof(int64_t));
    if (!tens)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < pl->n; i++) {
        if (pl->it[i].bytes)
            pl->it[i].bucket = (int)(nb++ % BINS);
        else
            tens[nt++] = i;
    }
    sort_base = pl->it;
    qsort(tens, (size_t)nt, sizeof(*tens), by_size);
    int64_t total[BINS] = {0};
    for (int64_t k = 0; k < nt; k++) { /* the min-heap of (size, bin): the lighter, then the lower */
        int b = 0;
        for (int j = 1; j < BINS; j++)
            if (total[j] < total[b])
                b = j;
        pl->it[tens[k]].bucket = b;
        total[b] += item_bytes(&pl->it[tens[k]]);
    }
    int64_t at = 0;
    *files = 0;
    for (int b = 0; b < BINS; b++) {
        int64_t start = at;
        for (int64_t i = 0; i < pl->n; i++)
            if (pl->it[i].bytes && pl->it[i].bucket == b)
                seq[at++] = i;
        for (int64_t k = 0; k < nt; k++)
            if (pl->it[tens[k]].bucket == b)
                seq[at++] = tens[k];
        for (int64_t q = start; q < at; q++)
            pl->it[seq[q]].file = *files;
        if (at > start)
            ++*files; /* empty buckets get no file */
    }
    mc_free(tens);
    return MC_OK;
}

/* The chunk as DCP sees it. A flattened range is reformulated as Megatron's torch strategy does
 * (nd_flattened_tensor_reformulated_global_shape): a global [g0/s0, ..., prod(s)] of which the
 * chunk is [1, ..., 1, fe - fs] at [off0/s0, ..., fs]. Returns the dimensions. */
static int dcp_geom(const struct item *x, int64_t *g, int64_t *off, int64_t *sz)
{
    if (!x->flat) {
        memcpy(g, x->g, (size_t)x->nd * sizeof(*g));
        memcpy(off, x->off, (size_t)x->nd * sizeof(*off));
        memcpy(sz, x->sz, (size_t)x->nd * sizeof(*sz));
        return x->nd;
    }
    int64_t local = 1;
    for (int k = 0; k < x->nd; k++) {
        g[k] = x->g[k] / x->sz[k];
        off[k] = x->off[k] / x->sz[k];
        sz[k] = 1;
        local *= x->sz[k];
    }
    g[x->nd] = local, off[x->nd] = x->fs, sz[x->nd] = x->fe - x->fs;
    return x->nd + 1;
}

static mc_status write_item(mc_pk_doc *d, FILE *f, const char *path, struct item *x)
{
    struct mc_pk *v;
    mc_async_test_slow_write();
    if (x->bytes) { /* torch.save of [the object's data]: [None] for the local spec's extra state */
        v = mc_pk_new(d, MC_PK_LIST);
        if (!v || mc_pk_append(d, v, x->obj ? (struct mc_pk *)x->obj : mc_pk_none(d)))
            return MC_ERR_NOMEM;
    } else {
        int64_t g[MC_PK_MAX_DIM], off[MC_PK_MAX_DIM], sz[MC_PK_MAX_DIM];
        int nd = dcp_geom(x, g, off, sz);
        struct mc_pk *stg = mc_pk_storage(d, x->dt, x->numel, x->data);
        v = stg ? mc_pk_tensor(d, stg, 0, nd, sz, NULL) : NULL;
        if (!v)
            return MC_ERR_NOMEM;
    }
    long at = ftell(f);
    if (at < 0)
        return mc_error(MC_ERR_IO, "--save: %s: %s", path, strerror(errno));
    x->at = (uint64_t)at;
    return mc_torch_save_stream(d, v, f, path, &x->len);
}

/* Writes the files split() planned: plain file I/O and no collective, so that --async-save can
 * run it on its writer thread (async_utils.c). */
static mc_status write_files(struct plan *pl, const int64_t *seq, int files, const char *dir, int rank)
{
    mc_status st = MC_OK;
    int64_t q = 0;
    for (int k = 0; k < files && !st; k++) {
        char path[4400];
        snprintf(path, sizeof(path), "%s/__%d_%d.distcp", dir, rank, k);
        FILE *f = fopen(path, "wb");
        mc_pk_doc *d = NULL;
        if (!f)
            st = mc_error(MC_ERR_IO, "--save: cannot create %s: %s", path, strerror(errno));
        else if ((st = mc_pk_doc_init(&d)) == MC_OK)
            for (; q < pl->n && pl->it[seq[q]].file == k && !st; q++)
                st = write_item(d, f, path, &pl->it[seq[q]]);
        if (f && !st && (fflush(f) || fsync(fileno(f))))
            st = mc_error(MC_ERR_IO, "--save: cannot write %s: %s", path, strerror(errno));
        if (f && fclose(f) && !st)
            st = mc_error(MC_ERR_IO, "--save: cannot write %s: %s", path, strerror(errno));
        if (d)
            mc_pk_doc_free(d);
    }
    return st;
}

/* ---- every rank's items onto rank 0 --------------------------------------------------------- */
/* Record: ok byte first; then per item: bytes flag, dtype, fqn length (u16) + fqn, nd, nd x (g, off,
 * sz), flat flag, fs, fe, file, at, len. */
struct buf {
    uint8_t *p;
    size_t n, cap;
};

static mc_status put(struct buf *b, const void *x, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = mc_alloc(cap);
        if (!p)
            return MC_ERR_NOMEM;
        if (b->n)
            memcpy(p, b->p, b->n);
        mc_free(b->p);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
    return MC_OK;
}

static mc_status encode(const struct plan *pl, bool ok, struct buf *b)
{
    uint8_t okb = ok;
    mc_status st = put(b, &okb, 1);
    for (int64_t i = 0; ok && i < pl->n && !st; i++) {
        const struct item *x = &pl->it[i];
        uint8_t fl = x->bytes, nd = (uint8_t)x->nd, file = (uint8_t)x->file, dt = (uint8_t)x->dt;
        uint16_t len = (uint16_t)strlen(x->fqn);
        st = put(b, &fl, 1);
        st = st ? st : put(b, &dt, 1);
        st = st ? st : put(b, &len, 2);
        st = st ? st : put(b, x->fqn, len);
        st = st ? st : put(b, &nd, 1);
        for (int k = 0; k < x->nd && !st; k++) {
            st = put(b, &x->g[k], 8);
            st = st ? st : put(b, &x->off[k], 8);
            st = st ? st : put(b, &x->sz[k], 8);
        }
        uint8_t flat = x->flat;
        st = st ? st : put(b, &flat, 1);
        st = st ? st : put(b, &x->fs, 8);
        st = st ? st : put(b, &x->fe, 8);
        st = st ? st : put(b, &file, 1);
        st = st ? st : put(b, &x->at, 8);
        st = st ? st : put(b, &x->len, 8);
    }
    return st;
}

static void take(const uint8_t **p, void *x, size_t n)
{
    memcpy(x, *p, n);
    *p += n;
}

/* Rank r's items back from its record (in plan order). */
static mc_status decode(const uint8_t *p, const uint8_t *end, struct plan *pl, bool *ok)
{
    uint8_t okb;
    take(&p, &okb, 1);
    *ok = okb;
    while (okb && p < end) {
        struct item *x = new_item(pl);
        if (!x)
            return MC_ERR_NOMEM;
        uint8_t fl, nd, file, dt;
        uint16_t len;
        take(&p, &fl, 1);
        take(&p, &dt, 1);
        x->dt = (enum mc_dtype)dt;
        take(&p, &len, 2);
        take(&p, x->fqn, len);
        x->fqn[len] = 0;
        take(&p, &nd, 1);
        x->bytes = fl;
        x->nd = nd;
        for (int k = 0; k < nd; k++) {
            take(&p, &x->g[k], 8);
            take(&p, &x->off[k], 8);
            take(&p, &x->sz[k], 8);
        }
        uint8_t flat;
        take(&p, &flat, 1);
        x->flat = flat;
        take(&p, &x->fs, 8);
        take(&p, &x->fe, 8);
        take(&p, &file, 1);
        x->file = file;
        take(&p, &x->at, 8);
        take(&p, &x->len, 8);
    }
    return MC_OK;
}

/* ---- .metadata ------------------------------------------------------------------------------ */
static struct mc_pk *int_tuple(mc_pk_doc *d, int n, const int64_t *x)
{
    struct mc_pk *t = mc_pk_new(d, MC_PK_TUPLE);
    for (int k = 0; t && k < n; k++)
        if (mc_pk_append(d, t, mc_pk_int(d, x[k])))
            return NULL;
    return t;
}

static struct mc_pk *torch_size(mc_pk_doc *d, int n, const int64_t *x)
{
    return mc_pk_enum(d, "torch", "Size", int_tuple(d, n, x)); /* torch.Size((...)) */
}

/* TensorProperties.__getstate__: (dtype, layout, requires_grad, memory_format, pin_memory). */
static struct mc_pk *properties(mc_pk_doc *d, enum mc_dtype dt)
{
    const char *name = dt == MC_DTYPE_BF16 ? "bfloat16" : dt == MC_DTYPE_F16 ? "float16" : "float32";
    struct mc_pk *p = mc_pk_object(d, META, "TensorProperties"), *t = mc_pk_new(d, MC_PK_TUPLE);
    if (!p || !t || mc_pk_append(d, t, mc_pk_global(d, "torch", name)) ||
        mc_pk_append(d, t, mc_pk_enum(d, "torch.serialization", "_get_layout", mc_pk_str(d, "torch.strided"))) ||
        mc_pk_append(d, t, mc_pk_bool(d, false)) ||
        mc_pk_append(d, t, mc_pk_enum(d, META, "_MEM_FORMAT_ENCODING", mc_pk_int(d, 0))) ||
        mc_pk_append(d, t, mc_pk_bool(d, false)) || mc_pk_set(d, p, "__state__", t))
        return NULL;
    return p;
}

static mc_status add_chunk(mc_pk_doc *d, struct mc_pk *sdm, const struct item *x)
{
    int64_t g[MC_PK_MAX_DIM], off[MC_PK_MAX_DIM], sz[MC_PK_MAX_DIM];
    int nd = dcp_geom(x, g, off, sz);
    struct mc_pk *tm = mc_pk_get(sdm, x->fqn);
    if (!tm) {
        tm = mc_pk_object(d, META, "TensorStorageMetadata");
        struct mc_pk *chunks = mc_pk_new(d, MC_PK_LIST);
        if (!tm || !chunks || mc_pk_set(d, tm, "properties", properties(d, x->dt)) ||
            mc_pk_set(d, tm, "size", torch_size(d, nd, g)) || mc_pk_set(d, tm, "chunks", chunks) ||
            mc_pk_set(d, sdm, x->fqn, tm))
            return MC_ERR_NOMEM;
    }
    struct mc_pk *c = mc_pk_object(d, META, "ChunkStorageMetadata");
    if (!c || mc_pk_set(d, c, "offsets", torch_size(d, nd, off)) ||
        mc_pk_set(d, c, "sizes", torch_size(d, nd, sz)))
        return MC_ERR_NOMEM;
    return mc_pk_append(d, mc_pk_get(tm, "chunks"), c);
}

static mc_status add_storage(mc_pk_doc *d, struct mc_pk *storage, const struct item *x, int rank)
{
    struct mc_pk *idx = mc_pk_object(d, META, "MetadataIndex");
    struct mc_pk *info = mc_pk_object(d, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
    char file[64];
    snprintf(file, sizeof(file), "__%d_%d.distcp", rank, x->file);
    int64_t g[MC_PK_MAX_DIM], off[MC_PK_MAX_DIM], sz[MC_PK_MAX_DIM];
    int nd = dcp_geom(x, g, off, sz);
    /* MetadataIndex.__init__ sets fqn, index, then offset (tensors only) */
    if (!idx || !info || mc_pk_set(d, idx, "fqn", mc_pk_str(d, x->fqn)) ||
        mc_pk_set(d, idx, "index", mc_pk_none(d)) ||
        (!x->bytes && mc_pk_set(d, idx, "offset", torch_size(d, nd, off))) ||
        mc_pk_set(d, info, "relative_path", mc_pk_str(d, file)) ||
        mc_pk_set(d, info, "offset", mc_pk_int(d, (int64_t)x->at)) ||
        mc_pk_set(d, info, "length", mc_pk_int(d, (int64_t)x->len)))
        return MC_ERR_NOMEM;
    mc_status st = mc_pk_append(d, storage, idx);
    return st ? st : mc_pk_append(d, storage, info);
}

static int by_place(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* A save id in uuid form from the directory and the items: the same save gives the same
 * bytes (DCP draws a random uuid4 here; nothing reads it back). */
static void save_id(char *out, size_t n, const char *dir, const struct plan *all, int world)
{
    uint64_t h[2] = {1469598103934665603ull, 1099511628211ull};
    for (const char *c = dir; *c; c++)
        h[0] = (h[0] ^ (uint8_t)*c) * 1099511628211ull;
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < all[r].n; i++)
            h[1] = (h[1] ^ all[r].it[i].len ^ (all[r].it[i].at << 20)) * 1469598103934665603ull;
    snprintf(out, n, "%08x-%04x-4%03x-8%03x-%012llx", (unsigned)(h[0] >> 32), (unsigned)(h[0] >> 16) & 0xffff,
             (unsigned)h[0] & 0xfff, (unsigned)(h[1] >> 52) & 0xfff,
             (unsigned long long)(h[1] & 0xffffffffffffull));
}

/* Megatron's mcore_data of a tensor: {} or, for a flattened one, the shape it had before the
 * reformulation, {'nd_reformulated_orig_global_shape': (g0, g1, ...)}. */
static struct mc_pk *mcore_entry(mc_pk_doc *d, const struct item *x)
{
    struct mc_pk *e = mc_pk_new(d, MC_PK_DICT);
    if (e && x->flat && mc_pk_set(d, e, "nd_reformulated_orig_global_shape", int_tuple(d, x->nd, x->g)))
        return NULL;
    return e;
}

static struct mc_pk *metadata(mc_pk_doc *d, struct plan *all, int world, const char *final_dir)
{
    struct mc_pk *m = mc_pk_object(d, META, "Metadata"), *sdm = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *storage = mc_pk_new(d, MC_PK_DICT), *mcore = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *sm = mc_pk_object(d, META, "StorageMeta");
    if (!m || !sdm || !storage || !mcore || !sm)
        return NULL;
    /* _create_global_metadata: keys in first-seen order over the ranks' plans */
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < all[r].n; i++) {
            const struct item *x = &all[r].it[i];
            mc_status st = x->bytes ? mc_pk_set(d, sdm, x->fqn, mc_pk_object(d, META, "BytesStorageMetadata"))
                                    : add_chunk(d, sdm, x);
            if (!st && !x->bytes && !mc_pk_get(mcore, x->fqn))
                st = mc_pk_set(d, mcore, x->fqn, mcore_entry(d, x));
            if (st)
                return NULL;
        }
    /* storage_data: each rank's write results, file by file in write order */
    for (int r = 0; r < world; r++) {
        qsort(all[r].it, (size_t)all[r].n, sizeof(*all[r].it), by_place);
        for (int64_t i = 0; i < all[r].n; i++)
            if (add_storage(d, storage, &all[r].it[i], r))
                return NULL;
    }
    char id[64];
    save_id(id, sizeof(id), final_dir, all, world);
    if (mc_pk_set(d, sm, "checkpoint_id", mc_pk_str(d, final_dir)) ||
        mc_pk_set(d, sm, "save_id", mc_pk_str(d, id)) || mc_pk_set(d, sm, "load_id", mc_pk_none(d)) ||
        mc_pk_set(d, sm, "modules", mc_pk_new(d, MC_PK_LIST)))
        return NULL;
    if (mc_pk_set(d, m, "state_dict_metadata", sdm) || mc_pk_set(d, m, "planner_data", mc_pk_none(d)) ||
        mc_pk_set(d, m, "storage_data", storage) || mc_pk_set(d, m, "storage_meta", sm) ||
        mc_pk_set(d, m, "version", mc_pk_str(d, "1.0.0")) || mc_pk_set(d, m, "mcore_data", mcore))
        return NULL;
    return m;
}

static mc_status write_small(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return mc_error(MC_ERR_IO, "--save: cannot create %s: %s", path, strerror(errno));
    bool ok = fwrite(p, 1, n, f) == n && !fflush(f) && !fsync(fileno(f));
    ok &= !fclose(f);
    return ok ? MC_OK : mc_error(MC_ERR_IO, "--save: cannot write %s: %s", path, strerror(errno));
}

static mc_status write_metadata(struct plan *all, int world, const char *tmp_dir, const char *final_dir,
                                mc_pk_doc *d, const struct mc_pk *common)
{
    static const char json[] = "{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1, "
                               "\"common_backend\": \"torch\", \"common_backend_version\": 1}";
    struct mc_pk *m = metadata(d, all, world, final_dir);
    uint8_t *buf;
    size_t n;
    struct mc_pk **stl;
    int64_t nst;
    char path[4400];
    snprintf(path, sizeof(path), "%s/common.pt", tmp_dir);
    mc_status st = m ? mc_pk_dump(d, m, &buf, &n, &stl, &nst) : MC_ERR_NOMEM;
    st = st ? st : write_small(tmp_dir, ".metadata", buf, n);
    st = st || !common ? st : mc_torch_save(d, common, path); /* NULL: written already */
    return st ? st : write_small(tmp_dir, "metadata.json", json, sizeof(json) - 1);
}

/* A torch_dist save split where --async-save needs it: planning (main thread, may gather over
 * the data-parallel group), the files (no collective: the async writer thread may run it), and
 * the metadata (main thread, gathers). With `snapshot` the planned tensors are copied into one
 * block the plan owns, so that training may change the state while the files are written. */
struct mc_dist_ckpt_plan {
    struct plan pl;
    int64_t *seq; /* the items in the order they are written (split) */
    int files;
    void *snapshot;
};

/* The copy of every tensor the plan writes; x->data then points into it. */
static mc_status take_snapshot(struct mc_dist_ckpt_plan *p)
{
    int64_t total = 0;
    for (int64_t i = 0; i < p->pl.n; i++)
        if (!p->pl.it[i].bytes && p->pl.it[i].data)
            total += (item_bytes(&p->pl.it[i]) + 63) / 64 * 64;
    uint8_t *at = p->snapshot = mc_alloc((size_t)total + 1);
    if (!at)
        return mc_error(MC_ERR_NOMEM, "--async-save: cannot allocate the %lld-byte copy of the "
                        "state to save", (long long)total);
    for (int64_t i = 0; i < p->pl.n; i++) {
        struct item *x = &p->pl.it[i];
        if (x->bytes || !x->data)
            continue;
        memcpy(at, x->data, (size_t)item_bytes(x));
        x->data = at;
        at += (item_bytes(x) + 63) / 64 * 64;
    }
    return MC_OK;
}

mc_status mc_dist_ckpt_plan_init(const struct mc_ckpt_state *s, bool snapshot,
                                 struct mc_dist_ckpt_plan **out)
{
    struct mc_dist_ckpt_plan *p = *out = mc_calloc(1, sizeof(*p));
    if (!p)
        return MC_ERR_NOMEM;
    struct plan *pl = &p->pl;
    int nc = s->n_chunks > 1 ? s->n_chunks : 1;
    mc_status st = MC_OK;
    for (int c = 0; c < nc && !st; c++)
        st = plan_model(pl, s, nc > 1 ? s->chunks[c] : s->model);
    st = st ? st : plan_optimizer(pl, s);
    if (s->opts.save_optim && s->distopt && !s->opts.fully_parallel_save) {
        mc_status zst = plan_distopt_dp_zero(pl, s, st != MC_OK); /* collective */
        st = st ? st : zst;
    } else {
        st = st ? st : plan_distopt(pl, s);
    }
    st = st ? st : plan_rerun_state(pl, s);
    st = st ? st : plan_rng_state(pl, s);
    /* Megatron's plan order is that of the chunks this rank holds; then it writes its share */
    int dp = s->dp_size > 1 ? s->dp_size : 1, me = dp > 1 ? s->dp_rank : 0;
    st = st ? st : distribute(pl, dp, s->opts.fully_parallel_save);
    if (!st)
        keep(pl, me, true);
    st = st ? st : group_by_key(pl);
    if (!st)
        keep(pl, me, false);
    if (!st && !(p->seq = mc_alloc((size_t)(pl->n + 1) * sizeof(int64_t))))
        st = MC_ERR_NOMEM;
    st = st ? st : split(pl, p->seq, &p->files);
    return st || !snapshot ? st : take_snapshot(p);
}

mc_status mc_dist_ckpt_plan_write(struct mc_dist_ckpt_plan *p, const char *tmp_dir, int rank)
{
    return write_files(&p->pl, p->seq, p->files, tmp_dir, rank);
}

void mc_dist_ckpt_plan_free(struct mc_dist_ckpt_plan *p)
{
    if (!p)
        return;
    plan_free(&p->pl);
    mc_free(p->seq);
    mc_free(p->snapshot);
    mc_free(p);
}

mc_status mc_dist_ckpt_plan_finish(const struct mc_ckpt_state *s, struct mc_dist_ckpt_plan *p,
                                   mc_status st, const char *tmp_dir, const char *final_dir,
                                   mc_pk_doc *d, const struct mc_pk *common)
{
    /* every rank's items (or its failure: a single 0 byte) onto every rank; a rank that failed
     * still joins, so that no rank waits for it */
    struct buf b = {0};
    uint8_t failed = 0;
    if (!st && (st = p ? encode(&p->pl, true, &b) : MC_ERR_NOMEM))
        b.n = 0;
    const void *rec = st ? (const void *)&failed : b.p;
    int64_t rec_n = st ? 1 : (int64_t)b.n;
    uint8_t *allb = NULL;
    int64_t *offs = NULL;
    int world = 1;
    mc_status gst = s->gather ? s->gather(s->barrier_ctx, rec, rec_n, &allb, &offs, &world) : MC_OK;
    st = st ? st : gst;
    if (!s->gather && !st) { /* one process: its own record */
        allb = b.p;
        b.p = NULL;
        if (!(offs = mc_alloc(2 * sizeof(int64_t))))
            st = MC_ERR_NOMEM;
        else
            offs[0] = 0, offs[1] = (int64_t)b.n;
    }
    mc_free(b.p);
    for (int r = 0; !st && r < world; r++)
        if (!allb[offs[r]])
            st = mc_error(MC_ERR_IO, "saving the torch_dist checkpoint failed on another rank (its "
                          "error message says why)");
    struct plan *all = st || s->rank ? NULL : mc_calloc((size_t)world, sizeof(*all));
    if (!st && s->rank == 0) {
        bool ok;
        for (int r = 0; r < world && !st; r++)
            st = !all ? MC_ERR_NOMEM : decode(allb + offs[r], allb + offs[r + 1], &all[r], &ok);
        st = st ? st : write_metadata(all, world, tmp_dir, final_dir, d, common);
    }
    for (int r = 0; all && r < world; r++)
        mc_free(all[r].it);
    mc_free(all);
    mc_free(allb);
    mc_free(offs);
    return st;
}

mc_status mc_dist_ckpt_write(const struct mc_ckpt_state *s, const char *tmp_dir,
                             const char *final_dir, mc_pk_doc *d, const struct mc_pk *common)
{
    struct mc_dist_ckpt_plan *p;
    mc_status st = mc_dist_ckpt_plan_init(s, false, &p);
    st = st ? st : s->rank == 0 && !common ? MC_ERR_NOMEM : MC_OK;
    st = st ? st : mc_dist_ckpt_plan_write(p, tmp_dir, s->rank);
    /* a rank that failed still joins the gather inside: the others wait in it */
    st = mc_dist_ckpt_plan_finish(s, p, st, tmp_dir, final_dir, d, common);
    mc_dist_ckpt_plan_free(p);
    return st;
}

/* ---- plans built item by item (the checkpoint converter: no model, no ranks) ----------------- */
mc_status mc_dist_ckpt_plan_new(struct mc_dist_ckpt_plan **out)
{
    *out = mc_calloc(1, sizeof(**out));
    return *out ? MC_OK : MC_ERR_NOMEM;
}

mc_status mc_dist_ckpt_plan_chunk(struct mc_dist_ckpt_plan *p, const char *key, int nd,
                                  const int64_t *g, const int64_t *off, const int64_t *sz,
                                  const void *data, enum mc_dtype dt)
{
    if (nd < 1 || nd > MC_PK_MAX_DIM - 1 || strlen(key) >= sizeof(p->pl.it[0].fqn))
        return mc_error(MC_ERR_UNSUPPORTED, "torch_dist save: %s: key or rank too large", key);
    for (int k = 0; k < nd; k++)
        if (off[k] < 0 || sz[k] < 0 || off[k] + sz[k] > g[k])
            return mc_error(MC_ERR_INTERNAL, "torch_dist save: a chunk of %s outside the tensor", key);
    return add_item(&p->pl, key, nd, g, off, sz, data, dt, EVERY);
}

mc_status mc_dist_ckpt_plan_object(struct mc_dist_ckpt_plan *p, const char *fqn, const struct mc_pk *value)
{
    mc_status st = add_object(&p->pl, fqn);
    if (!st)
        p->pl.it[p->pl.n - 1].obj = value;
    return st;
}

mc_status mc_dist_ckpt_plan_seal(struct mc_dist_ckpt_plan *p)
{
    mc_status st = distribute(&p->pl, 1, false);
    st = st ? st : group_by_key(&p->pl);
    if (!st && !(p->seq = mc_alloc((size_t)(p->pl.n + 1) * sizeof(int64_t))))
        st = MC_ERR_NOMEM;
    return st ? st : split(&p->pl, p->seq, &p->files);
}

mc_status mc_dist_ckpt_write_metadata(struct mc_dist_ckpt_plan *const *plans, int world,
                                      const char *tmp_dir, const char *final_dir, mc_pk_doc *d,
                                      const struct mc_pk *common)
{
    struct plan *all = mc_calloc((size_t)world, sizeof(*all));
    if (!all)
        return MC_ERR_NOMEM;
    for (int r = 0; r < world; r++)
        all[r] = plans[r]->pl; /* shallow: write_metadata reorders the items in place */
    mc_status st = write_metadata(all, world, tmp_dir, final_dir, d, common);
    mc_free(all);
    return st;
}
