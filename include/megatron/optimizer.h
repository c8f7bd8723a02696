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
    /* Mixed precision (Megatron's MixedPrecisionOptimizer and its grad scaler) */
    bool fp16, bf16;                  /* --fp16 / --bf16 (the model's params_dtype) */
    double loss_scale;                /* --loss-scale: a constant scaler when > 0 (None: 0) */
    double initial_loss_scale;        /* --initial-loss-scale 2^32 (dynamic scaler) */
    double min_loss_scale;            /* --min-loss-scale 1.0 */
    double loss_scale_window;         /* --loss-scale-window 1000 (Megatron's type is float) */
    int64_t hysteresis;               /* --hysteresis 2 */
    /* --use-precision-aware-optimizer (distributed optimizer, Adam): Transformer Engine
     * FusedAdam's update with these storage dtypes (F32, or F16; optimizer/te_fused_adam.h) */
    bool precision_aware;
    enum mc_dtype main_params_dtype;  /* --main-params-dtype fp32 */
    enum mc_dtype exp_avg_dtype;      /* --exp-avg-dtype fp32 */
    enum mc_dtype exp_avg_sq_dtype;   /* --exp-avg-sq-dtype fp32 */
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
    bool skipped;        /* inf/nan in the (unscaled) grads: no update, no clip, grad_norm and
                            num_zeros unset (Megatron's update_successful False, None, None) */
};
/* One step: grad norm, clip by clip_grad/(norm+1e-6) when that is < 1, then the update with
 * this step's learning rate and weight decay (the scheduler's values; wd applies to the
 * decayed group only). Does not zero the grads. */
/* --decoupled-lr: the learning rate of the parameters flagged embedding_or_output (Megatron's
 * is_decoupled_lr group) for the following steps; without a call they take the step's lr. */
MC_API void mc_opt_set_decoupled_lr(mc_optimizer *o, float lr);
/* Megatron's is_embedding_or_output_parameter (setup_embeddings_and_output_layer): the first
 * stage's embedding.word_embeddings.weight and the last stage's output_layer.weight (a tied
 * copy too), by their names. */
MC_API bool mc_opt_param_is_embedding_or_output(const struct mc_param_view *v);
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

/* ---- Grad scaler (megatron/core/optimizer/grad_scaler.py) -------------------------------
 * Which one an optimizer gets is Megatron's get_megatron_optimizer rule: with --fp16, --bf16
 * or the distributed optimizer, --loss-scale gives the constant scaler, else --fp16 the
 * dynamic one (growth 2, backoff 0.5, --loss-scale-window, --hysteresis, --min-loss-scale),
 * else (bf16 / fp32 distributed) none. The scale is a float32 value, as Megatron's tensor. */
struct mc_grad_scaler {
    bool on;                     /* false: no scaler (loss scale 1) */
    bool dynamic;                /* DynamicGradScaler, else ConstantGradScaler */
    float scale, min_scale;
    double growth_interval;      /* --loss-scale-window */
    int64_t hysteresis;
    int64_t growth_tracker, hysteresis_tracker;
};
/* The scaler of an optimizer config; mixed = the optimizer is Megatron's
 * MixedPrecisionOptimizer (fp16, bf16 or the distributed optimizer). MC_ERR_CONFIG naming the
 * option on values Megatron's asserts reject. */
MC_API mc_status mc_grad_scaler_init(struct mc_grad_scaler *g, const struct mc_optimizer_config *c,
                                     bool mixed);
/* DynamicGradScaler.update(found_inf): on inf/nan the growth tracker restarts and the
 * hysteresis tracker counts down, the scale backs off (not below min_scale) once it reaches
 * 0; after growth_interval clean steps in a row the scale doubles and hysteresis refills.
 * The constant scaler (and none) never changes. */
MC_API void mc_grad_scaler_update(struct mc_grad_scaler *g, bool found_inf);
/* The loss scale (1.0 without a scaler). */
MC_API double mc_grad_scaler_get_scale(const struct mc_grad_scaler *g);
/* 1 / scale as Megatron's inv_scale: the float32 of the double reciprocal. */
MC_API float mc_grad_scaler_inv_scale(const struct mc_grad_scaler *g);

/* What a checkpoint holds (optimizer state_dict 'grad_scaler': dynamic {'scale': tensor,
 * 'growth_tracker', 'hysteresis_tracker'}, constant {}). */
struct mc_grad_scaler_state {
    double scale;
    int64_t growth_tracker, hysteresis_tracker;
};
/* The optimizer's scaler (the distributed optimizer's: mc_distopt_grad_scaler in
 * distributed/distrib_optimizer.h; with several model chunks the first chunk's holds it). */
MC_API struct mc_grad_scaler *mc_opt_grad_scaler(mc_optimizer *o);
MC_API bool mc_opt_has_grad_scaler(const mc_optimizer *o);
MC_API bool mc_opt_grad_scaler_dynamic(const mc_optimizer *o);
/* The loss scale the next backward multiplies the loss by (1.0 without a scaler). */
MC_API double mc_opt_loss_scale(const mc_optimizer *o);
/* Read / restore the state. Get: the scale (1.0 without a scaler) and the trackers (0 for
 * the constant scaler). Set: the dynamic scaler takes all three (MC_ERR_CONFIG on a scale
 * that is not > 0 and finite); the constant one and none ignore it, as Megatron's
 * ConstantGradScaler.load_state_dict does (the scale stays --loss-scale). */
MC_API void mc_opt_grad_scaler_state(const mc_optimizer *o, struct mc_grad_scaler_state *st);
MC_API mc_status mc_opt_set_grad_scaler_state(mc_optimizer *o,
                                              const struct mc_grad_scaler_state *st);
/* The same on a scaler object (what the mc_opt_ and mc_distopt_ forms call). */
MC_API void mc_grad_scaler_get_state(const struct mc_grad_scaler *g,
                                     struct mc_grad_scaler_state *st);
MC_API mc_status mc_grad_scaler_set_state(struct mc_grad_scaler *g,
                                          const struct mc_grad_scaler_state *st);

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_OPTIMIZER_H */
