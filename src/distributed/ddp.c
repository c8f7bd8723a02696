/* Data-parallel gradient sync, mirrors DistributedDataParallel and _ParamAndGradBucketGroup
 * (megatron/core/distributed/distributed_data_parallel.py, param_and_grad_buffer.py,
 * core_v0.12.1). The grads are cut into Megatron's buckets (param_and_grad_buffer.c: reverse
 * param order, --ddp-bucket-size with --overlap-grad-reduce, one bucket otherwise and on
 * pipeline stages after the first). Each bucket is checked for NaN/Inf, pre-multiplied by
 * gradient_scaling_factor and summed over the DP(-CP) group: an all-reduce in place in the
 * engine's grad block (a bucket is a contiguous run of params, so a contiguous range there
 * too), or with the distributed optimizer its reduce-scatter. With --overlap-grad-reduce a
 * bucket's collective starts, non-blocking, as soon as backward of the step's last
 * micro-batch has made all its grads final (the engine's grad-ready hook), and
 * finish_grad_sync waits; the per-element arithmetic is the same as the blocking path's.
 * Scaling before the sum, as Megatron does, keeps dp = 2^k runs equal to dp = 1.
 * With a 16-bit grad buffer (--fp16 without --accumulate-allreduce-grads-in-fp32, or --bf16
 * --grad-reduce-in-bf16) the grad block holds fp16 / bf16 values in fp32 memory: the scaling
 * and the sum are rounded to that dtype (mc_ddp_round_grads). The sum itself runs in fp32
 * through MPI (which has no 16-bit types) and is rounded once: for two ranks the bits of
 * NCCL's or gloo's 16-bit a + b (the fp32 sum of two fp16 or bf16 values rounds as the exact
 * sum does); over more ranks NCCL rounds after every hop of its ring, so there the results may
 * differ in the last 16-bit bit. */
#include "distributed/ddp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/dtype.h"

float mc_ddp_grad_scale(const struct mc_parallel_state *ps, bool calculate_per_token_loss)
{
    if (calculate_per_token_loss)
        return 1.0f;
    return 1.0f / (float)mc_ps_size(ps, MC_PS_DP_CP);
}

/* 16-bit values widened in fp32 memory are rounded through a small 16-bit temporary, a chunk
 * at a time (the grads may be the whole model's) */
enum { ROUND_CHUNK = 1 << 16 };

mc_status mc_ddp_round_grads(const struct mc_param_set *s, float *x, int64_t n)
{
    enum mc_dtype dt = s->grad_dtype;
    if ((dt != MC_DTYPE_F16 && dt != MC_DTYPE_BF16) || n <= 0)
        return MC_OK;
    struct mc_backend *be = s->be;
    int64_t cap = n < ROUND_CHUNK ? n : ROUND_CHUNK;
    void *tmp = MC_MEM_AS(MC_MEM_WORKSPACE, be->ops->alloc(be, (size_t)cap * mc_dtype_size(dt)));
    if (!tmp)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < n; i += cap) {
        int64_t k = n - i < cap ? n - i : cap;
        be->ops->convert(be, tmp, dt, x + i, MC_DTYPE_F32, k);
        be->ops->convert(be, x + i, MC_DTYPE_F32, tmp, dt, k);
    }
    be->ops->free(be, tmp);
    return MC_OK;
}

mc_status mc_ddp_scale_grads(const struct mc_param_set *s, float scale)
{
    s->be->ops->scale(s->be, MC_DTYPE_F32, s->grad_block, scale, s->n_elements);
    return mc_ddp_round_grads(s, s->grad_block, s->n_elements);
}

mc_status mc_ddp_finish_grad_sync(const struct mc_param_set *s,
                                  const struct mc_parallel_state *ps, float scale)
{
    const struct mc_ps_comm *g = &ps->group[MC_PS_DP_CP];
    if (g->size == 1)
        return MC_OK;
    mc_status st = scale != 1.0f ? mc_ddp_scale_grads(s, scale) : MC_OK;
    if (!st)
        st = mc_comm_all_reduce(g->comm, s->grad_block, s->n_elements, MC_DTYPE_F32,
                                MC_COMM_SUM, "data-parallel gradient all-reduce");
    return st ? st : mc_ddp_round_grads(s, s->grad_block, s->n_elements);
}

struct mc_ddp {
    struct mc_ddp_config cfg;
    struct mc_param_set *s;
    const struct mc_parallel_state *ps;
    mc_distopt *dopt;
    int dp;
    int64_t n_buckets;
    int64_t *first;      /* [n_buckets + 1]: bucket b holds params [first[b], first[b - 1]) */
    bool armed;          /* the last micro-batch's backward is running */
    int64_t next;        /* next bucket to start (they become ready in order 0, 1, ...) */
    mc_comm_request *req; /* [n_buckets] (without dopt) */
    bool *pending;
    /* MC_DDP_TRACE=1: seconds summed over steps, printed by mc_ddp_free */
    bool trace;
    bool no_progress;    /* MC_DDP_PROGRESS=0: no test between layers (to measure it) */
    double *t_call;      /* [n_buckets] in the call that starts a bucket (all of it if blocking) */
    double *t_start;     /* [n_buckets] when the bucket started in the current step */
    double *t_ready_lag; /* [n_buckets] bucket start -> the last bucket's start, summed */
    double t_wait;       /* in finish_grad_sync */
    int64_t steps;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t bucket_end_param(const mc_ddp *d, int64_t b)
{
    return b > 0 ? d->first[b - 1] : d->s->n_params;
}

/* Bucket b's range of the engine's grad block (params are packed in forward order). */
static void bucket_range(const mc_ddp *d, int64_t b, int64_t *off, int64_t *n)
{
    const struct mc_param *p = d->s->params;
    int64_t last = bucket_end_param(d, b) - 1;
    *off = p[d->first[b]].offset;
    *n = p[last].offset + p[last].view.numel - *off;
}

/* The non-distributed optimizer's buckets: Megatron's map without padding. */
static mc_status plan_buckets(mc_ddp *d)
{
    const struct mc_param_set *s = d->s;
    struct mc_pgb_config pc = {d->dp, false, d->cfg.bucket_size, false};
    struct mc_pgb_map map;
    int64_t *numel = mc_alloc((size_t)s->n_params * sizeof(int64_t));
    if (!numel)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < s->n_params; i++)
        numel[i] = s->params[i].view.numel;
    mc_status st = mc_pgb_map_init(&pc, s->n_params, numel, NULL, &map);
    mc_free(numel);
    if (st)
        return st;
    d->n_buckets = map.n_buckets;
    d->first = mc_alloc((size_t)map.n_buckets * sizeof(int64_t));
    if (d->first)
        for (int64_t i = s->n_params - 1; i >= 0; i--)
            d->first[map.param[i].bucket] = i;
    mc_pgb_map_free(&map);
    return d->first ? MC_OK : MC_ERR_NOMEM;
}

static mc_status plan_dopt_buckets(mc_ddp *d)
{
    d->n_buckets = mc_distopt_map(d->dopt)->n_buckets;
    d->first = mc_alloc((size_t)d->n_buckets * sizeof(int64_t));
    if (!d->first)
        return MC_ERR_NOMEM;
    for (int64_t b = 0; b < d->n_buckets; b++)
        d->first[b] = mc_distopt_bucket_first_param(d->dopt, b);
    return MC_OK;
}

/* check_grads: the bucket's local grad norm, before scaling and communication. An fp16
 * buffer's norm is an fp16 tensor: inf once it rounds past fp16's largest value, and then
 * Megatron stops too (only a constant --loss-scale keeps this check on with fp16). A bf16
 * norm rounds to inf only where its fp32 sum of squares has already overflowed. */
static mc_status check_bucket(const mc_ddp *d, int64_t b)
{
    int64_t off, n;
    bucket_range(d, b, &off, &n);
    double ss = d->s->be->ops->sumsq(d->s->be, MC_DTYPE_F32, d->s->grad_block + off, n);
    if (isfinite(ss) && d->s->grad_dtype == MC_DTYPE_F16 &&
        isinf(mc_f16_to_f32(mc_f32_to_f16((float)sqrt(ss)))))
        ss = INFINITY;
    if (isfinite(ss))
        return MC_OK;
    return mc_error(MC_ERR_INTERNAL, "found %s in local grad norm for bucket #%lld in backward "
                    "pass before data-parallel communication collective (rank %d; "
                    "--no-check-for-nan-in-loss-and-grad skips this check)",
                    isnan(ss) ? "NaN" : "Inf", (long long)b, d->ps->rank);
}

static mc_comm_request *req(mc_ddp *d, int64_t b) { return d->req + b; }

/* start_grad_sync of bucket b: scaled, then summed over the DP group. */
static mc_status start_bucket_raw(mc_ddp *d, int64_t b, bool async)
{
    mc_status st = d->cfg.check_for_nan_in_grad ? check_bucket(d, b) : MC_OK;
    if (st)
        return st;
    if (d->dopt)
        return mc_distopt_start_grad_bucket(d->dopt, b, d->cfg.grad_scale, async);
    if (d->dp == 1)
        return MC_OK; /* Megatron scales and "reduces" over one rank too: the step rescales */
    int64_t off, n;
    bucket_range(d, b, &off, &n);
    float *g = d->s->grad_block + off;
    if (d->cfg.grad_scale != 1.0f) {
        d->s->be->ops->scale(d->s->be, MC_DTYPE_F32, g, d->cfg.grad_scale, n);
        if ((st = mc_ddp_round_grads(d->s, g, n)))
            return st;
    }
    /* blocking = non-blocking + wait: MPI's blocking and non-blocking all-reduce are
     * different algorithms (OpenMPI: coll/tuned vs coll/libnbc) whose sums over more than two
     * ranks may associate differently; one algorithm keeps overlap bit-identical to the
     * blocking path */
    void *comm = d->ps->group[MC_PS_DP_CP].comm;
    st = mc_comm_iall_reduce(comm, g, n, MC_DTYPE_F32, MC_COMM_SUM,
                             "data-parallel gradient all-reduce", req(d, b));
    if (!st && !async)
        st = mc_comm_wait(1, req(d, b), comm, "all-reduce", "data-parallel gradient all-reduce");
    if (st)
        return st;
    d->pending[b] = async;
    return async ? MC_OK : mc_ddp_round_grads(d->s, g, n);
}

static mc_status start_bucket(mc_ddp *d, int64_t b, bool async)
{
    if (!d->trace)
        return start_bucket_raw(d, b, async);
    double t0 = now();
    mc_status st = start_bucket_raw(d, b, async);
    d->t_start[b] = t0;
    d->t_call[b] += now() - t0;
    return st;
}

static void progress(mc_ddp *d)
{
    if (d->dopt) {
        mc_distopt_progress(d->dopt);
        return;
    }
    for (int64_t b = 0; b < d->n_buckets; b++)
        if (d->pending[b])
            mc_comm_test(req(d, b));
}

/* The backward post-hook (register_grad_ready): params [first_ready, n) have final grads. */
static mc_status on_grad_ready(void *ctx, int64_t first_ready)
{
    mc_ddp *d = ctx;
    if (!d->armed)
        return MC_OK;
    while (d->next < d->n_buckets && d->first[d->next] >= first_ready) {
        mc_status st = start_bucket(d, d->next, !d->cfg.blocking);
        if (st)
            return st;
        d->next++;
    }
    if (!d->no_progress)
        progress(d);
    return MC_OK;
}

/* The forward pre-hook: wait for the all-gathers of the params about to be read. */
static mc_status on_param_use(void *ctx, int64_t end)
{
    mc_ddp *d = ctx;
    return d->dopt ? mc_distopt_param_use(d->dopt, end) : MC_OK;
}

static mc_status ddp_alloc(mc_ddp *d)
{
    mc_status st = d->dopt ? plan_dopt_buckets(d) : plan_buckets(d);
    if (st)
        return st;
    d->pending = mc_calloc((size_t)d->n_buckets, sizeof(bool));
    d->req = mc_calloc((size_t)d->n_buckets, sizeof(mc_comm_request));
    if (!d->pending || !d->req)
        return MC_ERR_NOMEM;
    const char *tr = getenv("MC_DDP_TRACE");
    d->trace = tr && *tr && strcmp(tr, "0");
    const char *pg = getenv("MC_DDP_PROGRESS");
    d->no_progress = pg && !strcmp(pg, "0");
    if (d->trace) {
        d->t_call = mc_calloc((size_t)d->n_buckets, sizeof(double));
        d->t_start = mc_calloc((size_t)d->n_buckets, sizeof(double));
        d->t_ready_lag = mc_calloc((size_t)d->n_buckets, sizeof(double));
        if (!d->t_call || !d->t_start || !d->t_ready_lag)
            return MC_ERR_NOMEM;
    }
    for (int64_t b = 0; b < d->n_buckets; b++) {
        int64_t off, n;
        bucket_range(d, b, &off, &n);
        if (n > 2147483647)
            return mc_error(MC_ERR_UNSUPPORTED, "data-parallel bucket %lld has %lld elements, "
                            "more than one MPI call moves (set --overlap-grad-reduce "
                            "--ddp-bucket-size smaller)", (long long)b, (long long)n);
    }
    return MC_OK;
}

mc_status mc_ddp_init(const struct mc_ddp_config *c, struct mc_param_set *s,
                      const struct mc_parallel_state *ps, mc_distopt *dopt, mc_ddp **out)
{
    *out = NULL;
    mc_ddp *d = mc_calloc(1, sizeof(*d));
    if (!d)
        return MC_ERR_NOMEM;
    *d = (struct mc_ddp){.cfg = *c, .s = s, .ps = ps, .dopt = dopt,
                         .dp = mc_ps_size(ps, MC_PS_DP_CP)};
    mc_status st = ddp_alloc(d);
    if (st) {
        mc_ddp_free(d);
        return st;
    }
    if (dopt)
        mc_distopt_set_overlap_param_gather(dopt, c->overlap_param_gather && !c->blocking);
    s->hooks = (struct mc_param_hooks){on_grad_ready, on_param_use, d};
    *out = d;
    return MC_OK;
}

/* One line per bucket and one per rank: what overlap hides (docs/scaling.md). */
static void print_trace(const mc_ddp *d)
{
    double n = d->steps > 0 ? (double)d->steps : 1.0;
    for (int64_t b = 0; b < d->n_buckets; b++) {
        int64_t off, cnt;
        bucket_range(d, b, &off, &cnt);
        printf("ddp-trace rank=%d bucket=%lld elements=%lld call_ms=%.3f "
               "start_before_last_ms=%.3f\n", d->ps->rank, (long long)b, (long long)cnt,
               1e3 * d->t_call[b] / n, 1e3 * d->t_ready_lag[b] / n);
    }
    printf("ddp-trace rank=%d steps=%lld buckets=%lld wait_ms=%.3f progress=%d mode=%s\n",
           d->ps->rank, (long long)d->steps, (long long)d->n_buckets, 1e3 * d->t_wait / n,
           !d->no_progress,
           !d->cfg.overlap_grad_reduce ? "no-overlap"
                                       : d->cfg.blocking ? "overlap-blocking" : "overlap");
    fflush(stdout);
}

void mc_ddp_free(mc_ddp *d)
{
    if (!d)
        return;
    if (d->trace && d->t_call)
        print_trace(d);
    for (int64_t b = 0; d->pending && b < d->n_buckets; b++)
        if (d->pending[b])
            mc_comm_drain(req(d, b)); /* MPI may still write into the grads */
    if (d->first) /* the hooks were installed */
        d->s->hooks = (struct mc_param_hooks){0};
    mc_free(d->t_call);
    mc_free(d->t_start);
    mc_free(d->t_ready_lag);
    mc_free(d->first);
    mc_free(d->pending);
    mc_free(d->req);
    mc_free(d);
}

int64_t mc_ddp_num_buckets(const mc_ddp *d) { return d->n_buckets; }

void mc_ddp_set_last_microbatch(mc_ddp *d, bool last)
{
    d->armed = last && d->cfg.overlap_grad_reduce;
    d->next = 0;
}

static mc_status wait_all(mc_ddp *d)
{
    if (d->dopt)
        return mc_distopt_finish_grad_sync(d->dopt);
    for (int64_t b = 0; b < d->n_buckets; b++) {
        if (!d->pending[b])
            continue;
        d->pending[b] = false;
        mc_status st = mc_comm_wait(1, req(d, b), d->ps->group[MC_PS_DP_CP].comm,
                                    "all-reduce", "data-parallel gradient all-reduce");
        int64_t off, n;
        bucket_range(d, b, &off, &n);
        if (!st) /* the fp16 sum */
            st = mc_ddp_round_grads(d->s, d->s->grad_block + off, n);
        if (st)
            return st;
    }
    return MC_OK;
}

mc_status mc_ddp_grad_sync(mc_ddp *d)
{
    bool overlapped = d->armed;
    d->armed = false;
    if (overlapped && d->next != d->n_buckets)
        return mc_error(MC_ERR_INTERNAL, "--overlap-grad-reduce: communication call has not "
                        "been issued for bucket %lld of %lld (backward did not report its "
                        "grads ready)", (long long)d->next, (long long)d->n_buckets);
    for (int64_t b = 0; !overlapped && b < d->n_buckets; b++) {
        mc_status st = start_bucket(d, b, false);
        if (st)
            return st;
    }
    if (!d->trace)
        return wait_all(d);
    double t0 = now();
    mc_status st = wait_all(d);
    d->t_wait += now() - t0;
    for (int64_t b = 0; b < d->n_buckets; b++)
        d->t_ready_lag[b] += d->t_start[d->n_buckets - 1] - d->t_start[b];
    d->steps++;
    return st;
}

mc_status mc_ddp_finish_param_sync(mc_ddp *d)
{
    return d->dopt ? mc_distopt_finish_param_sync(d->dopt) : MC_OK;
}
