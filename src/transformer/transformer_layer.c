/* One pre-norm transformer layer of the local spec, mirrors transformer/transformer_layer.py
 * with attention.py (SelfAttention) and mlp.py:
 *   x_mid = x + dropout(linear_proj(attn(linear_qkv(norm1(x)))) + proj_bias)
 *   x_out = x_mid + dropout(linear_fc2(act(linear_fc1(norm2(x_mid)) + fc1_bias)) + fc2_bias)
 * Hidden-dropout keep masks are drawn from the Philox streams of rng.h and kept for backward.
 * With sequence parallelism (Megatron's placement) everything outside the linears' TP regions
 * runs on this rank's sequence shard; the linears gather / reduce-scatter (layers.c).
 * In 16 bits every op reads and writes dt and rounds its output once: the fused
 * bias-dropout-add (and the fused bias-activation, mlp.c) compute in fp32 with ONE rounding
 * where Megatron's TorchScript functions round after each torch op (docs/engine.md). */
#include "transformer/transformer.h"

#include "core/dtype.h"
#include "transformer/moe/moe.h"

float mc_tfm_dropout_scale(enum mc_dtype dt, float p)
{
    float s = 1.0f / (1.0f - p);
    if (dt == MC_DTYPE_BF16)
        return mc_bf16_to_f32(mc_f32_to_bf16(s));
    if (dt == MC_DTYPE_F16)
        return mc_f16_to_f32(mc_f32_to_f16(s));
    return s;
}

static const uint8_t *hidden_keep(const struct mc_tfm_ctx *c, uint8_t *keep, uint32_t site)
{
    if (!c->hidden_dropout)
        return NULL;
    /* element indices of the global [s, b, h] tensor: the same mask for any sequence shard */
    mc_tfm_dropout_mask(c, keep, site, c->sp_first * c->d->h, c->T_sp * c->d->h,
                        c->cfg->hidden_dropout);
    return keep;
}

static float hidden_scale(const struct mc_tfm_ctx *c)
{
    return mc_tfm_dropout_scale(c->dt, c->cfg->hidden_dropout);
}

/* out = residual + dropout(x + bias) on the T_sp rows. x (a row-parallel output) and the
 * bias are dt; residual and out are the residual stream's c->rdt. With an fp32 stream
 * (--fp32-residual-connection) x and the bias are widened and the sum stays fp32 (Megatron's
 * _bias_dropout_add_func after upstream's fp32-residual fix, PR #3504: x and bias cast up to
 * the residual's dtype; 0.12.1 cast the residual down instead, COMPATIBILITY.md), with the
 * fp32 dropout scale. */
static void residual_add(const struct mc_tfm_ctx *c, void *out, const void *x, const void *bias,
                         const void *residual, const uint8_t *keep)
{
    struct mc_backend *be = c->be;
    int64_t rows = c->T_sp, h = c->d->h;
    if (c->rdt == c->dt) {
        be->ops->bias_dropout_add(be, c->dt, out, x, bias, residual, keep, hidden_scale(c), rows,
                                  h);
        return;
    }
    be->ops->convert(be, c->scr->r32a, MC_DTYPE_F32, x, c->dt, rows * h);
    if (bias)
        be->ops->convert(be, c->scr->b32, MC_DTYPE_F32, bias, c->dt, h);
    be->ops->bias_dropout_add(be, MC_DTYPE_F32, out, c->scr->r32a, bias ? c->scr->b32 : NULL,
                              residual, keep, mc_tfm_dropout_scale(MC_DTYPE_F32,
                                                                   c->cfg->hidden_dropout),
                              rows, h);
}

/* Norms, bias-dropout-adds and residuals run on the T_sp rows of this rank; h2 is the work
 * buffer of the sequence-parallel gathers and reduce-scatters, h1 the row-parallel output. */
mc_status mc_tfm_layer_forward(const struct mc_tfm_ctx *c, int64_t layer,
                               const struct mc_tfm_layer_weights *w,
                               struct mc_tfm_layer_acts *a, void *x_out)
{
    const struct mc_tfm_dims *d = c->d;
    struct mc_backend *be = c->be;
    void *tmp = c->scr->h1, *work = c->scr->h2, *ln = c->scr->norm_out, *act = c->scr->act;
    int64_t T = c->T;
    mc_status st;

    mc_tfm_norm_forward(c, ln, a->ln1_mean, a->ln1_rstd, a->x_in, w->ln1_w, w->ln1_b);
    if ((st = mc_tp_linear_col_forward(be, c->tp, a->qkv, ln, w->qkv_w, w->qkv_b, T, d->h,
                                       d->qkv_l, work)) != MC_OK)
        return st;
    if (d->qk_layernorm)
        mc_tfm_qk_norm_forward(c, w, a);
    if (d->rot_dim > 0)
        mc_tfm_rope_apply(c, a->qkv, false);
    mc_tfm_core_attention_forward(c, layer, a);
    if ((st = mc_tp_linear_row_forward(be, c->tp, tmp, a->ctx, w->proj_w, T, d->ctx_l, d->h,
                                       work)) != MC_OK)
        return st;
    const uint8_t *k1 = hidden_keep(c, a->keep_attn_out, MC_TFM_SITE_ATTN_OUT(layer));
    residual_add(c, a->x_mid, tmp, w->proj_b, a->x_in, k1);

    mc_tfm_norm_forward(c, ln, a->ln2_mean, a->ln2_rstd, a->x_mid, w->ln2_w, w->ln2_b);
    if (w->router_w) { /* a mixture-of-experts layer (transformer/moe/) */
        if ((st = mc_moe_layer_forward(c, layer, w, a, tmp, ln)) != MC_OK)
            return st;
    } else {
        if ((st = mc_tp_linear_col_forward(be, c->tp, a->fc1, ln, w->fc1_w, NULL, T, d->h,
                                           d->fc1_l, work)) != MC_OK)
            return st;
        mc_tfm_mlp_act_forward(c, act, a->fc1, w->fc1_b);
        if ((st = mc_tp_linear_row_forward(be, c->tp, tmp, act, w->fc2_w, T, d->ffn_l, d->h,
                                           work)) != MC_OK)
            return st;
    }
    const uint8_t *k2 = hidden_keep(c, a->keep_mlp_out, MC_TFM_SITE_MLP_OUT(layer));
    residual_add(c, x_out, tmp, w->fc2_b, a->x_mid, k2);
    return MC_OK;
}

/* Grad through bias-dropout-add: the residual branch passes dx unchanged; the other branch
 * gets dx * keep * scale (returned; dx itself when there is no dropout). */
static const void *dropout_grad(const struct mc_tfm_ctx *c, void *buf, const void *dx,
                                const uint8_t *keep)
{
    if (!c->hidden_dropout)
        return dx;
    c->be->ops->bias_dropout_add(c->be, c->dt, buf, dx, NULL, NULL, keep, hidden_scale(c),
                                 c->T_sp, c->d->h);
    return buf;
}


/* A row-parallel bias's grad (the bias is added after the reduction, on this rank's rows):
 * in dt through the wgrad temporary, then into the fp32 main grad. */
static void bias_grad(const struct mc_tfm_ctx *c, float *db, const void *dy, int64_t rows,
                      int64_t n)
{
    c->be->ops->bias_grad(c->be, c->dt, mc_tp_wgrad_target(c->tp, db, 0, n, true), dy, rows, n);
    mc_tp_wgrad_commit(c->tp, db, 0, n);
}

/* The grad of a row-parallel output from the residual stream's grad dx: with an fp32 stream
 * the fp32 dropout grad (into scratch r32b), the bias grad summed in fp32 and rounded once
 * (the grad of the widened bias is the 16-bit param.grad), and dx * keep * scale rounded to dt
 * into buf, the GEMM backward's input (the grad of the widened x). Returns that dt grad; the
 * bias grad (when db) is done. */
static const void *branch_grad(const struct mc_tfm_ctx *c, void *buf, float *db, const void *dx,
                               const uint8_t *keep)
{
    struct mc_backend *be = c->be;
    int64_t rows = c->T_sp, h = c->d->h;
    if (c->rdt == c->dt) {
        const void *dy = dropout_grad(c, buf, dx, keep);
        if (db)
            bias_grad(c, db, dy, rows, h);
        return dy;
    }
    const float *g = dx;
    if (c->hidden_dropout) {
        be->ops->bias_dropout_add(be, MC_DTYPE_F32, c->scr->r32b, dx, NULL, NULL, keep,
                                  mc_tfm_dropout_scale(MC_DTYPE_F32, c->cfg->hidden_dropout),
                                  rows, h);
        g = c->scr->r32b;
    }
    if (db) {
        be->ops->set(be, c->scr->db32, 0, (size_t)h * sizeof(float));
        be->ops->bias_grad(be, MC_DTYPE_F32, c->scr->db32, g, rows, h);
        be->ops->convert(be, mc_tp_wgrad_target(c->tp, db, 0, h, false), c->dt, c->scr->db32,
                         MC_DTYPE_F32, h);
        mc_tp_wgrad_commit(c->tp, db, 0, h);
    }
    be->ops->convert(be, buf, c->dt, g, MC_DTYPE_F32, rows * h);
    return buf;
}

/* The norm output of the forward, recomputed into scratch (same kernel, same inputs: the
 * same bits). */
static void recompute_norm(const struct mc_tfm_ctx *c, const void *x, const void *w,
                           const void *b)
{
    mc_tfm_norm_forward(c, c->scr->norm_out, c->scr->norm_mean, c->scr->norm_rstd, x, w, b);
}

/* The MLP (or MoE layer) from the grad dy of its output: the grad of the pre-MLP norm's output
 * lands in scratch h2 (h1 is the dense path's column work buffer). */
static mc_status mlp_backward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                              const struct mc_tfm_layer_grads *g,
                              const struct mc_tfm_layer_acts *a, const void *dy)
{
    const struct mc_tfm_dims *d = c->d;
    struct mc_backend *be = c->be;
    struct mc_tfm_scratch *scr = c->scr;
    int64_t T = c->T;
    mc_status st;
    if (w->router_w) {
        recompute_norm(c, a->x_mid, w->ln2_w, w->ln2_b);
        return mc_moe_layer_backward(c, w, g, a, scr->h2, dy, scr->norm_out);
    }
    mc_tfm_mlp_act_forward(c, scr->act, a->fc1, w->fc1_b); /* recompute */
    if ((st = mc_tp_linear_row_backward(be, c->tp, scr->dact, g->fc2_w, dy, scr->act, w->fc2_w,
                                        T, d->ffn_l, d->h, scr->h2)) != MC_OK)
        return st;
    mc_tfm_mlp_act_backward(c, scr->dfc1, scr->dact, a->fc1, w->fc1_b);
    recompute_norm(c, a->x_mid, w->ln2_w, w->ln2_b);
    return mc_tp_linear_col_backward(be, c->tp, scr->h2, g->fc1_w, NULL, g->fc1_b, scr->dfc1,
                                     scr->norm_out, w->fc1_w, T, d->h, d->fc1_l, scr->h1);
}

mc_status mc_tfm_layer_backward(const struct mc_tfm_ctx *c, int64_t layer,
                                const struct mc_tfm_layer_weights *w,
                                const struct mc_tfm_layer_grads *g,
                                const struct mc_tfm_layer_acts *a, void *dx)
{
    const struct mc_tfm_dims *d = c->d;
    struct mc_backend *be = c->be;
    struct mc_tfm_scratch *scr = c->scr;
    int64_t T = c->T, Ts = c->T_sp;
    mc_status st;

    /* MLP block (dy lives in h1 or dx; h2 gathers it; then h1 is the column work buffer) */
    const void *dy = branch_grad(c, scr->h1, w->router_w ? NULL : g->fc2_b, dx, a->keep_mlp_out);
    if ((st = mlp_backward(c, w, g, a, dy)) != MC_OK)
        return st;
    mc_tfm_norm_backward(c, scr->h1, g->ln2_w, g->ln2_b, scr->h2, a->x_mid, w->ln2_w, a->ln2_mean,
                         a->ln2_rstd);
    be->ops->bias_dropout_add(be, c->rdt, dx, scr->h1, NULL, dx, NULL, 1.0f, Ts, d->h);

    /* attention block */
    dy = branch_grad(c, scr->h1, g->proj_b, dx, a->keep_attn_out);
    if ((st = mc_tp_linear_row_backward(be, c->tp, scr->dctx, g->proj_w, dy, a->ctx, w->proj_w,
                                        T, d->ctx_l, d->h, scr->h2)) != MC_OK)
        return st;
    if (c->recompute_core_attention) {
        /* checkpoint_core_attention: the probs again from the kept q, k, v (same op, same
         * inputs, same dropout stream: the same bits). Its context output lands on a->ctx,
         * already consumed above, with the bits it held. */
        struct mc_tfm_layer_acts re = *a;
        mc_tfm_core_attention_forward(c, layer, &re);
    }
    mc_tfm_core_attention_backward(c, layer, a, scr->dctx, scr->dqkv);
    if (d->rot_dim > 0)
        mc_tfm_rope_apply(c, scr->dqkv, true);
    if (d->qk_layernorm)
        mc_tfm_qk_norm_backward(c, w, g, a, scr->dqkv);
    recompute_norm(c, a->x_in, w->ln1_w, w->ln1_b);
    if ((st = mc_tp_linear_col_backward(be, c->tp, scr->h2, g->qkv_w, NULL, g->qkv_b, scr->dqkv,
                                        scr->norm_out, w->qkv_w, T, d->h, d->qkv_l,
                                        scr->h1)) != MC_OK)
        return st;
    mc_tfm_norm_backward(c, scr->h1, g->ln1_w, g->ln1_b, scr->h2, a->x_in, w->ln1_w, a->ln1_mean,
                         a->ln1_rstd);
    be->ops->bias_dropout_add(be, c->rdt, dx, scr->h1, NULL, dx, NULL, 1.0f, Ts, d->h);
    return MC_OK;
}
