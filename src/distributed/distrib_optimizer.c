/* The distributed optimizer, mirrors megatron/core/optimizer/distrib_optimizer.py
 * (DistributedOptimizer: shard ranges per bucket, step on the shard's main params) and the
 * grad reduce-scatter / param all-gather of megatron/core/distributed/param_and_grad_buffer.py
 * (core_v0.12.1), fp32 only. The engine keeps params and grads in forward (state_dict) order
 * without padding, so each step copies the grads into a buffer laid out exactly as Megatron's
 * (reverse order, padded: param_and_grad_buffer.c) and reduce-scatters it bucket by bucket;
 * data-parallel rank d owns [d*size/dp, (d+1)*size/dp) of every bucket, keeps Adam state for
 * those elements only, updates the model's params there, and the same buffer then carries the
 * params through the all-gather. Grad norm and zero count sum each owned element once over
 * the whole world (tp x dp), skipping tensor-parallel duplicates as clip_grads.py does. */
#include "distributed/distrib_optimizer.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "models/gpt/gpt_model.h"
#include "optimizer/optimizer_internal.h"

#if defined(MC_HAVE_MPI)
#include <mpi.h>
#endif

struct mc_distopt {
    struct mc_optimizer_config cfg;
    struct mc_gpt_model *model;
    struct mc_pgb_map map;
    struct mc_pgb_config pgb; /* how map was laid out */
    int dp, dp_rank;
    void *dp_comm;      /* MPI_Comm * of the data-parallel(-context) group */
    void *world_comm;   /* every rank: grad norm and zero count */
    float *buffer;      /* [map.numel] Megatron-layout grads, then params */
    float *main_grad;   /* [shard_numel] this rank's reduce-scattered grads */
    float *state;       /* Adam: [exp_avg | exp_avg_sq], SGD: [momentum], each [shard_numel] */
    int64_t shard_numel;
    int64_t *shard_off; /* [n_buckets] where bucket b's shard starts in the shard arrays */
    int64_t step;
};

/* This rank's part of parameter i: n elements at model offset *at_model, shard offset
 * *at_shard (n = 0 when it owns none). */
static int64_t owned(const mc_distopt *o, int64_t i, int64_t *at_model, int64_t *at_shard)
{
    const struct mc_pgb_range *p = &o->map.param[i];
    const struct mc_pgb_bucket *b = &o->map.bucket[p->bucket];
    int64_t per = (b->end - b->start) / o->dp;
    int64_t s0 = b->start + o->dp_rank * per, s1 = s0 + per;
    int64_t lo = p->start > s0 ? p->start : s0, hi = p->end < s1 ? p->end : s1;
    if (lo >= hi)
        return 0;
    *at_model = o->model->params[i].offset + (lo - p->start);
    *at_shard = o->shard_off[p->bucket] + (lo - s0);
    return hi - lo;
}

/* Megatron's shared_embedding attribute: with tied embeddings split across pipeline stages,
 * the first stage's word embedding (when it is not also the last) and the last stage's copy. */
static bool is_shared_embedding(const struct mc_gpt_model *m, int64_t i)
{
    const struct mc_gpt_config *c = &m->cfg;
    if (c->pipeline_model_parallel_size == 1 || c->untie_embeddings_and_output_weights)
        return false;
    if (m->params[i].view.shared)
        return true;
    return c->pipeline_model_parallel_rank == 0 &&
           !strcmp(m->params[i].name, "embedding.word_embeddings.weight");
}

mc_status mc_distopt_map_init(const mc_gpt_model *m, const struct mc_pgb_config *c,
                              struct mc_pgb_map *out)
{
    int64_t *numel = mc_alloc((size_t)m->n_params * sizeof(int64_t));
    bool *shared = mc_alloc((size_t)m->n_params * sizeof(bool));
    mc_status st = MC_ERR_NOMEM;
    if (!numel || !shared)
        goto out;
    for (int64_t i = 0; i < m->n_params; i++) {
        numel[i] = m->params[i].view.numel;
        shared[i] = is_shared_embedding(m, i);
    }
    st = mc_pgb_map_init(c, m->n_params, numel, shared, out);
out:
    mc_free(numel);
    mc_free(shared);
    return st;
}

static mc_status alloc_shards(mc_distopt *o)
{
    const struct mc_pgb_map *mp = &o->map;
    o->shard_off = mc_alloc((size_t)mp->n_buckets * sizeof(int64_t));
    if (!o->shard_off)
        return MC_ERR_NOMEM;
    for (int64_t b = 0; b < mp->n_buckets; b++) {
        int64_t per = (mp->bucket[b].end - mp->bucket[b].start) / o->dp;
        if (per > INT_MAX)
            return mc_error(MC_ERR_UNSUPPORTED, "--use-distributed-optimizer: bucket %lld shard "
                            "has %lld elements, more than one MPI call moves (set "
                            "--overlap-grad-reduce --ddp-bucket-size smaller)", (long long)b,
                            (long long)per);
        o->shard_off[b] = o->shard_numel;
        o->shard_numel += per;
    }
    int64_t blocks = o->cfg.optimizer == MC_OPT_ADAM ? 2 : 1;
    o->buffer = mc_calloc((size_t)mp->numel, sizeof(float));
    o->main_grad = mc_calloc((size_t)o->shard_numel, sizeof(float));
    o->state = mc_calloc((size_t)(blocks * o->shard_numel), sizeof(float));
    return o->buffer && o->main_grad && o->state ? MC_OK : MC_ERR_NOMEM;
}

mc_status mc_distopt_init(const struct mc_optimizer_config *cfg, mc_gpt_model *m,
                          const struct mc_parallel_state *ps, void *world_comm, int64_t bucket_size,
                          bool pad_buckets_for_high_nccl_busbw, mc_distopt **out)
{
    *out = NULL;
    mc_status st = mc_opt_config_check(cfg);
    if (st)
        return st;
    mc_distopt *o = mc_calloc(1, sizeof(*o));
    if (!o)
        return MC_ERR_NOMEM;
    o->cfg = *cfg;
    o->model = m;
    o->dp = mc_ps_size(ps, MC_PS_DP_CP);
    o->dp_rank = mc_ps_rank(ps, MC_PS_DP_CP);
    o->dp_comm = ps->group[MC_PS_DP_CP].comm;
    o->world_comm = world_comm;
#if !defined(MC_HAVE_MPI)
    if (o->dp > 1) {
        mc_distopt_free(o);
        return mc_error(MC_ERR_UNSUPPORTED, "--use-distributed-optimizer with %d data-parallel "
                        "ranks needs a build with MPI", o->dp);
    }
#endif
    struct mc_pgb_config pc = {o->dp, true, bucket_size, pad_buckets_for_high_nccl_busbw};
    o->pgb = pc;
    if ((st = mc_distopt_map_init(m, &pc, &o->map)) ||
        (st = alloc_shards(o))) {
        mc_distopt_free(o);
        return st;
    }
    *out = o;
    return MC_OK;
}

void mc_distopt_free(mc_distopt *o)
{
    if (!o)
        return;
    mc_pgb_map_free(&o->map);
    mc_free(o->buffer);
    mc_free(o->main_grad);
    mc_free(o->state);
    mc_free(o->shard_off);
    mc_free(o);
}

const struct mc_pgb_map *mc_distopt_map(const mc_distopt *o) { return &o->map; }

void mc_distopt_shard(mc_distopt *o, struct mc_distopt_shard *out)
{
    bool adam = o->cfg.optimizer == MC_OPT_ADAM;
    *out = (struct mc_distopt_shard){
        .exp_avg = adam ? o->state : NULL,
        .exp_avg_sq = adam ? o->state + o->shard_numel : NULL,
        .momentum = adam ? NULL : o->state,
        .shard_numel = o->shard_numel, .shard_off = o->shard_off,
        .dp = o->dp, .dp_rank = o->dp_rank, .dp_comm = o->dp_comm, .step = o->step};
}

void mc_distopt_set_step(mc_distopt *o, int64_t step) { o->step = step; }

mc_status mc_distopt_map_in_order(const mc_distopt *o, const int64_t *perm, struct mc_pgb_map *out)
{
    const struct mc_gpt_model *m = o->model;
    int64_t *numel = mc_alloc((size_t)m->n_params * sizeof(int64_t));
    bool *shared = mc_alloc((size_t)m->n_params * sizeof(bool));
    mc_status st = MC_ERR_NOMEM;
    if (numel && shared) {
        for (int64_t j = 0; j < m->n_params; j++) {
            numel[j] = m->params[perm[j]].view.numel;
            shared[j] = is_shared_embedding(m, perm[j]);
        }
        st = mc_pgb_map_init(&o->pgb, m->n_params, numel, shared, out);
    }
    mc_free(numel);
    mc_free(shared);
    return st;
}

void mc_distopt_state_numel(const mc_distopt *o, int64_t *sharded, int64_t *full)
{
    int64_t blocks = o->cfg.optimizer == MC_OPT_ADAM ? 2 : 1;
    *sharded = blocks * o->shard_numel;
    *full = blocks * o->model->n_elements;
}

/* Model block <-> buffer, every param at its Megatron range (padding stays zero). */
static void to_buffer(mc_distopt *o, const float *block)
{
    const struct mc_gpt_model *m = o->model;
    for (int64_t i = 0; i < m->n_params; i++)
        memcpy(o->buffer + o->map.param[i].start, block + m->params[i].offset,
               (size_t)m->params[i].view.numel * sizeof(float));
}

static void from_buffer(mc_distopt *o, float *block)
{
    const struct mc_gpt_model *m = o->model;
    for (int64_t i = 0; i < m->n_params; i++)
        memcpy(block + m->params[i].offset, o->buffer + o->map.param[i].start,
               (size_t)m->params[i].view.numel * sizeof(float));
}

/* Reduce-scatter (sum) of each bucket over the DP group into main_grad. */
static mc_status reduce_scatter(mc_distopt *o)
{
    for (int64_t b = 0; b < o->map.n_buckets; b++) {
        const struct mc_pgb_bucket *bk = &o->map.bucket[b];
        int64_t per = (bk->end - bk->start) / o->dp;
        if (o->dp == 1) {
            memcpy(o->main_grad + o->shard_off[b], o->buffer + bk->start,
                   (size_t)per * sizeof(float));
            continue;
        }
#if defined(MC_HAVE_MPI)
        mc_comm_stats_add(MC_COMM_KIND_DP, MC_COMM_REDUCE_SCATTER,
                          (double)(bk->end - bk->start) * sizeof(float), (int)o->dp);
        mc_comm_wait_begin("distributed-optimizer grad reduce-scatter");
        int rc = MPI_Reduce_scatter_block(o->buffer + bk->start, o->main_grad + o->shard_off[b],
                                          (int)per, MPI_FLOAT, MPI_SUM, *(MPI_Comm *)o->dp_comm);
        mc_comm_wait_end();
        if (rc != MPI_SUCCESS)
            return mc_error(MC_ERR_COMM, "distributed optimizer: reduce-scatter of grad bucket "
                            "%lld failed (MPI error %d)", (long long)b, rc);
#endif
    }
    return MC_OK;
}

/* All-gather of each bucket's param shards over the DP group, in place in the buffer. */
static mc_status all_gather(mc_distopt *o)
{
    if (o->dp == 1)
        return MC_OK;
#if defined(MC_HAVE_MPI)
    for (int64_t b = 0; b < o->map.n_buckets; b++) {
        const struct mc_pgb_bucket *bk = &o->map.bucket[b];
        int per = (int)((bk->end - bk->start) / o->dp);
        mc_comm_stats_add(MC_COMM_KIND_DP, MC_COMM_ALL_GATHER,
                          (double)(bk->end - bk->start) * sizeof(float), (int)o->dp);
        mc_comm_wait_begin("distributed-optimizer param all-gather");
        int rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, o->buffer + bk->start, per,
                               MPI_FLOAT, *(MPI_Comm *)o->dp_comm);
        mc_comm_wait_end();
        if (rc != MPI_SUCCESS)
            return mc_error(MC_ERR_COMM, "distributed optimizer: all-gather of param bucket "
                            "%lld failed (MPI error %d)", (long long)b, rc);
    }
#endif
    return MC_OK;
}

static bool counted(const struct mc_gpt_model *m, const struct mc_param_view *v)
{
    return !v->shared && (v->tensor_parallel || m->tp.rank == 0);
}

/* get_grad_norm_fp32 + count_zeros_fp32 over the shards: sums over the world. */
static mc_status grad_stats(mc_distopt *o, float *norm, int64_t *zeros)
{
    const struct mc_gpt_model *m = o->model;
    double sq = 0.0;
    int64_t z = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        int64_t at_m, at_s, n = owned(o, i, &at_m, &at_s);
        if (n == 0 || !counted(m, &m->params[i].view))
            continue;
        sq += m->be->sumsq(o->main_grad + at_s, n);
        z += m->be->count_zeros(o->main_grad + at_s, n);
    }
    void *world = o->world_comm;
    float stats[2] = {(float)sq, (float)z}; /* Megatron reduces both as float tensors */
    mc_status st = mc_comm_all_reduce(world, stats, 2, MC_COMM_FLOAT, MC_COMM_SUM,
                                      "distributed optimizer grad-norm all-reduce");
    *norm = sqrtf(stats[0]);
    *zeros = world ? (int64_t)stats[1] : z;
    return st;
}

static void update(mc_distopt *o, float lr, float weight_decay)
{
    struct mc_gpt_model *m = o->model;
    const struct mc_optimizer_config *c = &o->cfg;
    o->step++;
    for (int64_t i = 0; i < m->n_params; i++) {
        int64_t at_m, at_s, n = owned(o, i, &at_m, &at_s);
        if (n == 0)
            continue;
        float wd = m->params[i].view.no_weight_decay ? 0.0f : weight_decay;
        float *p = m->param_block + at_m, *g = o->main_grad + at_s;
        if (c->optimizer == MC_OPT_ADAM)
            m->be->adamw(p, o->state + at_s, o->state + o->shard_numel + at_s, g, n, lr,
                         c->adam_beta1, c->adam_beta2, c->adam_eps, wd, o->step);
        else
            m->be->sgd(p, o->state + at_s, g, n, lr, c->sgd_momentum, wd, o->step == 1);
    }
}

mc_status mc_distopt_step(mc_distopt *o, float grad_scale, float post_scale, float lr,
                          float weight_decay, struct mc_opt_step_result *res)
{
    struct mc_gpt_model *m = o->model;
    to_buffer(o, m->grad_block);
    if (grad_scale != 1.0f)
        m->be->scale(o->buffer, grad_scale, o->map.numel);
    mc_status st = reduce_scatter(o);
    if (st)
        return st;
    if (post_scale != 1.0f)
        m->be->scale(o->main_grad, post_scale, o->shard_numel);
    float norm;
    int64_t zeros;
    if ((st = grad_stats(o, &norm, &zeros)))
        return st;
    if (o->cfg.clip_grad > 0.0f) {
        float coeff = o->cfg.clip_grad / (norm + 1.0e-6f);
        if (coeff < 1.0f)
            m->be->scale(o->main_grad, coeff, o->shard_numel);
    }
    update(o, lr, weight_decay);
    to_buffer(o, m->param_block);
    if ((st = all_gather(o)))
        return st;
    from_buffer(o, m->param_block);
    if (res) {
        res->grad_norm = norm;
        res->num_zeros = zeros;
    }
    return MC_OK;
}
