/* GEMM through CBLAS sgemm (OpenBLAS or BLIS, chosen by cmake/blas.cmake): the fast path for
 * every matmul of the model. Same contract as gemm_ref (backend.h). */
#include "backend/cpu/kernels/ref.h"

#include <cblas.h>

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
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}
