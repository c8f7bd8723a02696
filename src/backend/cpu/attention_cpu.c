/* The CPU backend's attention op pair (backend.h, struct mc_attention_desc): the reference
 * composition of per-head GEMMs, the masked softmax and the dropout of the probabilities, run
 * on the backend's kernel table. Query head i of a group reads that group's key and value head
 * (the repeat_interleave of Megatron) in place from the fused QKV rows. A device backend may
 * fuse the whole op instead (flash attention); the numbers here are the definition. */
#include "backend/cpu/cpu_backend.h"

#include "core/rng.h"

/* Pointers to head hl of batch row bi inside the fused QKV activations. */
struct heads {
    const float *q, *k, *v;
    int64_t ld; /* row stride between consecutive sequence positions */
};

static struct heads head_ptrs(const struct mc_attention_desc *d, const float *qkv, int64_t bi,
                              int64_t hl)
{
    int64_t per_group = d->heads / d->groups;
    int64_t g = hl / per_group, qi = hl % per_group;
    const float *base = qkv + bi * d->qkv_ld + g * (per_group + 2) * d->hn;
    return (struct heads){base + qi * d->hn, base + per_group * d->hn,
                          base + (per_group + 1) * d->hn, d->b * d->qkv_ld};
}

/* keep masks for every (b, local head) block: element index in the GLOBAL [b, heads, s, s]
 * layout, so the masks do not depend on the tensor-parallel size. */
static void attention_keep(const struct mc_attention_desc *d, uint8_t *keep)
{
    int64_t ss = d->s * d->s;
    const struct mc_dropout_stream *r = &d->rng;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d->b * d->heads; i++) {
        int64_t bi = i / d->heads, head = d->head_first + i % d->heads;
        mc_rng_dropout_mask(keep + i * ss, (bi * d->heads_total + head) * ss, ss, r->seed,
                            r->c1_hi, r->c2, r->c3, d->dropout);
    }
}

void mc_cpu_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                          const void *qkv_, void *probs_, void *ctx_, struct mc_attention_work *w)
{
    mc_cpu_need_f32(d->dt, "attention_fwd");
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
    if (d->mask) {
        for (int64_t bi = 0; bi < d->b; bi++)
            k->masked_softmax_fwd(probs + bi * d->heads * ss, d->heads, s, s, d->mult,
                                  d->mask + bi * ss);
    } else {
        k->masked_softmax_fwd(probs, nbh, s, s, d->mult, NULL);
    }
    const float *p = probs;
    if (d->dropout > 0.0f) {
        attention_keep(d, w->keep);
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
    mc_cpu_need_f32(d->dt, "attention_bwd");
    const struct mc_cpu_kernels *k = mc_cpu_kernels_of(be);
    const float *qkv = qkv_, *probs = probs_, *dctx = dctx_;
    float *dqkv = dqkv_;
    int64_t s = d->s, ss = s * s, nbh = d->b * d->heads, ldc = d->b * d->ctx_ld;
    int64_t per_group = d->heads / d->groups;
    float scale = 1.0f / (1.0f - d->dropout);
    const float *pd = probs;
    if (d->dropout > 0.0f) {
        attention_keep(d, w->keep);
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
