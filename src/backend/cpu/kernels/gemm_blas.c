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
 * halved down to 384 until there are two tiles (two threads get work). */
#define MIN_TILES 4
#define TN_ROWS 768

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
            if (t.ntiles >= 2 || t.tn <= 384)
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
