/* pretrain() and train() of megatron/training/training.py with the model, get_batch and
 * loss_func of pretrain_gpt.py (Megatron-LM core_v0.12.1): setup, the iteration loop,
 * checkpoint_and_decide_exit and the checkpoint calls, the final evaluations. The train step,
 * the schedule callbacks, evaluation and logging live in the files trainer.h lists. The
 * messages and the training line are Megatron's, so log parsers keep working (spec:
 * megatron-training-cli.md sections 4-6 and 10). */
#include "training/training.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "megatron/checkpoint.h"
#include "training/checkpointing.h"
#include "training/recompute_budget.h"
#include "training/flops.h"
#include "training/schedule_args.h"
#include "training/trainer.h"

static volatile sig_atomic_t got_sigterm;
static void on_sigterm(int sig) { (void)sig; got_sigterm = 1; }

double mc_time_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static mc_status ckpt_barrier(void *ctx)
{
    (void)ctx;
    int64_t x = 0;
    return mc_comm_all_reduce(mc_train_world_comm, &x, 1, MC_DTYPE_I64, MC_COMM_MAX,
                              "checkpoint barrier");
}

/* Every rank's outcome of a checkpoint step: ok on all ranks or on none. */
static mc_status ckpt_all_ok(void *ctx, bool *ok)
{
    (void)ctx;
    int64_t failed = !*ok;
    mc_status st = mc_comm_all_reduce(mc_train_world_comm, &failed, 1, MC_DTYPE_I64, MC_COMM_MAX,
                                      "checkpoint outcome");
    *ok = !failed;
    return st;
}

/* torch_dist saves: every rank's bytes onto every rank (the length first, then the bytes in
 * blocks of the longest rank's length). */
static mc_status ckpt_gather(void *ctx, const void *mine, int64_t n, uint8_t **all, int64_t **offs,
                             int *world)
{
    (void)ctx;
    int size, rank;
    int64_t max = n;
    mc_status st = mc_comm_size_rank(mc_train_world_comm, &size, &rank);
    st = st ? st : mc_comm_all_reduce(mc_train_world_comm, &max, 1, MC_DTYPE_I64, MC_COMM_MAX,
                                      "checkpoint metadata size");
    if (st)
        return st;
    int64_t block = 8 + max;
    uint8_t *local = mc_calloc(1, (size_t)block), *full = mc_alloc((size_t)(block * size));
    int64_t *o = mc_alloc((size_t)(size + 1) * sizeof(int64_t));
    if (!local || !full || !o)
        st = MC_ERR_NOMEM;
    if (!st) {
        memcpy(local, &n, 8);
        memcpy(local + 8, mine, (size_t)n);
        st = mc_comm_all_gather(mc_train_world_comm, full, local, block, MC_DTYPE_U8,
                                "checkpoint metadata");
    }
    /* packed in place: rank r's bytes after rank r-1's */
    int64_t at = 0;
    for (int r = 0; !st && r < size; r++) {
        int64_t len;
        memcpy(&len, full + r * block, 8);
        memmove(full + at, full + r * block + 8, (size_t)len);
        o[r] = at;
        at += len;
        o[r + 1] = at;
    }
    mc_free(local);
    if (st) {
        mc_free(full);
        mc_free(o);
        return st;
    }
    *all = full;
    *offs = o;
    *world = size;
    return MC_OK;
}

/* One file per (tensor, pipeline) rank, written by data-parallel rank 0 (distrib_optim.pt
 * gathered over the data-parallel group first); global rank 0 writes the tracker after every
 * file is on disk. */
static void ckpt_layout(const struct trainer *t, struct mc_ckpt_state *s)
{
    s->tp_rank = mc_ps_rank(&t->par.ps, MC_PS_TP);
    s->tp_size = mc_ps_size(&t->par.ps, MC_PS_TP);
    s->pp_rank = mc_ps_rank(&t->par.ps, MC_PS_PP);
    s->pp_size = mc_ps_size(&t->par.ps, MC_PS_PP);
    s->writer = t->par.dp_rank == 0;
    s->dp_rank = t->par.dp_rank;
    s->dp_size = mc_ps_size(&t->par.ps, MC_PS_DP);
    s->write_tracker = t->par.ps.rank == 0;
    s->barrier = t->par.ps.world > 1 ? ckpt_barrier : NULL;
    s->all_ok = t->par.ps.world > 1 ? ckpt_all_ok : NULL;
    s->gather = t->par.ps.world > 1 ? ckpt_gather : NULL;
    s->rank = t->par.ps.rank;
    s->distopt = t->o.dopt;
    s->n_chunks = t->m.vp; /* interleaved: model0, model1, ... and one distopt buffer per chunk */
    s->chunks = t->m.chunks;
    s->distopts = t->o.dopt ? t->o.dopts : NULL;
}

/* setup_model_and_optimizer's load_checkpoint: resumes the iteration, the consumed samples,
 * the model, the optimizer and the scheduler from --load. */
static mc_status load_checkpoint(struct trainer *t)
{
    if (mc_args_is_none(t->a, MC_A_load))
        return MC_OK;
    struct mc_ckpt_state s = {.model = t->m.model, .opt = t->o.opt, .sched = &t->o.sched};
    ckpt_layout(t, &s);
    bool loaded;
    /* setup_model_and_optimizer times the load and logs it, found or not */
    struct mc_timer *tm = timer(t, "load-checkpoint", 0);
    mc_timer_start(tm);
    mc_status st = mc_train_ckpt_load(t->a, &s, mc_train_out_first, &loaded);
    if (st)
        return st;
    mc_timer_stop(tm);
    static const char *const names[] = {"load-checkpoint"};
    if ((st = mc_train_log_timers(t, names, 1, 1.0)) || !loaded)
        return st;
    t->p.start_iteration = s.iteration;
    t->p.flops_so_far = t->p.start_flops = s.num_floating_point_operations_so_far;
    t->d.consumed_train = mc_args_int(t->a, MC_A_consumed_train_samples);
    t->d.consumed_valid = mc_args_int(t->a, MC_A_consumed_valid_samples);
    /* build_train_valid_test_data_iterators: checkpoints without sample counters */
    const struct mc_args *a = t->a;
    if (t->p.start_iteration > 0 && t->d.consumed_train == 0 &&
        mc_args_is_none(a, MC_A_train_samples))
        t->d.consumed_train = t->p.start_iteration * t->d.gbs;
    if (t->p.start_iteration > 0 && t->d.consumed_valid == 0 &&
        !mc_args_is_none(a, MC_A_eval_interval) && mc_args_int(a, MC_A_eval_interval) > 0)
        t->d.consumed_valid = t->p.start_iteration / mc_args_int(a, MC_A_eval_interval) *
                            mc_args_int(a, MC_A_eval_iters) * t->d.gbs;
    return MC_OK;
}

/* save_checkpoint_and_time: the save, its timer line, and the time kept out of the interval. */
static mc_status save_checkpoint(struct trainer *t, int64_t iteration)
{
    /* checkpoint time is kept out of the iteration time, as Megatron does */
    struct mc_timer *interval = timer(t, "interval-time", 0), *tm = timer(t, "save-checkpoint", 0);
    bool timing = interval && interval->started;
    if (timing)
        mc_timer_stop(interval);
    mc_timer_start(tm);
    /* Megatron disables the forward pre-hook (forcing the param all-gather) before saving */
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++)
        st = mc_ddp_finish_param_sync(t->o.ddps[v]);
    if (st)
        return st;
    mc_args_set_int(t->a, MC_A_consumed_train_samples, t->d.consumed_train);
    mc_args_set_int(t->a, MC_A_consumed_valid_samples, t->d.consumed_valid);
    struct mc_ckpt_state s = {.model = t->m.model, .opt = t->o.opt, .sched = &t->o.sched,
                              .iteration = iteration,
                              .num_floating_point_operations_so_far = t->p.flops_so_far,
                              .args_iteration = t->p.start_iteration,
                              .args_flops = t->p.start_flops,
                              .do_train = mc_train_data_has(t->d.data, MC_TRAIN_SPLIT_TRAIN) &&
                                          mc_args_int(t->a, MC_A_train_iters) > 0,
                              .do_valid = mc_train_data_has(t->d.data, MC_TRAIN_SPLIT_VALID) &&
                                          mc_args_int(t->a, MC_A_eval_iters) > 0,
                              .do_test = mc_train_data_has(t->d.data, MC_TRAIN_SPLIT_TEST) &&
                                         mc_args_int(t->a, MC_A_eval_iters) > 0};
    ckpt_layout(t, &s);
    st = mc_train_ckpt_save(t->a, &s, mc_train_out_first);
    if (st)
        return st;
    mc_timer_stop(tm);
    static const char *const names[] = {"save-checkpoint"};
    if ((st = mc_train_log_timers(t, names, 1, 1.0)))
        return st;
    fflush(stdout);
    if (timing)
        mc_timer_start(interval);
    return MC_OK;
}

/* setup_model_and_optimizer's --ckpt-convert-format: the state just loaded is saved at the
 * loaded iteration into CKPT_CONVERT_SAVE/FORMAT in the new format (the saved args say so:
 * ckpt_format, save and use_dist_ckpt are the new ones), then every rank stops. */
static mc_status convert_checkpoint(struct trainer *t)
{
    struct mc_args *a = t->a;
    char from[64], dir[4096];
    snprintf(from, sizeof(from), "%s", mc_args_str(a, MC_A_ckpt_format));
    const char *to = mc_args_str(a, MC_A_ckpt_convert_format);
    int n = snprintf(dir, sizeof(dir), "%s/%s", mc_args_str(a, MC_A_ckpt_convert_save), to);
    if (n < 0 || (size_t)n >= sizeof(dir))
        return mc_error(MC_ERR_CONFIG, "--ckpt-convert-save %s: the path is too long",
                        mc_args_str(a, MC_A_ckpt_convert_save));
    mc_status st = mc_args_set_str(a, MC_A_ckpt_format, to);
    st = st ? st : mc_args_set_str(a, MC_A_save, dir);
    if (st)
        return st;
    mc_args_set_bool(a, MC_A_use_dist_ckpt, strcmp(to, "torch") != 0);
    /* the consumed samples stay as loaded (the data iterators' fallbacks come later) */
    struct mc_ckpt_state s = {.model = t->m.model, .opt = t->o.opt, .sched = &t->o.sched,
                              .iteration = t->p.start_iteration,
                              .num_floating_point_operations_so_far = t->p.flops_so_far,
                              .args_iteration = t->p.start_iteration,
                              .args_flops = t->p.start_flops,
                              .in_setup = true};
    ckpt_layout(t, &s);
    if ((st = mc_train_ckpt_save(a, &s, mc_train_out_first)) ||
        (st = mc_train_maybe_finalize_async_save(a, true)))
        return st;
    mc_print_rank_0("> converted checkpoint: %s -> %s.\n", from, to);
    fflush(stdout);
    return t->par.ps.world > 1 ? ckpt_barrier(NULL) : MC_OK;
}

static int64_t save_interval(const struct mc_args *a)
{
    return mc_args_is_none(a, MC_A_save_interval) ? 0 : mc_args_int(a, MC_A_save_interval);
}

/* checkpoint_and_decide_exit: saves at --save-interval, and before an exit (SIGTERM,
 * --exit-duration-in-mins, --exit-interval) unless this iteration was just saved. */
static mc_status decide_exit(struct trainer *t, int64_t iteration, bool *exit)
{
    char what[128];
    bool save = !mc_args_is_none(t->a, MC_A_save), saved = false;
    mc_status st;
    *exit = true;
    if (mc_args_bool(t->a, MC_A_exit_signal_handler) && mc_train_on_any_rank(got_sigterm)) {
        if (save && (st = save_checkpoint(t, iteration)))
            return st;
        mc_print_datetime("exiting program after receiving SIGTERM.");
        return MC_OK;
    }
    int64_t every_save = save_interval(t->a);
    if (save && every_save && iteration % every_save == 0) {
        if ((st = save_checkpoint(t, iteration)))
            return st;
        saved = true;
    }
    double minutes;
    if (mc_train_time_limit_reached(t, &minutes)) {
        if (save && !saved && (st = save_checkpoint(t, iteration)))
            return st;
        char rep[40];
        mc_py_float_repr(rep, sizeof(rep), minutes);
        snprintf(what, sizeof(what), "exiting program after %s minutes", rep);
        mc_print_datetime(what);
        return MC_OK;
    }
    int64_t every = mc_args_is_none(t->a, MC_A_exit_interval)
                        ? 0 : mc_args_int(t->a, MC_A_exit_interval);
    if (every && iteration % every == 0) {
        if (save && !saved && (st = save_checkpoint(t, iteration)))
            return st;
        snprintf(what, sizeof(what), "exiting program at iteration %lld", (long long)iteration);
        mc_print_datetime(what);
        return MC_OK;
    }
    *exit = false;
    return MC_OK;
}

/* train(): returns the last iteration; *exited when an exit condition ended the run. */
static mc_status train(struct trainer *t, int64_t *iteration, bool *exited)
{
    const struct mc_args *a = t->a;
    int64_t train_iters = mc_args_int(a, MC_A_train_iters);
    int64_t log_interval = mc_args_int(a, MC_A_log_interval);
    int64_t eval_interval = mc_args_is_none(a, MC_A_eval_interval)
                                ? 0 : mc_args_int(a, MC_A_eval_interval);
    bool do_valid = mc_train_data_has(t->d.data, MC_TRAIN_SPLIT_VALID) &&
                    mc_args_int(a, MC_A_eval_iters) > 0;
    bool report_memory = true;
    static const char *const lm[] = {"lm loss"};
    mc_log_accum_init(&t->log.acc);
    t->p.iteration = *iteration;
    mc_status tb_st = t->log.tb ? mc_train_tb_write_args(t) : MC_OK;
    if (tb_st)
        return tb_st;
    struct mc_timer *interval = timer(t, "interval-time", 0);
    mc_timer_start(interval);
    mc_print_datetime("before the start of training step");
    int hash_id = MC_A_check_weight_hash_across_dp_replicas_interval;
    bool hash_check = !mc_args_is_none(a, hash_id);
    int64_t hash_interval = hash_check ? mc_args_int(a, hash_id) : 0;
    if (hash_check) {
        mc_status st = mc_train_check_weight_hashes(t, *iteration);
        if (st)
            return st;
    }
    *exited = false;
    while (*iteration < train_iters) {
        /* the saves whose writers are done on every rank are finalized (one collective) */
        mc_status st = mc_train_maybe_finalize_async_save(a, false);
        st = st ? st : mc_microbatches_update(&t->d.mb, t->d.consumed_train, true);
        if (st)
            return st;
        float loss;
        struct mc_opt_step_result res;
        if ((st = mc_train_step(t, *iteration, &loss, &res)))
            return st;
        t->p.iteration = ++*iteration;
        mc_train_perturb_for_test(t, *iteration);
        t->d.consumed_train += t->d.mb.num_micro_batches * t->d.mbs * t->par.dp;
        t->p.flops_so_far += t->p.flops_per_sample *
                             (double)(t->d.mb.num_micro_batches * t->d.mbs * t->par.dp);
        if ((st = mc_log_accum_add(&t->log.acc, 1, lm, &loss, res.skipped)))
            return st;
        if ((st = mc_train_tb_training_log(t, *iteration, loss, &res)))
            return st;
        if ((st = mc_train_moe_metrics(t, *iteration)))
            return st;
        if (*iteration % log_interval == 0) {
            double interval_s = mc_timer_elapsed(interval, true);
            if ((st = mc_train_tb_interval_log(t, *iteration, interval_s)) ||
                (st = mc_train_print_training_line(t, *iteration, interval_s, &res,
                                                   &report_memory)) ||
                (st = mc_train_log_timers(t, mc_training_log_timers, mc_training_log_timers_count,
                                 (double)log_interval)))
                return st;
        }
        if (eval_interval && *iteration % eval_interval == 0 && do_valid) {
            struct mc_timer *eval_time = timer(t, "eval-time", 0);
            mc_timer_stop(interval);
            mc_timer_start(eval_time);
            char prefix[64];
            bool abandoned;
            snprintf(prefix, sizeof(prefix), "iteration %lld", (long long)*iteration);
            if ((st = mc_train_evaluate_and_print(t, MC_TRAIN_SPLIT_VALID, prefix, false,
                                                  &t->d.consumed_valid, &abandoned)))
                return st;
            mc_timer_stop(eval_time);
            mc_timer_start(interval); /* evaluation is not iteration time */
        }
        if (hash_check && *iteration % hash_interval == 0 &&
            (st = mc_train_check_weight_hashes(t, *iteration)))
            return st;
        if ((st = decide_exit(t, *iteration, exited)))
            return st;
        if (*exited)
            break;
    }
    mc_status st = t->log.tb ? mc_tb_flush(t->log.tb) : MC_OK;
    return st ? st : mc_train_maybe_finalize_async_save(a, true);
}

/* The datasets are built by rank 0 first (it writes the index caches), then by the other
 * ranks, which load them, as Megatron's BlendedMegatronDatasetBuilder does. */
static mc_status build_train_data(struct trainer *t)
{
    mc_status st = MC_OK;
    if (t->par.ps.rank == 0)
        st = mc_train_data_init(t->a, mc_tok_eod(t->m.tok), mc_tok_pad(t->m.tok),
                                mc_train_out_first, &t->d.data);
    if (st)
        return st;
    if ((st = mc_comm_barrier(mc_train_world_comm)))
        return st;
    if (t->par.ps.rank != 0)
        st = mc_train_data_init(t->a, mc_tok_eod(t->m.tok), mc_tok_pad(t->m.tok), NULL, &t->d.data);
    if (!st)
        mc_train_data_set_token_limit(t->d.data, t->m.padded_vocab);
    return st;
}

static mc_status setup(struct trainer *t)
{
    const struct mc_args *a = t->a;
    mc_status st;
    mc_train_setup_printing(a);
    if ((st = mc_train_check_supported(a)))
        return st;
    if ((st = mc_microbatches_init_from_args(a, mc_train_out_first, &t->d.mb)))
        return st;
    if ((st = mc_train_build_tokenizer(t)) || (st = mc_train_init_logging(t)))
        return st;
    /* ours: the recompute setting a budget picks, before anything reads the setting */
    if ((st = mc_recompute_auto_budget(t->a, mc_tok_vocab_size(t->m.tok), t->m.padded_vocab,
                                       mc_train_out_first)))
        return st;
    mc_print_rank_0("> initializing torch distributed ...\n");
    if ((st = mc_train_setup_parallel_state(t)))
        return st;
    mc_print_rank_0("> setting random seeds to %lld ...\n", (long long)mc_args_int(a, MC_A_seed));
    mc_print_rank_0("time to initialize megatron (seconds): %.3f\n", mc_time_now() - t->t0);
    mc_print_datetime("after megatron is initialized");
    static const char *const names[] = {"model-and-optimizer-setup",
                                        "train/valid/test-data-iterators-setup"};
    struct mc_timer *model_tm = timer(t, names[0], 0), *data_tm = timer(t, names[1], 0);
    mc_timer_start(model_tm);
    if ((st = mc_train_build_model_and_optimizer(t)) || (st = load_checkpoint(t)))
        return st;
    if (!mc_args_is_none(a, MC_A_ckpt_convert_format)) {
        t->converted = true;
        return convert_checkpoint(t);
    }
    mc_timer_stop(model_tm);
    mc_print_datetime("after model, optimizer, and learning rate scheduler are built");
    mc_timer_start(data_tm);
    if ((st = build_train_data(t)))
        return st;
    mc_timer_stop(data_tm);
    mc_print_datetime("after dataloaders are built");
    mc_print_rank_0("done with setup ...\n");
    if ((st = mc_train_log_timers(t, names, 2, 1.0)))
        return st;
    double flops;
    if ((st = mc_flops_per_iteration(a, t->m.padded_vocab, 1, &flops)))
        return st;
    t->p.flops_per_sample = flops;
    bool with_mask = mc_args_bool(a, MC_A_reset_attention_mask);
    if ((st = mc_micro_batch_init(&t->d.batch, t->d.mbs, t->d.seq, with_mask)))
        return st;
    t->d.loss = mc_alloc((size_t)(t->d.mbs * t->d.seq) * sizeof(float));
    t->d.dloss = mc_alloc((size_t)(t->d.mbs * t->d.seq) * sizeof(float));
    struct mc_backend *be = t->m.be;
    size_t bytes = (size_t)(t->d.mbs * t->d.seq) * sizeof(float);
    t->d.loss_be = MC_MEM_AS(MC_MEM_ACTIVATIONS, be->ops->alloc(be, bytes));
    t->d.dloss_be = MC_MEM_AS(MC_MEM_ACTIVATIONS, be->ops->alloc(be, bytes));
    t->d.mask_be = MC_MEM_AS(MC_MEM_ACTIVATIONS, be->ops->alloc(be, bytes));
    return t->d.loss && t->d.dloss && t->d.loss_be && t->d.dloss_be && t->d.mask_be
               ? MC_OK : MC_ERR_NOMEM;
}

static void teardown(struct trainer *t)
{
    mc_pp_group_free(t->pp.embedding_group);
    mc_pp_schedule_free(&t->pp.pipe);
    mc_pp_interleaved_free(&t->pp.vpipe);
    if (t->m.be) {
        t->m.be->ops->free(t->m.be, t->d.mask_be);
        t->m.be->ops->free(t->m.be, t->d.dloss_be);
        t->m.be->ops->free(t->m.be, t->d.loss_be);
    }
    mc_free(t->d.dloss);
    mc_free(t->d.loss);
    mc_micro_batch_free(&t->d.batch);
    mc_train_data_free(t->d.data);
    for (int v = 0; v < MC_MAX_VP; v++)
        mc_ddp_free(t->o.ddps[v]);
    mc_opt_free(t->o.opt);
    for (int v = 0; v < MC_MAX_VP; v++)
        mc_distopt_free(t->o.dopts[v]);
    for (int v = 0; v < t->m.vp; v++)
        mc_gpt_model_free(t->m.chunks[v]);
    mc_backend_free(t->m.be);
    mc_tok_free(t->m.tok);
}

mc_status mc_pretrain_gpt(struct mc_args *a, double t0)
{
    struct trainer t = {.a = a, .t0 = t0};
    t.d.mbs = mc_args_int(a, MC_A_micro_batch_size);
    t.d.seq = mc_args_int(a, MC_A_seq_length);
    t.d.gbs = mc_args_int(a, MC_A_global_batch_size);
    if (mc_args_bool(a, MC_A_exit_signal_handler))
        signal(SIGTERM, on_sigterm);
    mc_status st = mc_train_dump_setup(a);
    if (!st)
        st = setup(&t);
    if (st || t.converted)
        goto out; /* after a conversion: Megatron's exit() */
    int64_t iteration = t.p.start_iteration;
    bool exited = false;
    char prefix[96];
    if (!mc_args_bool(a, MC_A_skip_train)) {
        mc_print_rank_0("training ...\n");
        if (mc_train_data_has(t.d.data, MC_TRAIN_SPLIT_TRAIN) &&
            mc_args_int(a, MC_A_train_iters) > 0)
            if ((st = train(&t, &iteration, &exited)))
                goto out;
        if (exited)
            goto out; /* Megatron's sys.exit(0): no final evaluation */
        mc_print_datetime("after training is done");
        int64_t every_save = save_interval(a);
        if (!mc_args_is_none(a, MC_A_save) && iteration != 0 &&
            (!every_save || iteration % every_save))
            if ((st = save_checkpoint(&t, iteration)))
                goto out;
    } else {
        mc_print_rank_0("skipping training (--skip-train is on) ...\n");
    }
    bool abandoned = false;
    t.p.iteration = iteration;
    if (mc_train_data_has(t.d.data, MC_TRAIN_SPLIT_VALID) && mc_args_int(a, MC_A_eval_iters) > 0) {
        snprintf(prefix, sizeof(prefix), "iteration %lld on validation set", (long long)iteration);
        if ((st = mc_train_evaluate_and_print(&t, MC_TRAIN_SPLIT_VALID, prefix, true,
                                              &t.d.consumed_valid, &abandoned)))
            goto out;
    }
    if (!abandoned && mc_train_data_has(t.d.data, MC_TRAIN_SPLIT_TEST) &&
        mc_args_int(a, MC_A_eval_iters) > 0) {
        int64_t consumed_test = 0;
        snprintf(prefix, sizeof(prefix), "iteration %lld on test set", (long long)iteration);
        st = mc_train_evaluate_and_print(&t, MC_TRAIN_SPLIT_TEST, prefix, true, &consumed_test,
                                         &abandoned);
    }
out:
    if (!st) /* the final save, scheduled after training */
        st = mc_train_maybe_finalize_async_save(a, true);
    mc_train_async_save_abandon(); /* after an error: waits for the writers, drops their saves */
    if (!st && mc_args_bool(a, MC_A_log_memory_estimate))
        st = mc_train_log_memory_estimate(&t);
    fflush(stdout);
    mc_status tb_st = mc_tb_close(t.log.tb);
    if (!st)
        st = tb_st;
    teardown(&t);
    mc_ps_free(&t.par.ps);
    return st;
}
