/* evaluate() and evaluate_and_print_results() of megatron/training/training.py
 * (core_v0.12.1): forward-only passes of the same schedule callbacks as training, the
 * validation line and its TensorBoard scalars. */
#include "training/trainer.h"

#include <stdio.h>

/* evaluate + evaluate_and_print_results. *abandoned is set when the time limit stops it. */
mc_status mc_train_evaluate_and_print(struct trainer *t, int split, const char *prefix,
                                      bool verbose, int64_t *consumed, bool *abandoned)
{
    int64_t eval_iters = mc_args_int(t->a, MC_A_eval_iters);
    int64_t eval_micro = t->d.gbs / (t->d.mbs * t->par.dp);
    struct mc_timer *ev = timer(t, "evaluate", 0), *fb = timer(t, "forward-backward", 1);
    mc_timer_start(ev);
    float numer = 0, denom = 0;
    *abandoned = false;
    mc_status tst = mc_train_test_mode_check(t);
    if (tst)
        return tst;
    if (verbose)
        mc_print_rank_0("Evaluating on %lld samples\n", (long long)(eval_iters * t->d.gbs));
    for (int64_t it = 1; it <= eval_iters; it++) {
        if (verbose)
            mc_print_rank_0("Evaluating iter %lld/%lld\n", (long long)it, (long long)eval_iters);
        mc_timer_start(fb); /* forward_backward_func runs (forward only) under its timer */
        mc_status st = mc_train_forward_backward(t, split, *consumed, eval_micro, 0, true,
                                                 &numer, &denom);
        if (st)
            return st;
        mc_timer_stop(fb);
        *consumed += t->d.gbs;
        double minutes;
        if (mc_train_time_limit_reached(t, &minutes)) {
            mc_print_rank_0("Exiting during evaluation, timelimit reached\n");
            mc_timer_stop(ev);
            *abandoned = true;
            return MC_OK;
        }
    }
    mc_timer_stop(ev);
    static const char *const ev_names[] = {"evaluate"};
    mc_status st = mc_train_log_timers(t, ev_names, 1, 1.0);
    static const char *const names[] = {"lm loss"};
    double value = (double)(numer / denom);
    /* the final evaluations of a --skip-train run do not write to TensorBoard */
    if (!st && (!verbose || !mc_args_bool(t->a, MC_A_skip_train)))
        st = mc_train_tb_validation(t, names[0], value);
    char buf[1024];
    mc_log_format_validation(buf, sizeof(buf), prefix, 1, names, &value);
    mc_print_rank_last("%s", buf);
    return st;
}
