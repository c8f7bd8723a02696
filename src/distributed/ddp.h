/* Data-parallel gradient synchronisation, the counterpart of
 * megatron/core/distributed/distributed_data_parallel.py + finalize_model_grads.py for the
 * non-distributed optimizer without overlap. Private header. */
#ifndef MC_DDP_H
#define MC_DDP_H

#include "megatron/gpt.h"
#include "parallel_state/parallel_state.h"

/* Megatron's gradient_scaling_factor: 1/(dp*cp) (grads averaged over data parallel), or 1
 * with --calculate-per-token-loss (grads summed; the caller scales by 1/total_tokens). */
float mc_ddp_grad_scale(const struct mc_parallel_state *ps, bool calculate_per_token_loss);

/* Multiplies every gradient of the model by scale (one pass over the contiguous grad block). */
void mc_ddp_scale_grads(mc_gpt_model *m, float scale);
/* finish_grad_sync: scales the model's contiguous grad buffer by scale and all-reduces it
 * (sum) over the data-parallel-with-context group, so every DP replica holds the same
 * averaged grads before the optimizer step. A no-op for one DP rank. */
mc_status mc_ddp_finish_grad_sync(mc_gpt_model *m, const struct mc_parallel_state *ps,
                                  float scale);

#endif /* MC_DDP_H */
