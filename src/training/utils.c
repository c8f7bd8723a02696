/* The helpers of megatron/training/utils.py the training loop uses (core_v0.12.1):
 * print_rank_0 / print_rank_last, print_datetime, calc_params_l2_norm, the weight-hash check of
 * post_training_step_callbacks, and the all-rank exit flags of train(). */
#include "training/trainer.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "training/param_hashes.h"
#include "training/training.h"

/* Megatron's print_rank_0 / print_rank_last: stdout on the world's first / last rank, NULL
 * elsewhere (set by mc_train_setup_printing before anything is printed). */
FILE *mc_train_out_first, *mc_train_out_last;
void *mc_train_world_comm; /* the MPI world (NULL for one process) */

static void vprint_to(FILE *f, const char *fmt, va_list ap)
{
    if (!f)
        return;
    vfprintf(f, fmt, ap);
    fflush(f);
}

void mc_print_rank_0(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_to(mc_train_out_first, fmt, ap);
    va_end(ap);
}

void mc_print_rank_last(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_to(mc_train_out_last, fmt, ap);
    va_end(ap);
}

void mc_train_setup_printing(const struct mc_args *a)
{
    int64_t rank = mc_args_int(a, MC_A_rank), world = mc_args_int(a, MC_A_world_size);
    mc_train_out_first = rank == 0 ? stdout : NULL;
    mc_train_out_last = rank == world - 1 ? stdout : NULL;
    mc_train_world_comm = mc_comm_world_handle();
}

void mc_print_datetime(const char *what)
{
    char buf[256];
    mc_log_format_datetime(buf, sizeof(buf), what, 0);
    mc_print_rank_0("%s\n", buf);
}

/* calc_params_l2_norm: tensor-parallel duplicates counted once, summed over the
 * model-parallel group. */
mc_status mc_train_params_norm(const struct trainer *t, double *norm)
{
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++) /* --overlap-param-gather */
        st = mc_ddp_finish_param_sync(t->o.ddps[v]);
    if (st)
        return st;
    int tp_rank = mc_ps_rank(&t->par.ps, MC_PS_TP);
    double ss = 0;
    for (int v = 0; v < t->m.vp; v++) {
        const mc_gpt_model *m = t->m.chunks[v];
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
            struct mc_param_view p = mc_gpt_param(m, i);
            if ((!p.tensor_parallel && tp_rank != 0) || p.shared)
                continue;
            for (int64_t k = 0; k < p.numel; k++)
                ss += (double)p.data[k] * p.data[k];
        }
    }
    st = mc_comm_all_reduce(t->par.ps.group[MC_PS_MP].comm, &ss, 1, MC_DTYPE_F64, MC_COMM_SUM,
                            "params-norm all-reduce");
    *norm = sqrt(ss);
    return st;
}

/* --check-weight-hash-across-dp-replicas-interval: Megatron's check in train() (before the
 * first step) and post_training_step_callbacks (every interval iterations): the parameters of
 * every data-parallel replica must hash alike, else AssertionError. */
mc_status mc_train_check_weight_hashes(struct trainer *t, int64_t iteration)
{
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++) /* --overlap-param-gather: params complete first */
        st = mc_ddp_finish_param_sync(t->o.ddps[v]);
    if (st)
        return st;
    bool match = false;
    if ((st = mc_param_hashes_match(t->m.chunks, t->m.vp, &t->par.ps.group[MC_PS_DP],
                                    t->par.ps.rank, &match)))
        return st;
    if (!match)
        return mc_error(MC_ERR_INTERNAL, "AssertionError: Parameter hashes not matching across "
                                         "DP replicas");
    if ((st = mc_comm_barrier(mc_comm_world_handle())))
        return st;
    mc_print_rank_0(">>> Weight hashes match after %lld iterations...\n", (long long)iteration);
    return MC_OK;
}

mc_status mc_train_test_mode_check(struct trainer *t)
{
    if (!mc_args_bool(t->a, MC_A_test_mode) || !mc_gpt_model_config(t->m.chunks[0])->qk_layernorm)
        return MC_OK; /* run_realtime_tests returns at once without q/k layernorms */
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++) /* --overlap-param-gather: params complete first */
        st = mc_ddp_finish_param_sync(t->o.ddps[v]);
    return st ? st : mc_qk_norms_match(t->m.chunks, t->m.vp, &t->par.ps.group[MC_PS_DP],
                                       &t->par.ps.group[MC_PS_TP]);
}

/* True on every rank when it is true on any (Megatron all-reduces exit conditions with MAX so
 * that the ranks stop together). A failed reduction counts as true: stop rather than hang. */
bool mc_train_on_any_rank(bool v)
{
    int64_t x = v;
    if (mc_comm_all_reduce(mc_train_world_comm, &x, 1, MC_DTYPE_I64, MC_COMM_MAX,
                           "exit-flag all-reduce"))
        return true;
    return x != 0;
}

bool mc_train_time_limit_reached(const struct trainer *t, double *minutes)
{
    if (mc_args_is_none(t->a, MC_A_exit_duration_in_mins))
        return false;
    *minutes = (mc_time_now() - t->t0) / 60.0;
    return mc_train_on_any_rank(*minutes > (double)mc_args_int(t->a, MC_A_exit_duration_in_mins));
}
