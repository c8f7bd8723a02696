/* Declarations of the scalar reference kernels (kernels/<op>_ref.c) and the BLAS GEMM
 * (kernels/gemm_blas.c). Private to the CPU backend: the model reaches them only through the
 * CPU backend (kernels.h; backend/backend.h defines each op). */
#ifndef MC_CPU_KERNELS_REF_H
#define MC_CPU_KERNELS_REF_H

#include "backend/cpu/kernels/kernels.h"

/* Column block owned by one thread in the deterministic column reductions (bias and norm
 * grads, embedding grads): each output element is summed over rows in row order by exactly
 * one thread, whatever the thread count. */
#define MC_REF_COL_BLOCK 64

void convert_ref(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                 int64_t n);
void accumulate_ref(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                    int64_t n);

/* A vector conversion (or accumulation) over elements [i0, i1) of dst and src. */
typedef void (*mc_convert_span_fn)(void *dst, enum mc_dtype dst_dt, const void *src,
                                   enum mc_dtype src_dt, int64_t i0, int64_t i1);
/* Runs span over [0, n): up to 64K elements on the caller's thread without entering OpenMP at
 * all (the staged 16-bit ops convert many short rows and blocks from inside their own parallel
 * regions, where even an inactive nested region costs more than the conversion), else over the
 * threads in blocks of 16384 elements (a multiple of every vector width, so only the last block
 * has a scalar tail). */
void convert_split(mc_convert_span_fn span, void *dst, enum mc_dtype dst_dt, const void *src,
                   enum mc_dtype src_dt, int64_t n);

void gemm_ref(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void gemm_blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

void layernorm_fwd_ref(float *y, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int64_t rows, int64_t h, float eps);
void layernorm_bwd_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                       const float *w, const float *mean, const float *rstd, int64_t rows,
                       int64_t h);
void rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                     int64_t h, float eps);
void rmsnorm_bwd_ref(float *dx, float *dw, const float *dy, const float *x, const float *w,
                     const float *rstd, int64_t rows, int64_t h);

void gelu_tanh_fwd_ref(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void gelu_tanh_bwd_ref(float *dx, const float *dy, const float *x, const float *bias,
                       int64_t rows, int64_t cols);
void gelu_erf_fwd_ref(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void gelu_erf_bwd_ref(float *dx, const float *dy, const float *x, const float *bias,
                      int64_t rows, int64_t cols);
void squared_relu_fwd_ref(float *y, const float *x, const float *bias, int64_t rows,
                          int64_t cols);
void squared_relu_bwd_ref(float *dx, const float *dy, const float *x, const float *bias,
                          int64_t rows, int64_t cols);
void swiglu_fwd_ref(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
void swiglu_bwd_ref(float *dx, const float *dy, const float *x, const float *bias, int64_t rows,
                    int64_t cols);

void bias_grad_ref(float *db, const float *dy, int64_t rows, int64_t cols);
void bias_dropout_add_ref(float *y, const float *x, const float *bias, const float *residual,
                          const uint8_t *keep_mask, float scale, int64_t rows, int64_t cols);

void masked_softmax_fwd_ref(float *p, int64_t bh, int64_t sq, int64_t sk, float mult,
                            const uint8_t *mask);
void masked_softmax_bwd_ref(float *dp, const float *p, int64_t bh, int64_t sq, int64_t sk,
                            float mult);

void rope_fwd_ref(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                  int64_t hn, int64_t rot_dim, bool interleaved);
void rope_bwd_ref(float *dt, const float *cos, const float *sin, int64_t s, int64_t bh,
                  int64_t hn, int64_t rot_dim, bool interleaved);

void embedding_fwd_ref(float *y, const float *w, const int64_t *ids, int64_t n, int64_t h,
                       int64_t vocab_start, int64_t vocab_local);
void embedding_bwd_ref(float *dw, const float *dy, const int64_t *ids, int64_t n, int64_t h,
                       int64_t vocab_start, int64_t vocab_local);

void xent_max_ref(float *max_local, const float *logits, int64_t n, int64_t v);
void xent_sumexp_ref(float *sumexp_local, float *target_logit, const float *logits,
                     const float *max, const int64_t *target, int64_t n, int64_t v,
                     int64_t v_start);
void xent_bwd_ref(float *dlogits, const float *logits, const float *max, const float *sumexp,
                  const int64_t *target, const float *dloss, int64_t n, int64_t v,
                  int64_t v_start);

double sumsq_ref(const float *x, int64_t n);
int64_t count_zeros_ref(const float *x, int64_t n);
void scale_ref(float *x, float s, int64_t n);
void adamw_ref(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
               float b2, float eps, float wd, int64_t t);
void sgd_ref(float *p, float *buf, const float *g, int64_t n, float lr, float momentum, float wd,
             bool first_step);

/* torch_cpu16_ref.c: the 16-bit functions as PyTorch's CPU eager ops round them
 * (MC_ROUNDING_TORCH_CPU); fp32 buffers holding values of dt, every result rounded to dt */
typedef void (*mc_tc16_act_fn)(enum mc_dtype dt, float *y, const float *x, const float *bias,
                               int64_t rows, int64_t cols);
typedef void (*mc_tc16_act_bwd_fn)(enum mc_dtype dt, float *dx, const float *dy, const float *x,
                                   const float *bias, int64_t rows, int64_t cols);
void round_to_dtype_tc16(enum mc_dtype dt, float *x, int64_t n);
void bias_add_tc16(enum mc_dtype dt, float *x, const float *bias, int64_t rows, int64_t cols);
void gelu_tanh_fwd_tc16(enum mc_dtype dt, float *y, const float *x, const float *bias,
                        int64_t rows, int64_t cols);
void gelu_tanh_bwd_tc16(enum mc_dtype dt, float *dx, const float *dy, const float *x,
                        const float *bias, int64_t rows, int64_t cols);
void swiglu_fwd_tc16(enum mc_dtype dt, float *y, const float *x, const float *bias, int64_t rows,
                     int64_t cols);
void swiglu_bwd_tc16(enum mc_dtype dt, float *dx, const float *dy, const float *x,
                     const float *bias, int64_t rows, int64_t cols);
void bias_dropout_add_tc16(enum mc_dtype dt, float *y, const float *x, const float *bias,
                           const float *residual, const uint8_t *keep_mask, float scale,
                           int64_t rows, int64_t cols);
void rope_tc16(enum mc_dtype dt, float *t, const float *cos, const float *sin, int64_t s,
               int64_t bh, int64_t hn, int64_t rot_dim, bool interleaved, float sign);
void layernorm_wgrad_tc16(enum mc_dtype dt, float *gw, float *gb, const float *dy,
                          const float *x, const float *mean, const float *rstd, int64_t rows,
                          int64_t h);

#endif /* MC_CPU_KERNELS_REF_H */
