/* Gradient norm, zero count and clipping, mirrors megatron/core/optimizer/clip_grads.py
 * (get_grad_norm_fp32, clip_grad_by_total_norm_fp32, count_zeros_fp32): only grads that are
 * tensor-parallel shards or live on tensor-parallel rank 0 are counted (so replicated
 * parameters count once), and not the shared copy of tied embeddings on the last pipeline
 * stage; squares are summed per parameter in state-dict order in double (fixed order,
 * thread-count independent), then all-reduced over the model-parallel (tp x pp) group;
 * clip_coeff = clip_grad / (norm + 1e-6) scales every grad when it is below 1. With
 * interleaved pipelining the sums run over every model chunk of the rank (chunk by chunk, in
 * chunk order) before the one reduction. */
#include "optimizer/optimizer_internal.h"

#include <math.h>

#include "tensor_parallel/tensor_parallel.h"

/* Sum (or max) over the model-parallel group: tp x pp ranks (the tp group when pp == 1). */
static mc_status mp_reduce(const struct mc_param_set *s, float *x, bool max)
{
    if (s->pp_size == 1) {
        struct mc_tp_group tp = {.size = s->tp_size, .rank = s->tp_rank, .comm = s->tp_comm};
        return max ? mc_tp_all_reduce_max(&tp, x, 1) : mc_tp_all_reduce_sum_f32(&tp, x, 1);
    }
    if (!s->mp_comm)
        return mc_error(MC_ERR_UNSUPPORTED, "grad norm across --pipeline-model-parallel-size %d "
                        "needs the model-parallel communicator (%s)", s->pp_size,
                        s->mp_comm_setter ? s->mp_comm_setter : "mc_param_set.mp_comm");
    struct mc_tp_group mp = {.size = s->tp_size * s->pp_size, .comm = s->mp_comm}; /* fp32 */
    return max ? mc_tp_all_reduce_max(&mp, x, 1) : mc_tp_all_reduce_sum_f32(&mp, x, 1);
}

mc_status mc_opt_mp_sum(const struct mc_param_set *s, float *x) { return mp_reduce(s, x, false); }
mc_status mc_opt_mp_max(const struct mc_param_set *s, float *x) { return mp_reduce(s, x, true); }

mc_status mc_opt_grad_norm(const struct mc_param_set *const *sets, int n, float *norm)
{
    double sq = 0.0;
    for (int c = 0; c < n; c++) {
        const struct mc_param_set *s = sets[c];
        for (int64_t i = 0; i < s->n_params; i++) {
            const struct mc_param_view *v = &s->params[i].view;
            if (mc_opt_counted(s, v))
                sq += s->be->ops->sumsq(s->be, MC_DTYPE_F32, v->grad, v->numel);
        }
    }
    float total = (float)sq;
    mc_status st = mc_opt_mp_sum(sets[0], &total);
    if (st != MC_OK)
        return st;
    *norm = sqrtf(total);
    return MC_OK;
}

mc_status mc_opt_count_zeros(const struct mc_param_set *const *sets, int n, int64_t *zeros)
{
    int64_t z = 0;
    for (int c = 0; c < n; c++) {
        const struct mc_param_set *s = sets[c];
        for (int64_t i = 0; i < s->n_params; i++) {
            const struct mc_param_view *v = &s->params[i].view;
            if (mc_opt_counted(s, v))
                z += s->be->ops->count_zeros(s->be, MC_DTYPE_F32, v->grad, v->numel);
        }
    }
    float total = (float)z; /* Megatron reduces the count as a float tensor too */
    mc_status st = mc_opt_mp_sum(sets[0], &total);
    if (st != MC_OK)
        return st;
    *zeros = sets[0]->tp_size * sets[0]->pp_size == 1 ? z : (int64_t)total;
    return MC_OK;
}

void mc_opt_clip_grads(const struct mc_param_set *const *sets, int n, float clip_grad,
                       float norm)
{
    if (clip_grad <= 0.0f)
        return;
    float coeff = clip_grad / (norm + 1.0e-6f);
    if (!(coeff < 1.0f))
        return;
    for (int c = 0; c < n; c++)
        sets[c]->be->ops->scale(sets[c]->be, MC_DTYPE_F32, sets[c]->grad_block, coeff,
                                sets[c]->n_elements);
}
