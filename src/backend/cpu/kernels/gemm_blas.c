/* GEMM through CBLAS sgemm (OpenBLAS or BLIS, chosen by cmake/blas.cmake): the fast path for
 * every matmul of the model. Same contract as gemm_ref (backend.h).
 *
 * Threading: the BLAS library runs single-threaded and we split C into column (or row)
 * blocks over OpenMP ourselves. One thread pool instead of two (OpenMP's and the BLAS's
 * pthreads spinning against each other is very slow on a loaded 2-core machine), and the block
 * boundaries depend only on the shape, so every element is computed by the same BLAS call
 * whatever OMP_NUM_THREADS is: results are bit-identical for any thread count. Inside an
 * active parallel region (attention's per-head GEMMs) the call runs whole on the caller. */
#include "backend/cpu/kernels/ref.h"

#include <cblas.h>
#include <omp.h>
#include <pthread.h>

#define GEMM_MAX_BLOCKS 16
#define GEMM_MIN_BLOCK 64

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void blas_single_threaded(void)
{
#if defined(MC_BLAS_OPENBLAS)
    openblas_set_num_threads(1);
#endif
}

static void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* Block length along a dimension of length n: at most GEMM_MAX_BLOCKS blocks, a multiple of
 * 16, at least GEMM_MIN_BLOCK. */
static int64_t block_len(int64_t n)
{
    int64_t len = (n + GEMM_MAX_BLOCKS - 1) / GEMM_MAX_BLOCKS;
    len = (len + 15) / 16 * 16;
    return len < GEMM_MIN_BLOCK ? GEMM_MIN_BLOCK : len;
}

void gemm_blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* BLAS would scale C by beta; beta == 0 must also clear NaN */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    pthread_once(&blas_once, blas_single_threaded);
    bool split_n = N >= M;
    int64_t dim = split_n ? N : M, len = block_len(dim);
    int64_t nblk = (dim + len - 1) / len;
    if (nblk == 1 || omp_in_parallel() || M * N * K < (int64_t)1 << 18) {
        sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t o = blk * len, n = o + len < dim ? len : dim - o;
        if (split_n) /* columns o..o+n of C: columns of op(B) */
            sgemm(ta, tb, M, n, K, alpha, A, lda, tb ? B + o * ldb : B + o, ldb, beta, C + o, ldc);
        else /* rows o..o+n of C: rows of op(A) */
            sgemm(ta, tb, n, N, K, alpha, ta ? A + o : A + o * lda, lda, B, ldb, beta,
                  C + o * ldc, ldc);
    }
}
