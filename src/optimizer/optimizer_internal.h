/* Optimizer internals: grad norm / clipping helpers (clip_grads.c) used by the step
 * (optimizer.c). Private header. */
#ifndef MC_OPTIMIZER_INTERNAL_H
#define MC_OPTIMIZER_INTERNAL_H

#include "megatron/optimizer.h"
#include "models/gpt/gpt_model.h"

/* Checks an optimizer config's values (also used by the distributed optimizer). */
mc_status mc_opt_config_check(const struct mc_optimizer_config *c);
/* Global L2 norm of the grads (Megatron's 'grad norm'). */
mc_status mc_opt_grad_norm(const struct mc_gpt_model *m, float *norm);
/* Exact zeros in the counted grads (--log-num-zeros-in-grad). */
mc_status mc_opt_count_zeros(const struct mc_gpt_model *m, int64_t *zeros);
/* Scales every grad by clip_grad / (norm + 1e-6) when that is < 1; clip_grad <= 0 disables. */
void mc_opt_clip_grads(struct mc_gpt_model *m, float clip_grad, float norm);

#endif
