/* The distributed optimizer, mirrors megatron/core/optimizer/distrib_optimizer.py
 * (DistributedOptimizer: shard ranges per bucket, step on the shard's main params) and the
 * grad reduce-scatter / param all-gather of megatron/core/distributed/param_and_grad_buffer.py
 * (core_v0.12.1), fp32 only. The engine keeps params and grads in forward (state_dict) order
 * without padding, so each step copies the grads into a buffer laid out exactly as Megatron's
 * (reverse order, padded: param_and_grad_buffer.c) and reduce-scatters it bucket by bucket;
 * data-parallel rank d owns [d*size/dp, (d+1)*size/dp) of every bucket, keeps Adam state for
 * those elements only, updates the model's params there, and the same buffer then carries the
 * params through the all-gather. Grad norm and zero count sum each owned element once over
 * the whole world (tp x dp), skipping tensor-parallel duplicates as clip_grads.py does.
 * With interleaved pipelining every model chunk has its own buffer, buckets and shards (as each
 * of Megatron's per-chunk DDP buffers gets its own ranges in DistributedOptimizer); chunks after
 * the first have one bucket (get_model's disable_bucketing); grad norm, zero count and clipping
 * cover all chunks together. */
#include "distributed/distrib_optimizer.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "models/gpt/gpt_model.h"
#include "optimizer/optimizer_internal.h"

#if defined(MC_HAVE_MPI)
#include <mpi.h>
#endif

/* One model chunk's grad buffer and the optimizer state of this rank's shards of it. */
struct dchunk {
    struct mc_gpt_model *model;
    struct mc_pgb_map map;
    struct mc_pgb_config pgb; /* how map was laid out */
    float *buffer;      /* [map.numel] Megatron-layout grads, then params */
    float *main_grad;   /* [shard_numel] this rank's reduce-scattered grads */
    float *state;       /* Adam: [exp_avg | exp_avg_sq], SGD: [momentum], each [shard_numel] */
    int64_t shard_numel;
    int64_t *shard_off; /* [n_buckets] where bucket b's shard starts in the shard arrays */
};

struct mc_distopt {
    struct mc_optimizer_config cfg;
    int n_chunks;
    struct dchunk *ch;  /* [n_chunks] */
    int dp, dp_rank;
    void *dp_comm;      /* MPI_Comm * of the data-parallel(-context) group */
    void *world_comm;   /* every rank: grad norm and zero count */
    int64_t step;
};

/* This rank's part of parameter i of a chunk: n elements at model offset *at_model, shard
 * offset *at_shard (n = 0 when it owns none). */
static int64_t owned(const mc_distopt *o, const struct dchunk *c, int64_t i, int64_t *at_model,
                     int64_t *at_shard)
{
    const struct mc_pgb_range *p = &c->map.param[i];
    const struct mc_pgb_bucket *b = &c->map.bucket[p->bucket];
    int64_t per = (b->end - b->start) / o->dp;
    int64_t s0 = b->start + o->dp_rank * per, s1 = s0 + per;
    int64_t lo = p->start > s0 ? p->start : s0, hi = p->end < s1 ? p->end : s1;
    if (lo >= hi)
        return 0;
    *at_model = c->model->params[i].offset + (lo - p->start);
    *at_shard = c->shard_off[p->bucket] + (lo - s0);
    return hi - lo;
}

/* Megatron's shared_embedding attribute: with tied embeddings split across pipeline stages,
 * the first (virtual) stage's word embedding (when it is not also the last) and the last
 * stage's copy. */
static bool is_shared_embedding(const struct mc_gpt_model *m, int64_t i)
{
    const struct mc_gpt_config *c = &m->cfg;
    if (c->pipeline_model_parallel_size == 1 || c->untie_embeddings_and_output_weights)
        return false;
    if (m->params[i].view.shared)
        return true;
    return m->dims.first_stage && !strcmp(m->params[i].name, "embedding.word_embeddings.weight");
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

static mc_status alloc_shards(mc_distopt *o, struct dchunk *c)
{
    const struct mc_pgb_map *mp = &c->map;
    c->shard_off = mc_alloc((size_t)mp->n_buckets * sizeof(int64_t));
    if (!c->shard_off)
        return MC_ERR_NOMEM;
    for (int64_t b = 0; b < mp->n_buckets; b++) {
        int64_t per = (mp->bucket[b].end - mp->bucket[b].start) / o->dp;
        if (per > INT_MAX)
            return mc_error(MC_ERR_UNSUPPORTED, "--use-distributed-optimizer: bucket %lld shard "
                            "has %lld elements, more than one MPI call moves (set "
                            "--overlap-grad-reduce --ddp-bucket-size smaller)", (long long)b,
                            (long long)per);
        c->shard_off[b] = c->shard_numel;
        c->shard_numel += per;
    }
    int64_t blocks = o->cfg.optimizer == MC_OPT_ADAM ? 2 : 1;
    c->buffer = mc_calloc((size_t)mp->numel, sizeof(float));
    c->main_grad = mc_calloc((size_t)c->shard_numel, sizeof(float));
    c->state = mc_calloc((size_t)(blocks * c->shard_numel), sizeof(float));
    return c->buffer && c->main_grad && c->state ? MC_OK : MC_ERR_NOMEM;
}

mc_status mc_distopt_init_chunks(const struct mc_optimizer_config *cfg, mc_gpt_model *const *models,
                                 int n, const struct mc_parallel_state *ps, void *world_comm,
                                 int64_t bucket_size, bool pad_buckets_for_high_nccl_busbw,
                                 mc_distopt **out)
{
    *out = NULL;
    mc_status st = mc_opt_config_check(cfg);
    if (st)
        return st;
    mc_distopt *o = mc_calloc(1, sizeof(*o));
    if (!o || !(o->ch = mc_calloc((size_t)n, sizeof(*o->ch)))) {
        mc_free(o);
        return MC_ERR_NOMEM;
    }
    o->cfg = *cfg;
    o->n_chunks = n;
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
    for (int c = 0; c < n && !st; c++) {
        /* Megatron's get_model disables bucketing for every chunk after the first */
        struct mc_pgb_config pc = {o->dp, true, c == 0 ? bucket_size : 0,
                                   pad_buckets_for_high_nccl_busbw};
        o->ch[c].model = models[c];
        o->ch[c].pgb = pc;
        if (!(st = mc_distopt_map_init(models[c], &pc, &o->ch[c].map)))
            st = alloc_shards(o, &o->ch[c]);
    }
    if (st) {
        mc_distopt_free(o);
        return st;
    }
    *out = o;
    return MC_OK;
}

mc_status mc_distopt_init(const struct mc_optimizer_config *cfg, mc_gpt_model *m,
                          const struct mc_parallel_state *ps, void *world_comm, int64_t bucket_size,
                          bool pad_buckets_for_high_nccl_busbw, mc_distopt **out)
{
    return mc_distopt_init_chunks(cfg, &m, 1, ps, world_comm, bucket_size,
                                  pad_buckets_for_high_nccl_busbw, out);
}

void mc_distopt_free(mc_distopt *o)
{
    if (!o)
        return;
    for (int i = 0; o->ch && i < o->n_chunks; i++) {
        struct dchunk *c = &o->ch[i];
        mc_pgb_map_free(&c->map);
        mc_free(c->buffer);
        mc_free(c->main_grad);
        mc_free(c->state);
        mc_free(c->shard_off);
    }
    mc_free(o->ch);
    mc_free(o);
}

const struct mc_pgb_map *mc_distopt_map(const mc_distopt *o) { return &o->ch[0].map; }
const struct mc_pgb_map *mc_distopt_chunk_map(const mc_distopt *o, int chunk)
{
    MC_ASSERT(chunk >= 0 && chunk < o->n_chunks);
    return &o->ch[chunk].map;
}

/* Checkpoints of interleaved models are refused (training.c), so these serve chunk 0, the
 * only chunk of a checkpointed run. */
void mc_distopt_shard(mc_distopt *o, struct mc_distopt_shard *out)
{
    const struct dchunk *c = &o->ch[0];
    bool adam = o->cfg.optimizer == MC_OPT_ADAM;
    MC_ASSERT(o->n_chunks == 1);
    *out = (struct mc_distopt_shard){
        .exp_avg = adam ? c->state : NULL,
        .exp_avg_sq = adam ? c->state + c->shard_numel : NULL,
        .momentum = adam ? NULL : c->state,
        .shard_numel = c->shard_numel, .shard_off = c->shard_off,
        .dp = o->dp, .dp_rank = o->dp_rank, .dp_comm = o->dp_comm, .step = o->step};
}

void mc_distopt_set_step(mc_distopt *o, int64_t step) { o->step = step; }

mc_status mc_distopt_map_in_order(const mc_distopt *o, const int64_t *perm, struct mc_pgb_map *out)
{
    const struct dchunk *c = &o->ch[0];
    const struct mc_gpt_model *m = c->model;
    MC_ASSERT(o->n_chunks == 1);
    int64_t *numel = mc_alloc((size_t)m->n_params * sizeof(int64_t));
    bool *shared = mc_alloc((size_t)m->n_params * sizeof(bool));
    mc_status st = MC_ERR_NOMEM;
    if (numel && shared) {
        for (int64_t j = 0; j < m->n_params; j++) {
            numel[j] = m->params[perm[j]].view.numel;
            shared[j] = is_shared_embedding(m, perm[j]);
        }
        st = mc_pgb_map_init(&c->pgb, m->n_params, numel, shared, out);
    }
    mc_free(numel);
    mc_free(shared);
    return st;
}

void mc_distopt_state_numel(const mc_distopt *o, int64_t *sharded, int64_t *full)
{
    int64_t blocks = o->cfg.optimizer == MC_OPT_ADAM ? 2 : 1;
    *sharded = *full = 0;
    for (int c = 0; c < o->n_chunks; c++) {
        *sharded += blocks * o->ch[c].shard_numel;
        *full += blocks * o->ch[c].model->n_elements;
    }
}

/* Model block <-> buffer, every param at its Megatron range (padding stays zero). */
static void to_buffer(struct dchunk *c, const float *block)
{
    const struct mc_gpt_model *m = c->model;
    for (int64_t i = 0; i < m->n_params; i++)
        memcpy(c->buffer + c->map.param[i].start, block + m->params[i].offset,
               (size_t)m->params[i].view.numel * sizeof(float));
}

static void from_buffer(const struct dchunk *c, float *block)
{
    const struct mc_gpt_model *m = c->model;
    for (int64_t i = 0; i < m->n_params; i++)
        memcpy(block + m->params[i].offset, c->buffer + c->map.param[i].start,
               (size_t)m->params[i].view.numel * sizeof(float));
}

/* Reduce-scatter (sum) of each bucket over the DP group into main_grad. */
static mc_status reduce_scatter(mc_distopt *o, struct dchunk *c)
{
    for (int64_t b = 0; b < c->map.n_buckets; b++) {
        const struct mc_pgb_bucket *bk = &c->map.bucket[b];
        int64_t per = (bk->end - bk->start) / o->dp;
        if (o->dp == 1) {
            memcpy(c->main_grad + c->shard_off[b], c->buffer + bk->start,
                   (size_t)per * sizeof(float));
            continue;
        }
#if defined(MC_HAVE_MPI)
        mc_comm_stats_add(MC_COMM_KIND_DP, MC_COMM_REDUCE_SCATTER,
                          (double)(bk->end - bk->start) * sizeof(float), (int)o->dp);
        mc_comm_wait_begin("distributed-optimizer grad reduce-scatter");
        int rc = MPI_Reduce_scatter_block(c->buffer + bk->start, c->main_grad + c->shard_off[b],
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
static mc_status all_gather(mc_distopt *o, struct dchunk *c)
{
    if (o->dp == 1)
        return MC_OK;
#if defined(MC_HAVE_MPI)
    for (int64_t b = 0; b < c->map.n_buckets; b++) {
        const struct mc_pgb_bucket *bk = &c->map.bucket[b];
        int per = (int)((bk->end - bk->start) / o->dp);
        mc_comm_stats_add(MC_COMM_KIND_DP, MC_COMM_ALL_GATHER,
                          (double)(bk->end - bk->start) * sizeof(float), (int)o->dp);
        mc_comm_wait_begin("distributed-optimizer param all-gather");
        int rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->buffer + bk->start, per,
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

/* get_grad_norm_fp32 + count_zeros_fp32 over the shards of every chunk: sums over the world. */
static mc_status grad_stats(mc_distopt *o, float *norm, int64_t *zeros)
{
    double sq = 0.0;
    int64_t z = 0;
    for (int ci = 0; ci < o->n_chunks; ci++) {
        const struct dchunk *c = &o->ch[ci];
        const struct mc_gpt_model *m = c->model;
        for (int64_t i = 0; i < m->n_params; i++) {
            int64_t at_m, at_s, n = owned(o, c, i, &at_m, &at_s);
            if (n == 0 || !counted(m, &m->params[i].view))
                continue;
            sq += m->be->sumsq(c->main_grad + at_s, n);
            z += m->be->count_zeros(c->main_grad + at_s, n);
        }
    }
    void *world = o->world_comm;
    float stats[2] = {(float)sq, (float)z}; /* Megatron reduces both as float tensors */
    mc_status st = mc_comm_all_reduce(world, stats, 2, MC_COMM_FLOAT, MC_COMM_SUM,
                                      "distributed optimizer grad-norm all-reduce");
    *norm = sqrtf(stats[0]);
    *zeros = world ? (int64_t)stats[1] : z;
    return st;
}

static void update(mc_distopt *o, struct dchunk *c, float lr, float weight_decay)
{
    struct mc_gpt_model *m = c->model;
    const struct mc_optimizer_config *cf = &o->cfg;
    for (int64_t i = 0; i < m->n_params; i++) {
        int64_t at_m, at_s, n = owned(o, c, i, &at_m, &at_s);
        if (n == 0)
            continue;
        float wd = m->params[i].view.no_weight_decay ? 0.0f : weight_decay;
        float *p = m->param_block + at_m, *g = c->main_grad + at_s;
        if (cf->optimizer == MC_OPT_ADAM)
            m->be->adamw(p, c->state + at_s, c->state + c->shard_numel + at_s, g, n, lr,
                         cf->adam_beta1, cf->adam_beta2, cf->adam_eps, wd, o->step);
        else
            m->be->sgd(p, c->state + at_s, g, n, lr, cf->sgd_momentum, wd, o->step == 1);
    }
}

/* Each chunk's grads into its buffer, scaled, reduce-scattered into its shards. */
static mc_status reduce_grads(mc_distopt *o, float grad_scale, float post_scale)
{
    mc_status st = MC_OK;
    for (int i = 0; i < o->n_chunks && !st; i++) {
        struct dchunk *c = &o->ch[i];
        const struct mc_gpt_model *m = c->model;
        to_buffer(c, m->grad_block);
        if (grad_scale != 1.0f)
            m->be->scale(c->buffer, grad_scale, c->map.numel);
        if (!(st = reduce_scatter(o, c)) && post_scale != 1.0f)
            m->be->scale(c->main_grad, post_scale, c->shard_numel);
    }
    return st;
}

mc_status mc_distopt_step(mc_distopt *o, float grad_scale, float post_scale, float lr,
                          float weight_decay, struct mc_opt_step_result *res)
{
    mc_status st = reduce_grads(o, grad_scale, post_scale);
    float norm;
    int64_t zeros;
    if (st || (st = grad_stats(o, &norm, &zeros)))
        return st;
    float coeff = o->cfg.clip_grad > 0.0f ? o->cfg.clip_grad / (norm + 1.0e-6f) : 1.0f;
    o->step++;
    for (int i = 0; i < o->n_chunks && !st; i++) {
        struct dchunk *c = &o->ch[i];
        struct mc_gpt_model *m = c->model;
        if (coeff < 1.0f)
            m->be->scale(c->main_grad, coeff, c->shard_numel);
        update(o, c, lr, weight_decay);
        to_buffer(c, m->param_block);
        if (!(st = all_gather(o, c)))
            from_buffer(c, m->param_block);
    }
    if (!st && res) {
        res->grad_norm = norm;
        res->num_zeros = zeros;
    }
    return st;
}
