/* The CPU backend: the ops of backend.h on host memory, each bound to the kernel of the same
 * name in the instance's kernel table (the references, or the AVX-512 kernels chosen by
 * select.c). It implements fp32 and says so through supports(); an op called with another
 * dtype stops the process naming the op. Buffers are host memory from mc_alloc; the copies
 * are memcpy and sync has nothing to wait for (every op has returned when its call does). */
#include "backend/cpu/cpu_backend.h"

#include "core/rng.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define K(be) mc_cpu_kernels_of(be)

void mc_cpu_need_f32(enum mc_dtype dt, const char *op)
{
    if (dt == MC_DTYPE_F32)
        return;
    mc_log(MC_LOG_ERROR, "backend cpu: op %s is implemented for float32 only, not %s "
           "(ask supports() first)", op, mc_dtype_name(dt));
    abort();
}

static bool is_float_dt(enum mc_dtype t)
{
    return t == MC_DTYPE_F32 || t == MC_DTYPE_BF16 || t == MC_DTYPE_F16;
}

/* The dtype list each op takes (enum mc_backend_op) and what the CPU backend implements. */
static bool cpu_supports(const struct mc_backend *be, enum mc_backend_op op,
                         const enum mc_dtype *dtypes, int n)
{
    (void)be;
    int want = op == MC_OP_BUFFER ? 0 : op == MC_OP_GEMM ? 4
               : op == MC_OP_ADAMW || op == MC_OP_SGD || op == MC_OP_CONVERT ||
                       op == MC_OP_ACCUMULATE ? 2 : 1;
    if ((int)op < 0 || op >= MC_OP_COUNT || n != want)
        return false;
    if (op == MC_OP_CONVERT || op == MC_OP_ACCUMULATE)
        return is_float_dt(dtypes[0]) && is_float_dt(dtypes[1]);
    enum mc_dtype native = op == MC_OP_DROPOUT_MASK ? MC_DTYPE_U8 : MC_DTYPE_F32;
    for (int i = 0; i < n; i++)
        if (dtypes[i] != native)
            return false;
    return true;
}

/* Stops the process when convert/accumulate get a dtype other than F32, BF16, F16. */
static void need_float(enum mc_dtype dt, const char *op)
{
    if (is_float_dt(dt))
        return;
    mc_log(MC_LOG_ERROR, "backend cpu: op %s takes float32, bfloat16 or float16, not %s", op,
           mc_dtype_name(dt));
    abort();
}

/* ---- buffers: host memory --------------------------------------------------------------- */

static void *cpu_alloc(struct mc_backend *be, size_t bytes)
{
    (void)be;
    return mc_alloc(bytes);
}

static void cpu_free(struct mc_backend *be, void *p)
{
    (void)be;
    mc_free(p);
}

static void cpu_copy(struct mc_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_set(struct mc_backend *be, void *dst, int byte, size_t bytes)
{
    (void)be;
    if (bytes)
        memset(dst, byte, bytes);
}

static void cpu_sync(struct mc_backend *be) { (void)be; }

/* ---- dtype conversion ---------------------------------------------------------------------- */

static void cpu_convert(struct mc_backend *be, void *dst, enum mc_dtype dst_dt, const void *src,
                        enum mc_dtype src_dt, int64_t n)
{
    need_float(dst_dt, "convert (dst)");
    need_float(src_dt, "convert (src)");
    K(be)->convert(dst, dst_dt, src, src_dt, n);
}

static void cpu_accumulate(struct mc_backend *be, void *dst, enum mc_dtype dst_dt,
                           const void *src, enum mc_dtype src_dt, int64_t n)
{
    need_float(dst_dt, "accumulate (dst)");
    need_float(src_dt, "accumulate (src)");
    K(be)->accumulate(dst, dst_dt, src, src_dt, n);
}

/* ---- ops: the kernel table, fp32 ---------------------------------------------------------- */

static void cpu_gemm(struct mc_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K_,
                     float alpha, const void *A, enum mc_dtype a_dt, int64_t lda, const void *B,
                     enum mc_dtype b_dt, int64_t ldb, float beta, void *C, enum mc_dtype c_dt,
                     int64_t ldc, enum mc_dtype compute)
{
    mc_cpu_need_f32(a_dt, "gemm (A)");
    mc_cpu_need_f32(b_dt, "gemm (B)");
    mc_cpu_need_f32(c_dt, "gemm (C)");
    mc_cpu_need_f32(compute, "gemm (compute type)");
    K(be)->gemm(ta, tb, M, N, K_, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void cpu_layernorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *mean,
                              float *rstd, const void *x, const void *w, const void *b,
                              int64_t rows, int64_t h, float eps)
{
    mc_cpu_need_f32(dt, "layernorm_fwd");
    K(be)->layernorm_fwd(y, mean, rstd, x, w, b, rows, h, eps);
}

static void cpu_layernorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                              void *db, const void *dy, const void *x, const void *w,
                              const float *mean, const float *rstd, int64_t rows, int64_t h)
{
    mc_cpu_need_f32(dt, "layernorm_bwd");
    K(be)->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, rows, h);
}

static void cpu_rmsnorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *rstd,
                            const void *x, const void *w, int64_t rows, int64_t h, float eps)
{
    mc_cpu_need_f32(dt, "rmsnorm_fwd");
    K(be)->rmsnorm_fwd(y, rstd, x, w, rows, h, eps);
}

static void cpu_rmsnorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                            const void *dy, const void *x, const void *w, const float *rstd,
                            int64_t rows, int64_t h)
{
    mc_cpu_need_f32(dt, "rmsnorm_bwd");
    K(be)->rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, h);
}

/* The activations share one shape: forward (y, x, bias), backward (dx, dy, x, bias). */
#define CPU_ACTIVATION(op)                                                                    \
    static void cpu_##op##_fwd(struct mc_backend *be, enum mc_dtype dt, void *y,              \
                               const void *x, const void *bias, int64_t rows, int64_t cols)   \
    {                                                                                         \
        mc_cpu_need_f32(dt, #op "_fwd");                                                      \
        K(be)->op##_fwd(y, x, bias, rows, cols);                                              \
    }                                                                                         \
    static void cpu_##op##_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx,             \
                               const void *dy, const void *x, const void *bias, int64_t rows, \
                               int64_t cols)                                                  \
    {                                                                                         \
        mc_cpu_need_f32(dt, #op "_bwd");                                                      \
        K(be)->op##_bwd(dx, dy, x, bias, rows, cols);                                         \
    }
CPU_ACTIVATION(gelu_tanh)
CPU_ACTIVATION(gelu_erf)
CPU_ACTIVATION(squared_relu)
CPU_ACTIVATION(swiglu)

static void cpu_bias_grad(struct mc_backend *be, enum mc_dtype dt, void *db, const void *dy,
                          int64_t rows, int64_t cols)
{
    mc_cpu_need_f32(dt, "bias_grad");
    K(be)->bias_grad(db, dy, rows, cols);
}

static void cpu_bias_dropout_add(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                                 const void *bias, const void *residual,
                                 const uint8_t *keep_mask, float scale, int64_t rows,
                                 int64_t cols)
{
    mc_cpu_need_f32(dt, "bias_dropout_add");
    K(be)->bias_dropout_add(y, x, bias, residual, keep_mask, scale, rows, cols);
}

static void cpu_masked_softmax_fwd(struct mc_backend *be, enum mc_dtype dt, void *p, int64_t bh,
                                   int64_t sq, int64_t sk, float mult, const uint8_t *mask)
{
    mc_cpu_need_f32(dt, "masked_softmax_fwd");
    K(be)->masked_softmax_fwd(p, bh, sq, sk, mult, mask);
}

static void cpu_masked_softmax_bwd(struct mc_backend *be, enum mc_dtype dt, void *dp,
                                   const void *p, int64_t bh, int64_t sq, int64_t sk, float mult)
{
    mc_cpu_need_f32(dt, "masked_softmax_bwd");
    K(be)->masked_softmax_bwd(dp, p, bh, sq, sk, mult);
}

static void cpu_rope_fwd(struct mc_backend *be, enum mc_dtype dt, void *t, const float *cos,
                         const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                         bool interleaved)
{
    mc_cpu_need_f32(dt, "rope_fwd");
    K(be)->rope_fwd(t, cos, sin, s, bh, hn, rot_dim, interleaved);
}

static void cpu_rope_bwd(struct mc_backend *be, enum mc_dtype dt, void *dgrad, const float *cos,
                         const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                         bool interleaved)
{
    mc_cpu_need_f32(dt, "rope_bwd");
    K(be)->rope_bwd(dgrad, cos, sin, s, bh, hn, rot_dim, interleaved);
}

static void cpu_embedding_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, const void *w,
                              const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                              int64_t vocab_local)
{
    mc_cpu_need_f32(dt, "embedding_fwd");
    K(be)->embedding_fwd(y, w, ids, n, h, vocab_start, vocab_local);
}

static void cpu_embedding_bwd(struct mc_backend *be, enum mc_dtype dt, void *dw, const void *dy,
                              const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                              int64_t vocab_local)
{
    mc_cpu_need_f32(dt, "embedding_bwd");
    K(be)->embedding_bwd(dw, dy, ids, n, h, vocab_start, vocab_local);
}

static void cpu_xent_max(struct mc_backend *be, enum mc_dtype dt, float *max_local,
                         const void *logits, int64_t n, int64_t v)
{
    mc_cpu_need_f32(dt, "xent_max");
    K(be)->xent_max(max_local, logits, n, v);
}

static void cpu_xent_sumexp(struct mc_backend *be, enum mc_dtype dt, float *sumexp_local,
                            float *target_logit, const void *logits, const float *max,
                            const int64_t *target, int64_t n, int64_t v, int64_t v_start)
{
    mc_cpu_need_f32(dt, "xent_sumexp");
    K(be)->xent_sumexp(sumexp_local, target_logit, logits, max, target, n, v, v_start);
}

static void cpu_xent_bwd(struct mc_backend *be, enum mc_dtype dt, void *dlogits,
                         const void *logits, const float *max, const float *sumexp,
                         const int64_t *target, const float *dloss, int64_t n, int64_t v,
                         int64_t v_start)
{
    mc_cpu_need_f32(dt, "xent_bwd");
    K(be)->xent_bwd(dlogits, logits, max, sumexp, target, dloss, n, v, v_start);
}

static double cpu_sumsq(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    mc_cpu_need_f32(dt, "sumsq");
    return K(be)->sumsq(x, n);
}

static int64_t cpu_count_zeros(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    mc_cpu_need_f32(dt, "count_zeros");
    return K(be)->count_zeros(x, n);
}

static void cpu_scale(struct mc_backend *be, enum mc_dtype dt, void *x, float s, int64_t n)
{
    mc_cpu_need_f32(dt, "scale");
    K(be)->scale(x, s, n);
}

static void cpu_adamw(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                      float *m, float *v, const void *g, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, int64_t t)
{
    mc_cpu_need_f32(p_dt, "adamw (param)");
    mc_cpu_need_f32(g_dt, "adamw (grad)");
    K(be)->adamw(p, m, v, g, n, lr, b1, b2, eps, wd, t);
}

static void cpu_sgd(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                    float *buf, const void *g, int64_t n, float lr, float momentum, float wd,
                    bool first_step)
{
    mc_cpu_need_f32(p_dt, "sgd (param)");
    mc_cpu_need_f32(g_dt, "sgd (grad)");
    K(be)->sgd(p, buf, g, n, lr, momentum, wd, first_step);
}

static void cpu_dropout_mask(struct mc_backend *be, uint8_t *keep,
                             const struct mc_dropout_stream *r, int64_t first, int64_t n, float p)
{
    (void)be;
    mc_rng_dropout_mask(keep, first, n, r->seed, r->c1_hi, r->c2, r->c3, p);
}

static void cpu_fill_normal(struct mc_backend *be, enum mc_dtype dt, void *out, int64_t first,
                            int64_t n, uint64_t seed, uint32_t c2, uint32_t c3, float std)
{
    (void)be;
    mc_cpu_need_f32(dt, "fill_normal");
    mc_rng_normal_fill(out, first, n, seed, c2, c3, std);
}

static void cpu_masked_loss(struct mc_backend *be, enum mc_dtype dt, double *sum, double *count,
                            const void *loss_, const float *mask, int64_t n)
{
    (void)be;
    mc_cpu_need_f32(dt, "masked_loss");
    const float *loss = loss_;
    double s = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)loss[i] * mask[i];
        d += mask[i];
    }
    *sum = s;
    *count = d;
}

static void cpu_masked_loss_bwd(struct mc_backend *be, float *dloss, const float *mask,
                                float scale, int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        dloss[i] = mask[i] * scale;
}

static const struct mc_backend_ops cpu_ops = {
    .version = MC_BACKEND_VERSION,
    .name = "cpu",
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_backend = cpu_copy,
    .copy_to_host = cpu_copy,
    .copy = cpu_copy,
    .set = cpu_set,
    .sync = cpu_sync,
    .convert = cpu_convert,
    .accumulate = cpu_accumulate,
    .gemm = cpu_gemm,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .gelu_tanh_fwd = cpu_gelu_tanh_fwd,
    .gelu_tanh_bwd = cpu_gelu_tanh_bwd,
    .gelu_erf_fwd = cpu_gelu_erf_fwd,
    .gelu_erf_bwd = cpu_gelu_erf_bwd,
    .squared_relu_fwd = cpu_squared_relu_fwd,
    .squared_relu_bwd = cpu_squared_relu_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .bias_grad = cpu_bias_grad,
    .bias_dropout_add = cpu_bias_dropout_add,
    .masked_softmax_fwd = cpu_masked_softmax_fwd,
    .masked_softmax_bwd = cpu_masked_softmax_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .xent_max = cpu_xent_max,
    .xent_sumexp = cpu_xent_sumexp,
    .xent_bwd = cpu_xent_bwd,
    .sumsq = cpu_sumsq,
    .count_zeros = cpu_count_zeros,
    .scale = cpu_scale,
    .adamw = cpu_adamw,
    .sgd = cpu_sgd,
    .attention_fwd = mc_cpu_attention_fwd,
    .attention_bwd = mc_cpu_attention_bwd,
    .dropout_mask = cpu_dropout_mask,
    .fill_normal = cpu_fill_normal,
    .masked_loss = cpu_masked_loss,
    .masked_loss_bwd = cpu_masked_loss_bwd,
};

const struct mc_backend_ops *mc_cpu_backend_ops(void) { return &cpu_ops; }

mc_status mc_cpu_backend_create(const struct mc_cpu_kernels *k, struct mc_backend **out)
{
    MC_ASSERT(k && k->version == MC_CPU_KERNELS_VERSION);
    struct mc_backend *be = mc_calloc(1, sizeof(*be));
    if (!be)
        return MC_ERR_NOMEM;
    be->ops = &cpu_ops;
    be->name = k->name;
    be->impl = (void *)k;
#ifdef _OPENMP
    be->n_threads = omp_get_max_threads();
#else
    be->n_threads = 1;
#endif
    *out = be;
    return MC_OK;
}
