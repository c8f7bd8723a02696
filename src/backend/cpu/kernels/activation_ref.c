/* Reference MLP activations with the bias added first, forward and backward: Megatron's fused
 * bias-GELU (fusions/fused_bias_gelu.py: tanh approximation with the constant 0.79788456 and
 * its hand-written derivative), exact erf GELU (F.gelu, --no-bias-gelu-fusion), squared ReLU
 * (--squared-relu) and SwiGLU (fusions/fused_bias_swiglu.py: silu(gate) * up). */
#include "backend/cpu/kernels/ref.h"

#include <math.h>

static inline float pre(const float *x, const float *bias, int64_t r, int64_t c, int64_t cols)
{
    return bias ? x[r * cols + c] + bias[c] : x[r * cols + c];
}

void gelu_tanh_fwd_ref(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = pre(x, bias, r, c, cols);
            y[r * cols + c] = v * 0.5f * (1.0f + tanhf(0.79788456f * v * (1.0f + 0.044715f * v * v)));
        }
}

void gelu_tanh_bwd_ref(float *dx, const float *dy, const float *x, const float *bias,
                       int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = pre(x, bias, r, c, cols);
            float t = tanhf(0.79788456f * v * (1.0f + 0.044715f * v * v));
            float ff = 0.5f * v * ((1.0f - t * t) * (0.79788456f + 0.1070322243f * v * v)) +
                       0.5f * (1.0f + t);
            dx[r * cols + c] = ff * dy[r * cols + c];
        }
}

void gelu_erf_fwd_ref(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = pre(x, bias, r, c, cols);
            y[r * cols + c] = v * 0.5f * (1.0f + erff(v * 0.70710678118654752f));
        }
}

void gelu_erf_bwd_ref(float *dx, const float *dy, const float *x, const float *bias,
                      int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = pre(x, bias, r, c, cols);
            float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
            float pdf = expf(-0.5f * v * v) * 0.39894228040143268f;
            dx[r * cols + c] = dy[r * cols + c] * (cdf + v * pdf);
        }
}

void squared_relu_fwd_ref(float *y, const float *x, const float *bias, int64_t rows,
                          int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = pre(x, bias, r, c, cols);
            v = v > 0.0f ? v : 0.0f;
            y[r * cols + c] = v * v;
        }
}

void squared_relu_bwd_ref(float *dx, const float *dy, const float *x, const float *bias,
                          int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float v = pre(x, bias, r, c, cols);
            dx[r * cols + c] = v > 0.0f ? 2.0f * v * dy[r * cols + c] : 0.0f;
        }
}

void swiglu_fwd_ref(float *y, const float *x, const float *bias, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float g = pre(x, bias, r, c, 2 * cols), u = pre(x, bias, r, c + cols, 2 * cols);
            y[r * cols + c] = g / (1.0f + expf(-g)) * u;
        }
}

void swiglu_bwd_ref(float *dx, const float *dy, const float *x, const float *bias, int64_t rows,
                    int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float g = pre(x, bias, r, c, 2 * cols), u = pre(x, bias, r, c + cols, 2 * cols);
            float sg = 1.0f / (1.0f + expf(-g));
            float d = dy[r * cols + c];
            dx[r * 2 * cols + c] = d * u * sg * (1.0f + g * (1.0f - sg));
            dx[r * 2 * cols + cols + c] = d * g * sg;
        }
}
