/* Element types: sizes, names and the fp32 <-> bf16 / fp16 conversions (see core/dtype.h).
 * Counterparts: c10/util/BFloat16.h, c10/util/Half.h and ATen's CPU copy kernels. */
#include "core/dtype.h"

#include <math.h>
#include <string.h>

static const size_t sizes[MC_DTYPE_COUNT] = {
    [MC_DTYPE_F32] = 4, [MC_DTYPE_BF16] = 2, [MC_DTYPE_F16] = 2, [MC_DTYPE_I32] = 4,
    [MC_DTYPE_I64] = 8, [MC_DTYPE_U8] = 1,   [MC_DTYPE_F64] = 8, [MC_DTYPE_I16] = 2,
    [MC_DTYPE_I8] = 1,  [MC_DTYPE_BOOL] = 1,
};
static const char *const names[MC_DTYPE_COUNT] = {
    [MC_DTYPE_F32] = "float32", [MC_DTYPE_BF16] = "bfloat16", [MC_DTYPE_F16] = "float16",
    [MC_DTYPE_I32] = "int32",   [MC_DTYPE_I64] = "int64",     [MC_DTYPE_U8] = "uint8",
    [MC_DTYPE_F64] = "float64", [MC_DTYPE_I16] = "int16",     [MC_DTYPE_I8] = "int8",
    [MC_DTYPE_BOOL] = "bool",
};

size_t mc_dtype_size(enum mc_dtype t) { return (unsigned)t < MC_DTYPE_COUNT ? sizes[t] : 0; }

const char *mc_dtype_name(enum mc_dtype t)
{
    return (unsigned)t < MC_DTYPE_COUNT ? names[t] : "invalid";
}

bool mc_dtype_is_float(enum mc_dtype t)
{
    return t == MC_DTYPE_F32 || t == MC_DTYPE_BF16 || t == MC_DTYPE_F16 || t == MC_DTYPE_F64;
}

/* ---- bfloat16 ------------------------------------------------------------------------------ */
uint16_t mc_f32_to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0xffff;
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; a carry moves into the exponent */
    return (uint16_t)(u >> 16);
}

float mc_bf16_to_f32(uint16_t x)
{
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- IEEE binary16 ------------------------------------------------------------------------- */
float mc_f16_to_f32(uint16_t x)
{
    uint32_t sign = (uint32_t)(x & 0x8000) << 16, e = (x >> 10) & 0x1f, m = x & 0x3ff, u;
    if (e == 31)
        u = sign | 0x7f800000u | (m ? 0x400000u | m << 13 : 0);
    else if (e)
        u = sign | (e + 112) << 23 | m << 13; /* rebias 15 -> 127 */
    else {
        float v = ldexpf((float)m, -24); /* subnormal (or zero): exact in float32 */
        memcpy(&u, &v, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t mc_f32_to_f16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00;
    if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return sign | 0x7c00;
    if (a < 0x38800000u) { /* subnormal half (or zero): scale to units of 2^-24, round even */
        float f;
        memcpy(&f, &a, 4);
        float q = f * 16777216.0f; /* exact: power of two */
        float r = nearbyintf(q);    /* default rounding mode: to nearest even */
        return sign | (uint16_t)r;
    }
    uint32_t mant = a & 0x7fffffu;
    int32_t exp = (int32_t)(a >> 23) - 127 + 15;
    uint32_t h = ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry out of the mantissa moves into the exponent, as it should */
    return sign | (uint16_t)h;
}

/* ---- typed arrays -------------------------------------------------------------------------- */
union elem {
    float f;
    double d;
    int64_t l;
    int32_t i;
    int16_t h;
    int8_t c;
    uint8_t b;
    uint16_t u;
};

static union elem load(const void *src, enum mc_dtype t, int64_t i)
{
    union elem x;
    size_t sz = mc_dtype_size(t);
    MC_ASSERT(sz);
    memcpy(&x, (const uint8_t *)src + (size_t)i * sz, sz);
    return x;
}

void mc_dtype_to_f32(float *dst, const void *src, enum mc_dtype t, int64_t n)
{
    if (n <= 0) /* an empty tensor's data may be NULL, which memcpy must not see */
        return;
    if (t == MC_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        union elem x = load(src, t, i);
        switch (t) {
        case MC_DTYPE_BF16: dst[i] = mc_bf16_to_f32(x.u); break;
        case MC_DTYPE_F16: dst[i] = mc_f16_to_f32(x.u); break;
        case MC_DTYPE_F64: dst[i] = (float)x.d; break;
        case MC_DTYPE_I64: dst[i] = (float)x.l; break;
        case MC_DTYPE_I32: dst[i] = (float)x.i; break;
        case MC_DTYPE_I16: dst[i] = x.h; break;
        case MC_DTYPE_I8: dst[i] = x.c; break;
        default: dst[i] = x.b; break; /* U8, BOOL */
        }
    }
}

void mc_dtype_from_f32(void *dst, enum mc_dtype t, const float *src, int64_t n)
{
    MC_ASSERT(mc_dtype_is_float(t));
    if (n <= 0)
        return;
    if (t == MC_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (t == MC_DTYPE_F64) {
            double d = src[i];
            memcpy((uint8_t *)dst + (size_t)i * 8, &d, 8);
        } else {
            uint16_t h = t == MC_DTYPE_BF16 ? mc_f32_to_bf16(src[i]) : mc_f32_to_f16(src[i]);
            memcpy((uint8_t *)dst + (size_t)i * 2, &h, 2);
        }
    }
}

double mc_dtype_get_f64(const void *src, enum mc_dtype t, int64_t i)
{
    union elem x = load(src, t, i);
    switch (t) {
    case MC_DTYPE_F32: return x.f;
    case MC_DTYPE_F64: return x.d;
    case MC_DTYPE_BF16: return mc_bf16_to_f32(x.u);
    case MC_DTYPE_F16: return mc_f16_to_f32(x.u);
    case MC_DTYPE_I64: return (double)x.l;
    case MC_DTYPE_I32: return x.i;
    case MC_DTYPE_I16: return x.h;
    case MC_DTYPE_I8: return x.c;
    default: return x.b; /* U8, BOOL */
    }
}
