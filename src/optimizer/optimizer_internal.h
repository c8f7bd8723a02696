/* Optimizer internals: grad norm / clipping helpers (clip_grads.c) used by the step
 * (optimizer.c). Private header. */
#ifndef MC_OPTIMIZER_INTERNAL_H
#define MC_OPTIMIZER_INTERNAL_H

#include "megatron/optimizer.h"
#include "models/gpt/gpt_model.h"

/* Checks an optimizer config's values (also used by the distributed optimizer). */
mc_status mc_opt_config_check(const struct mc_optimizer_config *c);
/* The model chunks one optimizer steps (one, or vp with interleaved pipelining): grad norm,
 * zero count and clipping cover all of them together, as Megatron's optimizer does over the
 * params of every chunk. */
/* Global L2 norm of the grads (Megatron's 'grad norm'). */
mc_status mc_opt_grad_norm(struct mc_gpt_model *const *models, int n, float *norm);
/* Exact zeros in the counted grads (--log-num-zeros-in-grad). */
mc_status mc_opt_count_zeros(struct mc_gpt_model *const *models, int n, int64_t *zeros);
/* Scales every grad by clip_grad / (norm + 1e-6) when that is < 1; clip_grad <= 0 disables. */
void mc_opt_clip_grads(struct mc_gpt_model *const *models, int n, float clip_grad, float norm);
/* Sum over the model-parallel (tp x pp) group of one float, as clip_grads.py reduces. */
mc_status mc_opt_mp_sum(const struct mc_gpt_model *m, float *x);

#endif
