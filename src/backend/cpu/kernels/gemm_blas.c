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

/* Tiles of C: start at 256 x 1024 and halve (columns first, down to 64 x 256) until there are
 * at least MIN_TILES, so that a few threads get balanced work even for T = 256 or the 768 x 768
 * weight grads. Depends on the shape only, never on the thread count. */
#define MIN_TILES 24

struct tiling {
    int64_t tm, tn, ntn, ntiles;
};

static struct tiling tiles_for(int64_t M, int64_t N)
{
    struct tiling t = {256, 1024, 0, 0};
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
    struct tiling tl = tiles_for(M, N);
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
