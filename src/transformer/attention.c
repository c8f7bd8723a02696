/* Self-attention core: RoPE tables and application (mirrors models/common/embeddings/
 * rotary_pos_embedding.py and rope_utils.py) and DotProductAttention of the local spec
 * (transformer/dot_product_attention.py): scores = (q k^T) / sqrt(hn) [/ layer with
 * --apply-query-key-layer-scaling, multiplied back before the softmax], masked fill -10000,
 * softmax, attention dropout, probs @ v. GQA: query head i of a group uses that group's key
 * and value head (the repeat_interleave of Megatron), read in place from the fused QKV output
 * laid out per query group [q heads of g | k_g | v_g]. */
#include "transformer/transformer.h"

#include <math.h>

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
void mc_tfm_rope_apply(const struct mc_tfm_ctx *c, float *qkv, bool backward)
{
    const struct mc_tfm_dims *d = c->d;
    int64_t group = (d->per_group + 2) * d->hn;
    for (int64_t t = 0; t < c->T; t++) {
        int64_t pos = t / c->b;
        const float *cs = c->rope_cos + pos * d->rot_dim, *sn = c->rope_sin + pos * d->rot_dim;
        for (int64_t g = 0; g < d->ng_l; g++) {
            float *p = qkv + t * d->qkv_l + g * group;
            if (backward)
                c->be->rope_bwd(p, cs, sn, 1, d->per_group + 1, d->hn, d->rot_dim,
                                c->cfg->rotary_interleaved);
            else
                c->be->rope_fwd(p, cs, sn, 1, d->per_group + 1, d->hn, d->rot_dim,
                                c->cfg->rotary_interleaved);
        }
    }
}

/* Pointers to head hl (local) of batch row bi inside the fused QKV activations. */
struct heads {
    const float *q, *k, *v;
    int64_t ld; /* row stride between consecutive sequence positions */
};

static struct heads head_ptrs(const struct mc_tfm_ctx *c, const float *qkv, int64_t bi,
                              int64_t hl)
{
    const struct mc_tfm_dims *d = c->d;
    int64_t g = hl / d->per_group, qi = hl % d->per_group;
    const float *base = qkv + bi * d->qkv_l + g * (d->per_group + 2) * d->hn;
    return (struct heads){base + qi * d->hn, base + d->per_group * d->hn,
                          base + (d->per_group + 1) * d->hn, c->b * d->qkv_l};
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

/* keep masks for every (b, local head) block: element index in the GLOBAL [b, np, s, s]
 * layout, so the masks do not depend on the tensor-parallel size. */
static void attention_keep(const struct mc_tfm_ctx *c, int64_t layer)
{
    const struct mc_tfm_dims *d = c->d;
    int64_t ss = c->s * c->s;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < c->b * d->np_l; i++) {
        int64_t bi = i / d->np_l, head = d->tp_rank * d->np_l + i % d->np_l;
        mc_tfm_dropout_mask(c, c->scr->attn_keep + i * ss, MC_TFM_SITE_ATTN_PROBS(layer),
                            (bi * d->np + head) * ss, ss, c->cfg->attention_dropout);
    }
}

void mc_tfm_core_attention_forward(const struct mc_tfm_ctx *c, int64_t layer,
                                   struct mc_tfm_layer_acts *a)
{
    const struct mc_tfm_dims *d = c->d;
    const struct mc_backend_ops *be = c->be;
    int64_t s = c->s, ss = s * s, nbh = c->b * d->np_l;
    float mult;
    float alpha = score_alpha(c, layer, &mult);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < nbh; i++) {
        int64_t bi = i / d->np_l, hl = i % d->np_l;
        struct heads hp = head_ptrs(c, a->qkv, bi, hl);
        be->gemm(false, true, s, s, d->hn, alpha, hp.q, hp.ld, hp.k, hp.ld, 0.0f, a->probs + i * ss,
                 s);
    }
    if (c->attn_mask) {
        for (int64_t bi = 0; bi < c->b; bi++)
            be->masked_softmax_fwd(a->probs + bi * d->np_l * ss, d->np_l, s, s, mult,
                                   c->attn_mask + bi * ss);
    } else {
        be->masked_softmax_fwd(a->probs, nbh, s, s, mult, NULL);
    }
    const float *p = a->probs;
    if (c->attention_dropout) {
        attention_keep(c, layer);
        be->bias_dropout_add(c->scr->attn_a, a->probs, NULL, NULL, c->scr->attn_keep,
                             1.0f / (1.0f - c->cfg->attention_dropout), nbh * s, s);
        p = c->scr->attn_a;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < nbh; i++) {
        int64_t bi = i / d->np_l, hl = i % d->np_l;
        struct heads hp = head_ptrs(c, a->qkv, bi, hl);
        be->gemm(false, false, s, d->hn, s, 1.0f, p + i * ss, s, hp.v, hp.ld, 0.0f,
                 a->ctx + bi * d->ctx_l + hl * d->hn, c->b * d->ctx_l);
    }
}

/* masked_fill's backward: a position replaced by -10000 passes no gradient to its score. (The
 * softmax grad there is p * (...) with p = 0 unless a whole row is masked, where p = 1/s.) */
static void zero_masked(const struct mc_tfm_ctx *c, float *dscores)
{
    int64_t s = c->s, ss = s * s, np_l = c->d->np_l;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < c->b * np_l; i++) {
        float *g = dscores + i * ss;
        if (c->attn_mask) {
            const uint8_t *mk = c->attn_mask + (i / np_l) * ss;
            for (int64_t k = 0; k < ss; k++)
                if (mk[k])
                    g[k] = 0.0f;
        } else {
            for (int64_t q = 0; q < s; q++)
                for (int64_t k = q + 1; k < s; k++)
                    g[q * s + k] = 0.0f;
        }
    }
}

/* dqkv gets every element: dQ per head, dK and dV summed over the heads of their group in
 * head order (fixed, so deterministic). */
void mc_tfm_core_attention_backward(const struct mc_tfm_ctx *c, int64_t layer,
                                    const struct mc_tfm_layer_acts *a, const float *dctx,
                                    float *dqkv)
{
    const struct mc_tfm_dims *d = c->d;
    const struct mc_backend_ops *be = c->be;
    int64_t s = c->s, ss = s * s, nbh = c->b * d->np_l, ldc = c->b * d->ctx_l;
    float mult;
    float alpha = score_alpha(c, layer, &mult);
    float scale = 1.0f / (1.0f - c->cfg->attention_dropout);
    const float *pd = a->probs;
    if (c->attention_dropout) {
        attention_keep(c, layer);
        be->bias_dropout_add(c->scr->attn_a, a->probs, NULL, NULL, c->scr->attn_keep, scale,
                             nbh * s, s);
        pd = c->scr->attn_a;
    }
    float *dp = c->scr->attn_b;
    /* one task per (batch row, key/value group): its heads add into dV in head order */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < c->b * d->ng_l; i++) {
        int64_t bi = i / d->ng_l, g = i % d->ng_l;
        for (int64_t hl = g * d->per_group; hl < (g + 1) * d->per_group; hl++) {
            struct heads hp = head_ptrs(c, a->qkv, bi, hl);
            struct heads dh = head_ptrs(c, dqkv, bi, hl);
            const float *dc = dctx + bi * d->ctx_l + hl * d->hn;
            int64_t off = (bi * d->np_l + hl) * ss;
            float beta = hl % d->per_group == 0 ? 0.0f : 1.0f;
            be->gemm(false, true, s, s, d->hn, 1.0f, dc, ldc, hp.v, hp.ld, 0.0f, dp + off, s);
            be->gemm(true, false, s, d->hn, s, 1.0f, pd + off, s, dc, ldc, beta, (float *)dh.v,
                     dh.ld);
        }
    }
    if (c->attention_dropout)
        be->bias_dropout_add(dp, dp, NULL, NULL, c->scr->attn_keep, scale, nbh * s, s);
    be->masked_softmax_bwd(dp, a->probs, nbh, s, s, mult);
    zero_masked(c, dp);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < c->b * d->ng_l; i++) {
        int64_t bi = i / d->ng_l, g = i % d->ng_l;
        for (int64_t hl = g * d->per_group; hl < (g + 1) * d->per_group; hl++) {
            struct heads hp = head_ptrs(c, a->qkv, bi, hl);
            struct heads dh = head_ptrs(c, dqkv, bi, hl);
            int64_t off = (bi * d->np_l + hl) * ss;
            float beta = hl % d->per_group == 0 ? 0.0f : 1.0f;
            be->gemm(false, false, s, d->hn, s, alpha, dp + off, s, hp.k, hp.ld, 0.0f,
                     (float *)dh.q, dh.ld);
            be->gemm(true, false, s, d->hn, s, alpha, dp + off, s, hp.q, hp.ld, beta,
                     (float *)dh.k, dh.ld);
        }
    }
}
