/* The tile kernels of the CPU flash attention (backend/cpu/flash_attention_cpu.c): the small
 * dense products and the exponentials one (query tile, key tile) pair needs, on packed fp32
 * tiles that fit in the L1/L2 caches. flash_attention_ref.c defines them (plain loops, k
 * ascending, no contraction); flash_attention_avx2.c has the same semantics with AVX2 + FMA
 * (results within rounding of the reference, not bit-identical: FMA rounds once). Each is
 * deterministic: the order of every sum is fixed by the arguments alone. Private to
 * src/backend/cpu. */
#ifndef MC_CPU_FLASH_ATTENTION_H
#define MC_CPU_FLASH_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

struct mc_flash_kernels {
    const char *name; /* "ref", "avx2" */
    /* C[M, N] = (acc ? C : 0) + A[M, K] @ B[K, N]; row-major with row strides lda, ldb, ldc */
    void (*gemm_nn)(float *C, int64_t ldc, const float *A, int64_t lda, const float *B,
                    int64_t ldb, int64_t M, int64_t N, int64_t K, bool acc);
    /* C[M, N] = (acc ? C : 0) + A[K, M]^T @ B[K, N] */
    void (*gemm_tn)(float *C, int64_t ldc, const float *A, int64_t lda, const float *B,
                    int64_t ldb, int64_t M, int64_t N, int64_t K, bool acc);
    /* y[j] = exp(x[j] - m) for j < n (y may alias x; exp of anything below -87.3 is 0);
     * returns the sum of y in j order */
    float (*exp_sum)(float *y, const float *x, int64_t n, float m);
    /* x[j] = (x[j] * alpha) * mult (the multiply by mult skipped when it is 1) */
    void (*scores)(float *x, int64_t n, float alpha, float mult);
    /* max(init, x[0], ..., x[n-1]) */
    float (*row_max)(const float *x, int64_t n, float init);
    /* x[j] *= s */
    void (*scale)(float *x, int64_t n, float s);
    /* g[j] = mult * (p[j] * (g[j] - D)): the softmax backward with D = rowsum(dO * O) */
    void (*dsoftmax)(float *g, const float *p, int64_t n, float D, float mult);
};

const struct mc_flash_kernels *mc_flash_kernels_ref(void);
const struct mc_flash_kernels *mc_flash_kernels_avx2(void); /* needs AVX2 + FMA */

#endif /* MC_CPU_FLASH_ATTENTION_H */
