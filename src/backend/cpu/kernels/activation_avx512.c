/* AVX-512 MLP activations with the bias added first, forward and backward (same contract as
 * activation_ref.c; counterparts of Megatron's fused bias-GELU, F.gelu, squared ReLU and
 * fused bias-SwiGLU). Rows are split statically across threads.
 *
 * GELU-tanh uses 1 + tanh(z) = 2 sigmoid(2z) and 1 - tanh(z)^2 = 4 s (1 - s): the same function,
 * but without the cancellation 1 + tanh(z) suffers for negative z, so it is at least as accurate
 * as the reference's tanhf form. GELU-erf takes erf from vec_avx512.h. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/vec_avx512.h"

#define K0 0.79788456f   /* sqrt(2/pi) as Megatron's bias_gelu writes it */
#define K1 0.044715f
#define K2 0.1070322243f /* 3 * K0 * K1 */

/* One vector op applied over [rows, cols] with the bias broadcast per column. */
#define FOR_ROWS_COLS(rows, cols, ...)                                                 \
    _Pragma("omp parallel for schedule(static) if ((rows) * (cols) > 16384)")         \
    for (int64_t r = 0; r < (rows); r++)                                              \
        for (int64_t c = 0; c < (cols); c += VL) {                                    \
            __mmask16 t = tail_mask((cols) - c);                                      \
            int64_t i = r * (cols) + c;                                               \
            __VA_ARGS__                                                                \
        }

static inline __m512 pre_act(const float *x, const float *bias, int64_t i, int64_t c, __mmask16 t)
{
    __m512 v = v_loadu(x + i, t);
    return bias ? _mm512_add_ps(v, v_loadu(bias + c, t)) : v;
}

/* s = sigmoid(2 z), z = K0 v (1 + K1 v^2); e2 = exp(-2z) is clamped so 1 - s = e2 s stays finite. */
static inline __m512 gelu_tanh_sig(__m512 v, __m512 *one_minus_s)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 z = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(K0), v),
                             _mm512_fmadd_ps(_mm512_set1_ps(K1), _mm512_mul_ps(v, v), one));
    __m512 m2z = _mm512_mul_ps(z, _mm512_set1_ps(-2.0f));
    m2z = _mm512_min_ps(_mm512_set1_ps(80.0f), m2z);
    __m512 e = v_exp(m2z);
    __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
    if (one_minus_s)
        *one_minus_s = _mm512_mul_ps(e, s);
    return s;
}

void gelu_tanh_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS(rows, cols, {
        __m512 v = pre_act(x, bias, i, c, t);
        v_storeu(y + i, t, _mm512_mul_ps(v, gelu_tanh_sig(v, NULL)));
    })
}

void gelu_tanh_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                          int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS(rows, cols, {
        __m512 v = pre_act(x, bias, i, c, t), oms;
        __m512 s = gelu_tanh_sig(v, &oms);
        /* ff = 0.5 v (1 - tanh^2)(K0 + K2 v^2) + 0.5 (1 + tanh) = 2 v s (1-s)(K0 + K2 v^2) + s */
        __m512 dz = _mm512_fmadd_ps(_mm512_set1_ps(K2), _mm512_mul_ps(v, v), _mm512_set1_ps(K0));
        __m512 ff = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_add_ps(v, v), _mm512_mul_ps(s, oms)), dz, s);
        v_storeu(dx + i, t, _mm512_mul_ps(ff, v_loadu(dy + i, t)));
    })
}

static inline __m512 gelu_cdf(__m512 v)
{
    __m512 e = v_erf(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752f)));
    return _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

void gelu_erf_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS(rows, cols, {
        __m512 v = pre_act(x, bias, i, c, t);
        v_storeu(y + i, t, _mm512_mul_ps(v, gelu_cdf(v)));
    })
}

void gelu_erf_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                         int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS(rows, cols, {
        __m512 v = pre_act(x, bias, i, c, t);
        __m512 pdf = _mm512_mul_ps(v_exp(_mm512_mul_ps(_mm512_set1_ps(-0.5f), _mm512_mul_ps(v, v))),
                                   _mm512_set1_ps(0.39894228040143268f));
        __m512 d = _mm512_fmadd_ps(v, pdf, gelu_cdf(v));
        v_storeu(dx + i, t, _mm512_mul_ps(v_loadu(dy + i, t), d));
    })
}

void squared_relu_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows,
                             int64_t cols)
{
    FOR_ROWS_COLS(rows, cols, {
        __m512 v = _mm512_max_ps(pre_act(x, bias, i, c, t), _mm512_setzero_ps());
        v_storeu(y + i, t, _mm512_mul_ps(v, v));
    })
}

void squared_relu_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                             int64_t rows, int64_t cols)
{
    FOR_ROWS_COLS(rows, cols, {
        __m512 v = pre_act(x, bias, i, c, t);
        __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
        __m512 g = _mm512_mul_ps(_mm512_add_ps(v, v), v_loadu(dy + i, t));
        v_storeu(dx + i, t, _mm512_maskz_mov_ps(pos, g));
    })
}

/* SwiGLU: x row = [gate | up] (2*cols), y = silu(gate) * up. */
void swiglu_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += VL) {
            __mmask16 t = tail_mask(cols - c);
            __m512 g = pre_act(x, bias, r * 2 * cols + c, c, t);
            __m512 u = pre_act(x, bias, r * 2 * cols + cols + c, cols + c, t);
            v_storeu(y + r * cols + c, t, _mm512_mul_ps(_mm512_mul_ps(g, v_sigmoid(g)), u));
        }
}

void swiglu_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                       int64_t rows, int64_t cols)
{
    const __m512 one = _mm512_set1_ps(1.0f);
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += VL) {
            __mmask16 t = tail_mask(cols - c);
            __m512 g = pre_act(x, bias, r * 2 * cols + c, c, t);
            __m512 u = pre_act(x, bias, r * 2 * cols + cols + c, cols + c, t);
            __m512 sg = v_sigmoid(g), d = v_loadu(dy + r * cols + c, t);
            /* d(silu)/dg = sg (1 + g (1 - sg)) */
            __m512 ds = _mm512_mul_ps(sg, _mm512_fmadd_ps(g, _mm512_sub_ps(one, sg), one));
            v_storeu(dx + r * 2 * cols + c, t, _mm512_mul_ps(_mm512_mul_ps(d, u), ds));
            v_storeu(dx + r * 2 * cols + cols + c, t, _mm512_mul_ps(_mm512_mul_ps(d, g), sg));
        }
}
