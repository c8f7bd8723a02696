/* Transformer Engine FusedAdam's update of one parameter (te_fused_adam.h), the optimizer of
 * Megatron core_v0.12.1's --use-precision-aware-optimizer. Counterparts in TE 2.1-2.3:
 * FusedAdam.step / get_unscaled_state / _apply_scale (fused_adam.py) and AdamFunctor,
 * AdamFunctorMaster, AdamFunctorMasterParamRemainder (multi_tensor_adam.cu).
 * Rounding points, in order:
 *  - a state kept in fp16 is widened and multiplied by its fp32 scale (get_unscaled_state);
 *  - the kernel's math is fp32 throughout, on the grad as stored (fp32, or bf16/fp16 values),
 *    with the bias corrections 1 - beta^step computed in double and stored as float;
 *  - fp32 states and an fp32 master are written as computed; a bf16 param with remainders
 *    keeps the exact fp32 master (param = high half rounded half away, the low half stored);
 *  - an fp16 state or master is re-quantized per tensor: scale = absmax / 32752 (half fp16's
 *    largest value), value * (1 / scale) rounded to nearest even (0 scale: all zero).
 * This file is built with -ffp-contract=off (CMakeLists.txt: *_ref.c): nvcc contracts the
 * kernel's a * b + c into FMAs by default, so a GPU's result may differ from this one (and
 * from the PyTorch twin it matches bit for bit) in the last bit of some elements. */
#include "optimizer/te_fused_adam.h"

#include <math.h>
#include <string.h>

#include "core/dtype.h"

/* 65504 / 2, fused_adam.py's dtype_to_range_map for fp16 */
#define F16_RANGE 32752.0f

bool mc_te_adam_remainders(const struct mc_te_adam_cfg *c)
{
    return c->param_dt == MC_DTYPE_BF16 && c->master_dt == MC_DTYPE_F32;
}

static bool has_master16(const struct mc_te_adam_cfg *c)
{
    return c->param_dt != MC_DTYPE_F32 && c->master_dt == MC_DTYPE_F16;
}

/* torch.aminmax then max(-min, max): NaN propagates */
static float absmax(const float *x, int64_t n)
{
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float v = fabsf(x[i]);
        if (isnan(v))
            return v;
        if (v > a)
            a = v;
    }
    return a;
}

/* _apply_scale for fp16: x[n] holds the unscaled fp32 values on entry, the stored fp16
 * values on return. */
static void quantize16(float *x, int64_t n, float *scale)
{
    float s = absmax(x, n) / F16_RANGE;
    float r = s > 0.0f ? 1.0f / s : 0.0f;
    *scale = s;
    for (int64_t i = 0; i < n; i++)
        x[i] = mc_f16_to_f32(mc_f32_to_f16(x[i] * r));
}

static void unscale16(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] * scale;
}

void mc_te_adam_init(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t)
{
    memset(t->m, 0, (size_t)t->n * sizeof(float));
    memset(t->v, 0, (size_t)t->n * sizeof(float));
    t->scale[0] = t->scale[1] = t->scale[2] = 1.0f;
    if (has_master16(c)) {
        memcpy(t->master, t->p, (size_t)t->n * sizeof(float));
        quantize16(t->master, t->n, &t->scale[0]);
    }
}

void mc_te_adam_step(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t, float lr,
                     float weight_decay, int64_t step)
{
    int64_t n = t->n;
    bool m16 = c->m_dt == MC_DTYPE_F16, v16 = c->v_dt == MC_DTYPE_F16;
    bool master16 = has_master16(c);
    if (m16)
        unscale16(t->m, n, t->scale[1]);
    if (v16)
        unscale16(t->v, n, t->scale[2]);
    if (master16)
        unscale16(t->master, n, t->scale[0]);
    /* the host side of multi_tensor_adam: std::pow(float, int) is double */
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps, decay = weight_decay;
    const float bc1 = (float)(1.0 - pow((double)b1, (double)step));
    const float bc2 = (float)(1.0 - pow((double)b2, (double)step));
    /* an fp16 master is the kernel's p_master; else p (fp32 master, remainder-exact master,
     * or the fp32 param itself) */
    float *pm = master16 ? t->master : t->p;
    for (int64_t i = 0; i < n; i++) {
        float g = t->g[i], p = pm[i];
        float m = b1 * t->m[i] + (1.0f - b1) * g;
        float v = b2 * t->v[i] + (1.0f - b2) * g * g;
        float m_hat = m / bc1;
        float v_hat = v / bc2;
        float denom = sqrtf(v_hat) + eps;
        float update = (m_hat / denom) + (decay * p);
        p = p - (lr * update);
        pm[i] = p;
        t->p[i] = p; /* the model param is rounded from the unquantized value */
        t->m[i] = m;
        t->v[i] = v;
    }
    if (m16)
        quantize16(t->m, n, &t->scale[1]);
    if (v16)
        quantize16(t->v, n, &t->scale[2]);
    if (master16)
        quantize16(t->master, n, &t->scale[0]);
}

void mc_te_adam_unscale_states(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t)
{
    if (c->m_dt == MC_DTYPE_F16)
        unscale16(t->m, t->n, t->scale[1]);
    if (c->v_dt == MC_DTYPE_F16)
        unscale16(t->v, t->n, t->scale[2]);
}

void mc_te_adam_scale_states(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t)
{
    t->scale[0] = t->scale[1] = t->scale[2] = 1.0f;
    if (c->m_dt == MC_DTYPE_F16)
        quantize16(t->m, t->n, &t->scale[1]);
    if (c->v_dt == MC_DTYPE_F16)
        quantize16(t->v, t->n, &t->scale[2]);
    if (has_master16(c)) {
        memcpy(t->master, t->p, (size_t)t->n * sizeof(float));
        quantize16(t->master, t->n, &t->scale[0]);
    }
}

uint16_t mc_te_adam_bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    uint16_t hi = (uint16_t)(u >> 16), lo = (uint16_t)(u & 0xffffu);
    /* the kernel's int16 "if (rem < 0) p++": an increment of the bit pattern (the magnitude,
     * for either sign) */
    return (lo & 0x8000u) ? (uint16_t)(hi + 1u) : hi;
}

void mc_te_adam_bf16_params(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = mc_te_adam_bf16_of(src[i]);
}
