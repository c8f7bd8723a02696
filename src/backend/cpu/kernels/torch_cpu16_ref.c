/* The 16-bit functions of Megatron as PyTorch runs them on a CPU (enum mc_rounding's
 * MC_ROUNDING_TORCH_CPU). TorchScript does not fuse on a CPU (and Megatron's CPU shim turns
 * jit off), so fusions/fused_bias_gelu.py, fused_bias_swiglu.py and fused_bias_dropout.py, and
 * rope_utils.py's unfused rotary embedding, execute as separate bf16/fp16 torch ops, each one
 * computing in fp32 and rounding its output to the dtype. torch's CPU LayerNorm keeps mean and
 * rstd in the dtype and sums its weight and bias grads row by row into 16-bit accumulators.
 * These scalar kernels repeat those sequences op for op on fp32 buffers holding dtype values
 * (the CPU backend's staging): every intermediate is rounded where torch rounds it, and so is
 * the final result, so the staging's own rounding of the outputs is exact. Python constants
 * are the float values torch's CPU kernels use: a multiplied scalar keeps fp32, an added one
 * is rounded to the dtype first. There is no fast twin: this mode exists to reproduce
 * reference runs bit for bit, not for speed. */
#include "backend/cpu/kernels/ref.h"

#include "core/dtype.h"

#include <math.h>

static inline float rd(enum mc_dtype dt, float v)
{
    if (dt == MC_DTYPE_BF16)
        return mc_bf16_to_f32(mc_f32_to_bf16(v));
    if (dt == MC_DTYPE_F16)
        return mc_f16_to_f32(mc_f32_to_f16(v));
    return v;
}

void round_to_dtype_tc16(enum mc_dtype dt, float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rd(dt, x[i]);
}

/* x + bias, rounded (torch's add of two 16-bit tensors) */
static inline float pre(enum mc_dtype dt, const float *x, const float *bias, int64_t i, int64_t c)
{
    return bias ? rd(dt, x[i] + bias[c]) : x[i];
}

void bias_add_tc16(enum mc_dtype dt, float *x, const float *bias, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            x[r * cols + c] = pre(dt, x, bias, r * cols + c, c);
}

/* torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)), left to right, each op rounded */
static inline float gelu_tanh_t(enum mc_dtype dt, float v)
{
    float a = rd(dt, rd(dt, 0.044715f * v) * v);
    a = rd(dt, 1.0f + a);
    float c = rd(dt, rd(dt, 0.79788456f * v) * a);
    return rd(dt, tanhf(c));
}

/* bias_gelu: x * 0.5 * (1 + tanh(...)) */
void gelu_tanh_fwd_tc16(enum mc_dtype dt, float *y, const float *x, const float *bias,
                        int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            float v = pre(dt, x, bias, i, c);
            float u = rd(dt, 1.0f + gelu_tanh_t(dt, v));
            y[i] = rd(dt, rd(dt, v * 0.5f) * u);
        }
}

/* bias_gelu_back: ff = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x))
 *                      + 0.5 * (1 + t); dx = ff * g */
void gelu_tanh_bwd_tc16(enum mc_dtype dt, float *dx, const float *dy, const float *x,
                        const float *bias, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            float v = pre(dt, x, bias, i, c), t = gelu_tanh_t(dt, v);
            float q = rd(dt, 1.0f - rd(dt, t * t));
            float s = rd(dt, rd(dt, 0.1070322243f * v) * v);
            s = rd(dt, rd(dt, 0.79788456f) + s); /* the added scalar, rounded to the dtype */
            float p1 = rd(dt, rd(dt, 0.5f * v) * rd(dt, q * s));
            float p2 = rd(dt, 0.5f * rd(dt, 1.0f + t));
            dx[i] = rd(dt, rd(dt, p1 + p2) * dy[i]);
        }
}

static inline float sigmoid(float v)
{
    return 1.0f / (1.0f + expf(-v));
}

/* F.silu: x / (1 + exp(-x)), one division (not x times the sigmoid) */
static inline float silu(float v)
{
    return v / (1.0f + expf(-v));
}

/* swiglu: F.silu(gate) * up; silu is one op (computed in fp32, rounded once) */
void swiglu_fwd_tc16(enum mc_dtype dt, float *y, const float *x, const float *bias, int64_t rows,
                     int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * 2 * cols + c;
            float g = pre(dt, x, bias, i, c), u = pre(dt, x, bias, i + cols, c + cols);
            y[r * cols + c] = rd(dt, rd(dt, silu(g)) * u);
        }
}

/* swiglu_back: [g * sigmoid(a) * (1 + a * (1 - sigmoid(a))) * b, g * silu(a)] */
void swiglu_bwd_tc16(enum mc_dtype dt, float *dx, const float *dy, const float *x,
                     const float *bias, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * 2 * cols + c;
            float a = pre(dt, x, bias, i, c), b = pre(dt, x, bias, i + cols, c + cols);
            float g = dy[r * cols + c], s = rd(dt, sigmoid(a));
            float k = rd(dt, 1.0f + rd(dt, a * rd(dt, 1.0f - s)));
            dx[i] = rd(dt, rd(dt, rd(dt, g * s) * k) * b);
            dx[i + cols] = rd(dt, g * rd(dt, silu(a)));
        }
}

/* _bias_dropout_add_func: x + bias rounded, dropout (times the dtype's 1/(1-p): the caller
 * passes scale rounded) rounded, then the residual add rounded */
void bias_dropout_add_tc16(enum mc_dtype dt, float *y, const float *x, const float *bias,
                           const float *residual, const uint8_t *keep_mask, float scale,
                           int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            float v = pre(dt, x, bias, i, c);
            if (keep_mask)
                v = keep_mask[i] ? rd(dt, v * scale) : 0.0f;
            y[i] = residual ? rd(dt, residual[i] + v) : v;
        }
}

/* _apply_rotary_pos_emb_bshd: t * cos + rotate_half(t) * sin with cos and sin rounded to the
 * dtype, each product and the sum rounded; sign -1 is autograd's backward (the transposed
 * rotation, the two products' grads rounded, then their sum). */
static void rotate_tc16(enum mc_dtype dt, float *t, const float *c, const float *s,
                        int64_t rot_dim, bool interleaved, float sign)
{
    int64_t half = rot_dim / 2, gap = interleaved ? 1 : half;
    for (int64_t k = 0; k < half; k++) {
        int64_t i = interleaved ? 2 * k : k, j = i + gap; /* the pair (t_i, t_j) rotates */
        float a = t[i], b = t[j];
        float ci = rd(dt, c[i]), cj = rd(dt, c[j]), si = rd(dt, s[i]), sj = rd(dt, s[j]);
        if (sign > 0) {
            t[i] = rd(dt, rd(dt, a * ci) - rd(dt, b * si));
            t[j] = rd(dt, rd(dt, b * cj) + rd(dt, a * sj));
        } else {
            t[i] = rd(dt, rd(dt, a * ci) + rd(dt, b * sj));
            t[j] = rd(dt, rd(dt, b * cj) - rd(dt, a * si));
        }
    }
}

void rope_tc16(enum mc_dtype dt, float *t, const float *cos, const float *sin, int64_t s,
               int64_t bh, int64_t hn, int64_t rot_dim, bool interleaved, float sign)
{
    for (int64_t r = 0; r < s * bh; r++) {
        int64_t pos = r / bh;
        rotate_tc16(dt, t + r * hn, cos + pos * rot_dim, sin + pos * rot_dim, rot_dim,
                    interleaved, sign);
    }
}

/* LayerNorm's dgamma and dbeta as torch's CPU kernel sums them for 16-bit inputs on one
 * thread: row by row into accumulators of the dtype, acc = round(acc + dy * (rstd * x -
 * rstd * mean)) (the products in fp32). gw, gb [h] receive the sums (fp32 buffers holding
 * dtype values); gb may be NULL. */
void layernorm_wgrad_tc16(enum mc_dtype dt, float *gw, float *gb, const float *dy,
                          const float *x, const float *mean, const float *rstd, int64_t rows,
                          int64_t h)
{
    for (int64_t j = 0; j < h; j++) {
        gw[j] = 0.0f;
        if (gb)
            gb[j] = 0.0f;
    }
    for (int64_t r = 0; r < rows; r++) {
        float a = rstd[r], b = -a * mean[r];
        const float *dyr = dy + r * h, *xr = x + r * h;
        for (int64_t j = 0; j < h; j++) {
            gw[j] = rd(dt, gw[j] + dyr[j] * (a * xr[j] + b));
            if (gb)
                gb[j] = rd(dt, gb[j] + dyr[j]);
        }
    }
}
