/* The tile kernels of the CPU flash attention (flash_attention.h) with AVX2 + FMA: the products
 * as register-blocked outer products (six rows of C by 16 columns in twelve accumulators, each
 * step six broadcasts of A times two vectors of B), the exponential as the Cephes expf
 * polynomial on 8 lanes (range reduction by ln 2 in two parts, degree-6 polynomial, 2^n put
 * into the exponent field; within 2 ulp of expf, 0 below -87.3 like the reference). Every sum
 * runs in a fixed order, so a result depends on the arguments only (not on the thread). */
#include "backend/cpu/kernels/flash_attention.h"

#include <immintrin.h>
#include <math.h>

/* The products: C cut into blocks of 6 rows by 16 columns, each block one pass over k with its
 * twelve accumulators in registers (each k: two vectors of B, six broadcasts of A, twelve
 * FMAs; twelve independent sums cover the FMA latency of both ports, and the 8 loads per 12
 * FMAs leave the load ports idle a third of the time). The last rows take a block of R < 6
 * rows, the last columns 8 wide, then one at a time. Each C element is one chain of FMAs over
 * k ascending, so the result depends on the shapes only. a[m][k] = A[m * ams + k * aks]. */
#define ACC2(i) __m256 c##i##0 = z, c##i##1 = z;
#define LOAD2(i)                                                                                 \
    if (R > i) {                                                                                 \
        c##i##0 = _mm256_loadu_ps(C + i * ldc);                                                  \
        c##i##1 = _mm256_loadu_ps(C + i * ldc + 8);                                              \
    }
#define FMA2(i)                                                                                  \
    if (R > i) {                                                                                 \
        __m256 a = _mm256_broadcast_ss(ak + i * ams);                                            \
        c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);                                               \
        c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);                                               \
    }
#define STORE2(i)                                                                                \
    if (R > i) {                                                                                 \
        _mm256_storeu_ps(C + i * ldc, c##i##0);                                                  \
        _mm256_storeu_ps(C + i * ldc + 8, c##i##1);                                              \
    }

/* R (1..6, a constant at each call) rows by 16 columns */
static inline __attribute__((always_inline)) void block16(float *C, int64_t ldc, const float *A,
                                                          int64_t ams, int64_t aks,
                                                          const float *B, int64_t ldb, int R,
                                                          int64_t K, bool acc)
{
    __m256 z = _mm256_setzero_ps();
    ACC2(0) ACC2(1) ACC2(2) ACC2(3) ACC2(4) ACC2(5)
    if (acc) {
        LOAD2(0) LOAD2(1) LOAD2(2) LOAD2(3) LOAD2(4) LOAD2(5)
    }
    for (int64_t k = 0; k < K; k++) {
        const float *ak = A + k * aks, *b = B + k * ldb;
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        FMA2(0) FMA2(1) FMA2(2) FMA2(3) FMA2(4) FMA2(5)
    }
    STORE2(0) STORE2(1) STORE2(2) STORE2(3) STORE2(4) STORE2(5)
}

/* R (1..6) rows by 8 columns */
static void block8(float *C, int64_t ldc, const float *A, int64_t ams, int64_t aks,
                   const float *B, int64_t ldb, int R, int64_t K, bool acc)
{
    __m256 c[6];
    for (int r = 0; r < R; r++)
        c[r] = acc ? _mm256_loadu_ps(C + r * ldc) : _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        __m256 b = _mm256_loadu_ps(B + k * ldb);
        for (int r = 0; r < R; r++)
            c[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(A + r * ams + k * aks), b, c[r]);
    }
    for (int r = 0; r < R; r++)
        _mm256_storeu_ps(C + r * ldc, c[r]);
}

/* the 16-column blocks of R rows, R a constant in each case (so block16 keeps its
 * accumulators in registers) */
static void row_block(float *C, int64_t ldc, const float *A, int64_t ams, int64_t aks,
                      const float *B, int64_t ldb, int R, int64_t N16, int64_t K, bool acc)
{
    for (int64_t n = 0; n < N16; n += 16)
        switch (R) {
        case 6: block16(C + n, ldc, A, ams, aks, B + n, ldb, 6, K, acc); break;
        case 5: block16(C + n, ldc, A, ams, aks, B + n, ldb, 5, K, acc); break;
        case 4: block16(C + n, ldc, A, ams, aks, B + n, ldb, 4, K, acc); break;
        case 3: block16(C + n, ldc, A, ams, aks, B + n, ldb, 3, K, acc); break;
        case 2: block16(C + n, ldc, A, ams, aks, B + n, ldb, 2, K, acc); break;
        default: block16(C + n, ldc, A, ams, aks, B + n, ldb, 1, K, acc); break;
        }
}

static void gemm_any(float *C, int64_t ldc, const float *A, int64_t ams, int64_t aks,
                     const float *B, int64_t ldb, int64_t M, int64_t N, int64_t K, bool acc)
{
    int64_t N16 = N / 16 * 16;
    for (int64_t m = 0; m < M; m += 6) {
        int R = M - m >= 6 ? 6 : (int)(M - m);
        const float *a = A + m * ams;
        float *c = C + m * ldc;
        row_block(c, ldc, a, ams, aks, B, ldb, R, N16, K, acc);
        int64_t n = N16;
        for (; n + 8 <= N; n += 8)
            block8(c + n, ldc, a, ams, aks, B + n, ldb, R, K, acc);
        for (; n < N; n++)
            for (int r = 0; r < R; r++) {
                float s = acc ? c[r * ldc + n] : 0.0f;
                for (int64_t k = 0; k < K; k++)
                    s = fmaf(a[r * ams + k * aks], B[k * ldb + n], s);
                c[r * ldc + n] = s;
            }
    }
}

static void gemm_nn_avx2(float *C, int64_t ldc, const float *A, int64_t lda, const float *B,
                         int64_t ldb, int64_t M, int64_t N, int64_t K, bool acc)
{
    gemm_any(C, ldc, A, lda, 1, B, ldb, M, N, K, acc);
}

static void gemm_tn_avx2(float *C, int64_t ldc, const float *A, int64_t lda, const float *B,
                         int64_t ldb, int64_t M, int64_t N, int64_t K, bool acc)
{
    gemm_any(C, ldc, A, 1, lda, B, ldb, M, N, K, acc);
}

/* exp on 8 lanes (Cephes expf): x = n ln2 + r, |r| <= ln2 / 2, exp(r) by its polynomial. */
static inline __m256 exp8(__m256 x)
{
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

static float exp_sum_avx2(float *y, const float *x, int64_t n, float m)
{
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
        _mm256_storeu_ps(y + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float lanes[8], sum = 0.0f;
    _mm256_storeu_ps(lanes, acc);
    for (int i = 0; i < 8; i++)
        sum += lanes[i];
    for (; j < n; j++) {
        float d = x[j] - m;
        y[j] = d < -87.3f ? 0.0f : expf(d);
        sum += y[j];
    }
    return sum;
}

/* the elementwise kernels: 8 lanes, the tail one at a time, the same roundings as the
 * references (no contraction into FMA) */
static void scores_avx2(float *x, int64_t n, float alpha, float mult)
{
    __m256 va = _mm256_set1_ps(alpha), vm = _mm256_set1_ps(mult);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), va);
        _mm256_storeu_ps(x + j, mult != 1.0f ? _mm256_mul_ps(v, vm) : v);
    }
    for (; j < n; j++) {
        x[j] *= alpha;
        if (mult != 1.0f)
            x[j] *= mult;
    }
}

static float row_max_avx2(const float *x, int64_t n, float init)
{
    __m256 m = _mm256_set1_ps(init);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    float lanes[8];
    _mm256_storeu_ps(lanes, m);
    for (int i = 0; i < 8; i++)
        init = lanes[i] > init ? lanes[i] : init;
    for (; j < n; j++)
        init = x[j] > init ? x[j] : init;
    return init;
}

static void scale_avx2(float *x, int64_t n, float s)
{
    __m256 vs = _mm256_set1_ps(s);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), vs));
    for (; j < n; j++)
        x[j] *= s;
}

static void dsoftmax_avx2(float *g, const float *p, int64_t n, float D, float mult)
{
    __m256 vd = _mm256_set1_ps(D), vm = _mm256_set1_ps(mult);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 t = _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_sub_ps(_mm256_loadu_ps(g + j), vd));
        _mm256_storeu_ps(g + j, _mm256_mul_ps(vm, t));
    }
    for (; j < n; j++)
        g[j] = mult * (p[j] * (g[j] - D));
}

static const struct mc_flash_kernels avx2 = {"avx2", gemm_nn_avx2, gemm_tn_avx2, exp_sum_avx2,
                                             scores_avx2, row_max_avx2, scale_avx2,
                                             dsoftmax_avx2};

const struct mc_flash_kernels *mc_flash_kernels_avx2(void) { return &avx2; }
