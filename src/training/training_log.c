/* training_log()'s printed line and Timers.log of megatron/training/training.py
 * (core_v0.12.1): the bytes are Megatron's so log parsers keep working (spec
 * megatron-training-cli.md sections 5-6). */
#include "training/trainer.h"

#include "models/gpt/gpt_model.h"
#include "training/recompute_budget.h"

#include "training/theoretical_memory.h"

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
    /* printed by the last rank, always a first or last pipeline stage holding the group */
    l.has_decoupled_lr = mc_train_decoupled_lr(t, &l.decoupled_lr);
    l.batch_size = t->d.mb.running;
    mc_log_accum_fill(&t->log.acc, names, &l);
    l.loss_scale = mc_train_loss_scale(t);
    /* a skipped last iteration (inf/nan grads) has neither: Megatron's None, None */
    l.has_grad_norm = !res->skipped;
    l.grad_norm = res->grad_norm;
    l.has_num_zeros = !res->skipped;
    l.num_zeros = (double)res->num_zeros;
    /* counted with or without --log-num-zeros-in-grad, in every precision: core_v0.12.1's
     * get_megatron_optimizer wraps even a single optimizer in a ChainedOptimizer, whose step
     * runs count_zeros_fp32 unconditionally (the flag only gates MixedPrecisionOptimizer.step,
     * which the chain bypasses) */
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
        /* Megatron reports the CUDA caching allocator; we report megatron.c's counted
         * allocations (allocated) and the resident set the process holds (reserved):
         * docs/memory.md */
        double mb = 1024.0 * 1024.0;
        char name[64];
        struct mc_mem_stats m;
        mc_mem_get_stats(&m);
        snprintf(name, sizeof(name), "(after %lld iterations)", (long long)iteration);
        mc_log_format_memory(buf, sizeof(buf), t->par.ps.rank, name, (double)m.live_bytes / mb,
                             (double)m.peak_bytes / mb, (double)mc_mem_rss_bytes() / mb,
                             (double)mc_mem_peak_rss_bytes() / mb);
        if (t->par.dp_rank == 0) /* Megatron's report_memory prints on data-parallel rank 0 */
            printf("%s\n", buf);
        *report_memory = false;
    }
    fflush(stdout);
    return MC_OK;
}

/* --log-memory-estimate (megatron.c): the engine's per-category estimate from the arguments
 * beside the allocator's measured numbers, then Megatron's report_theoretical_memory totals
 * (the --dry-run lines). N is Megatron's parameter count of the most loaded shard; bytes per
 * parameter are what the engine allocates (docs/memory.md): fp32 master weights (+ the 16-bit
 * compute copy), fp32 grads (+ the distributed optimizer's grad shard), Adam's two moments or
 * SGD's momentum (sharded by the distributed optimizer), and its full-size gather buffer; with
 * 16-bit params the model's dt weight-grad temporaries, as the model allocated them. */
static void estimate_by_category(const struct trainer *t, const struct mc_memory_estimate *e,
                                 double est[MC_MEM_COUNT], bool known[MC_MEM_COUNT])
{
    const struct mc_args *a = t->a;
    double n = e->params_most_loaded_shard;
    bool half = mc_args_bool(a, MC_A_bf16) || mc_args_bool(a, MC_A_fp16);
    bool distopt = mc_args_bool(a, MC_A_use_distributed_optimizer);
    const char *opt = mc_args_str(a, MC_A_optimizer);
    double dp = (double)(t->par.dp > 0 ? t->par.dp : 1), shard = distopt ? dp : 1.0;
    for (int c = 0; c < MC_MEM_COUNT; c++)
        known[c] = false;
    est[MC_MEM_PARAMS] = n * (4.0 + (half ? 2.0 : 0.0));
    est[MC_MEM_GRADS] = n * 4.0 + (distopt ? n * 4.0 / dp : 0.0);
    for (int c = 0; c < t->m.vp; c++) /* 16 bits: each chunk's dt weight-grad temporaries */
        est[MC_MEM_GRADS] += (double)mc_gpt_wgrad_temp_bytes(t->m.chunks[c]);
    est[MC_MEM_OPTIMIZER] = n * (opt && !strcmp(opt, "sgd") ? 4.0 : 8.0) / shard;
    known[MC_MEM_PARAMS] = known[MC_MEM_GRADS] = known[MC_MEM_OPTIMIZER] = true;
    if (mc_args_int(a, MC_A_pipeline_model_parallel_size) == 1) {
        est[MC_MEM_COMM] = distopt ? n * 4.0 : 0.0; /* p2p buffers need pp > 1 */
        known[MC_MEM_COMM] = true;
    }
    if (e->has_activation) { /* Megatron's formula: sequence parallel + selective recompute */
        est[MC_MEM_ACTIVATIONS] = e->activation_bytes;
        known[MC_MEM_ACTIVATIONS] = true;
    } else { /* the model's own count (what --recompute-auto-budget-gb fits to) */
        known[MC_MEM_ACTIVATIONS] =
            mc_activation_estimate(a, mc_tok_vocab_size(t->m.tok), t->m.padded_vocab, NULL,
                                   mc_ps_rank(&t->par.ps, MC_PS_PP),
                                   &est[MC_MEM_ACTIVATIONS]) == MC_OK;
        if (!known[MC_MEM_ACTIVATIONS])
            mc_clear_error();
    }
}

static void print_mb(char *buf, size_t n, bool known, double bytes)
{
    if (known)
        snprintf(buf, n, "%12.2f", bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, n, "%12s", "n/a");
}

mc_status mc_train_log_memory_estimate(struct trainer *t)
{
    if (t->par.dp_rank != 0) /* as report_memory: one rank per model replica */
        return MC_OK;
    struct mc_memory_estimate e;
    /* a finished run still reports what it measured when the formula does not apply */
    bool have_e = mc_memory_estimate(t->a, t->m.padded_vocab, t->d.mb.num_micro_batches, &e) ==
                  MC_OK;
    double est[MC_MEM_COUNT] = {0}, total = 0;
    bool known[MC_MEM_COUNT] = {false}, all_known = true;
    if (have_e)
        estimate_by_category(t, &e, est, known);
    struct mc_mem_stats m;
    mc_mem_get_stats(&m);
    int r = t->par.ps.rank;
    const double mb = 1024.0 * 1024.0;
    printf("[Rank %d] megatron.c memory (MB): estimate beside the allocator's measured bytes\n"
           "[Rank %d]   %-22s %12s %12s %12s %12s\n", r, r, "category", "estimate", "peak",
           "at peak", "now");
    static const enum mc_mem_category order[MC_MEM_COUNT] = {
        MC_MEM_PARAMS, MC_MEM_GRADS, MC_MEM_OPTIMIZER, MC_MEM_ACTIVATIONS, MC_MEM_COMM,
        MC_MEM_WORKSPACE, MC_MEM_OTHER};
    char col[32];
    for (int k = 0; k < MC_MEM_COUNT; k++) {
        enum mc_mem_category c = order[k];
        print_mb(col, sizeof(col), known[c], est[c]);
        total += known[c] ? est[c] : 0;
        all_known &= known[c] || c == MC_MEM_WORKSPACE || c == MC_MEM_OTHER;
        printf("[Rank %d]   %-22s %s %12.2f %12.2f %12.2f\n", r, mc_mem_category_name(c), col,
               (double)m.peak[c] / mb, (double)m.at_peak[c] / mb, (double)m.current[c] / mb);
    }
    print_mb(col, sizeof(col), all_known, total);
    printf("[Rank %d]   %-22s %s %12.2f %12s %12.2f\n", r, "total allocated", col,
           (double)m.peak_bytes / mb, "", (double)m.live_bytes / mb);
    printf("[Rank %d]   %-22s %12s %12.2f %12s %12.2f\n", r, "process resident set", "",
           (double)mc_mem_peak_rss_bytes() / mb, "", (double)mc_mem_rss_bytes() / mb);
    if (!have_e) {
        printf("[Rank %d]   no estimate: %s\n", r, mc_last_error());
        fflush(stdout);
        return MC_OK;
    }
    printf("[Rank %d]   report_theoretical_memory: weight and optimizer=%.2f MB", r,
           e.weight_and_optimizer_bytes / mb);
    if (e.has_activation)
        printf(", activation=%.2f MB, total=%.2f MB", e.activation_bytes / mb,
               (e.weight_and_optimizer_bytes + e.activation_bytes) / mb);
    printf("\n");
    fflush(stdout);
    return MC_OK;
}
