/* What training_log, evaluate_and_print_results and train() of megatron/training/training.py
 * (core_v0.12.1) write to TensorBoard: the same tags, values and steps (the event writer itself
 * is tensorboard.c). */
#include "training/trainer.h"

#include <math.h>
#include <string.h>

#include "training/args_table.h"

/* `tag` at the iteration and `tag vs samples` at the consumed training samples. */
static mc_status tb_pair(struct trainer *t, const char *tag, double value, int64_t iteration)
{
    char vs[128];
    snprintf(vs, sizeof(vs), "%s vs samples", tag);
    mc_status st = mc_tb_add_scalar(t->log.tb, tag, value, iteration);
    return st ? st : mc_tb_add_scalar(t->log.tb, vs, value, t->d.consumed_train);
}

/* write_args_to_tensorboard: str() of every argument as text, at the start iteration. Megatron
 * writes vars(args); we write the arguments of the dump plus the attributes setup adds. */
mc_status mc_train_tb_write_args(struct trainer *t)
{
    char buf[4096];
    mc_status st = MC_OK;
    for (int id = 0; id < MC_A_FIRST_EXTENSION && !st; id++) {
        if (t->a->deleted[id])
            continue;
        size_t need = mc_py_str(NULL, 0, &t->a->v[id]) + 1; /* long --data-path lists */
        char *text = need <= sizeof(buf) ? buf : mc_alloc(need);
        if (!text)
            return MC_ERR_NOMEM;
        mc_py_str(text, need, &t->a->v[id]);
        st = mc_tb_add_text(t->log.tb, mc_arg_defs[id].dest, text, t->p.iteration);
        if (text != buf)
            mc_free(text);
    }
    snprintf(buf, sizeof(buf), "%lld", (long long)t->m.padded_vocab);
    if (!st)
        st = mc_tb_add_text(t->log.tb, "padded_vocab_size", buf, t->p.iteration);
    snprintf(buf, sizeof(buf), "%lld", (long long)t->p.iteration);
    if (!st)
        st = mc_tb_add_text(t->log.tb, "iteration", buf, t->p.iteration);
    return st ? st : mc_tb_flush(t->log.tb);
}

/* Timers.write(names, writer, iteration, normalizer) on every rank (a collective):
 * "<name>-time" = the maximum over the ranks in seconds per iteration (float32, as Megatron's
 * gathered tensor), for the timers that measured something; reset even without a writer. */
static mc_status tb_write_timers(struct trainer *t, int64_t iteration, double normalizer)
{
    float s[MC_TIMERS_MAX];
    int n = mc_training_log_timers_count;
    MC_ASSERT(n <= MC_TIMERS_MAX);
    for (int k = 0; k < n; k++) {
        struct mc_timer *tm = NULL;
        for (int j = 0; j < t->log.timers.n && !tm; j++)
            if (!strcmp(t->log.timers.t[j].name, mc_training_log_timers[k]))
                tm = &t->log.timers.t[j];
        s[k] = (float)mc_timer_elapsed(tm, true);
    }
    mc_status st = mc_comm_all_reduce(mc_train_world_comm, s, n, MC_DTYPE_F32, MC_COMM_MAX,
                                      "timers max-reduce");
    for (int k = 0; k < n && !st && t->log.tb; k++) {
        if (!(s[k] > 0.0f))
            continue;
        char tag[MC_TIMER_NAME_MAX + 8];
        snprintf(tag, sizeof(tag), "%s-time", mc_training_log_timers[k]);
        st = mc_tb_add_scalar(t->log.tb, tag, (double)s[k] / normalizer, iteration);
    }
    return st;
}

/* --log-memory-to-tensorboard: Megatron's four torch.cuda.memory_stats() tags, from this rank's
 * allocator (docs/memory.md): reserved = the resident set the process holds from the system,
 * allocated = live mc_alloc bytes, max allocated = their peak, count = live blocks. */
static mc_status tb_memory(struct trainer *t, int64_t iteration)
{
    struct mc_mem_stats m;
    mc_mem_get_stats(&m);
    mc_status st = mc_tb_add_scalar(t->log.tb, "mem-reserved-bytes", (double)mc_mem_rss_bytes(),
                                    iteration);
    if (!st)
        st = mc_tb_add_scalar(t->log.tb, "mem-allocated-bytes", (double)m.live_bytes, iteration);
    if (!st)
        st = mc_tb_add_scalar(t->log.tb, "mem-max-allocated-bytes", (double)m.peak_bytes,
                              iteration);
    if (!st)
        st = mc_tb_add_scalar(t->log.tb, "mem-allocated-count", (double)m.live_count, iteration);
    return st;
}

/* training_log's per-iteration part (every --tensorboard-log-interval): this iteration's
 * values, not the interval averages of the printed line. Every rank comes here, for the
 * collectives (timers, params norm); only the writer writes. */
mc_status mc_train_tb_training_log(struct trainer *t, int64_t iteration, float loss,
                                 const struct mc_opt_step_result *res)
{
    const struct mc_args *a = t->a;
    bool timers_to_tb = mc_args_bool(a, MC_A_log_timers_to_tensorboard);
    bool tb_run = !mc_args_is_none(a, MC_A_tensorboard_dir);
    if ((!tb_run && !timers_to_tb) || iteration % mc_args_int(a, MC_A_tensorboard_log_interval))
        return MC_OK;
    mc_status st = MC_OK;
    /* Megatron's total_iterations */
    double iters = (double)(t->log.acc.advanced + t->log.acc.skipped);
    if (timers_to_tb && (st = tb_write_timers(t, iteration, iters)))
        return st;
    double pnorm = 0;
    bool with_pnorm = tb_run && mc_args_bool(a, MC_A_log_params_norm);
    if (with_pnorm && (st = mc_train_params_norm(t, &pnorm)))
        return st;
    if (!t->log.tb)
        return MC_OK;
    double dlr; /* the decoupled group's lr: one scalar, no "vs samples" twin */
    if ((st = tb_pair(t, "learning-rate", (double)(float)t->o.sched.lr, iteration)) ||
        (mc_train_decoupled_lr(t, &dlr) &&
         (st = mc_tb_add_scalar(t->log.tb, "decoupled-learning-rate", (double)(float)dlr, iteration))) ||
        (st = tb_pair(t, "batch-size", (double)t->d.mb.running, iteration)) ||
        (st = tb_pair(t, "lm loss", (double)loss, iteration)))
        return st;
    if (mc_args_bool(a, MC_A_log_loss_scale_to_tensorboard) &&
        (st = tb_pair(t, "loss-scale", mc_train_loss_scale(t), iteration)))
        return st;
    if (mc_args_bool(a, MC_A_log_world_size_to_tensorboard) &&
        (st = tb_pair(t, "world-size", (double)mc_args_int(a, MC_A_world_size), iteration)))
        return st;
    /* a skipped step has no grad norm and no zero count (Megatron's None) */
    if (!res->skipped &&
        ((st = tb_pair(t, "grad-norm", (double)res->grad_norm, iteration)) ||
         (st = tb_pair(t, "num-zeros", (double)res->num_zeros, iteration))))
        return st;
    if (with_pnorm && (st = tb_pair(t, "params-norm", pnorm, iteration)))
        return st;
    return mc_args_bool(a, MC_A_log_memory_to_tensorboard) ? tb_memory(t, iteration) : MC_OK;
}

/* training_log at a --log-interval with --log-timers-to-tensorboard: seconds per iteration and
 * (with --log-throughput) TFLOP/s per GPU; then the queued events go to the file. */
mc_status mc_train_tb_interval_log(struct trainer *t, int64_t iteration, double interval_s)
{
    if (!t->log.tb)
        return MC_OK;
    const struct mc_args *a = t->a;
    mc_status st = MC_OK;
    if (mc_args_bool(a, MC_A_log_timers_to_tensorboard)) {
        int64_t iters = t->log.acc.advanced + t->log.acc.skipped;
        double per_iter = interval_s / (double)(iters ? iters : 1);
        st = mc_tb_add_scalar(t->log.tb, "iteration-time", per_iter, iteration);
        double flops = t->p.flops_per_sample * (double)t->d.gbs;
        if (!st && mc_args_bool(a, MC_A_log_throughput))
            st = mc_tb_add_scalar(t->log.tb, "throughput",
                                  mc_log_throughput(flops, per_iter, t->par.ps.world), iteration);
    }
    return st ? st : mc_tb_flush(t->log.tb);
}

/* evaluate_and_print_results: "<key> validation" (and its ppl with
 * --log-validation-ppl-to-tensorboard), each with its "vs samples" twin. */
mc_status mc_train_tb_validation(struct trainer *t, const char *key, double loss)
{
    if (!t->log.tb)
        return MC_OK;
    char tag[96];
    snprintf(tag, sizeof(tag), "%s validation", key);
    mc_status st = tb_pair(t, tag, (double)(float)loss, t->p.iteration);
    if (!st && mc_args_bool(t->a, MC_A_log_validation_ppl_to_tensorboard)) {
        snprintf(tag, sizeof(tag), "%s validation ppl", key);
        st = tb_pair(t, tag, exp(fmin(20.0, (double)(float)loss)), t->p.iteration);
    }
    return st ? st : mc_tb_flush(t->log.tb);
}
