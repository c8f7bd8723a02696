/* Learning-rate and weight-decay schedules: mirrors OptimizerParamScheduler of
 * megatron/core/optimizer_param_scheduler.py (core_v0.12.1). Steps are samples; the formulas
 * keep Python's float operation order (pow(x, 0.5) as x**0.5) so values match bit for bit. */
#include "optimizer/lr_scheduler.h"

#include <math.h>
#include <string.h>

static const char *const decay_names[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD"};

bool mc_lr_decay_parse(const char *s, enum mc_lr_decay *out)
{
    for (int k = 0; k < 5; k++)
        if (!strcmp(s, decay_names[k])) {
            *out = (enum mc_lr_decay)k;
            return true;
        }
    return false;
}

const char *mc_lr_decay_name(enum mc_lr_decay d) { return decay_names[d]; }

bool mc_wsd_decay_parse(const char *s, enum mc_wsd_decay *out)
{
    static const char *const n[] = {"exponential", "linear", "cosine"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(s, n[k])) {
            *out = (enum mc_wsd_decay)k;
            return true;
        }
    return false;
}

bool mc_wd_incr_parse(const char *s, enum mc_wd_incr *out)
{
    static const char *const n[] = {"constant", "linear", "cosine"};
    for (int k = 0; k < 3; k++)
        if (!strcmp(s, n[k])) {
            *out = (enum mc_wd_incr)k;
            return true;
        }
    return false;
}

mc_status mc_opt_sched_init(struct mc_opt_sched *s, const struct mc_opt_sched_config *c, FILE *log)
{
    memset(s, 0, sizeof(*s));
    s->c = *c;
    /* Megatron's constructor assertions carry no message; say which one failed. */
    if (!(c->min_lr >= 0.0))
        return mc_error(MC_ERR_CONFIG, "min_lr (--min-lr %g) must be >= 0", c->min_lr);
    if (!(c->max_lr >= c->min_lr))
        return mc_error(MC_ERR_CONFIG, "--lr %g must be >= --min-lr %g",
                        c->max_lr, c->min_lr);
    if (!(c->init_lr <= c->max_lr))
        return mc_error(MC_ERR_CONFIG, "--lr-warmup-init %g must be <= --lr %g",
                        c->init_lr, c->max_lr);
    if (!(c->decay_steps > 0))
        return mc_error(MC_ERR_CONFIG, "learning-rate decay steps (%lld samples) "
                        "must be > 0", (long long)c->decay_steps);
    if (!(c->warmup_steps < (double)c->decay_steps))
        return mc_error(MC_ERR_CONFIG, "warmup steps (%g samples) must be < decay "
                        "steps (%lld samples)", c->warmup_steps, (long long)c->decay_steps);
    if (c->decay_style == MC_LR_WSD && !c->has_wsd_decay_steps)
        return mc_error(MC_ERR_CONFIG, "--lr-decay-style WSD needs "
                        "--lr-wsd-decay-iters or --lr-wsd-decay-samples");
    if (!(c->start_wd >= 0.0))
        return mc_error(MC_ERR_CONFIG, "start weight decay %g must be >= 0", c->start_wd);
    if (!(c->end_wd >= c->start_wd))
        return mc_error(MC_ERR_CONFIG, "end weight decay %g must be >= start "
                        "weight decay %g", c->end_wd, c->start_wd);
    if (c->override && c->use_checkpoint)
        return mc_error(MC_ERR_CONFIG, "both override and use-checkpoint are set.");
    mc_opt_sched_step(s, 0);
    if (log)
        fprintf(log, "INFO:megatron.core.optimizer_param_scheduler:> learning rate decay style: %s\n",
                decay_names[c->decay_style]);
    return MC_OK;
}

double mc_opt_sched_get_wd(const struct mc_opt_sched *s)
{
    const struct mc_opt_sched_config *c = &s->c;
    if (s->num_steps > c->wd_incr_steps || c->wd_incr_style == MC_WD_CONSTANT)
        return c->end_wd;
    double r = (double)s->num_steps / (double)c->wd_incr_steps;
    double delta = c->end_wd - c->start_wd;
    double coeff = c->wd_incr_style == MC_WD_LINEAR ? r : 0.5 * (cos(M_PI * (1 - r)) + 1.0);
    return c->start_wd + coeff * delta;
}

static double wsd_coeff(const struct mc_opt_sched *s)
{
    const struct mc_opt_sched_config *c = &s->c;
    int64_t anneal_start = c->decay_steps - c->wsd_decay_steps;
    if (s->num_steps <= anneal_start)
        return 1.0;
    double r = (double)(s->num_steps - anneal_start) / (double)c->wsd_decay_steps;
    switch (c->wsd_decay_style) {
    case MC_WSD_LINEAR: return 1.0 - r;
    case MC_WSD_COSINE: return 0.5 * (cos(M_PI * r) + 1.0);
    case MC_WSD_EXPONENTIAL: return (2.0 * pow(0.5, r)) - 1.0;
    }
    return 1.0;
}

double mc_opt_sched_get_lr(const struct mc_opt_sched *s, double max_lr, double min_lr)
{
    const struct mc_opt_sched_config *c = &s->c;
    double n = (double)s->num_steps;
    if (c->warmup_steps > 0 && n <= c->warmup_steps)
        return c->init_lr + ((max_lr - c->init_lr) * n / c->warmup_steps);
    if (c->decay_style == MC_LR_CONSTANT)
        return max_lr;
    if (s->num_steps > c->decay_steps)
        return min_lr;
    if (c->decay_style == MC_LR_INV_SQRT) {
        double w = c->warmup_steps > 1 ? c->warmup_steps : 1;
        double m = n > 1 ? n : 1;
        double lr = max_lr * pow(w, 0.5) / pow(m, 0.5);
        return lr > min_lr ? lr : min_lr;
    }
    double r = (n - c->warmup_steps) / ((double)c->decay_steps - c->warmup_steps);
    double delta = max_lr - min_lr, coeff;
    if (c->decay_style == MC_LR_LINEAR)
        coeff = 1.0 - r;
    else if (c->decay_style == MC_LR_COSINE)
        coeff = 0.5 * (cos(M_PI * r) + 1.0);
    else
        coeff = wsd_coeff(s);
    return min_lr + coeff * delta;
}

void mc_opt_sched_step(struct mc_opt_sched *s, int64_t increment)
{
    s->num_steps += increment;
    s->wd = mc_opt_sched_get_wd(s);
    s->lr = mc_opt_sched_get_lr(s, s->c.max_lr, s->c.min_lr);
}

mc_status mc_opt_sched_check_and_set(const struct mc_opt_sched *s, const char *name,
                                     double cls_value, double ckpt_value, FILE *log, double *out)
{
    if (s->c.override) {
        if (log)
            fprintf(log, " > overriding %s value to %.17g\n", name, cls_value);
        *out = cls_value;
        return MC_OK;
    }
    if (!s->c.use_checkpoint && cls_value != ckpt_value)
        return mc_error(MC_ERR_CONFIG, "OptimizerParamScheduler: class input value %.17g and "
                        "checkpoint value %.17g for %s do not match", cls_value, ckpt_value, name);
    if (log)
        fprintf(log, " > using checkpoint value %.17g for %s\n", ckpt_value, name);
    *out = ckpt_value;
    return MC_OK;
}
