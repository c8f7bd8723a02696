/* What initialize_megatron and set_global_variables of megatron/training/ (core_v0.12.1) set
 * up before the model: the refusals of this build, the tokenizer and padded vocabulary, the
 * timers and the TensorBoard writer, the parallel state and the collectives' watchdog. */
#include "training/trainer.h"

#include <stdlib.h>
#include <string.h>

#include "training/dry_run.h"

/* What this build cannot do yet fails loudly, before any work is done: the first entry of the
 * refusal list (pretrain_gpt prints all of them and stops before it gets here). */
mc_status mc_train_check_supported(const struct mc_args *a)
{
    static struct mc_refusals r;
    mc_args_refusals(a, &r);
    return r.n ? mc_error(MC_ERR_UNSUPPORTED, "%s", r.msg[0]) : MC_OK;
}

mc_status mc_train_build_tokenizer(struct trainer *t)
{
    const struct mc_args *a = t->a;
    struct mc_tokenizer_args ta;
    mc_tokenizer_args_from(a, &ta);
    FILE *log = mc_train_out_first;
    mc_tokenizer_print_building(log, a);
    if (ta.tokenizer_type && !strcmp(ta.tokenizer_type, "PretrainedFromHF") &&
        mc_args_int(a, MC_A_vocab_extra_ids) > 0)
        return mc_error(MC_ERR_UNSUPPORTED, "--vocab-extra-ids %lld with --tokenizer-type "
                        "PretrainedFromHF: the <extra_id_N> tokens MindSpeed-LLM adds are not "
                        "implemented yet", (long long)mc_args_int(a, MC_A_vocab_extra_ids));
    mc_status st = mc_tok_init(&ta, &t->m.tok);
    if (st)
        return st;
    st = mc_vocab_padded_from_args(a, mc_tok_vocab_size(t->m.tok), log, &t->m.padded_vocab);
    if (log)
        fflush(log);
    return st;
}

/* set_global_variables' _set_timers and _set_tensorboard_writer: only the last rank writes. */
mc_status mc_train_init_logging(struct trainer *t)
{
    const struct mc_args *a = t->a;
    mc_status st = mc_timers_init(&t->log.timers, (int)mc_args_int(a, MC_A_timing_log_level),
                                  mc_args_str(a, MC_A_timing_log_option));
    bool tb = !mc_args_is_none(a, MC_A_tensorboard_dir);
    if (st || (!tb && !mc_args_bool(a, MC_A_log_timers_to_tensorboard)))
        return st;
    int64_t every = mc_args_int(a, MC_A_tensorboard_log_interval);
    if (every <= 0) /* Megatron would divide by it and fail mid-run */
        return mc_error(MC_ERR_CONFIG, "--tensorboard-log-interval %lld: expected a positive "
                        "number of iterations", (long long)every);
    if (!tb || !mc_train_out_last)
        return MC_OK;
    mc_print_rank_last("> setting tensorboard ...\n");
    return mc_tb_open(mc_args_str(a, MC_A_tensorboard_dir),
                      mc_args_int(a, MC_A_tensorboard_queue_size), &t->log.tb);
}

/* --distributed-timeout-minutes: torch.distributed's collective timeout, here the watchdog of
 * parallel_state/watchdog.c. MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS replaces it in the failure
 * tests, which cannot wait a whole minute. */
static mc_status start_watchdog(const struct trainer *t)
{
    long long minutes = (long long)mc_args_int(t->a, MC_A_distributed_timeout_minutes);
    const char *test = getenv("MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS");
    char source[96];
    double seconds = 60.0 * (double)minutes;
    if (test && *test) {
        char *end;
        seconds = strtod(test, &end);
        if (*end || !(seconds > 0))
            return mc_error(MC_ERR_CONFIG, "MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS=%s: expected a "
                            "positive number of seconds", test);
        snprintf(source, sizeof(source), "MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS=%s", test);
    } else {
        snprintf(source, sizeof(source), "--distributed-timeout-minutes %lld", minutes);
        if (minutes <= 0)
            return mc_error(MC_ERR_CONFIG, "--distributed-timeout-minutes %lld: expected a "
                            "positive number of minutes", minutes);
    }
    return mc_comm_watchdog_start(t->par.ps.rank, seconds, source);
}

/* initialize_model_parallel over the MPI world (tensor x data parallel; the rest refused). */
mc_status mc_train_setup_parallel_state(struct trainer *t)
{
    const struct mc_args *a = t->a;
    struct mc_ps_config pc = {
        .tensor_model_parallel_size = (int)mc_args_int(a, MC_A_tensor_model_parallel_size),
        .pipeline_model_parallel_size = (int)mc_args_int(a, MC_A_pipeline_model_parallel_size),
        .context_parallel_size = (int)mc_args_int(a, MC_A_context_parallel_size),
        .expert_model_parallel_size = (int)mc_args_int(a, MC_A_expert_model_parallel_size),
    };
    mc_status st = mc_ps_init(&t->par.ps, mc_train_world_comm, &pc);
    if (st)
        return st;
    if (t->par.ps.world != mc_args_int(a, MC_A_world_size))
        return mc_error(MC_ERR_COMM, "world size %lld (WORLD_SIZE/OMPI_COMM_WORLD_SIZE) but %d "
                        "MPI processes: launch several ranks with mpirun",
                        (long long)mc_args_int(a, MC_A_world_size), t->par.ps.world);
    t->par.dp = mc_ps_size(&t->par.ps, MC_PS_DP);
    t->par.dp_rank = mc_ps_rank(&t->par.ps, MC_PS_DP);
    if (mc_train_world_comm && (st = start_watchdog(t)))
        return st;
    mc_print_rank_0("> initialized tensor model parallel with size %d\n", t->par.ps.tp);
    mc_print_rank_0("> initialized pipeline model parallel with size %d\n", t->par.ps.pp);
    return MC_OK;
}
