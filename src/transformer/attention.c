/* Self-attention core: RoPE tables and application (mirrors models/common/embeddings/
 * rotary_pos_embedding.py and rope_utils.py) and DotProductAttention of the local spec
 * (transformer/dot_product_attention.py): scores = (q k^T) / sqrt(hn) [/ layer with
 * --apply-query-key-layer-scaling, multiplied back before the softmax], masked fill -10000,
 * softmax, attention dropout, probs @ v, as the backend's attention op pair (backend.h: one op
 * a backend may fuse; the CPU backend's composition in backend/cpu/attention_cpu.c is the
 * reference), or (cfg->flash_attention: the default --transformer-impl transformer_engine,
 * --use-flash-attn; training/model_config.c's mc_attention_from_args) as
 * the flash attention op pair (backend/cpu/flash_attention_cpu.c): the same attention without
 * the [b, heads, s, s] probabilities, keeping ctx and the row log-sum-exp for backward. GQA: query head i of a group uses that group's key and value head, read in place
 * from the fused QKV output laid out per query group [q heads of g | k_g | v_g]. MindSpeed-LLM's
 * ALiBi (cfg->alibi) passes its heads' slopes to either op pair (desc.alibi_slopes). */
#include "transformer/transformer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* inv_freq in fp32 as RotaryEmbedding computes it, with Llama 3 scaling (_apply_scaling, or
 * MindSpeed-LLM's apply_llama3_scaling with its own constants: the same bands). The constants
 * combine in double, as Python floats do, and meet the fp32 tensors as fp32 scalars. */
static float inv_freq(const struct mc_gpt_config *cfg, int64_t i, int64_t dim)
{
    float e = (float)(2 * i) / (float)dim;
    float f = 1.0f / powf(cfg->rotary_base, e);
    if (!cfg->use_rope_scaling)
        return f;
    double lo = cfg->rope_low_freq_factor > 0.0f ? cfg->rope_low_freq_factor : 1.0;
    double hi = cfg->rope_high_freq_factor > 0.0f ? cfg->rope_high_freq_factor : 4.0;
    double old = cfg->rope_original_max_position > 0.0f ? cfg->rope_original_max_position : 8192.0;
    const float factor = cfg->rope_scaling_factor, low = (float)lo, old_ctx = (float)old;
    const float low_wavelen = (float)(old / lo), high_wavelen = (float)(old / hi);
    float wavelen = 2.0f * (float)M_PI / f;
    float scaled = wavelen > low_wavelen ? f / factor : f;
    float smooth = (old_ctx / wavelen - low) / (float)(hi - lo);
    bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    return medium ? (1.0f - smooth) * scaled / factor + smooth * scaled : scaled;
}

void mc_tfm_rope_tables(float *cos_t, float *sin_t, const struct mc_gpt_config *cfg,
                        int64_t rot_dim, int64_t s_max)
{
    int64_t half = rot_dim / 2;
    for (int64_t p = 0; p < s_max; p++) {
        for (int64_t i = 0; i < half; i++) {
            float f = (float)p * inv_freq(cfg, i, rot_dim);
            /* emb = cat(freqs, freqs), or each frequency twice in a row when interleaved */
            int64_t a = cfg->rotary_interleaved ? 2 * i : i;
            int64_t b = cfg->rotary_interleaved ? 2 * i + 1 : i + half;
            cos_t[p * rot_dim + a] = cos_t[p * rot_dim + b] = cosf(f);
            sin_t[p * rot_dim + a] = sin_t[p * rot_dim + b] = sinf(f);
        }
    }
}

/* Rotates the query heads and the key head of every group (contiguous in the QKV layout) in
 * place; positions are always 0..s-1 (Megatron ignores position_ids for RoPE). */
void mc_tfm_rope_apply(const struct mc_tfm_ctx *c, void *qkv, bool backward)
{
    const struct mc_tfm_dims *d = c->d;
    int64_t group = (d->per_group + 2) * d->hn;
    for (int64_t t = 0; t < c->T; t++) {
        int64_t pos = t / c->b;
        const float *cs = c->rope_cos + pos * d->rot_dim, *sn = c->rope_sin + pos * d->rot_dim;
        for (int64_t g = 0; g < d->ng_l; g++) {
            void *p = mc_tp_at(qkv, c->dt, t * d->qkv_l + g * group);
            if (backward)
                c->be->ops->rope_bwd(c->be, c->dt, p, cs, sn, 1, d->per_group + 1, d->hn,
                                     d->rot_dim, c->cfg->rotary_interleaved);
            else
                c->be->ops->rope_fwd(c->be, c->dt, p, cs, sn, 1, d->per_group + 1, d->hn,
                                     d->rot_dim, c->cfg->rotary_interleaved);
        }
    }
}

/* --qk-layernorm (SelfAttention.get_query_key_value_tensors: q_layernorm / k_layernorm on the
 * [sq, b, np, hn] queries and [sq, b, ng, hn] keys, before RoPE). The heads sit per query group
 * in the fused layout, so they are gathered into rows of hn (all query rows, then all key
 * rows: [T np_l + T ng_l, hn]), normed with one call per weight and scattered back. */
static void qk_move(const struct mc_tfm_ctx *c, void *rows, void *qkv, bool to_rows)
{
    const struct mc_tfm_dims *d = c->d;
    size_t es = mc_dtype_size(c->dt), qn = (size_t)(d->per_group * d->hn) * es;
    size_t kn = (size_t)d->hn * es;
    char *q_rows = rows, *k_rows = (char *)rows + (size_t)(c->T * d->np_l * d->hn) * es;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t g = 0; g < d->ng_l; g++) {
            char *q = mc_tp_at(qkv, c->dt, t * d->qkv_l + g * (d->per_group + 2) * d->hn);
            char *qr = q_rows + (size_t)(t * d->ng_l + g) * qn;
            char *kr = k_rows + (size_t)(t * d->ng_l + g) * kn;
            c->be->ops->copy(c->be, to_rows ? qr : q, to_rows ? q : qr, qn);
            c->be->ops->copy(c->be, to_rows ? kr : q + qn, to_rows ? q + qn : kr, kn);
        }
}

void mc_tfm_qk_norm_forward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                            struct mc_tfm_layer_acts *a)
{
    const struct mc_tfm_dims *d = c->d;
    int64_t nq = c->T * d->np_l, nk = c->T * d->ng_l;
    size_t k_off = (size_t)(nq * d->hn) * mc_dtype_size(c->dt);
    qk_move(c, a->qk_in, a->qkv, true);
    mc_tfm_norm_rows_forward(c, c->scr->qk_a, a->qk_mean, a->qk_rstd, a->qk_in, w->qln_w,
                             w->qln_b, nq, d->hn);
    mc_tfm_norm_rows_forward(c, (char *)c->scr->qk_a + k_off, a->qk_mean + nq, a->qk_rstd + nq,
                             (char *)a->qk_in + k_off, w->kln_w, w->kln_b, nk, d->hn);
    qk_move(c, c->scr->qk_a, a->qkv, false);
}

void mc_tfm_qk_norm_backward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                             const struct mc_tfm_layer_grads *g,
                             const struct mc_tfm_layer_acts *a, void *dqkv)
{
    const struct mc_tfm_dims *d = c->d;
    int64_t nq = c->T * d->np_l, nk = c->T * d->ng_l;
    size_t k_off = (size_t)(nq * d->hn) * mc_dtype_size(c->dt);
    char *dy = c->scr->qk_a, *dx = c->scr->qk_b, *x = a->qk_in;
    qk_move(c, dy, dqkv, true);
    mc_tfm_norm_rows_backward(c, dx, g->qln_w, g->qln_b, dy, x, w->qln_w, a->qk_mean,
                              a->qk_rstd, nq, d->hn);
    mc_tfm_norm_rows_backward(c, dx + k_off, g->kln_w, g->kln_b, dy + k_off, x + k_off,
                              w->kln_w, a->qk_mean + nq, a->qk_rstd + nq, nk, d->hn);
    qk_move(c, dx, dqkv, false);
}

/* Slope k of MindSpeed's get_slopes_power_of_2(p): start * ratio ** k, start = ratio =
 * 2 ** (-2 ** -(log2(p) - 3)), in double as Python computes it. */
static double alibi_slope_pow2(int64_t p, int64_t k)
{
    double start = pow(2.0, -pow(2.0, -(log2((double)p) - 3.0)));
    return start * pow(start, (double)k);
}

void mc_tfm_alibi_slopes(float *out, int64_t heads_total, int64_t first, int64_t n)
{
    int64_t p = 1;
    while (p * 2 <= heads_total)
        p *= 2; /* 2 ** floor(log2(heads)) */
    for (int64_t i = 0; i < n; i++) {
        int64_t h = first + i;
        /* the first p heads take the p slopes; the rest take slopes 0, 2, 4, ... of 2p */
        out[i] = (float)(h < p ? alibi_slope_pow2(p, h) : alibi_slope_pow2(2 * p, 2 * (h - p)));
    }
}

static float score_alpha(const struct mc_tfm_ctx *c, int64_t layer, float *mult)
{
    /* as DotProductAttention: norm_factor = sqrt(hn) * coeff, alpha = 1 / norm_factor */
    double norm_factor = sqrt((double)c->d->hn);
    *mult = 1.0f;
    if (c->cfg->apply_query_key_layer_scaling) {
        double coeff = (double)(layer + 1); /* 1-based layer number */
        norm_factor *= coeff;
        *mult = (float)coeff;
    }
    return (float)(1.0 / norm_factor);
}

/* The attention op's description for this call: the layer's score scaling, the mask and the
 * attention-dropout stream of the layer's site. */
static struct mc_attention_desc attention_desc(const struct mc_tfm_ctx *c, int64_t layer)
{
    const struct mc_tfm_dims *d = c->d;
    struct mc_attention_desc a = {
        .dt = c->dt,
        .b = c->b,
        .s = c->s,
        .heads = d->np_l,
        .groups = d->ng_l,
        .hn = d->hn,
        .qkv_ld = d->qkv_l,
        .ctx_ld = d->ctx_l,
        .mask = c->attn_mask,
        .dropout = c->attention_dropout ? c->cfg->attention_dropout : 0.0f,
        .rng = mc_tfm_dropout_stream(c, MC_TFM_SITE_ATTN_PROBS(layer)),
        .heads_total = d->np,
        .head_first = d->tp_rank * d->np_l,
    };
    a.alpha = score_alpha(c, layer, &a.mult);
    return a;
}

/* --sliding-window W for the unfused ops: the causal (or the given) mask with every key before
 * i - W masked too, as MindSpeed's band (npu_fusion_attention sparse_mode 4, pre_tokens W,
 * next_tokens 0; its unfused fallback masks tril(diagonal=-(W+1))). [b, s, s] in backend memory,
 * freed by the caller; NULL when no key is that far back (s - 1 <= W: the band is causal). The
 * flash ops take W itself (desc.window) and skip the tiles outside it. */
static uint8_t *window_mask(const struct mc_tfm_ctx *c)
{
    int64_t W = c->cfg->sliding_window, s = c->s, b = c->b;
    if (!W || s - 1 <= W)
        return NULL;
    size_t n = (size_t)(b * s * s);
    uint8_t *h = mc_calloc(n, 1), *m = c->be->ops->alloc(c->be, n);
    if (!h || !m) {
        mc_log(MC_LOG_ERROR, "attention: no memory for the --sliding-window mask (%zu bytes)", n);
        abort();
    }
    if (c->attn_mask)
        c->be->ops->copy_to_host(c->be, h, c->attn_mask, n);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < s; i++) {
            uint8_t *row = h + (bi * s + i) * s;
            if (!c->attn_mask)
                memset(row + i + 1, 1, (size_t)(s - i - 1));
            if (i > W)
                memset(row, 1, (size_t)(i - W));
        }
    c->be->ops->copy_to_backend(c->be, m, h, n);
    mc_free(h);
    return m;
}

/* --position-embedding-type alibi: the slopes of this rank's heads (host memory, freed by the
 * caller), taken from the slopes of all the model's heads as MindSpeed's tensor-parallel
 * split does (alibi.reshape(tp, -1, ...)[tp_rank]); NULL without ALiBi. */
static float *alibi_slopes(const struct mc_tfm_ctx *c, struct mc_attention_desc *ad)
{
    if (!c->cfg->alibi)
        return NULL;
    float *sl = mc_alloc(sizeof(float) * (size_t)ad->heads);
    if (!sl) {
        mc_log(MC_LOG_ERROR, "attention: no memory for the ALiBi slopes");
        abort();
    }
    mc_tfm_alibi_slopes(sl, ad->heads_total, ad->head_first, ad->heads);
    ad->alibi_slopes = sl;
    ad->alibi_square = c->cfg->alibi == MC_ALIBI_SQUARE;
    return sl;
}

void mc_tfm_core_attention_forward(const struct mc_tfm_ctx *c, int64_t layer,
                                   struct mc_tfm_layer_acts *a)
{
    struct mc_attention_desc ad = attention_desc(c, layer);
    float *slopes = alibi_slopes(c, &ad);
    if (c->cfg->flash_attention) {
        ad.window = c->cfg->sliding_window;
        c->be->ops->flash_attention_fwd(c->be, &ad, a->qkv, a->ctx, a->lse);
        mc_free(slopes);
        return;
    }
    uint8_t *wm = window_mask(c);
    if (wm)
        ad.mask = wm;
    struct mc_attention_work w = {c->scr->attn_a, c->scr->attn_b, c->scr->attn_keep};
    c->be->ops->attention_fwd(c->be, &ad, a->qkv, a->probs, a->ctx, &w);
    c->be->ops->free(c->be, wm);
    mc_free(slopes);
}

void mc_tfm_core_attention_backward(const struct mc_tfm_ctx *c, int64_t layer,
                                    const struct mc_tfm_layer_acts *a, const void *dctx,
                                    void *dqkv)
{
    struct mc_attention_desc ad = attention_desc(c, layer);
    float *slopes = alibi_slopes(c, &ad);
    if (c->cfg->flash_attention) {
        ad.window = c->cfg->sliding_window;
        c->be->ops->flash_attention_bwd(c->be, &ad, a->qkv, a->ctx, a->lse, dctx, dqkv);
        mc_free(slopes);
        return;
    }
    uint8_t *wm = window_mask(c);
    if (wm)
        ad.mask = wm;
    struct mc_attention_work w = {c->scr->attn_a, c->scr->attn_b, c->scr->attn_keep};
    c->be->ops->attention_bwd(c->be, &ad, a->qkv, a->probs, dctx, dqkv, &w);
    c->be->ops->free(c->be, wm);
    mc_free(slopes);
}
