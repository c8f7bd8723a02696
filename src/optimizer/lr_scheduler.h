/* OptimizerParamScheduler: learning-rate and weight-decay schedules counted in samples.
 * Mirrors megatron/core/optimizer_param_scheduler.py (Megatron-LM core_v0.12.1). */
#ifndef MC_OPTIMIZER_LR_SCHEDULER_H
#define MC_OPTIMIZER_LR_SCHEDULER_H

#include <stdio.h>

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mc_lr_decay { MC_LR_CONSTANT = 0, MC_LR_LINEAR, MC_LR_COSINE, MC_LR_INV_SQRT, MC_LR_WSD };
enum mc_wsd_decay { MC_WSD_EXPONENTIAL = 0, MC_WSD_LINEAR, MC_WSD_COSINE };
enum mc_wd_incr { MC_WD_CONSTANT = 0, MC_WD_LINEAR, MC_WD_COSINE };

/* Constructor arguments; every step count is in samples. */
struct mc_opt_sched_config {
    double init_lr, max_lr, min_lr;
    double warmup_steps;          /* may be fractional (--lr-warmup-fraction x decay steps) */
    int64_t decay_steps;
    enum mc_lr_decay decay_style;
    double start_wd, end_wd;
    int64_t wd_incr_steps;
    enum mc_wd_incr wd_incr_style;
    bool use_checkpoint, override;
    bool has_wsd_decay_steps;
    int64_t wsd_decay_steps;
    enum mc_wsd_decay wsd_decay_style;
};

struct mc_opt_sched {
    struct mc_opt_sched_config c;
    int64_t num_steps;
    double lr, wd;                /* values for the default parameter group after the last step */
};

/* Checks the constructor's assertions, then step(0). `log` gets rank 0's
 * "INFO:megatron.core.optimizer_param_scheduler:> learning rate decay style: cosine" (or NULL). */
MC_API mc_status mc_opt_sched_init(struct mc_opt_sched *s, const struct mc_opt_sched_config *c,
                                   FILE *log);
/* Advances by `increment` samples and recomputes lr/wd. */
MC_API void mc_opt_sched_step(struct mc_opt_sched *s, int64_t increment);
/* LR of a parameter group with its own max/min (decoupled LR) at the current step. */
MC_API double mc_opt_sched_get_lr(const struct mc_opt_sched *s, double max_lr, double min_lr);
MC_API double mc_opt_sched_get_wd(const struct mc_opt_sched *s);
/* Parses "linear", "WSD", ...; false when unknown. */
MC_API bool mc_lr_decay_parse(const char *s, enum mc_lr_decay *out);
MC_API bool mc_wsd_decay_parse(const char *s, enum mc_wsd_decay *out);
MC_API bool mc_wd_incr_parse(const char *s, enum mc_wd_incr *out);
MC_API const char *mc_lr_decay_name(enum mc_lr_decay d);

/* load_state_dict's _check_and_set for one value: with override keep cls_value and log
 * " > overriding <name> value to <v>"; else unless use_checkpoint the two must be equal;
 * log " > using checkpoint value <v> for <name>" and return the checkpoint value. */
MC_API mc_status mc_opt_sched_check_and_set(const struct mc_opt_sched *s, const char *name,
                                            double cls_value, double ckpt_value, FILE *log,
                                            double *out);

#ifdef __cplusplus
}
#endif

#endif
