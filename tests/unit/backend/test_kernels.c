/* Every kernel of each fast table the CPU can run (cpu-avx512, cpu-avx2: both on an AVX-512
 * machine) against the scalar reference table (mc_cpu_kernels_ref()) on random shapes with ragged
 * tails, the same kernels on 1, 2 and 3 threads compared bit for bit, the BLAS GEMM against the
 * reference GEMM, the AVX2/F16C dtype conversions against theirs, and the table selection
 * (MC_KERNELS=ref, avx2, avx512, auto). Ops whose fast version
 * repeats the reference's fp32 operations (column sums, AdamW, RoPE, embedding, ...) must match
 * it exactly; transcendental ops get tolerances stated next to each check. */
#include "backend/backend.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/ref.h"
#include "megatron.h"
#include "test.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float urand(void) /* uniform in [0, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) / 16777216.0f;
}

static float *rnd(int64_t n, float lo, float hi)
{
    float *p = mc_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    MC_ASSERT(p);
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * urand();
    return p;
}

static float *fdup(const float *x, int64_t n)
{
    float *p = mc_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    MC_ASSERT(p);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

static int same_bits(const char *what, const float *a, const float *b, int64_t n)
{
    test_checks++;
    if (memcmp(a, b, (size_t)n * sizeof(float)) == 0) return 1;
    test_failures++;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float))) {
            fprintf(stderr, "%s: not bitwise equal at [%lld]: %.9g vs %.9g\n", what, (long long)i, a[i], b[i]);
            break;
        }
    return 0;
}

static const struct mc_cpu_kernels *R; /* the references */
static const struct mc_cpu_kernels *F; /* the fast table under test */
static const int threads[] = {1, 2, 3};

/* ---- elementwise activations ------------------------------------------------------------- */
typedef void (*act_fwd)(float *, const float *, const float *, int64_t, int64_t);
typedef void (*act_bwd)(float *, const float *, const float *, const float *, int64_t, int64_t);

static void check_act(const char *name, act_fwd ff, act_fwd rf, act_bwd fb, act_bwd rb,
                      int64_t rows, int64_t cols, int in_mult, double rtol, double atol)
{
    int64_t nin = rows * cols * in_mult, nout = rows * cols;
    float *x = rnd(nin, -6.f, 6.f), *bias = rnd(cols * in_mult, -1.f, 1.f), *dy = rnd(nout, -1.f, 1.f);
    float *yr = rnd(nout, 0, 1), *dxr = rnd(nin, 0, 1);
    char what[128];
    for (int wb = 0; wb < 2; wb++) {
        const float *b = wb ? bias : NULL;
        rf(yr, x, b, rows, cols);
        rb(dxr, dy, x, b, rows, cols);
        float *y1 = NULL, *dx1 = NULL;
        for (size_t k = 0; k < 3; k++) {
            omp_set_num_threads(threads[k]);
            float *y = rnd(nout, 0, 1), *dx = rnd(nin, 0, 1);
            ff(y, x, b, rows, cols);
            fb(dx, dy, x, b, rows, cols);
            if (k == 0) {
                snprintf(what, sizeof what, "%s fwd rows=%lld cols=%lld bias=%d", name, (long long)rows, (long long)cols, wb);
                check_tensor_close(what, y, yr, nout, rtol, atol);
                snprintf(what, sizeof what, "%s bwd rows=%lld cols=%lld bias=%d", name, (long long)rows, (long long)cols, wb);
                check_tensor_close(what, dx, dxr, nin, rtol, atol);
                y1 = y, dx1 = dx;
                continue;
            }
            snprintf(what, sizeof what, "%s threads=%d", name, threads[k]);
            same_bits(what, y, y1, nout);
            same_bits(what, dx, dx1, nin);
            mc_free(y);
            mc_free(dx);
        }
        mc_free(y1);
        mc_free(dx1);
    }
    omp_set_num_threads(2);
    mc_free(x); mc_free(bias); mc_free(dy); mc_free(yr); mc_free(dxr);
}

static void test_activations(void)
{
    const int64_t shapes[][2] = {{1, 1}, {3, 17}, {2, 100}, {67, 777}, {5, 16}, {1, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t r = shapes[s][0], c = shapes[s][1];
        /* tanh/erf forms: the reference's 1 + tanh(z) / 1 + erf(z) cancel for negative inputs,
         * so the absolute tolerance is a few ulp of 1 (times |x| <= 7). */
        check_act("gelu_tanh", F->gelu_tanh_fwd, R->gelu_tanh_fwd, F->gelu_tanh_bwd, R->gelu_tanh_bwd, r, c, 1, 2e-6, 2e-6);
        check_act("gelu_erf", F->gelu_erf_fwd, R->gelu_erf_fwd, F->gelu_erf_bwd, R->gelu_erf_bwd, r, c, 1, 2e-6, 2e-6);
        check_act("squared_relu", F->squared_relu_fwd, R->squared_relu_fwd, F->squared_relu_bwd, R->squared_relu_bwd, r, c, 1, 0, 0);
        check_act("swiglu", F->swiglu_fwd, R->swiglu_fwd, F->swiglu_bwd, R->swiglu_bwd, r, c, 2, 2e-6, 1e-6);
    }
    for (int64_t c = 1; c <= 100; c++) /* every tail length */
        check_act("gelu_tanh", F->gelu_tanh_fwd, R->gelu_tanh_fwd, F->gelu_tanh_bwd, R->gelu_tanh_bwd, 2, c, 1, 2e-6, 2e-6);
}

/* Runs `body` (which writes `out` of n floats) on 1, 2, 3 threads; checks the results agree
 * bitwise and leaves the 1-thread result in `out`. */
#define ACROSS_THREADS(name, out, n, body)                                             \
    do {                                                                               \
        float *first_ = NULL;                                                          \
        for (size_t k_ = 0; k_ < 3; k_++) {                                            \
            omp_set_num_threads(threads[k_]);                                          \
            body;                                                                      \
            if (k_ == 0) first_ = fdup(out, n);                                         \
            else same_bits(name, out, first_, n);                                      \
        }                                                                              \
        memcpy(out, first_, (size_t)(n) * sizeof(float));                              \
        mc_free(first_);                                                               \
        omp_set_num_threads(2);                                                        \
    } while (0)

/* ---- norms ------------------------------------------------------------------------------- */
static void test_norms(void)
{
    const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 17}, {5, 100}, {33, 768}, {70, 999}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], h = shapes[s][1], n = rows * h;
        float *x = rnd(n, -2.f, 3.f), *w = rnd(h, 0.5f, 1.5f), *b = rnd(h, -1.f, 1.f), *dy = rnd(n, -1.f, 1.f);
        float *y = rnd(n, 0, 1), *yr = rnd(n, 0, 1), *mu = rnd(rows, 0, 1), *rs = rnd(rows, 0, 1);
        float *mur = rnd(rows, 0, 1), *rsr = rnd(rows, 0, 1), *dx = rnd(n, 0, 1), *dxr = rnd(n, 0, 1);
        float *dw0 = rnd(h, -1, 1), *db0 = rnd(h, -1, 1);
        float *dw = fdup(dw0, h), *db = fdup(db0, h), *dwr = fdup(dw0, h), *dbr = fdup(db0, h);
        double tol = 4e-7 * sqrt((double)h); /* fp32 partial sums vs the reference's double sums */
        char what[96];
        snprintf(what, sizeof what, "layernorm rows=%lld h=%lld", (long long)rows, (long long)h);
        R->layernorm_fwd(yr, mur, rsr, x, w, b, rows, h, 1e-5f);
        ACROSS_THREADS(what, y, n, F->layernorm_fwd(y, mu, rs, x, w, b, rows, h, 1e-5f));
        check_tensor_close("layernorm_fwd mean", mu, mur, rows, tol, 1e-7);
        check_tensor_close("layernorm_fwd rstd", rs, rsr, rows, tol, 0);
        check_tensor_close("layernorm_fwd y", y, yr, n, tol, tol);
        /* backward from the reference's saved stats, so the param grads must match exactly */
        R->layernorm_bwd(dxr, dwr, dbr, dy, x, w, mur, rsr, rows, h);
        ACROSS_THREADS(what, dx, n, {
            memcpy(dw, dw0, (size_t)h * 4);
            memcpy(db, db0, (size_t)h * 4);
            F->layernorm_bwd(dx, dw, db, dy, x, w, mur, rsr, rows, h);
        });
        check_tensor_close("layernorm_bwd dx", dx, dxr, n, tol, tol);
        same_bits("layernorm_bwd dw", dw, dwr, h);
        same_bits("layernorm_bwd db", db, dbr, h);
        /* no bias */
        R->layernorm_fwd(yr, mur, rsr, x, w, NULL, rows, h, 1e-5f);
        F->layernorm_fwd(y, mu, rs, x, w, NULL, rows, h, 1e-5f);
        check_tensor_close("layernorm_fwd no bias", y, yr, n, tol, tol);

        snprintf(what, sizeof what, "rmsnorm rows=%lld h=%lld", (long long)rows, (long long)h);
        R->rmsnorm_fwd(yr, rsr, x, w, rows, h, 1e-5f);
        ACROSS_THREADS(what, y, n, F->rmsnorm_fwd(y, rs, x, w, rows, h, 1e-5f));
        check_tensor_close("rmsnorm_fwd rstd", rs, rsr, rows, tol, 0);
        check_tensor_close("rmsnorm_fwd y", y, yr, n, tol, tol);
        memcpy(dwr, dw0, (size_t)h * 4);
        R->rmsnorm_bwd(dxr, dwr, dy, x, w, rsr, rows, h);
        ACROSS_THREADS(what, dx, n, {
            memcpy(dw, dw0, (size_t)h * 4);
            F->rmsnorm_bwd(dx, dw, dy, x, w, rsr, rows, h);
        });
        check_tensor_close("rmsnorm_bwd dx", dx, dxr, n, tol, tol);
        same_bits("rmsnorm_bwd dw", dw, dwr, h);
        float *all[] = {x, w, b, dy, y, yr, mu, rs, mur, rsr, dx, dxr, dw0, db0, dw, db, dwr, dbr};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mc_free(all[i]);
    }
}

/* ---- attention softmax ------------------------------------------------------------------- */
static void test_softmax(void)
{
    const int64_t shapes[][3] = {{1, 1, 1}, {2, 5, 5}, {3, 17, 17}, {2, 33, 40}, {4, 100, 100}, {2, 130, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t bh = shapes[s][0], sq = shapes[s][1], sk = shapes[s][2], n = bh * sq * sk;
        uint8_t *mask = mc_alloc((size_t)(sq * sk));
        MC_ASSERT(mask);
        for (int64_t i = 0; i < sq * sk; i++) mask[i] = urand() < 0.3f;
        if (sq > 2) memset(mask + sk, 1, (size_t)sk); /* one fully masked row: uniform */
        float *x = rnd(n, -8.f, 8.f), *dp = rnd(n, -1.f, 1.f);
        for (int mode = 0; mode < 3; mode++) {
            const uint8_t *m = mode == 1 ? mask : NULL;
            float mult = mode == 2 ? 0.125f : 1.0f;
            float *pr = fdup(x, n), *p = fdup(x, n);
            char what[96];
            snprintf(what, sizeof what, "softmax bh=%lld sq=%lld sk=%lld mode=%d", (long long)bh, (long long)sq, (long long)sk, mode);
            R->masked_softmax_fwd(pr, bh, sq, sk, mult, m);
            ACROSS_THREADS(what, p, n, {
                memcpy(p, x, (size_t)n * 4);
                F->masked_softmax_fwd(p, bh, sq, sk, mult, m);
            });
            check_tensor_close(what, p, pr, n, 4e-6, 1e-9);
            float *gr = fdup(dp, n), *g = fdup(dp, n);
            R->masked_softmax_bwd(gr, pr, bh, sq, sk, mult);
            ACROSS_THREADS(what, g, n, {
                memcpy(g, dp, (size_t)n * 4);
                F->masked_softmax_bwd(g, pr, bh, sq, sk, mult);
            });
            check_tensor_close("softmax bwd", g, gr, n, 1e-5, 1e-6 * sqrt((double)sk));
            mc_free(pr); mc_free(p); mc_free(gr); mc_free(g);
        }
        mc_free(mask); mc_free(x); mc_free(dp);
    }
}

/* ---- cross-entropy ----------------------------------------------------------------------- */
static void test_xent(void)
{
    const int64_t shapes[][2] = {{1, 1}, {3, 17}, {5, 100}, {7, 50304}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], v = shapes[s][1], v_start = s == 2 ? 40 : 0;
        float *lg = rnd(n * v, -10.f, 10.f), *dloss = rnd(n, 0.1f, 1.f);
        int64_t *tg = mc_alloc((size_t)n * sizeof(int64_t));
        MC_ASSERT(tg);
        for (int64_t r = 0; r < n; r++) tg[r] = v_start + (int64_t)(urand() * (float)(v + 30)) - 15;
        float *mx = rnd(n, 0, 1), *mxr = rnd(n, 0, 1), *se = rnd(n, 0, 1), *ser = rnd(n, 0, 1);
        float *tl = rnd(n, 0, 1), *tlr = rnd(n, 0, 1);
        R->xent_max(mxr, lg, n, v);
        ACROSS_THREADS("xent_max", mx, n, F->xent_max(mx, lg, n, v));
        same_bits("xent_max", mx, mxr, n);
        R->xent_sumexp(ser, tlr, lg, mxr, tg, n, v, v_start);
        ACROSS_THREADS("xent_sumexp", se, n, F->xent_sumexp(se, tl, lg, mxr, tg, n, v, v_start));
        check_tensor_close("xent_sumexp", se, ser, n, 2e-7 * sqrt((double)v) + 2e-7, 0);
        same_bits("xent target logit", tl, tlr, n);
        float *dr = fdup(lg, n * v), *d = fdup(lg, n * v);
        R->xent_bwd(dr, dr, mxr, ser, tg, dloss, n, v, v_start); /* in place (aliasing) */
        ACROSS_THREADS("xent_bwd", d, n * v, {
            memcpy(d, lg, (size_t)(n * v) * 4);
            F->xent_bwd(d, d, mxr, ser, tg, dloss, n, v, v_start);
        });
        check_tensor_close("xent_bwd", d, dr, n * v, 4e-7, 1e-12);
        mc_free(lg); mc_free(dloss); mc_free(tg); mc_free(mx); mc_free(mxr); mc_free(se);
        mc_free(ser); mc_free(tl); mc_free(tlr); mc_free(dr); mc_free(d);
    }
}

/* exp() itself, through xent_bwd with max 0, sumexp 1, dloss 1: dlogits = exp(logits). */
static void test_exp_accuracy(void)
{
    int64_t v = 200001;
    float *x = mc_alloc((size_t)v * 4), *e = mc_alloc((size_t)v * 4), *want = mc_alloc((size_t)v * 4);
    MC_ASSERT(x && e && want);
    for (int64_t i = 0; i < v; i++) x[i] = -103.0f + 191.0f * (float)i / (float)(v - 1);
    float zero = 0, one = 1;
    int64_t tg = -1;
    F->xent_bwd(e, x, &zero, &one, &tg, &one, 1, v, 0);
    double worst = 0;
    for (int64_t i = 0; i < v; i++) {
        want[i] = expf(x[i]);
        if (want[i] >= 1.17549435e-38f) { /* normal results: error in ulps */
            double ulp = nextafterf(want[i], INFINITY) - want[i];
            double u = fabs((double)e[i] - want[i]) / ulp;
            worst = u > worst ? u : worst;
        }
    }
    printf("exp (%s): max error %.2f ulp over [-103, 88]\n", F->name, worst);
    CHECK(worst <= 2.0);
    check_tensor_close("exp denormal range", e, want, v, 1e-6, 1e-44);
    x[0] = NAN;
    x[1] = INFINITY;
    x[2] = -INFINITY;
    F->xent_bwd(e, x, &zero, &one, &tg, &one, 1, 3, 0);
    CHECK(isnan(e[0]));
    CHECK(isinf(e[1]) && e[1] > 0);
    CHECK(e[2] == 0.0f);
    mc_free(x); mc_free(e); mc_free(want);
}

/* ---- bias, dropout-add, embedding, rope: exact ------------------------------------------- */
/* Dropout keep flags: the same bits as the definition (cpu-ref calls core/rng.c) on windows that
 * start and end anywhere in a Philox block and in a vector group, from one flag to the size
 * that splits across threads, at drop rates including 0, 1 and fp32 values next to a
 * representable u = k * 2^-24 (the >= edge), with c1_hi and 64-bit counters in use. */
static void test_dropout_mask(void)
{
    const int64_t firsts[] = {0, 1, 3, 31, 32, 33, 4097, ((int64_t)1 << 45) + 5};
    const int64_t lens[] = {1, 3, 4, 31, 32, 64, 65, 1000, 70001};
    const float ps[] = {0.0f, 0.1f, 0.5f, 1.0f, 0x1.99999ap-4f, 0x1.999998p-4f, 0.9999999f};
    for (size_t a = 0; a < sizeof firsts / sizeof firsts[0]; a++)
        for (size_t b = 0; b < sizeof lens / sizeof lens[0]; b++) {
            int64_t first = firsts[a], n = lens[b];
            float p = ps[(a + b) % (sizeof ps / sizeof ps[0])];
            uint64_t seed = ((uint64_t)a << 40) ^ (0x9E3779B97F4A7C15ull * (b + 1));
            uint32_t c1_hi = (uint32_t)((a * 7919 + b) & 0xffff), c2 = (uint32_t)b * 31u + 7u;
            uint32_t c3 = 0xffffffffu - (uint32_t)a;
            uint8_t *want = mc_alloc((size_t)n), *got = mc_alloc((size_t)n);
            MC_ASSERT(want && got);
            R->dropout_mask(want, first, n, seed, c1_hi, c2, c3, p);
            for (size_t t = 0; t < 3; t++) {
                omp_set_num_threads(threads[t]);
                memset(got, 0xee, (size_t)n);
                F->dropout_mask(got, first, n, seed, c1_hi, c2, c3, p);
                test_checks++;
                if (memcmp(got, want, (size_t)n)) {
                    test_failures++;
                    fprintf(stderr, "dropout_mask first %lld n %lld p %a threads %d: differs\n",
                            (long long)first, (long long)n, (double)p, threads[t]);
                }
            }
            omp_set_num_threads(2);
            mc_free(want);
            mc_free(got);
        }
}

static void test_bias_embedding_rope(void)
{
    const int64_t shapes[][2] = {{1, 1}, {3, 17}, {5, 100}, {300, 100}, {257, 768}, {9, 63}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        float *dy = rnd(n, -1, 1), *db0 = rnd(cols, -1, 1), *dbr = fdup(db0, cols), *db = fdup(db0, cols);
        R->bias_grad(dbr, dy, rows, cols);
        ACROSS_THREADS("bias_grad", db, cols, {
            memcpy(db, db0, (size_t)cols * 4);
            F->bias_grad(db, dy, rows, cols);
        });
        same_bits("bias_grad", db, dbr, cols);

        uint8_t *keep = mc_alloc((size_t)n);
        MC_ASSERT(keep);
        for (int64_t i = 0; i < n; i++) keep[i] = urand() < 0.9f;
        float *res = rnd(n, -1, 1), *y = rnd(n, 0, 1), *yr = rnd(n, 0, 1);
        for (int v = 0; v < 8; v++) {
            const float *b = v & 1 ? db0 : NULL, *rr = v & 2 ? res : NULL;
            const uint8_t *k = v & 4 ? keep : NULL;
            R->bias_dropout_add(yr, dy, b, rr, k, 1.0f / 0.9f, rows, cols);
            ACROSS_THREADS("bias_dropout_add", y, n, F->bias_dropout_add(y, dy, b, rr, k, 1.0f / 0.9f, rows, cols));
            same_bits("bias_dropout_add", y, yr, n);
        }

        /* embedding: vocab shard [vs, vs + vl) of a larger vocab; some ids fall outside */
        int64_t vl = 37, vs = 10, h = cols;
        int64_t *ids = mc_alloc((size_t)rows * sizeof(int64_t));
        MC_ASSERT(ids);
        for (int64_t t = 0; t < rows; t++) ids[t] = (int64_t)(urand() * 60.0f);
        float *w = rnd(vl * h, -1, 1), *e = rnd(n, 0, 1), *er = rnd(n, 0, 1);
        R->embedding_fwd(er, w, ids, rows, h, vs, vl);
        ACROSS_THREADS("embedding_fwd", e, n, F->embedding_fwd(e, w, ids, rows, h, vs, vl));
        same_bits("embedding_fwd", e, er, n);
        float *dw0 = rnd(vl * h, -1, 1), *dwr = fdup(dw0, vl * h), *dw = fdup(dw0, vl * h);
        R->embedding_bwd(dwr, dy, ids, rows, h, vs, vl);
        ACROSS_THREADS("embedding_bwd", dw, vl * h, {
            memcpy(dw, dw0, (size_t)(vl * h) * 4);
            F->embedding_bwd(dw, dy, ids, rows, h, vs, vl);
        });
        same_bits("embedding_bwd", dw, dwr, vl * h);

        /* rope on [s, bh, hn] with rot_dim <= hn (even) */
        int64_t hn = cols, rot = (cols / 2) * 2 - (cols > 40 ? 8 : 0), sl = rows > 3 ? 3 : rows;
        int64_t bh = rows / sl;
        if (rot >= 2) {
            int64_t nt = sl * bh * hn;
            float *c = rnd(sl * rot, -1, 1), *sn = rnd(sl * rot, -1, 1), *t0 = rnd(nt, -2, 2);
            for (int il = 0; il < 2; il++)
                for (int dir = 0; dir < 2; dir++) {
                    float *tr = fdup(t0, nt), *t = fdup(t0, nt);
                    (dir ? R->rope_bwd : R->rope_fwd)(tr, c, sn, sl, bh, hn, rot, il);
                    ACROSS_THREADS("rope", t, nt, {
                        memcpy(t, t0, (size_t)nt * 4);
                        (dir ? F->rope_bwd : F->rope_fwd)(t, c, sn, sl, bh, hn, rot, il);
                    });
                    same_bits(dir ? "rope_bwd" : "rope_fwd", t, tr, nt);
                    mc_free(tr); mc_free(t);
                }
            mc_free(c); mc_free(sn); mc_free(t0);
        }
        mc_free(dy); mc_free(db0); mc_free(dbr); mc_free(db); mc_free(keep); mc_free(res);
        mc_free(y); mc_free(yr); mc_free(ids); mc_free(w); mc_free(e); mc_free(er);
        mc_free(dw0); mc_free(dwr); mc_free(dw);
    }
}

/* ---- optimizer and grad-norm kernels ------------------------------------------------------ */
static void test_optim(void)
{
    const int64_t sizes[] = {1, 15, 16, 17, 1000, 100003, 70000001 / 100};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *g = rnd(n, -1e-2f, 1e-2f), *p0 = rnd(n, -1, 1), *m0 = rnd(n, -1e-3f, 1e-3f), *v0 = rnd(n, 0, 1e-4f);
        for (int64_t i = 0; i < n; i += 7) g[i] = 0.0f;
        float *pr = fdup(p0, n), *mr = fdup(m0, n), *vr = fdup(v0, n);
        float *p = fdup(p0, n), *m = fdup(m0, n), *v = fdup(v0, n);
        for (int64_t step = 1; step <= 3; step++) {
            R->adamw(pr, mr, vr, g, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
            F->adamw(p, m, v, g, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
        }
        same_bits("adamw p", p, pr, n);
        same_bits("adamw m", m, mr, n);
        same_bits("adamw v", v, vr, n);
        float *b = fdup(m0, n), *br = fdup(m0, n);
        for (int st = 0; st < 2; st++) {
            R->sgd(pr, br, g, n, 0.1f, 0.9f, 1e-2f, st == 0);
            F->sgd(p, b, g, n, 0.1f, 0.9f, 1e-2f, st == 0);
        }
        same_bits("sgd p", p, pr, n);
        same_bits("sgd buf", b, br, n);
        float *before = fdup(pr, n);
        R->scale(pr, 0.37f, n);
        ACROSS_THREADS("scale", p, n, { memcpy(p, before, (size_t)n * 4); F->scale(p, 0.37f, n); });
        same_bits("scale", p, pr, n);
        mc_free(before);
        CHECK(F->count_zeros(g, n) == R->count_zeros(g, n));
        double want = R->sumsq(g, n), got = 0;
        for (size_t k = 0; k < 3; k++) {
            omp_set_num_threads(threads[k]);
            double r = F->sumsq(g, n);
            if (k == 0) got = r;
            else CHECK(memcmp(&r, &got, sizeof r) == 0);
        }
        omp_set_num_threads(2);
        CHECK_CLOSE(got, want, 1e-12 * want); /* double sums, different chunk order */
        float *all[] = {g, p0, m0, v0, pr, mr, vr, p, m, v, b, br};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) mc_free(all[i]);
    }
}

/* ---- GEMM through BLAS vs the reference triple loop -------------------------------------- */
static void test_gemm(void)
{
    const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {4, 6, 0}, {17, 33, 65}, {64, 96, 128}, {130, 70, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int tt = 0; tt < 4; tt++) {
            bool ta = tt & 1, tb = tt & 2;
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
            float *A = rnd((ta ? K : M) * lda, -1, 1), *B = rnd((tb ? N : K) * ldb, -1, 1);
            float *C0 = rnd(M * ldc, -1, 1), *C = fdup(C0, M * ldc), *Cr = fdup(C0, M * ldc);
            for (int beta_zero = 0; beta_zero < 2; beta_zero++) {
                float beta = beta_zero ? 0.0f : 0.5f;
                if (beta_zero) /* beta == 0 must ignore NaN in C */
                    for (int64_t i = 0; i < M * ldc; i++) C[i] = Cr[i] = NAN;
                R->gemm(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, Cr, ldc);
                ACROSS_THREADS("gemm", C, M * ldc, {
                    if (beta_zero) for (int64_t i = 0; i < M * ldc; i++) C[i] = NAN;
                    else memcpy(C, C0, (size_t)(M * ldc) * 4);
                    gemm_blas(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C, ldc);
                });
                float *cg = mc_alloc((size_t)(M * N) * 4), *cw = mc_alloc((size_t)(M * N) * 4);
                MC_ASSERT(cg && cw);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) cg[i * N + j] = C[i * ldc + j], cw[i * N + j] = Cr[i * ldc + j];
                char what[96];
                snprintf(what, sizeof what, "gemm %c%c M=%lld N=%lld K=%lld beta=%g", ta ? 'T' : 'N', tb ? 'T' : 'N',
                         (long long)M, (long long)N, (long long)K, beta);
                /* different summation orders: error grows like sqrt(K) eps times the partial sums */
                check_tensor_close(what, cg, cw, M * N, 1e-5, 2e-6 * sqrt((double)K) * 1.5);
                mc_free(cg); mc_free(cw);
            }
            mc_free(A); mc_free(B); mc_free(C0); mc_free(C); mc_free(Cr);
        }
}

/* Thread-count independence on shapes where a library's own threading would split K (small M
 * or N, long K; oneDNN does from 4-8 threads) and on multi-tile ragged shapes (the last: 2 x 2
 * TN tiles of 768 rows): 1, 2, 3, 8 and 16 threads must give the same bits, and the values must
 * match the reference. */
static void test_gemm_threads(void)
{
    const struct { bool ta, tb; int64_t M, N, K; } sh[] = {
        {true, false, 64, 64, 8192}, {false, true, 128, 256, 8192}, {false, false, 16, 768, 3072},
        {false, true, 300, 1100, 200}, {true, false, 513, 70, 1000}, {true, false, 1000, 1100, 96},
    };
    const int th[] = {1, 2, 3, 8, 16};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        bool ta = sh[s].ta, tb = sh[s].tb;
        int64_t M = sh[s].M, N = sh[s].N, K = sh[s].K, lda = ta ? M : K, ldb = tb ? K : N;
        float *A = rnd(M * K, -1, 1), *B = rnd(K * N, -1, 1), *C = rnd(M * N, 0, 1);
        float *Cr = rnd(M * N, 0, 1), *C1 = NULL;
        char what[96];
        snprintf(what, sizeof what, "gemm %c%c M=%lld N=%lld K=%lld across threads", ta ? 'T' : 'N',
                 tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K);
        for (size_t k = 0; k < sizeof th / sizeof th[0]; k++) {
            omp_set_num_threads(th[k]);
            gemm_blas(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
            if (k == 0) C1 = fdup(C, M * N);
            else same_bits(what, C, C1, M * N);
        }
        omp_set_num_threads(2);
        /* against a double-precision sum: the fp32 triple loop's own sequential rounding at
         * K = 8192 (partial sums ~30) is as large as the tolerance, so it flaked (Zen 4) */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t p = 0; p < K; p++)
                    acc += (double)A[ta ? p * lda + i : i * lda + p] *
                           (double)B[tb ? j * ldb + p : p * ldb + j];
                Cr[i * N + j] = (float)acc;
            }
        check_tensor_close(what, C1, Cr, M * N, 1e-5, 2e-6 * sqrt((double)K));
        mc_free(A); mc_free(B); mc_free(C); mc_free(Cr); mc_free(C1);
    }
}

/* ---- selection --------------------------------------------------------------------------- */
/* The choice is made once per process, so each setting is checked in a forked child (before
 * this process starts any OpenMP threads). Exit 0 = the expected table was chosen. */
static int child_select(const char *env, const char *want)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (env) setenv("MC_KERNELS", env, 1);
        else unsetenv("MC_KERNELS");
        /* the "cpu" backend runs the kernels the CPU selection chose */
        struct mc_backend *be = NULL;
        if (mc_backend_create("cpu", &be) != MC_OK) _exit(3);
        const struct mc_cpu_kernels *k = mc_cpu_kernels_select();
        if (be->impl != k || strcmp(be->name, k->name)) _exit(2);
        _exit(k->version == MC_CPU_KERNELS_VERSION && strcmp(k->name, want) == 0 ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static void test_select(void)
{
    char feats[160];
    mc_cpu_features_str(feats, sizeof feats);
    const struct mc_cpu_features *f = mc_cpu_features();
    printf("cpu: %s / %s; usable: %s\n", f->vendor, f->brand, feats);
    CHECK(!f->avx512bw || f->avx512f);    /* the "usable" flags nest */
    CHECK(!f->avx512f || f->os_avx512);
    CHECK(!f->os_avx512 || f->os_avx);
    CHECK(!mc_cpu_has_avx2() || f->os_avx);
    const char *fast = mc_cpu_has_avx512() ? "cpu-avx512"
                       : mc_cpu_has_avx2() ? "cpu-avx2" : "cpu-ref+blas";
    CHECK(child_select("ref", "cpu-ref") == 0);
    CHECK(child_select(NULL, fast) == 0);
    CHECK(child_select("auto", fast) == 0);
    CHECK(child_select("avx512", fast) == 0);
    CHECK(child_select("bogus", fast) == 0);
    /* forced where it can run (also on AVX-512 CPUs), else the automatic choice */
    CHECK(child_select("avx2", mc_cpu_has_avx2() ? "cpu-avx2" : fast) == 0);
}

/* The AVX2 + F16C and the AVX-512 dtype conversions against the scalar references, bit for
 * bit: every 16-bit pattern widened; random fp32 bit patterns (every exponent, NaNs with
 * payloads, subnormals) plus every fp32 that is a rounding tie or a neighbour of one narrowed;
 * accumulate on random pairs; odd lengths for the scalar tails; lengths above and below the
 * 64K elements where they start using OpenMP; 1, 2, 3 threads. */
typedef void (*conv_fn)(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                        int64_t n);

static void convert_one(const char *name, conv_fn conv, conv_fn acc, const uint32_t *x,
                        const uint32_t *y, uint32_t *a, uint32_t *b, int64_t n)
{
    const enum mc_dtype dts[3] = {MC_DTYPE_F32, MC_DTYPE_BF16, MC_DTYPE_F16};
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 3; si++)
            for (int t = 0; t < 3; t++) {
                omp_set_num_threads(threads[t]);
                enum mc_dtype dd = dts[di], sd = dts[si];
                int64_t m = sd == MC_DTYPE_F32 ? n : 2 * n - 3; /* 16-bit: both halves of x */
                if (dd != MC_DTYPE_F32 && sd != MC_DTYPE_F32)
                    m = 2 * n - 3;
                memset(a, 0, 8 * (size_t)n);
                memset(b, 0, 8 * (size_t)n);
                convert_ref(a, dd, x, sd, m);
                conv(b, dd, x, sd, m);
                char what[96];
                snprintf(what, sizeof what, "convert_%s %s <- %s (n %lld, %d threads)", name,
                         mc_dtype_name(dd), mc_dtype_name(sd), (long long)m, threads[t]);
                same_bits(what, (float *)a, (float *)b, 2 * n);
                /* accumulate: dst = a copy of y in dd, += x in sd */
                int64_t k = n - 5;
                convert_ref(a, dd, y, MC_DTYPE_F32, k);
                convert_ref(b, dd, y, MC_DTYPE_F32, k);
                accumulate_ref(a, dd, x, sd, k);
                acc(b, dd, x, sd, k);
                snprintf(what, sizeof what, "accumulate_%s %s += %s (n %lld, %d threads)", name,
                         mc_dtype_name(dd), mc_dtype_name(sd), (long long)k, threads[t]);
                same_bits(what, (float *)a, (float *)b, 2 * n);
            }
    omp_set_num_threads(threads[0]);
}

static void test_convert(void)
{
    const struct mc_cpu_features *f = mc_cpu_features();
    if (!f->avx2 || !f->f16c) {
        printf("test_kernels: no AVX2/F16C: convert_avx2 not tested\n");
        return;
    }
    int64_t n = 3 * 65536 + 7;
    uint32_t *x = mc_alloc(4 * (size_t)n), *y = mc_alloc(4 * (size_t)n);
    uint32_t *a = mc_alloc(8 * (size_t)n), *b = mc_alloc(8 * (size_t)n); /* 2n fp32 */
    MC_ASSERT(x && y && a && b);
    for (int64_t i = 0; i < n; i++) {
        rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(rng_state >> 32);
        switch (i % 4) {
        case 0: x[i] = r; break;                                  /* any pattern */
        case 1: x[i] = (r & 0xffff0000u) | 0x8000u | (r & 1); break; /* bf16 ties and neighbours */
        case 2: x[i] = (r & 0xffffe000u) | 0x1000u; break;          /* fp16 ties */
        default: x[i] = (uint32_t)(i / 4 % 65536) << 16 | (r & 0x1fff); break; /* every exponent */
        }
        y[i] = (uint32_t)i * 2654435761u;
    }
    for (int64_t i = 0; i < 65536; i++) /* every 16-bit pattern, twice per word */
        x[i] = (uint32_t)i | (uint32_t)i << 16;
    bool avx512 = f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq;
    for (int64_t len = n; len > 0; len = len == n ? 1003 : 0) {
        convert_one("avx2", convert_avx2, accumulate_avx2, x, y, a, b, len);
        if (avx512)
            convert_one("avx512", convert_avx512, accumulate_avx512, x, y, a, b, len);
    }
    if (!avx512)
        printf("test_kernels: no AVX-512: convert_avx512 not tested\n");
    mc_free(x);
    mc_free(y);
    mc_free(a);
    mc_free(b);
}

int main(void)
{
    test_select(); /* forks: first, before any OpenMP thread exists */
    R = mc_cpu_kernels_ref();
    test_convert();
    const struct mc_cpu_kernels *fast[2];
    int nfast = 0;
    if (mc_cpu_has_avx512()) fast[nfast++] = mc_cpu_kernels_avx512();
    else printf("test_kernels: this CPU/OS cannot run AVX-512; cpu-avx512 not tested\n");
    if (mc_cpu_has_avx2()) fast[nfast++] = mc_cpu_kernels_avx2();
    else printf("test_kernels: this CPU/OS cannot run AVX2 + FMA + F16C; cpu-avx2 not tested\n");
    uint64_t seed = rng_state; /* every table sees the same inputs (and the GEMM tests too) */
    for (int i = 0; i < nfast; i++) {
        F = fast[i];
        rng_state = seed;
        fprintf(stderr, "test_kernels: %s against cpu-ref\n", F->name); /* labels what follows */
        test_exp_accuracy();
        test_activations();
        test_norms();
        test_softmax();
        test_xent();
        test_bias_embedding_rope();
        test_dropout_mask();
        test_optim();
    }
    test_gemm();
    test_gemm_threads();
    return test_summary("test_kernels");
}
