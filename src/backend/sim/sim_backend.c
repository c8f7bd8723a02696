/* The "cpu-sim" backend: a second backend, deliberately unlike "cpu", that plays a device with
 * memory of its own. It runs the scalar reference kernels (the cpu-ref table, through an inner
 * CPU backend) but owns its buffers: alloc/free keep a registry of the blocks it handed out,
 * every byte that enters or leaves goes through its copy ops (counted each way), and every op
 * first checks that each tensor pointer it is given (inputs and outputs) lies inside one of its
 * live blocks, stopping the process with the op and argument named otherwise. A model that
 * runs on it therefore hands the backend nothing but backend memory: the proof that a device
 * backend can be written behind the seam without touching models/. Host-side arguments the API
 * documents as host (the attention descriptor and work records, the dropout stream record, the
 * double results of sumsq and masked_loss) are not tensors and are not checked. Chosen with
 * MC_BACKEND=cpu-sim (backend.c); the counters are logged when it is freed. */
#include "backend/sim/sim_backend.h"

#include "backend/cpu/cpu_backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct sim_block {
    uintptr_t base;
    size_t bytes;
};

struct sim_state {
    struct mc_backend *inner; /* the CPU backend on the reference kernel table */
    pthread_mutex_t lock;     /* the registry (ops may be called from several threads) */
    struct sim_block *blocks; /* live blocks, sorted by base */
    int64_t n, cap;
    size_t live_bytes, peak_bytes;
    int64_t n_allocs;
    size_t to_backend, to_host, on_backend; /* bytes through each copy op */
};

static struct sim_state *S(struct mc_backend *be) { return be->impl; }

/* Index of the first block whose base is > p. */
static int64_t upper(const struct sim_state *s, uintptr_t p)
{
    int64_t lo = 0, hi = s->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (s->blocks[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool owned(struct sim_state *s, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    pthread_mutex_lock(&s->lock);
    int64_t i = upper(s, a) - 1;
    bool in = i >= 0 && a < s->blocks[i].base + s->blocks[i].bytes;
    pthread_mutex_unlock(&s->lock);
    return in;
}

/* Stops the process when tensor argument arg of op is not backend memory (NULL stands for an
 * absent optional argument, as the API allows). */
static void need(struct mc_backend *be, const char *op, const char *arg, const void *p)
{
    if (!p || owned(S(be), p))
        return;
    mc_log(MC_LOG_ERROR, "backend cpu-sim: op %s: argument %s (%p) is not memory of this "
           "backend (not inside any live block from its alloc)", op, arg, p);
    abort();
}

#define NEED(p) need(be, op_name, #p, p)
#define IN(be) (S(be)->inner)

static bool sim_supports(const struct mc_backend *be, enum mc_backend_op op,
                         const enum mc_dtype *dtypes, int n)
{
    const struct mc_backend *in = ((const struct sim_state *)be->impl)->inner;
    return in->ops->supports(in, op, dtypes, n);
}

/* ---- buffers: blocks of its own, every transfer counted ---------------------------------- */

static void *sim_alloc(struct mc_backend *be, size_t bytes)
{
    struct sim_state *s = S(be);
    void *p = mc_alloc(bytes ? bytes : 1);
    if (!p)
        return NULL;
    pthread_mutex_lock(&s->lock);
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 64;
        struct sim_block *nb = realloc(s->blocks, (size_t)cap * sizeof(*nb));
        if (!nb) {
            pthread_mutex_unlock(&s->lock);
            mc_free(p);
            return NULL;
        }
        s->blocks = nb;
        s->cap = cap;
    }
    int64_t i = upper(s, (uintptr_t)p);
    memmove(s->blocks + i + 1, s->blocks + i, (size_t)(s->n - i) * sizeof(*s->blocks));
    s->blocks[i] = (struct sim_block){(uintptr_t)p, bytes ? bytes : 1};
    s->n++;
    s->n_allocs++;
    s->live_bytes += bytes;
    if (s->live_bytes > s->peak_bytes)
        s->peak_bytes = s->live_bytes;
    pthread_mutex_unlock(&s->lock);
    return p;
}

static void sim_free(struct mc_backend *be, void *p)
{
    if (!p)
        return;
    struct sim_state *s = S(be);
    pthread_mutex_lock(&s->lock);
    int64_t i = upper(s, (uintptr_t)p) - 1;
    bool found = i >= 0 && s->blocks[i].base == (uintptr_t)p;
    if (found) {
        s->live_bytes -= s->blocks[i].bytes;
        memmove(s->blocks + i, s->blocks + i + 1, (size_t)(s->n - i - 1) * sizeof(*s->blocks));
        s->n--;
    }
    pthread_mutex_unlock(&s->lock);
    if (!found) {
        mc_log(MC_LOG_ERROR, "backend cpu-sim: free(%p): not a block of this backend", p);
        abort();
    }
    mc_free(p);
}

static void sim_copy_to_backend(struct mc_backend *be, void *dst, const void *host_src,
                                size_t bytes)
{
    const char *op_name = "copy_to_backend";
    NEED(dst);
    if (bytes)
        memcpy(dst, host_src, bytes);
    __atomic_add_fetch(&S(be)->to_backend, bytes, __ATOMIC_RELAXED);
}

static void sim_copy_to_host(struct mc_backend *be, void *host_dst, const void *src, size_t bytes)
{
    const char *op_name = "copy_to_host";
    NEED(src);
    if (bytes)
        memcpy(host_dst, src, bytes);
    __atomic_add_fetch(&S(be)->to_host, bytes, __ATOMIC_RELAXED);
}

static void sim_copy(struct mc_backend *be, void *dst, const void *src, size_t bytes)
{
    const char *op_name = "copy";
    NEED(dst);
    NEED(src);
    if (bytes)
        memmove(dst, src, bytes);
    __atomic_add_fetch(&S(be)->on_backend, bytes, __ATOMIC_RELAXED);
}

static void sim_set(struct mc_backend *be, void *dst, int byte, size_t bytes)
{
    const char *op_name = "set";
    NEED(dst);
    if (bytes)
        memset(dst, byte, bytes);
}

static void sim_sync(struct mc_backend *be) { (void)be; }
static void sim_measure(struct mc_backend *be, double m[MC_BACKEND_MEASURES])
{
    IN(be)->ops->measure(IN(be), m);
}
static void sim_adopt(struct mc_backend *be, const double m[MC_BACKEND_MEASURES])
{
    IN(be)->ops->adopt(IN(be), m);
}
static bool sim_set_rounding(struct mc_backend *be, enum mc_rounding r)
{
    if (!IN(be)->ops->set_rounding(IN(be), r))
        return false;
    be->rounding = r;
    return true;
}

static void sim_convert(struct mc_backend *be, void *dst, enum mc_dtype dst_dt, const void *src,
                        enum mc_dtype src_dt, int64_t n)
{
    const char *op_name = "convert";
    NEED(dst);
    NEED(src);
    IN(be)->ops->convert(IN(be), dst, dst_dt, src, src_dt, n);
}

static void sim_accumulate(struct mc_backend *be, void *dst, enum mc_dtype dst_dt,
                           const void *src, enum mc_dtype src_dt, int64_t n)
{
    const char *op_name = "accumulate";
    NEED(dst);
    NEED(src);
    IN(be)->ops->accumulate(IN(be), dst, dst_dt, src, src_dt, n);
}

/* ---- ops: check every tensor argument, then run the reference kernel ---------------------- */

static void sim_gemm(struct mc_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     float alpha, const void *A, enum mc_dtype a_dt, int64_t lda, const void *B,
                     enum mc_dtype b_dt, int64_t ldb, float beta, void *C, enum mc_dtype c_dt,
                     int64_t ldc, enum mc_dtype compute)
{
    const char *op_name = "gemm";
    NEED(A);
    NEED(B);
    NEED(C);
    IN(be)->ops->gemm(IN(be), ta, tb, M, N, K, alpha, A, a_dt, lda, B, b_dt, ldb, beta, C, c_dt,
                      ldc, compute);
}

static void sim_layernorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *mean,
                              float *rstd, const void *x, const void *w, const void *b,
                              int64_t rows, int64_t h, float eps)
{
    const char *op_name = "layernorm_fwd";
    NEED(y);
    NEED(mean);
    NEED(rstd);
    NEED(x);
    NEED(w);
    NEED(b);
    IN(be)->ops->layernorm_fwd(IN(be), dt, y, mean, rstd, x, w, b, rows, h, eps);
}

static void sim_layernorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                              void *db, const void *dy, const void *x, const void *w,
                              const float *mean, const float *rstd, int64_t rows, int64_t h)
{
    const char *op_name = "layernorm_bwd";
    NEED(dx);
    NEED(dw);
    NEED(db);
    NEED(dy);
    NEED(x);
    NEED(w);
    NEED(mean);
    NEED(rstd);
    IN(be)->ops->layernorm_bwd(IN(be), dt, dx, dw, db, dy, x, w, mean, rstd, rows, h);
}

static void sim_rmsnorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *rstd,
                            const void *x, const void *w, int64_t rows, int64_t h, float eps)
{
    const char *op_name = "rmsnorm_fwd";
    NEED(y);
    NEED(rstd);
    NEED(x);
    NEED(w);
    IN(be)->ops->rmsnorm_fwd(IN(be), dt, y, rstd, x, w, rows, h, eps);
}

static void sim_rmsnorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                            const void *dy, const void *x, const void *w, const float *rstd,
                            int64_t rows, int64_t h)
{
    const char *op_name = "rmsnorm_bwd";
    NEED(dx);
    NEED(dw);
    NEED(dy);
    NEED(x);
    NEED(w);
    NEED(rstd);
    IN(be)->ops->rmsnorm_bwd(IN(be), dt, dx, dw, dy, x, w, rstd, rows, h);
}

#define SIM_ACTIVATION(op)                                                                    \
    static void sim_##op##_fwd(struct mc_backend *be, enum mc_dtype dt, void *y,              \
                               const void *x, const void *bias, int64_t rows, int64_t cols)   \
    {                                                                                         \
        const char *op_name = #op "_fwd";                                                     \
        NEED(y);                                                                              \
        NEED(x);                                                                              \
        NEED(bias);                                                                           \
        IN(be)->ops->op##_fwd(IN(be), dt, y, x, bias, rows, cols);                            \
    }                                                                                         \
    static void sim_##op##_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx,             \
                               const void *dy, const void *x, const void *bias, int64_t rows, \
                               int64_t cols)                                                  \
    {                                                                                         \
        const char *op_name = #op "_bwd";                                                     \
        NEED(dx);                                                                             \
        NEED(dy);                                                                             \
        NEED(x);                                                                              \
        NEED(bias);                                                                           \
        IN(be)->ops->op##_bwd(IN(be), dt, dx, dy, x, bias, rows, cols);                       \
    }
SIM_ACTIVATION(gelu_tanh)
SIM_ACTIVATION(gelu_erf)
SIM_ACTIVATION(squared_relu)
SIM_ACTIVATION(swiglu)

static void sim_bias_grad(struct mc_backend *be, enum mc_dtype dt, void *db, const void *dy,
                          int64_t rows, int64_t cols)
{
    const char *op_name = "bias_grad";
    NEED(db);
    NEED(dy);
    IN(be)->ops->bias_grad(IN(be), dt, db, dy, rows, cols);
}

static void sim_bias_dropout_add(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                                 const void *bias, const void *residual,
                                 const uint8_t *keep_mask, float scale, int64_t rows,
                                 int64_t cols)
{
    const char *op_name = "bias_dropout_add";
    NEED(y);
    NEED(x);
    NEED(bias);
    NEED(residual);
    NEED(keep_mask);
    IN(be)->ops->bias_dropout_add(IN(be), dt, y, x, bias, residual, keep_mask, scale, rows, cols);
}

static void sim_masked_softmax_fwd(struct mc_backend *be, enum mc_dtype dt, void *p, int64_t bh,
                                   int64_t sq, int64_t sk, float mult, const uint8_t *mask)
{
    const char *op_name = "masked_softmax_fwd";
    NEED(p);
    NEED(mask);
    IN(be)->ops->masked_softmax_fwd(IN(be), dt, p, bh, sq, sk, mult, mask);
}

static void sim_masked_softmax_bwd(struct mc_backend *be, enum mc_dtype dt, void *dp,
                                   const void *p, int64_t bh, int64_t sq, int64_t sk, float mult)
{
    const char *op_name = "masked_softmax_bwd";
    NEED(dp);
    NEED(p);
    IN(be)->ops->masked_softmax_bwd(IN(be), dt, dp, p, bh, sq, sk, mult);
}

static void sim_rope_fwd(struct mc_backend *be, enum mc_dtype dt, void *t, const float *cos,
                         const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                         bool interleaved)
{
    const char *op_name = "rope_fwd";
    NEED(t);
    NEED(cos);
    NEED(sin);
    IN(be)->ops->rope_fwd(IN(be), dt, t, cos, sin, s, bh, hn, rot_dim, interleaved);
}

static void sim_rope_bwd(struct mc_backend *be, enum mc_dtype dt, void *dgrad, const float *cos,
                         const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                         bool interleaved)
{
    const char *op_name = "rope_bwd";
    NEED(dgrad);
    NEED(cos);
    NEED(sin);
    IN(be)->ops->rope_bwd(IN(be), dt, dgrad, cos, sin, s, bh, hn, rot_dim, interleaved);
}

static void sim_embedding_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, const void *w,
                              const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                              int64_t vocab_local)
{
    const char *op_name = "embedding_fwd";
    NEED(y);
    NEED(w);
    NEED(ids);
    IN(be)->ops->embedding_fwd(IN(be), dt, y, w, ids, n, h, vocab_start, vocab_local);
}

static void sim_embedding_bwd(struct mc_backend *be, enum mc_dtype dt, void *dw, const void *dy,
                              const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                              int64_t vocab_local)
{
    const char *op_name = "embedding_bwd";
    NEED(dw);
    NEED(dy);
    NEED(ids);
    IN(be)->ops->embedding_bwd(IN(be), dt, dw, dy, ids, n, h, vocab_start, vocab_local);
}

static void sim_xent_max(struct mc_backend *be, enum mc_dtype dt, float *max_local,
                         const void *logits, int64_t n, int64_t v)
{
    const char *op_name = "xent_max";
    NEED(max_local);
    NEED(logits);
    IN(be)->ops->xent_max(IN(be), dt, max_local, logits, n, v);
}

static void sim_xent_sumexp(struct mc_backend *be, enum mc_dtype dt, float *sumexp_local,
                            float *target_logit, const void *logits, const float *max,
                            const int64_t *target, int64_t n, int64_t v, int64_t v_start)
{
    const char *op_name = "xent_sumexp";
    NEED(sumexp_local);
    NEED(target_logit);
    NEED(logits);
    NEED(max);
    NEED(target);
    IN(be)->ops->xent_sumexp(IN(be), dt, sumexp_local, target_logit, logits, max, target, n, v,
                             v_start);
}

static void sim_xent_bwd(struct mc_backend *be, enum mc_dtype dt, void *dlogits,
                         const void *logits, const float *max, const float *sumexp,
                         const int64_t *target, const float *dloss, int64_t n, int64_t v,
                         int64_t v_start)
{
    const char *op_name = "xent_bwd";
    NEED(dlogits);
    NEED(logits);
    NEED(max);
    NEED(sumexp);
    NEED(target);
    NEED(dloss);
    IN(be)->ops->xent_bwd(IN(be), dt, dlogits, logits, max, sumexp, target, dloss, n, v,
                          v_start);
}

static double sim_sumsq(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    const char *op_name = "sumsq";
    NEED(x);
    return IN(be)->ops->sumsq(IN(be), dt, x, n);
}

static int64_t sim_count_zeros(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    const char *op_name = "count_zeros";
    NEED(x);
    return IN(be)->ops->count_zeros(IN(be), dt, x, n);
}

static void sim_scale(struct mc_backend *be, enum mc_dtype dt, void *x, float s, int64_t n)
{
    const char *op_name = "scale";
    NEED(x);
    IN(be)->ops->scale(IN(be), dt, x, s, n);
}

static void sim_adamw(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                      float *m, float *v, const void *g, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, int64_t t)
{
    const char *op_name = "adamw";
    NEED(p);
    NEED(m);
    NEED(v);
    NEED(g);
    IN(be)->ops->adamw(IN(be), p_dt, g_dt, p, m, v, g, n, lr, b1, b2, eps, wd, t);
}

static void sim_sgd(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                    float *buf, const void *g, int64_t n, float lr, float momentum, float wd,
                    bool first_step)
{
    const char *op_name = "sgd";
    NEED(p);
    NEED(buf);
    NEED(g);
    IN(be)->ops->sgd(IN(be), p_dt, g_dt, p, buf, g, n, lr, momentum, wd, first_step);
}

static void sim_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                              const void *qkv, void *probs, void *ctx,
                              struct mc_attention_work *w)
{
    const char *op_name = "attention_fwd";
    NEED(qkv);
    NEED(probs);
    NEED(ctx);
    NEED(d->mask);
    NEED(w->a);
    NEED(w->b);
    NEED(w->keep);
    IN(be)->ops->attention_fwd(IN(be), d, qkv, probs, ctx, w);
}

static void sim_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                              const void *qkv, const void *probs, const void *dctx, void *dqkv,
                              struct mc_attention_work *w)
{
    const char *op_name = "attention_bwd";
    NEED(qkv);
    NEED(probs);
    NEED(dctx);
    NEED(dqkv);
    NEED(d->mask);
    NEED(w->a);
    NEED(w->b);
    NEED(w->keep);
    IN(be)->ops->attention_bwd(IN(be), d, qkv, probs, dctx, dqkv, w);
}

static void sim_flash_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                    const void *qkv, void *ctx, float *lse)
{
    const char *op_name = "flash_attention_fwd";
    NEED(qkv);
    NEED(ctx);
    NEED(lse);
    NEED(d->mask);
    IN(be)->ops->flash_attention_fwd(IN(be), d, qkv, ctx, lse);
}

static void sim_flash_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                    const void *qkv, const void *ctx, const float *lse,
                                    const void *dctx, void *dqkv)
{
    const char *op_name = "flash_attention_bwd";
    NEED(qkv);
    NEED(ctx);
    NEED(lse);
    NEED(dctx);
    NEED(dqkv);
    NEED(d->mask);
    IN(be)->ops->flash_attention_bwd(IN(be), d, qkv, ctx, lse, dctx, dqkv);
}

static void sim_dropout_mask(struct mc_backend *be, uint8_t *keep,
                             const struct mc_dropout_stream *r, int64_t first, int64_t n, float p)
{
    const char *op_name = "dropout_mask";
    NEED(keep);
    IN(be)->ops->dropout_mask(IN(be), keep, r, first, n, p);
}

static void sim_fill_normal(struct mc_backend *be, enum mc_dtype dt, void *out, int64_t first,
                            int64_t n, uint64_t seed, uint32_t c2, uint32_t c3, float std)
{
    const char *op_name = "fill_normal";
    NEED(out);
    IN(be)->ops->fill_normal(IN(be), dt, out, first, n, seed, c2, c3, std);
}

static void sim_masked_loss(struct mc_backend *be, enum mc_dtype dt, double *sum, double *count,
                            const void *loss, const float *mask, int64_t n)
{
    const char *op_name = "masked_loss";
    NEED(loss);
    NEED(mask);
    IN(be)->ops->masked_loss(IN(be), dt, sum, count, loss, mask, n);
}

static void sim_masked_loss_bwd(struct mc_backend *be, float *dloss, const float *mask,
                                float scale, int64_t n)
{
    const char *op_name = "masked_loss_bwd";
    NEED(dloss);
    NEED(mask);
    IN(be)->ops->masked_loss_bwd(IN(be), dloss, mask, scale, n);
}

static const struct mc_backend_ops sim_ops = {
    .version = MC_BACKEND_VERSION,
    .name = "cpu-sim",
    .supports = sim_supports,
    .alloc = sim_alloc,
    .free = sim_free,
    .copy_to_backend = sim_copy_to_backend,
    .copy_to_host = sim_copy_to_host,
    .copy = sim_copy,
    .set = sim_set,
    .sync = sim_sync,
    .measure = sim_measure,
    .adopt = sim_adopt,
    .set_rounding = sim_set_rounding,
    .convert = sim_convert,
    .accumulate = sim_accumulate,
    .gemm = sim_gemm,
    .layernorm_fwd = sim_layernorm_fwd,
    .layernorm_bwd = sim_layernorm_bwd,
    .rmsnorm_fwd = sim_rmsnorm_fwd,
    .rmsnorm_bwd = sim_rmsnorm_bwd,
    .gelu_tanh_fwd = sim_gelu_tanh_fwd,
    .gelu_tanh_bwd = sim_gelu_tanh_bwd,
    .gelu_erf_fwd = sim_gelu_erf_fwd,
    .gelu_erf_bwd = sim_gelu_erf_bwd,
    .squared_relu_fwd = sim_squared_relu_fwd,
    .squared_relu_bwd = sim_squared_relu_bwd,
    .swiglu_fwd = sim_swiglu_fwd,
    .swiglu_bwd = sim_swiglu_bwd,
    .bias_grad = sim_bias_grad,
    .bias_dropout_add = sim_bias_dropout_add,
    .masked_softmax_fwd = sim_masked_softmax_fwd,
    .masked_softmax_bwd = sim_masked_softmax_bwd,
    .rope_fwd = sim_rope_fwd,
    .rope_bwd = sim_rope_bwd,
    .embedding_fwd = sim_embedding_fwd,
    .embedding_bwd = sim_embedding_bwd,
    .xent_max = sim_xent_max,
    .xent_sumexp = sim_xent_sumexp,
    .xent_bwd = sim_xent_bwd,
    .sumsq = sim_sumsq,
    .count_zeros = sim_count_zeros,
    .scale = sim_scale,
    .adamw = sim_adamw,
    .sgd = sim_sgd,
    .attention_fwd = sim_attention_fwd,
    .attention_bwd = sim_attention_bwd,
    .flash_attention_fwd = sim_flash_attention_fwd,
    .flash_attention_bwd = sim_flash_attention_bwd,
    .dropout_mask = sim_dropout_mask,
    .fill_normal = sim_fill_normal,
    .masked_loss = sim_masked_loss,
    .masked_loss_bwd = sim_masked_loss_bwd,
};

const struct mc_backend_ops *mc_sim_backend_ops(void) { return &sim_ops; }

mc_status mc_sim_backend_create(struct mc_backend **out)
{
    struct mc_backend *be = mc_calloc(1, sizeof(*be));
    struct sim_state *s = mc_calloc(1, sizeof(*s));
    mc_status st = be && s ? mc_cpu_backend_create(mc_cpu_kernels_ref(), &s->inner) : MC_ERR_NOMEM;
    if (st != MC_OK) {
        mc_free(s);
        mc_free(be);
        return st;
    }
    pthread_mutex_init(&s->lock, NULL);
    be->ops = &sim_ops;
    be->name = s->inner->name;
    be->n_threads = s->inner->n_threads;
    be->impl = s;
    *out = be;
    return MC_OK;
}

void mc_sim_backend_destroy(struct mc_backend *be)
{
    struct sim_state *s = S(be);
    mc_log(MC_LOG_INFO, "backend cpu-sim: %lld allocations (peak %.1f MiB, %lld still live), "
           "copy_to_backend %zu bytes, copy_to_host %zu bytes, copy %zu bytes",
           (long long)s->n_allocs, (double)s->peak_bytes / 1048576.0, (long long)s->n,
           s->to_backend, s->to_host, s->on_backend);
    for (int64_t i = 0; i < s->n; i++)
        mc_free((void *)s->blocks[i].base);
    free(s->blocks);
    pthread_mutex_destroy(&s->lock);
    mc_free(s->inner);
    mc_free(s);
    mc_free(be);
}
