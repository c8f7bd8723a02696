/* The CPU backend's flash attention op pair (backend.h: flash_attention_fwd/_bwd), the
 * FlashAttention-2 algorithm (Dao, 2023) on CPU tiles: the same attention as the unfused op
 * (attention_cpu.c, Megatron's DotProductAttention: scores (q k^T * alpha) * mult, masked
 * positions -10000, softmax, dropout, @ v) without the [b, heads, s, s] probabilities.
 *
 * Forward, one task per (batch row, head, query tile of BR rows): the key tiles of BC keys
 * stream past the query tile with the online softmax (running max m and sum l per row; the
 * output rescaled by exp(m_old - m_new)); only ctx and the row log-sum-exp lse = m + log(l)
 * (fp32) are kept; each group's K^T tiles and V rows are packed once, as fp32, before the
 * query tiles read them (and the backward packs a group's q and dctx rows once per task).
 * Backward recomputes each tile's probabilities as exp(score - lse) and uses
 * D = rowsum(dctx * ctx) for the softmax backward (dS = P * (dP - D)); one task per (batch row,
 * key/value group) walks the key tiles, and for each the group's query heads in head order
 * and their query tiles, so dK and dV of the group are summed in a fixed order and dQ has a
 * single owner: bit-identical results for any thread count.
 *
 * Causal (desc->mask NULL): key tiles wholly above the diagonal are never visited (forward:
 * keys past the query tile's last row; backward: query tiles before the key tile); inside a
 * diagonal tile the future keys get -10000 as in the unfused op, whose exp is 0. Explicit
 * masks ([b, s, s], --reset-attention-mask documents): fully masked tiles are skipped, others
 * masked elementwise. A query row with every key masked (the unfused op's uniform row) stops
 * the process with a message: Megatron's masks always leave a row its own position.
 * Sliding window (desc->window W > 0, --sliding-window): query i also masks the keys before
 * i - W; key tiles wholly before the window of a query tile's first row are never visited
 * (forward: keys from the tile holding q0 - W; backward: query tiles after the last query
 * that sees the key tile), the tiles across the window's edge get -10000 elementwise.
 * ALiBi (desc->alibi_slopes): each score gets its head's bias before the online softmax (the
 * causal and window skips stay: the bias does not unmask anything).
 * GQA/MQA: a query head reads its group's K and V rows in place (no repeated copies).
 * Dropout: the keep flag of element (batch row, global head, query, key) of the unfused op's
 * [b, heads_total, s, s] stream (core/rng.h), drawn per tile row in forward and again in
 * backward, so the same element is dropped as in the unfused op; kept values scaled by
 * 1 / (1 - p) (rounded to the dtype for 16-bit inputs, as torch's noise tensor is).
 * 16-bit inputs: tiles widened to fp32 (exact), every statistic and sum in fp32, ctx and each
 * gradient rounded once (dK, dV of a group summed in fp32 first). */
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/half_cpu.h"
#include "backend/cpu/kernels/flash_attention.h"
#include "core/dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Tile sizes: a 64 x 128 fp32 tile is 32 KiB, so the working set of one tile pair (Q, K^T, V,
 * scores, output) stays in a 512 KiB-1 MiB L2. */
#define BR 64 /* query rows per tile */
#define BC 64 /* keys per tile */

/* Reference tiles on the reference table (MC_KERNELS=ref, "cpu-ref"), else AVX2 + FMA where
 * CPUID and XGETBV allow, else the references. */
static const struct mc_flash_kernels *flash_kernels(const struct mc_backend *be)
{
    const struct mc_cpu_features *f = mc_cpu_features();
    if (mc_cpu_kernels_of(be) == mc_cpu_kernels_ref() || !(f->avx2 && f->fma))
        return mc_flash_kernels_ref();
    return mc_flash_kernels_avx2();
}

const char *mc_cpu_flash_kernels_name(const struct mc_backend *be)
{
    return flash_kernels(be)->name;
}

/* One call's fixed facts. */
struct fa {
    const struct mc_attention_desc *d;
    const struct mc_cpu_kernels *k;
    const struct mc_flash_kernels *fk;
    size_t es;        /* element size of dt */
    int64_t qld;      /* row stride of qkv between sequence positions (b * qkv_ld) */
    int64_t cld;      /* row stride of ctx (b * ctx_ld) */
    int64_t per_group;
    float drop_scale; /* 1 / (1 - p), rounded to dt for 16-bit */
};

static struct fa fa_init(struct mc_backend *be, const struct mc_attention_desc *d)
{
    struct fa f = {d, mc_cpu_kernels_of(be), flash_kernels(be), mc_dtype_size(d->dt),
                   d->b * d->qkv_ld, d->b * d->ctx_ld, d->heads / d->groups, 1.0f};
    if (d->dropout > 0.0f) {
        f.drop_scale = 1.0f / (1.0f - d->dropout);
        if (d->dt == MC_DTYPE_BF16)
            f.drop_scale = mc_bf16_to_f32(mc_f32_to_bf16(f.drop_scale));
        else if (d->dt == MC_DTYPE_F16)
            f.drop_scale = mc_f16_to_f32(mc_f32_to_f16(f.drop_scale));
    }
    return f;
}

/* Element offset of query head hl's q columns, and its group's k and v, in batch row bi. */
static int64_t q_off(const struct fa *f, int64_t bi, int64_t hl)
{
    int64_t g = hl / f->per_group;
    return bi * f->d->qkv_ld + g * (f->per_group + 2) * f->d->hn + (hl % f->per_group) * f->d->hn;
}
static int64_t k_off(const struct fa *f, int64_t bi, int64_t g)
{
    return bi * f->d->qkv_ld + (g * (f->per_group + 2) + f->per_group) * f->d->hn;
}

/* n rows of hn values from element off of src (row stride ld) as fp32: in place for fp32
 * (*ld_out = ld), else widened into buf (*ld_out = hn). */
static const float *rows(const struct fa *f, const void *src, int64_t off, int64_t ld, int64_t n,
                         float *buf, int64_t *ld_out)
{
    int64_t hn = f->d->hn;
    if (f->d->dt == MC_DTYPE_F32) {
        *ld_out = ld;
        return (const float *)src + off;
    }
    for (int64_t r = 0; r < n; r++)
        f->k->convert(buf + r * hn, MC_DTYPE_F32, (const char *)src + (size_t)(off + r * ld) * f->es,
                      f->d->dt, hn);
    *ld_out = hn;
    return buf;
}

/* dst rows (dtype dt, from element off, stride ld) = scale * src[n, hn] (stride hn) */
static void store_rows(const struct fa *f, void *dst, int64_t off, int64_t ld, const float *src,
                       int64_t n, float scale, float *tmp)
{
    int64_t hn = f->d->hn;
    for (int64_t r = 0; r < n; r++) {
        const float *s = src + r * hn;
        if (scale != 1.0f) {
            for (int64_t c = 0; c < hn; c++)
                tmp[c] = s[c] * scale;
            s = tmp;
        }
        f->k->convert((char *)dst + (size_t)(off + r * ld) * f->es, f->d->dt, s, MC_DTYPE_F32, hn);
    }
}

/* T[c * BC + j] = X[j * ld + c]: K or V rows as the B operand of a q k^T style product */
static void pack_t(float *T, const float *X, int64_t ld, int64_t n, int64_t hn)
{
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < hn; c++)
            T[c * BC + j] = X[j * ld + c];
}

/* The explicit mask over the tile: 0 nothing masked, 1 some, 2 everything. */
static int mask_state(const uint8_t *mb, int64_t s, int64_t q0, int64_t nq, int64_t k0,
                      int64_t nk)
{
    int64_t masked = 0;
    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < nk; j++)
            masked += mb[(q0 + i) * s + k0 + j] != 0;
    return masked == 0 ? 0 : masked == nq * nk ? 2 : 1;
}

/* Keys 0 .. n - 1 of the tile from key k0 that query q sees no more (before q - window). */
static int64_t window_lo(const struct mc_attention_desc *d, int64_t q, int64_t k0, int64_t nk)
{
    if (!d->window || q - d->window <= k0)
        return 0;
    return q - d->window - k0 < nk ? q - d->window - k0 : nk;
}

/* First key tile (a multiple of BC) that any of the query rows from q0 sees. */
static int64_t window_first_tile(const struct mc_attention_desc *d, int64_t q0)
{
    return d->window && q0 > d->window ? (q0 - d->window) / BC * BC : 0;
}

/* The scores of a tile of head hl in place on S [nq, BC]: (dot * alpha) * mult (+ the ALiBi
 * bias), masked -10000 (the unfused op's masked_fill). mb: this batch row's explicit mask, or
 * NULL for causal. */
static void tile_scores(const struct fa *f, float *S, const uint8_t *mb, int mstate, int64_t hl,
                        int64_t q0, int64_t nq, int64_t k0, int64_t nk)
{
    const struct mc_attention_desc *d = f->d;
    bool diag = !mb && k0 + nk - 1 > q0; /* some key of the tile is after some query */
    for (int64_t i = 0; i < nq; i++) {
        float *row = S + i * BC;
        f->fk->scores(row, nk, d->alpha, d->mult);
        if (d->alibi_slopes) /* added after the mult scaling: the unfused op adds bias / mult */
            for (int64_t j = 0; j < nk; j++)
                row[j] += mc_cpu_alibi_bias(d, hl, q0 + i, k0 + j);
        if (diag)
            for (int64_t j = q0 + i + 1 - k0 < 0 ? 0 : q0 + i + 1 - k0; j < nk; j++)
                row[j] = -10000.0f;
        for (int64_t j = 0; j < window_lo(d, q0 + i, k0, nk); j++)
            row[j] = -10000.0f;
        if (mb && mstate == 1) {
            const uint8_t *mr = mb + (q0 + i) * d->s + k0;
            for (int64_t j = 0; j < nk; j++)
                if (mr[j])
                    row[j] = -10000.0f;
        }
    }
}

/* Keep flags of the tile rows (keys k0 .. k0 + nk) of head hl in the global dropout stream. */
static void tile_keep(const struct fa *f, uint8_t *keep, int64_t bi, int64_t hl, int64_t q0,
                      int64_t nq, int64_t k0, int64_t nk)
{
    const struct mc_attention_desc *d = f->d;
    const struct mc_dropout_stream *r = &d->rng;
    int64_t base = (bi * d->heads_total + d->head_first + hl) * d->s * d->s;
    for (int64_t i = 0; i < nq; i++)
        f->k->dropout_mask(keep + i * BC, base + (q0 + i) * d->s + k0, nk, r->seed, r->c1_hi,
                           r->c2, r->c3, d->dropout);
}

/* Whether query row q of batch row bi's explicit mask masks every key (causal and window masks
 * always leave a query its own position). Asked only of a row whose running max stayed at
 * -inf or the masked fill: a row of NaN scores (a diverged run) has unmasked keys and goes on
 * to NaN outputs, as the unfused op's softmax does, for the run's NaN checks to report. */
static bool row_all_masked(const struct mc_attention_desc *d, int64_t bi, int64_t q)
{
    if (!d->mask)
        return false;
    const uint8_t *mr = d->mask + (bi * d->s + q) * d->s;
    for (int64_t j = 0; j < d->s; j++)
        if (!mr[j])
            return false;
    return true;
}

static _Noreturn void all_masked(int64_t bi, int64_t q)
{
    mc_log(MC_LOG_ERROR, "flash attention: query %lld of batch row %lld has every key masked "
           "(the unfused attention gives it uniform probabilities; flash attention does not "
           "implement that case: use --attention-backend unfused)", (long long)q, (long long)bi);
    abort();
}

/* ---- forward ------------------------------------------------------------------------------ */

struct fwd_buf {
    float *q, *S, *O, *m, *l;
    uint8_t *keep;
};

static struct fwd_buf fwd_buf(float *base, int64_t hn)
{
    struct fwd_buf b;
    b.q = base; base += BR * hn;
    b.S = base; base += BR * BC;
    b.O = base; base += BR * hn;
    b.m = base; base += BR;
    b.l = base; base += BR;
    b.keep = (uint8_t *)base; /* BR * BC bytes */
    return b;
}
#define FWD_FLOATS(hn) (2 * BR * (hn) + BR * BC + 2 * BR + BR * BC / 4 + 64)

/* K and V of one (batch row, group) as fp32, packed once before the query tiles read them:
 * K^T tile by tile (kt + k0 * hn: [hn, BC], the B operand of q k^T) and V rows contiguous
 * ([s, hn]). Every query tile of the group's heads reads them, so packing per (query tile, key
 * tile) pair would repeat the transposes s / BR times, and reading K, V in place walks one
 * page per row (rows are b * qkv_ld apart), past the TLB from s = 4k. */
struct kv_pack {
    float *kt, *v;
};

static struct kv_pack kv_pack_of(float *base, int64_t s, int64_t hn, int64_t bg, int64_t ng)
{
    int64_t panel = (s + BC - 1) / BC * BC * hn;
    struct kv_pack p = {base + bg * panel, base + (ng + bg) * panel};
    return p;
}

/* n rows of hn values from element off of src (row stride f->qld) into dst [n, hn] as fp32 */
static void copy_rows(const struct fa *f, const void *src, int64_t off, int64_t n, float *dst)
{
    int64_t hn = f->d->hn, ld;
    const float *r = rows(f, src, off, f->qld, n, dst, &ld);
    if (r != dst)
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * hn, r + i * ld, sizeof(float) * (size_t)hn);
}

/* Key tile kt of group g in batch row bi into its packs; tmp holds BC * hn floats. */
static void kv_pack_tile(const struct fa *f, const void *qkv, struct kv_pack p, int64_t bi,
                         int64_t g, int64_t kt, float *tmp)
{
    int64_t s = f->d->s, hn = f->d->hn, k0 = kt * BC, nk = s - k0 < BC ? s - k0 : BC;
    int64_t ko = k_off(f, bi, g);
    copy_rows(f, qkv, ko + k0 * f->qld, nk, tmp);
    pack_t(p.kt + k0 * hn, tmp, hn, nk, hn);
    copy_rows(f, qkv, ko + hn + k0 * f->qld, nk, p.v + k0 * hn);
}

/* Query tile qt of head hl in batch row bi: ctx rows and lse. */
static void fwd_tile(const struct fa *f, const void *qkv, void *ctx, float *lse, int64_t bi,
                     int64_t hl, int64_t qt, const struct kv_pack *kv, struct fwd_buf *b)
{
    const struct mc_attention_desc *d = f->d;
    const struct mc_flash_kernels *fk = f->fk;
    int64_t s = d->s, hn = d->hn, q0 = qt * BR, nq = s - q0 < BR ? s - q0 : BR;
    const uint8_t *mb = d->mask ? d->mask + bi * s * s : NULL;
    int64_t qld, kend = mb ? s : q0 + nq;
    const float *Q = rows(f, qkv, q_off(f, bi, hl) + q0 * f->qld, f->qld, nq, b->q, &qld);
    for (int64_t i = 0; i < nq; i++) {
        b->m[i] = -INFINITY;
        b->l[i] = 0.0f;
    }
    memset(b->O, 0, sizeof(float) * (size_t)(nq * hn));
    for (int64_t k0 = window_first_tile(d, q0); k0 < kend; k0 += BC) {
        int64_t nk = kend - k0 < BC ? kend - k0 : BC;
        int ms = mb ? mask_state(mb, s, q0, nq, k0, nk) : 0;
        if (ms == 2)
            continue;
        const float *KT = kv->kt + k0 * hn, *V = kv->v + k0 * hn;
        fk->gemm_nn(b->S, BC, Q, qld, KT, BC, nq, nk, hn, false);
        tile_scores(f, b->S, mb, ms, hl, q0, nq, k0, nk);
        if (d->dropout > 0.0f)
            tile_keep(f, b->keep, bi, hl, q0, nq, k0, nk);
        for (int64_t i = 0; i < nq; i++) {
            float *row = b->S + i * BC, mx = fk->row_max(row, nk, b->m[i]);
            float corr = b->m[i] == -INFINITY ? 0.0f : expf(b->m[i] - mx);
            b->l[i] = b->l[i] * corr + fk->exp_sum(row, row, nk, mx);
            b->m[i] = mx;
            if (corr != 1.0f)
                fk->scale(b->O + i * hn, hn, corr);
            if (d->dropout > 0.0f) {
                const uint8_t *kp = b->keep + i * BC;
                for (int64_t j = 0; j < nk; j++)
                    row[j] = kp[j] ? row[j] * f->drop_scale : 0.0f;
            }
        }
        fk->gemm_nn(b->O, hn, b->S, BC, V, hn, nq, hn, nk, true);
    }
    for (int64_t i = 0; i < nq; i++) {
        if ((b->m[i] == -INFINITY || b->m[i] == -10000.0f) && row_all_masked(d, bi, q0 + i))
            all_masked(bi, q0 + i);
        fk->scale(b->O + i * hn, hn, 1.0f / b->l[i]);
        lse[(bi * d->heads + hl) * s + q0 + i] = b->m[i] + logf(b->l[i]);
    }
    int64_t co = bi * d->ctx_ld + hl * hn + q0 * f->cld;
    if (d->dt == MC_DTYPE_F32) {
        for (int64_t i = 0; i < nq; i++)
            memcpy((float *)ctx + co + i * f->cld, b->O + i * hn, sizeof(float) * (size_t)hn);
    } else {
        store_rows(f, ctx, co, f->cld, b->O, nq, 1.0f, NULL);
    }
}

void mc_cpu_flash_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                const void *qkv, void *ctx, float *lse)
{
    const char *op = "flash_attention_fwd";
    if (d->dt != MC_DTYPE_F32)
        mc_cpu_need_half(d->dt, op);
    struct fa f = fa_init(be, d);
    int64_t nqt = (d->s + BR - 1) / BR, ntask = d->b * d->heads * nqt;
    int64_t nkt = (d->s + BC - 1) / BC, ng = d->b * d->groups;
    float *kv = mc_cpu_scratch(2 * ng * nkt * BC * d->hn, op);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < ng * nkt; t++) {
        float *tmp = mc_cpu_scratch(BC * d->hn, op);
        int64_t bg = t / nkt;
        kv_pack_tile(&f, qkv, kv_pack_of(kv, d->s, d->hn, bg, ng), bg / d->groups,
                     bg % d->groups, t % nkt, tmp);
        mc_cpu_release(tmp);
    }
    /* the last query tiles have the most keys under causal masking: they go first */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < ntask; t++) {
        int64_t qt = nqt - 1 - t % nqt, bh = t / nqt, bi = bh / d->heads, hl = bh % d->heads;
        float *buf = mc_cpu_scratch(FWD_FLOATS(d->hn), op);
        struct fwd_buf b = fwd_buf(buf, d->hn);
        struct kv_pack p = kv_pack_of(kv, d->s, d->hn, bi * d->groups + hl / f.per_group, ng);
        fwd_tile(&f, qkv, ctx, lse, bi, hl, qt, &p, &b);
        mc_cpu_release(buf);
    }
    mc_cpu_release(kv);
}

/* ---- backward ----------------------------------------------------------------------------- */

struct bwd_buf {
    float *q, *dout, *k, *v, *kt, *vt, *S, *dP, *Pd, *dK, *dV, *tmp;
    uint8_t *keep;
    float *D;  /* [per_group, s] rowsum(dctx * ctx) */
    float *dQ; /* [per_group, s, hn] */
    float *Qp, *Gp; /* [per_group, s, hn]: q and dctx of the group's heads, fp32, contiguous */
};

static struct bwd_buf bwd_buf(float *base, int64_t hn, int64_t s, int64_t per_group)
{
    struct bwd_buf b;
    b.q = base; base += BR * hn;
    b.dout = base; base += BR * hn;
    b.k = base; base += BC * hn;
    b.v = base; base += BC * hn;
    b.kt = base; base += BC * hn;
    b.vt = base; base += BC * hn;
    b.S = base; base += BR * BC;
    b.dP = base; base += BR * BC;
    b.Pd = base; base += BR * BC;
    b.dK = base; base += BC * hn;
    b.dV = base; base += BC * hn;
    b.tmp = base; base += hn;
    b.D = base; base += per_group * s;
    b.dQ = base; base += per_group * s * hn;
    b.Qp = base; base += per_group * s * hn;
    b.Gp = base; base += per_group * s * hn;
    b.keep = (uint8_t *)base;
    return b;
}
#define BWD_FLOATS(hn, s, pg) (2 * BR * (hn) + 6 * BC * (hn) + 3 * BR * BC + (hn) + (pg) * (s) + \
                               3 * (pg) * (s) * (hn) + BR * BC / 4 + 64)

/* D[i] = sum_c dctx[i, c] * ctx[i, c] for every row of head hl (fp32, c ascending) */
static void bwd_rowsum(const struct fa *f, const void *ctx, const void *dctx, int64_t bi,
                       int64_t hl, float *D, struct bwd_buf *b)
{
    const struct mc_attention_desc *d = f->d;
    int64_t hn = d->hn, co = bi * d->ctx_ld + hl * hn;
    for (int64_t q0 = 0; q0 < d->s; q0 += BR) {
        int64_t nq = d->s - q0 < BR ? d->s - q0 : BR, ol, gl;
        const float *O = rows(f, ctx, co + q0 * f->cld, f->cld, nq, b->q, &ol);
        const float *G = rows(f, dctx, co + q0 * f->cld, f->cld, nq, b->dout, &gl);
        for (int64_t i = 0; i < nq; i++) {
            float sum = 0.0f;
            for (int64_t c = 0; c < hn; c++)
                sum += G[i * gl + c] * O[i * ol + c];
            D[q0 + i] = sum;
        }
    }
}

/* One (key tile, query tile) pair of head hl: dV, dK (tile accumulators) and dQ rows. */
static void bwd_pair(const struct fa *f, const void *qkv, const void *dctx, const float *lse,
                     int64_t bi, int64_t hl, int64_t k0, int64_t nk, const float *K,
                     int64_t kld, int64_t q0, int64_t nq, const float *D, float *dQ,
                     const float *Qh, const float *Gh, struct bwd_buf *b)
{
    const struct mc_attention_desc *d = f->d;
    const struct mc_flash_kernels *fk = f->fk;
    int64_t s = d->s, hn = d->hn, qld = hn, gld = hn;
    const uint8_t *mb = d->mask ? d->mask + bi * s * s : NULL;
    int ms = mb ? mask_state(mb, s, q0, nq, k0, nk) : 0;
    if (ms == 2)
        return;
    const float *Q = Qh + q0 * hn, *G = Gh + q0 * hn;
    fk->gemm_nn(b->S, BC, Q, qld, b->kt, BC, nq, nk, hn, false);
    tile_scores(f, b->S, mb, ms, hl, q0, nq, k0, nk);
    const float *L = lse + (bi * d->heads + hl) * s + q0;
    for (int64_t i = 0; i < nq; i++) /* P = exp(score - lse): the forward's probabilities */
        fk->exp_sum(b->S + i * BC, b->S + i * BC, nk, L[i]);
    fk->gemm_nn(b->dP, BC, G, gld, b->vt, BC, nq, nk, hn, false); /* grad of dropped P */
    const float *Pd = b->S;
    if (d->dropout > 0.0f) {
        tile_keep(f, b->keep, bi, hl, q0, nq, k0, nk);
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++) {
                bool kp = b->keep[i * BC + j];
                b->Pd[i * BC + j] = kp ? b->S[i * BC + j] * f->drop_scale : 0.0f;
                b->dP[i * BC + j] = kp ? b->dP[i * BC + j] * f->drop_scale : 0.0f;
            }
        Pd = b->Pd;
    }
    fk->gemm_tn(b->dV, hn, Pd, BC, G, gld, nk, hn, nq, true);
    /* dS = mult * P * (dP - D) in place on dP; masked scores pass no gradient */
    bool diag = !mb && k0 + nk - 1 > q0;
    for (int64_t i = 0; i < nq; i++) {
        float *g = b->dP + i * BC;
        const float *p = b->S + i * BC;
        fk->dsoftmax(g, p, nk, D[q0 + i], d->mult);
        if (diag)
            for (int64_t j = q0 + i + 1 - k0 < 0 ? 0 : q0 + i + 1 - k0; j < nk; j++)
                g[j] = 0.0f;
        for (int64_t j = 0; j < window_lo(d, q0 + i, k0, nk); j++)
            g[j] = 0.0f;
        if (ms == 1) {
            const uint8_t *mr = mb + (q0 + i) * s + k0;
            for (int64_t j = 0; j < nk; j++)
                if (mr[j])
                    g[j] = 0.0f;
        }
    }
    fk->gemm_tn(b->dK, hn, b->dP, BC, Q, qld, nk, hn, nq, true);
    fk->gemm_nn(dQ + q0 * hn, hn, b->dP, BC, K, kld, nq, hn, nk, true);
}

/* Group g of batch row bi: dK, dV of the group and dQ of its query heads. */
static void bwd_group(const struct fa *f, const void *qkv, const void *ctx, const float *lse,
                      const void *dctx, void *dqkv, int64_t bi, int64_t g, struct bwd_buf *b)
{
    const struct mc_attention_desc *d = f->d;
    int64_t s = d->s, hn = d->hn, pg = f->per_group, h0 = g * pg, kld, vld;
    int64_t ko = k_off(f, bi, g);
    for (int64_t h = 0; h < pg; h++)
        bwd_rowsum(f, ctx, dctx, bi, h0 + h, b->D + h * s, b);
    memset(b->dQ, 0, sizeof(float) * (size_t)(pg * s * hn));
    /* q and dctx of the group as fp32 rows, once: every key tile reads them all, and in place
     * each row is on its own page (rows b * qkv_ld apart) */
    for (int64_t h = 0; h < pg; h++) {
        int64_t qo = q_off(f, bi, h0 + h), co = bi * d->ctx_ld + (h0 + h) * hn;
        for (int64_t q0 = 0; q0 < s; q0 += BR) {
            int64_t nq = s - q0 < BR ? s - q0 : BR, ld;
            copy_rows(f, qkv, qo + q0 * f->qld, nq, b->Qp + (h * s + q0) * hn);
            const float *G = rows(f, dctx, co + q0 * f->cld, f->cld, nq, b->Gp +
                                  (h * s + q0) * hn, &ld);
            if (G != b->Gp + (h * s + q0) * hn)
                for (int64_t i = 0; i < nq; i++)
                    memcpy(b->Gp + (h * s + q0 + i) * hn, G + i * ld, sizeof(float) * (size_t)hn);
        }
    }
    for (int64_t k0 = 0; k0 < s; k0 += BC) {
        int64_t nk = s - k0 < BC ? s - k0 : BC;
        copy_rows(f, qkv, ko + k0 * f->qld, nk, b->k);
        const float *K = b->k;
        kld = hn;
        const float *V = rows(f, qkv, ko + hn + k0 * f->qld, f->qld, nk, b->v, &vld);
        pack_t(b->kt, K, kld, nk, hn);
        pack_t(b->vt, V, vld, nk, hn);
        memset(b->dK, 0, sizeof(float) * (size_t)(nk * hn));
        memset(b->dV, 0, sizeof(float) * (size_t)(nk * hn));
        /* causal: the query tiles before the one holding query k0 see none of these keys */
        int64_t qstart = d->mask ? 0 : k0 / BR * BR;
        /* window: queries after k0 + nk - 1 + W see none of them either */
        int64_t qend = d->window && k0 + nk + d->window < s ? k0 + nk + d->window : s;
        for (int64_t h = 0; h < pg; h++)
            for (int64_t q0 = qstart; q0 < qend; q0 += BR)
                bwd_pair(f, qkv, dctx, lse, bi, h0 + h, k0, nk, K, kld, q0,
                         s - q0 < BR ? s - q0 : BR, b->D + h * s, b->dQ + h * s * hn,
                         b->Qp + h * s * hn, b->Gp + h * s * hn, b);
        store_rows(f, dqkv, ko + k0 * f->qld, f->qld, b->dK, nk, d->alpha, b->tmp);
        store_rows(f, dqkv, ko + hn + k0 * f->qld, f->qld, b->dV, nk, 1.0f, b->tmp);
    }
    for (int64_t h = 0; h < pg; h++)
        store_rows(f, dqkv, q_off(f, bi, h0 + h), f->qld, b->dQ + h * s * hn, s, d->alpha,
                   b->tmp);
}

void mc_cpu_flash_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                const void *qkv, const void *ctx, const float *lse,
                                const void *dctx, void *dqkv)
{
    const char *op = "flash_attention_bwd";
    if (d->dt != MC_DTYPE_F32)
        mc_cpu_need_half(d->dt, op);
    struct fa f = fa_init(be, d);
    int64_t ntask = d->b * d->groups;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < ntask; t++) {
        float *buf = mc_cpu_scratch(BWD_FLOATS(d->hn, d->s, f.per_group), op);
        struct bwd_buf b = bwd_buf(buf, d->hn, d->s, f.per_group);
        bwd_group(&f, qkv, ctx, lse, dctx, dqkv, t / d->groups, t % d->groups, &b);
        mc_cpu_release(buf);
    }
}
