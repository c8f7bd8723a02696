/* Element types: fp32 <-> bf16 / fp16 conversion, once for the whole tree, and typed element
 * access, beside mc_dtype_size/mc_dtype_name of include/megatron.h. Every conversion gives the
 * bits PyTorch's CPU tensor conversion gives (Tensor.to / Tensor.float, c10/util/BFloat16.h,
 * c10/util/Half.h and ATen's vectorised copies), checked live by tests/core/test_dtype_torch.py.
 * A vectorised kernel in src/backend may convert faster; these are its scalar reference.
 * Private header of src/. */
#ifndef MC_CORE_DTYPE_H
#define MC_CORE_DTYPE_H

#include "megatron.h"

/* bfloat16: round to nearest, ties to even; every NaN becomes 0xffff, as Tensor.to(bfloat16)
 * gives on x86 (ATen's AVX2/AVX-512 copy; c10's scalar constructor would give 0x7fc0). */
uint16_t mc_f32_to_bf16(float x);
float mc_bf16_to_f32(uint16_t x); /* exact (the high half of the float32) */
/* IEEE binary16: round to nearest, ties to even, subnormals kept, >= 65520 in magnitude to
 * infinity, NaN to the sign-kept quiet NaN 0x7e00 (payload dropped, as torch does). */
uint16_t mc_f32_to_f16(float x);
/* Exact; a NaN keeps sign and payload and comes back quiet (as F16C's vcvtph2ps). */
float mc_f16_to_f32(uint16_t x);

bool mc_dtype_is_float(enum mc_dtype t); /* F32, BF16, F16, F64 */

/* dst[n] = src[n] of dtype t as float32, as torch's Tensor.float() converts (integers rounded to
 * nearest, bool 0/1). src may be unaligned (a file mapping). */
void mc_dtype_to_f32(float *dst, const void *src, enum mc_dtype t, int64_t n);
/* dst[n] of dtype t (F32, BF16, F16 or F64) = src[n]; any other dtype is a programmer error. */
void mc_dtype_from_f32(void *dst, enum mc_dtype t, const float *src, int64_t n);
/* Element i of an array of dtype t as a double (exact but for int64 beyond 2^53). */
double mc_dtype_get_f64(const void *src, enum mc_dtype t, int64_t i);

#endif
