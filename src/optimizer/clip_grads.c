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

static bool counted(const struct mc_gpt_model *m, const struct mc_param_view *v)
{
    return !v->shared && (v->tensor_parallel || m->tp.rank == 0);
}

/* Sum over the model-parallel group: tp x pp ranks (the tp group when pp == 1). */
mc_status mc_opt_mp_sum(const struct mc_gpt_model *m, float *x)
{
    if (m->cfg.pipeline_model_parallel_size == 1)
        return mc_tp_all_reduce_sum(&m->tp, x, 1);
    if (!m->mp_comm)
        return mc_error(MC_ERR_UNSUPPORTED, "grad norm across --pipeline-model-parallel-size %d "
                        "needs the model-parallel communicator (mc_gpt_set_mp_comm)",
                        m->cfg.pipeline_model_parallel_size);
    struct mc_tp_group mp = {m->tp.size * m->cfg.pipeline_model_parallel_size, 0, m->mp_comm,
                              false};
    return mc_tp_all_reduce_sum(&mp, x, 1);
}

mc_status mc_opt_grad_norm(struct mc_gpt_model *const *models, int n, float *norm)
{
    double sq = 0.0;
    for (int c = 0; c < n; c++) {
        const struct mc_gpt_model *m = models[c];
        for (int64_t i = 0; i < m->n_params; i++) {
            const struct mc_param_view *v = &m->params[i].view;
            if (counted(m, v))
                sq += m->be->ops->sumsq(m->be, MC_DTYPE_F32, v->grad, v->numel);
        }
    }
    float total = (float)sq;
    mc_status st = mc_opt_mp_sum(models[0], &total);
    if (st != MC_OK)
        return st;
    *norm = sqrtf(total);
    return MC_OK;
}

mc_status mc_opt_count_zeros(struct mc_gpt_model *const *models, int n, int64_t *zeros)
{
    int64_t z = 0;
    for (int c = 0; c < n; c++) {
        const struct mc_gpt_model *m = models[c];
        for (int64_t i = 0; i < m->n_params; i++) {
            const struct mc_param_view *v = &m->params[i].view;
            if (counted(m, v))
                z += m->be->ops->count_zeros(m->be, MC_DTYPE_F32, v->grad, v->numel);
        }
    }
    float total = (float)z; /* Megatron reduces the count as a float tensor too */
    mc_status st = mc_opt_mp_sum(models[0], &total);
    if (st != MC_OK)
        return st;
    const struct mc_gpt_config *c = &models[0]->cfg;
    *zeros = c->tensor_model_parallel_size * c->pipeline_model_parallel_size == 1 ? z
                                                                                  : (int64_t)total;
    return MC_OK;
}

void mc_opt_clip_grads(struct mc_gpt_model *const *models, int n, float clip_grad, float norm)
{
    if (clip_grad <= 0.0f)
        return;
    float coeff = clip_grad / (norm + 1.0e-6f);
    if (!(coeff < 1.0f))
        return;
    for (int c = 0; c < n; c++)
        models[c]->be->ops->scale(models[c]->be, MC_DTYPE_F32, models[c]->grad_block, coeff,
                                  models[c]->n_elements);
}
