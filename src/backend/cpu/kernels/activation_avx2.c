/* AVX2 + FMA MLP activations with the bias added first, forward and backward: 8-wide ports of
 * activation_avx512.c (same contract as activation_ref.c; counterparts of Megatron's fused
 * bias-GELU, F.gelu, squared ReLU and fused bias-SwiGLU). Rows are split statically across
 * threads with the reference's small-tensor threshold; each element's value depends only on its
 * inputs, so results are the same bits for any thread count.
 *
 * GELU-tanh uses 1 + tanh(z) = 2 sigmoid(2z) and 1 - tanh(z)^2 = 4 s (1 - s), as the AVX-512
 * kernel does (no cancellation of 1 + tanh(z) for negative z). */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

#define K0 0.79788456f   /* sqrt(2/pi) as Megatron's bias_gelu writes it */
#define K1 0.044715f
#define K2 0.1070322243f /* 3 * K0 * K1 */

/* One vector op applied over [rows, cols] with the bias broadcast per column. */
#define FOR_ROWS_COLS8(rows, cols, ...)                                                \
    _Pragma("omp parallel for schedule(static) if ((rows) * (cols) > 16384)")         \
    for (int64_t r = 0; r < (rows); r++)                                              \
        for (int64_t c = 0; c < (cols); c += VL8) {                                   \
            __m256i t = tail_mask8((cols) - c);                                       \
            int64_t i = r * (cols) + c;                                               \
            __VA_ARGS__                                                                \
        }

static inline __m256 pre_act(const float *x, const float *bias, int64_t i, int64_t c, __m256i t)
{
    __m256 v = v8_loadu(x + i, t);
    return bias ? _mm256_add_ps(v, v8_loadu(bias + c, t)) : v;
}

/* s = sigmoid(2 z), z = K0 v (1 + K1 v^2); exp(-2z) is clamped so 1 - s = e s stays finite. */
static inline __m256 gelu_tanh_sig(__m256 v, __m256 *one_minus_s)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 z = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(K0), v),
                             _mm256_fmadd_ps(_mm256_set1_ps(K1), _mm256_mul_ps(v, v), one));
    __m256 m2z = _mm256_mul_ps(z, _mm256_set1_ps(-2.0f));
    m2z = _mm256_min_ps(_mm256_set1_ps(80.0f), m2z);
    __m256 e = v8_exp(m2z);
    __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
    if (one_minus_s)
        *one_minus_s = _mm256_mul_ps(e, s);
    return s;
}

void gelu_tanh_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS8(rows, cols, {
        __m256 v = pre_act(x, bias, i, c, t);
        v8_storeu(y + i, t, _mm256_mul_ps(v, gelu_tanh_sig(v, NULL)));
    })
}

void gelu_tanh_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                        int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS8(rows, cols, {
        __m256 v = pre_act(x, bias, i, c, t), oms;
        __m256 s = gelu_tanh_sig(v, &oms);
        /* ff = 2 v s (1-s)(K0 + K2 v^2) + s */
        __m256 dz = _mm256_fmadd_ps(_mm256_set1_ps(K2), _mm256_mul_ps(v, v), _mm256_set1_ps(K0));
        __m256 ff = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_add_ps(v, v), _mm256_mul_ps(s, oms)), dz, s);
        v8_storeu(dx + i, t, _mm256_mul_ps(ff, v8_loadu(dy + i, t)));
    })
}

static inline __m256 gelu_cdf(__m256 v)
{
    __m256 e = v8_erf(_mm256_mul_ps(v, _mm256_set1_ps(0.70710678118654752f)));
    return _mm256_mul_ps(_mm256_set1_ps(0.5f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void gelu_erf_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS8(rows, cols, {
        __m256 v = pre_act(x, bias, i, c, t);
        v8_storeu(y + i, t, _mm256_mul_ps(v, gelu_cdf(v)));
    })
}

void gelu_erf_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                       int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS8(rows, cols, {
        __m256 v = pre_act(x, bias, i, c, t);
        __m256 pdf = _mm256_mul_ps(v8_exp(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(v, v))),
                                   _mm256_set1_ps(0.39894228040143268f));
        __m256 d = _mm256_fmadd_ps(v, pdf, gelu_cdf(v));
        v8_storeu(dx + i, t, _mm256_mul_ps(v8_loadu(dy + i, t), d));
    })
}

void squared_relu_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows,
                           int64_t cols)
{
    FOR_ROWS_COLS8(rows, cols, {
        __m256 v = _mm256_max_ps(pre_act(x, bias, i, c, t), _mm256_setzero_ps());
        v8_storeu(y + i, t, _mm256_mul_ps(v, v));
    })
}

void squared_relu_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                           int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS8(rows, cols, {
        __m256 v = pre_act(x, bias, i, c, t);
        __m256 pos = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ);
        __m256 g = _mm256_mul_ps(_mm256_add_ps(v, v), v8_loadu(dy + i, t));
        v8_storeu(dx + i, t, _mm256_and_ps(pos, g));
    })
}

/* SwiGLU: x row = [gate | up] (2*cols), y = silu(gate) * up. */
void swiglu_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += VL8) {
            __m256i t = tail_mask8(cols - c);
            __m256 g = pre_act(x, bias, r * 2 * cols + c, c, t);
            __m256 u = pre_act(x, bias, r * 2 * cols + cols + c, cols + c, t);
            v8_storeu(y + r * cols + c, t, _mm256_mul_ps(_mm256_mul_ps(g, v8_sigmoid(g)), u));
        }
}

void swiglu_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                     int64_t rows, int64_t cols)
{
    const __m256 one = _mm256_set1_ps(1.0f);
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += VL8) {
            __m256i t = tail_mask8(cols - c);
            __m256 g = pre_act(x, bias, r * 2 * cols + c, c, t);
            __m256 u = pre_act(x, bias, r * 2 * cols + cols + c, cols + c, t);
            __m256 sg = v8_sigmoid(g), d = v8_loadu(dy + r * cols + c, t);
            /* d(silu)/dg = sg (1 + g (1 - sg)) */
            __m256 ds = _mm256_mul_ps(sg, _mm256_fmadd_ps(g, _mm256_sub_ps(one, sg), one));
            v8_storeu(dx + r * 2 * cols + c, t, _mm256_mul_ps(_mm256_mul_ps(d, u), ds));
            v8_storeu(dx + r * 2 * cols + cols + c, t, _mm256_mul_ps(_mm256_mul_ps(d, g), sg));
        }
}
