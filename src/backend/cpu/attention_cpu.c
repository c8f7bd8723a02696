/* The CPU backend's attention op pair (backend.h, struct mc_attention_desc): the reference
 * composition of per-head GEMMs, the masked softmax and the dropout of the probabilities, run
 * on the backend's kernel table. Query head i of a group reads that group's key and value head
 * (the repeat_interleave of Megatron) in place from the fused QKV rows. A device backend may
 * fuse the whole op instead (flash attention); the numbers here are the definition. In 16
 * bits (attention_fwd_half / attention_bwd_half) the same composition runs on fp32 copies with
 * the tensors rounded where Megatron's 16-bit autograd graph rounds them (backend.h). */
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/half_cpu.h"
#include "core/dtype.h"

/* Element offsets of query head hl of batch row bi inside the fused QKV activations (its
 * query, and its group's key and value); consecutive sequence positions are b * qkv_ld apart. */
struct head_offs {
    int64_t q, k, v, ld;
};

static struct head_offs head_offs(const struct mc_attention_desc *d, int64_t bi, int64_t hl)
{
    int64_t per_group = d->heads / d->groups;
    int64_t g = hl / per_group, qi = hl % per_group;
    int64_t base = bi * d->qkv_ld + g * (per_group + 2) * d->hn;
    return (struct head_offs){base + qi * d->hn, base + per_group * d->hn,
                              base + (per_group + 1) * d->hn, d->b * d->qkv_ld};
}

/* Pointers to head hl of batch row bi inside the fused QKV activations. */
struct heads {
    const float *q, *k, *v;
    int64_t ld; /* row stride between consecutive sequence positions */
};

static struct heads head_ptrs(const struct mc_attention_desc *d, const float *qkv, int64_t bi,
                              int64_t hl)
{
    struct head_offs o = head_offs(d, bi, hl);
    return (struct heads){qkv + o.q, qkv + o.k, qkv + o.v, o.ld};
}

/* keep masks for every (b, local head) block: element index in the GLOBAL [b, heads, s, s]
 * layout, so the masks do not depend on the tensor-parallel size. */
static void attention_keep(const struct mc_cpu_kernels *k, const struct mc_attention_desc *d,
                           uint8_t *keep)
{
    int64_t ss = d->s * d->s;
    const struct mc_dropout_stream *r = &d->rng;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d->b * d->heads; i++) {
        int64_t bi = i / d->heads, head = d->head_first + i % d->heads;
        k->dropout_mask(keep + i * ss, (bi * d->heads_total + head) * ss, ss, r->seed, r->c1_hi,
                        r->c2, r->c3, d->dropout);
    }
}

static float round_to(enum mc_dtype dt, float x);

float mc_cpu_alibi_bias(const struct mc_attention_desc *d, int64_t hl, int64_t i, int64_t j)
{
    float bias = d->alibi_slopes[hl] * (float)(d->alibi_square ? j - i : j);
    return d->dt == MC_DTYPE_F32 ? bias : round_to(d->dt, bias);
}

/* scores += bias / mult over [b, heads, s, s] (MindSpeed's beta * pse with beta = 1 / layer
 * under query-key layer scaling; the softmax multiplies mult back). 16-bit: the scaled bias
 * and the sum each rounded, as torch's 16-bit mul and add round. Masked positions get theirs
 * too: the softmax replaces them with -10000. */
static void add_alibi(const struct mc_attention_desc *d, float *scores)
{
    int64_t s = d->s, ss = s * s;
    float inv = 1.0f / d->mult;
    bool half = d->dt != MC_DTYPE_F32;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d->b * d->heads; i++) {
        int64_t hl = i % d->heads;
        float *sc = scores + i * ss;
        for (int64_t q = 0; q < s; q++)
            for (int64_t k = 0; k < s; k++) {
                float bias = mc_cpu_alibi_bias(d, hl, q, k);
                if (inv != 1.0f)
                    bias = half ? round_to(d->dt, bias * inv) : bias * inv;
                float v = sc[q * s + k] + bias;
                sc[q * s + k] = half ? round_to(d->dt, v) : v;
            }
    }
}

static void attention_fwd_half(struct mc_backend *be, const struct mc_attention_desc *d,
                               const void *qkv, void *probs, void *ctx,
                               struct mc_attention_work *w);
static void attention_bwd_half(struct mc_backend *be, const struct mc_attention_desc *d,
                               const void *qkv, const void *probs, const void *dctx, void *dqkv,
                               struct mc_attention_work *w);

void mc_cpu_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                          const void *qkv_, void *probs_, void *ctx_, struct mc_attention_work *w)
{
    if (d->dt != MC_DTYPE_F32) {
        mc_cpu_need_half(d->dt, "attention_fwd");
        attention_fwd_half(be, d, qkv_, probs_, ctx_, w);
        return;
    }
    const struct mc_cpu_kernels *k = mc_cpu_kernels_of(be);
    const float *qkv = qkv_;
    float *probs = probs_, *ctx = ctx_;
    int64_t s = d->s, ss = s * s, nbh = d->b * d->heads;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < nbh; i++) {
        int64_t bi = i / d->heads, hl = i % d->heads;
        struct heads hp = head_ptrs(d, qkv, bi, hl);
        k->gemm(false, true, s, s, d->hn, d->alpha, hp.q, hp.ld, hp.k, hp.ld, 0.0f,
                probs + i * ss, s);
    }
    if (d->alibi_slopes)
        add_alibi(d, probs);
    if (d->mask) {
        for (int64_t bi = 0; bi < d->b; bi++)
            k->masked_softmax_fwd(probs + bi * d->heads * ss, d->heads, s, s, d->mult,
                                  d->mask + bi * ss);
    } else {
        k->masked_softmax_fwd(probs, nbh, s, s, d->mult, NULL);
    }
    const float *p = probs;
    if (d->dropout > 0.0f) {
        attention_keep(k, d, w->keep);
        k->bias_dropout_add(w->a, probs, NULL, NULL, w->keep, 1.0f / (1.0f - d->dropout),
                            nbh * s, s);
        p = w->a;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < nbh; i++) {
        int64_t bi = i / d->heads, hl = i % d->heads;
        struct heads hp = head_ptrs(d, qkv, bi, hl);
        k->gemm(false, false, s, d->hn, s, 1.0f, p + i * ss, s, hp.v, hp.ld, 0.0f,
                ctx + bi * d->ctx_ld + hl * d->hn, d->b * d->ctx_ld);
    }
}

/* masked_fill's backward: a position replaced by -10000 passes no gradient to its score. (The
 * softmax grad there is p * (...) with p = 0 unless a whole row is masked, where p = 1/s.) */
static void zero_masked(const struct mc_attention_desc *d, float *dscores)
{
    int64_t s = d->s, ss = s * s, heads = d->heads;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d->b * heads; i++) {
        float *g = dscores + i * ss;
        if (d->mask) {
            const uint8_t *mk = d->mask + (i / heads) * ss;
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
void mc_cpu_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                          const void *qkv_, const void *probs_, const void *dctx_, void *dqkv_,
                          struct mc_attention_work *w)
{
    if (d->dt != MC_DTYPE_F32) {
        mc_cpu_need_half(d->dt, "attention_bwd");
        attention_bwd_half(be, d, qkv_, probs_, dctx_, dqkv_, w);
        return;
    }
    const struct mc_cpu_kernels *k = mc_cpu_kernels_of(be);
    const float *qkv = qkv_, *probs = probs_, *dctx = dctx_;
    float *dqkv = dqkv_;
    int64_t s = d->s, ss = s * s, nbh = d->b * d->heads, ldc = d->b * d->ctx_ld;
    int64_t per_group = d->heads / d->groups;
    float scale = 1.0f / (1.0f - d->dropout);
    const float *pd = probs;
    if (d->dropout > 0.0f) {
        attention_keep(k, d, w->keep);
        k->bias_dropout_add(w->a, probs, NULL, NULL, w->keep, scale, nbh * s, s);
        pd = w->a;
    }
    float *dp = w->b;
    /* one task per (batch row, key/value group): its heads add into dV in head order */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < d->b * d->groups; i++) {
        int64_t bi = i / d->groups, g = i % d->groups;
        for (int64_t hl = g * per_group; hl < (g + 1) * per_group; hl++) {
            struct heads hp = head_ptrs(d, qkv, bi, hl);
            struct heads dh = head_ptrs(d, dqkv, bi, hl);
            const float *dc = dctx + bi * d->ctx_ld + hl * d->hn;
            int64_t off = (bi * d->heads + hl) * ss;
            float beta = hl % per_group == 0 ? 0.0f : 1.0f;
            k->gemm(false, true, s, s, d->hn, 1.0f, dc, ldc, hp.v, hp.ld, 0.0f, dp + off, s);
            k->gemm(true, false, s, d->hn, s, 1.0f, pd + off, s, dc, ldc, beta, (float *)dh.v,
                    dh.ld);
        }
    }
    if (d->dropout > 0.0f)
        k->bias_dropout_add(dp, dp, NULL, NULL, w->keep, scale, nbh * s, s);
    k->masked_softmax_bwd(dp, probs, nbh, s, s, d->mult);
    zero_masked(d, dp);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < d->b * d->groups; i++) {
        int64_t bi = i / d->groups, g = i % d->groups;
        for (int64_t hl = g * per_group; hl < (g + 1) * per_group; hl++) {
            struct heads hp = head_ptrs(d, qkv, bi, hl);
            struct heads dh = head_ptrs(d, dqkv, bi, hl);
            int64_t off = (bi * d->heads + hl) * ss;
            float beta = hl % per_group == 0 ? 0.0f : 1.0f;
            k->gemm(false, false, s, d->hn, s, d->alpha, dp + off, s, hp.k, hp.ld, 0.0f,
                    (float *)dh.q, dh.ld);
            k->gemm(true, false, s, d->hn, s, d->alpha, dp + off, s, hp.q, hp.ld, beta,
                    (float *)dh.k, dh.ld);
        }
    }
}

/* ---- 16-bit attention (backend.h: the rounding points of DotProductAttention on 16-bit
 * tensors): fp32 GEMMs and softmax of the kernel table on widened copies, each tensor torch
 * would hold in 16 bits rounded where torch rounds it. --------------------------------------- */

static float round_to(enum mc_dtype dt, float x)
{
    return dt == MC_DTYPE_BF16 ? mc_bf16_to_f32(mc_f32_to_bf16(x)) : mc_f16_to_f32(mc_f32_to_f16(x));
}

/* x = float(round(x)) over n elements with the table's (vectorized) convert, through a stack
 * buffer of 16-bit values: the same bits as round_to per element. */
#define ROUND_CHUNK 2048

static void round_span(const struct mc_cpu_kernels *k, enum mc_dtype dt, float *x, int64_t n)
{
    uint16_t h[ROUND_CHUNK];
    for (int64_t i = 0; i < n; i += ROUND_CHUNK) {
        int64_t m = n - i < ROUND_CHUNK ? n - i : ROUND_CHUNK;
        k->convert(h, dt, x + i, MC_DTYPE_F32, m);
        k->convert(x + i, MC_DTYPE_F32, h, dt, m);
    }
}

static void round_inplace(const struct mc_cpu_kernels *k, enum mc_dtype dt, float *x, int64_t n)
{
    const int64_t B = 8 * ROUND_CHUNK;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i += B)
        round_span(k, dt, x + i, n - i < B ? n - i : B);
}

/* The fp32 probabilities from widened qkv: scores = round(alpha q k^T), then the fp32 masked
 * softmax (unrounded). */
static void half_probs(const struct mc_cpu_kernels *k, const struct mc_attention_desc *d,
                       const float *qf, float *sf)
{
    int64_t s = d->s, ss = s * s, nbh = d->b * d->heads;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < nbh; i++) {
        struct heads hp = head_ptrs(d, qf, i / d->heads, i % d->heads);
        k->gemm(false, true, s, s, d->hn, d->alpha, hp.q, hp.ld, hp.k, hp.ld, 0.0f, sf + i * ss,
                s);
    }
    round_inplace(k, d->dt, sf, nbh * ss);
    if (d->alibi_slopes)
        add_alibi(d, sf);
    if (d->mask) {
        for (int64_t bi = 0; bi < d->b; bi++)
            k->masked_softmax_fwd(sf + bi * d->heads * ss, d->heads, s, s, d->mult,
                                  d->mask + bi * ss);
    } else {
        k->masked_softmax_fwd(sf, nbh, s, s, d->mult, NULL);
    }
}

/* x = keep ? round(x * scale16) : 0 on 16-bit values held as fp32 (dropout and its backward) */
static void half_dropout(const struct mc_cpu_kernels *k, const struct mc_attention_desc *d,
                         float *x, const uint8_t *keep, int64_t n)
{
    float scale = round_to(d->dt, 1.0f / (1.0f - d->dropout));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        x[i] = keep[i] ? x[i] * scale : 0.0f;
    round_inplace(k, d->dt, x, n);
}

/* Rows [s] x [hn] of fp32 src (packed) into the 16-bit dst with row stride ld. */
static void store_head(const struct mc_cpu_kernels *k, enum mc_dtype dt, void *dst, int64_t ld,
                       const float *src, int64_t s, int64_t hn)
{
    for (int64_t r = 0; r < s; r++)
        k->convert((uint16_t *)dst + r * ld, dt, src + r * hn, MC_DTYPE_F32, hn);
}

static void attention_fwd_half(struct mc_backend *be, const struct mc_attention_desc *d,
                               const void *qkv, void *probs, void *ctx,
                               struct mc_attention_work *w)
{
    const struct mc_cpu_kernels *k = mc_cpu_kernels_of(be);
    const char *op = "attention_fwd";
    int64_t s = d->s, ss = s * s, nbh = d->b * d->heads, T = d->b * s;
    float *qf = mc_cpu_widen(k, qkv, d->dt, T * d->qkv_ld, op);
    float *sf = mc_cpu_scratch(nbh * ss, op);
    half_probs(k, d, qf, sf);
    k->convert(probs, d->dt, sf, MC_DTYPE_F32, nbh * ss); /* probs rounded */
    k->convert(sf, MC_DTYPE_F32, probs, d->dt, nbh * ss);
    if (d->dropout > 0.0f) {
        attention_keep(k, d, w->keep);
        half_dropout(k, d, sf, w->keep, nbh * ss);
    }
    int64_t hn = d->hn;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < nbh; i++) {
        int64_t bi = i / d->heads, hl = i % d->heads;
        struct heads hp = head_ptrs(d, qf, bi, hl);
        float *c = mc_cpu_scratch(s * hn, op);
        k->gemm(false, false, s, hn, s, 1.0f, sf + i * ss, s, hp.v, hp.ld, 0.0f, c, hn);
        store_head(k, d->dt, (uint16_t *)ctx + bi * d->ctx_ld + hl * hn, d->b * d->ctx_ld, c, s,
                   hn);
        mc_cpu_release(c);
    }
    mc_cpu_release(qf);
    mc_cpu_release(sf);
}

/* acc += x over n in fp32 (the first head: acc = x); rounded once when stored */
static void add_heads(float *acc, const float *x, int64_t n, bool first)
{
    for (int64_t i = 0; i < n; i++)
        acc[i] = first ? x[i] : acc[i] + x[i];
}

/* x = round(round(x) * alpha), or round(x) when alpha is 1 (baddbmm's backward) */
static void round_scaled(const struct mc_cpu_kernels *k, enum mc_dtype dt, float *x, int64_t n,
                         float alpha)
{
    round_span(k, dt, x, n);
    if (alpha == 1.0f)
        return;
    for (int64_t i = 0; i < n; i++)
        x[i] *= alpha;
    round_span(k, dt, x, n);
}

static void attention_bwd_half(struct mc_backend *be, const struct mc_attention_desc *d,
                               const void *qkv, const void *probs, const void *dctx, void *dqkv,
                               struct mc_attention_work *w)
{
    const struct mc_cpu_kernels *k = mc_cpu_kernels_of(be);
    const char *op = "attention_bwd";
    int64_t s = d->s, ss = s * s, nbh = d->b * d->heads, T = d->b * s, hn = d->hn;
    int64_t ldc = d->b * d->ctx_ld, per_group = d->heads / d->groups;
    float *qf = mc_cpu_widen(k, qkv, d->dt, T * d->qkv_ld, op);
    float *dcf = mc_cpu_widen(k, dctx, d->dt, T * d->ctx_ld, op);
    /* pd: the 16-bit probs after dropout (the second bmm's input), as fp32 */
    float *pd = mc_cpu_widen(k, probs, d->dt, nbh * ss, op);
    if (d->dropout > 0.0f) {
        attention_keep(k, d, w->keep);
        half_dropout(k, d, pd, w->keep, nbh * ss);
    }
    float *dp = mc_cpu_scratch(nbh * ss, op);
    uint16_t *dq16 = dqkv;
    /* one task per (batch row, group): dprobs per head, dv added over its heads in order */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < d->b * d->groups; i++) {
        int64_t bi = i / d->groups, g = i % d->groups;
        float *tmp = mc_cpu_scratch(s * hn, op), *acc = mc_cpu_scratch(s * hn, op);
        for (int64_t hl = g * per_group; hl < (g + 1) * per_group; hl++) {
            struct heads hp = head_ptrs(d, qf, bi, hl);
            const float *dc = dcf + bi * d->ctx_ld + hl * hn;
            int64_t off = (bi * d->heads + hl) * ss;
            k->gemm(false, true, s, s, hn, 1.0f, dc, ldc, hp.v, hp.ld, 0.0f, dp + off, s);
            k->gemm(true, false, s, hn, s, 1.0f, pd + off, s, dc, ldc, 0.0f, tmp, hn);
            round_scaled(k, d->dt, tmp, s * hn, 1.0f);
            add_heads(acc, tmp, s * hn, hl == g * per_group);
        }
        struct head_offs dh = head_offs(d, bi, g * per_group);
        store_head(k, d->dt, dq16 + dh.v, dh.ld, acc, s, hn);
        mc_cpu_release(tmp);
        mc_cpu_release(acc);
    }
    round_inplace(k, d->dt, dp, nbh * ss); /* dprobs (bmm output) in 16 bits */
    if (d->dropout > 0.0f)
        half_dropout(k, d, dp, w->keep, nbh * ss);
    /* the softmax backward in fp32 from the probs torch saved: fp32 (recomputed) with
     * softmax_in_fp32, else the 16-bit ones */
    float *pf = pd;
    if (d->softmax_in_fp32) {
        half_probs(k, d, qf, pd);
    } else {
        k->convert(pd, MC_DTYPE_F32, probs, d->dt, nbh * ss);
    }
    k->masked_softmax_bwd(dp, pf, nbh, s, s, d->mult);
    zero_masked(d, dp);
    round_inplace(k, d->dt, dp, nbh * ss); /* dscores in 16 bits */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < d->b * d->groups; i++) {
        int64_t bi = i / d->groups, g = i % d->groups;
        float *tmp = mc_cpu_scratch(s * hn, op), *acc = mc_cpu_scratch(s * hn, op);
        for (int64_t hl = g * per_group; hl < (g + 1) * per_group; hl++) {
            struct heads hp = head_ptrs(d, qf, bi, hl);
            struct head_offs dh = head_offs(d, bi, hl);
            int64_t off = (bi * d->heads + hl) * ss;
            k->gemm(false, false, s, hn, s, 1.0f, dp + off, s, hp.k, hp.ld, 0.0f, tmp, hn);
            round_scaled(k, d->dt, tmp, s * hn, d->alpha);
            store_head(k, d->dt, dq16 + dh.q, dh.ld, tmp, s, hn);
            k->gemm(true, false, s, hn, s, 1.0f, dp + off, s, hp.q, hp.ld, 0.0f, tmp, hn);
            round_scaled(k, d->dt, tmp, s * hn, d->alpha);
            add_heads(acc, tmp, s * hn, hl == g * per_group);
        }
        struct head_offs dh = head_offs(d, bi, g * per_group);
        store_head(k, d->dt, dq16 + dh.k, dh.ld, acc, s, hn);
        mc_cpu_release(tmp);
        mc_cpu_release(acc);
    }
    mc_cpu_release(qf);
    mc_cpu_release(dcf);
    mc_cpu_release(pd);
    mc_cpu_release(dp);
}
