/* The timed backend wrapper (timed_backend.h): every op forwarded to the inner backend between
 * two clock reads. Ops may be called from several threads, so the sums are taken under a lock
 * (only the additions: the op itself runs outside it). */
#include "backend/timed/timed_backend.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

enum op_class {
    C_ATTENTION, C_SOFTMAX, C_NORM, C_ACT, C_BIAS, C_XENT, C_LOSS, C_EMBED, C_ROPE, C_ADAM,
    C_GRADNORM, C_COPY, C_ALLOC, C_CONVERT, C_RNG, C_GEMM0
};
static const char *const class_name[C_GEMM0] = {
    "attention (core, incl. its bmm)", "softmax (unfused)", "norms (layernorm/rmsnorm)",
    "activations (gelu/swiglu/...)", "bias grad, bias-dropout-add", "cross-entropy (vocab)",
    "loss reduction", "embedding", "rope", "optimizer (adamw/sgd)",
    "grad norm / clip / zeros", "copies, zeroing (set)", "alloc / free", "dtype convert / accum",
    "dropout mask / init rng"};

#define MAX_GEMMS 96

struct timer {
    double wall, cpu;
    int64_t calls;
};

struct gemm_key {
    bool ta, tb;
    int64_t m, n, k;
};

struct timed_state {
    struct mc_backend *inner;
    pthread_mutex_t lock;
    struct timer t[C_GEMM0 + MAX_GEMMS];
    struct gemm_key g[MAX_GEMMS];
    int n_gemm;
};

static struct timed_state *S(const struct mc_backend *be) { return be->impl; }
#define IN(be) (S(be)->inner)

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct stamp {
    double wall, cpu;
};

static struct stamp start(void)
{
    return (struct stamp){clock_s(CLOCK_MONOTONIC), clock_s(CLOCK_PROCESS_CPUTIME_ID)};
}

static void stop(struct mc_backend *be, int slot, struct stamp s0)
{
    double w = clock_s(CLOCK_MONOTONIC), c = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    struct timed_state *s = S(be);
    pthread_mutex_lock(&s->lock);
    s->t[slot].wall += w - s0.wall;
    s->t[slot].cpu += c - s0.cpu;
    s->t[slot].calls++;
    pthread_mutex_unlock(&s->lock);
}

/* The timer slot of one GEMM shape (the last slot collects shapes past MAX_GEMMS). */
static int gemm_slot(struct mc_backend *be, bool ta, bool tb, int64_t m, int64_t n, int64_t k)
{
    struct timed_state *s = S(be);
    pthread_mutex_lock(&s->lock);
    int i = 0;
    while (i < s->n_gemm && !(s->g[i].ta == ta && s->g[i].tb == tb && s->g[i].m == m &&
                              s->g[i].n == n && s->g[i].k == k))
        i++;
    if (i == s->n_gemm && i < MAX_GEMMS - 1)
        s->g[s->n_gemm++] = (struct gemm_key){ta, tb, m, n, k};
    else if (i == s->n_gemm)
        i = MAX_GEMMS - 1;
    pthread_mutex_unlock(&s->lock);
    return C_GEMM0 + i;
}

/* One forwarded op: T(class, call) for void ops, TR(class, type, call) for ops with a result. */
#define T(cls, call)                    \
    do {                                \
        struct stamp s0_ = start();     \
        IN(be)->ops->call;              \
        stop(be, cls, s0_);             \
    } while (0)
#define TR(cls, type, call)             \
    do {                                \
        struct stamp s0_ = start();     \
        type r_ = IN(be)->ops->call;    \
        stop(be, cls, s0_);             \
        return r_;                      \
    } while (0)

static bool t_supports(const struct mc_backend *be, enum mc_backend_op op,
                       const enum mc_dtype *dtypes, int n)
{
    const struct mc_backend *in = S(be)->inner;
    return in->ops->supports(in, op, dtypes, n);
}

static void *t_alloc(struct mc_backend *be, size_t bytes)
{
    TR(C_ALLOC, void *, alloc(IN(be), bytes));
}
static void t_free(struct mc_backend *be, void *p) { T(C_ALLOC, free(IN(be), p)); }
static void t_copy_to_backend(struct mc_backend *be, void *dst, const void *src, size_t bytes)
{
    T(C_COPY, copy_to_backend(IN(be), dst, src, bytes));
}
static void t_copy_to_host(struct mc_backend *be, void *dst, const void *src, size_t bytes)
{
    T(C_COPY, copy_to_host(IN(be), dst, src, bytes));
}
static void t_copy(struct mc_backend *be, void *dst, const void *src, size_t bytes)
{
    T(C_COPY, copy(IN(be), dst, src, bytes));
}
static void t_set(struct mc_backend *be, void *dst, int byte, size_t bytes)
{
    T(C_COPY, set(IN(be), dst, byte, bytes));
}
static void t_sync(struct mc_backend *be) { T(C_COPY, sync(IN(be))); }
/* start-up measurements, not ops of a step: forwarded untimed */
static void t_measure(struct mc_backend *be, double m[MC_BACKEND_MEASURES])
{
    IN(be)->ops->measure(IN(be), m);
}
static void t_adopt(struct mc_backend *be, const double m[MC_BACKEND_MEASURES])
{
    IN(be)->ops->adopt(IN(be), m);
}
static bool t_set_rounding(struct mc_backend *be, enum mc_rounding r)
{
    if (!IN(be)->ops->set_rounding(IN(be), r))
        return false;
    be->rounding = r;
    return true;
}

static void t_convert(struct mc_backend *be, void *dst, enum mc_dtype ddt, const void *src,
                      enum mc_dtype sdt, int64_t n)
{
    T(C_CONVERT, convert(IN(be), dst, ddt, src, sdt, n));
}
static void t_accumulate(struct mc_backend *be, void *dst, enum mc_dtype ddt, const void *src,
                         enum mc_dtype sdt, int64_t n)
{
    T(C_CONVERT, accumulate(IN(be), dst, ddt, src, sdt, n));
}

static void t_gemm(struct mc_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                   float alpha, const void *A, enum mc_dtype a_dt, int64_t lda, const void *B,
                   enum mc_dtype b_dt, int64_t ldb, float beta, void *C, enum mc_dtype c_dt,
                   int64_t ldc, enum mc_dtype compute)
{
    int slot = gemm_slot(be, ta, tb, M, N, K);
    T(slot, gemm(IN(be), ta, tb, M, N, K, alpha, A, a_dt, lda, B, b_dt, ldb, beta, C, c_dt, ldc,
                 compute));
}

static void t_layernorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *mean,
                            float *rstd, const void *x, const void *w, const void *b,
                            int64_t rows, int64_t h, float eps)
{
    T(C_NORM, layernorm_fwd(IN(be), dt, y, mean, rstd, x, w, b, rows, h, eps));
}
static void t_layernorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw, void *db,
                            const void *dy, const void *x, const void *w, const float *mean,
                            const float *rstd, int64_t rows, int64_t h)
{
    T(C_NORM, layernorm_bwd(IN(be), dt, dx, dw, db, dy, x, w, mean, rstd, rows, h));
}
static void t_rmsnorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *rstd,
                          const void *x, const void *w, int64_t rows, int64_t h, float eps)
{
    T(C_NORM, rmsnorm_fwd(IN(be), dt, y, rstd, x, w, rows, h, eps));
}
static void t_rmsnorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                          const void *dy, const void *x, const void *w, const float *rstd,
                          int64_t rows, int64_t h)
{
    T(C_NORM, rmsnorm_bwd(IN(be), dt, dx, dw, dy, x, w, rstd, rows, h));
}

/* The activations share one signature. */
#define ACT(op)                                                                                 \
    static void t_##op(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,        \
                       const void *bias, int64_t rows, int64_t cols)                           \
    {                                                                                           \
        T(C_ACT, op(IN(be), dt, y, x, bias, rows, cols));                                       \
    }
#define ACT_BWD(op)                                                                             \
    static void t_##op(struct mc_backend *be, enum mc_dtype dt, void *dx, const void *dy,      \
                       const void *x, const void *bias, int64_t rows, int64_t cols)            \
    {                                                                                           \
        T(C_ACT, op(IN(be), dt, dx, dy, x, bias, rows, cols));                                  \
    }
ACT(gelu_tanh_fwd)
ACT_BWD(gelu_tanh_bwd)
ACT(gelu_erf_fwd)
ACT_BWD(gelu_erf_bwd)
ACT(squared_relu_fwd)
ACT_BWD(squared_relu_bwd)
ACT(swiglu_fwd)
ACT_BWD(swiglu_bwd)

static void t_bias_grad(struct mc_backend *be, enum mc_dtype dt, void *db, const void *dy,
                        int64_t rows, int64_t cols)
{
    T(C_BIAS, bias_grad(IN(be), dt, db, dy, rows, cols));
}
static void t_bias_dropout_add(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                               const void *bias, const void *residual, const uint8_t *keep_mask,
                               float scale, int64_t rows, int64_t cols)
{
    T(C_BIAS, bias_dropout_add(IN(be), dt, y, x, bias, residual, keep_mask, scale, rows, cols));
}

static void t_masked_softmax_fwd(struct mc_backend *be, enum mc_dtype dt, void *p, int64_t bh,
                                 int64_t sq, int64_t sk, float mult, const uint8_t *mask)
{
    T(C_SOFTMAX, masked_softmax_fwd(IN(be), dt, p, bh, sq, sk, mult, mask));
}
static void t_masked_softmax_bwd(struct mc_backend *be, enum mc_dtype dt, void *dp, const void *p,
                                 int64_t bh, int64_t sq, int64_t sk, float mult)
{
    T(C_SOFTMAX, masked_softmax_bwd(IN(be), dt, dp, p, bh, sq, sk, mult));
}

static void t_rope_fwd(struct mc_backend *be, enum mc_dtype dt, void *t, const float *cos,
                       const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                       bool interleaved)
{
    T(C_ROPE, rope_fwd(IN(be), dt, t, cos, sin, s, bh, hn, rot_dim, interleaved));
}
static void t_rope_bwd(struct mc_backend *be, enum mc_dtype dt, void *dgrad, const float *cos,
                       const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                       bool interleaved)
{
    T(C_ROPE, rope_bwd(IN(be), dt, dgrad, cos, sin, s, bh, hn, rot_dim, interleaved));
}

static void t_embedding_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, const void *w,
                            const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                            int64_t vocab_local)
{
    T(C_EMBED, embedding_fwd(IN(be), dt, y, w, ids, n, h, vocab_start, vocab_local));
}
static void t_embedding_bwd(struct mc_backend *be, enum mc_dtype dt, void *dw, const void *dy,
                            const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                            int64_t vocab_local)
{
    T(C_EMBED, embedding_bwd(IN(be), dt, dw, dy, ids, n, h, vocab_start, vocab_local));
}

static void t_xent_max(struct mc_backend *be, enum mc_dtype dt, float *max_local,
                       const void *logits, int64_t n, int64_t v)
{
    T(C_XENT, xent_max(IN(be), dt, max_local, logits, n, v));
}
static void t_xent_sumexp(struct mc_backend *be, enum mc_dtype dt, float *sumexp_local,
                          float *target_logit, const void *logits, const float *max,
                          const int64_t *target, int64_t n, int64_t v, int64_t v_start)
{
    T(C_XENT, xent_sumexp(IN(be), dt, sumexp_local, target_logit, logits, max, target, n, v,
                          v_start));
}
static void t_xent_bwd(struct mc_backend *be, enum mc_dtype dt, void *dlogits, const void *logits,
                       const float *max, const float *sumexp, const int64_t *target,
                       const float *dloss, int64_t n, int64_t v, int64_t v_start)
{
    T(C_XENT, xent_bwd(IN(be), dt, dlogits, logits, max, sumexp, target, dloss, n, v, v_start));
}

static double t_sumsq(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    TR(C_GRADNORM, double, sumsq(IN(be), dt, x, n));
}
static int64_t t_count_zeros(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    TR(C_GRADNORM, int64_t, count_zeros(IN(be), dt, x, n));
}
static void t_scale(struct mc_backend *be, enum mc_dtype dt, void *x, float s, int64_t n)
{
    T(C_GRADNORM, scale(IN(be), dt, x, s, n));
}
static void t_adamw(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                    float *m, float *v, const void *g, int64_t n, float lr, float b1, float b2,
                    float eps, float wd, int64_t t)
{
    T(C_ADAM, adamw(IN(be), p_dt, g_dt, p, m, v, g, n, lr, b1, b2, eps, wd, t));
}
static void t_sgd(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                  float *buf, const void *g, int64_t n, float lr, float momentum, float wd,
                  bool first_step)
{
    T(C_ADAM, sgd(IN(be), p_dt, g_dt, p, buf, g, n, lr, momentum, wd, first_step));
}

static void t_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                            const void *qkv, void *probs, void *ctx, struct mc_attention_work *w)
{
    T(C_ATTENTION, attention_fwd(IN(be), d, qkv, probs, ctx, w));
}
static void t_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                            const void *qkv, const void *probs, const void *dctx, void *dqkv,
                            struct mc_attention_work *w)
{
    T(C_ATTENTION, attention_bwd(IN(be), d, qkv, probs, dctx, dqkv, w));
}
static void t_flash_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                  const void *qkv, void *ctx, float *lse)
{
    T(C_ATTENTION, flash_attention_fwd(IN(be), d, qkv, ctx, lse));
}
static void t_flash_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                  const void *qkv, const void *ctx, const float *lse,
                                  const void *dctx, void *dqkv)
{
    T(C_ATTENTION, flash_attention_bwd(IN(be), d, qkv, ctx, lse, dctx, dqkv));
}
static void t_dropout_mask(struct mc_backend *be, uint8_t *keep, const struct mc_dropout_stream *r,
                           int64_t first, int64_t n, float p)
{
    T(C_RNG, dropout_mask(IN(be), keep, r, first, n, p));
}
static void t_fill_normal(struct mc_backend *be, enum mc_dtype dt, void *out, int64_t first,
                          int64_t n, uint64_t seed, uint32_t c2, uint32_t c3, float std)
{
    T(C_RNG, fill_normal(IN(be), dt, out, first, n, seed, c2, c3, std));
}
static void t_masked_loss(struct mc_backend *be, enum mc_dtype dt, double *sum, double *count,
                          const void *loss, const float *mask, int64_t n)
{
    T(C_LOSS, masked_loss(IN(be), dt, sum, count, loss, mask, n));
}
static void t_masked_loss_bwd(struct mc_backend *be, float *dloss, const float *mask, float scale,
                              int64_t n)
{
    T(C_LOSS, masked_loss_bwd(IN(be), dloss, mask, scale, n));
}

static const struct mc_backend_ops timed_ops = {
    .version = MC_BACKEND_VERSION,
    .name = "timed",
    .supports = t_supports,
    .alloc = t_alloc,
    .free = t_free,
    .copy_to_backend = t_copy_to_backend,
    .copy_to_host = t_copy_to_host,
    .copy = t_copy,
    .set = t_set,
    .sync = t_sync,
    .measure = t_measure,
    .adopt = t_adopt,
    .set_rounding = t_set_rounding,
    .convert = t_convert,
    .accumulate = t_accumulate,
    .gemm = t_gemm,
    .layernorm_fwd = t_layernorm_fwd,
    .layernorm_bwd = t_layernorm_bwd,
    .rmsnorm_fwd = t_rmsnorm_fwd,
    .rmsnorm_bwd = t_rmsnorm_bwd,
    .gelu_tanh_fwd = t_gelu_tanh_fwd,
    .gelu_tanh_bwd = t_gelu_tanh_bwd,
    .gelu_erf_fwd = t_gelu_erf_fwd,
    .gelu_erf_bwd = t_gelu_erf_bwd,
    .squared_relu_fwd = t_squared_relu_fwd,
    .squared_relu_bwd = t_squared_relu_bwd,
    .swiglu_fwd = t_swiglu_fwd,
    .swiglu_bwd = t_swiglu_bwd,
    .bias_grad = t_bias_grad,
    .bias_dropout_add = t_bias_dropout_add,
    .masked_softmax_fwd = t_masked_softmax_fwd,
    .masked_softmax_bwd = t_masked_softmax_bwd,
    .rope_fwd = t_rope_fwd,
    .rope_bwd = t_rope_bwd,
    .embedding_fwd = t_embedding_fwd,
    .embedding_bwd = t_embedding_bwd,
    .xent_max = t_xent_max,
    .xent_sumexp = t_xent_sumexp,
    .xent_bwd = t_xent_bwd,
    .sumsq = t_sumsq,
    .count_zeros = t_count_zeros,
    .scale = t_scale,
    .adamw = t_adamw,
    .sgd = t_sgd,
    .attention_fwd = t_attention_fwd,
    .attention_bwd = t_attention_bwd,
    .flash_attention_fwd = t_flash_attention_fwd,
    .flash_attention_bwd = t_flash_attention_bwd,
    .dropout_mask = t_dropout_mask,
    .fill_normal = t_fill_normal,
    .masked_loss = t_masked_loss,
    .masked_loss_bwd = t_masked_loss_bwd,
};

mc_status mc_timed_backend_create(struct mc_backend *inner, struct mc_backend **out)
{
    struct mc_backend *be = mc_calloc(1, sizeof(*be));
    struct timed_state *s = mc_calloc(1, sizeof(*s));
    if (!be || !s) {
        mc_free(s);
        mc_free(be);
        return mc_error(MC_ERR_NOMEM, "timed backend: out of memory");
    }
    pthread_mutex_init(&s->lock, NULL);
    s->inner = inner;
    be->ops = &timed_ops;
    be->name = inner->name;
    be->n_threads = inner->n_threads;
    be->impl = s;
    *out = be;
    return MC_OK;
}

void mc_timed_backend_free(struct mc_backend *be)
{
    if (!be)
        return;
    pthread_mutex_destroy(&S(be)->lock);
    mc_free(S(be));
    mc_free(be);
}

void mc_timed_backend_reset(struct mc_backend *be)
{
    struct timed_state *s = S(be);
    pthread_mutex_lock(&s->lock);
    memset(s->t, 0, sizeof s->t);
    pthread_mutex_unlock(&s->lock);
}

/* A GEMM's row label: op(A) op(B) as N/T and the product's M x N x K. Which pass it belongs to
 * follows from the transposes for a Linear with weights [out, in]: NT forward (x W^T), NN data
 * grad (dy W), TN weight grad (dy^T x). */
static void gemm_label(char *buf, size_t n, const struct gemm_key *g)
{
    const char *pass = !g->ta && g->tb ? "fwd" : !g->ta && !g->tb ? "bwd dgrad"
                     : g->ta && !g->tb ? "bwd wgrad" : "TT";
    snprintf(buf, n, "gemm %c%c %lldx%lldx%lld (%s)", g->ta ? 'T' : 'N', g->tb ? 'T' : 'N',
             (long long)g->m, (long long)g->n, (long long)g->k, pass);
}

void mc_timed_backend_report(const struct mc_backend *be, FILE *f, int steps, double step_wall,
                             double step_cpu)
{
    const struct timed_state *s = S(be);
    double per = steps > 0 ? 1.0 / steps : 0, sw = 0, sc = 0, gw = 0, gc = 0, gflop = 0;
    fprintf(f, "%-44s %9s %11s %7s %11s %7s %8s\n", "op class (per step)", "calls", "wall ms",
            "wall%", "cpu ms", "cpu%", "GFLOP/s");
    for (int i = 0; i < C_GEMM0 + s->n_gemm; i++) {
        const struct timer *t = &s->t[i];
        if (!t->calls)
            continue;
        char label[64];
        double gf = 0;
        if (i >= C_GEMM0) {
            const struct gemm_key *g = &s->g[i - C_GEMM0];
            gemm_label(label, sizeof label, g);
            gf = 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)t->calls;
            gw += t->wall, gc += t->cpu, gflop += gf;
        } else {
            snprintf(label, sizeof label, "%s", class_name[i]);
        }
        sw += t->wall, sc += t->cpu;
        fprintf(f, "%-44s %9.1f %11.2f %6.1f%% %11.2f %6.1f%%", label, (double)t->calls * per,
                t->wall * 1e3 * per, 100.0 * t->wall / step_wall, t->cpu * 1e3 * per,
                100.0 * t->cpu / step_cpu);
        if (gf > 0)
            fprintf(f, " %8.1f", gf / t->wall * 1e-9);
        fputc('\n', f);
    }
    fprintf(f, "%-44s %9s %11.2f %6.1f%% %11.2f %6.1f%% %8.1f\n", "= all GEMMs", "",
            gw * 1e3 * per, 100.0 * gw / step_wall, gc * 1e3 * per, 100.0 * gc / step_cpu,
            gw > 0 ? gflop / gw * 1e-9 : 0.0);
    fprintf(f, "%-44s %9s %11.2f %6.1f%% %11.2f %6.1f%%\n", "rest (outside backend ops)", "",
            (step_wall - sw) * 1e3 * per, 100.0 * (step_wall - sw) / step_wall,
            (step_cpu - sc) * 1e3 * per, 100.0 * (step_cpu - sc) / step_cpu);
    fprintf(f, "%-44s %9s %11.2f %6.1f%% %11.2f %6.1f%%\n", "step", "", step_wall * 1e3 * per,
            100.0, step_cpu * 1e3 * per, 100.0);
}
