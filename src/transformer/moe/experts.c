/* SequentialMLP, mirrors transformer/moe/experts.py: each local expert is an MLP
 * (transformer/mlp.py, is_expert) of width moe_ffn_hidden_size run on its own rows of the
 * permuted tokens, its activation output scaled per row by the routing probability before
 * linear_fc2 (MLP.forward's per_token_scale; weighted_bias_swiglu_impl with the SwiGLU
 * fusion: the same numbers in fp32). No biases (Megatron asserts there are none with
 * per_token_scale). --moe-grouped-gemm (GroupedMLP / TEGroupedMLP) computes the same
 * products in one call; here it is this loop. Expert e's weights: fc1 at
 * w->experts_w + e * mc_moe_expert_numel, fc2 after it (the state_dict order of
 * local_experts.e). */
#include "transformer/moe/moe.h"

/* expert e's first row in the permuted order, and its rows */
static int64_t expert_rows(const struct mc_moe_acts *ma, int64_t e, int64_t *first)
{
    int64_t off = 0;
    for (int64_t i = 0; i < e; i++)
        off += ma->count[i];
    *first = off;
    return ma->count[e];
}

static void act_forward(const struct mc_tfm_ctx *c, void *y, const void *u, int64_t n)
{
    struct mc_backend *be = c->be;
    int64_t w = c->d->moe_ffn_l;
    switch (c->cfg->activation) {
    case MC_ACT_GELU_TANH: be->ops->gelu_tanh_fwd(be, c->dt, y, u, NULL, n, w); break;
    case MC_ACT_GELU_ERF: be->ops->gelu_erf_fwd(be, c->dt, y, u, NULL, n, w); break;
    case MC_ACT_SQUARED_RELU: be->ops->squared_relu_fwd(be, c->dt, y, u, NULL, n, w); break;
    case MC_ACT_SWIGLU: be->ops->swiglu_fwd(be, c->dt, y, u, NULL, n, w); break;
    }
}

static void act_backward(const struct mc_tfm_ctx *c, void *du, const void *dy, const void *u,
                         int64_t n)
{
    struct mc_backend *be = c->be;
    int64_t w = c->d->moe_ffn_l;
    switch (c->cfg->activation) {
    case MC_ACT_GELU_TANH: be->ops->gelu_tanh_bwd(be, c->dt, du, dy, u, NULL, n, w); break;
    case MC_ACT_GELU_ERF: be->ops->gelu_erf_bwd(be, c->dt, du, dy, u, NULL, n, w); break;
    case MC_ACT_SQUARED_RELU: be->ops->squared_relu_bwd(be, c->dt, du, dy, u, NULL, n, w); break;
    case MC_ACT_SWIGLU: be->ops->swiglu_bwd(be, c->dt, du, dy, u, NULL, n, w); break;
    }
}

/* rows [first, first + n) of x [*, width] times their routing probability */
static void scale_rows(const struct mc_tfm_ctx *c, const struct mc_moe_acts *ma, void *x,
                       int64_t first, int64_t n, int64_t width)
{
    size_t row = (size_t)width * mc_dtype_size(c->dt);
    int64_t k = c->cfg->moe_router_topk;
    for (int64_t r = first; r < first + n; r++) {
        float p = ma->prob[(int64_t)ma->row_token[r] * k + ma->row_slot[r]];
        c->be->ops->scale(c->be, c->dt, (char *)x + (size_t)(r - first) * row, p, width);
    }
}

#define AT(p, rows, width) ((char *)(p) + (size_t)(rows) * (size_t)(width) * es)

mc_status mc_moe_experts_forward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                                 const struct mc_moe_acts *ma, void *fc1, void *yp,
                                 const void *xp)
{
    const struct mc_tfm_dims *d = c->d;
    size_t es = mc_dtype_size(c->dt);
    void *act = c->scr->act;
    mc_status st;
    for (int64_t e = 0; e < d->E; e++) {
        int64_t first, n = expert_rows(ma, e, &first);
        if (n == 0)
            continue;
        const char *w1 = AT(w->experts_w, e, mc_moe_expert_numel(d));
        const char *w2 = w1 + (size_t)(d->moe_fc1_l * d->h) * es;
        void *f = AT(fc1, first, d->moe_fc1_l);
        if ((st = mc_tp_linear_col_forward(c->be, c->tp, f, AT(xp, first, d->h), w1, NULL, n,
                                           d->h, d->moe_fc1_l, NULL)) != MC_OK)
            return st;
        act_forward(c, act, f, n);
        scale_rows(c, ma, act, first, n, d->moe_ffn_l);
        if ((st = mc_tp_linear_row_forward(c->be, c->tp, AT(yp, first, d->h), act, w2, n,
                                           d->moe_ffn_l, d->h, NULL)) != MC_OK)
            return st;
    }
    return MC_OK;
}

mc_status mc_moe_experts_backward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                                  const struct mc_tfm_layer_grads *g,
                                  const struct mc_moe_acts *ma, const void *fc1, void *dxp,
                                  float *dprob_row, const void *dyp, const void *xp)
{
    const struct mc_tfm_dims *d = c->d;
    struct mc_backend *be = c->be;
    size_t es = mc_dtype_size(c->dt);
    void *act = c->scr->act, *dact = c->scr->dact, *dfc1 = c->scr->dfc1;
    int64_t F = d->moe_ffn_l;
    mc_status st;
    for (int64_t e = 0; e < d->E; e++) {
        int64_t first, n = expert_rows(ma, e, &first);
        if (n == 0)
            continue;
        int64_t stride = mc_moe_expert_numel(d);
        const char *w1 = AT(w->experts_w, e, stride);
        const char *w2 = w1 + (size_t)(d->moe_fc1_l * d->h) * es;
        float *g1 = g->experts_w + e * stride, *g2 = g1 + d->moe_fc1_l * d->h;
        const void *f = AT(fc1, first, d->moe_fc1_l);
        const void *dy = AT(dyp, first, d->h);
        /* linear_fc2 on the scaled activation (recomputed: elementwise, the same bits) */
        act_forward(c, act, f, n);
        scale_rows(c, ma, act, first, n, F);
        if ((st = mc_tp_linear_row_backward(be, c->tp, dact, g2, dy, act, w2, n, F, d->h,
                                            NULL)) != MC_OK)
            return st;
        /* per_token_scale: d prob = <act, d scaled>, d act = prob * d scaled */
        act_forward(c, act, f, n);
        for (int64_t r = 0; r < n; r++)
            be->ops->gemm(be, false, true, 1, 1, F, 1.0f, AT(act, r, F), c->dt, F,
                          AT(dact, r, F), c->dt, F, 0.0f, c->scr->moe_dot + first + r,
                          MC_DTYPE_F32, 1, MC_DTYPE_F32);
        scale_rows(c, ma, dact, first, n, F);
        act_backward(c, dfc1, dact, f, n);
        if ((st = mc_tp_linear_col_backward(be, c->tp, AT(dxp, first, d->h), g1, NULL, NULL,
                                            dfc1, AT(xp, first, d->h), w1, n, d->h,
                                            d->moe_fc1_l, NULL)) != MC_OK)
            return st;
    }
    be->ops->copy_to_host(be, dprob_row, c->scr->moe_dot, (size_t)(ma->T * c->cfg->moe_router_topk) *
                          sizeof(float));
    return MC_OK;
}
#undef AT
