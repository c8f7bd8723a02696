/* Timers (src/training/timers.c): levels, reset on read, min/max over ranks without zeros, the
 * three --timing-log-option layouts (texts from the spec's Megatron fixtures, §6.3). */
#include <string.h>
#include <time.h>

#include "test.h"
#include "training/timers.h"

/* Two ranks: ours, and a second one that measured 30 ms for the first timer and 0 elsewhere. */
static mc_status gather2(void *ctx, const float *local, int n, float *all, int max_world, int *world)
{
    (void)ctx;
    (void)max_world;
    for (int k = 0; k < n; k++) {
        all[k] = local[k];
        all[n + k] = k == 0 ? 0.030f : 0.0f;
    }
    *world = 2;
    return MC_OK;
}

int main(void)
{
    struct mc_timers t;
    CHECK(mc_timers_init(&t, 1, "median") == MC_ERR_CONFIG);
    CHECK(mc_timers_init(&t, 1, "minmax") == MC_OK);
    CHECK(mc_timers_get(&t, "forward-compute", 2) == NULL); /* above --timing-log-level */
    mc_timer_start(NULL);
    mc_timer_stop(NULL);
    CHECK(mc_timer_elapsed(NULL, true) == 0.0);
    struct mc_timer *fb = mc_timers_get(&t, "forward-backward", 1);
    struct mc_timer *opt = mc_timers_get(&t, "optimizer", 1);
    CHECK(fb && opt && mc_timers_get(&t, "forward-backward", -1) == fb);
    mc_timer_start(fb);
    struct timespec ms = {0, 2000000};
    nanosleep(&ms, NULL);
    mc_timer_stop(fb);
    CHECK(fb->elapsed_s >= 0.002 && fb->elapsed_s < 1.0);

    char buf[1024];
    size_t len;
    fb->elapsed_s = 0.65; /* 10 iterations of 65 ms */
    CHECK(mc_timers_log_string(&t, mc_training_log_timers, mc_training_log_timers_count, 10.0, true,
                               NULL, NULL, buf, sizeof(buf), &len) == MC_OK);
    CHECK(!strcmp(buf, "(min, max) time across ranks (ms):\n"
                       "    forward-backward ...............................: (65.00, 65.00)"));
    CHECK(fb->elapsed_s == 0.0); /* reset on read */
    CHECK(mc_timers_log_string(&t, mc_training_log_timers, mc_training_log_timers_count, 10.0, true,
                               NULL, NULL, buf, sizeof(buf), &len) == MC_OK && len == 0);

    fb->elapsed_s = 0.034;
    opt->elapsed_s = 0.002;
    const char *names[] = {"forward-backward", "optimizer"};
    CHECK(mc_timers_log_string(&t, names, 2, 1.0, true, gather2, NULL, buf, sizeof(buf), &len) == MC_OK);
    CHECK(!strcmp(buf, "(min, max) time across ranks (ms):\n"
                       "    forward-backward ...............................: (30.00, 34.00)\n"
                       "    optimizer ......................................: (2.00, 2.00)"));
    strcpy(t.option, "all");
    fb->elapsed_s = 0.034;
    CHECK(mc_timers_log_string(&t, names, 2, 1.0, true, gather2, NULL, buf, sizeof(buf), &len) == MC_OK);
    CHECK(!strcmp(buf, "times across ranks (ms):\n  forward-backward:\n     rank  0: 34.00\n"
                       "     rank  1: 30.00"));
    strcpy(t.option, "max");
    fb->elapsed_s = 0.034;
    CHECK(mc_timers_log_string(&t, names, 2, 1.0, false, NULL, NULL, buf, sizeof(buf), &len) == MC_OK);
    CHECK(!strcmp(buf, "max time across ranks (ms):\n"
                       "    forward-backward ...............................: 34.00"));
    CHECK(fb->elapsed_s == 0.034); /* no reset asked */
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_timers");
}
