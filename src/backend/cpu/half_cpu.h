/* fp32 staging for the CPU backend's 16-bit ops (half_cpu.c). The reference semantics of a
 * BF16/F16 op (backend.h): widen every input to fp32 (exact), run the fp32 kernel, round each
 * output once to nearest even (core/dtype.c). These helpers do the widening and the rounding
 * with the kernel table's convert; the buffers are host memory from mc_cpu_scratch, given back
 * by the caller with mc_cpu_release. Private to src/backend/cpu. */
#ifndef MC_CPU_HALF_H
#define MC_CPU_HALF_H

#include "backend/cpu/kernels/kernels.h"

#include <stdbool.h>

/* True for BF16 and F16. */
static inline bool mc_cpu_is_half(enum mc_dtype t)
{
    return t == MC_DTYPE_BF16 || t == MC_DTYPE_F16;
}

/* n floats of scratch (contents undefined); stops the process naming op when out of memory.
 * Given back with mc_cpu_release, which keeps it for reuse. */
float *mc_cpu_scratch(int64_t n, const char *op);
void mc_cpu_release(float *p); /* NULL does nothing */
/* Every backend holds the cache while it lives (mc_backend_create / mc_backend_free): freeing
 * the last one frees the kept buffers, so no memory outlives the backends. */
void mc_cpu_scratch_hold(void);
void mc_cpu_scratch_unhold(void);
/* A fresh fp32 copy of src[n] of dtype dt (exact); NULL when src is NULL (an absent optional
 * argument). */
float *mc_cpu_widen(const struct mc_cpu_kernels *k, const void *src, enum mc_dtype dt,
                    int64_t n, const char *op);
/* dst[n] (dtype dt) = src[n] rounded; nothing when dst is NULL. */
void mc_cpu_narrow(const struct mc_cpu_kernels *k, void *dst, enum mc_dtype dt,
                   const float *src, int64_t n);

#endif /* MC_CPU_HALF_H */
