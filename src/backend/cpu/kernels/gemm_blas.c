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
 * has one thread pool and one knob (OMP_NUM_THREADS). Cost: 0-6% on one thread (the library
 * re-packs the shared operand per tile), measured in docs/gemm.md.
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

#define TILE_M 256  /* rows of C per tile */
#define TILE_N 1024 /* columns of C per tile */

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
                      float *C, int64_t ldc, int64_t tile, int64_t ntn)
{
    int64_t i0 = tile / ntn * TILE_M, j0 = tile % ntn * TILE_N;
    int64_t m = M - i0 < TILE_M ? M - i0 : TILE_M, n = N - j0 < TILE_N ? N - j0 : TILE_N;
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
    int64_t ntn = (N + TILE_N - 1) / TILE_N, ntiles = (M + TILE_M - 1) / TILE_M * ntn;
    /* small products are not worth waking the team; which thread runs a tile never matters */
    bool par = ntiles > 1 && (double)M * (double)N * (double)K > 4e6;
#pragma omp parallel if (par)
    {
        omp_set_num_threads(1); /* no nested threads inside the library, even if nesting is on */
#pragma omp for schedule(static)
        for (int64_t t = 0; t < ntiles; t++)
            gemm_tile(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, t, ntn);
    }
}
