/* fp32 staging for the CPU backend's 16-bit ops (see half_cpu.h). */
#include "backend/cpu/half_cpu.h"

#include <stdlib.h>

float *mc_cpu_scratch(int64_t n, const char *op)
{
    float *p = mc_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        mc_log(MC_LOG_ERROR, "backend cpu: op %s: out of memory for %lld fp32 scratch elements",
               op, (long long)n);
        abort();
    }
    return p;
}

float *mc_cpu_widen(const struct mc_cpu_kernels *k, const void *src, enum mc_dtype dt,
                    int64_t n, const char *op)
{
    if (!src)
        return NULL;
    float *p = mc_cpu_scratch(n, op);
    k->convert(p, MC_DTYPE_F32, src, dt, n);
    return p;
}

void mc_cpu_narrow(const struct mc_cpu_kernels *k, void *dst, enum mc_dtype dt,
                   const float *src, int64_t n)
{
    if (dst)
        k->convert(dst, dt, src, MC_DTYPE_F32, n);
}
