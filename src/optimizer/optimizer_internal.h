/* Optimizer internals: grad norm / clipping helpers (clip_grads.c) used by the step
 * (optimizer.c). Private header. */
#ifndef MC_OPTIMIZER_INTERNAL_H
#define MC_OPTIMIZER_INTERNAL_H

#include "megatron/optimizer.h"
#include "backend/backend.h"

/* Checks an optimizer config's values (also used by the distributed optimizer). */
mc_status mc_opt_config_check(const struct mc_optimizer_config *c);
/* The parameter sets one optimizer steps (one model chunk, or vp with interleaved pipelining):
 * grad norm, zero count and clipping cover all of them together, as Megatron's optimizer does
 * over the params of every chunk. */
/* Global L2 norm of the grads (Megatron's 'grad norm'). */
mc_status mc_opt_grad_norm(const struct mc_param_set *const *sets, int n, float *norm);
/* Exact zeros in the counted grads (--log-num-zeros-in-grad). */
mc_status mc_opt_count_zeros(const struct mc_param_set *const *sets, int n, int64_t *zeros);
/* Scales every grad by clip_grad / (norm + 1e-6) when that is < 1; clip_grad <= 0 disables. */
void mc_opt_clip_grads(const struct mc_param_set *const *sets, int n, float clip_grad,
                       float norm);
/* Sum over the model-parallel (tp x pp) group of one float, as clip_grads.py reduces. */
mc_status mc_opt_mp_sum(const struct mc_param_set *s, float *x);
/* Max of one float over the same group (found_inf of the non-distributed optimizer). */
mc_status mc_opt_mp_max(const struct mc_param_set *s, float *x);
/* torch._amp_foreach_non_finite_check_and_unscale_ on x[n] (fp32 backend memory): whether
 * any element is inf or NaN (checked before scaling, as the kernel does), then x *= inv_scale
 * unless inv_scale is 1. */
bool mc_opt_check_and_unscale(struct mc_backend *be, float *x, int64_t n, float inv_scale);
/* Whether this rank counts param p in the grad norm and zero count: not the shared copy,
 * and not a tensor-parallel duplicate (param_is_not_shared and
 * param_is_not_tensor_parallel_duplicate). */
static inline bool mc_opt_counted(const struct mc_param_set *s, const struct mc_param_view *v)
{
    return !v->shared && (v->tensor_parallel || s->tp_rank == 0);
}

#endif
