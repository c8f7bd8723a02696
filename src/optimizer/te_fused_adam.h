/* Transformer Engine's FusedAdam as Megatron core_v0.12.1 builds it for
 * --use-precision-aware-optimizer (megatron/core/optimizer/__init__.py: master_weights,
 * use_decoupled_grad, master_weight_dtype / exp_avg_dtype / exp_avg_sq_dtype from the options,
 * store_param_remainders with TE >= 2.1): the update of one optimizer parameter (a
 * distributed-optimizer shard of one model parameter) with the rounding points of TE 2.1-2.3's
 * transformer_engine/pytorch/optimizers/fused_adam.py and its multi_tensor_adam.cu kernels.
 * The distributed optimizer (distributed/distrib_optimizer.c) drives it; the scalar code is in
 * te_fused_adam_ref.c (built without FMA contraction: every product and sum rounded once, as
 * the PyTorch twin in tests/optimizer/test_te_fused_adam.py computes them). Private header. */
#ifndef MC_TE_FUSED_ADAM_H
#define MC_TE_FUSED_ADAM_H

#include <stdbool.h>
#include <stdint.h>

#include "megatron.h"

/* What the optimizer keeps and in which dtypes. */
struct mc_te_adam_cfg {
    float beta1, beta2, eps;
    enum mc_dtype param_dt;  /* the model parameter: F32, BF16 or F16 */
    enum mc_dtype master_dt; /* --main-params-dtype: F32 or F16 (an F32 param has no master) */
    enum mc_dtype m_dt, v_dt; /* --exp-avg-dtype / --exp-avg-sq-dtype: F32 or F16 */
};

/* store_param_remainders in effect: bf16 params with fp32 masters. The master is then kept as
 * the bf16 param plus the low 16 bits, so the bf16 param is the master rounded half away from
 * zero (mc_te_adam_bf16_of), not to nearest even. */
bool mc_te_adam_remainders(const struct mc_te_adam_cfg *c);

/* One optimizer parameter. Arrays hold n elements in fp32 memory; a state kept in fp16 holds
 * the fp16 values of state / scale (exactly representable), its scale in scale[]. */
struct mc_te_adam_tensor {
    int64_t n;
    /* fp32: what the model param is rounded from after the step (for an F32 param the param;
     * for fp32 masters the master itself) */
    float *p;
    float *master;     /* F16 master of a 16-bit param, else NULL */
    float *m, *v;
    float scale[3];    /* master, exp_avg, exp_avg_sq (1 until first stored in fp16) */
    const float *g;    /* the decoupled grad: the grad buffer's values (fp32 or bf16/fp16) */
};

/* FusedAdam.initialize_state: exp_avg = exp_avg_sq = 0 (scale 1), an fp16 master from p
 * (set_scaled_state of the param's float value). */
void mc_te_adam_init(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t);

/* One FusedAdam.step on t (AdamW mode, bias correction on) with this group's lr and weight
 * decay at step count step (>= 1): fp16 states unscaled to fp32 (value * scale), the kernel's
 * fp32 math, the new states rounded back (scale = absmax / (fp16 max / 2), value * (1 / scale)
 * rounded to nearest even). */
void mc_te_adam_step(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t, float lr,
                     float weight_decay, int64_t step);

/* FusedAdam.get_unscaled_state of exp_avg and exp_avg_sq, what a checkpoint stores: in place,
 * an fp16 state times its scale (fp32 states as they are). */
void mc_te_adam_unscale_states(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t);

/* FusedAdam.set_scaled_state after a checkpoint load: m and v hold fp32 values on entry; an
 * fp16 state is re-quantized in place, its scale set (fp32 states: scale 1); an fp16 master
 * is quantized from p, the fp32 param loaded (the step quantizes it from that same value, so
 * a saved p gives back the master bit for bit). */
void mc_te_adam_scale_states(const struct mc_te_adam_cfg *c, struct mc_te_adam_tensor *t);

/* The bf16 bits multi_tensor_adam_param_remainder leaves in the param for fp32 master x: its
 * high half, plus one when the low half's top bit is set. */
uint16_t mc_te_adam_bf16_of(float x);

/* The same conversion over n elements (the model weights after the all-gather). */
void mc_te_adam_bf16_params(uint16_t *dst, const float *src, int64_t n);

#endif
