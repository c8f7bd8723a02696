/* Every backend table that ships is complete: right version, a name, every op slot filled, and
 * supports() answering for the dtype list each op documents (fp32, bf16, fp16 yes, other dtypes
 * and a wrong list length no; GEMM's combinations; convert/accumulate: every pair of F32, BF16,
 * F16); every CPU kernel table (references, references + BLAS, AVX-512) likewise.
 * Then the backend objects: creation by name (an unknown name is refused), the buffer ops
 * round trip, convert and accumulate bit-exact with core/dtype.c on every backend, an op called with an unsupported dtype stops the process with a message, and the
 * attention op pair against a direct evaluation of its definition (GQA, causal and explicit
 * masks, dropout off) and against finite differences for backward. */
#include "backend/backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/dtype.h"
#include "megatron.h"
#include "test.h"

#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*fnptr)(void);

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint64_t rs_next(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static float urand(void) { return (float)(rs_next() >> 40) / 16777216.0f - 0.5f; }

/* The slots of a table from its first op to its end, all function pointers. */
static int count_null_slots(const void *table, size_t first, size_t size, const char *name)
{
    CHECK((size - first) % sizeof(fnptr) == 0); /* nothing but op slots after `first` */
    int nulls = 0;
    for (size_t off = first; off + sizeof(fnptr) <= size; off += sizeof(fnptr)) {
        fnptr f;
        memcpy(&f, (const char *)table + off, sizeof f);
        if (!f) {
            fprintf(stderr, "%s: op slot %zu is NULL\n", name, (off - first) / sizeof(fnptr));
            nulls++;
        }
    }
    return nulls;
}

/* The dtype list length each op documents (backend.h, enum mc_backend_op). */
static int list_len(enum mc_backend_op op)
{
    switch (op) {
    case MC_OP_BUFFER: return 0;
    case MC_OP_GEMM: return 4;
    case MC_OP_ADAMW:
    case MC_OP_SGD:
    case MC_OP_CONVERT:
    case MC_OP_ACCUMULATE: return 2;
    default: return 1;
    }
}

/* convert and accumulate take every pair of F32, BF16, F16 and nothing else. */
static void check_float_pairs(struct mc_backend *be, enum mc_backend_op op)
{
    const enum mc_dtype fl[3] = {MC_DTYPE_F32, MC_DTYPE_BF16, MC_DTYPE_F16};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            enum mc_dtype p[2] = {fl[i], fl[j]};
            CHECK(be->ops->supports(be, op, p, 2));
            enum mc_dtype q[2] = {fl[i], MC_DTYPE_I32}, r[2] = {MC_DTYPE_F64, fl[j]};
            CHECK(!be->ops->supports(be, op, q, 2));
            CHECK(!be->ops->supports(be, op, r, 2));
            CHECK(!be->ops->supports(be, op, p, 1));
        }
}

/* GEMM: {A, B, C, compute}: fp32 throughout, or A = B 16-bit with C of that dtype or fp32, and
 * fp32 compute; nothing else. */
static void check_gemm_types(struct mc_backend *be)
{
    const enum mc_dtype all[4] = {MC_DTYPE_F32, MC_DTYPE_BF16, MC_DTYPE_F16, MC_DTYPE_F64};
    int n_yes = 0;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++)
                for (int k = 0; k < 4; k++) {
                    enum mc_dtype l[4] = {all[a], all[b], all[c], all[k]};
                    bool want = k == 0 && a == b && a < 3 && (c == a || c == 0);
                    bool got = be->ops->supports(be, MC_OP_GEMM, l, 4);
                    if (got != want)
                        fprintf(stderr, "supports(gemm %s %s %s %s) = %d\n", mc_dtype_name(l[0]),
                                mc_dtype_name(l[1]), mc_dtype_name(l[2]), mc_dtype_name(l[3]), got);
                    CHECK(got == want);
                    n_yes += got;
                }
    CHECK(n_yes == 5);
}

static void test_tables(void)
{
    int n = 0;
    for (const struct mc_backend_ops *t; (t = mc_backend_table(n)); n++) {
        CHECK(t->version == MC_BACKEND_VERSION);
        CHECK(t->name && *t->name);
        CHECK(t->supports != NULL);
        CHECK(count_null_slots(t, offsetof(struct mc_backend_ops, alloc), sizeof *t, t->name) == 0);
        struct mc_backend *be = NULL;
        CHECK(mc_backend_create(t->name, &be) == MC_OK && be && be->ops == t);
        if (!be || !t->supports)
            continue;
        for (int op = 0; op < MC_OP_COUNT; op++) {
            if (op == MC_OP_CONVERT || op == MC_OP_ACCUMULATE) {
                check_float_pairs(be, (enum mc_backend_op)op);
                continue;
            }
            int len = list_len((enum mc_backend_op)op);
            enum mc_dtype want = op == MC_OP_DROPOUT_MASK ? MC_DTYPE_U8 : MC_DTYPE_F32;
            enum mc_dtype f32[4] = {want, want, want, want};
            if (!t->supports(be, (enum mc_backend_op)op, f32, len)) {
                fprintf(stderr, "%s: supports(op %d, fp32) is false\n", t->name, op);
                CHECK(0);
            }
            if (len > 0)
                CHECK(!t->supports(be, (enum mc_backend_op)op, f32, len - 1));
            if (op == MC_OP_GEMM) {
                check_gemm_types(be);
                continue;
            }
            /* every tensor op takes BF16 and F16 in any position; F64 and I32 nowhere */
            for (int pos = 0; pos < len; pos++) {
                enum mc_dtype l[4] = {want, want, want, want};
                const enum mc_dtype yes[2] = {MC_DTYPE_BF16, MC_DTYPE_F16};
                const enum mc_dtype no[2] = {MC_DTYPE_F64, MC_DTYPE_I32};
                for (int k = 0; k < 2; k++) {
                    l[pos] = yes[k];
                    bool ok = t->supports(be, (enum mc_backend_op)op, l, len);
                    CHECK(op == MC_OP_DROPOUT_MASK ? !ok : ok);
                    l[pos] = no[k];
                    CHECK(!t->supports(be, (enum mc_backend_op)op, l, len));
                }
            }
        }
        CHECK(!t->supports(be, MC_OP_COUNT, NULL, 0));
        mc_backend_free(be);
    }
    CHECK(n >= 1);
    printf("backend tables: %d\n", n);

    const struct mc_cpu_kernels *k[] = {mc_cpu_kernels_ref(), mc_cpu_kernels_ref_blas(),
                                        mc_cpu_kernels_avx2(), mc_cpu_kernels_avx512()};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        CHECK(k[i]->version == MC_CPU_KERNELS_VERSION && k[i]->name && *k[i]->name);
        CHECK(count_null_slots(k[i], offsetof(struct mc_cpu_kernels, gemm), sizeof *k[i],
                               k[i]->name) == 0);
    }
}

static void test_create(void)
{
    struct mc_backend *be = (void *)1;
    CHECK(mc_backend_create("tpu-v9", &be) == MC_ERR_CONFIG && be == NULL);
    CHECK(strstr(mc_last_error(), "tpu-v9") != NULL);
    CHECK(mc_backend_create("cpu-ref", &be) == MC_OK);
    CHECK(be && !strcmp(be->name, "cpu-ref") && be->n_threads >= 1);
    mc_backend_free(be);
    CHECK(mc_backend_create(NULL, &be) == MC_OK && be && be->impl == mc_cpu_kernels_select());
    mc_backend_free(be);
    mc_backend_free(NULL);
}

static void test_buffers(void)
{
    struct mc_backend *be;
    CHECK(mc_backend_create("cpu", &be) == MC_OK);
    const struct mc_backend_ops *o = be->ops;
    float host[37], back[37];
    for (int i = 0; i < 37; i++)
        host[i] = (float)i * 0.5f - 3.0f;
    float *a = o->alloc(be, sizeof host), *b = o->alloc(be, sizeof host);
    CHECK(a && b && ((uintptr_t)a % 16) == 0);
    o->set(be, a, 0, sizeof host);
    o->copy_to_host(be, back, a, sizeof back);
    CHECK(back[0] == 0.0f && back[36] == 0.0f);
    o->copy_to_backend(be, a, host, sizeof host);
    o->copy(be, b, a, sizeof host);
    o->scale(be, MC_DTYPE_F32, b, 2.0f, 37);
    o->sync(be);
    o->copy_to_host(be, back, b, sizeof back);
    int same = 1;
    for (int i = 0; i < 37; i++)
        same &= back[i] == 2.0f * host[i];
    CHECK(same);
    double sum, count;
    float mask[37];
    for (int i = 0; i < 37; i++)
        mask[i] = (float)(i % 3 == 0);
    o->masked_loss(be, MC_DTYPE_F32, &sum, &count, a, mask, 37);
    double want = 0;
    for (int i = 0; i < 37; i += 3)
        want += host[i];
    CHECK(sum == want && count == 13.0);
    o->masked_loss_bwd(be, back, mask, 0.25f, 37);
    CHECK(back[0] == 0.25f && back[1] == 0.0f && back[36] == 0.25f);
    o->free(be, a);
    o->free(be, b);
    o->free(be, NULL);
    mc_backend_free(be);
}

/* An op called with a dtype the backend does not implement ends the process (abort), it does
 * not compute garbage. Checked in a child with stderr kept. */
static void test_unsupported_dtype_stops(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct mc_backend *be;
        if (mc_backend_create("cpu", &be) != MC_OK)
            _exit(3);
        float x[4] = {1, 2, 3, 4};
        be->ops->scale(be, MC_DTYPE_F64, x, 2.0f, 4);
        _exit(0); /* reached only if the op ran */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

/* cpu-sim takes only its own memory: in a child (stderr to a pipe), an op on the inside of a
 * live block runs, then the op given `which` (0: a host array, 1: one past the block's end,
 * 2: a freed block) stops the process with the op and argument named. */
static void sim_child(int which, int fd)
{
    dup2(fd, 2);
    struct mc_backend *be;
    if (mc_backend_create("cpu-sim", &be) != MC_OK)
        _exit(3);
    float host[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float *a = be->ops->alloc(be, sizeof host), *dead = be->ops->alloc(be, sizeof host);
    be->ops->copy_to_backend(be, a, host, sizeof host);
    be->ops->scale(be, MC_DTYPE_F32, a + 4, 2.0f, 4); /* inside a block: runs */
    be->ops->copy_to_host(be, host, a, sizeof host);
    if (host[3] != 4.0f || host[4] != 10.0f)
        _exit(4);
    be->ops->free(be, dead);
    float *bad = which == 0 ? host : which == 1 ? a + 8 : dead;
    be->ops->scale(be, MC_DTYPE_F32, bad, 2.0f, 1);
    _exit(0); /* reached only if the op ran */
}

static void test_sim_rejects_foreign_memory(void)
{
    for (int which = 0; which < 3; which++) {
        int fds[2];
        CHECK(pipe(fds) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            sim_child(which, fds[1]);
        }
        close(fds[1]);
        char err[1024] = {0};
        size_t got = 0;
        ssize_t r;
        while (got < sizeof err - 1 && (r = read(fds[0], err + got, sizeof err - 1 - got)) > 0)
            got += (size_t)r;
        close(fds[0]);
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
        CHECK(strstr(err, "backend cpu-sim: op scale: argument x") != NULL);
    }
}

/* ---- convert and accumulate against core/dtype.c ----------------------------------------- */

/* Inputs that exercise the rounding: ties at both precisions, subnormals of both 16-bit
 * formats, values past fp16's range and the rounding edge 65520, infinities, NaN, zeros. */
static void convert_inputs(float *x, int n)
{
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 1.00390625f /* bf16 tie */,
                             1.01171875f, 1.00048828125f /* fp16 tie */, 1.00146484375f,
                             65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f, 6.0e-8f, 3.0e-8f,
                             2.9802322e-8f, 1e-40f, -1e-45f, 3.4e38f, INFINITY, -INFINITY,
                             NAN, -NAN, 1.17549435e-38f};
    int ns = (int)(sizeof special / sizeof *special);
    for (int i = 0; i < n; i++) {
        if (i < ns) {
            x[i] = special[i];
            continue;
        }
        uint32_t u = (uint32_t)(rs_next() >> 32); /* any bit pattern, then a few scales */
        if (i % 3 == 0)
            u = (u & 0x807fffffu) | ((uint32_t)(100 + i % 50) << 23);
        memcpy(&x[i], &u, 4);
    }
}

static float as_f32(const void *p, enum mc_dtype t, int i)
{
    return (float)mc_dtype_get_f64(p, t, i); /* exact for F32, BF16, F16 */
}

/* want = core/dtype.c's conversion of each element of src (src_dt) into dst_dt. */
static void convert_want(void *want, enum mc_dtype dd, const void *src, enum mc_dtype sd, int n)
{
    if (dd == sd) {
        memcpy(want, src, (size_t)n * mc_dtype_size(dd));
        return;
    }
    float *f = malloc(sizeof(float) * (size_t)n);
    mc_dtype_to_f32(f, src, sd, n);
    mc_dtype_from_f32(want, dd, f, n);
    free(f);
}

static void test_convert_accumulate(const char *name)
{
    enum { N = 70001 }; /* past the threading threshold, odd */
    const enum mc_dtype fl[3] = {MC_DTYPE_F32, MC_DTYPE_BF16, MC_DTYPE_F16};
    struct mc_backend *be;
    CHECK(mc_backend_create(name, &be) == MC_OK);
    const struct mc_backend_ops *o = be->ops;
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    convert_inputs(x, N);
    convert_inputs(y, N);
    for (int i = 0; i < N; i++) /* y: a permutation, so dst and src differ per element */
        y[i] = x[(i * 7919) % N];
    void *src = malloc(4 * N), *dst0 = malloc(4 * N), *want = malloc(4 * N), *got = malloc(4 * N);
    void *bsrc = o->alloc(be, 4 * N), *bdst = o->alloc(be, 4 * N);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            enum mc_dtype dd = fl[i], sd = fl[j];
            size_t ds = mc_dtype_size(dd), ss = mc_dtype_size(sd);
            mc_dtype_from_f32(src, sd, x, N);
            /* convert */
            convert_want(want, dd, src, sd, N);
            o->copy_to_backend(be, bsrc, src, ss * N);
            o->convert(be, bdst, dd, bsrc, sd, N);
            o->copy_to_host(be, got, bdst, ds * N);
            if (memcmp(got, want, ds * N)) {
                fprintf(stderr, "%s: convert %s <- %s differs from core/dtype.c\n", name,
                        mc_dtype_name(dd), mc_dtype_name(sd));
                CHECK(0);
            }
            /* accumulate: want = round_dd(float(dst) + float(src)) with dtype.c's rounding */
            mc_dtype_from_f32(dst0, dd, y, N);
            float *sum = malloc(sizeof(float) * N);
            for (int k = 0; k < N; k++) {
                float a = as_f32(dst0, dd, k), b = as_f32(src, sd, k);
                sum[k] = a != a ? a + a : a + b; /* NaN + NaN keeps a's payload (addps) */
            }
            mc_dtype_from_f32(want, dd, sum, N);
            free(sum);
            o->copy_to_backend(be, bdst, dst0, ds * N);
            o->accumulate(be, bdst, dd, bsrc, sd, N);
            o->copy_to_host(be, got, bdst, ds * N);
            if (memcmp(got, want, ds * N)) {
                fprintf(stderr, "%s: accumulate %s += %s differs from core/dtype.c\n", name,
                        mc_dtype_name(dd), mc_dtype_name(sd));
                CHECK(0);
            }
        }
    /* the rounding really happens: 1 + 2^-9 is a bf16 tie that goes to even (1.0) */
    uint16_t h;
    float one_tie = 1.001953125f;
    float *bx = o->alloc(be, 4);
    uint16_t *bh = o->alloc(be, 2);
    o->copy_to_backend(be, bx, &one_tie, 4);
    o->convert(be, bh, MC_DTYPE_BF16, bx, MC_DTYPE_F32, 1);
    o->copy_to_host(be, &h, bh, 2);
    CHECK(h == 0x3f80);
    o->free(be, bx);
    o->free(be, bh);
    o->free(be, bsrc);
    o->free(be, bdst);
    free(x); free(y); free(src); free(dst0); free(want); free(got);
    mc_backend_free(be);
}

/* ---- attention against its definition --------------------------------------------------- */


/* Direct evaluation in double: ctx[t=(si,bi), head i] = sum_j p_ij v_j with
 * p = softmax_j(masked ? -10000 : alpha * mult * q_i . k_j). */
static void naive_attention(const struct mc_attention_desc *d, const float *qkv, double *ctx)
{
    int64_t pg = d->heads / d->groups, s = d->s;
    double *sc = malloc(sizeof(double) * (size_t)s);
    for (int64_t bi = 0; bi < d->b; bi++)
        for (int64_t h = 0; h < d->heads; h++) {
            int64_t g = h / pg, qo = (g * (pg + 2) + h % pg) * d->hn;
            int64_t ko = (g * (pg + 2) + pg) * d->hn, vo = ko + d->hn;
            for (int64_t i = 0; i < s; i++) {
                const float *q = qkv + (i * d->b + bi) * d->qkv_ld + qo;
                double mx = -1e300, z = 0;
                for (int64_t j = 0; j < s; j++) {
                    const float *kk = qkv + (j * d->b + bi) * d->qkv_ld + ko;
                    double dot = 0;
                    for (int64_t c = 0; c < d->hn; c++)
                        dot += (double)q[c] * kk[c];
                    bool masked = d->mask ? d->mask[(bi * s + i) * s + j] : j > i;
                    sc[j] = masked ? -10000.0 : dot * d->alpha * d->mult;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int64_t j = 0; j < s; j++)
                    z += (sc[j] = exp(sc[j] - mx));
                for (int64_t c = 0; c < d->hn; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < s; j++)
                        acc += sc[j] / z * qkv[(j * d->b + bi) * d->qkv_ld + vo + c];
                    ctx[(i * d->b + bi) * d->ctx_ld + h * d->hn + c] = acc;
                }
            }
        }
    free(sc);
}

static void test_attention(bool explicit_mask)
{
    struct mc_backend *be;
    CHECK(mc_backend_create("cpu-ref", &be) == MC_OK);
    struct mc_attention_desc d = {.dt = MC_DTYPE_F32, .b = 2, .s = 5, .heads = 4, .groups = 2,
                                  .hn = 3, .alpha = 0.5f, .mult = 1.0f, .heads_total = 4};
    d.qkv_ld = (d.heads + 2 * d.groups) * d.hn;
    d.ctx_ld = d.heads * d.hn;
    int64_t T = d.b * d.s, nqkv = T * d.qkv_ld, nctx = T * d.ctx_ld;
    int64_t np = d.b * d.heads * d.s * d.s;
    uint8_t mask[2 * 5 * 5];
    for (int i = 0; i < 50; i++)
        mask[i] = (uint8_t)(i % 7 == 1); /* keeps the diagonal of both batch rows */
    if (explicit_mask)
        d.mask = mask;
    float *qkv = malloc(sizeof(float) * (size_t)nqkv), *ctx = malloc(sizeof(float) * (size_t)nctx);
    float *probs = malloc(sizeof(float) * (size_t)np), *wa = malloc(sizeof(float) * (size_t)np);
    float *wb = malloc(sizeof(float) * (size_t)np), *dctx = malloc(sizeof(float) * (size_t)nctx);
    float *dqkv = malloc(sizeof(float) * (size_t)nqkv);
    uint8_t *keep = malloc((size_t)np);
    double *want = malloc(sizeof(double) * (size_t)nctx), *plus = malloc(sizeof(double) * (size_t)nctx);
    for (int64_t i = 0; i < nqkv; i++)
        qkv[i] = 2.0f * urand();
    for (int64_t i = 0; i < nctx; i++)
        dctx[i] = urand();
    struct mc_attention_work w = {wa, wb, keep};
    be->ops->attention_fwd(be, &d, qkv, probs, ctx, &w);
    naive_attention(&d, qkv, want);
    float *wantf = malloc(sizeof(float) * (size_t)nctx);
    for (int64_t i = 0; i < nctx; i++)
        wantf[i] = (float)want[i];
    check_tensor_close(explicit_mask ? "attention_fwd (mask)" : "attention_fwd (causal)", ctx,
                       wantf, nctx, 1e-5, 1e-6);
    /* backward: dL/dqkv of L = sum(dctx * ctx), against central differences in double */
    be->ops->attention_bwd(be, &d, qkv, probs, dctx, dqkv, &w);
    float *fd = malloc(sizeof(float) * (size_t)nqkv);
    for (int64_t i = 0; i < nqkv; i++) {
        float x0 = qkv[i];
        const float hstep = 1e-2f;
        double lp = 0, lm = 0;
        qkv[i] = x0 + hstep;
        naive_attention(&d, qkv, plus);
        for (int64_t k = 0; k < nctx; k++)
            lp += plus[k] * dctx[k];
        qkv[i] = x0 - hstep;
        naive_attention(&d, qkv, plus);
        for (int64_t k = 0; k < nctx; k++)
            lm += plus[k] * dctx[k];
        qkv[i] = x0;
        fd[i] = (float)((lp - lm) / (2.0 * (double)hstep));
    }
    check_tensor_close(explicit_mask ? "attention_bwd (mask)" : "attention_bwd (causal)", dqkv, fd,
                       nqkv, 2e-3, 2e-4);
    free(qkv); free(ctx); free(probs); free(wa); free(wb); free(dctx); free(dqkv); free(keep);
    free(want); free(plus); free(wantf); free(fd);
    mc_backend_free(be);
}

int main(void)
{
    test_unsupported_dtype_stops(); /* forks: before any OpenMP thread exists */
    test_sim_rejects_foreign_memory();
    test_tables();
    test_create();
    test_buffers();
    test_convert_accumulate("cpu");
    test_convert_accumulate("cpu-ref");
    test_convert_accumulate("cpu-sim");
    test_attention(false);
    test_attention(true);
    return test_summary("test_backend_tables");
}
