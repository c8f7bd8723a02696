/* The 16-bit model weights follow the fp32 main params (Float16OptimizerWithFloat16Params'
 * _copy_main_params_to_model_params): one conversion over the whole block, since the views
 * are packed at the same offsets in both. */
#include "megatron/optimizer.h"

#include "backend/backend.h"

void mc_param_set_refresh_compute(const struct mc_param_set *s)
{
    if (s->compute_dtype == MC_DTYPE_F32 || !s->compute_block || s->n_elements == 0)
        return;
    s->be->ops->convert(s->be, s->compute_block, s->compute_dtype, s->param_block, MC_DTYPE_F32,
                        s->n_elements);
}
