/* train_step() of megatron/training/training.py (core_v0.12.1): zero the grads, run the
 * micro-batches through forward_backward_func (the same schedule callbacks whatever the
 * layout, forward_step.c), finalize the grads, step the optimizer and the scheduler. One path
 * for every layout: pp = 1 runs forward_backward_no_pipelining, as Megatron's does. */
#include "training/trainer.h"

/* optimizer.step(): with the distributed optimizer also the grad reduce-scatter (scaled by
 * 1/dp, then by 1/num_tokens with --calculate-per-token-loss) and the param all-gather. */
bool mc_train_decoupled_lr(const struct trainer *t, double *lr)
{
    if (mc_args_is_none(t->a, MC_A_decoupled_lr))
        return false;
    enum mc_arg_id min = mc_args_is_none(t->a, MC_A_decoupled_min_lr) ? MC_A_min_lr
                                                                       : MC_A_decoupled_min_lr;
    *lr = mc_opt_sched_get_lr(&t->o.sched, mc_args_float(t->a, MC_A_decoupled_lr),
                              mc_args_float(t->a, min));
    return true;
}

static mc_status optimizer_step(struct trainer *t, bool per_token, float num_tokens,
                                struct mc_opt_step_result *res)
{
    double dlr; /* the decoupled group's lr, from the same scheduler state as sched.lr */
    if (mc_train_decoupled_lr(t, &dlr))
        for (int v = 0; v < (t->o.dopt ? t->m.vp : 1); v++) {
            if (t->o.dopt)
                mc_distopt_set_decoupled_lr(t->o.dopts[v], (float)dlr);
            else
                mc_opt_set_decoupled_lr(t->o.opt, (float)dlr);
        }
    if (t->o.dopt)
        return mc_distopt_step_chunks(t->o.dopts, t->m.vp, mc_ddp_grad_scale(&t->par.ps, per_token),
                               per_token ? 1.0f / num_tokens : 1.0f, (float)t->o.sched.lr,
                               (float)t->o.sched.wd, res);
    return mc_opt_step(t->o.opt, (float)t->o.sched.lr, (float)t->o.sched.wd, res);
}

double mc_train_loss_scale(const struct trainer *t)
{
    if (t->o.dopt)
        return mc_grad_scaler_get_scale(mc_distopt_grad_scaler(t->o.dopts[0]));
    return mc_opt_loss_scale(t->o.opt);
}

/* The end of train_step on every path: the timed optimizer step, then, when the step was not
 * skipped for inf/nan grads (Megatron's update_successful), the scheduler advances by the
 * iteration's samples. */
static mc_status step_optimizer(struct trainer *t, bool per_token, float denom,
                                int64_t num_micro, struct mc_opt_step_result *res)
{
    struct mc_timer *opt = timer(t, "optimizer", 1);
    mc_timer_start(opt);
    mc_status st = optimizer_step(t, per_token, denom, res);
    mc_timer_stop(opt);
    if (st)
        return st;
    if (!res->skipped)
        mc_opt_sched_step(&t->o.sched, num_micro * t->d.mbs * t->par.dp);
    return MC_OK;
}

/* The lm loss report and token count live on the last stage; Megatron broadcasts the token
 * count over the pipeline for --calculate-per-token-loss. Here both go to every stage (a sum
 * with zeros from the other stages, so the value is exact) and every rank logs the same. */
static mc_status pp_share_loss(const struct trainer *t, float *numer, float *denom)
{
    float v[2] = {*numer, *denom};
    if (!mc_ps_is_pipeline_last_stage(&t->par.ps))
        v[0] = v[1] = 0;
    mc_status st = mc_comm_all_reduce(t->par.ps.group[MC_PS_PP].comm, v, 2, MC_DTYPE_F32,
                                      MC_COMM_SUM, "pipeline loss broadcast");
    *numer = v[0];
    *denom = v[1];
    return st;
}

/* train_step: forward/backward over the micro-batches, optimizer, scheduler. */
mc_status mc_train_step(struct trainer *t, int64_t iteration, float *lm_loss,
                        struct mc_opt_step_result *res)
{
    int64_t num_micro = t->d.mb.num_micro_batches;
    float numer = 0, denom = 0; /* Megatron sums the reports in float32 */
    bool per_token = mc_args_bool(t->a, MC_A_calculate_per_token_loss);
    for (int v = 0; v < t->m.vp; v++)
        mc_gpt_zero_grad(t->m.chunks[v]);
    mc_status st = mc_train_test_mode_check(t);
    if (st || (st = mc_train_dump_begin(t, iteration + 1))) /* the 1-based step */
        return st;
    struct mc_timer *fb = timer(t, "forward-backward", 1);
    mc_timer_start(fb);
    st = mc_train_forward_backward(t, MC_TRAIN_SPLIT_TRAIN, t->d.consumed_train,
                                             num_micro, iteration, false, &numer, &denom);
    /* pipelined runs fail after the schedule (no pipelining: after the first micro-batch) */
    if (!st && t->par.ps.pp > 1)
        st = mc_train_inject_test_failure(t, iteration);
    if (!st && t->par.ps.pp > 1)
        st = pp_share_loss(t, &numer, &denom);
    if (!st)
        st = mc_train_dump_grads(t, "grad.", 1.0f);
    if (!st)
        st = mc_train_finalize_grads(t, per_token, denom);
    if (!st)
        st = mc_train_dump_grads(t, "grad_reduced.", /* the step scales the shards */
                                 t->o.dopt && per_token ? 1.0f / denom : 1.0f);
    mc_timer_stop(fb);
    if (st || (st = step_optimizer(t, per_token, denom, num_micro, res)))
        return mc_train_dump_end(t, st, 0);
    *lm_loss = numer / denom;
    return mc_train_dump_end(t, MC_OK, *lm_loss);
}
