/* The norm of the local spec, chosen by --normalization: torch LayerNorm (Megatron's
 * WrappedTorchNorm / FusedLayerNorm) or RMSNorm, through the backend kernels. Norms sit outside
 * the tensor-parallel regions, so they see the T_sp rows of this rank's sequence shard. */
#include "transformer/transformer.h"

void mc_tfm_norm_forward(const struct mc_tfm_ctx *c, float *y, float *mean, float *rstd,
                         const float *x, const float *w, const float *b)
{
    float eps = c->cfg->norm_epsilon;
    if (c->d->layernorm)
        c->be->layernorm_fwd(y, mean, rstd, x, w, b, c->T_sp, c->d->h, eps);
    else
        c->be->rmsnorm_fwd(y, rstd, x, w, c->T_sp, c->d->h, eps);
}

void mc_tfm_norm_backward(const struct mc_tfm_ctx *c, float *dx, float *dw, float *db,
                          const float *dy, const float *x, const float *w, const float *mean,
                          const float *rstd)
{
    if (c->d->layernorm)
        c->be->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, c->T_sp, c->d->h);
    else
        c->be->rmsnorm_bwd(dx, dw, dy, x, w, rstd, c->T_sp, c->d->h);
}
