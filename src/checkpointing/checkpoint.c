/* save_checkpoint / load_checkpoint of megatron/training/checkpointing.py (Megatron-LM
 * core_v0.12.1) for `--ckpt-format torch`, the format half: the directory layout, the tracker
 * file, and the state dict Megatron builds in generate_state_dict: args, checkpoint_version,
 * iteration, model, optimizer (the fp32 optimizer's torch state_dict: spec
 * megatron-model-parallel-ckpt.md 7.2), opt_param_scheduler, rerun_state_machine,
 * num_floating_point_operations_so_far. Driven by a plain struct mc_ckpt_options: what the
 * arguments ask for, the args Namespace and check_checkpoint_args are the training layer's
 * (src/training/checkpointing.c). Writes are atomic: every file goes through a temporary name,
 * is fsync'ed and renamed; the tracker file is written last. */
#include "megatron/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpointing/async_utils.h"
#include "checkpointing/checkpoint_internal.h"
#include "checkpointing/dist_checkpoint.h"
#include "checkpointing/distrib_optim.h"
#include "checkpointing/rng_state.h"
#include "checkpointing/state_dict_names.h"
#include "checkpointing/torch_pickle.h"
#include "checkpointing/torch_zip.h"
#include "core/dtype.h"
#include "core/pyformat.h"
#include "optimizer/lr_scheduler.h"

#define CKPT_VERSION 3.0
#define TRACKER "latest_checkpointed_iteration.txt"

/* get_checkpoint_name: mp_rank_TT, or mp_rank_TT_PPP with pipeline parallelism. */
int mc_ckpt_name(char *buf, size_t n, const char *dir, int64_t iteration, bool release,
                 int tp_rank, int pp_rank, int pp_size)
{
    char it[32], rank[32];
    if (release)
        snprintf(it, sizeof(it), "release");
    else
        snprintf(it, sizeof(it), "iter_%07lld", (long long)iteration);
    if (pp_size > 1)
        snprintf(rank, sizeof(rank), "mp_rank_%02d_%03d", tp_rank, pp_rank);
    else
        snprintf(rank, sizeof(rank), "mp_rank_%02d", tp_rank);
    return snprintf(buf, n, "%s/%s/%s/model_optim_rng.pt", dir, it, rank);
}

static bool single(const struct mc_ckpt_state *s) { return !s->barrier; }
static int tp_size(const struct mc_ckpt_state *s) { return s->tp_size > 1 ? s->tp_size : 1; }
static int pp_size(const struct mc_ckpt_state *s) { return s->pp_size > 1 ? s->pp_size : 1; }

/* Interleaved pipelining: the model chunks of this rank (one without it). The optimizer numbers
 * the parameters of every chunk, chunk 0's first (mc_opt_param_state). */
static int n_chunks(const struct mc_ckpt_state *s) { return s->n_chunks > 1 ? s->n_chunks : 1; }
static mc_gpt_model *chunk(const struct mc_ckpt_state *s, int c)
{
    return s->n_chunks > 1 ? s->chunks[c] : s->model;
}
static struct mc_distopt *chunk_distopt(const struct mc_ckpt_state *s, int c)
{
    return s->n_chunks > 1 ? s->distopts[c] : s->distopt;
}
static int64_t total_params(const struct mc_ckpt_state *s)
{
    int64_t n = 0;
    for (int c = 0; c < n_chunks(s); c++)
        n += mc_gpt_num_params(chunk(s, c));
    return n;
}
static struct mc_param_view opt_param(const struct mc_ckpt_state *s, int64_t gi)
{
    int c = 0;
    while (gi >= mc_gpt_num_params(chunk(s, c)))
        gi -= mc_gpt_num_params(chunk(s, c++));
    return mc_gpt_param(chunk(s, c), gi);
}

static int ckpt_name(const struct mc_ckpt_state *s, char *buf, size_t n, const char *dir,
                     int64_t iteration, bool release)
{
    return mc_ckpt_name(buf, n, dir, iteration, release, s->tp_rank, s->pp_rank, pp_size(s));
}

/* ---- model ----------------------------------------------------------------------------------- */
/* The names this run's model has in Megatron: --use-legacy-models, else --transformer-impl. */
static enum mc_sd_scheme save_scheme(const struct mc_ckpt_options *o)
{
    if (o->legacy_names)
        return MC_SD_LEGACY;
    return o->local_names ? MC_SD_LOCAL : MC_SD_TE;
}

static bool tied_embeddings(const mc_gpt_model *m)
{
    return !mc_gpt_model_config(m)->untie_embeddings_and_output_weights;
}

/* mcore linear layers (Megatron's TE-compatible modules) carry `_extra_state` (None here). */
static bool has_extra_state(const char *module)
{
    static const char *const linear[] = {"linear_proj", "linear_qkv", "linear_fc1", "linear_fc2",
                                         "output_layer", NULL};
    const char *last = strrchr(module, '.');
    last = last ? last + 1 : module;
    for (int k = 0; linear[k]; k++)
        if (!strcmp(last, linear[k]))
            return true;
    return false;
}

static size_t module_len(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot ? (size_t)(dot - name) : 0;
}

static struct mc_pk *param_tensor(mc_pk_doc *d, const float *data, int ndim, const int64_t *shape,
                                  int64_t numel)
{
    return mc_pk_tensor(d, mc_pk_storage(d, MC_DTYPE_F32, numel, data), 0, ndim, shape, NULL);
}

/* A model tensor in the run's params_dtype: fp32 as it is, or the 16-bit weights the model
 * computes with, round(main param) (nearest even), a copy owned by the doc. */
static struct mc_pk *model_tensor(mc_pk_doc *d, enum mc_dtype dt, const struct mc_param_view *p)
{
    if (dt == MC_DTYPE_F32)
        return param_tensor(d, p->data, p->ndim, p->shape, p->numel);
    void *w = mc_pk_doc_alloc(d, (size_t)p->numel * mc_dtype_size(dt));
    if (!w)
        return NULL;
    mc_dtype_from_f32(w, dt, p->data, p->numel);
    return mc_pk_tensor(d, mc_pk_storage(d, dt, p->numel, w), 0, p->ndim, p->shape, NULL);
}

static bool mixed(const struct mc_ckpt_state *s) { return s->params_dtype != MC_DTYPE_F32; }

/* One model state-dict entry, named in the target scheme; sorted into its state_dict order. */
struct sd_entry {
    char name[256];
    struct mc_pk *val;
    long order;
    int64_t seq;
};

struct sd_list {
    struct sd_entry *e;
    int64_t n, cap;
    enum mc_sd_scheme scheme;
    bool tied;
    enum mc_dtype dt; /* the model tensors' dtype (params_dtype) */
};

/* Appends the local-spec entry `local` under its name in l->scheme (if that model has it). */
static mc_status sd_add(struct sd_list *l, const char *local, struct mc_pk *val, bool mapped)
{
    if (!val)
        return MC_ERR_NOMEM;
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        struct sd_entry *e = mc_alloc((size_t)cap * sizeof(*e));
        if (!e)
            return MC_ERR_NOMEM;
        if (l->n)
            memcpy(e, l->e, (size_t)l->n * sizeof(*e));
        mc_free(l->e);
        l->e = e;
        l->cap = cap;
    }
    struct sd_entry *x = &l->e[l->n];
    bool absent = false;
    mc_status st = mapped ? (snprintf(x->name, sizeof(x->name), "%s", local), MC_OK)
                          : mc_sd_name_map(MC_SD_LOCAL, l->scheme, local, l->tied, x->name,
                                           sizeof(x->name), &absent);
    if (st || absent)
        return st;
    x->val = val;
    x->order = mc_sd_name_order(l->scheme, x->name);
    x->seq = l->n++;
    return MC_OK;
}

static int sd_cmp(const void *a, const void *b)
{
    const struct sd_entry *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The model's entries in local order: parameters, `_extra_state` after each linear module, the
 * output layer's state on the last stage even when tied (no weight there with pp == 1), and the
 * scheme's own per-layer extras (TE core_attention). */
static mc_status collect_model(mc_pk_doc *d, const mc_gpt_model *m, bool last_stage, struct sd_list *l)
{
    int64_t n = mc_gpt_num_params(m);
    long last_layer = -1;
    bool output_layer = false;
    mc_status st = MC_OK;
    for (int64_t i = 0; !st && i < n; i++) {
        struct mc_param_view p = mc_gpt_param(m, i);
        long layer;
        if (sscanf(p.name, "decoder.layers.%ld.", &layer) == 1 && layer != last_layer) {
            for (const char *const *x = mc_sd_layer_extras(l->scheme); !st && *x; x++) {
                char key[256];
                snprintf(key, sizeof(key), "decoder.layers.%ld.%s", layer, *x);
                st = sd_add(l, key, mc_pk_none(d), true);
            }
            last_layer = layer;
        }
        st = st ? st : sd_add(l, p.name, model_tensor(d, l->dt, &p), false);
        size_t ml = module_len(p.name);
        output_layer |= !strncmp(p.name, "output_layer.", 13);
        const char *next = i + 1 < n ? mc_gpt_param(m, i + 1).name : "";
        char mod[256];
        snprintf(mod, sizeof(mod), "%.*s", (int)ml, p.name);
        if (!st && (module_len(next) != ml || strncmp(next, p.name, ml)) && has_extra_state(mod)) {
            char key[300];
            snprintf(key, sizeof(key), "%s._extra_state", mod);
            st = sd_add(l, key, mc_pk_none(d), false);
        }
    }
    if (!st && !output_layer && last_stage) /* tied, pp == 1: the state without a weight */
        st = sd_add(l, "output_layer._extra_state", mc_pk_none(d), false);
    if (!st)
        qsort(l->e, (size_t)l->n, sizeof(*l->e), sd_cmp);
    return st;
}

/* The legacy model's nested dicts: leading components of a key are plain dicts except the
 * innermost (a module's state_dict(), an OrderedDict); the rest of the key is flat. */
static mc_status legacy_insert(mc_pk_doc *d, struct mc_pk *root, const char *key, struct mc_pk *val)
{
    int depth = mc_sd_legacy_depth(key);
    struct mc_pk *at = root;
    const char *p = key;
    for (int k = 0; k < depth; k++) {
        const char *dot = strchr(p, '.');
        char part[128];
        if (!dot)
            return mc_error(MC_ERR_INTERNAL, "legacy state dict key '%s' has fewer than %d levels", key, depth);
        snprintf(part, sizeof(part), "%.*s", (int)(dot - p), p);
        struct mc_pk *next = (struct mc_pk *)mc_pk_get(at, part);
        if (!next) {
            next = mc_pk_new(d, k + 1 == depth ? MC_PK_ODICT : MC_PK_DICT);
            mc_status st = mc_pk_set(d, at, part, next);
            if (st)
                return st;
        }
        at = next;
        p = dot + 1;
    }
    return mc_pk_set(d, at, p, val);
}

static struct mc_pk *model_dict(mc_pk_doc *d, const struct mc_ckpt_state *s, const mc_gpt_model *m)
{
    struct sd_list l = {.scheme = save_scheme(&s->opts), .tied = tied_embeddings(m),
                        .dt = s->params_dtype};
    const struct mc_gpt_config *c = mc_gpt_model_config(m);
    bool last = (c->pipeline_model_parallel_size <= 1 ||
                 c->pipeline_model_parallel_rank == c->pipeline_model_parallel_size - 1) &&
                (c->virtual_pipeline_model_parallel_size <= 1 ||
                 c->virtual_pipeline_model_parallel_rank == c->virtual_pipeline_model_parallel_size - 1);
    struct mc_pk *od = mc_pk_new(d, l.scheme == MC_SD_LEGACY ? MC_PK_DICT : MC_PK_ODICT);
    mc_status st = od ? collect_model(d, m, last, &l) : MC_ERR_NOMEM;
    for (int64_t i = 0; !st && i < l.n; i++)
        st = l.scheme == MC_SD_LEGACY ? legacy_insert(d, od, l.e[i].name, l.e[i].val)
                                      : mc_pk_set(d, od, l.e[i].name, l.e[i].val);
    mc_free(l.e);
    return st ? NULL : od;
}

/* ---- optimizer ------------------------------------------------------------------------------- */
/* Megatron's _get_param_groups: one group per (wd_mult, lr_mult, ...) key in order of first
 * appearance; torch's state_dict numbers the parameters group by group. order[] gets the
 * parameter index of each state index; *first_group_decay says which group comes first. */
struct ranked {
    long order;
    int64_t i;
};

/* Megatron's param groups: (wd_mult 1 or 0) x (is_decoupled_lr), at most 4. */
struct ckpt_group {
    bool decay, decoupled;
    int64_t from, to; /* state indices [from, to) of order[] */
};
struct ckpt_groups {
    int n;
    struct ckpt_group g[4];
};

static int ranked_cmp(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* named_parameters() order of the model whose names the checkpoint uses (the legacy model
 * registers query_key_value before dense, TE fuses the norms into the linears): optimizer state
 * indices and the distributed optimizer's buffer follow it. */
static mc_status param_order(const mc_gpt_model *m, enum mc_sd_scheme scheme, int64_t *perm)
{
    int64_t n = mc_gpt_num_params(m);
    struct ranked *r = mc_alloc((size_t)n * sizeof(*r));
    if (!r)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        char name[512];
        bool absent;
        r[i].i = i;
        r[i].order = mc_sd_name_map(MC_SD_LOCAL, scheme, mc_gpt_param(m, i).name, tied_embeddings(m),
                                    name, sizeof(name), &absent) ? -1 : mc_sd_name_order(scheme, name);
    }
    qsort(r, (size_t)n, sizeof(*r), ranked_cmp);
    for (int64_t i = 0; i < n; i++)
        perm[i] = r[i].i;
    mc_free(r);
    return MC_OK;
}

/* The optimizer's parameters in state-index order: named_parameters() of chunk 0, chunk 1, ...
 * (Megatron's _get_param_groups walks the chunks in order), split into the groups keyed
 * (wd_mult, is_decoupled_lr) in order of first appearance, chunk by chunk inside a group.
 * order[] (2 x total, the second half scratch) gets the optimizer index of each state index;
 * gs the groups' keys and ranges of order[]. */
static void group_order(const struct mc_ckpt_state *s, enum mc_sd_scheme scheme, int64_t *order,
                        struct ckpt_groups *gs)
{
    int64_t n = total_params(s), k = 0, base = 0;
    int64_t *named = order + n;
    for (int c = 0; c < n_chunks(s); c++) {
        const mc_gpt_model *m = chunk(s, c);
        int64_t nc = mc_gpt_num_params(m);
        if (param_order(m, scheme, named + base)) /* out of memory: the local order */
            for (int64_t i = 0; i < nc; i++)
                named[base + i] = i;
        for (int64_t i = 0; i < nc; i++)
            named[base + i] += base;
        base += nc;
    }
    gs->n = 0;
    for (int64_t j = 0; j < n; j++) { /* the keys, in order of first appearance */
        struct mc_param_view p = opt_param(s, named[j]);
        bool decay = !p.no_weight_decay;
        bool dec = s->opts.decoupled && mc_opt_param_is_embedding_or_output(&p);
        int g = 0;
        while (g < gs->n && (gs->g[g].decay != decay || gs->g[g].decoupled != dec))
            g++;
        if (g == gs->n)
            gs->g[gs->n++] = (struct ckpt_group){decay, dec, 0, 0};
    }
    for (int g = 0; g < gs->n; g++) {
        gs->g[g].from = k;
        for (int64_t j = 0; j < n; j++) {
            struct mc_param_view p = opt_param(s, named[j]);
            bool dec = s->opts.decoupled && mc_opt_param_is_embedding_or_output(&p);
            if (!p.no_weight_decay == gs->g[g].decay && dec == gs->g[g].decoupled)
                order[k++] = named[j];
        }
        gs->g[g].to = k;
    }
}

static struct mc_pk *param_group(mc_pk_doc *d, const struct mc_ckpt_state *s,
                                 const struct ckpt_group *grp)
{
    bool decay = grp->decay, dec = grp->decoupled;
    int64_t from = grp->from, to = grp->to;
    /* the decoupled group's own max / min and its lr at the scheduler's step */
    double max_lr = dec ? s->opts.decoupled_lr : s->opts.max_lr;
    double min_lr = dec ? s->opts.decoupled_min_lr : s->opts.min_lr;
    double lr = dec ? mc_opt_sched_get_lr(s->sched, max_lr, min_lr) : s->sched->lr;
    const struct mc_ckpt_options *a = &s->opts;
    struct mc_pk *g = mc_pk_new(d, MC_PK_DICT), *betas = mc_pk_new(d, MC_PK_TUPLE);
    struct mc_pk *params = mc_pk_new(d, MC_PK_LIST);
    bool adam = a->adam;
    if (!g || !betas || !params)
        return NULL;
    for (int64_t i = from; i < to; i++)
        if (mc_pk_append(d, params, mc_pk_int(d, i)))
            return NULL;
    mc_pk_append(d, betas, mc_pk_float(d, a->adam_beta1));
    mc_pk_append(d, betas, mc_pk_float(d, a->adam_beta2));
    double wd_mult = decay ? 1.0 : 0.0;
    mc_status st = mc_pk_set(d, g, "wd_mult", mc_pk_float(d, wd_mult));
    st = st ? st : mc_pk_set(d, g, "lr_mult", mc_pk_float(d, 1.0));
    st = st ? st : mc_pk_set(d, g, "is_expert_parallel", mc_pk_bool(d, false));
    st = st ? st : mc_pk_set(d, g, "is_decoupled_lr", mc_pk_bool(d, dec));
    st = st ? st : mc_pk_set(d, g, "max_lr", mc_pk_float(d, max_lr));
    st = st ? st : mc_pk_set(d, g, "min_lr", mc_pk_float(d, min_lr));
    st = st ? st : mc_pk_set(d, g, "lr", mc_pk_float(d, lr));
    if (adam) {
        st = st ? st : mc_pk_set(d, g, "betas", betas);
        st = st ? st : mc_pk_set(d, g, "eps", mc_pk_float(d, a->adam_eps));
        st = st ? st : mc_pk_set(d, g, "weight_decay", mc_pk_float(d, s->sched->wd * wd_mult));
        st = st ? st : mc_pk_set(d, g, "amsgrad", mc_pk_bool(d, false));
        st = st ? st : mc_pk_set(d, g, "foreach", mc_pk_none(d));
        st = st ? st : mc_pk_set(d, g, "maximize", mc_pk_bool(d, false));
        st = st ? st : mc_pk_set(d, g, "capturable", mc_pk_bool(d, false));
    } else {
        st = st ? st : mc_pk_set(d, g, "momentum", mc_pk_float(d, a->sgd_momentum));
        st = st ? st : mc_pk_set(d, g, "dampening", mc_pk_float(d, 0.0));
        st = st ? st : mc_pk_set(d, g, "weight_decay", mc_pk_float(d, s->sched->wd * wd_mult));
        st = st ? st : mc_pk_set(d, g, "nesterov", mc_pk_bool(d, false));
        st = st ? st : mc_pk_set(d, g, "maximize", mc_pk_bool(d, false));
        st = st ? st : mc_pk_set(d, g, "foreach", mc_pk_none(d));
    }
    st = st ? st : mc_pk_set(d, g, "params", params);
    return st ? NULL : g;
}

static struct mc_pk *param_state(mc_pk_doc *d, const struct mc_ckpt_state *s, int64_t pi, float *step)
{
    struct mc_param_view p = opt_param(s, pi);
    struct mc_opt_param_state ps = mc_opt_param_state(s->opt, pi);
    struct mc_pk *st = mc_pk_new(d, MC_PK_DICT);
    if (!st)
        return NULL;
    if (ps.exp_avg) { /* torch 1.13 Adam: step is a float32 0-dim tensor */
        if (mc_pk_set(d, st, "step", param_tensor(d, step, 0, NULL, 1)) ||
            mc_pk_set(d, st, "exp_avg", param_tensor(d, ps.exp_avg, p.ndim, p.shape, p.numel)) ||
            mc_pk_set(d, st, "exp_avg_sq", param_tensor(d, ps.exp_avg_sq, p.ndim, p.shape, p.numel)))
            return NULL;
    } else if (mc_pk_set(d, st, "momentum_buffer",
                         param_tensor(d, ps.momentum_buffer, p.ndim, p.shape, p.numel))) {
        return NULL;
    }
    return st;
}

/* MegatronGradScaler.state_dict() as state_dict['grad_scaler'] (Float16OptimizerWithFloat16Params
 * and DistributedOptimizer add it whenever they have a scaler): {} for the constant one, the
 * dynamic one's scale (a float32 tensor of shape [1]) and its two trackers. */
static mc_status add_grad_scaler(mc_pk_doc *d, const struct mc_ckpt_state *s, struct mc_pk *o)
{
    const struct mc_ckpt_scaler *g = &s->scaler;
    if (g->kind == MC_CKPT_SCALER_NONE)
        return MC_OK;
    struct mc_pk *sd = mc_pk_new(d, MC_PK_DICT);
    if (!sd)
        return MC_ERR_NOMEM;
    if (g->kind == MC_CKPT_SCALER_DYNAMIC) {
        float *scale = mc_pk_doc_alloc(d, sizeof(float));
        int64_t one = 1;
        if (!scale)
            return MC_ERR_NOMEM;
        *scale = (float)g->scale;
        mc_status st = mc_pk_set(d, sd, "scale", param_tensor(d, scale, 1, &one, 1));
        st = st ? st : mc_pk_set(d, sd, "growth_tracker", mc_pk_int(d, g->growth_tracker));
        st = st ? st : mc_pk_set(d, sd, "hysteresis_tracker", mc_pk_int(d, g->hysteresis_tracker));
        if (st)
            return st;
    }
    return mc_pk_set(d, o, "grad_scaler", sd);
}

/* Float16OptimizerWithFloat16Params.state_dict() around the torch optimizer's: {'optimizer':
 * it, 'grad_scaler' (with a scaler), 'fp32_from_fp16_params': the exact fp32 main params, one
 * list per param group in the group's order}. */
static struct mc_pk *float16_dict(mc_pk_doc *d, const struct mc_ckpt_state *s, struct mc_pk *inner,
                                  const int64_t *order, const struct ckpt_groups *gs)
{
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT), *groups = mc_pk_new(d, MC_PK_LIST);
    if (!inner || !o || !groups || mc_pk_set(d, o, "optimizer", inner) || add_grad_scaler(d, s, o))
        return NULL;
    for (int g = 0; g < gs->n; g++) {
        struct mc_pk *list = mc_pk_new(d, MC_PK_LIST);
        if (!list || mc_pk_append(d, groups, list))
            return NULL;
        for (int64_t k = gs->g[g].from; k < gs->g[g].to; k++) {
            struct mc_param_view p = opt_param(s, order[k]);
            if (mc_pk_append(d, list, param_tensor(d, p.data, p.ndim, p.shape, p.numel)))
                return NULL;
        }
    }
    return mc_pk_set(d, o, "fp32_from_fp16_params", groups) ? NULL : o;
}

/* DistributedOptimizer.state_dict() without Apex/TE: the inner torch optimizer's param_groups
 * without 'params', each with the step count (a float); the moments go to distrib_optim.pt. */
static struct mc_pk *distopt_dict(mc_pk_doc *d, const struct mc_ckpt_state *s)
{
    int64_t n = total_params(s);
    struct ckpt_groups gs;
    int64_t *order = mc_alloc((size_t)n * 2 * sizeof(int64_t));
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT), *inner = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *groups = mc_pk_new(d, MC_PK_LIST), *res = NULL;
    struct mc_distopt_shard sh;
    mc_distopt_shard(s->distopt, &sh);
    if (!order || !o || !inner || !groups)
        goto out;
    group_order(s, save_scheme(&s->opts), order, &gs);
    for (int g = 0; g < gs.n; g++) {
        struct mc_pk *pg = param_group(d, s, &gs.g[g]);
        if (!pg || mc_pk_append(d, groups, pg))
            goto out;
        pg->n -= 2; /* drops 'params' (the last pair) */
        if (mc_pk_set(d, pg, "step", mc_pk_float(d, (double)sh.step)))
            goto out;
    }
    if (!mc_pk_set(d, inner, "param_groups", groups) && !mc_pk_set(d, o, "optimizer", inner) &&
        !add_grad_scaler(d, s, o))
        res = o;
out:
    mc_free(order);
    return res;
}

static struct mc_pk *optimizer_dict(mc_pk_doc *d, const struct mc_ckpt_state *s, float *step)
{
    if (s->distopt)
        return distopt_dict(d, s);
    int64_t n = total_params(s);
    struct ckpt_groups gs;
    int64_t *order = mc_alloc((size_t)n * 2 * sizeof(int64_t));
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT), *state = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *groups = mc_pk_new(d, MC_PK_LIST), *res = NULL;
    if (!order || !o || !state || !groups)
        goto out;
    group_order(s, save_scheme(&s->opts), order, &gs);
    *step = (float)mc_opt_step_count(s->opt);
    /* torch keeps no state for a parameter before its first step */
    for (int64_t k = 0; k < n && mc_opt_step_count(s->opt) > 0; k++)
        if (mc_pk_append(d, state, mc_pk_int(d, k)) ||
            mc_pk_append(d, state, param_state(d, s, order[k], step)))
            goto out;
    for (int g = 0; g < gs.n; g++)
        if (mc_pk_append(d, groups, param_group(d, s, &gs.g[g])))
            goto out;
    if (!mc_pk_set(d, o, "state", state) && !mc_pk_set(d, o, "param_groups", groups))
        res = mixed(s) ? float16_dict(d, s, o, order, &gs) : o;
out:
    mc_free(order);
    return res;
}

static struct mc_pk *sched_dict(mc_pk_doc *d, const struct mc_opt_sched *s)
{
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT);
    double w = s->c.warmup_steps;
    struct mc_pk *warm = w == floor(w) ? mc_pk_int(d, (int64_t)w) : mc_pk_float(d, w);
    static const char *const wd_styles[] = {"constant", "linear", "cosine"};
    if (!o || mc_pk_set(d, o, "max_lr", mc_pk_float(d, s->c.max_lr)) ||
        mc_pk_set(d, o, "lr_warmup_steps", warm) ||
        mc_pk_set(d, o, "num_steps", mc_pk_int(d, s->num_steps)) ||
        mc_pk_set(d, o, "lr_decay_style", mc_pk_str(d, mc_lr_decay_name(s->c.decay_style))) ||
        mc_pk_set(d, o, "lr_decay_steps", mc_pk_int(d, s->c.decay_steps)) ||
        mc_pk_set(d, o, "min_lr", mc_pk_float(d, s->c.min_lr)) ||
        mc_pk_set(d, o, "start_wd", mc_pk_float(d, s->c.start_wd)) ||
        mc_pk_set(d, o, "end_wd", mc_pk_float(d, s->c.end_wd)) ||
        mc_pk_set(d, o, "wd_incr_style", mc_pk_str(d, wd_styles[s->c.wd_incr_style])) ||
        mc_pk_set(d, o, "wd_incr_steps", mc_pk_int(d, s->c.wd_incr_steps)))
        return NULL;
    return o;
}

/* RerunStateMachine.state_dict() with the machine disabled (Megatron's default). */
static struct mc_pk *rerun_dict(mc_pk_doc *d, int64_t iteration)
{
    const char *mod = "megatron.core.rerun_state_machine";
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT), *sh = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *inj = mc_pk_new(d, MC_PK_DICT);
    if (!o || !sh || !inj ||
        mc_pk_set(d, o, "mode", mc_pk_enum_member(d, mod, "RerunMode", "DISABLED")) ||
        mc_pk_set(d, o, "sharded", sh) ||
        mc_pk_set(d, sh, "state", mc_pk_enum_member(d, mod, "RerunState", "NOT_RUNNING_YET")) ||
        mc_pk_set(d, sh, "current_iteration", mc_pk_int(d, iteration)))
        return NULL;
    static const char *const flags[] = {"rerun_requested", "checkpoint_requested",
                                        "restart_again_requested", "continue_requested"};
    for (int k = 0; k < 4; k++)
        if (mc_pk_set(d, sh, flags[k], mc_pk_bool(d, false)))
            return NULL;
    if (mc_pk_set(d, sh, "error_injector_checkpoint", inj) ||
        mc_pk_set(d, inj, "error_injection_rate", mc_pk_int(d, 0)) ||
        mc_pk_set(d, inj, "error_injection_type",
                  mc_pk_enum_member(d, mod, "RerunDiagnostic", "TRANSIENT_ERROR")) ||
        mc_pk_set(d, inj, "injected_error_type", mc_pk_none(d)))
        return NULL;
    static const char *const nones[] = {"failed_validation_call", "initial_result", "suspicious_node",
                                        "suspicious_device", "data_iterator_checkpoints"};
    for (int k = 0; k < 5; k++)
        if (mc_pk_set(d, sh, nones[k], mc_pk_none(d)))
            return NULL;
    if (mc_pk_set(d, sh, "large_value_counts", mc_pk_new(d, MC_PK_DICT)) ||
        mc_pk_set(d, sh, "max_values", mc_pk_new(d, MC_PK_DICT)))
        return NULL;
    return o;
}

/* The args Namespace, from the caller (training/checkpointing.c); none without a callback. */
static struct mc_pk *args_value(mc_pk_doc *d, const struct mc_ckpt_state *s)
{
    struct mc_pk *ns = NULL;
    if (!s->opts.save_args)
        return mc_pk_none(d);
    return s->opts.save_args(s->opts.args_ctx, d, &ns) ? NULL : ns;
}

static struct mc_pk *state_dict(mc_pk_doc *d, const struct mc_ckpt_state *s, float *step)
{
    struct mc_pk *root = mc_pk_new(d, MC_PK_DICT);
    if (!root || mc_pk_set(d, root, "args", args_value(d, s)) ||
        mc_pk_set(d, root, "checkpoint_version", mc_pk_float(d, CKPT_VERSION)) ||
        mc_pk_set(d, root, "iteration", mc_pk_int(d, s->iteration)))
        return NULL;
    for (int c = 0; c < n_chunks(s); c++) { /* generate_state_dict: model, or model%d per chunk */
        char key[32];
        snprintf(key, sizeof(key), s->n_chunks > 1 ? "model%d" : "model", c);
        if (mc_pk_set(d, root, key, model_dict(d, s, chunk(s, c))))
            return NULL;
    }
    if (s->opts.save_optim &&
        (mc_pk_set(d, root, "optimizer", optimizer_dict(d, s, step)) ||
         mc_pk_set(d, root, "opt_param_scheduler", sched_dict(d, s->sched))))
        return NULL;
    if (mc_pk_set(d, root, "rerun_state_machine", rerun_dict(d, s->iteration)) ||
        (s->opts.save_rng && mc_pk_set(d, root, "rng_state", mc_ckpt_rng_state(d, s))) ||
        mc_pk_set(d, root, "num_floating_point_operations_so_far",
                  mc_pk_float(d, s->num_floating_point_operations_so_far)))
        return NULL;
    return root;
}

/* ---- files ----------------------------------------------------------------------------------- */
static mc_status mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST)
                return mc_error(MC_ERR_IO, "--save: cannot create directory %s: %s", buf, strerror(errno));
            *p = c;
            if (!c)
                return MC_OK;
        }
    }
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* makes the renames durable; not every filesystem allows it, hence no error */
        close(fd);
    }
}

static mc_status write_tracker(const char *dir, int64_t iteration)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, TRACKER);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return mc_error(MC_ERR_IO, "--save: cannot create %s: %s", tmp, strerror(errno));
    bool ok = fprintf(f, "%lld", (long long)iteration) > 0 && !fflush(f) && !fsync(fileno(f));
    ok &= !fclose(f);
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        return mc_error(MC_ERR_IO, "--save: cannot write %s: %s", path, strerror(errno));
    }
    fsync_dir(dir);
    return MC_OK;
}

/* Each model chunk's distributed optimizer, model and saved parameter order (perm: freed by the
 * caller, also after a failure). */
static mc_status distopt_chunks(const struct mc_ckpt_state *s, int nc, struct mc_ckpt_distopt_chunk *ch)
{
    mc_status st = MC_OK;
    memset(ch, 0, (size_t)nc * sizeof(*ch));
    for (int c = 0; c < nc && !st; c++) {
        ch[c].o = chunk_distopt(s, c);
        ch[c].m = chunk(s, c);
        ch[c].perm = mc_alloc((size_t)mc_gpt_num_params(ch[c].m) * sizeof(int64_t));
        ch[c].param_dtype = s->params_dtype;
        ch[c].grad_dtype = s->grad_dtype;
        st = ch[c].perm ? param_order(ch[c].m, save_scheme(&s->opts), ch[c].perm) : MC_ERR_NOMEM;
    }
    return st;
}

/* distrib_optim.pt: one grad buffer per model chunk, each in its chunk's named_parameters()
 * order. */
static mc_status save_distopt(const struct mc_ckpt_state *s, const char *path, bool writer)
{
    int nc = n_chunks(s);
    struct mc_ckpt_distopt_chunk ch[MC_CKPT_MAX_CHUNKS];
    if (nc > MC_CKPT_MAX_CHUNKS)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: %d model chunks; distrib_optim.pt is written for "
                        "at most %d", path, nc, MC_CKPT_MAX_CHUNKS);
    mc_status st = distopt_chunks(s, nc, ch);
    st = st ? st : mc_ckpt_distopt_save(ch, nc, path, writer);
    for (int c = 0; c < nc; c++)
        mc_free(ch[c].perm);
    return st;
}

struct mc_pk *mc_ckpt_distopt_dict(mc_pk_doc *d, const struct mc_ckpt_state *s)
{
    return distopt_dict(d, s);
}

mc_status mc_ckpt_distopt_gather_state(const struct mc_ckpt_state *s, mc_pk_doc *d, bool writer,
                                       struct mc_pk **out)
{
    int nc = n_chunks(s);
    struct mc_ckpt_distopt_chunk ch[MC_CKPT_MAX_CHUNKS];
    if (nc > MC_CKPT_MAX_CHUNKS)
        return mc_error(MC_ERR_UNSUPPORTED, "--save: %d model chunks; the distributed optimizer's "
                        "state is gathered for at most %d", nc, MC_CKPT_MAX_CHUNKS);
    mc_status st = distopt_chunks(s, nc, ch);
    /* the gather joins even after a failure here (d NULL): the other ranks wait in it */
    mc_status gst = mc_ckpt_distopt_gather(ch, nc, st ? NULL : d, s->opts.dir, writer, out);
    st = st ? st : gst;
    for (int c = 0; c < nc; c++)
        mc_free(ch[c].perm);
    return st;
}

/* This rank's files: model_optim_rng.pt (writer only) and distrib_optim.pt (gathered over the
 * data-parallel group by every rank, written by the writer). */
static mc_status write_files(const struct mc_ckpt_state *s, const char *dir, bool writer)
{
    char path[4096];
    if (ckpt_name(s, path, sizeof(path), dir, s->iteration, false) >= (int)sizeof(path) - 32)
        return mc_error(MC_ERR_CONFIG, "--save: directory name too long: %s", dir);
    *strrchr(path, '/') = 0;
    mc_status st = writer ? mkdirs(path) : MC_OK;
    bool optim = s->opts.save_optim;
    size_t len = strlen(path);
    if (st)
        writer = false; /* still joins the gather below: the other ranks are waiting in it */
    if (s->distopt && optim) {
        mc_status mst = st;
        strcat(path, "/distrib_optim.pt");
        st = save_distopt(s, path, writer);
        path[len] = 0;
        st = mst ? mst : st;
    }
    if (st || !writer)
        return st;
    strcat(path, "/model_optim_rng.pt");
    mc_pk_doc *d;
    if ((st = mc_pk_doc_init(&d)))
        return st;
    float step = 0;
    struct mc_pk *root = state_dict(d, s, &step);
    st = root ? mc_torch_save(d, root, path) : MC_ERR_NOMEM;
    mc_pk_doc_free(d);
    path[len] = 0;
    if (!st)
        fsync_dir(path);
    return st;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) ? -1 : 0;
}

/* After a failed save: the iteration directory it was writing is removed unless the tracker
 * names that iteration (then it is the last good checkpoint, which is never touched). Else a
 * save that failed for lack of room would leave a copy behind and the retry need room for two. */
static void drop_unreferenced(const char *dir, int64_t iteration)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, TRACKER);
    FILE *f = fopen(path, "rb");
    if (f) {
        char buf[64] = {0};
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        char *end;
        errno = 0;
        long long it = strtoll(buf, &end, 10);
        if (!errno && end != buf && it == iteration)
            return;
    }
    snprintf(path, sizeof(path), "%s/iter_%07lld", dir, (long long)iteration);
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); /* best effort: the save already failed */
}

/* Combines every rank's outcome; also the barrier before the tracker is written. */
static mc_status agree(const struct mc_ckpt_state *s, mc_status st, const char *what)
{
    bool ok = !st;
    mc_status cst = s->all_ok ? s->all_ok(s->barrier_ctx, &ok)
                              : s->barrier ? s->barrier(s->barrier_ctx) : MC_OK;
    if (st || cst)
        return st ? st : cst;
    if (!ok) {
        /* The rank that failed reports the cause; the first rank to report ends the job
         * (MPI_Abort), so a rank that only learned of the failure waits a little first rather
         * than cutting that message off. */
        struct timespec wait = {2, 0};
        nanosleep(&wait, NULL);
        return mc_error(MC_ERR_IO, "%s failed on another rank (its error message says why)", what);
    }
    return MC_OK;
}

/* ---- torch_dist ------------------------------------------------------------------------------ */
/* common.pt's optimizer of a --bf16/--fp16 run (Float16OptimizerWithFloat16Params): {'optimizer': the torch optimizer's,
 * 'grad_scaler' (with a scaler)}; its fp32_from_fp16_params are all sharded tensors
 * (optimizer.state.fp32_param.<key>), so common.pt keeps no trace of them. */
static struct mc_pk *float16_common(mc_pk_doc *d, const struct mc_ckpt_state *s, struct mc_pk *inner)
{
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT);
    if (!o || mc_pk_set(d, o, "optimizer", inner) || add_grad_scaler(d, s, o))
        return NULL;
    return o;
}

/* common.pt of a torch_dist save: what Megatron's save_common writes (rank 0's state dict with
 * the sharded tensors and objects taken out): args, checkpoint_version, iteration, the
 * optimizer's param_groups (without 'params') and common_step, opt_param_scheduler, the FLOPs.
 * rerun_state_machine is {'mode': DISABLED}: its 'sharded' part is the rerun_state_machine_state
 * object, as the rng_state is a sharded object (dist_checkpoint_save.c). */
/* common.pt's optimizer of a --use-distributed-optimizer run (DistributedOptimizer.
 * sharded_state_dict, 'fully_sharded_model_space'): state_dict()'s param_groups (with the step)
 * and grad_scaler, what is left of data-parallel rank 0's 'param_state' once its tensors are
 * sharded ({i: {'step': tensor(step)}} per parameter in its shard, Adam's step), and the
 * sharding type. */
static struct mc_pk *distopt_common(mc_pk_doc *d, const struct mc_ckpt_state *s)
{
    if (!s->opts.fully_parallel_save) { /* 'dp_zero_gather_scatter': the rest is sharded objects */
        struct mc_pk *z = mc_pk_new(d, MC_PK_DICT);
        return z && !mc_pk_set(d, z, "param_state_sharding_type", mc_pk_str(d, "dp_zero_gather_scatter"))
                   ? z : NULL;
    }
    struct mc_pk *o = distopt_dict(d, s), *ps = mc_pk_new(d, MC_PK_DICT);
    struct mc_distopt_shard sh;
    mc_distopt_shard(s->distopt, &sh);
    float *step = mc_pk_doc_alloc(d, sizeof(float));
    if (!o || !ps || !step)
        return NULL;
    *step = (float)sh.step;
    int64_t n = mc_dist_ckpt_distopt_params(s, 0);
    for (int64_t i = 0; i < n; i++) {
        struct mc_pk *e = mc_pk_new(d, MC_PK_DICT);
        if (!e || (sh.exp_avg && mc_pk_set(d, e, "step", param_tensor(d, step, 0, NULL, 1))) ||
            mc_pk_append(d, ps, mc_pk_int(d, i)) || mc_pk_append(d, ps, e))
            return NULL;
    }
    if (mc_pk_set(d, o, "param_state", ps) ||
        mc_pk_set(d, o, "param_state_sharding_type", mc_pk_str(d, "fully_sharded_model_space")))
        return NULL;
    return o;
}

static struct mc_pk *dist_common(mc_pk_doc *d, const struct mc_ckpt_state *s)
{
    struct mc_pk *root = mc_pk_new(d, MC_PK_DICT), *args = args_value(d, s);
    if (!root || !args)
        return NULL;
    if (mc_pk_set(d, root, "args", args) ||
        mc_pk_set(d, root, "checkpoint_version", mc_pk_float(d, CKPT_VERSION)) ||
        mc_pk_set(d, root, "iteration", mc_pk_int(d, s->iteration)))
        return NULL;
    if (s->opts.save_optim && s->distopt) {
        if (mc_pk_set(d, root, "optimizer", distopt_common(d, s)) ||
            mc_pk_set(d, root, "opt_param_scheduler", sched_dict(d, s->sched)))
            return NULL;
    } else if (s->opts.save_optim) {
        int64_t n = total_params(s);
        struct ckpt_groups gs;
        int64_t *order = mc_alloc((size_t)n * 2 * sizeof(int64_t));
        struct mc_pk *o = mc_pk_new(d, MC_PK_DICT), *state = mc_pk_new(d, MC_PK_DICT);
        struct mc_pk *groups = mc_pk_new(d, MC_PK_LIST);
        float *step = mc_pk_doc_alloc(d, sizeof(float));
        bool ok = order && o && state && groups && step;
        if (ok) {
            group_order(s, save_scheme(&s->opts), order, &gs);
            *step = (float)mc_opt_step_count(s->opt);
            for (int g = 0; ok && g < gs.n; g++) {
                struct mc_pk *pg = param_group(d, s, &gs.g[g]);
                ok = pg && !mc_pk_append(d, groups, pg);
                if (ok)
                    pg->n -= 2; /* drops 'params' (the last pair), as Megatron's sharded form */
            }
        }
        mc_free(order);
        if (!ok || (mc_opt_step_count(s->opt) > 0 &&
                    mc_pk_set(d, state, "common_step", param_tensor(d, step, 0, NULL, 1))) ||
            mc_pk_set(d, o, "state", state) || mc_pk_set(d, o, "param_groups", groups) ||
            mc_pk_set(d, root, "optimizer", mixed(s) ? float16_common(d, s, o) : o) ||
            mc_pk_set(d, root, "opt_param_scheduler", sched_dict(d, s->sched)))
            return NULL;
    }
    if (mc_pk_set(d, root, "rerun_state_machine", mc_ckpt_rerun_common(d)) ||
        mc_pk_set(d, root, "num_floating_point_operations_so_far",
                  mc_pk_float(d, s->num_floating_point_operations_so_far)))
        return NULL;
    return root;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw);

static void remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); /* best effort */
}

/* The owner's first step of a torch_dist save: an empty iter_%07d.tmp (a failed save's
 * leftovers removed); every rank learns whether it worked. */
static mc_status make_tmp_dir(const struct mc_ckpt_state *s, const char *tmp)
{
    mc_status st = MC_OK;
    if (single(s) || s->write_tracker) {
        remove_tree(tmp);
        st = mkdirs(tmp);
    }
    return agree(s, st, "creating the checkpoint directory");
}

/* The owner's last step of a torch_dist save, once every rank agrees that its part is written:
 * iter_%07d.tmp becomes iter_%07d (a save of the same iteration before it is replaced); after a
 * failure the temporary directory is removed. */
static mc_status publish_dist(const struct mc_ckpt_state *s, mc_status st, const char *tmp,
                              const char *final_dir)
{
    char old[4300];
    bool owner = single(s) || s->write_tracker;
    snprintf(old, sizeof(old), "%s.old", final_dir);
    st = agree(s, st, "saving the checkpoint");
    if (!st && owner) {
        fsync_dir(tmp);
        struct stat sb;
        bool had = !stat(final_dir, &sb); /* the same iteration saved before: replaced */
        remove_tree(old);
        if ((had && rename(final_dir, old)) || rename(tmp, final_dir))
            st = mc_error(MC_ERR_IO, "--save: cannot rename %s to %s: %s", tmp, final_dir, strerror(errno));
        if (!st && had)
            remove_tree(old);
        fsync_dir(s->opts.dir);
    }
    if (st && owner)
        remove_tree(tmp);
    return st;
}

/* Megatron's torch_dist save (save_checkpoint with dist_checkpointing.save): every rank writes
 * its items into iter_%07d.tmp/, rank 0 the metadata after all have finished; then rank 0
 * renames the directory to iter_%07d (a failed save leaves no iteration directory behind) and
 * writes the tracker. */
static mc_status save_dist(const struct mc_ckpt_state *s)
{
    char final_dir[4200], tmp[4300];
    bool owner = single(s) || s->write_tracker;
    snprintf(final_dir, sizeof(final_dir), "%s/iter_%07lld", s->opts.dir, (long long)s->iteration);
    snprintf(tmp, sizeof(tmp), "%s.tmp", final_dir);
    mc_status st = make_tmp_dir(s, tmp);
    if (st)
        return st;
    mc_pk_doc *d;
    if ((st = mc_pk_doc_init(&d)))
        return st;
    struct mc_pk *common = NULL;
    if (owner && !(common = dist_common(d, s)))
        st = MC_ERR_NOMEM;
    /* a rank that failed still joins the gather inside: the others wait in it */
    mc_status wst = mc_dist_ckpt_write(s, tmp, final_dir, d, common);
    st = st ? st : wst;
    mc_pk_doc_free(d);
    return publish_dist(s, st, tmp, final_dir);
}

static void save_header(const struct mc_ckpt_state *s, FILE *log)
{
    if (log)
        fprintf(log, "saving checkpoint at iteration %7lld to %s in %s format\n",
                (long long)s->iteration, s->opts.dir, s->opts.save_dist ? "torch_dist" : "torch");
    if (log && s->opts.save_dist && s->distopt)
        fprintf(log, "Storing distributed optimizer sharded state of type %s\n",
                s->opts.fully_parallel_save ? "fully_sharded_model_space" : "dp_zero_gather_scatter");
}

/* save_checkpoint's end (an async save's finalize): every rank's outcome, then the tracker,
 * written last, and Megatron's line. */
static mc_status finish_save(const struct mc_ckpt_state *s, mc_status st, FILE *log)
{
    const char *dir = s->opts.dir;
    /* every rank gets here, so a failed write cannot leave the others waiting */
    bool owner = single(s) || s->write_tracker; /* writes the tracker, so cleans up after a failure */
    if ((st = agree(s, st, "saving the checkpoint")) ||
        (owner && (st = write_tracker(dir, s->iteration)))) {
        if (owner)
            drop_unreferenced(dir, s->iteration); /* sets no error: the save's message stays */
        return st;
    }
    if (log) {
        fprintf(log, "  successfully saved checkpoint from iteration %7lld to %s [ t %d/%d, p %d/%d ]\n",
                (long long)s->iteration, dir, s->tp_rank + 1, tp_size(s), s->pp_rank + 1, pp_size(s));
        fflush(log);
    }
    return MC_OK;
}

mc_status mc_ckpt_save(const struct mc_ckpt_state *s, FILE *log)
{
    save_header(s, log);
    mc_status st = s->opts.save_dist ? save_dist(s) : write_files(s, s->opts.dir, single(s) || s->writer);
    return finish_save(s, st, log);
}

/* ---- --async-save ------------------------------------------------------------------------------
 * save_checkpoint with args.async_save: the directory, common.pt and the plan now (with a copy
 * of every tensor to write), the .distcp files on a writer thread, and at finalize (on every
 * rank, once every writer is done) what the synchronous save does after its files: the gathered
 * .metadata, the rename of iter_%07d.tmp, the tracker and the "successfully saved" line. */
struct async_save {
    struct mc_ckpt_state s; /* a copy: the layout, the collectives, opts.dir (finalize uses no
                               model or optimizer pointer: the plan holds the copy of their state) */
    FILE *log;
    char final_dir[4200], tmp[4300];
    struct mc_dist_ckpt_plan *plan;
};

/* The writer thread: files only (MC_TEST_FAIL_WRITE_RANK=r, test only: rank r's writer fails). */
static mc_status async_write(void *ctx)
{
    struct async_save *j = ctx;
    const char *r = getenv("MC_TEST_FAIL_WRITE_RANK");
    if (r && atoi(r) == j->s.rank)
        return mc_error(MC_ERR_IO, "--save: cannot write %s: rank %d's checkpoint writer failed "
                        "(injected by MC_TEST_FAIL_WRITE_RANK)", j->tmp, j->s.rank);
    return mc_dist_ckpt_plan_write(j->plan, j->tmp, j->s.rank);
}

static mc_status async_finalize(void *ctx, mc_status st)
{
    struct async_save *j = ctx;
    /* every writer's outcome first: after a failure anywhere every rank stops here (the failed
     * rank with its own message), and none waits in the gather */
    if (!(st = agree(&j->s, st, "writing the checkpoint"))) {
        mc_pk_doc *d = NULL;
        mc_status dst = mc_pk_doc_init(&d);
        /* a rank that failed still joins the gather inside: the others wait in it */
        st = mc_dist_ckpt_plan_finish(&j->s, j->plan, dst, j->tmp, j->final_dir, d, NULL);
        if (d)
            mc_pk_doc_free(d);
    }
    st = publish_dist(&j->s, st, j->tmp, j->final_dir);
    return finish_save(&j->s, st, j->log);
}

/* A save left unfinalized after an error: its owner removes iter_N.tmp (a save queued after
 * one that failed would otherwise leave its half-written directory behind). */
static void async_abandon(void *ctx)
{
    struct async_save *j = ctx;
    if (single(&j->s) || j->s.write_tracker)
        remove_tree(j->tmp);
}

static void async_free(void *ctx)
{
    struct async_save *j = ctx;
    mc_dist_ckpt_plan_free(j->plan);
    mc_free(j);
}

/* common.pt, written now, by the owner: its values are the state's at this iteration. */
static mc_status async_common(const struct mc_ckpt_state *s, const char *tmp)
{
    char path[4400];
    mc_pk_doc *d;
    mc_status st = mc_pk_doc_init(&d);
    if (st)
        return st;
    struct mc_pk *common = dist_common(d, s);
    snprintf(path, sizeof(path), "%s/common.pt", tmp);
    st = common ? mc_torch_save(d, common, path) : MC_ERR_NOMEM;
    mc_pk_doc_free(d);
    return st;
}

mc_status mc_ckpt_save_async(const struct mc_ckpt_state *s, FILE *log, struct mc_async_queue *q)
{
    if (log && mc_async_queue_unfinalized(q))
        fprintf(log, "WARNING: Starting a checkpoint save before previous has finished. Consider "
                     "increasing the checkpoint interval.\n");
    save_header(s, log);
    if (!s->opts.save_dist)
        return mc_error(MC_ERR_UNSUPPORTED, "Async checkpoint save not implemented for legacy "
                        "checkpoints");
    struct async_save *j = mc_calloc(1, sizeof(*j));
    mc_status st = agree(s, j ? MC_OK : MC_ERR_NOMEM, "scheduling the asynchronous save");
    if (st) {
        mc_free(j);
        return st;
    }
    j->s = *s;
    j->s.opts.save_args = NULL, j->s.opts.args_ctx = NULL; /* the caller's, gone after this */
    j->log = log;
    snprintf(j->final_dir, sizeof(j->final_dir), "%s/iter_%07lld", s->opts.dir, (long long)s->iteration);
    snprintf(j->tmp, sizeof(j->tmp), "%s.tmp", j->final_dir);
    if ((st = make_tmp_dir(s, j->tmp))) {
        mc_free(j);
        return st;
    }
    bool owner = single(s) || s->write_tracker;
    st = owner ? async_common(s, j->tmp) : MC_OK;
    mc_status pst = mc_dist_ckpt_plan_init(s, true, &j->plan); /* every rank: it may gather */
    st = agree(s, st ? st : pst, "saving the checkpoint");
    if (st) {
        if (owner)
            remove_tree(j->tmp);
        async_free(j);
        return st;
    }
    mc_crc32_update(0, "", 0); /* builds the CRC tables here, before a writer thread reads them */
    struct mc_async_request r = {async_write, async_finalize, async_free, async_abandon, j, s->all_ok,
                                 s->barrier_ctx};
    if ((st = mc_async_queue_schedule(q, &r)))
        return st;
    if (log) {
        fprintf(log, "  scheduled an async checkpoint save at iteration %7lld to %s\n",
                (long long)s->iteration, s->opts.dir);
        fflush(log);
    }
    return s->barrier ? s->barrier(s->barrier_ctx) : MC_OK; /* Megatron's closing barrier */
}

/* ---- loading --------------------------------------------------------------------------------- */
struct loader {
    struct mc_ckpt_state *s;
    const char *path;
    FILE *log;
    enum mc_sd_scheme scheme; /* the names the checkpoint's model uses */
    const char *saved_precision; /* "--bf16", "--fp16" or "fp32", from the saved args */
    bool saved_local;            /* the saved args' --transformer-impl local */
};

/* The precision of a run or a checkpoint as its options name it. */
static const char *precision_name(enum mc_dtype dt)
{
    return dt == MC_DTYPE_BF16 ? "--bf16" : dt == MC_DTYPE_F16 ? "--fp16" : "fp32";
}

static const char *saved_precision(const struct mc_pk *args)
{
    const struct mc_pk *bf = mc_pk_get(args, "bf16"), *fp = mc_pk_get(args, "fp16");
    if (bf && bf->kind == MC_PK_BOOL && bf->b)
        return "--bf16";
    if (fp && fp->kind == MC_PK_BOOL && fp->b)
        return "--fp16";
    return args ? "fp32" : "(no saved args)";
}

static mc_status missing(const struct loader *l, const char *key, const char *hint)
{
    return mc_error(MC_ERR_FORMAT, "%s: no '%s' in the checkpoint%s", l->path, key, hint);
}

/* A float32 tensor of exactly this shape, copied out. */
static mc_status copy_tensor(const struct loader *l, const char *what, const struct mc_pk *t,
                             int ndim, const int64_t *shape, float *dst)
{
    if (!t || t->kind != MC_PK_TENSOR)
        return mc_error(MC_ERR_FORMAT, "%s: %s is not a tensor", l->path, what);
    bool same = t->ndim == ndim;
    for (int k = 0; same && k < ndim; k++)
        same = t->shape[k] == shape[k];
    if (!same)
        return mc_error(MC_ERR_SHAPE, "%s: %s has shape [%lld, %lld] (%d dims) in the checkpoint, "
                        "the model has [%lld, %lld]", l->path, what, (long long)t->shape[0],
                        (long long)(t->ndim > 1 ? t->shape[1] : 1), t->ndim, (long long)shape[0],
                        (long long)(ndim > 1 ? shape[1] : 1));
    if (!mc_dtype_is_float(t->dtype))
        return mc_error(MC_ERR_FORMAT, "%s: %s is torch.%s; expected a floating-point tensor "
                        "(float32, bfloat16, float16)", l->path, what, mc_dtype_name(t->dtype));
    int64_t n = mc_pk_tensor_numel(t);
    if (!mc_pk_tensor_contiguous(t))
        return mc_error(MC_ERR_UNSUPPORTED, "%s: %s is a non-contiguous view", l->path, what);
    if (t->dtype == MC_DTYPE_F32)
        memcpy(dst, (const float *)t->storage->data + t->offset, (size_t)n * sizeof(float));
    else /* torch's copy_ into the float32 tensor: widened (bf16/fp16 exactly) */
        mc_dtype_to_f32(dst, (const char *)t->storage->data + t->offset * mc_dtype_size(t->dtype),
                        t->dtype, n);
    return MC_OK;
}

/* A 16-bit run's model param is the checkpoint's tensor converted to params_dtype
 * (load_state_dict's param.copy_); until the optimizer state overwrites it, the main param is
 * float() of that (Megatron's reload_model_params). */
static void through_dtype(float *x, int64_t n, enum mc_dtype dt)
{
    for (int64_t k = 0; dt == MC_DTYPE_BF16 && k < n; k++)
        x[k] = mc_bf16_to_f32(mc_f32_to_bf16(x[k]));
    for (int64_t k = 0; dt == MC_DTYPE_F16 && k < n; k++)
        x[k] = mc_f16_to_f32(mc_f32_to_f16(x[k]));
}

static bool is_extra_state(const char *key)
{
    size_t n = strlen(key), e = strlen("._extra_state");
    return n > e && !strcmp(key + n - e, "._extra_state");
}

/* The names a checkpoint's model uses: nested dicts under language_model are the legacy model's;
 * norms fused into linear_qkv / linear_fc1 (or core_attention state) the TE spec's. */
static enum mc_sd_scheme detect_scheme(const struct mc_pk *model)
{
    if (mc_pk_get(model, "language_model") || mc_pk_get(model, "word_embeddings_for_head"))
        return MC_SD_LEGACY;
    for (int64_t i = 0; i < model->n; i += 2) {
        const char *k = model->items[i]->kind == MC_PK_STR ? model->items[i]->s : "";
        if (strstr(k, ".layer_norm_weight") || strstr(k, ".layer_norm_bias") ||
            strstr(k, ".core_attention._extra_state"))
            return MC_SD_TE;
    }
    return MC_SD_LOCAL;
}

/* Flattens the (legacy: nested) model dict into dotted keys, each mapped to its local name;
 * every parameter is copied in, and strictness is kept: an unknown key or a missing parameter
 * is an error, as load_state_dict(strict=True) makes it. */
struct flat_ctx {
    const struct loader *l;
    enum mc_sd_scheme scheme;
    bool tied;
    mc_gpt_model *m; /* the chunk being loaded */
    char *seen; /* [n_params] */
};

static mc_status load_entry(struct flat_ctx *c, const char *key, const struct mc_pk *v)
{
    char local[512];
    bool absent;
    mc_gpt_model *m = c->m;
    mc_status st = mc_sd_name_map(c->scheme, MC_SD_LOCAL, key, c->tied, local, sizeof(local), &absent);
    if (st)
        return mc_error(st, "%s: unexpected key '%s' in the model state dict (%s names; strict "
                        "loading: is it the same model?)", c->l->path, key, mc_sd_scheme_name(c->scheme));
    if (absent || is_extra_state(local))
        return MC_OK; /* TE fp8 metadata, _extra_state: nothing to restore */
    int64_t i = mc_gpt_param_index(m, local);
    if (i < 0)
        return mc_error(MC_ERR_FORMAT, "%s: unexpected key '%s' in the model state dict (this "
                        "model has no %s: another --num-layers, pipeline stage or "
                        "--untie-embeddings-and-output-weights?)", c->l->path, key, local);
    struct mc_param_view p = mc_gpt_param(m, i);
    c->seen[i] = 1;
    st = copy_tensor(c->l, key, v, p.ndim, p.shape, p.data);
    if (!st && v->dtype != c->l->s->params_dtype)
        through_dtype(p.data, p.numel, c->l->s->params_dtype);
    return st;
}

static mc_status walk_model(struct flat_ctx *c, const struct mc_pk *dict, const char *prefix, int depth)
{
    for (int64_t i = 0; i < dict->n; i += 2) {
        const struct mc_pk *k = dict->items[i], *v = dict->items[i + 1];
        if (k->kind != MC_PK_STR)
            return mc_error(MC_ERR_FORMAT, "%s: a model state dict key is not a string", c->l->path);
        char key[512];
        snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", k->s);
        mc_status st;
        /* legacy nesting: descend while the dotted key is still a dict level */
        if (c->scheme == MC_SD_LEGACY && mc_pk_is_map(v) && depth < 4)
            st = walk_model(c, v, key, depth + 1);
        else
            st = load_entry(c, key, v);
        if (st)
            return st;
    }
    return MC_OK;
}

/* load_state_dict(strict=True): every parameter present, nothing unexpected. */
static mc_status load_model(const struct loader *l, const struct mc_pk *model, mc_gpt_model *m,
                            const char *key)
{
    if (!model || !mc_pk_is_map(model))
        return missing(l, key, " (or it is not a dict)");
    int64_t n = mc_gpt_num_params(m);
    struct flat_ctx c = {.l = l, .scheme = detect_scheme(model), .tied = tied_embeddings(m), .m = m,
                         .seen = mc_calloc((size_t)n, 1)};
    if (!c.seen)
        return MC_ERR_NOMEM;
    mc_status st = walk_model(&c, model, "", 0);
    for (int64_t i = 0; !st && i < n; i++)
        if (!c.seen[i]) {
            char name[512];
            bool absent;
            const char *local = mc_gpt_param(m, i).name;
            if (mc_sd_name_map(MC_SD_LOCAL, c.scheme, local, c.tied, name, sizeof(name), &absent))
                snprintf(name, sizeof(name), "%s", local);
            st = mc_error(MC_ERR_FORMAT, "%s: missing key '%s' in the %s state dict (%s names)",
                          l->path, name, key, mc_sd_scheme_name(c.scheme));
        }
    mc_free(c.seen);
    return st;
}

static mc_status load_param_state(const struct loader *l, int64_t pi, const struct mc_pk *ps,
                                  double *step)
{
    struct mc_param_view p = opt_param(l->s, pi);
    struct mc_opt_param_state os = mc_opt_param_state(l->s->opt, pi);
    char what[600];
    mc_status st;
    if (!mc_pk_is_map(ps))
        return mc_error(MC_ERR_FORMAT, "%s: optimizer state of %s is not a dict", l->path, p.name);
    if (os.exp_avg) {
        const struct mc_pk *sv = mc_pk_get(ps, "step");
        if (sv && sv->kind == MC_PK_TENSOR && sv->ndim == 0 && sv->dtype == MC_DTYPE_F32)
            *step = ((const float *)sv->storage->data)[sv->offset];
        else if (!mc_pk_number(sv, step))
            return mc_error(MC_ERR_FORMAT, "%s: optimizer state of %s has no 'step' (a checkpoint "
                            "of an optimizer other than torch Adam?)", l->path, p.name);
        snprintf(what, sizeof(what), "optimizer exp_avg of %s", p.name);
        if ((st = copy_tensor(l, what, mc_pk_get(ps, "exp_avg"), p.ndim, p.shape, os.exp_avg)))
            return st;
        snprintf(what, sizeof(what), "optimizer exp_avg_sq of %s", p.name);
        return copy_tensor(l, what, mc_pk_get(ps, "exp_avg_sq"), p.ndim, p.shape, os.exp_avg_sq);
    }
    snprintf(what, sizeof(what), "optimizer momentum_buffer of %s", p.name);
    return copy_tensor(l, what, mc_pk_get(ps, "momentum_buffer"), p.ndim, p.shape, os.momentum_buffer);
}

/* A saved param_groups list against the groups this run builds: their count, each one's
 * is_decoupled_lr flag and parameter count, indices numbered in order. */
static mc_status check_groups(const struct loader *l, const struct mc_pk *groups,
                              const struct ckpt_groups *gs, bool with_params)
{
    if (!groups || groups->kind != MC_PK_LIST || groups->n != gs->n)
        return mc_error(MC_ERR_FORMAT, "%s: optimizer param_groups: expected %d groups (weight decay "
                        "on / off%s) as Megatron builds them", l->path, gs->n,
                        l->s->opts.decoupled ? ", decoupled learning rate on / off" : "");
    for (int g = 0, at = 0; g < gs->n; g++) {
        const struct mc_pk *dec = mc_pk_get(groups->items[g], "is_decoupled_lr");
        if (dec && dec->kind == MC_PK_BOOL && dec->b != gs->g[g].decoupled)
            return mc_error(MC_ERR_CONFIG, "%s: optimizer param group %d has is_decoupled_lr=%s; "
                            "this run's (%s --decoupled-lr) is %s", l->path, g,
                            dec->b ? "True" : "False", l->s->opts.decoupled ? "with" : "without",
                            gs->g[g].decoupled ? "True" : "False");
        if (!with_params)
            continue;
        int64_t want = gs->g[g].to - gs->g[g].from;
        const struct mc_pk *ps = mc_pk_get(groups->items[g], "params");
        if (!ps || ps->kind != MC_PK_LIST || ps->n != want)
            return mc_error(MC_ERR_FORMAT, "%s: optimizer param group %d holds %lld parameters, the "
                            "model has %lld for it", l->path, g, (long long)(ps ? ps->n : -1),
                            (long long)want);
        for (int64_t k = 0; k < ps->n; k++, at++)
            if (ps->items[k]->kind != MC_PK_INT || ps->items[k]->i != at)
                return mc_error(MC_ERR_FORMAT, "%s: optimizer param group %d: parameter indices are "
                                "not numbered in order", l->path, g);
    }
    return MC_OK;
}

/* MegatronGradScaler.load_state_dict as the optimizers call it (logger `logger`'s INFO lines):
 * no 'grad_scaler' (an fp32 or bf16 checkpoint) leaves an fp16 run's scaler at its start
 * values; a run without a scaler skips one; a dynamic scaler takes scale and trackers. */
static mc_status load_scaler(const struct loader *l, const struct mc_pk *o, const char *logger)
{
    struct mc_ckpt_scaler *g = &l->s->scaler;
    const struct mc_pk *gs = mc_pk_get(o, "grad_scaler");
    if (!gs) {
        if (l->s->params_dtype == MC_DTYPE_F16 && l->log)
            fprintf(l->log, "INFO:%s:***WARNING*** found an old checkpoint, will not load grad "
                    "scaler ...\n", logger);
        return MC_OK;
    }
    if (g->kind == MC_CKPT_SCALER_NONE) {
        if (l->log)
            fprintf(l->log, "INFO:%s:***WARNING*** fould the grad scaler in the checkpoint but it "
                    "is None in the class. Skipping loading grad scaler ...\n", logger);
        return MC_OK;
    }
    if (g->kind == MC_CKPT_SCALER_CONSTANT) /* ConstantGradScaler.load_state_dict: nothing */
        return MC_OK;
    const struct mc_pk *sc = mc_pk_get(gs, "scale");
    double scale, growth, hyst;
    bool ok = mc_pk_is_map(gs) && mc_pk_number(mc_pk_get(gs, "growth_tracker"), &growth) &&
              mc_pk_number(mc_pk_get(gs, "hysteresis_tracker"), &hyst);
    if (ok && sc && sc->kind == MC_PK_TENSOR && mc_pk_tensor_numel(sc) == 1 &&
        mc_dtype_is_float(sc->dtype))
        scale = mc_dtype_get_f64(sc->storage->data, sc->dtype, sc->offset);
    else
        ok = ok && mc_pk_number(sc, &scale);
    if (!ok)
        return mc_error(MC_ERR_FORMAT, "%s: optimizer grad_scaler has no dynamic scaler state "
                        "('scale', 'growth_tracker', 'hysteresis_tracker'; saved with a constant "
                        "--loss-scale?); Megatron stops here too: specify --no-load-optim or "
                        "--finetune, or resume with the checkpoint's --loss-scale", l->path);
    g->scale = scale;
    g->growth_tracker = (int64_t)growth;
    g->hysteresis_tracker = (int64_t)hyst;
    g->loaded = true;
    return MC_OK;
}

/* A torch_dist state of sharding type 'dp_zero_gather_scatter' (dist_checkpoint.c): its
 * param_state is the gathered buffers, as distrib_optim.pt holds them. */
static bool dp_zero(const struct mc_pk *o)
{
    const struct mc_pk *t = mc_pk_get(o, "param_state_sharding_type");
    return t && t->kind == MC_PK_STR && !strcmp(t->s, "dp_zero_gather_scatter");
}

/* DistributedOptimizer.load_state_dict + load_parameter_state: the step from param_groups,
 * the moments (and params) from distrib_optim.pt beside model_optim_rng.pt. */
static mc_status load_distopt(const struct loader *l, const struct mc_pk *o)
{
    int64_t n = total_params(l->s), *order = mc_alloc((size_t)n * 2 * sizeof(int64_t));
    struct ckpt_groups gs;
    if (!order)
        return MC_ERR_NOMEM;
    group_order(l->s, l->scheme, order, &gs);
    mc_free(order);
    const struct mc_pk *inner = mc_pk_get(o, "optimizer");
    const struct mc_pk *groups = mc_pk_is_map(inner) ? mc_pk_get(inner, "param_groups") : NULL;
    if (mc_pk_get(o, "state") || mc_pk_get(o, "fp32_from_fp16_params"))
        return mc_error(MC_ERR_CONFIG, "%s: the optimizer state was saved without "
                        "--use-distributed-optimizer; load it without that option, or add "
                        "--no-load-optim", l->path);
    mc_status gst = check_groups(l, groups, &gs, false);
    if (gst)
        return gst;
    double step;
    if (!mc_pk_number(mc_pk_get(groups->items[0], "step"), &step))
        return mc_error(MC_ERR_UNSUPPORTED, "%s: the optimizer param_groups have no 'step' (a "
                        "checkpoint of Apex/TE FusedAdam, which keeps it elsewhere)", l->path);
    mc_status sst = load_scaler(l, o, "megatron.core.optimizer.distrib_optimizer");
    if (sst)
        return sst;
    for (int c = 0; c < n_chunks(l->s); c++)
        mc_distopt_set_step(chunk_distopt(l->s, c), (int64_t)step);
    const struct mc_pk *model_space = mc_pk_get(o, "param_state"); /* torch_dist (dist_checkpoint.c) */
    char path[4200];
    snprintf(path, sizeof(path), "%s", l->path);
    *strrchr(path, '/') = 0;
    strcat(path, "/distrib_optim.pt");
    if (!model_space && access(path, R_OK))
        return mc_error(MC_ERR_IO, "%s: cannot read %s (the distributed optimizer's state that "
                        "--use-distributed-optimizer saves beside it): %s; add --no-load-optim to "
                        "start the optimizer afresh", l->path, path, strerror(errno));
    int nc = n_chunks(l->s);
    struct mc_ckpt_distopt_chunk ch[MC_CKPT_MAX_CHUNKS];
    mc_status st = MC_OK;
    if (nc > MC_CKPT_MAX_CHUNKS)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: %d model chunks; distrib_optim.pt is read for "
                        "at most %d", path, nc, MC_CKPT_MAX_CHUNKS);
    memset(ch, 0, sizeof(ch));
    for (int c = 0; c < nc && !st; c++) {
        ch[c].o = chunk_distopt(l->s, c);
        ch[c].m = chunk(l->s, c);
        ch[c].perm = mc_alloc((size_t)mc_gpt_num_params(ch[c].m) * sizeof(int64_t));
        ch[c].param_dtype = l->s->params_dtype;
        ch[c].grad_dtype = l->s->grad_dtype;
        ch[c].check_masters = mc_distopt_bf16_remainders(ch[c].o);
        /* the gathered buffers follow the saving model's named_parameters(): a torch_dist
         * model's names do not tell the transformer impl (norms fused or not), its args do */
        enum mc_sd_scheme scheme = !model_space || !dp_zero(o) ? l->scheme
                                   : l->saved_local          ? MC_SD_LOCAL
                                                             : MC_SD_TE;
        st = ch[c].perm ? param_order(ch[c].m, scheme, ch[c].perm) : MC_ERR_NOMEM;
    }
    const struct mc_pk *type = mc_pk_get(o, "param_state_sharding_type");
    if (!st && model_space && type && type->kind == MC_PK_STR && l->log)
        fprintf(l->log, "INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed "
                "optimizer sharded state of type %s\n", type->s);
    if (!st)
        st = !model_space ? mc_ckpt_distopt_load(ch, nc, path)
             : dp_zero(o)   ? mc_ckpt_distopt_load_state(ch, nc, model_space, l->path)
                            : mc_ckpt_distopt_load_model_space(ch, nc, model_space);
    for (int c = 0; c < nc && !st; c++) /* the precision-aware optimizer's states continue */
        if ((st = mc_distopt_ckpt_loaded(ch[c].o)))
            st = mc_error(st, "%s: %s", l->path, mc_last_error());
    for (int c = 0; c < nc; c++)
        mc_free(ch[c].perm);
    return st;
}

/* Float16OptimizerWithFloat16Params.load_state_dict's last part: the fp32 main params, one list
 * per param group, overwrite the (widened) model weights. */
static mc_status load_main_params(const struct loader *l, const struct mc_pk *groups,
                                  const int64_t *order, const struct ckpt_groups *gs)
{
    int ng = gs->n;
    if (!groups || groups->kind != MC_PK_LIST || groups->n != ng)
        return mc_error(MC_ERR_FORMAT, "%s: optimizer fp32_from_fp16_params: expected %d lists "
                        "(one per param group)", l->path, ng);
    for (int g = 0; g < ng; g++) {
        const struct mc_pk *list = groups->items[g];
        int64_t from = gs->g[g].from, to = gs->g[g].to;
        if (list->kind != MC_PK_LIST || list->n != to - from)
            return mc_error(MC_ERR_FORMAT, "%s: optimizer fp32_from_fp16_params[%d] holds %lld "
                            "tensors, the model has %lld parameters in that group", l->path, g,
                            (long long)(list->kind == MC_PK_LIST ? list->n : -1),
                            (long long)(to - from));
        for (int64_t k = from; k < to; k++) {
            struct mc_param_view p = opt_param(l->s, order[k]);
            char what[600];
            snprintf(what, sizeof(what), "optimizer fp32_from_fp16_params[%d][%lld] (%s)", g,
                     (long long)(k - from), p.name);
            mc_status st = copy_tensor(l, what, list->items[k - from], p.ndim, p.shape, p.data);
            if (st)
                return st;
        }
    }
    return MC_OK;
}

/* A checkpoint optimizer state of the other kind than this run's (fp32's torch state_dict vs
 * Float16OptimizerWithFloat16Params'): Megatron fails there (a KeyError after "Unable to load
 * optimizer from checkpoint"), and so do we, saying what would load it. */
static mc_status precision_mismatch(const struct loader *l, bool saved_mixed)
{
    const char *run = precision_name(l->s->params_dtype);
    const char *saved = saved_mixed && !strcmp(l->saved_precision, "fp32") ? "--bf16/--fp16"
                                                                            : l->saved_precision;
    bool known = strchr(saved, '/') == NULL && saved[0] == '-';
    return mc_error(MC_ERR_CONFIG, "%s: the optimizer state was saved by %s %s run (%s), which "
                    "this %s run's optimizer cannot load (Megatron: \"Unable to load optimizer "
                    "from checkpoint\", KeyError '%s'); resume with %s, or specify --no-load-optim "
                    "or --finetune to load only the weights (converted to %s)", l->path,
                    saved_mixed ? "a" : "an", saved_mixed ? saved : "fp32",
                    saved_mixed ? "Float16OptimizerWithFloat16Params: 'optimizer', "
                                  "'fp32_from_fp16_params'"
                                : "the fp32 optimizer's torch state_dict",
                    run, saved_mixed ? "state" : "optimizer_state_dict",
                    !saved_mixed ? "neither --bf16 nor --fp16"
                    : known      ? saved
                                 : "the checkpoint's precision",
                    l->s->params_dtype == MC_DTYPE_F32 ? "float32" : run + 2);
}

static mc_status load_optimizer(const struct loader *l, const struct mc_pk *o)
{
    int64_t n = total_params(l->s);
    struct ckpt_groups gs;
    if (l->s->distopt && mc_pk_is_map(o))
        return load_distopt(l, o);
    const char *main_key = mc_pk_get(o, "fp32_from_fp16_params") ? "fp32_from_fp16_params"
                           : mc_pk_get(o, "fp32_from_fp16") ? "fp32_from_fp16" : NULL;
    const struct mc_pk *state = mc_pk_get(o, "state");
    if (mc_pk_is_map(o) && !state && mc_pk_get(o, "optimizer") && !main_key)
        return mc_error(MC_ERR_CONFIG, "%s: the optimizer state was saved with "
                        "--use-distributed-optimizer (distrib_optim.pt); add that option to load "
                        "it, or --no-load-optim", l->path);
    if (mc_pk_is_map(o) && main_key && !mixed(l->s))
        return precision_mismatch(l, true);
    if (mc_pk_is_map(o) && state && !main_key && mixed(l->s))
        return precision_mismatch(l, false);
    /* Float16OptimizerWithFloat16Params keeps the torch state under 'optimizer' */
    const struct mc_pk *inner = main_key ? mc_pk_get(o, "optimizer") : o;
    state = mc_pk_get(inner, "state");
    if (!mc_pk_is_map(o) || !mc_pk_is_map(inner) || !mc_pk_is_map(state))
        return missing(l, main_key ? "optimizer.optimizer.state" : "optimizer.state",
                       "; specify --no-load-optim or --finetune to skip the optimizer");
    int64_t *order = mc_alloc((size_t)n * 2 * sizeof(int64_t));
    if (!order)
        return MC_ERR_NOMEM;
    group_order(l->s, l->scheme, order, &gs);
    mc_status st = check_groups(l, mc_pk_get(inner, "param_groups"), &gs, true);
    double step = 0;
    if (!st && state->n && state->n != 2 * n)
        st = mc_error(MC_ERR_FORMAT, "%s: optimizer state for %lld parameters, the model has %lld",
                      l->path, (long long)(state->n / 2), (long long)n);
    for (int64_t i = 0; !st && i < state->n; i += 2) {
        const struct mc_pk *k = state->items[i];
        if (k->kind != MC_PK_INT || k->i < 0 || k->i >= n)
            st = mc_error(MC_ERR_FORMAT, "%s: optimizer state key is not a parameter index", l->path);
        else
            st = load_param_state(l, order[k->i], state->items[i + 1], &step);
    }
    /* torch SGD keeps no step: a momentum buffer in the state means the first step is done */
    if (!st && !mc_opt_param_state(l->s->opt, 0).exp_avg && state->n)
        step = 1;
    if (!st)
        mc_opt_set_step_count(l->s->opt, (int64_t)step);
    if (!st && main_key)
        st = load_scaler(l, o, "megatron.core.optimizer.optimizer");
    if (!st && main_key)
        st = load_main_params(l, mc_pk_get(o, main_key), order, &gs);
    mc_free(order);
    return st;
}

#define SCHED_LOG "INFO:megatron.core.optimizer_param_scheduler:"

/* str() of a checkpoint value, as Megatron's log line prints it. */
static void py_str(char *buf, size_t n, const struct mc_pk *v)
{
    if (v->kind == MC_PK_FLOAT)
        mc_py_float_repr(buf, n, v->f);
    else if (v->kind == MC_PK_INT)
        snprintf(buf, n, "%lld", (long long)v->i);
    else if (v->kind == MC_PK_STR)
        snprintf(buf, n, "%s", v->s);
    else
        snprintf(buf, n, "?");
}

/* _check_and_set with Megatron's log line (rank 0's logger). */
static mc_status sched_value(const struct loader *l, const struct mc_pk *sd, const char *key,
                             const char *name, double cls, const struct mc_pk *cls_pk, double *out)
{
    double v;
    const struct mc_pk *x = mc_pk_get(sd, key);
    if (!mc_pk_number(x, &v))
        return missing(l, key, " in opt_param_scheduler");
    mc_status st = mc_opt_sched_check_and_set(l->s->sched, name, cls, v, NULL, out);
    if (st || !l->log)
        return st;
    char buf[64];
    py_str(buf, sizeof(buf), l->s->sched->c.override ? cls_pk : x);
    if (l->s->sched->c.override)
        fprintf(l->log, SCHED_LOG " > overriding %s value to %s\n", name, buf);
    else
        fprintf(l->log, SCHED_LOG " > using checkpoint value %s for %s\n", buf, name);
    return MC_OK;
}

/* The same for a string setting (decay styles). */
static mc_status sched_style(const struct loader *l, const struct mc_pk *v, const char *name,
                             const char *cls, const char **out)
{
    const struct mc_opt_sched_config *c = &l->s->sched->c;
    if (c->override) {
        if (l->log)
            fprintf(l->log, SCHED_LOG " > overriding %s value to %s\n", name, cls);
        *out = cls;
        return MC_OK;
    }
    if (!c->use_checkpoint && strcmp(cls, v->s))
        return mc_error(MC_ERR_CONFIG, "%s: OptimizerParamScheduler: class input value %s and "
                        "checkpoint value %s for %s do not match", l->path, cls, v->s, name);
    if (l->log)
        fprintf(l->log, SCHED_LOG " > using checkpoint value %s for %s\n", v->s, name);
    *out = v->s;
    return MC_OK;
}

static mc_status load_sched(const struct loader *l, const struct mc_pk *sd)
{
    struct mc_opt_sched *s = l->s->sched;
    struct mc_opt_sched_config *c = &s->c;
    static const char *const wd_styles[] = {"constant", "linear", "cosine"};
    double v;
    const char *style_s;
    mc_pk_doc *d = NULL;
    const struct mc_pk *style = mc_pk_get(sd, "lr_decay_style"), *steps = mc_pk_get(sd, "num_steps");
    if (!mc_pk_is_map(sd) || !style || style->kind != MC_PK_STR || !steps || steps->kind != MC_PK_INT)
        return missing(l, "opt_param_scheduler", "; specify --no-load-optim or --finetune");
    mc_status st = mc_pk_doc_init(&d); /* holds the class values for the override lines */
    if (st)
        return st;
    st = sched_value(l, sd, "max_lr", "learning rate", c->max_lr, mc_pk_float(d, c->max_lr), &c->max_lr);
    st = st ? st : sched_value(l, sd, "min_lr", "minimum learning rate", c->min_lr,
                               mc_pk_float(d, c->min_lr), &c->min_lr);
    st = st ? st : sched_value(l, sd, "lr_warmup_steps", "warmup iterations", c->warmup_steps,
                               mc_pk_float(d, c->warmup_steps), &c->warmup_steps);
    st = st ? st : sched_value(l, sd, "lr_decay_steps", "total number of iterations", (double)c->decay_steps,
                               mc_pk_int(d, c->decay_steps), &v);
    if (!st) {
        c->decay_steps = (int64_t)v;
        st = sched_style(l, style, "learning rate decay style", mc_lr_decay_name(c->decay_style), &style_s);
    }
    if (!st && !mc_lr_decay_parse(style_s, &c->decay_style))
        st = mc_error(MC_ERR_FORMAT, "%s: unknown lr_decay_style '%s'", l->path, style_s);
    if (!st)
        mc_opt_sched_step(s, steps->i);
    const struct mc_pk *wds = mc_pk_get(sd, "wd_incr_style");
    if (!st && mc_pk_get(sd, "start_wd") && wds && wds->kind == MC_PK_STR) {
        st = sched_value(l, sd, "start_wd", "start weight decay", c->start_wd, mc_pk_float(d, c->start_wd), &c->start_wd);
        st = st ? st : sched_value(l, sd, "end_wd", "end weight decay", c->end_wd, mc_pk_float(d, c->end_wd), &c->end_wd);
        st = st ? st : sched_value(l, sd, "wd_incr_steps", "total number of weight decay iterations",
                                   (double)c->wd_incr_steps, mc_pk_int(d, c->wd_incr_steps), &v);
        if (!st) {
            c->wd_incr_steps = (int64_t)v;
            st = sched_style(l, wds, "weight decay incr style", wd_styles[c->wd_incr_style], &style_s);
        }
        if (!st && !mc_wd_incr_parse(style_s, &c->wd_incr_style))
            st = mc_error(MC_ERR_FORMAT, "%s: unknown wd_incr_style '%s'", l->path, style_s);
    }
    mc_pk_doc_free(d);
    return st;
}

/* The saved args' tensor / pipeline parallel sizes (1 when absent). */
static void saved_layout(const struct mc_pk *ck, int *tp, int *pp)
{
    double v;
    *tp = mc_pk_number(mc_pk_get(ck, "tensor_model_parallel_size"), &v) ? (int)v : 1;
    *pp = mc_pk_number(mc_pk_get(ck, "pipeline_model_parallel_size"), &v) ? (int)v : 1;
}

/* A checkpoint of another tensor / pipeline layout: Megatron's torch format cannot be loaded
 * across layouts; the converter reshards it. */
static mc_status layout_error(const struct mc_ckpt_state *s, const char *dir, const char *what,
                              const struct mc_pk *ck)
{
    int tp, pp;
    saved_layout(ck, &tp, &pp);
    return mc_error(MC_ERR_CONFIG, "--load %s: %s was saved with --tensor-model-parallel-size %d "
                    "--pipeline-model-parallel-size %d, this run uses --tensor-model-parallel-size %d "
                    "--pipeline-model-parallel-size %d; a torch-format checkpoint loads only into "
                    "its own layout. Reshard it first: convert_checkpoint --model-type GPT --loader "
                    "core --saver core --load-dir %s --save-dir %s_tp%d_pp%d "
                    "--target-tensor-parallel-size %d --target-pipeline-parallel-size %d",
                    dir, what, tp, pp, tp_size(s), pp_size(s), dir, dir, tp_size(s), pp_size(s),
                    tp_size(s), pp_size(s));
}

/* read_metadata: an int > 0 or "release". */
static mc_status read_tracker(const char *tracker, int64_t *iteration, bool *release)
{
    FILE *f = fopen(tracker, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot open %s: %s", tracker, strerror(errno));
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    char *s = buf, *e = buf + n;
    while (s < e && strchr(" \t\r\n", *s)) s++;
    while (e > s && strchr(" \t\r\n", e[-1])) *--e = 0;
    *release = !strcmp(s, "release");
    char *end;
    errno = 0;
    *iteration = *release ? 0 : strtoll(s, &end, 10);
    if (!*release && errno == ERANGE)
        return mc_error(MC_ERR_FORMAT, "ERROR: Invalid metadata file %s: '%s' is not a valid "
                        "iteration number (it does not fit in 64 bits)", tracker, s);
    if (!*release && (end == s || *end || *iteration <= 0))
        return mc_error(MC_ERR_FORMAT, "ERROR: Invalid metadata file %s: '%s' (expected an "
                        "iteration > 0 or 'release')", tracker, s);
    return MC_OK;
}

/* The number of model chunks saved (model, or model0 .. model{V-1}) must be this run's: a
 * checkpoint of another virtual-pipeline layout is resharded by the converter. */
static mc_status check_chunks(const struct loader *l, const struct mc_pk *sd)
{
    int saved = 0;
    while (saved < 1000) {
        char key[32];
        snprintf(key, sizeof(key), "model%d", saved);
        if (!mc_pk_get(sd, key))
            break;
        saved++;
    }
    int want = l->s->n_chunks > 1 ? l->s->n_chunks : 0;
    if (saved == want)
        return MC_OK;
    const char *dir = l->s->opts.dir;
    char have[96], run[96];
    if (saved)
        snprintf(have, sizeof(have), "--num-virtual-stages-per-pipeline-rank %d (model0 .. model%d)",
                 saved, saved - 1);
    else
        snprintf(have, sizeof(have), "no virtual pipeline (one 'model' per file)");
    if (want)
        snprintf(run, sizeof(run), "--num-virtual-stages-per-pipeline-rank %d", want);
    else
        snprintf(run, sizeof(run), "no virtual pipeline");
    int tp = tp_size(l->s), pp = pp_size(l->s);
    return mc_error(MC_ERR_CONFIG, "--load %s: %s was saved with %s, this run uses %s; a "
                    "torch-format checkpoint loads only into its own layout. convert_checkpoint "
                    "--model-type GPT --loader core --saver core --load-dir %s --save-dir %s_tp%d_pp%d "
                    "--target-tensor-parallel-size %d --target-pipeline-parallel-size %d reads it "
                    "and writes it without virtual pipeline (as Megatron's saver does)%s", dir,
                    l->path, have, run, dir, dir, tp, pp, tp, pp,
                    want ? "; train that one without --num-virtual-stages-per-pipeline-rank / "
                           "--num-layers-per-virtual-pipeline-stage, or resume from a checkpoint "
                           "saved with this run's virtual pipeline size" : "");
}

static mc_status load_state(struct loader *l, const struct mc_pk *sd, bool release)
{
    struct mc_ckpt_state *s = l->s;
    bool finetune = s->opts.finetune;
    double version = 0;
    if (!mc_pk_is_map(sd))
        return mc_error(MC_ERR_FORMAT, "%s: the checkpoint is not a dict", l->path);
    mc_pk_number(mc_pk_get(sd, "checkpoint_version"), &version);
    if (version != CKPT_VERSION)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: checkpoint_version %g; this build reads version "
                        "3.0 (Megatron-LM >= 2.x torch checkpoints)", l->path, version);
    double it = 0, flops = 0;
    if (!finetune && !release && !mc_pk_number(mc_pk_get(sd, "iteration"), &it))
        return missing(l, "iteration", "");
    s->iteration = (int64_t)it;
    mc_pk_number(mc_pk_get(sd, "num_floating_point_operations_so_far"), &flops);
    s->num_floating_point_operations_so_far = flops;
    const struct mc_pk *ck = mc_pk_get(sd, "args");
    mc_status st;
    l->saved_precision = saved_precision(ck);
    const struct mc_pk *impl = mc_pk_get(ck, "transformer_impl");
    l->saved_local = impl && impl->kind == MC_PK_STR && !strcmp(impl->s, "local");
    if (ck && !finetune) {
        if (s->opts.load_args && (st = s->opts.load_args(s->opts.args_ctx, ck, l->path)))
            return st;
    } else if (l->log) {
        fprintf(l->log, "could not find arguments in the checkpoint ...\n");
    }
    if ((st = check_chunks(l, sd)))
        return st;
    for (int c = 0; c < n_chunks(s); c++) {
        char key[32];
        snprintf(key, sizeof(key), s->n_chunks > 1 ? "model%d" : "model", c);
        const struct mc_pk *model = mc_pk_get(sd, key);
        if (c == 0 && mc_pk_is_map(model))
            l->scheme = detect_scheme(model);
        if ((st = load_model(l, model, chunk(s, c), key)))
            return st;
    }
    if (l->log)
        fprintf(l->log, " checkpoint version 3.0\n");
    if (!release && !finetune && s->opts.load_optim) {
        const struct mc_pk *o = mc_pk_get(sd, "optimizer");
        if (!o)
            return missing(l, "optimizer", "; specify --no-load-optim or --finetune to prevent "
                                           "attempting to load the optimizer state");
        if ((st = load_optimizer(l, o)) || (st = load_sched(l, mc_pk_get(sd, "opt_param_scheduler"))))
            return st;
    }
    /* RerunStateMachine.load_state_dict with the machine disabled (megatron.c has no rerun) */
    if (mc_pk_get(sd, "rerun_state_machine") && l->log)
        fprintf(l->log, "WARNING:megatron.core.rerun_state_machine:RerunStateMachine disabled via "
                        "CLI, ignoring machine state saved in checkpoint\n");
    return MC_OK;
}

/* This rank's file is missing: a torch_dist checkpoint, another parallel layout (named from the
 * args of a file that is there), or a missing shard of this layout. */
static mc_status explain_missing(const struct mc_ckpt_state *s, const char *dir, const char *path)
{
    char iter_dir[4096], probe[4400];
    snprintf(iter_dir, sizeof(iter_dir), "%s", path);
    *strrchr(iter_dir, '/') = 0;
    *strrchr(iter_dir, '/') = 0;
    snprintf(probe, sizeof(probe), "%s/metadata.json", iter_dir);
    if (!access(probe, F_OK))
        return mc_error(MC_ERR_UNSUPPORTED, "--load %s: %s is a torch_dist (distributed) checkpoint; "
                        "only --ckpt-format torch is supported (Megatron converts with "
                        "--ckpt-convert-format torch --ckpt-convert-save DIR)", dir, iter_dir);
    /* find_checkpoint_rank_0's probes: the first shard of either naming */
    static const char *const first[] = {"mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000"};
    for (int k = 0; k < 3; k++) {
        snprintf(probe, sizeof(probe), "%s/%s/model_optim_rng.pt", iter_dir, first[k]);
        if (access(probe, R_OK) || !strcmp(probe, path))
            continue;
        if (k == 2)
            return mc_error(MC_ERR_UNSUPPORTED, "--load %s: %s holds an expert-parallel checkpoint "
                            "(mp_rank_00_000_000); expert parallelism is not supported", dir, iter_dir);
        mc_pk_doc *d;
        struct mc_pk *sd;
        mc_status st = mc_pk_doc_init(&d);
        if (!st && !(st = mc_torch_load(d, probe, &sd))) {
            int tp, pp;
            const struct mc_pk *ck = mc_pk_is_map(sd) ? mc_pk_get(sd, "args") : NULL;
            saved_layout(ck, &tp, &pp);
            if (ck && (tp != tp_size(s) || pp != pp_size(s)))
                st = layout_error(s, dir, iter_dir, ck);
            else
                st = mc_error(MC_ERR_IO, "--load %s: missing shard: %s does not exist; the checkpoint "
                              "(--tensor-model-parallel-size %d --pipeline-model-parallel-size %d, "
                              "as this run) has no file for tensor-parallel rank %d, pipeline rank %d",
                              dir, path, tp, pp, s->tp_rank, s->pp_rank);
        }
        mc_pk_doc_free(d);
        return st;
    }
    return MC_OK;
}

/* load_checkpoint's torch_dist branch before it loads: at another (TP, PP) than the saving run's
 * Megatron says the RNG and rerun states are ignored, and refuses a distributed optimizer state
 * of sharding type 'dp_zero_gather_scatter' (its buffers are the saving layout's). The encoder
 * sizes are 0 (no encoder here; absent from a saved args: getattr's default). */
static mc_status dist_layout(const struct mc_ckpt_state *s, FILE *log, const char *iter_dir)
{
    char path[4200], msg[256];
    snprintf(path, sizeof(path), "%s/common.pt", iter_dir);
    mc_pk_doc *d;
    struct mc_pk *c;
    mc_status st = mc_pk_doc_init(&d);
    if (st || (st = mc_torch_load(d, path, &c))) { /* mc_dist_ckpt_read reports it */
        if (!st)
            mc_pk_doc_free(d);
        return MC_OK;
    }
    const struct mc_pk *ck = mc_pk_is_map(c) ? mc_pk_get(c, "args") : NULL;
    const struct mc_pk *type = mc_pk_get(mc_pk_is_map(c) ? mc_pk_get(c, "optimizer") : NULL,
                                         "param_state_sharding_type");
    int tp, pp;
    double etp = 0, epp = 0;
    saved_layout(ck, &tp, &pp);
    if (!mc_pk_number(mc_pk_get(ck, "encoder_tensor_model_parallel_size"), &etp))
        etp = 0;
    if (!mc_pk_number(mc_pk_get(ck, "encoder_pipeline_model_parallel_size"), &epp))
        epp = 0;
    bool dp_zero_state = type && type->kind == MC_PK_STR && !strcmp(type->s, "dp_zero_gather_scatter");
    mc_pk_doc_free(d);
    if (!ck || (tp == tp_size(s) && pp == pp_size(s) && etp == 0 && epp == 0))
        return MC_OK;
    snprintf(msg, sizeof(msg), "(TP, PP, encoder TP, encoder PP) mismatch after resume ((%d, %d, 0, 0) "
             "vs (%d, %d, %lld, %lld) from checkpoint)", tp_size(s), pp_size(s), tp, pp,
             (long long)etp, (long long)epp);
    if (log)
        fprintf(log, "%s: RNG state will be ignored\n", msg);
    if (s->distopt && dp_zero_state && s->opts.load_optim && !s->opts.finetune)
        return mc_error(MC_ERR_CONFIG, "%s: %s: not supported for DistributedOptimizer with sharding "
                        "type dp_zero_gather_scatter. Please use `--ckpt-fully-parallel-save` flag "
                        "during checkpoint saving. (Add --no-load-optim to load only the weights at "
                        "this layout.)", iter_dir, msg);
    if (log)
        fprintf(log, "%s: Rerun state will be ignored\n", msg);
    return MC_OK;
}

/* A torch_dist checkpoint (any layout): this rank's state dict from dist_checkpoint.c, then the
 * same loading as the torch format's. */
static mc_status load_dist(struct mc_ckpt_state *s, FILE *log, const char *dir, const char *iter_dir,
                           int64_t iteration, bool release)
{
    mc_status lst = release ? MC_OK : dist_layout(s, log, iter_dir);
    if (lst)
        return lst;
    if (log) {
        if (release)
            fprintf(log, " loading release distributed checkpoint from %s\n", dir);
        else
            fprintf(log, " loading distributed checkpoint from %s at iteration %lld\n", dir,
                    (long long)iteration);
    }
    mc_pk_doc *d;
    mc_status st = mc_pk_doc_init(&d);
    if (st)
        return st;
    struct mc_pk *sd;
    char what[4200];
    snprintf(what, sizeof(what), "%s/common.pt", iter_dir);
    struct loader l = {.s = s, .path = what, .log = log};
    if (!(st = mc_dist_ckpt_read(d, s, iter_dir, log, &sd)))
        st = load_state(&l, sd, release);
    mc_pk_doc_free(d);
    return st;
}

/* This rank's part of load_checkpoint once the iteration is known. */
static mc_status load_rank(struct mc_ckpt_state *s, FILE *log, const char *dir, const char *tracker,
                           int64_t iteration, bool release)
{
    char path[4096];
    ckpt_name(s, path, sizeof(path), dir, iteration, release);
    mc_status st;
    char iter_dir[4096];
    snprintf(iter_dir, sizeof(iter_dir), "%s", path);
    *strrchr(iter_dir, '/') = 0;
    *strrchr(iter_dir, '/') = 0;
    /* Megatron reads a torch_dist directory with --ckpt-format torch_dist (the default) or
     * --auto-detect-ckpt-format; --ckpt-format torch alone looks for mp_rank_* files */
    if (mc_dist_ckpt_is(iter_dir) && !s->opts.read_dist)
        return mc_error(MC_ERR_CONFIG, "--load %s: %s is a torch_dist checkpoint, which --ckpt-format "
                        "%s does not read; use --ckpt-format torch_dist (Megatron's default) or add "
                        "--auto-detect-ckpt-format", dir, iter_dir, s->opts.ckpt_format);
    if (mc_dist_ckpt_is(iter_dir))
        return load_dist(s, log, dir, iter_dir, iteration, release);
    if (access(path, R_OK) && (st = explain_missing(s, dir, path)))
        return st;
    if (access(path, R_OK))
        return mc_error(MC_ERR_IO, "--load %s: the checkpoint %s of iteration %lld (from %s%s) "
                        "cannot be read: %s", dir, path, (long long)iteration, tracker,
                        s->opts.ckpt_step ? " / --ckpt-step" : "",
                        strerror(errno));
    if (log) {
        if (release)
            fprintf(log, " loading release checkpoint from %s\n", dir);
        else
            fprintf(log, " loading checkpoint from %s at iteration %lld\n", dir, (long long)iteration);
    }
    mc_pk_doc *d;
    if ((st = mc_pk_doc_init(&d)))
        return st;
    struct mc_pk *sd;
    struct loader l = {.s = s, .path = path, .log = log};
    if (!(st = mc_torch_load(d, path, &sd)))
        st = load_state(&l, sd, release);
    mc_pk_doc_free(d);
    return st;
}

mc_status mc_ckpt_load(struct mc_ckpt_state *s, FILE *log, bool *loaded)
{
    const char *dir = s->opts.dir;
    char tracker[4096];
    *loaded = false;
    s->iteration = 0;
    snprintf(tracker, sizeof(tracker), "%s/%s", dir, TRACKER);
    bool step_given = s->opts.ckpt_step != 0;
    if (access(tracker, F_OK) && !step_given) {
        if (s->opts.exit_on_missing)
            return mc_error(MC_ERR_IO, "--exit-on-missing-checkpoint: no checkpoint to load: %s "
                            "does not exist", tracker);
        if (log)
            fprintf(log, "WARNING: could not find the metadata file %s\n    will not load any "
                    "checkpoints and will start from random\n", tracker);
        return MC_OK;
    }
    int64_t iteration = 0;
    bool release = false;
    mc_status st = step_given ? MC_OK : read_tracker(tracker, &iteration, &release);
    if (step_given) /* --ckpt-step picks the iteration, with or without a tracker file */
        iteration = s->opts.ckpt_step;
    if (!st)
        st = load_rank(s, log, dir, tracker, iteration, release);
    /* every rank learns whether all loaded: none goes on to train while another has failed */
    if ((st = agree(s, st, "loading the checkpoint")))
        return st;
    *loaded = true;
    if (log) {
        fprintf(log, "  successfully loaded checkpoint from %s [ t %d/%d, p %d/%d ] at iteration %lld\n",
                dir, s->tp_rank + 1, tp_size(s), s->pp_rank + 1, pp_size(s), (long long)s->iteration);
        fflush(log);
    }
    return MC_OK;
}

/* ---- helpers for the checkpoint converter (src/tools/checkpoint/convert_args.c) -------------- */
struct mc_pk *mc_ckpt_rerun_state(mc_pk_doc *d, int64_t iteration) { return rerun_dict(d, iteration); }

struct mc_pk *mc_ckpt_rerun_common(mc_pk_doc *d)
{
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT);
    if (!o || mc_pk_set(d, o, "mode", mc_pk_enum_member(d, "megatron.core.rerun_state_machine",
                                                        "RerunMode", "DISABLED")))
        return NULL;
    return o;
}

/* ---- for the args check of training/checkpointing.c ------------------------------------------ */
mc_status mc_ckpt_layout_error(const struct mc_ckpt_state *s, const char *what, const struct mc_pk *ck)
{
    return layout_error(s, s->opts.dir, what, ck);
}
mc_status mc_ckpt_missing(const char *path, const char *key, const char *hint)
{
    struct loader l = {.path = path};
    return missing(&l, key, hint);
}

/* ---- helpers for the torch_dist reader (src/checkpointing/dist_checkpoint.c) ----------------- */
int64_t mc_ckpt_total_params(const struct mc_ckpt_state *s) { return total_params(s); }
struct mc_param_view mc_ckpt_opt_param(const struct mc_ckpt_state *s, int64_t gi) { return opt_param(s, gi); }
const mc_gpt_model *mc_ckpt_opt_param_model(const struct mc_ckpt_state *s, int64_t gi)
{
    int c = 0;
    while (gi >= mc_gpt_num_params(chunk(s, c)))
        gi -= mc_gpt_num_params(chunk(s, c++));
    return chunk(s, c);
}
void mc_ckpt_group_order(const struct mc_ckpt_state *s, enum mc_sd_scheme scheme, int64_t *order,
                         int64_t *n_first, bool *first_decay)
{
    struct ckpt_groups gs; /* at most 2 here: torch_dist with --decoupled-lr is refused */
    group_order(s, scheme, order, &gs);
    MC_ASSERT(gs.n <= 2);
    *n_first = gs.g[0].to;
    *first_decay = gs.g[0].decay;
}
