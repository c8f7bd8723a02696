/* Prototypes of the fast CPU kernels (kernels/<op>_avx512.c and the BLAS GEMM). Each has the
 * signature of the matching slot in struct mc_cpu_kernels (kernels.h; backend/backend.h has the
 * semantics); select.c puts them in the table when the CPU supports AVX-512. */
#ifndef MC_KERNELS_AVX512_H
#define MC_KERNELS_AVX512_H

#include "megatron.h"

#include <stdbool.h>
#include <stdint.h>

/* AVX2 + F16C dtype conversion (convert_avx2.c): in every table whose CPU has them. */
void convert_avx2(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                  int64_t n);
void accumulate_avx2(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                     int64_t n);
/* The same at AVX-512 width (convert_avx512.c): the cpu-avx512 table's. */
void convert_avx512(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                    int64_t n);
void accumulate_avx512(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                       int64_t n);

void gemm_blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* GEMM with 16-bit A, B (ab_dt) and C of ab_dt or F32, fp32 compute, widened tile by tile with
 * cv (a table's convert) instead of whole-matrix copies; the same bits as widening A and B and
 * calling gemm_blas (gemm_blas.c). */
typedef void (*mc_convert_fn)(void *dst, enum mc_dtype dst_dt, const void *src,
                              enum mc_dtype src_dt, int64_t n);
void gemm_blas_half(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const void *A, enum mc_dtype ab_dt, int64_t lda, const void *B, int64_t ldb,
                    float beta, void *C, enum mc_dtype c_dt, int64_t ldc, mc_convert_fn cv);
/* GEMM with bf16 A, B and C of bf16 or F32 on AVX512-BF16 dot products (oneDNN's bf16 matmul),
 * fp32 accumulation, the tiles of gemm_blas; C rounded with cv as gemm_blas_half does. Differs
 * from gemm_blas_half only in the fp32 summation order (gemm_blas.c). Stops the process where
 * gemm_dot_bf16_available is false; that says why (or names oneDNN's kernel) in *why. */
bool gemm_dot_bf16_available(const char **why);
void gemm_dot_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                   enum mc_dtype c_dt, int64_t ldc, mc_convert_fn cv);
/* Drops the cached primitives (tests: the next calls create them again); no GEMM may run. */
void gemm_dot_bf16_clear_cache(void);
/* VDPBF16PS's FLOP rate over the fp32 AVX-512 FMA's on this CPU (kernels/dot_rate_avx512bf16.c;
 * about 2 on Zen 4, 0.5 on Intel without AMX); only where the CPU has AVX512-BF16. */
double bf16_dot_rate_ratio_avx512bf16(void);
/* "OpenBLAS (SkylakeX kernels)" etc.; also performs the one-time library setup. */
const char *mc_gemm_blas_name(void);

void layernorm_fwd_avx512(float *y, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int64_t rows, int64_t h, float eps);
void layernorm_bwd_avx512(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const float *w, const float *mean, const float *rstd, int64_t rows,
                          int64_t h);
void rmsnorm_fwd_avx512(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                        int64_t h, float eps);
void rmsnorm_bwd_avx512(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int64_t rows, int64_t h);

void gelu_tanh_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void gelu_tanh_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                          int64_t rows, int64_t cols);
void gelu_erf_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void gelu_erf_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                         int64_t rows, int64_t cols);
void squared_relu_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows,
                             int64_t cols);
void squared_relu_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                             int64_t rows, int64_t cols);
void swiglu_fwd_avx512(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void swiglu_bwd_avx512(float *dx, const float *dy, const float *x, const float *bias,
                       int64_t rows, int64_t cols);

void bias_grad_avx512(float *db, const float *dy, int64_t rows, int64_t cols);
void bias_dropout_add_avx512(float *y, const float *x, const float *bias, const float *residual,
                             const uint8_t *keep_mask, float scale, int64_t rows, int64_t cols);

/* core/rng.h's dropout keep flags, 8 Philox blocks per vector (dropout_avx512.c) */
void dropout_mask_avx512(uint8_t *keep, int64_t first, int64_t n, uint64_t seed, uint32_t c1_hi,
                         uint32_t c2, uint32_t c3, float p);
void masked_softmax_fwd_avx512(float *p, int64_t bh, int64_t sq, int64_t sk, float mult,
                               const uint8_t *mask);
void masked_softmax_bwd_avx512(float *dp, const float *p, int64_t bh, int64_t sq, int64_t sk,
                               float mult);

void rope_fwd_avx512(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                     int64_t hn, int64_t rot_dim, bool interleaved);
void rope_bwd_avx512(float *dt, const float *cos, const float *sin, int64_t s, int64_t bh,
                     int64_t hn, int64_t rot_dim, bool interleaved);

void embedding_fwd_avx512(float *y, const float *w, const int64_t *ids, int64_t n, int64_t h,
                          int64_t vocab_start, int64_t vocab_local);
void embedding_bwd_avx512(float *dw, const float *dy, const int64_t *ids, int64_t n, int64_t h,
                          int64_t vocab_start, int64_t vocab_local);

void xent_max_avx512(float *max_local, const float *logits, int64_t n, int64_t v);
void xent_sumexp_avx512(float *sumexp_local, float *target_logit, const float *logits,
                        const float *max, const int64_t *target, int64_t n, int64_t v,
                        int64_t v_start);
void xent_bwd_avx512(float *dlogits, const float *logits, const float *max, const float *sumexp,
                     const int64_t *target, const float *dloss, int64_t n, int64_t v,
                     int64_t v_start);

double sumsq_avx512(const float *x, int64_t n);
int64_t count_zeros_avx512(const float *x, int64_t n);
void scale_avx512(float *x, float s, int64_t n);
void adamw_avx512(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                  float b2, float eps, float wd, int64_t t);
void sgd_avx512(float *p, float *buf, const float *g, int64_t n, float lr, float momentum,
                float wd, bool first_step);

#endif /* MC_KERNELS_AVX512_H */
