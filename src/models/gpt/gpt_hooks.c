/* The engine side of DistributedDataParallel's hooks (megatron/core/distributed/
 * distributed_data_parallel.py, core_v0.12.1): Megatron registers a post-hook on every
 * parameter's grad accumulator (grad ready -> bucket all-reduce / reduce-scatter) and a
 * forward pre-hook on every module (wait for the param all-gather). The engine has no
 * autograd, so backward and forward call the two callbacks at layer granularity, which is
 * where a layer's grads become final and where its params are first read (the callbacks
 * live in the model's parameter set, mc_param_set.hooks, where DDP installs them). */
#include "models/gpt/gpt_model.h"

/* state_dict order: [embeddings on the first stage] [L layers of equal size] [head on the
 * last stage], so the layers' first indices follow from the counts before and after them. */
int64_t mc_gpt_layer_first_param(const struct mc_gpt_model *m, int64_t l)
{
    int64_t before = m->dims.first_stage ? 1 + (m->pos_w != NULL) : 0;
    int64_t after = 0;
    if (m->dims.last_stage)
        after = 1 + (m->lnf_b != NULL) + (m->out_w != NULL);
    int64_t per_layer = m->dims.L > 0 ? (m->n_params - before - after) / m->dims.L : 0;
    return before + l * per_layer;
}
