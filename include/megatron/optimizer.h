/* Optimizers: the counterpart of megatron/core/optimizer (Adam with decoupled weight decay as
 * apex/TE FusedAdam in adam_w_mode, SGD with momentum) and optimizer/clip_grads.py.
 * Parameter groups follow Megatron's rule: no weight decay for biases and every 1-D parameter. */
#ifndef MEGATRON_OPTIMIZER_H
#define MEGATRON_OPTIMIZER_H

#include "megatron/param_set.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mc_optimizer_type { MC_OPT_ADAM = 0, MC_OPT_SGD };

struct mc_optimizer_config {
    enum mc_optimizer_type optimizer; /* --optimizer adam */
    float adam_beta1;                 /* 0.9 */
    float adam_beta2;                 /* 0.999 */
    float adam_eps;                   /* 1e-8 */
    float sgd_momentum;               /* 0.9 */
    float clip_grad;                  /* 1.0; 0 disables clipping */
};
MC_API void mc_opt_config_default(struct mc_optimizer_config *cfg);

/* compute_block = param_block rounded to compute_dtype (nearest even) on the set's backend;
 * nothing for an fp32 set. mc_opt_step calls it after every update; call it after writing
 * param_block any other way (a checkpoint load). */
MC_API void mc_param_set_refresh_compute(const struct mc_param_set *s);

typedef struct mc_optimizer mc_optimizer;

/* Allocates state for every parameter of a model's parameter set (megatron/param_set.h; for
 * GPTModel mc_gpt_param_set) (Adam: exp_avg, exp_avg_sq; SGD: momentum buffer). The set, and
 * so its model, must outlive the optimizer. */
MC_API mc_status mc_opt_init(const struct mc_optimizer_config *cfg,
                             const struct mc_param_set *set, mc_optimizer **out);
/* One optimizer over the parameter sets of several model chunks (interleaved pipelining: the
 * vp chunks of this pipeline stage, in chunk order), as Megatron's optimizer holds the params
 * of every chunk: one grad norm, zero count and clipping over all of them. mc_opt_init is this
 * with n = 1. The array itself may be freed after the call. */
MC_API mc_status mc_opt_init_chunks(const struct mc_optimizer_config *cfg,
                                    const struct mc_param_set *const *sets, int n,
                                    mc_optimizer **out);
MC_API void mc_opt_free(mc_optimizer *o);

struct mc_opt_step_result {
    float grad_norm;     /* global L2 norm before clipping (Megatron's 'grad norm') */
    int64_t num_zeros;   /* zeros in the grads counted as --log-num-zeros-in-grad does */
};
/* One step: grad norm, clip by clip_grad/(norm+1e-6) when that is < 1, then the update with
 * this step's learning rate and weight decay (the scheduler's values; wd applies to the
 * decayed group only). Does not zero the grads. */
MC_API mc_status mc_opt_step(mc_optimizer *o, float lr, float weight_decay,
                             struct mc_opt_step_result *res);

/* Optimizer state of parameter i (the index in the set; with several chunks, chunk 0's
 * parameters come first, then chunk 1's, ...), for checkpoints: Adam's
 * exp_avg and exp_avg_sq, or SGD's momentum_buffer ([numel] each; NULL when the optimizer has
 * no such state). Valid until mc_opt_free. */
struct mc_opt_param_state {
    float *exp_avg;
    float *exp_avg_sq;
    float *momentum_buffer;
};
MC_API struct mc_opt_param_state mc_opt_param_state(const mc_optimizer *o, int64_t i);
/* Steps taken (Adam's bias-correction step t of the last update; 0 before the first). */
MC_API int64_t mc_opt_step_count(const mc_optimizer *o);
/* Restores the step count after loading a checkpoint (the next step uses t = step + 1). */
MC_API void mc_opt_set_step_count(mc_optimizer *o, int64_t step);

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_OPTIMIZER_H */
