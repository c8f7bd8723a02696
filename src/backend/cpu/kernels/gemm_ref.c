/* Reference GEMM: C = alpha * op(A) @ op(B) + beta * C as a plain triple loop (the definition
 * the BLAS-backed gemm_blas.c and any tuned kernel are tested against). Counterpart of
 * torch.addmm / torch.baddbmm in Megatron's linear layers and core attention. */
#include "backend/cpu/kernels/ref.h"

void gemm_ref(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
#pragma omp parallel for schedule(static) if (M * N * K > 32768)
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                float a = ta ? A[k * lda + i] : A[i * lda + k];
                float b = tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            /* beta == 0 must ignore C entirely (it may hold NaN from an earlier use) */
            C[i * ldc + j] = beta == 0.0f ? alpha * acc : alpha * acc + beta * C[i * ldc + j];
        }
    }
}
