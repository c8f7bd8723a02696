/* gemm_dot_bf16 (gemm_blas.c: bf16 A and B on AVX512-BF16 dot products through oneDNN's bf16
 * matmul, fp32 accumulation) against a float64 sum of the same bf16 values: every transpose,
 * strided operands, ragged shapes cut into several tiles (and ones below the threading
 * threshold, K = 0, 1 x 1 and one row), beta 0 (NaN in C ignored) and 0.5, C fp32 and bf16; the same
 * bits on 1, 2 and 3 threads with the primitives re-created each time. Then what the kernel
 * does with Inf, NaN and denormals (docs/cpu_backend.md). Skipped, with the reason printed,
 * where the CPU has no AVX512-BF16 or megatron.c was built without oneDNN.
 *
 * Tolerance: the products of bf16 values are exact in fp32, so the only error is the fp32
 * summation (any order: at most (K + 2) u times the sum of |terms|, u = 2^-24) and, for a bf16
 * C, its final rounding (half a bf16 ulp: 2^-8 |value| relative). */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/ref.h"
#include "core/dtype.h"
#include "megatron.h"
#include "test.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x853C49E6748FEA9Bull;
static float urand(void) /* [-1, 1) */
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)(rs >> 40) / 8388608.0f - 1.0f;
}

static uint16_t *bf16_rand(int64_t n)
{
    uint16_t *p = malloc(2 * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        p[i] = mc_f32_to_bf16(urand());
    return p;
}

struct shape {
    int64_t M, N, K;
};

/* C (stride ldc, dtype cdt) against alpha S + beta C0 within the bound above; S, Sabs: the
 * float64 sum of products and of their magnitudes, [M, N]. */
static void expect_close(const char *what, const void *C, enum mc_dtype cdt, int64_t ldc,
                         const float *c0, const double *S, const double *Sabs, struct shape s,
                         float alpha, float beta)
{
    double worst = 0;
    int bad = 0;
    for (int64_t i = 0; i < s.M; i++)
        for (int64_t j = 0; j < s.N; j++) {
            double base = beta != 0.0f ? (double)beta * c0[i * ldc + j] : 0.0;
            double want = alpha * S[i * s.N + j] + base;
            double tol = (double)(s.K + 2) * 0x1p-24 * (alpha * Sabs[i * s.N + j] + fabs(base));
            if (cdt == MC_DTYPE_BF16)
                tol += 0x1p-8 * fabs(want);
            double got = cdt == MC_DTYPE_F32 ? ((const float *)C)[i * ldc + j]
                                             : mc_bf16_to_f32(((const uint16_t *)C)[i * ldc + j]);
            double err = fabs(got - want);
            if (!(err <= tol + 1e-30))
                bad++;
            worst = err / (tol + 1e-30) > worst ? err / (tol + 1e-30) : worst;
        }
    test_checks++;
    if (bad) {
        test_failures++;
        fprintf(stderr, "%s: %d elements outside the bound (worst %.3g x the bound)\n", what, bad,
                worst);
    }
}

/* One call on threads th with fresh primitives; C starts as c0 (beta != 0) or NaN. */
static void run(int th, bool ta, bool tb, struct shape s, const uint16_t *A, int64_t lda,
                const uint16_t *B, int64_t ldb, float beta, void *C, enum mc_dtype cdt,
                int64_t ldc, const float *c0)
{
    int64_t nc = s.M * ldc;
    if (cdt == MC_DTYPE_F32)
        for (int64_t i = 0; i < nc; i++)
            ((float *)C)[i] = beta != 0.0f ? c0[i] : NAN;
    else
        for (int64_t i = 0; i < nc; i++)
            ((uint16_t *)C)[i] = beta != 0.0f ? mc_f32_to_bf16(c0[i]) : 0x7FC0;
    omp_set_num_threads(th);
    gemm_dot_bf16_clear_cache();
    gemm_dot_bf16(ta, tb, s.M, s.N, s.K, 0.75f, A, lda, B, ldb, beta, C, cdt, ldc, convert_ref);
}

static void test_case(bool ta, bool tb, struct shape s)
{
    int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 1, ldc = s.N + 2;
    int64_t na = (ta ? s.K : s.M) * lda, nb = (tb ? s.N : s.K) * ldb, nc = s.M * ldc;
    uint16_t *A = bf16_rand(na), *B = bf16_rand(nb);
    float *c0 = malloc(4 * (size_t)nc);
    for (int64_t i = 0; i < nc; i++) /* bf16 values, so a bf16 C starts from the same */
        c0[i] = mc_bf16_to_f32(mc_f32_to_bf16(urand()));
    double *S = calloc((size_t)(s.M * s.N), 8), *Sabs = calloc((size_t)(s.M * s.N), 8);
    for (int64_t i = 0; i < s.M; i++)
        for (int64_t j = 0; j < s.N; j++)
            for (int64_t p = 0; p < s.K; p++) {
                double t = (double)mc_bf16_to_f32(A[ta ? p * lda + i : i * lda + p]) *
                           (double)mc_bf16_to_f32(B[tb ? j * ldb + p : p * ldb + j]);
                S[i * s.N + j] += t;
                Sabs[i * s.N + j] += fabs(t);
            }
    void *C = malloc(4 * (size_t)nc), *C1 = malloc(4 * (size_t)nc);
    for (int v = 0; v < 4; v++) {
        enum mc_dtype cdt = v & 1 ? MC_DTYPE_BF16 : MC_DTYPE_F32;
        float beta = v & 2 ? 0.5f : 0.0f;
        size_t bytes = (size_t)nc * mc_dtype_size(cdt);
        char what[128];
        snprintf(what, sizeof what, "dot %c%c %lldx%lldx%lld C %s beta %g", ta ? 'T' : 'N',
                 tb ? 'T' : 'N', (long long)s.M, (long long)s.N, (long long)s.K,
                 mc_dtype_name(cdt), beta);
        run(1, ta, tb, s, A, lda, B, ldb, beta, C1, cdt, ldc, c0);
        expect_close(what, C1, cdt, ldc, c0, S, Sabs, s, 0.75f, beta);
        for (int th = 2; th <= 3; th++) {
            run(th, ta, tb, s, A, lda, B, ldb, beta, C, cdt, ldc, c0);
            test_checks++;
            if (memcmp(C, C1, bytes)) {
                test_failures++;
                fprintf(stderr, "%s: %d threads differ from 1 thread\n", what, th);
            }
        }
    }
    omp_set_num_threads(2);
    free(A); free(B); free(c0); free(S); free(Sabs); free(C); free(C1);
}

/* Inf and NaN as IEEE (Inf * 0 = NaN, NaN propagates, Inf stays Inf); denormals: printed. */
static void test_specials(void)
{
    /* row 0 of A: [inf, 1, ...], row 1: [nan, ...], row 2: [inf, ...] x a zero column,
     * row 3: [2^-130 (a bf16 denormal), 0...] x 2^100, row 4: [2^-70] x 2^-70 (denormal
     * product), row 5: [1, 0...] (control) */
    enum { M = 6, N = 2, KK = 16 };
    float a[M * KK] = {0}, b[KK * N] = {0}, c[M * N];
    a[0] = INFINITY; a[1] = 1; a[KK] = NAN; a[2 * KK] = INFINITY; a[3 * KK] = 0x1p-130f;
    a[4 * KK] = 0x1p-70f; a[5 * KK] = 1;
    b[0] = 1; b[1] = 0;                    /* column 0: 1 then zeros, column 1: zeros */
    b[1 * N] = 1;
    uint16_t a16[M * KK], b16[KK * N], bd[KK * N];
    mc_dtype_from_f32(a16, MC_DTYPE_BF16, a, M * KK);
    mc_dtype_from_f32(b16, MC_DTYPE_BF16, b, KK * N);
    gemm_dot_bf16(false, false, M, N, KK, 1.0f, a16, KK, b16, N, 0.0f, c, MC_DTYPE_F32, N,
                  convert_ref);
    CHECK(isinf(c[0]) && c[0] > 0);        /* inf * 1 + 1 * 1 */
    CHECK(isnan(c[1]));                    /* inf * 0 */
    CHECK(isnan(c[N]) && isnan(c[N + 1])); /* nan * anything */
    CHECK(c[5 * N] == 1.0f && c[5 * N + 1] == 0.0f);
    memcpy(bd, b16, sizeof bd);
    bd[0] = mc_f32_to_bf16(0x1p100f);
    gemm_dot_bf16(false, false, M, N, KK, 1.0f, a16, KK, bd, N, 0.0f, c, MC_DTYPE_F32, N,
                  convert_ref);
    float den = c[3 * N];
    bd[0] = mc_f32_to_bf16(0x1p-70f);
    gemm_dot_bf16(false, false, M, N, KK, 1.0f, a16, KK, bd, N, 0.0f, c, MC_DTYPE_F32, N,
                  convert_ref);
    float tiny = c[4 * N];
    printf("bf16 dot GEMM: denormal input 2^-130 x 2^100 = %g (exact: %g); 2^-70 x 2^-70 = %g "
           "(exact: %g, an fp32 denormal)\n", den, 0x1p-30, tiny, 0x1p-140);
}

int main(void)
{
    const char *why;
    if (!gemm_dot_bf16_available(&why)) {
        printf("test_gemm_dot: skipped: %s\n", why);
        return 0;
    }
    printf("test_gemm_dot: oneDNN kernel %s\n", why);
    /* several tiles (threaded), 2 TN row tiles, one tile, K = 0, MoE's 1 x 1 dot, one row */
    const struct shape sh[] = {{300, 700, 67}, {800, 600, 40}, {37, 53, 129}, {4, 6, 0},
                               {1, 1, 77}, {1, 300, 33}};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int t = 0; t < 4; t++)
            test_case(t & 1, t & 2, sh[s]);
    test_specials();
    return test_summary("test_gemm_dot");
}
