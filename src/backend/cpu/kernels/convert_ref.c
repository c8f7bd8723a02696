/* Reference dtype conversion and accumulation between F32, BF16 and F16, element by element
 * with core/dtype.c's conversions (round to nearest even, widening exact): the counterparts of
 * Megatron's `param.data.copy_(main_param)` (fp32 -> 16-bit model weights), `main_param =
 * param.detach().clone().float()` and, for accumulate, `main_grad.add_(param.grad)` without
 * gradient-accumulation fusion. Elementwise, so any thread split gives the same bits. */
#include "backend/cpu/kernels/ref.h"

#include "core/dtype.h"

#include <string.h>

static inline float load_f32(const void *p, enum mc_dtype t, int64_t i)
{
    switch (t) {
    case MC_DTYPE_BF16: return mc_bf16_to_f32(((const uint16_t *)p)[i]);
    case MC_DTYPE_F16: return mc_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void store_f32(void *p, enum mc_dtype t, int64_t i, float v)
{
    switch (t) {
    case MC_DTYPE_BF16: ((uint16_t *)p)[i] = mc_f32_to_bf16(v); break;
    case MC_DTYPE_F16: ((uint16_t *)p)[i] = mc_f32_to_f16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

void convert_ref(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                 int64_t n)
{
    if (n <= 0)
        return;
    if (dst_dt == src_dt) { /* a copy keeps every bit (NaN payloads included) */
        memmove(dst, src, (size_t)n * mc_dtype_size(dst_dt));
        return;
    }
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        store_f32(dst, dst_dt, i, load_f32(src, src_dt, i));
}

/* a + b with the NaN result pinned down: a's (quieted) when a is NaN, else b's, as x86's
 * addps(a, b) gives it. The C expression alone leaves the operand order, and so which NaN
 * payload survives NaN + NaN, to the compiler (it differed between -O0 and -O2). */
static inline float nan_first_add(float a, float b)
{
    return a != a ? a + a : a + b;
}

void accumulate_ref(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                    int64_t n)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        store_f32(dst, dst_dt, i, nan_first_add(load_f32(dst, dst_dt, i), load_f32(src, src_dt, i)));
}

void convert_split(mc_convert_span_fn span, void *dst, enum mc_dtype dst_dt, const void *src,
                   enum mc_dtype src_dt, int64_t n)
{
    enum { CHUNK = 16384 };
    if (n <= 65536) {
        span(dst, dst_dt, src, src_dt, 0, n);
        return;
    }
    int64_t nblk = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * CHUNK;
        span(dst, dst_dt, src, src_dt, i0, i0 + CHUNK < n ? i0 + CHUNK : n);
    }
}
