/* MoELayer, mirrors transformer/moe/moe_layer.py: router -> token_permutation -> experts ->
 * token_unpermutation on the pre-MLP norm output, at expert- and tensor-parallel size 1 (the
 * allgather and alltoall dispatchers are then the same permutation). Returns no bias (the
 * layer's bias-dropout-add gets None, as from Megatron's dispatchers). Backward runs the same
 * graph in reverse: the experts' grads, the permutation's (a sum of each token's k rows), the
 * probabilities' grad through the router into its logits, then the router's linear. */
#include "transformer/moe/moe.h"

#include "core/dtype.h"

#include <string.h>

/* The router's dt logits [T, E] of the backend into the host fp32 ma->logits. */
static void logits_to_host(const struct mc_tfm_ctx *c, struct mc_moe_acts *ma)
{
    int64_t n = ma->T * c->d->E;
    if (c->dt == MC_DTYPE_F32) {
        c->be->ops->copy_to_host(c->be, ma->logits, c->scr->moe_logits, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = c->moe->logits_dt;
    c->be->ops->copy_to_host(c->be, h, c->scr->moe_logits, (size_t)n * sizeof(uint16_t));
    for (int64_t i = 0; i < n; i++)
        ma->logits[i] = c->dt == MC_DTYPE_BF16 ? mc_bf16_to_f32(h[i]) : mc_f16_to_f32(h[i]);
}

/* The host fp32 logits' grad into the backend's dt moe_logits. */
static void dlogits_to_backend(const struct mc_tfm_ctx *c, int64_t T)
{
    int64_t n = T * c->d->E;
    const float *g = c->moe->dlogits;
    if (c->dt == MC_DTYPE_F32) {
        c->be->ops->copy_to_backend(c->be, c->scr->moe_logits, g, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = c->moe->logits_dt;
    for (int64_t i = 0; i < n; i++)
        h[i] = c->dt == MC_DTYPE_BF16 ? mc_f32_to_bf16(g[i]) : mc_f32_to_f16(g[i]);
    c->be->ops->copy_to_backend(c->be, c->scr->moe_logits, h, (size_t)n * sizeof(uint16_t));
}

mc_status mc_moe_layer_forward(const struct mc_tfm_ctx *c, int64_t layer,
                               const struct mc_tfm_layer_weights *w, struct mc_tfm_layer_acts *a,
                               void *y, const void *ln)
{
    const struct mc_tfm_dims *d = c->d;
    struct mc_tfm_scratch *scr = c->scr;
    struct mc_moe_acts *ma = a->moe;
    mc_status st;
    ma->T = c->T;
    /* Router.gating: logits = linear(input, weight) in the input's dtype */
    if ((st = mc_tp_linear_col_forward(c->be, c->tp, scr->moe_logits, ln, w->router_w, NULL, c->T,
                                       d->h, d->E, NULL)) != MC_OK)
        return st;
    logits_to_host(c, ma);
    mc_moe_route(c, layer, ma, c->training);
    mc_moe_sort_rows(c, ma);
    mc_moe_permute(c, ma, scr->moe_x, ln);
    if ((st = mc_moe_experts_forward(c, w, ma, a->fc1, scr->moe_y, scr->moe_x)) != MC_OK)
        return st;
    mc_moe_unpermute(c, ma, y, scr->moe_y);
    return MC_OK;
}

mc_status mc_moe_layer_backward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                                const struct mc_tfm_layer_grads *g,
                                const struct mc_tfm_layer_acts *a, void *dln, const void *dy,
                                const void *ln)
{
    const struct mc_tfm_dims *d = c->d;
    struct mc_tfm_scratch *scr = c->scr;
    const struct mc_moe_acts *ma = a->moe;
    struct mc_moe_state *ms = c->moe;
    int64_t T = ma->T, k = d->topk, rows = T * k;
    mc_status st;
    /* the experts on the permuted rows of dy and of the input (permuted again: a copy) */
    mc_moe_permute(c, ma, scr->moe_y, dy);
    mc_moe_permute(c, ma, scr->moe_x, ln);
    if ((st = mc_moe_experts_backward(c, w, g, ma, a->fc1, scr->moe_x, ms->dot, scr->moe_y,
                                      scr->moe_x)) != MC_OK)
        return st;
    mc_moe_unpermute(c, ma, dln, scr->moe_x);
    /* the probabilities' grad in [T, k] order, through the router into its logits */
    for (int64_t r = 0; r < rows; r++)
        ms->dprob[(int64_t)ma->row_token[r] * k + ma->row_slot[r]] = ms->dot[r];
    mc_moe_route_backward(c, ma, ms->dprob, ms->dlogits);
    dlogits_to_backend(c, T);
    if ((st = mc_tp_linear_col_backward(c->be, c->tp, scr->moe_y, g->router_w, NULL, NULL,
                                        scr->moe_logits, ln, w->router_w, T, d->h, d->E,
                                        NULL)) != MC_OK)
        return st;
    c->be->ops->accumulate(c->be, dln, c->dt, scr->moe_y, c->dt, T * d->h);
    return MC_OK;
}
