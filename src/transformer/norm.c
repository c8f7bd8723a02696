/* The norm of the local spec, chosen by --normalization: torch LayerNorm (Megatron's
 * WrappedTorchNorm / FusedLayerNorm) or RMSNorm, through the backend kernels. Norms sit outside
 * the tensor-parallel regions, so they see the T_sp rows of this rank's sequence shard. With
 * --apply-layernorm-1p the weight is stored zero-centered (TENorm / FusedLayerNorm's
 * zero_centered_gamma). In 16 bits the kernels compute in fp32 and round the output (and the
 * input grad) once; the weight grads are made in dt (the wgrad temporary: weight at element
 * 0, bias at element h) and added to the fp32 main grads. */
#include "transformer/transformer.h"

#include "core/dtype.h"

/* --apply-layernorm-1p (layernorm_zero_centered_gamma): the norm scales by weight + 1, as
 * FusedLayerNorm / TENorm compute it in fp32. The kernels get that sum (rounded to dt, the
 * dtype they read weights in); its grad is the stored weight's, so backward accumulates into
 * dw unchanged. */
static const void *gamma_of(const struct mc_tfm_ctx *c, const void *w, int64_t h)
{
    if (!c->cfg->layernorm_zero_centered_gamma)
        return w;
    if (c->dt == MC_DTYPE_F32) {
        float *g = c->scr->gamma1;
        const float *wf = w;
        for (int64_t i = 0; i < h; i++)
            g[i] = wf[i] + 1.0f;
        return g;
    }
    uint16_t *g = c->scr->gamma1;
    const uint16_t *w16 = w;
    for (int64_t i = 0; i < h; i++) {
        float v = (c->dt == MC_DTYPE_BF16 ? mc_bf16_to_f32(w16[i]) : mc_f16_to_f32(w16[i])) + 1.0f;
        g[i] = c->dt == MC_DTYPE_BF16 ? mc_f32_to_bf16(v) : mc_f32_to_f16(v);
    }
    return g;
}

void mc_tfm_norm_rows_forward(const struct mc_tfm_ctx *c, void *y, float *mean, float *rstd,
                              const void *x, const void *w, const void *b, int64_t rows,
                              int64_t n)
{
    float eps = c->cfg->norm_epsilon;
    w = gamma_of(c, w, n);
    if (c->d->layernorm)
        c->be->ops->layernorm_fwd(c->be, c->dt, y, mean, rstd, x, w, b, rows, n, eps);
    else
        c->be->ops->rmsnorm_fwd(c->be, c->dt, y, rstd, x, w, rows, n, eps);
}

void mc_tfm_norm_rows_backward(const struct mc_tfm_ctx *c, void *dx, float *dw, float *db,
                               const void *dy, const void *x, const void *w, const float *mean,
                               const float *rstd, int64_t rows, int64_t n)
{
    void *tw = mc_tp_wgrad_target(c->tp, dw, 0, n, true);
    void *tb = db ? mc_tp_wgrad_target(c->tp, db, n, n, true) : NULL;
    w = gamma_of(c, w, n);
    if (c->d->layernorm)
        c->be->ops->layernorm_bwd(c->be, c->dt, dx, tw, tb, dy, x, w, mean, rstd, rows, n);
    else
        c->be->ops->rmsnorm_bwd(c->be, c->dt, dx, tw, dy, x, w, rstd, rows, n);
    mc_tp_wgrad_commit(c->tp, dw, 0, n);
    if (db)
        mc_tp_wgrad_commit(c->tp, db, n, n);
}

/* --fp32-residual-connection: the weights as fp32 (exact), into the scratch's h-sized fp32
 * buffers. */
static void weights_f32(const struct mc_tfm_ctx *c, float *w32, float *b32, const void *w,
                        const void *b)
{
    int64_t h = c->d->h;
    c->be->ops->convert(c->be, w32, MC_DTYPE_F32, gamma_of(c, w, h), c->dt, h);
    if (b)
        c->be->ops->convert(c->be, b32, MC_DTYPE_F32, b, c->dt, h);
}

/* The norms of the hidden states read the residual stream (c->rdt). With an fp32 stream and
 * 16-bit weights (--fp32-residual-connection) the norm is the fp32 one on the fp32 input with
 * the weights widened, its output rounded once to dt: what apex's mixed-dtype fused norm
 * (FastLayerNorm: output in the weight dtype) and TE's norms compute. */
void mc_tfm_norm_forward(const struct mc_tfm_ctx *c, void *y, float *mean, float *rstd,
                         const void *x, const void *w, const void *b)
{
    if (c->rdt == c->dt) {
        mc_tfm_norm_rows_forward(c, y, mean, rstd, x, w, b, c->T_sp, c->d->h);
        return;
    }
    struct mc_tfm_scratch *scr = c->scr;
    int64_t rows = c->T_sp, h = c->d->h;
    float eps = c->cfg->norm_epsilon;
    weights_f32(c, scr->w32, scr->b32, w, b);
    if (c->d->layernorm)
        c->be->ops->layernorm_fwd(c->be, MC_DTYPE_F32, scr->r32a, mean, rstd, x, scr->w32,
                                  b ? scr->b32 : NULL, rows, h, eps);
    else
        c->be->ops->rmsnorm_fwd(c->be, MC_DTYPE_F32, scr->r32a, rstd, x, scr->w32, rows, h, eps);
    c->be->ops->convert(c->be, y, c->dt, scr->r32a, MC_DTYPE_F32, rows * h);
}

/* dx in c->rdt. With the fp32 stream: dy (the 16-bit GEMM input's grad) widened, the fp32
 * backward, dx kept in fp32; the weight grads summed in fp32 and rounded once to dt (the
 * grad of the widened weight is the 16-bit param.grad), then added to the main grads. */
void mc_tfm_norm_backward(const struct mc_tfm_ctx *c, void *dx, float *dw, float *db,
                          const void *dy, const void *x, const void *w, const float *mean,
                          const float *rstd)
{
    if (c->rdt == c->dt) {
        mc_tfm_norm_rows_backward(c, dx, dw, db, dy, x, w, mean, rstd, c->T_sp, c->d->h);
        return;
    }
    struct mc_tfm_scratch *scr = c->scr;
    struct mc_backend *be = c->be;
    int64_t rows = c->T_sp, h = c->d->h;
    weights_f32(c, scr->w32, scr->b32, w, NULL);
    be->ops->convert(be, scr->r32a, MC_DTYPE_F32, dy, c->dt, rows * h);
    be->ops->set(be, scr->dw32, 0, (size_t)(2 * h) * sizeof(float)); /* dw32, db32 */
    if (c->d->layernorm)
        be->ops->layernorm_bwd(be, MC_DTYPE_F32, dx, scr->dw32, db ? scr->db32 : NULL,
                               scr->r32a, x, scr->w32, mean, rstd, rows, h);
    else
        be->ops->rmsnorm_bwd(be, MC_DTYPE_F32, dx, scr->dw32, scr->r32a, x, scr->w32, rstd,
                             rows, h);
    be->ops->convert(be, mc_tp_wgrad_target(c->tp, dw, 0, h, false), c->dt, scr->dw32,
                     MC_DTYPE_F32, h);
    mc_tp_wgrad_commit(c->tp, dw, 0, h);
    if (db) {
        be->ops->convert(be, mc_tp_wgrad_target(c->tp, db, h, h, false), c->dt, scr->db32,
                         MC_DTYPE_F32, h);
        mc_tp_wgrad_commit(c->tp, db, h, h);
    }
}
