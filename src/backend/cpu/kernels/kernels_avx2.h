/* Prototypes of the AVX2 + FMA CPU kernels (kernels/<op>_avx2.c). Each has the signature of the
 * matching slot in struct mc_cpu_kernels (kernels.h; backend/backend.h has the semantics);
 * select.c builds the "cpu-avx2" table from them (slots without an AVX2 port hold the
 * reference kernel) when the CPU has AVX2 + FMA but no usable AVX-512. */
#ifndef MC_KERNELS_AVX2_H
#define MC_KERNELS_AVX2_H

#include "megatron.h"

#include <stdbool.h>
#include <stdint.h>

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

#endif /* MC_KERNELS_AVX2_H */
