/* Scheduler arguments: mirrors get_optimizer_param_scheduler() and update_train_iters() of
 * megatron/training/training.py (core_v0.12.1). Step counts become samples: iterations times
 * the configured (final) global batch size. */
#include "training/schedule_args.h"

#define A(x) MC_A_##x

mc_status mc_microbatches_init_from_args(const struct mc_args *a, FILE *log,
                                         struct mc_microbatches *mb)
{
    const struct mc_val *r = &a->v[A(rampup_batch_size)];
    const char *items[3] = {NULL, NULL, NULL};
    bool ramp = r->kind == MC_V_LIST;
    for (int k = 0; ramp && k < r->n && k < 3; k++)
        items[k] = r->items[k].s;
    return mc_microbatches_init(mb, ramp ? items : NULL, ramp ? r->n : 0,
                                mc_args_int(a, A(global_batch_size)),
                                mc_args_int(a, A(micro_batch_size)),
                                mc_args_int(a, A(data_parallel_size)),
                                mc_args_bool(a, A(decrease_batch_size_if_needed)), log);
}

mc_status mc_opt_sched_config_from_args(struct mc_args *a, struct mc_microbatches *mb, FILE *log,
                                        struct mc_opt_sched_config *c)
{
    int64_t gbs = mc_args_int(a, A(global_batch_size));
    bool has_fraction = !mc_args_is_none(a, A(lr_warmup_fraction));
    if (mc_args_truthy(a, A(train_iters))) {
        if (mc_args_is_none(a, A(lr_decay_iters)))
            mc_args_set_int(a, A(lr_decay_iters), mc_args_int(a, A(train_iters)));
        c->decay_steps = mc_args_int(a, A(lr_decay_iters)) * gbs;
        c->wd_incr_steps = mc_args_int(a, A(train_iters)) * gbs;
        c->has_wsd_decay_steps = !mc_args_is_none(a, A(lr_wsd_decay_iters));
        c->wsd_decay_steps = c->has_wsd_decay_steps ? mc_args_int(a, A(lr_wsd_decay_iters)) * gbs : 0;
        c->warmup_steps = has_fraction
                              ? mc_args_float(a, A(lr_warmup_fraction)) * (double)c->decay_steps
                              : (double)(mc_args_int(a, A(lr_warmup_iters)) * gbs);
    } else if (mc_args_truthy(a, A(train_samples))) {
        int64_t samples = mc_args_int(a, A(train_samples));
        int64_t iters = mc_microbatches_train_iters(mb, samples);
        mc_args_set_int(a, A(train_iters), iters);
        if (log)
            fprintf(log, "setting training iterations to %lld\n", (long long)iters);
        if (mc_args_is_none(a, A(lr_decay_samples)))
            mc_args_set_int(a, A(lr_decay_samples), samples);
        c->decay_steps = mc_args_int(a, A(lr_decay_samples));
        c->wd_incr_steps = samples;
        c->has_wsd_decay_steps = !mc_args_is_none(a, A(lr_wsd_decay_samples));
        c->wsd_decay_steps = c->has_wsd_decay_steps ? mc_args_int(a, A(lr_wsd_decay_samples)) : 0;
        c->warmup_steps = has_fraction
                              ? mc_args_float(a, A(lr_warmup_fraction)) * (double)c->decay_steps
                              : (double)mc_args_int(a, A(lr_warmup_samples));
    } else {
        return mc_error(MC_ERR_CONFIG, "either train-iters or train-samples should be provided.");
    }
    if (mc_args_is_none(a, A(lr))) /* Megatron: float(None) raises TypeError */
        return mc_error(MC_ERR_CONFIG, "float() argument must be a string or a real number, not "
                        "'NoneType' (--lr is required)");
    c->init_lr = mc_args_float(a, A(lr_warmup_init));
    c->max_lr = mc_args_float(a, A(lr));
    c->min_lr = mc_args_float(a, A(min_lr));
    if (!mc_lr_decay_parse(mc_args_str(a, A(lr_decay_style)), &c->decay_style) ||
        !mc_wsd_decay_parse(mc_args_str(a, A(lr_wsd_decay_style)), &c->wsd_decay_style) ||
        !mc_wd_incr_parse(mc_args_str(a, A(weight_decay_incr_style)), &c->wd_incr_style))
        return mc_error(MC_ERR_INTERNAL, "scheduler style not in the parser's choices");
    c->start_wd = mc_args_float(a, A(start_weight_decay));
    c->end_wd = mc_args_float(a, A(end_weight_decay));
    c->use_checkpoint = mc_args_bool(a, A(use_checkpoint_opt_param_scheduler));
    c->override = mc_args_bool(a, A(override_opt_param_scheduler));
    return MC_OK;
}
