/* OptimizerParamScheduler (src/optimizer/lr_scheduler.c) against the spec's formulas (§8),
 * computed here independently, and its constructor / checkpoint checks. */
#include <math.h>
#include <string.h>

#include "optimizer/lr_scheduler.h"
#include "test.h"

static struct mc_opt_sched_config base(void)
{
    struct mc_opt_sched_config c;
    memset(&c, 0, sizeof(c));
    c.max_lr = 1e-3;
    c.min_lr = 1e-5;
    c.warmup_steps = 100;
    c.decay_steps = 1000;
    c.decay_style = MC_LR_COSINE;
    c.start_wd = c.end_wd = 0.1;
    c.wd_incr_steps = 1000;
    return c;
}

int main(void)
{
    struct mc_opt_sched s;
    struct mc_opt_sched_config c = base();
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_OK);
    CHECK(s.lr == 0.0 && s.wd == 0.1);
    mc_opt_sched_step(&s, 50);
    CHECK_CLOSE(s.lr, 0.5e-3, 1e-18);
    mc_opt_sched_step(&s, 50);
    CHECK(s.lr == 1e-3); /* n == warmup: exactly max_lr */
    mc_opt_sched_step(&s, 450);
    CHECK_CLOSE(s.lr, 1e-5 + 0.5 * (cos(M_PI * 0.5) + 1) * (1e-3 - 1e-5), 1e-18);
    mc_opt_sched_step(&s, 451);
    CHECK(s.lr == 1e-5); /* past decay_steps */
    CHECK_CLOSE(mc_opt_sched_get_lr(&s, 2e-3, 2e-4), 2e-4, 0); /* per-group max/min */

    c = base();
    c.warmup_steps = 0;
    c.decay_style = MC_LR_INV_SQRT;
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_OK);
    CHECK(s.lr == 1e-3);
    mc_opt_sched_step(&s, 16);
    CHECK_CLOSE(s.lr, 1e-3 / 4, 1e-18);

    c = base();
    c.decay_style = MC_LR_WSD;
    c.has_wsd_decay_steps = true;
    c.wsd_decay_steps = 200;
    c.wsd_decay_style = MC_WSD_EXPONENTIAL;
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_OK);
    mc_opt_sched_step(&s, 800);
    CHECK(s.lr == 1e-3); /* stable phase */
    mc_opt_sched_step(&s, 100);
    CHECK_CLOSE(s.lr, 1e-5 + (2 * pow(0.5, 0.5) - 1) * (1e-3 - 1e-5), 1e-18);
    mc_opt_sched_step(&s, 100);
    CHECK_CLOSE(s.lr, 1e-5, 1e-18);

    c = base();
    c.wd_incr_style = MC_WD_COSINE;
    c.start_wd = 0.0;
    c.end_wd = 0.1;
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_OK);
    mc_opt_sched_step(&s, 250);
    CHECK_CLOSE(s.wd, 0.1 * 0.5 * (cos(M_PI * 0.75) + 1), 1e-18);

    c = base();
    c.decay_style = MC_LR_CONSTANT;
    c.init_lr = 1e-4;
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_OK);
    CHECK(s.lr == 1e-4);
    mc_opt_sched_step(&s, 5000);
    CHECK(s.lr == 1e-3);

    c = base();
    c.warmup_steps = 1000;
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_ERR_CONFIG);
    c = base();
    c.decay_style = MC_LR_WSD;
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_ERR_CONFIG);
    c = base();
    c.override = c.use_checkpoint = true;
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "both override and use-checkpoint are set.") != NULL);

    c = base();
    CHECK(mc_opt_sched_init(&s, &c, NULL) == MC_OK);
    double v;
    CHECK(mc_opt_sched_check_and_set(&s, "learning rate", 3e-4, 6e-4, NULL, &v) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "class input value 0.00029999999999999997 and checkpoint value") != NULL);
    CHECK(mc_opt_sched_check_and_set(&s, "learning rate", 3e-4, 3e-4, NULL, &v) == MC_OK && v == 3e-4);
    s.c.override = true;
    CHECK(mc_opt_sched_check_and_set(&s, "learning rate", 3e-4, 6e-4, NULL, &v) == MC_OK && v == 3e-4);
    enum mc_lr_decay d;
    CHECK(mc_lr_decay_parse("inverse-square-root", &d) && d == MC_LR_INV_SQRT);
    CHECK(!mc_lr_decay_parse("poly", &d));
    return test_summary("test_lr_scheduler");
}
