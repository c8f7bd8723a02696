/* The CPU backend's internals shared by its files: the kernel table a backend instance runs,
 * the fp32-only guard, the attention op pair (attention_cpu.c). Private to src/backend. */
#ifndef MC_CPU_BACKEND_H
#define MC_CPU_BACKEND_H

#include "backend/backend.h"
#include "backend/cpu/kernels/kernels.h"

/* The kernel table of a CPU backend instance. */
static inline const struct mc_cpu_kernels *mc_cpu_kernels_of(const struct mc_backend *be)
{
    return be->impl;
}

/* Stops the process with a message when an op gets a dtype the CPU backend does not implement
 * (fp32 today; supports() says so, so a caller that asks first never gets here). */
void mc_cpu_need_f32(enum mc_dtype dt, const char *op);
/* Likewise for the ops that take BF16/F16: stops unless dt is one of them. */
void mc_cpu_need_half(enum mc_dtype dt, const char *op);

void mc_cpu_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                          const void *qkv, void *probs, void *ctx, struct mc_attention_work *w);
void mc_cpu_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                          const void *qkv, const void *probs, const void *dctx, void *dqkv,
                          struct mc_attention_work *w);

/* The ALiBi bias of score (query i, key j) of local head hl (backend.h, alibi_slopes): slope
 * times (j - i) or j, in fp32, rounded to d->dt for 16-bit ops. attention_cpu.c. */
float mc_cpu_alibi_bias(const struct mc_attention_desc *d, int64_t hl, int64_t i, int64_t j);

/* flash_attention_cpu.c: the flash attention op pair, and which tile kernels it runs on be
 * ("ref", "avx2"). */
void mc_cpu_flash_attention_fwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                const void *qkv, void *ctx, float *lse);
void mc_cpu_flash_attention_bwd(struct mc_backend *be, const struct mc_attention_desc *d,
                                const void *qkv, const void *ctx, const float *lse,
                                const void *dctx, void *dqkv);
const char *mc_cpu_flash_kernels_name(const struct mc_backend *be);

/* Creates the CPU backend on kernel table k. */
mc_status mc_cpu_backend_create(const struct mc_cpu_kernels *k, struct mc_backend **out);
/* The CPU backend's ops table. */
const struct mc_backend_ops *mc_cpu_backend_ops(void);

#endif /* MC_CPU_BACKEND_H */
