/* The MLP activation with the fc1 bias fused in, mirrors transformer/mlp.py with
 * fusions/fused_bias_gelu.py (default), F.gelu (--no-bias-gelu-fusion or
 * --disable-bias-linear), squared ReLU and SwiGLU (fused_bias_swiglu.py). The two linears are
 * the column/row-parallel layers called from transformer_layer.c. In 16 bits the fused
 * bias-activation reads dt, computes x + bias and the activation in fp32 and rounds once
 * (Megatron's TorchScript bias_gelu / bias_swiglu round after each torch op on a CPU: an
 * approximation of the rounding points, docs/engine.md). */
#include "transformer/transformer.h"

void mc_tfm_mlp_act_forward(const struct mc_tfm_ctx *c, void *y, const void *u,
                            const void *bias)
{
    struct mc_backend *be = c->be;
    const enum mc_dtype dt = c->dt;
    int64_t T = c->T, n = c->d->ffn_l;
    switch (c->cfg->activation) {
    case MC_ACT_GELU_TANH: be->ops->gelu_tanh_fwd(be, dt, y, u, bias, T, n); break;
    case MC_ACT_GELU_ERF: be->ops->gelu_erf_fwd(be, dt, y, u, bias, T, n); break;
    case MC_ACT_SQUARED_RELU: be->ops->squared_relu_fwd(be, dt, y, u, bias, T, n); break;
    case MC_ACT_SWIGLU: be->ops->swiglu_fwd(be, dt, y, u, bias, T, n); break;
    }
}

void mc_tfm_mlp_act_backward(const struct mc_tfm_ctx *c, void *du, const void *dy,
                             const void *u, const void *bias)
{
    struct mc_backend *be = c->be;
    const enum mc_dtype dt = c->dt;
    int64_t T = c->T, n = c->d->ffn_l;
    switch (c->cfg->activation) {
    case MC_ACT_GELU_TANH: be->ops->gelu_tanh_bwd(be, dt, du, dy, u, bias, T, n); break;
    case MC_ACT_GELU_ERF: be->ops->gelu_erf_bwd(be, dt, du, dy, u, bias, T, n); break;
    case MC_ACT_SQUARED_RELU: be->ops->squared_relu_bwd(be, dt, du, dy, u, bias, T, n); break;
    case MC_ACT_SWIGLU: be->ops->swiglu_bwd(be, dt, du, dy, u, bias, T, n); break;
    }
}
