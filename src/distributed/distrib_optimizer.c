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
 * With interleaved pipelining each model chunk has its own distributed optimizer (its own
 * buffer, buckets and shards, as Megatron's per-chunk DDP buffers) and mc_distopt_step_chunks
 * steps them together: one grad norm, zero count and clipping over all chunks.
 * With an fp16 grad buffer (mc_param_set.grad_dtype F16) the buffer and the shards hold fp16
 * values in fp32 memory: the pre-scaling and the reduce-scatter's sum are rounded to fp16
 * (ddp.c's mc_ddp_round_grads, which says how the sum compares with NCCL's), and main_grad is
 * then _copy_model_grads_to_main_grads' float() of the fp16 shard.
 * --use-precision-aware-optimizer (cfg.precision_aware) steps each shard with Transformer
 * Engine FusedAdam's update instead (optimizer/te_fused_adam.h, as Megatron hands the shards of
 * the 16-bit params to FusedAdam with master_weights): its states in their storage dtypes, the
 * grad read as the buffer holds it (Megatron's decoupled_grad is the buffer shard itself, so
 * the unscaling and clipping round in the buffer's dtype), and with bf16 params and fp32
 * masters the bf16 weights rounded as the kernel's param remainders leave them. */
#include "distributed/distrib_optimizer.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "distributed/ddp.h"
#include "optimizer/optimizer_internal.h"
#include "optimizer/te_fused_adam.h"

struct mc_distopt {
    struct mc_optimizer_config cfg;
    const struct mc_param_set *set;
    struct mc_pgb_map map;
    struct mc_pgb_config pgb; /* how map was laid out */
    int dp, dp_rank;
    bool decoupled;     /* --decoupled-lr: embedding / output params step with decoupled_lr */
    float decoupled_lr;
    void *dp_comm;      /* comm.c handle of the data-parallel(-context) group */
    void *world_comm;   /* every rank: grad norm and zero count */
    float *buffer;      /* [map.numel] Megatron-layout grads, then params */
    float *main_grad;   /* [shard_numel] this rank's reduce-scattered grads */
    float *state;       /* Adam: [exp_avg | exp_avg_sq], SGD: [momentum], each [shard_numel] */
    int64_t shard_numel;
    int64_t *shard_off; /* [n_buckets] where bucket b's shard starts in the shard arrays */
    int64_t step;
    /* overlap (ddp.c): grads reduce-scattered bucket by bucket during backward, params
     * all-gathered bucket by bucket before their first use in the next forward */
    bool grads_reduced;      /* finish_grad_sync ran: the step skips its own reduce-scatter */
    bool overlap_param_gather;
    mc_comm_request *grad_req, *param_req; /* [n_buckets] each */
    bool *grad_pending, *param_pending;
    int64_t *bucket_first;   /* [n_buckets] lowest param index of each bucket */
    /* the DistributedOptimizer's grad scaler (with several model chunks chunk 0's is the one
     * mc_distopt_step_chunks uses, as Megatron's one optimizer over every chunk) */
    struct mc_grad_scaler scaler;
    /* --use-precision-aware-optimizer: TE FusedAdam's dtypes, per param its shard's scales
     * (master, exp_avg, exp_avg_sq) and an fp16 master shard when --main-params-dtype fp16 */
    bool pa, pa_started;
    struct mc_te_adam_cfg te;
    float *pa_scale;   /* [3 * n_params] */
    float *master16;   /* [shard_numel] or NULL */
    float *saved;      /* [2 * shard_numel] the stored fp16 states while a save reads them */
};

static mc_comm_request *grad_req(mc_distopt *o, int64_t b) { return o->grad_req + b; }
static mc_comm_request *param_req(mc_distopt *o, int64_t b) { return o->param_req + b; }

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
    *at_model = o->set->params[i].offset + (lo - p->start);
    *at_shard = o->shard_off[p->bucket] + (lo - s0);
    return hi - lo;
}

/* The buffer layout of the set's params taken in the order perm[0], perm[1], ... (NULL: the
 * set's order); each param's shared_embedding attribute gives it a bucket of its own. */
static mc_status map_in_order(const struct mc_param_set *s, const int64_t *perm,
                              const struct mc_pgb_config *c, struct mc_pgb_map *out)
{
    int64_t *numel = mc_alloc((size_t)s->n_params * sizeof(int64_t));
    bool *shared = mc_alloc((size_t)s->n_params * sizeof(bool));
    mc_status st = MC_ERR_NOMEM;
    if (!numel || !shared)
        goto out;
    for (int64_t j = 0; j < s->n_params; j++) {
        const struct mc_param *p = &s->params[perm ? perm[j] : j];
        numel[j] = p->view.numel;
        shared[j] = p->shared_embedding;
    }
    st = mc_pgb_map_init(c, s->n_params, numel, shared, out);
out:
    mc_free(numel);
    mc_free(shared);
    return st;
}

mc_status mc_distopt_map_init(const struct mc_param_set *s, const struct mc_pgb_config *c,
                              struct mc_pgb_map *out)
{
    return map_in_order(s, NULL, c, out);
}

/* Per-bucket request slots and each bucket's lowest param index (params of bucket b are the
 * indices bucket_first[b] .. bucket_first[b - 1] - 1: buckets run in reverse param order). */
static mc_status alloc_requests(mc_distopt *o)
{
    size_t n = (size_t)o->map.n_buckets;
    o->grad_req = mc_calloc(n, sizeof(mc_comm_request));
    o->param_req = mc_calloc(n, sizeof(mc_comm_request));
    o->grad_pending = mc_calloc(n, sizeof(bool));
    o->param_pending = mc_calloc(n, sizeof(bool));
    o->bucket_first = mc_alloc(n * sizeof(int64_t));
    if (!o->grad_req || !o->param_req || !o->grad_pending || !o->param_pending ||
        !o->bucket_first)
        return MC_ERR_NOMEM;
    for (int64_t i = o->map.n_params - 1; i >= 0; i--)
        o->bucket_first[o->map.param[i].bucket] = i;
    return MC_OK;
}

static float *zeroed(struct mc_backend *be, size_t bytes)
{
    float *p = be->ops->alloc(be, bytes);
    if (p)
        be->ops->set(be, p, 0, bytes);
    return p;
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
    if (alloc_requests(o))
        return MC_ERR_NOMEM;
    int64_t blocks = o->cfg.optimizer == MC_OPT_ADAM ? 2 : 1;
    /* backend memory, zeroed there: the scale, norm and update ops read and write them */
    o->buffer = MC_MEM_AS(MC_MEM_COMM, zeroed(o->set->be, (size_t)mp->numel * sizeof(float)));
    o->main_grad = MC_MEM_AS(MC_MEM_GRADS,
                             zeroed(o->set->be, (size_t)o->shard_numel * sizeof(float)));
    o->state = MC_MEM_AS(MC_MEM_OPTIMIZER,
                         zeroed(o->set->be, (size_t)(blocks * o->shard_numel) * sizeof(float)));
    if (!o->buffer || !o->main_grad || !o->state)
        return MC_ERR_NOMEM;
    if (!o->pa)
        return MC_OK;
    o->pa_scale = mc_calloc((size_t)(3 * o->set->n_params), sizeof(float));
    if (o->te.param_dt != MC_DTYPE_F32 && o->te.master_dt == MC_DTYPE_F16)
        o->master16 = MC_MEM_AS(MC_MEM_OPTIMIZER,
                                zeroed(o->set->be, (size_t)o->shard_numel * sizeof(float)));
    return o->pa_scale && (o->master16 || o->te.master_dt != MC_DTYPE_F16 ||
                           o->te.param_dt == MC_DTYPE_F32) ? MC_OK : MC_ERR_NOMEM;
}

mc_status mc_distopt_init(const struct mc_optimizer_config *cfg, const struct mc_param_set *s,
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
    o->set = s;
    o->pa = cfg->precision_aware;
    o->te = (struct mc_te_adam_cfg){cfg->adam_beta1, cfg->adam_beta2, cfg->adam_eps,
                                    s->compute_dtype, cfg->main_params_dtype, cfg->exp_avg_dtype,
                                    cfg->exp_avg_sq_dtype};
    /* the distributed optimizer is a MixedPrecisionOptimizer even in fp32 */
    if ((st = mc_grad_scaler_init(&o->scaler, cfg, true))) {
        mc_free(o);
        return st;
    }
    o->dp = mc_ps_size(ps, MC_PS_DP_CP);
    o->dp_rank = mc_ps_rank(ps, MC_PS_DP_CP);
    o->dp_comm = ps->group[MC_PS_DP_CP].comm;
    o->world_comm = world_comm;
    if (o->dp > 1 && !mc_comm_available()) {
        mc_distopt_free(o);
        return mc_error(MC_ERR_UNSUPPORTED, "--use-distributed-optimizer with %d data-parallel "
                        "ranks needs a build with MPI", o->dp);
    }
    struct mc_pgb_config pc = {o->dp, true, bucket_size, pad_buckets_for_high_nccl_busbw};
    o->pgb = pc;
    if ((st = mc_distopt_map_init(s, &pc, &o->map)) ||
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
    for (int64_t b = 0; o->grad_pending && o->param_pending && b < o->map.n_buckets; b++) {
        if (o->grad_pending[b])
            mc_comm_drain(grad_req(o, b)); /* MPI still writes into the buffer */
        if (o->param_pending[b])
            mc_comm_drain(param_req(o, b));
    }
    mc_pgb_map_free(&o->map);
    if (o->set) {
        o->set->be->ops->free(o->set->be, o->buffer);
        o->set->be->ops->free(o->set->be, o->main_grad);
        o->set->be->ops->free(o->set->be, o->state);
        o->set->be->ops->free(o->set->be, o->master16);
    }
    mc_free(o->pa_scale);
    mc_free(o->saved);
    mc_free(o->shard_off);
    mc_free(o->grad_req);
    mc_free(o->param_req);
    mc_free(o->grad_pending);
    mc_free(o->param_pending);
    mc_free(o->bucket_first);
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

mc_status mc_distopt_gather_whole(mc_distopt *o, enum mc_distopt_array which, float *out)
{
    bool adam = o->cfg.optimizer == MC_OPT_ADAM;
    const float *src = which == MC_DISTOPT_MAIN_GRAD ? o->main_grad
                       : which == MC_DISTOPT_EXP_AVG_SQ ? o->state + o->shard_numel : o->state;
    if (which != MC_DISTOPT_MAIN_GRAD && adam != (which != MC_DISTOPT_MOMENTUM))
        return mc_error(MC_ERR_CONFIG, "distributed optimizer: no such state (%s)",
                        adam ? "Adam keeps exp_avg and exp_avg_sq" : "SGD keeps momentum");
    float *full = mc_alloc((size_t)o->map.numel * sizeof(float)), *unscaled = NULL;
    if (!full)
        return mc_error(MC_ERR_NOMEM, "distributed optimizer: out of memory gathering shards");
    int k = which == MC_DISTOPT_EXP_AVG ? 1 : 2; /* its scale in pa_scale */
    if (o->pa && o->pa_started && which != MC_DISTOPT_MAIN_GRAD &&
        (k == 1 ? o->te.m_dt : o->te.v_dt) == MC_DTYPE_F16) {
        /* an fp16 state's shards hold value / scale: gathered as the fp32 values */
        if (!(unscaled = mc_alloc((size_t)(o->shard_numel ? o->shard_numel : 1) * sizeof(float)))) {
            mc_free(full);
            return mc_error(MC_ERR_NOMEM, "distributed optimizer: out of memory gathering shards");
        }
        memcpy(unscaled, src, (size_t)o->shard_numel * sizeof(float));
        for (int64_t i = 0; i < o->set->n_params; i++) {
            int64_t at_m = 0, at_s = 0, n = owned(o, i, &at_m, &at_s);
            for (int64_t e = 0; e < n; e++)
                unscaled[at_s + e] *= o->pa_scale[3 * i + k];
        }
        src = unscaled;
    }
    mc_status st = MC_OK;
    for (int64_t b = 0; b < o->map.n_buckets && !st; b++) { /* rank r's shard is the r-th */
        const struct mc_pgb_bucket *bk = &o->map.bucket[b];
        st = mc_comm_all_gather(o->dp_comm, full + bk->start, src + o->shard_off[b],
                                (bk->end - bk->start) / o->dp, MC_DTYPE_F32,
                                "dump: distributed-optimizer shard all-gather");
    }
    for (int64_t i = 0; i < o->set->n_params && !st; i++)
        memcpy(out + o->set->params[i].offset, full + o->map.param[i].start,
               (size_t)o->set->params[i].view.numel * sizeof(float));
    mc_free(unscaled);
    mc_free(full);
    return st;
}
struct mc_grad_scaler *mc_distopt_grad_scaler(mc_distopt *o) { return &o->scaler; }

mc_status mc_distopt_map_in_order(const mc_distopt *o, const int64_t *perm, struct mc_pgb_map *out)
{
    return map_in_order(o->set, perm, &o->pgb, out);
}

void mc_distopt_state_numel(const mc_distopt *o, int64_t *sharded, int64_t *full)
{
    int64_t blocks = o->cfg.optimizer == MC_OPT_ADAM ? 2 : 1;
    *sharded = blocks * o->shard_numel;
    *full = blocks * o->set->n_elements;
}

/* Bucket b's params between the set's block and the buffer (padding stays zero). */
static void bucket_to_buffer(mc_distopt *o, int64_t b, const float *block)
{
    const struct mc_param_set *s = o->set;
    int64_t end = b > 0 ? o->bucket_first[b - 1] : s->n_params;
    for (int64_t i = o->bucket_first[b]; i < end; i++)
        memcpy(o->buffer + o->map.param[i].start, block + s->params[i].offset,
               (size_t)s->params[i].view.numel * sizeof(float));
}

static void bucket_from_buffer(mc_distopt *o, int64_t b, float *block)
{
    const struct mc_param_set *s = o->set;
    int64_t end = b > 0 ? o->bucket_first[b - 1] : s->n_params;
    for (int64_t i = o->bucket_first[b]; i < end; i++)
        memcpy(block + s->params[i].offset, o->buffer + o->map.param[i].start,
               (size_t)s->params[i].view.numel * sizeof(float));
}

void mc_distopt_param_main_grad(mc_distopt *o, int64_t i, float **grad, int64_t *n)
{
    int64_t at_m, at_s;
    *n = owned(o, i, &at_m, &at_s);
    *grad = *n > 0 ? o->main_grad + at_s : o->main_grad;
}

int64_t mc_distopt_bucket_first_param(const mc_distopt *o, int64_t b)
{
    return o->bucket_first[b];
}

/* The reduce-scatter's sum in bucket b's shard rounded to the grad buffer's dtype. */
static mc_status round_shard(mc_distopt *o, int64_t b)
{
    const struct mc_pgb_bucket *bk = &o->map.bucket[b];
    return mc_ddp_round_grads(o->set, o->main_grad + o->shard_off[b],
                              (bk->end - bk->start) / o->dp);
}

/* start_grad_sync of one bucket: its grads into the buffer, times scale, then the
 * reduce-scatter (sum) over the DP group into this rank's shard of main_grad -- blocking, or
 * non-blocking (finished by mc_distopt_finish_grad_sync) when async. */
mc_status mc_distopt_start_grad_bucket(mc_distopt *o, int64_t b, float scale, bool async)
{
    mc_status st = mc_distopt_finish_param_sync(o); /* the buffer is about to be reused */
    if (st)
        return st;
    const struct mc_pgb_bucket *bk = &o->map.bucket[b];
    int64_t per = (bk->end - bk->start) / o->dp;
    bucket_to_buffer(o, b, o->set->grad_block);
    if (scale != 1.0f) {
        o->set->be->ops->scale(o->set->be, MC_DTYPE_F32, o->buffer + bk->start, scale,
                               bk->end - bk->start);
        if ((st = mc_ddp_round_grads(o->set, o->buffer + bk->start, bk->end - bk->start)))
            return st;
    }
    if (o->dp == 1) {
        memcpy(o->main_grad + o->shard_off[b], o->buffer + bk->start, (size_t)per * sizeof(float));
        return MC_OK;
    }
    /* blocking = non-blocking + wait: MPI implements the two with different algorithms
     * (OpenMPI: coll/libnbc vs coll/tuned), whose sums of more than two ranks associate
     * differently; one algorithm keeps --overlap-grad-reduce bit-identical to the
     * blocking path */
    st = mc_comm_ireduce_scatter(o->dp_comm, o->main_grad + o->shard_off[b],
                                 o->buffer + bk->start, per, MC_DTYPE_F32,
                                 "distributed-optimizer grad reduce-scatter", grad_req(o, b));
    if (!st && !async)
        st = mc_comm_wait(1, grad_req(o, b), o->dp_comm, "reduce-scatter",
                          "distributed-optimizer grad reduce-scatter");
    if (st)
        return st;
    o->grad_pending[b] = async;
    return async ? MC_OK : round_shard(o, b);
}

/* finish_grad_sync: waits for every outstanding bucket reduce-scatter; the next step then
 * uses main_grad as it is. */
mc_status mc_distopt_finish_grad_sync(mc_distopt *o)
{
    for (int64_t b = 0; b < o->map.n_buckets; b++) {
        if (!o->grad_pending[b])
            continue;
        o->grad_pending[b] = false;
        mc_status st = mc_comm_wait(1, grad_req(o, b), o->dp_comm, "reduce-scatter",
                                    "distributed-optimizer grad reduce-scatter");
        if (!st)
            st = round_shard(o, b);
        if (st)
            return st;
    }
    o->grads_reduced = true;
    return MC_OK;
}

/* MPI progresses non-blocking collectives only inside MPI calls: a test between layers. */
void mc_distopt_progress(mc_distopt *o)
{
    for (int64_t b = 0; b < o->map.n_buckets; b++) {
        if (o->grad_pending[b])
            mc_comm_test(grad_req(o, b));
        if (o->param_pending[b])
            mc_comm_test(param_req(o, b));
    }
}

void mc_distopt_set_overlap_param_gather(mc_distopt *o, bool on) { o->overlap_param_gather = on; }

/* The all-gather of bucket b's updated param shards over the DP group, in place in the
 * buffer; blocking (then copied into the model) or non-blocking (copied when waited for). */
static mc_status start_param_bucket(mc_distopt *o, int64_t b, bool async)
{
    const struct mc_pgb_bucket *bk = &o->map.bucket[b];
    int64_t per = (bk->end - bk->start) / o->dp;
    mc_status st = mc_comm_iall_gather_in_place(o->dp_comm, o->buffer + bk->start, per,
                                                MC_DTYPE_F32,
                                                "distributed-optimizer param all-gather",
                                                param_req(o, b));
    if (!st && !async)
        st = mc_comm_wait(1, param_req(o, b), o->dp_comm, "all-gather",
                          "distributed-optimizer param all-gather");
    if (st)
        return st;
    o->param_pending[b] = async;
    if (!async)
        bucket_from_buffer(o, b, o->set->param_block);
    return MC_OK;
}

/* The 16-bit model weights of bucket b follow its all-gathered fp32 params (Megatron gathers
 * the 16-bit params themselves: the same values, round(main), on every rank). The bucket's
 * params are consecutive in the set, so one conversion covers them. No-op in fp32. */
static void refresh_range(mc_distopt *o, int64_t lo, int64_t hi)
{
    const struct mc_param_set *s = o->set;
    if (s->compute_dtype == MC_DTYPE_F32 || !s->compute_block || hi <= lo)
        return;
    char *w16 = (char *)s->compute_block + (size_t)lo * mc_dtype_size(s->compute_dtype);
    if (o->pa && mc_te_adam_remainders(&o->te)) /* the param-remainder kernel's rounding */
        mc_te_adam_bf16_params((uint16_t *)w16, s->param_block + lo, hi - lo);
    else
        s->be->ops->convert(s->be, w16, s->compute_dtype, s->param_block + lo, MC_DTYPE_F32,
                            hi - lo);
}

void mc_distopt_refresh_compute(mc_distopt *o) { refresh_range(o, 0, o->set->n_elements); }

bool mc_distopt_bf16_remainders(const mc_distopt *o)
{
    return o->pa && mc_te_adam_remainders(&o->te);
}

static void refresh_bucket(mc_distopt *o, int64_t b)
{
    const struct mc_param_set *s = o->set;
    int64_t first = o->bucket_first[b], end = b > 0 ? o->bucket_first[b - 1] : s->n_params;
    if (end <= first)
        return;
    refresh_range(o, s->params[first].offset,
                  s->params[end - 1].offset + s->params[end - 1].view.numel);
}

static mc_status finish_param_bucket(mc_distopt *o, int64_t b)
{
    if (!o->param_pending[b])
        return MC_OK;
    o->param_pending[b] = false;
    mc_status st = mc_comm_wait(1, param_req(o, b), o->dp_comm, "all-gather",
                                "distributed-optimizer param all-gather");
    if (st)
        return st;
    bucket_from_buffer(o, b, o->set->param_block);
    refresh_bucket(o, b);
    return MC_OK;
}

/* The forward pre-hook: params [0, end) are about to be read, so every bucket holding one of
 * them must have its all-gather finished. */
mc_status mc_distopt_param_use(mc_distopt *o, int64_t end)
{
    for (int64_t b = o->map.n_buckets - 1; b >= 0 && o->bucket_first[b] < end; b--) {
        mc_status st = finish_param_bucket(o, b);
        if (st)
            return st;
    }
    mc_distopt_progress(o);
    return MC_OK;
}

mc_status mc_distopt_finish_param_sync(mc_distopt *o)
{
    return mc_distopt_param_use(o, o->set->n_params);
}

/* After the update: every bucket's params all-gathered, in the order the next forward needs
 * them (the last bucket holds the first layers), so with overlap the first wait is the
 * earliest started. */
static mc_status all_gather(mc_distopt *o)
{
    if (o->dp == 1)
        return MC_OK;
    bool async = o->overlap_param_gather;
    for (int64_t b = o->map.n_buckets - 1; b >= 0; b--) {
        if (!async)
            bucket_to_buffer(o, b, o->set->param_block);
        mc_status st = start_param_bucket(o, b, async);
        if (st)
            return st;
    }
    return MC_OK;
}

/* get_grad_norm_fp32 + count_zeros_fp32 over this rank's shards (summed over the world by
 * the caller). */
static void local_grad_stats(const mc_distopt *o, double *sq, int64_t *z)
{
    const struct mc_param_set *s = o->set;
    for (int64_t i = 0; i < s->n_params; i++) {
        int64_t at_m, at_s, n = owned(o, i, &at_m, &at_s);
        if (n == 0 || !mc_opt_counted(s, &s->params[i].view))
            continue;
        *sq += s->be->ops->sumsq(s->be, MC_DTYPE_F32, o->main_grad + at_s, n);
        *z += s->be->ops->count_zeros(s->be, MC_DTYPE_F32, o->main_grad + at_s, n);
    }
}

static mc_status grad_stats(mc_distopt *const *os, int n, float *norm, int64_t *zeros)
{
    double sq = 0.0;
    int64_t z = 0;
    for (int c = 0; c < n; c++)
        local_grad_stats(os[c], &sq, &z);
    void *world = os[0]->world_comm;
    float stats[2] = {(float)sq, (float)z}; /* Megatron reduces both as float tensors */
    mc_status st = mc_comm_all_reduce(world, stats, 2, MC_DTYPE_F32, MC_COMM_SUM,
                                      "distributed optimizer grad-norm all-reduce");
    *norm = sqrtf(stats[0]);
    *zeros = world ? (int64_t)stats[1] : z;
    return st;
}

void mc_distopt_set_decoupled_lr(mc_distopt *o, float lr)
{
    o->decoupled = true;
    o->decoupled_lr = lr;
}

/* FusedAdam's optimizer param for this rank's piece of parameter i (t->n = 0: none). */
static void pa_tensor(mc_distopt *o, int64_t i, struct mc_te_adam_tensor *t)
{
    int64_t at_m = 0, at_s = 0, n = owned(o, i, &at_m, &at_s);
    const float *sc = o->pa_scale + 3 * i;
    *t = (struct mc_te_adam_tensor){
        .n = n, .p = o->set->param_block + at_m,
        .master = o->master16 ? o->master16 + at_s : NULL,
        .m = o->state + at_s, .v = o->state + o->shard_numel + at_s,
        .scale = {sc[0], sc[1], sc[2]}, .g = o->main_grad + at_s};
}

/* FusedAdam.step over this rank's shards: each param's piece is one optimizer param (its
 * states and their scales initialized at the first step, as FusedAdam's lazy
 * initialize_state). */
static void update_precision_aware(mc_distopt *o, float lr, float weight_decay)
{
    const struct mc_param_set *s = o->set;
    for (int64_t i = 0; i < s->n_params; i++) {
        struct mc_te_adam_tensor t;
        pa_tensor(o, i, &t);
        if (t.n == 0)
            continue;
        float wd = s->params[i].view.no_weight_decay ? 0.0f : weight_decay;
        float lr_i = o->decoupled && mc_opt_param_is_embedding_or_output(&s->params[i].view)
                         ? o->decoupled_lr : lr;
        if (!o->pa_started)
            mc_te_adam_init(&o->te, &t);
        mc_te_adam_step(&o->te, &t, lr_i, wd, o->step);
        memcpy(o->pa_scale + 3 * i, t.scale, sizeof(t.scale));
    }
    o->pa_started = true;
}

static bool pa_fp16_states(const mc_distopt *o)
{
    return o->pa && (o->te.m_dt == MC_DTYPE_F16 || o->te.v_dt == MC_DTYPE_F16);
}

mc_status mc_distopt_ckpt_unscale(mc_distopt *o)
{
    if (!pa_fp16_states(o) || !o->pa_started)
        return MC_OK;
    size_t bytes = (size_t)(2 * o->shard_numel) * sizeof(float);
    if (!o->saved && !(o->saved = mc_alloc(bytes ? bytes : 1)))
        return mc_error(MC_ERR_NOMEM, "distributed optimizer: out of memory unscaling the fp16 "
                        "optimizer states for a checkpoint");
    memcpy(o->saved, o->state, bytes);
    for (int64_t i = 0; i < o->set->n_params; i++) {
        struct mc_te_adam_tensor t;
        pa_tensor(o, i, &t);
        mc_te_adam_unscale_states(&o->te, &t);
    }
    return MC_OK;
}

void mc_distopt_ckpt_saved(mc_distopt *o)
{
    if (!o->saved)
        return;
    memcpy(o->state, o->saved, (size_t)(2 * o->shard_numel) * sizeof(float));
    mc_free(o->saved);
    o->saved = NULL;
}

mc_status mc_distopt_ckpt_loaded(mc_distopt *o)
{
    if (!o->pa)
        return MC_OK;
    for (int64_t i = 0; i < o->set->n_params; i++) {
        struct mc_te_adam_tensor t;
        pa_tensor(o, i, &t);
        mc_te_adam_scale_states(&o->te, &t);
        memcpy(o->pa_scale + 3 * i, t.scale, sizeof(t.scale));
    }
    o->pa_started = true;
    return MC_OK;
}

static void update(mc_distopt *o, float lr, float weight_decay)
{
    const struct mc_param_set *s = o->set;
    const struct mc_optimizer_config *c = &o->cfg;
    o->step++;
    if (o->pa) {
        update_precision_aware(o, lr, weight_decay);
        return;
    }
    for (int64_t i = 0; i < s->n_params; i++) {
        int64_t at_m, at_s, n = owned(o, i, &at_m, &at_s);
        if (n == 0)
            continue;
        float wd = s->params[i].view.no_weight_decay ? 0.0f : weight_decay;
        float lr_i = o->decoupled && mc_opt_param_is_embedding_or_output(&s->params[i].view) ? o->decoupled_lr : lr;
        float *p = s->param_block + at_m, *g = o->main_grad + at_s;
        if (c->optimizer == MC_OPT_ADAM)
            s->be->ops->adamw(s->be, MC_DTYPE_F32, MC_DTYPE_F32, p, o->state + at_s,
                              o->state + o->shard_numel + at_s, g, n, lr_i, c->adam_beta1,
                              c->adam_beta2, c->adam_eps, wd, o->step);
        else
            s->be->ops->sgd(s->be, MC_DTYPE_F32, MC_DTYPE_F32, p, o->state + at_s, g, n, lr_i,
                            c->sgd_momentum, wd, o->step == 1);
    }
}

/* The grads of one chunk reduce-scattered (unless overlap did it) and post-scaled. */
static mc_status reduce_grads(mc_distopt *o, float grad_scale, float post_scale)
{
    mc_status st = MC_OK;
    for (int64_t b = 0; !o->grads_reduced && b < o->map.n_buckets && !st; b++)
        st = mc_distopt_start_grad_bucket(o, b, grad_scale, false);
    o->grads_reduced = false;
    if (!st && post_scale != 1.0f) { /* finalize_model_grads' scale_gradients, in the buffer */
        o->set->be->ops->scale(o->set->be, MC_DTYPE_F32, o->main_grad, post_scale, o->shard_numel);
        st = mc_ddp_round_grads(o->set, o->main_grad, o->shard_numel);
    }
    return st;
}

/* Clip by coeff (< 1 scales), update the shard, all-gather the params of one chunk. */
static mc_status apply_update(mc_distopt *o, float coeff, float lr, float weight_decay)
{
    const struct mc_param_set *s = o->set;
    if (coeff < 1.0f) {
        s->be->ops->scale(s->be, MC_DTYPE_F32, o->main_grad, coeff, o->shard_numel);
        /* precision-aware: clip_grad_by_total_norm_fp32 scales decoupled_grad, the buffer */
        mc_status st = o->pa ? mc_ddp_round_grads(s, o->main_grad, o->shard_numel) : MC_OK;
        if (st)
            return st;
    }
    update(o, lr, weight_decay);
    /* with overlap the whole buffer gets the params before the first all-gather starts */
    if (o->overlap_param_gather && o->dp > 1)
        for (int64_t b = 0; b < o->map.n_buckets; b++)
            bucket_to_buffer(o, b, s->param_block);
    mc_status st = all_gather(o);
    /* the 16-bit weights: now, or bucket by bucket as overlapped all-gathers finish */
    if (!st && !(o->overlap_param_gather && o->dp > 1))
        refresh_range(o, 0, s->n_elements);
    return st;
}

/* MixedPrecisionOptimizer.prepare_grads with a grad scaler: this rank's reduce-scattered
 * main-grad shards of every chunk unscaled and checked, found_inf MAX-reduced over the whole
 * world (the distributed optimizer's grad-stats group), then chunk 0's scaler updated. */
static mc_status unscale_and_check(mc_distopt *const *os, int n, bool *found)
{
    struct mc_grad_scaler *g = &os[0]->scaler;
    *found = false;
    if (!g->on)
        return MC_OK;
    float inv = mc_grad_scaler_inv_scale(g);
    bool any = false;
    for (int c = 0; c < n; c++) {
        any |= mc_opt_check_and_unscale(os[c]->set->be, os[c]->main_grad, os[c]->shard_numel,
                                        inv);
        /* precision-aware: the unscaling writes decoupled_grad, the 16-bit buffer itself */
        mc_status st = os[c]->pa && inv != 1.0f
                           ? mc_ddp_round_grads(os[c]->set, os[c]->main_grad, os[c]->shard_numel)
                           : MC_OK;
        if (st)
            return st;
    }
    float f = any ? 1.0f : 0.0f;
    mc_status st = mc_comm_all_reduce(os[0]->world_comm, &f, 1, MC_DTYPE_F32, MC_COMM_MAX,
                                      "distributed optimizer found-inf all-reduce");
    if (st)
        return st;
    *found = f > 0.0f;
    mc_grad_scaler_update(g, *found);
    return MC_OK;
}

mc_status mc_distopt_step_chunks(mc_distopt *const *os, int n, float grad_scale,
                                 float post_scale, float lr, float weight_decay,
                                 struct mc_opt_step_result *res)
{
    mc_status st = MC_OK;
    for (int c = 0; c < n && !st; c++)
        st = reduce_grads(os[c], grad_scale, post_scale);
    bool found_inf = false;
    if (st || (st = unscale_and_check(os, n, &found_inf)))
        return st;
    if (found_inf) { /* no clip, no update, no all-gather: the params stay as they are */
        if (res)
            *res = (struct mc_opt_step_result){.skipped = true};
        return MC_OK;
    }
    float norm = 0.0f;
    int64_t zeros;
    if ((st = grad_stats(os, n, &norm, &zeros)))
        return st;
    float clip = os[0]->cfg.clip_grad;
    float coeff = clip > 0.0f ? clip / (norm + 1.0e-6f) : 1.0f;
    /* the norm is reported with or without clipping, in every precision (ChainedOptimizer.step) */
    for (int c = 0; c < n && !st; c++)
        st = apply_update(os[c], coeff, lr, weight_decay);
    if (!st && res)
        *res = (struct mc_opt_step_result){.grad_norm = norm, .num_zeros = zeros};
    return st;
}

mc_status mc_distopt_step(mc_distopt *o, float grad_scale, float post_scale, float lr,
                          float weight_decay, struct mc_opt_step_result *res)
{
    return mc_distopt_step_chunks(&o, 1, grad_scale, post_scale, lr, weight_decay, res);
}
