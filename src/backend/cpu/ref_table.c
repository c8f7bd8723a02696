/* The CPU reference ops table: every fp32 kernel slot (kernels.h) bound to its scalar reference
 * (kernels/<op>_ref.c). Tests compare every fast kernel against this table. */
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/ref.h"
#include "core/rng.h"

#include <pthread.h>

static const struct mc_cpu_kernels ref_ops = {
    .version = MC_CPU_KERNELS_VERSION,
    .name = "cpu-ref",
    .convert = convert_ref,
    .accumulate = accumulate_ref,
    .gemm = gemm_ref,
    .layernorm_fwd = layernorm_fwd_ref,
    .layernorm_bwd = layernorm_bwd_ref,
    .rmsnorm_fwd = rmsnorm_fwd_ref,
    .rmsnorm_bwd = rmsnorm_bwd_ref,
    .gelu_tanh_fwd = gelu_tanh_fwd_ref,
    .gelu_tanh_bwd = gelu_tanh_bwd_ref,
    .gelu_erf_fwd = gelu_erf_fwd_ref,
    .gelu_erf_bwd = gelu_erf_bwd_ref,
    .squared_relu_fwd = squared_relu_fwd_ref,
    .squared_relu_bwd = squared_relu_bwd_ref,
    .swiglu_fwd = swiglu_fwd_ref,
    .swiglu_bwd = swiglu_bwd_ref,
    .bias_grad = bias_grad_ref,
    .bias_dropout_add = bias_dropout_add_ref,
    .dropout_mask = mc_rng_dropout_mask, /* the definition itself (core/rng.c) */
    .masked_softmax_fwd = masked_softmax_fwd_ref,
    .masked_softmax_bwd = masked_softmax_bwd_ref,
    .rope_fwd = rope_fwd_ref,
    .rope_bwd = rope_bwd_ref,
    .embedding_fwd = embedding_fwd_ref,
    .embedding_bwd = embedding_bwd_ref,
    .xent_max = xent_max_ref,
    .xent_sumexp = xent_sumexp_ref,
    .xent_bwd = xent_bwd_ref,
    .sumsq = sumsq_ref,
    .count_zeros = count_zeros_ref,
    .scale = scale_ref,
    .adamw = adamw_ref,
    .sgd = sgd_ref,
};

const struct mc_cpu_kernels *mc_cpu_kernels_ref(void) { return &ref_ops; }

/* The references with GEMM through BLAS: the table the model runs on when no faster kernels
 * are selected (a triple-loop GEMM is only a definition); the dtype conversions run the AVX2 +
 * F16C kernels where the CPU has them (the same bits as the references). */
static struct mc_cpu_kernels ref_blas_ops;
static pthread_once_t ref_blas_once = PTHREAD_ONCE_INIT;

static void ref_blas_init(void)
{
    ref_blas_ops = ref_ops;
    ref_blas_ops.name = "cpu-ref+blas";
    ref_blas_ops.gemm = gemm_blas;
    const struct mc_cpu_features *f = mc_cpu_features();
    if (f->avx2 && f->f16c) {
        ref_blas_ops.convert = convert_avx2;
        ref_blas_ops.accumulate = accumulate_avx2;
    }
}

const struct mc_cpu_kernels *mc_cpu_kernels_ref_blas(void)
{
    pthread_once(&ref_blas_once, ref_blas_init);
    return &ref_blas_ops;
}
