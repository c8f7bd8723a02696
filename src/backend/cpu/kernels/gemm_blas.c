/* GEMM through an optimized library chosen at configure time by cmake/blas.cmake: oneDNN's
 * dnnl_sgemm by default, or OpenBLAS / BLIS through CBLAS (docs/gemm.md has the measurements).
 * Megatron calls cuBLAS through torch.matmul / F.linear; this is our equivalent.
 * Row-major C[M,N] = alpha op(A) op(B) + beta C.
 *
 * Threads follow OpenMP's setting (OMP_NUM_THREADS / omp_set_num_threads) so the whole program
 * has one knob. oneDNN and OpenBLAS gave bit-identical results for 1, 2, 3, 4 and 16 threads on
 * the model's shapes (tests/unit/backend/test_kernels.c keeps checking 1/2/3); BLIS does not on
 * small shapes, which is one reason it is not the default.
 *
 * OpenBLAS (DYNAMIC_ARCH builds) picks its kernels from CPUID when the library loads. Some
 * versions do not know newer AVX-512 CPUs (e.g. AMD Zen4 in OpenBLAS < 0.3.22 on some models)
 * and fall back to Haswell/SSE3 kernels. Because its constructor runs before ours, setting
 * OPENBLAS_CORETYPE from our code is too late; instead, on first use we re-run OpenBLAS's own
 * core selection (gotoblas_dynamic_init, exported by DYNAMIC_ARCH builds) with
 * OPENBLAS_CORETYPE=SkylakeX when the CPU and OS support AVX-512 and the user did not choose a
 * core themselves. The kernel in use is logged once. */
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
    snprintf(blas_desc, sizeof blas_desc, "OpenBLAS (%s kernels)", openblas_get_corename());
}

static int last_threads;

static void blas_threads(void)
{
    int t = omp_get_max_threads();
    if (t != last_threads) { /* cheap check: openblas_set_num_threads may resize its pool */
        openblas_set_num_threads(t);
        last_threads = t;
    }
}
#elif defined(MC_BLAS_BLIS)
static void blas_setup(void)
{
    snprintf(blas_desc, sizeof blas_desc, "BLIS %s (%s kernels)", bli_info_get_version_str(),
             bli_arch_string(bli_arch_query_id()));
}

static void blas_threads(void) { bli_thread_set_num_threads(omp_get_max_threads()); }
#else
static void blas_setup(void)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(blas_desc, sizeof blas_desc, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
}

static void blas_threads(void) {}
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
    blas_threads();
#if defined(MC_BLAS_OPENBLAS) || defined(MC_BLAS_BLIS)
    /* The C interface takes int sizes; every dimension of the supported models fits easily. */
    MC_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
              ldb <= INT32_MAX && ldc <= INT32_MAX);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
#else
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                  beta, C, ldc);
    MC_ASSERT(st == dnnl_success);
#endif
}
