/* Prototypes of the AVX2 + FMA CPU kernels (kernels/<op>_avx2.c). Each has the signature of the
 * matching slot in struct mc_cpu_kernels (kernels.h; backend/backend.h has the semantics);
 * select.c builds the "cpu-avx2" table from them, with the AVX2 dtype conversions and the BLAS
 * GEMM (both declared in kernels_avx512.h), when the CPU has AVX2 + FMA + F16C but no usable
 * AVX-512. */
#ifndef MC_KERNELS_AVX2_H
#define MC_KERNELS_AVX2_H

#include "megatron.h"

#include <stdbool.h>
#include <stdint.h>

void layernorm_fwd_avx2(float *y, float *mean, float *rstd, const float *x, const float *w,
                        const float *b, int64_t rows, int64_t h, float eps);
void layernorm_bwd_avx2(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const float *w, const float *mean, const float *rstd, int64_t rows,
                        int64_t h);
void rmsnorm_fwd_avx2(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                      int64_t h, float eps);
void rmsnorm_bwd_avx2(float *dx, float *dw, const float *dy, const float *x, const float *w,
                      const float *rstd, int64_t rows, int64_t h);

void gelu_tanh_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void gelu_tanh_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                        int64_t rows, int64_t cols);
void gelu_erf_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void gelu_erf_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                       int64_t rows, int64_t cols);
void squared_relu_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows,
                           int64_t cols);
void squared_relu_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                           int64_t rows, int64_t cols);
void swiglu_fwd_avx2(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void swiglu_bwd_avx2(float *dx, const float *dy, const float *x, const float *bias,
                     int64_t rows, int64_t cols);

void bias_grad_avx2(float *db, const float *dy, int64_t rows, int64_t cols);
void bias_dropout_add_avx2(float *y, const float *x, const float *bias, const float *residual,
                           const uint8_t *keep_mask, float scale, int64_t rows, int64_t cols);

/* core/rng.h's dropout keep flags, 4 Philox blocks per vector (dropout_avx2.c) */
void dropout_mask_avx2(uint8_t *keep, int64_t first, int64_t n, uint64_t seed, uint32_t c1_hi,
                       uint32_t c2, uint32_t c3, float p);
void masked_softmax_fwd_avx2(float *p, int64_t bh, int64_t sq, int64_t sk, float mult,
                             const uint8_t *mask);
void masked_softmax_bwd_avx2(float *dp, const float *p, int64_t bh, int64_t sq, int64_t sk,
                             float mult);

void rope_fwd_avx2(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                   int64_t hn, int64_t rot_dim, bool interleaved);
void rope_bwd_avx2(float *dt, const float *cos, const float *sin, int64_t s, int64_t bh,
                   int64_t hn, int64_t rot_dim, bool interleaved);

void embedding_fwd_avx2(float *y, const float *w, const int64_t *ids, int64_t n, int64_t h,
                        int64_t vocab_start, int64_t vocab_local);
void embedding_bwd_avx2(float *dw, const float *dy, const int64_t *ids, int64_t n, int64_t h,
                        int64_t vocab_start, int64_t vocab_local);

void xent_max_avx2(float *max_local, const float *logits, int64_t n, int64_t v);
void xent_sumexp_avx2(float *sumexp_local, float *target_logit, const float *logits,
                      const float *max, const int64_t *target, int64_t n, int64_t v,
                      int64_t v_start);
void xent_bwd_avx2(float *dlogits, const float *logits, const float *max, const float *sumexp,
                   const int64_t *target, const float *dloss, int64_t n, int64_t v,
                   int64_t v_start);

double sumsq_avx2(const float *x, int64_t n);
int64_t count_zeros_avx2(const float *x, int64_t n);
void scale_avx2(float *x, float s, int64_t n);
void adamw_avx2(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                float b2, float eps, float wd, int64_t t);
void sgd_avx2(float *p, float *buf, const float *g, int64_t n, float lr, float momentum,
              float wd, bool first_step);

#endif /* MC_KERNELS_AVX2_H */
