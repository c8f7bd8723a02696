/* training_log()'s printed line and Timers.log of megatron/training/training.py
 * (core_v0.12.1): the bytes are Megatron's so log parsers keep working (spec
 * megatron-training-cli.md sections 5-6). */
#include "training/trainer.h"

#include <stdlib.h>
#include <string.h>

/* The all-gather of Timers._get_elapsed_time_all_ranks: each rank fills its row of a zeroed
 * [world, n] float32 table, and a sum over the world assembles it. */
static mc_status gather_timers(void *ctx, const float *local, int n, float *all, int max_world,
                               int *world)
{
    const struct trainer *t = ctx;
    int w = t->par.ps.world > 0 ? t->par.ps.world : 1, r = t->par.ps.world > 0 ? t->par.ps.rank : 0;
    if (w > max_world)
        return mc_error(MC_ERR_UNSUPPORTED, "timers: %d ranks, at most %d are reported", w,
                        max_world);
    memset(all, 0, sizeof(float) * (size_t)n * (size_t)w);
    memcpy(all + (size_t)r * (size_t)n, local, sizeof(float) * (size_t)n);
    *world = w;
    return mc_comm_all_reduce(mc_train_world_comm, all, (int64_t)n * w, MC_DTYPE_F32, MC_COMM_SUM,
                              "timers all-gather");
}

/* timers.log(names, normalizer) on every rank (a collective): the last rank prints the block
 * (nothing when no timer measured anything); the timers read are reset. */
mc_status mc_train_log_timers(struct trainer *t, const char *const *names, int n, double normalizer)
{
    char buf[8192];
    size_t len = 0;
    mc_status st = mc_timers_log_string(&t->log.timers, names, n, normalizer, true,
                                        gather_timers, t, buf, sizeof(buf), &len);
    if (!st && len > 0)
        mc_print_rank_last("%s\n", buf);
    return st;
}

mc_status mc_train_print_training_line(struct trainer *t, int64_t iteration, double interval_s,
                                     const struct mc_opt_step_result *res, bool *report_memory)
{
    const struct mc_args *a = t->a;
    struct mc_log_train_line l = {0};
    const char *names[MC_LOG_MAX_LOSSES];
    l.iteration = iteration;
    l.train_iters = mc_args_int(a, MC_A_train_iters);
    l.consumed_samples = t->d.consumed_train;
    int64_t iters = t->log.acc.advanced + t->log.acc.skipped;
    l.elapsed_per_iter_s = interval_s / (double)(iters ? iters : 1);
    l.log_throughput = mc_args_bool(a, MC_A_log_throughput);
    l.throughput = mc_log_throughput(t->p.flops_per_sample * (double)t->d.gbs, l.elapsed_per_iter_s,
                                     t->par.ps.world);
    l.learning_rate = t->o.sched.lr;
    l.batch_size = t->d.mb.running;
    mc_log_accum_fill(&t->log.acc, names, &l);
    l.loss_scale = mc_train_loss_scale(t);
    /* a skipped last iteration (inf/nan grads) has neither: Megatron's None, None */
    l.has_grad_norm = !res->skipped;
    l.grad_norm = res->grad_norm;
    l.has_num_zeros = !res->skipped;
    l.num_zeros = (double)res->num_zeros;
    /* --bf16/--fp16 (MixedPrecisionOptimizer) without --log-num-zeros-in-grad: Megatron's step
     * returns the int 0 and the line shows "num zeros: 0"; fp32 keeps the count it always
     * printed (COMPATIBILITY.md) */
    if (mc_train_zero_count_is_int(t)) {
        l.num_zeros_is_int = true;
        l.num_zeros = 0;
    }
    l.has_params_norm = mc_args_bool(a, MC_A_log_params_norm);
    mc_status st = l.has_params_norm ? mc_train_params_norm(t, &l.params_norm) : MC_OK;
    if (st)
        return st;
    char buf[2048];
    mc_log_format_train_line(buf, sizeof(buf), &l);
    mc_print_rank_last("%s\n", buf);
    if (getenv("MC_TEST_LOG_EXACT")) /* full-precision values for the parallel tests */
        mc_print_rank_last("[exact] iteration %lld | lm loss: %.9e | grad norm: %.9e | "
                        "params norm: %.9e\n", (long long)iteration,
                        l.n_losses ? (double)l.loss_sums[0] /
                            (double)(l.advanced_iters > 0 ? l.advanced_iters : 1) : 0.0,
                        (double)res->grad_norm, l.has_params_norm ? l.params_norm : 0.0);
    mc_log_accum_reset(&t->log.acc);
    if (*report_memory) {
        /* Megatron reports the CUDA allocator; we report megatron.c's counted allocations. */
        double mb = 1024.0 * 1024.0;
        char name[64];
        snprintf(name, sizeof(name), "(after %lld iterations)", (long long)iteration);
        mc_log_format_memory(buf, sizeof(buf), t->par.ps.rank, name,
                             (double)mc_alloc_live_bytes() / mb,
                             (double)mc_alloc_peak_bytes() / mb, (double)mc_alloc_live_bytes() / mb,
                             (double)mc_alloc_peak_bytes() / mb);
        if (t->par.dp_rank == 0) /* Megatron's report_memory prints on data-parallel rank 0 */
            printf("%s\n", buf);
        *report_memory = false;
    }
    fflush(stdout);
    return MC_OK;
}
