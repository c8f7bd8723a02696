/* GEMM through an optimized library chosen at configure time by cmake/blas.cmake: oneDNN's
 * dnnl_sgemm by default, or OpenBLAS / BLIS through CBLAS (docs/gemm.md has the measurements).
 * Megatron calls cuBLAS through torch.matmul / F.linear; this is our equivalent.
 * Row-major C[M,N] = alpha op(A) op(B) + beta C.
 *
 * Threads: results must not depend on OMP_NUM_THREADS, and no library guarantees that with its
 * own threading (oneDNN splits K across threads for small M or N from 4-8 threads; OpenBLAS
 * switches to a different kernel for some shapes when single-threaded; BLIS likewise on small
 * shapes). So we never let the library thread: C is cut into tiles whose size depends only on
 * the shape, each tile is one single-threaded library call, and OpenMP distributes the tiles.
 * The calls are the same whatever the thread count, hence the same bits, and the whole program
 * has one thread pool and one knob (OMP_NUM_THREADS). Cost on one thread: none measurable for
 * oneDNN, a few % for OpenBLAS (the library re-packs the shared operand per tile), docs/gemm.md.
 *
 * OpenBLAS (DYNAMIC_ARCH builds) picks its kernels from CPUID when the library loads. Some
 * versions do not know newer AVX-512 CPUs and fall back to Haswell/SSE3 kernels. Because its
 * constructor runs before ours, setting OPENBLAS_CORETYPE from our code is too late; instead, on
 * first use we re-run OpenBLAS's own core selection (gotoblas_dynamic_init, exported by
 * DYNAMIC_ARCH builds) with OPENBLAS_CORETYPE=SkylakeX when the CPU and OS support AVX-512 and
 * the user did not choose a core themselves. The library and kernel in use are logged once. */
#include "backend/cpu/kernels/kernels_avx512.h"

#include "backend/cpu/cpu_features.h"
#include "megatron.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(MC_BLAS_OPENBLAS)
#include <cblas.h>
/* Exported by OpenBLAS DYNAMIC_ARCH builds (weak: absent in single-target builds). */
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
#elif defined(MC_BLAS_BLIS)
#include <blis.h>
#elif defined(MC_BLAS_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#else
#error "gemm_blas.c: define one of MC_BLAS_OPENBLAS, MC_BLAS_BLIS, MC_BLAS_ONEDNN (cmake/blas.cmake)"
#endif

/* Tiles of C: start at 512 x 1024 and halve (columns first, down to 64 x 256) until there are
 * at least MIN_TILES, so that two threads get balanced work even for T = 256. Depends on the
 * shape only, never on the thread count. Larger tiles pay: every tile is one library call that
 * packs its own panels, and on Zen 3 (1 thread, CPU clock) the old 256-row / 24-tile rule cost
 * NN 2048x768x3072 57 GFLOP/s (512 x 768 tiles: 73) and NN 2048x3072x768 34 (512 x 1024: 65).
 * Transposed A (the weight grads, C += dY^T X with K = tokens): oneDNN 2.6.3's AVX2 sgemm runs
 * a TN call with fewer than ~768 rows of C at half its rate (Zen 3, 1 thread, CPU clock: TN
 * 3072x768x2048 in 128 x 256 tiles 31 GFLOP/s, 384 x 768 tiles 36, 768 x 768 tiles 74, one
 * call 64-76; docs/gemm.md). So TN tiles keep 768 rows and cut the columns, at most 1024 wide,
 * halved (not below 256) until there are 6 tiles: 3 tiles (768 x 3072, 2304 x 768 at 1024 or
 * 768 columns) left one of two threads idle a third of the time (Zen 4: 149-156 GFLOP/s on
 * those shapes against 194-199 on 768 x 768's 2 tiles). */
#define MIN_TILES 4
#define TN_ROWS 768
#define TN_MIN_TILES 6
#define TN_MIN_COLS 256

struct tiling {
    int64_t tm, tn, ntn, ntiles;
};

static struct tiling tiles_for(bool ta, int64_t M, int64_t N)
{
    if (ta) {
        struct tiling t = {TN_ROWS, N < 1024 ? N : 1024, 0, 0};
        for (;;) {
            t.ntn = (N + t.tn - 1) / t.tn;
            t.ntiles = (M + t.tm - 1) / t.tm * t.ntn;
            if (t.ntiles >= TN_MIN_TILES || t.tn < 2 * TN_MIN_COLS)
                return t;
            t.tn = (t.tn + 1) / 2;
        }
    }
    struct tiling t = {512, 1024, 0, 0};
    for (;;) {
        t.ntn = (N + t.tn - 1) / t.tn;
        t.ntiles = (M + t.tm - 1) / t.tm * t.ntn;
        if (t.ntiles >= MIN_TILES || (t.tn <= 256 && t.tm <= 64))
            return t;
        if (t.tn > 256)
            t.tn /= 2;
        else
            t.tm /= 2;
    }
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static char blas_desc[128];

#if defined(MC_BLAS_OPENBLAS)
static bool is_avx512_core(const char *core)
{
    return !strcmp(core, "SkylakeX") || !strcmp(core, "Cooperlake") ||
           !strcmp(core, "SapphireRapids");
}

static void blas_setup(void)
{
    const char *core = openblas_get_corename();
    const char *user = getenv("OPENBLAS_CORETYPE");
    if (mc_cpu_has_avx512() && !is_avx512_core(core) && !(user && *user) &&
        gotoblas_dynamic_init && gotoblas_dynamic_quit) {
        char was[64];
        snprintf(was, sizeof was, "%s", core);
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        gotoblas_dynamic_quit();
        gotoblas_dynamic_init();
        unsetenv("OPENBLAS_CORETYPE");
        mc_log(MC_LOG_INFO, "OpenBLAS chose '%s' kernels on an AVX-512 CPU; switched to '%s'",
               was, openblas_get_corename());
    }
    openblas_set_num_threads(1); /* we thread over tiles (see the top comment) */
    snprintf(blas_desc, sizeof blas_desc, "OpenBLAS (%s kernels), tiled", openblas_get_corename());
}
#elif defined(MC_BLAS_BLIS)
static void blas_setup(void)
{
    bli_thread_set_num_threads(1); /* we thread over tiles (see the top comment) */
    snprintf(blas_desc, sizeof blas_desc, "BLIS %s (%s kernels), tiled",
             bli_info_get_version_str(), bli_arch_string(bli_arch_query_id()));
}
#else
static void blas_setup(void)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(blas_desc, sizeof blas_desc, "oneDNN %d.%d.%d (%s), tiled", v->major, v->minor,
             v->patch, v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
}
#endif

static void blas_setup_once(void)
{
    blas_setup();
    mc_log(MC_LOG_INFO, "GEMM library: %s", blas_desc);
}

const char *mc_gemm_blas_name(void)
{
    pthread_once(&blas_once, blas_setup_once);
    return blas_desc;
}

/* One single-threaded library call on an m x n block of C (op(A) rows, op(B) columns). */
static void sgemm_1thread(bool ta, bool tb, int64_t m, int64_t n, int64_t K, float alpha,
                          const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                          float *c, int64_t ldc)
{
#if defined(MC_BLAS_OPENBLAS) || defined(MC_BLAS_BLIS)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)K, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
#else
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, K, alpha, a, lda, b,
                                  ldb, beta, c, ldc);
    MC_ASSERT(st == dnnl_success);
#endif
}

static void gemm_tile(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *C, int64_t ldc, int64_t tile, const struct tiling *tl)
{
    int64_t i0 = tile / tl->ntn * tl->tm, j0 = tile % tl->ntn * tl->tn;
    int64_t m = M - i0 < tl->tm ? M - i0 : tl->tm, n = N - j0 < tl->tn ? N - j0 : tl->tn;
    const float *a = ta ? A + i0 : A + i0 * lda; /* op(A) rows i0.. */
    const float *b = tb ? B + j0 * ldb : B + j0; /* op(B) columns j0.. */
    sgemm_1thread(ta, tb, m, n, K, alpha, a, lda, b, ldb, beta, C + i0 * ldc + j0, ldc);
}

void gemm_blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    pthread_once(&blas_once, blas_setup_once);
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* libraries differ on K == 0; the contract: C = beta C, NaN cleared if 0 */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
#if defined(MC_BLAS_OPENBLAS) || defined(MC_BLAS_BLIS)
    /* The C interface takes int sizes; every dimension of the supported models fits easily. */
    MC_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
              ldb <= INT32_MAX && ldc <= INT32_MAX);
#endif
    struct tiling tl = tiles_for(ta, M, N);
    /* small products are not worth waking the team; which thread runs a tile never matters */
    bool par = tl.ntiles > 1 && (double)M * (double)N * (double)K > 4e6;
#pragma omp parallel if (par)
    {
        omp_set_num_threads(1); /* no nested threads inside the library, even if nesting is on */
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tl.ntiles; t++)
            gemm_tile(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, t, &tl);
    }
}

/* ---- 16-bit A and B: widened per tile ------------------------------------------------------
 * The same tiles and the same single-threaded library call per tile as gemm_blas, but each
 * tile first widens the rows of op(A) and the columns of op(B) it reads into fp32 panels of
 * its own (the role of a packing step), and rounds its block of a 16-bit C itself: no
 * full-size fp32 copies of A, B or C. The panels hold the same values the whole-matrix
 * widening gives, so the library sees the same numbers in the same calls.
 * tests/unit/backend/test_half_ops.c compares it with widen-then-gemm_blas bit for bit. */
static void widen_rows(float *dst, const void *src, enum mc_dtype dt, int64_t rows, int64_t cols,
                       int64_t ld, mc_convert_fn cv)
{
    size_t es = mc_dtype_size(dt);
    for (int64_t r = 0; r < rows; r++)
        cv(dst + r * cols, MC_DTYPE_F32, (const char *)src + (size_t)(r * ld) * es, dt, cols);
}

void gemm_blas_half(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const void *A, enum mc_dtype ab_dt, int64_t lda, const void *B, int64_t ldb,
                    float beta, void *C, enum mc_dtype c_dt, int64_t ldc, mc_convert_fn cv)
{
    pthread_once(&blas_once, blas_setup_once);
    if (M <= 0 || N <= 0)
        return;
    struct tiling tl = tiles_for(ta, M, N);
    bool par = tl.ntiles > 1 && (double)M * (double)N * (double)K > 4e6;
    size_t es = mc_dtype_size(ab_dt), cs = mc_dtype_size(c_dt);
    bool c16 = c_dt != MC_DTYPE_F32;
    size_t panel = (size_t)(tl.tm > tl.tn ? tl.tm : tl.tn) * (size_t)(K > 0 ? K : 1);
#pragma omp parallel if (par)
    {
        omp_set_num_threads(1);
        float *pa = mc_alloc(panel * sizeof(float)), *pb = mc_alloc(panel * sizeof(float));
        float *pc = c16 ? mc_alloc((size_t)tl.tm * (size_t)tl.tn * sizeof(float)) : NULL;
        MC_ASSERT(pa && pb && (pc || !c16));
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tl.ntiles; t++) {
            int64_t i0 = t / tl.ntn * tl.tm, j0 = t % tl.ntn * tl.tn;
            int64_t m = M - i0 < tl.tm ? M - i0 : tl.tm, n = N - j0 < tl.tn ? N - j0 : tl.tn;
            /* op(A) rows i0..i0+m: stored rows (NoTrans) or columns (Trans) */
            if (ta)
                widen_rows(pa, (const char *)A + (size_t)i0 * es, ab_dt, K, m, lda, cv);
            else
                widen_rows(pa, (const char *)A + (size_t)(i0 * lda) * es, ab_dt, m, K, lda, cv);
            if (tb)
                widen_rows(pb, (const char *)B + (size_t)(j0 * ldb) * es, ab_dt, n, K, ldb, cv);
            else
                widen_rows(pb, (const char *)B + (size_t)j0 * es, ab_dt, K, n, ldb, cv);
            int64_t la = ta ? m : K, lb = tb ? K : n;
            char *cb = (char *)C + (size_t)(i0 * ldc + j0) * cs;
            if (!c16) {
                if (K > 0)
                    sgemm_1thread(ta, tb, m, n, K, alpha, pa, la, pb, lb, beta, (float *)cb, ldc);
                else
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            float *c = (float *)cb + i * ldc + j;
                            *c = beta == 0.0f ? 0.0f : beta * *c;
                        }
                continue;
            }
            if (beta != 0.0f)
                widen_rows(pc, cb, c_dt, m, n, ldc, cv);
            if (K > 0)
                sgemm_1thread(ta, tb, m, n, K, alpha, pa, la, pb, lb, beta, pc, n);
            else
                for (int64_t i = 0; i < m * n; i++)
                    pc[i] = beta == 0.0f ? 0.0f : beta * pc[i];
            for (int64_t i = 0; i < m; i++)
                cv(cb + (size_t)(i * ldc) * cs, c_dt, pc + i * n, MC_DTYPE_F32, n);
        }
        mc_free(pa);
        mc_free(pb);
        mc_free(pc);
    }
}

/* ---- bf16 A and B: dot products in 16 bits, fp32 accumulation ------------------------------
 * On a CPU with AVX512-BF16, VDPBF16PS multiplies pairs of bf16 values and adds the products
 * to fp32 accumulators at twice the fp32 FMA rate (Zen 4, docs/performance.md). oneDNN's
 * matmul primitive JITs such kernels ("brg:avx512_core_bf16"); this feeds it with the tiles of
 * gemm_blas: per tile, op(A)'s rows and op(B)'s columns are copied into dense bf16 panels
 * (2.6.3's brgemm matmul takes dense operands only; strided ones fall to a slower kernel), one
 * single-threaded primitive call writes an fp32 tile, and C = round_C(alpha tile + beta C) is
 * applied here, exactly as gemm_blas_half does. The products of two bf16 values are exact in
 * fp32, so the result differs from the widen paths (the reference) only in the fp32 summation
 * order and rounding inside the kernel; tests/unit/backend/test_half_ops.c bounds it against
 * float64. VDPBF16PS treats denormal inputs as zero and flushes denormal results, whatever
 * MXCSR says (docs/cpu_backend.md has what was measured).
 *
 * Primitives are created inside our OpenMP team with the thread count set to 1, so oneDNN
 * blocks them for one thread whatever OMP_NUM_THREADS is (the bits depend on the shape only),
 * and cached per (transposes, m, n, k): the tiles of a model make a handful of shapes. Entries
 * are immutable once published at the head of a list, so lookups take no lock. Beyond
 * DOT_CACHE_MAX shapes (generation with growing contexts) a primitive is made for the call and
 * destroyed after it: slower, same bits. The scratchpad is ours (user mode), one per thread,
 * so concurrent calls of one primitive share nothing. */
#if defined(MC_BLAS_ONEDNN)
#define DOT_CACHE_MAX 256

/* A tile's shape and where its result goes: the fp32 tile buffer (ldc 0, dense [m, n]) or C
 * itself (dtype c_dt, row stride ldc). */
struct dot_shape {
    bool ta, tb;
    int64_t m, n, k;
    enum mc_dtype c_dt;
    int64_t ldc;
};

struct dot_prim {
    struct dot_shape sh;
    dnnl_primitive_t prim;
    size_t scratch; /* bytes of user scratchpad it needs */
    struct dot_prim *next;
};

static dnnl_engine_t dot_engine;
static struct dot_prim *dot_cache; /* published with release stores; never unlinked in use */
static int dot_cached;
static pthread_mutex_t dot_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t dot_once = PTHREAD_ONCE_INIT;
static char dot_impl[96], dot_why[160];

/* Memory descriptors of one tile: op(A) [m, k], op(B) [k, n] (dense bf16, transposed ones
 * stored column-major), the result [m, n] (the fp32 tile, or C's rows). */
static void dot_descs(const struct dot_shape *t, dnnl_memory_desc_t *a, dnnl_memory_desc_t *b,
                      dnnl_memory_desc_t *c)
{
    int64_t m = t->m, n = t->n, k = t->k;
    dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n};
    dnnl_dims_t sa = {t->ta ? 1 : k, t->ta ? m : 1}, sb = {t->tb ? 1 : n, t->tb ? k : 1};
    dnnl_dims_t sc = {t->ldc ? t->ldc : n, 1};
    dnnl_data_type_t ct = t->ldc && t->c_dt == MC_DTYPE_BF16 ? dnnl_bf16 : dnnl_f32;
    MC_ASSERT(dnnl_memory_desc_init_by_strides(a, 2, da, dnnl_bf16, sa) == dnnl_success);
    MC_ASSERT(dnnl_memory_desc_init_by_strides(b, 2, db, dnnl_bf16, sb) == dnnl_success);
    MC_ASSERT(dnnl_memory_desc_init_by_strides(c, 2, dc, ct, sc) == dnnl_success);
}

/* A primitive for one tile shape, or NULL (and *impl says why) if oneDNN refuses it. The
 * caller has set the OpenMP thread count to 1 (see above). */
static dnnl_primitive_t dot_create(const struct dot_shape *t, size_t *scratch, const char **impl)
{
    dnnl_memory_desc_t a, b, c;
    dot_descs(t, &a, &b, &c);
    dnnl_matmul_desc_t d;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p = NULL;
    *impl = "no bf16 matmul in this oneDNN";
    MC_ASSERT(dnnl_matmul_desc_init(&d, &a, &b, NULL, &c) == dnnl_success);
    MC_ASSERT(dnnl_primitive_attr_create(&attr) == dnnl_success);
    MC_ASSERT(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
              dnnl_success);
    if (dnnl_primitive_desc_create(&pd, &d, attr, dot_engine, NULL) == dnnl_success) {
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl);
        *scratch = dnnl_memory_desc_get_size(
                dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
        if (dnnl_primitive_create(&p, pd) != dnnl_success)
            p = NULL;
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_primitive_attr_destroy(attr);
    return p;
}

/* Once: the CPU must have AVX512-BF16 and oneDNN must pick a JIT bf16 kernel for a probe
 * shape (not its reference implementation, which would be far slower). */
static void dot_setup(void)
{
    if (!mc_cpu_features()->avx512_bf16) {
        snprintf(dot_why, sizeof dot_why, "the CPU has no AVX512-BF16");
        return;
    }
    if (dnnl_engine_create(&dot_engine, dnnl_cpu, 0) != dnnl_success) {
        snprintf(dot_why, sizeof dot_why, "oneDNN made no CPU engine");
        return;
    }
    size_t scratch = 0;
    const char *impl;
    dnnl_primitive_t p = NULL;
#pragma omp parallel num_threads(1)
    {
        omp_set_num_threads(1);
        struct dot_shape probe = {false, false, 64, 64, 64, MC_DTYPE_F32, 0};
        p = dot_create(&probe, &scratch, &impl);
    }
    if (p && strstr(impl, "bf16") && strncmp(impl, "ref", 3))
        snprintf(dot_impl, sizeof dot_impl, "%s", impl);
    else
        snprintf(dot_why, sizeof dot_why, "oneDNN's bf16 matmul is '%s', not a JIT bf16 kernel",
                 impl);
    if (p)
        dnnl_primitive_destroy(p);
}

bool gemm_dot_bf16_available(const char **why)
{
    pthread_once(&dot_once, dot_setup);
    if (why)
        *why = dot_impl[0] ? dot_impl : dot_why;
    return dot_impl[0] != 0;
}

static bool same_shape(const struct dot_shape *x, const struct dot_shape *y)
{
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k &&
           x->ldc == y->ldc && (!x->ldc || x->c_dt == y->c_dt);
}

static struct dot_prim *dot_find(const struct dot_shape *t)
{
    for (struct dot_prim *e = __atomic_load_n(&dot_cache, __ATOMIC_ACQUIRE); e; e = e->next)
        if (same_shape(&e->sh, t))
            return e;
    return NULL;
}

/* The cached primitive for a tile shape; *owned when the cache is full and the caller must
 * dot_drop it after use. Stops the process if oneDNN refuses a shape the probe allowed. */
static struct dot_prim *dot_get(const struct dot_shape *t, bool *owned)
{
    *owned = false;
    struct dot_prim *e = dot_find(t);
    if (e)
        return e;
    pthread_mutex_lock(&dot_lock);
    e = dot_find(t);
    if (!e) {
        e = malloc(sizeof *e); /* lives as long as oneDNN's JIT code: not mc_alloc's count */
        MC_ASSERT(e);
        *e = (struct dot_prim){.sh = *t};
        const char *impl;
        e->prim = dot_create(t, &e->scratch, &impl);
        if (!e->prim) {
            mc_log(MC_LOG_ERROR, "bf16 dot GEMM: oneDNN made no matmul for %c%c %lld x %lld x "
                   "%lld (%s)", t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', (long long)t->m,
                   (long long)t->n, (long long)t->k, impl);
            abort();
        }
        if (dot_cached < DOT_CACHE_MAX) {
            e->next = dot_cache;
            __atomic_store_n(&dot_cache, e, __ATOMIC_RELEASE);
            dot_cached++;
        } else {
            *owned = true;
        }
    }
    pthread_mutex_unlock(&dot_lock);
    return e;
}

static void dot_drop(struct dot_prim *e)
{
    dnnl_primitive_destroy(e->prim);
    free(e);
}

void gemm_dot_bf16_clear_cache(void)
{
    pthread_mutex_lock(&dot_lock);
    for (struct dot_prim *e = dot_cache, *next; e; e = next) {
        next = e->next;
        dot_drop(e);
    }
    dot_cache = NULL;
    dot_cached = 0;
    pthread_mutex_unlock(&dot_lock);
}

/* What one thread of the team holds: panels, the fp32 tile, a row of C, a scratchpad. */
struct dot_work {
    void *pa, *pb, *pc, *row, *scratch;
    size_t pa_bytes, pb_bytes, pc_bytes, row_bytes, scratch_bytes;
    dnnl_stream_t stream;
};

/* *p with at least `bytes`, grown on first need: a panel only for an operand that is not
 * dense already, the fp32 tile only where C is not written directly (a logits GEMM's panels
 * are ~100 MB per thread: allocated, even untouched, they inflated the run's peak). */
static void *grow(void **p, size_t *have, size_t bytes)
{
    if (bytes > *have) {
        mc_free(*p);
        *p = MC_MEM_AS(MC_MEM_WORKSPACE, mc_alloc(bytes));
        MC_ASSERT(*p);
        *have = bytes;
    }
    return *p;
}

/* rows x cols bf16 values with row stride ld, as a dense block: src itself if already dense,
 * else a copy in *buf. */
static const uint16_t *dense(void **buf, size_t *have, const uint16_t *src, int64_t rows,
                             int64_t cols, int64_t ld)
{
    if (ld == cols || rows == 1)
        return src;
    uint16_t *dst = grow(buf, have, (size_t)(rows * cols) * 2);
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * cols, src + r * ld, (size_t)cols * 2);
    return dst;
}

static dnnl_memory_t dot_mem(const dnnl_memory_desc_t *md, const void *p)
{
    dnnl_memory_t m;
    MC_ASSERT(dnnl_memory_create(&m, md, dot_engine, (void *)p) == dnnl_success);
    return m;
}

/* out = op(a) op(b) by one single-threaded primitive call: the dense fp32 tile (t->ldc 0) or
 * C's rows (rounded to bf16 by oneDNN when C is bf16). */
static void dot_tile(struct dot_work *w, const struct dot_shape *t, const uint16_t *a,
                     const uint16_t *b, void *out)
{
    bool owned;
    struct dot_prim *e = dot_get(t, &owned);
    grow(&w->scratch, &w->scratch_bytes, e->scratch);
    dnnl_memory_desc_t da, db, dc, ds;
    dot_descs(t, &da, &db, &dc);
    dnnl_dims_t sd = {(int64_t)(e->scratch ? e->scratch : 1)};
    MC_ASSERT(dnnl_memory_desc_init_by_tag(&ds, 1, sd, dnnl_u8, dnnl_a) == dnnl_success);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, dot_mem(&da, a)},
                               {DNNL_ARG_WEIGHTS, dot_mem(&db, b)},
                               {DNNL_ARG_DST, dot_mem(&dc, out)},
                               {DNNL_ARG_SCRATCHPAD, dot_mem(&ds, w->scratch)}};
    MC_ASSERT(dnnl_primitive_execute(e->prim, w->stream, e->scratch ? 4 : 3, args) ==
              dnnl_success);
    MC_ASSERT(dnnl_stream_wait(w->stream) == dnnl_success);
    for (int i = 0; i < 4; i++)
        dnnl_memory_destroy(args[i].memory);
    if (owned)
        dot_drop(e);
}

/* C block [m, n] (stride ldc) = round_C(alpha tile + beta C), as gemm_blas_half rounds. */
static void dot_store(struct dot_work *w, const float *tile, int64_t m, int64_t n, float alpha,
                      float beta, char *C, enum mc_dtype c_dt, int64_t ldc, mc_convert_fn cv)
{
    size_t cs = mc_dtype_size(c_dt);
    float *row = c_dt == MC_DTYPE_F32 ? NULL : grow(&w->row, &w->row_bytes, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < m; i++) {
        char *c = C + (size_t)(i * ldc) * cs;
        float *out = row ? row : (float *)c;
        if (beta != 0.0f && c_dt != MC_DTYPE_F32)
            cv(out, MC_DTYPE_F32, c, c_dt, n);
        for (int64_t j = 0; j < n; j++)
            out[j] = beta == 0.0f ? alpha * tile[i * n + j]
                                  : alpha * tile[i * n + j] + beta * out[j];
        if (c_dt != MC_DTYPE_F32)
            cv(c, c_dt, out, MC_DTYPE_F32, n);
    }
}

/* One tile of C: op(A) rows i0.., op(B) columns j0.. made dense, the product, the store. */
static void dot_run_tile(struct dot_work *w, bool ta, bool tb, int64_t m, int64_t n, int64_t K,
                         float alpha, const uint16_t *A, int64_t lda, const uint16_t *B,
                         int64_t ldb, float beta, char *C, enum mc_dtype c_dt, int64_t ldc,
                         mc_convert_fn cv)
{
    /* C = op(A) op(B): the primitive writes C itself (no fp32 tile, no second pass) */
    bool direct = K > 0 && alpha == 1.0f && beta == 0.0f;
    float *tile = direct ? NULL : grow(&w->pc, &w->pc_bytes, (size_t)(m * n) * sizeof(float));
    if (K > 0) {
        const uint16_t *a = ta ? dense(&w->pa, &w->pa_bytes, A, K, m, lda)
                               : dense(&w->pa, &w->pa_bytes, A, m, K, lda);
        const uint16_t *b = tb ? dense(&w->pb, &w->pb_bytes, B, n, K, ldb)
                               : dense(&w->pb, &w->pb_bytes, B, K, n, ldb);
        struct dot_shape t = {ta, tb, m, n, K, c_dt, direct ? ldc : 0};
        dot_tile(w, &t, a, b, direct ? (void *)C : tile);
        if (direct)
            return;
    } else {
        memset(tile, 0, (size_t)(m * n) * sizeof(float));
    }
    dot_store(w, tile, m, n, alpha, beta, C, c_dt, ldc, cv);
}

void gemm_dot_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                   enum mc_dtype c_dt, int64_t ldc, mc_convert_fn cv)
{
    const char *why;
    if (!gemm_dot_bf16_available(&why)) {
        mc_log(MC_LOG_ERROR, "bf16 dot GEMM called where it is not available (%s)", why);
        abort();
    }
    MC_ASSERT(c_dt == MC_DTYPE_F32 || c_dt == MC_DTYPE_BF16);
    if (M <= 0 || N <= 0)
        return;
    struct tiling tl = tiles_for(ta, M, N);
    bool par = tl.ntiles > 1 && (double)M * (double)N * (double)K > 4e6;
    size_t cs = mc_dtype_size(c_dt);
#pragma omp parallel if (par)
    {
        omp_set_num_threads(1); /* primitives made here are blocked for one thread */
        struct dot_work w = {0};
        MC_ASSERT(dnnl_stream_create(&w.stream, dot_engine, dnnl_stream_default_flags) ==
                  dnnl_success);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < tl.ntiles; t++) {
            int64_t i0 = t / tl.ntn * tl.tm, j0 = t % tl.ntn * tl.tn;
            int64_t m = M - i0 < tl.tm ? M - i0 : tl.tm, n = N - j0 < tl.tn ? N - j0 : tl.tn;
            const uint16_t *a = (const uint16_t *)A + (ta ? i0 : i0 * lda);
            const uint16_t *b = (const uint16_t *)B + (tb ? j0 * ldb : j0);
            dot_run_tile(&w, ta, tb, m, n, K, alpha, a, lda, b, ldb, beta,
                         (char *)C + (size_t)(i0 * ldc + j0) * cs, c_dt, ldc, cv);
        }
        dnnl_stream_destroy(w.stream);
        mc_free(w.pa); mc_free(w.pb); mc_free(w.pc); mc_free(w.row); mc_free(w.scratch);
    }
}
#else
bool gemm_dot_bf16_available(const char **why)
{
    if (why)
        *why = "megatron.c was built with a GEMM library other than oneDNN (MC_BLAS)";
    return false;
}

void gemm_dot_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                   enum mc_dtype c_dt, int64_t ldc, mc_convert_fn cv)
{
    (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)alpha; (void)A; (void)lda; (void)B;
    (void)ldb; (void)beta; (void)C; (void)c_dt; (void)ldc; (void)cv;
    mc_log(MC_LOG_ERROR, "bf16 dot GEMM: needs oneDNN (configure with -DMC_BLAS=onednn)");
    abort();
}

void gemm_dot_bf16_clear_cache(void) {}
#endif
