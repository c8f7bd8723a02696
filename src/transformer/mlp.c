/* The MLP activation with the fc1 bias fused in, mirrors transformer/mlp.py with
 * fusions/fused_bias_gelu.py (default), F.gelu (--no-bias-gelu-fusion or
 * --disable-bias-linear), squared ReLU and SwiGLU (fused_bias_swiglu.py). The two linears are
 * the column/row-parallel layers called from transformer_layer.c. */
#include "transformer/transformer.h"

void mc_tfm_mlp_act_forward(const struct mc_tfm_ctx *c, float *y, const float *u,
                            const float *bias)
{
    const struct mc_tfm_dims *d = c->d;
    switch (c->cfg->activation) {
    case MC_ACT_GELU_TANH: c->be->gelu_tanh_fwd(y, u, bias, c->T, d->ffn_l); break;
    case MC_ACT_GELU_ERF: c->be->gelu_erf_fwd(y, u, bias, c->T, d->ffn_l); break;
    case MC_ACT_SQUARED_RELU: c->be->squared_relu_fwd(y, u, bias, c->T, d->ffn_l); break;
    case MC_ACT_SWIGLU: c->be->swiglu_fwd(y, u, bias, c->T, d->ffn_l); break;
    }
}

void mc_tfm_mlp_act_backward(const struct mc_tfm_ctx *c, float *du, const float *dy,
                             const float *u, const float *bias)
{
    const struct mc_tfm_dims *d = c->d;
    switch (c->cfg->activation) {
    case MC_ACT_GELU_TANH: c->be->gelu_tanh_bwd(du, dy, u, bias, c->T, d->ffn_l); break;
    case MC_ACT_GELU_ERF: c->be->gelu_erf_bwd(du, dy, u, bias, c->T, d->ffn_l); break;
    case MC_ACT_SQUARED_RELU: c->be->squared_relu_bwd(du, dy, u, bias, c->T, d->ffn_l); break;
    case MC_ACT_SWIGLU: c->be->swiglu_bwd(du, dy, u, bias, c->T, d->ffn_l); break;
    }
}
