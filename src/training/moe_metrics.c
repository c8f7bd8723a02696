/* track_moe_metrics of megatron/core/transformer/moe/moe_utils.py as training_log calls it
 * (megatron/training/training.py, core_v0.12.1): the tracker's per-layer aux losses (the sum of
 * the micro-batches' values, each divided by its coefficient) are summed over the pipeline
 * group, scaled by 1 / num_microbatches and averaged over the MoE layers. Only where a
 * TensorBoard writer exists (the last rank with --tensorboard-dir) do they join the log line's
 * losses (total_loss_dict, after 'lm loss': the line prints them averaged over the iterations
 * of the interval) and the event file (name, and moe/<name>_layer_<i> with
 * --moe-per-layer-logging); without a writer Megatron prints none of them. */
#include "training/trainer.h"

#include <stdio.h>
#include <string.h>

#include "training/args_table.h"

/* The tracker's keys in Megatron's dict order: those the forwards inserted (apply_z_loss runs
 * before the load-balancing loss), then force_initialize's track_names. */
static int track_order(const struct trainer *t, const char **names, int *which)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(t->m.model);
    const char *lbt = mc_args_str(t->a, MC_A_moe_router_load_balancing_type);
    bool lb = !strcmp(lbt, "aux_loss") || !strcmp(lbt, "seq_aux_loss");
    bool z = !mc_args_is_none(t->a, MC_A_moe_z_loss_coeff);
    bool local = false; /* does this stage hold a MoE layer (its forwards fill the tracker)? */
    for (int v = 0; v < t->m.vp; v++) {
        int64_t L, off;
        mc_gpt_stage_layers(c, c->pipeline_model_parallel_rank, v, &L, &off);
        for (int64_t l = off; l < off + L; l++)
            local = local || mc_gpt_moe_layer(c, l);
    }
    /* forward inserts z_loss, then load_balancing_loss (when its coefficient is not 0) */
    bool z_first = local && z;
    int n = 0;
    if (z_first) {
        names[n] = "z_loss";
        which[n++] = 1;
    }
    if (lb) {
        names[n] = "load_balancing_loss";
        which[n++] = 0;
    }
    if (z && !z_first) {
        names[n] = "z_loss";
        which[n++] = 1;
    }
    return n;
}

mc_status mc_train_moe_metrics(struct trainer *t, int64_t iteration)
{
    if (mc_args_is_none(t->a, MC_A_num_experts))
        return MC_OK;
    const struct mc_gpt_config *c = mc_gpt_model_config(t->m.model);
    int64_t L = c->num_layers, n_moe = 0;
    for (int64_t l = 0; l < L; l++)
        n_moe += mc_gpt_moe_layer(c, l);
    const char *names[2];
    int which[2], n = track_order(t, names, which);
    float *v = mc_calloc((size_t)(2 * L), sizeof(float));
    if (!v)
        return mc_error(MC_ERR_NOMEM, "MoE metrics: no host memory for %lld layers", (long long)L);
    mc_status st = MC_OK;
    for (int k = 0; k < n; k++)
        for (int ch = 0; ch < t->m.vp; ch++) {
            const float *tr = mc_gpt_moe_tracker(t->m.chunks[ch], which[k]);
            for (int64_t l = 0; tr && l < L; l++)
                v[k * L + l] += tr[l];
        }
    if (n && t->par.ps.pp > 1)
        st = mc_comm_all_reduce(t->par.ps.group[MC_PS_PP].comm, v, n * L, MC_DTYPE_F32,
                                MC_COMM_SUM, "MoE aux losses over the pipeline");
    float scale = (float)(1.0 / (double)t->d.mb.num_micro_batches);
    for (int k = 0; k < n && !st && t->log.tb; k++) {
        float sum = 0.0f;
        for (int64_t l = 0; l < L; l++) {
            v[k * L + l] *= scale;
            sum += v[k * L + l];
        }
        float avg = sum / (float)n_moe;
        if ((st = mc_log_accum_add_extra(&t->log.acc, names[k], avg)) ||
            (st = mc_tb_add_scalar(t->log.tb, names[k], (double)avg, iteration)))
            break;
        for (int64_t l = 0; l < L && !st && mc_args_bool(t->a, MC_A_moe_per_layer_logging); l++) {
            char tag[96];
            snprintf(tag, sizeof(tag), "moe/%s_layer_%lld", names[k], (long long)l);
            st = mc_tb_add_scalar(t->log.tb, tag, (double)v[k * L + l], iteration);
        }
    }
    for (int ch = 0; ch < t->m.vp; ch++)
        mc_gpt_moe_tracker_clear(t->m.chunks[ch]);
    mc_free(v);
    return st;
}
