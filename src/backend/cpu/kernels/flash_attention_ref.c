/* The reference tile kernels of the CPU flash attention (flash_attention.h): plain fp32 loops,
 * sums in ascending index order, built with -ffp-contract=off. The products are the matrix
 * products of the FlashAttention-2 algorithm (Dao, 2023, Algorithms 1 and 2) on one tile
 * pair; exp is the C library's expf. */
#include "backend/cpu/kernels/flash_attention.h"

#include <math.h>

static void gemm_nn_ref(float *C, int64_t ldc, const float *A, int64_t lda, const float *B,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool acc)
{
    for (int64_t m = 0; m < M; m++) {
        float *c = C + m * ldc;
        if (!acc)
            for (int64_t n = 0; n < N; n++)
                c[n] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float a = A[m * lda + k];
            const float *b = B + k * ldb;
            for (int64_t n = 0; n < N; n++)
                c[n] += a * b[n];
        }
    }
}

static void gemm_tn_ref(float *C, int64_t ldc, const float *A, int64_t lda, const float *B,
                        int64_t ldb, int64_t M, int64_t N, int64_t K, bool acc)
{
    for (int64_t m = 0; m < M; m++) {
        float *c = C + m * ldc;
        if (!acc)
            for (int64_t n = 0; n < N; n++)
                c[n] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float a = A[k * lda + m];
            const float *b = B + k * ldb;
            for (int64_t n = 0; n < N; n++)
                c[n] += a * b[n];
        }
    }
}

static float exp_sum_ref(float *y, const float *x, int64_t n, float m)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float d = x[j] - m;
        y[j] = d < -87.3f ? 0.0f : expf(d);
        sum += y[j];
    }
    return sum;
}

static void scores_ref(float *x, int64_t n, float alpha, float mult)
{
    for (int64_t j = 0; j < n; j++) {
        x[j] *= alpha;
        if (mult != 1.0f)
            x[j] *= mult;
    }
}

static float row_max_ref(const float *x, int64_t n, float init)
{
    for (int64_t j = 0; j < n; j++)
        init = x[j] > init ? x[j] : init;
    return init;
}

static void scale_ref(float *x, int64_t n, float s)
{
    for (int64_t j = 0; j < n; j++)
        x[j] *= s;
}

static void dsoftmax_ref(float *g, const float *p, int64_t n, float D, float mult)
{
    for (int64_t j = 0; j < n; j++)
        g[j] = mult * (p[j] * (g[j] - D));
}

static const struct mc_flash_kernels ref = {"ref", gemm_nn_ref, gemm_tn_ref, exp_sum_ref,
                                            scores_ref, row_max_ref, scale_ref, dsoftmax_ref};

const struct mc_flash_kernels *mc_flash_kernels_ref(void) { return &ref; }
