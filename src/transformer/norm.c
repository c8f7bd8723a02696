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

void mc_tfm_norm_forward(const struct mc_tfm_ctx *c, void *y, float *mean, float *rstd,
                         const void *x, const void *w, const void *b)
{
    mc_tfm_norm_rows_forward(c, y, mean, rstd, x, w, b, c->T_sp, c->d->h);
}

void mc_tfm_norm_backward(const struct mc_tfm_ctx *c, void *dx, float *dw, float *db,
                          const void *dy, const void *x, const void *w, const float *mean,
                          const float *rstd)
{
    mc_tfm_norm_rows_backward(c, dx, dw, db, dy, x, w, mean, rstd, c->T_sp, c->d->h);
}
