/* Data-parallel gradient all-reduce, mirrors DistributedDataParallel.finish_grad_sync of
 * megatron/core/distributed (core_v0.12.1) without --overlap-grad-reduce and without the
 * distributed optimizer: one bucket holding every grad (the engine's grad block is already
 * contiguous), pre-multiplied by gradient_scaling_factor and summed over the DP(-CP) group.
 * Scaling before the sum, as Megatron does, keeps dp = 2^k runs equal to dp = 1. */
#include "distributed/ddp.h"

#include "models/gpt/gpt_model.h"

float mc_ddp_grad_scale(const struct mc_parallel_state *ps, bool calculate_per_token_loss)
{
    if (calculate_per_token_loss)
        return 1.0f;
    return 1.0f / (float)mc_ps_size(ps, MC_PS_DP_CP);
}

void mc_ddp_scale_grads(mc_gpt_model *m, float scale)
{
    m->be->scale(m->grad_block, scale, m->n_elements);
}

mc_status mc_ddp_finish_grad_sync(mc_gpt_model *m, const struct mc_parallel_state *ps,
                                  float scale)
{
    const struct mc_ps_comm *g = &ps->group[MC_PS_DP_CP];
    if (g->size == 1)
        return MC_OK;
    if (scale != 1.0f)
        mc_ddp_scale_grads(m, scale);
    return mc_comm_all_reduce(g->comm, m->grad_block, m->n_elements, MC_COMM_FLOAT, MC_COMM_SUM,
                              "data-parallel gradient all-reduce");
}
