/* Chooses the CPU ops table once at startup: AVX-512 kernels (kernels/<op>_avx512.c + BLAS GEMM)
 * when CPUID and XGETBV say they can run, else the AVX2 + FMA kernels (kernels/<op>_avx2.c +
 * BLAS GEMM) where those can, else the scalar references with BLAS GEMM.
 * MC_KERNELS=ref forces the references (the definition every fast kernel is tested against;
 * the "cpu" backend runs the table chosen here); MC_KERNELS=avx2 forces the AVX2 table where the
 * CPU/OS can run it (on an AVX-512 machine too); MC_KERNELS=auto|avx512 or unset choose
 * automatically. The choice is logged once.
 * Plays the role of PyTorch's CPU capability dispatch; Megatron itself only targets CUDA. */
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/ref.h"
#include "megatron.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const struct mc_cpu_kernels avx512_ops = {
    .version = MC_CPU_KERNELS_VERSION,
    .name = "cpu-avx512",
    .convert = convert_avx512,
    .accumulate = accumulate_avx512,
    .gemm = gemm_blas,
    .layernorm_fwd = layernorm_fwd_avx512,
    .layernorm_bwd = layernorm_bwd_avx512,
    .rmsnorm_fwd = rmsnorm_fwd_avx512,
    .rmsnorm_bwd = rmsnorm_bwd_avx512,
    .gelu_tanh_fwd = gelu_tanh_fwd_avx512,
    .gelu_tanh_bwd = gelu_tanh_bwd_avx512,
    .gelu_erf_fwd = gelu_erf_fwd_avx512,
    .gelu_erf_bwd = gelu_erf_bwd_avx512,
    .squared_relu_fwd = squared_relu_fwd_avx512,
    .squared_relu_bwd = squared_relu_bwd_avx512,
    .swiglu_fwd = swiglu_fwd_avx512,
    .swiglu_bwd = swiglu_bwd_avx512,
    .bias_grad = bias_grad_avx512,
    .bias_dropout_add = bias_dropout_add_avx512,
    .dropout_mask = dropout_mask_avx512,
    .masked_softmax_fwd = masked_softmax_fwd_avx512,
    .masked_softmax_bwd = masked_softmax_bwd_avx512,
    .rope_fwd = rope_fwd_avx512,
    .rope_bwd = rope_bwd_avx512,
    .embedding_fwd = embedding_fwd_avx512,
    .embedding_bwd = embedding_bwd_avx512,
    .xent_max = xent_max_avx512,
    .xent_sumexp = xent_sumexp_avx512,
    .xent_bwd = xent_bwd_avx512,
    .sumsq = sumsq_avx512,
    .count_zeros = count_zeros_avx512,
    .scale = scale_avx512,
    .adamw = adamw_avx512,
    .sgd = sgd_avx512,
};

/* For AVX2 + FMA + F16C CPUs without usable AVX-512: AMD before Zen 4, most Intel client parts. */
static const struct mc_cpu_kernels avx2_ops = {
    .version = MC_CPU_KERNELS_VERSION,
    .name = "cpu-avx2",
    .convert = convert_avx2,
    .accumulate = accumulate_avx2,
    .gemm = gemm_blas,
    .layernorm_fwd = layernorm_fwd_avx2,
    .layernorm_bwd = layernorm_bwd_avx2,
    .rmsnorm_fwd = rmsnorm_fwd_avx2,
    .rmsnorm_bwd = rmsnorm_bwd_avx2,
    .gelu_tanh_fwd = gelu_tanh_fwd_avx2,
    .gelu_tanh_bwd = gelu_tanh_bwd_avx2,
    .gelu_erf_fwd = gelu_erf_fwd_avx2,
    .gelu_erf_bwd = gelu_erf_bwd_avx2,
    .squared_relu_fwd = squared_relu_fwd_avx2,
    .squared_relu_bwd = squared_relu_bwd_avx2,
    .swiglu_fwd = swiglu_fwd_avx2,
    .swiglu_bwd = swiglu_bwd_avx2,
    .bias_grad = bias_grad_avx2,
    .bias_dropout_add = bias_dropout_add_avx2,
    .dropout_mask = dropout_mask_avx2,
    .masked_softmax_fwd = masked_softmax_fwd_avx2,
    .masked_softmax_bwd = masked_softmax_bwd_avx2,
    .rope_fwd = rope_fwd_avx2,
    .rope_bwd = rope_bwd_avx2,
    .embedding_fwd = embedding_fwd_avx2,
    .embedding_bwd = embedding_bwd_avx2,
    .xent_max = xent_max_avx2,
    .xent_sumexp = xent_sumexp_avx2,
    .xent_bwd = xent_bwd_avx2,
    .sumsq = sumsq_avx2,
    .count_zeros = count_zeros_avx2,
    .scale = scale_avx2,
    .adamw = adamw_avx2,
    .sgd = sgd_avx2,
};

static const struct mc_cpu_kernels *chosen;
static pthread_once_t chosen_once = PTHREAD_ONCE_INIT;

/* The fastest table this CPU/OS can run; *why says what decided it. */
static const struct mc_cpu_kernels *auto_choice(const char **why)
{
    if (mc_cpu_has_avx512()) {
        *why = "CPU and OS support AVX-512 F/BW/VL/DQ";
        return &avx512_ops;
    }
    if (mc_cpu_has_avx2()) {
        *why = "CPU and OS support AVX2 + FMA + F16C; no usable AVX-512";
        return &avx2_ops;
    }
    *why = "no usable AVX-512 or AVX2 + FMA + F16C (CPU flag or OS XSAVE support missing)";
    return mc_cpu_kernels_ref_blas();
}

static void choose(void)
{
    const char *env = getenv("MC_KERNELS");
    const char *why;
    bool want_ref = env && !strcmp(env, "ref"), want_avx2 = env && !strcmp(env, "avx2");
    bool want_avx512 = env && !strcmp(env, "avx512");
    if (env && *env && !want_ref && !want_avx2 && !want_avx512 && strcmp(env, "auto"))
        mc_log(MC_LOG_WARN,
               "MC_KERNELS=%s is not one of ref, avx2, avx512, auto; choosing automatically", env);
    if (want_ref) {
        chosen = mc_cpu_kernels_ref();
        why = "forced by MC_KERNELS=ref";
    } else if (want_avx2 && mc_cpu_has_avx2()) {
        chosen = &avx2_ops;
        why = "forced by MC_KERNELS=avx2";
    } else {
        chosen = auto_choice(&why);
        if (want_avx2)
            mc_log(MC_LOG_WARN, "MC_KERNELS=avx2 requested but this CPU/OS cannot run AVX2 + FMA + "
                                "F16C; choosing automatically");
        if (want_avx512 && chosen != &avx512_ops)
            mc_log(MC_LOG_WARN, "MC_KERNELS=avx512 requested but this CPU/OS cannot run AVX-512");
    }
    char feats[160];
    mc_cpu_features_str(feats, (int)sizeof feats);
    const struct mc_cpu_features *f = mc_cpu_features();
    mc_log(MC_LOG_INFO, "CPU kernels: %s (%s); CPU: %s [%s]; GEMM: %s", chosen->name, why,
           f->brand[0] ? f->brand : f->vendor, feats,
           chosen->gemm == gemm_blas ? mc_gemm_blas_name() : "reference triple loop");
}

const struct mc_cpu_kernels *mc_cpu_kernels_select(void)
{
    pthread_once(&chosen_once, choose);
    return chosen;
}

const struct mc_cpu_kernels *mc_cpu_kernels_avx512(void) { return &avx512_ops; }

const struct mc_cpu_kernels *mc_cpu_kernels_avx2(void) { return &avx2_ops; }
