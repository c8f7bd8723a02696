/* The norm of the local spec, chosen by --normalization: torch LayerNorm (Megatron's
 * WrappedTorchNorm / FusedLayerNorm) or RMSNorm, through the backend kernels. Norms sit outside
 * the tensor-parallel regions, so they see the T_sp rows of this rank's sequence shard. With
 * --apply-layernorm-1p the weight is stored zero-centered (TENorm / FusedLayerNorm's
 * zero_centered_gamma). */
#include "transformer/transformer.h"

/* --apply-layernorm-1p (layernorm_zero_centered_gamma): the norm scales by weight + 1, as
 * FusedLayerNorm / TENorm compute it in fp32. The kernels get that sum; its grad is the
 * stored weight's, so backward accumulates into dw unchanged. */
static const float *gamma_of(const struct mc_tfm_ctx *c, const float *w)
{
    if (!c->cfg->layernorm_zero_centered_gamma)
        return w;
    float *g = c->scr->gamma1;
    for (int64_t i = 0; i < c->d->h; i++)
        g[i] = w[i] + 1.0f;
    return g;
}

void mc_tfm_norm_forward(const struct mc_tfm_ctx *c, float *y, float *mean, float *rstd,
                         const float *x, const float *w, const float *b)
{
    float eps = c->cfg->norm_epsilon;
    w = gamma_of(c, w);
    if (c->d->layernorm)
        c->be->ops->layernorm_fwd(c->be, MC_DTYPE_F32, y, mean, rstd, x, w, b, c->T_sp, c->d->h,
                                  eps);
    else
        c->be->ops->rmsnorm_fwd(c->be, MC_DTYPE_F32, y, rstd, x, w, c->T_sp, c->d->h, eps);
}

void mc_tfm_norm_backward(const struct mc_tfm_ctx *c, float *dx, float *dw, float *db,
                          const float *dy, const float *x, const float *w, const float *mean,
                          const float *rstd)
{
    w = gamma_of(c, w);
    if (c->d->layernorm)
        c->be->ops->layernorm_bwd(c->be, MC_DTYPE_F32, dx, dw, db, dy, x, w, mean, rstd, c->T_sp,
                                  c->d->h);
    else
        c->be->ops->rmsnorm_bwd(c->be, MC_DTYPE_F32, dx, dw, dy, x, w, rstd, c->T_sp, c->d->h);
}
