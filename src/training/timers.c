/* Timers: mirrors Timer / Timers of megatron/core/timers.py (core_v0.12.1). Elapsed times pass
 * through float32 as in Megatron's gathered tensor, then are divided by normalizer / 1000 (ms);
 * min and max skip ranks that measured exactly zero. */
#include "training/timers.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "training/log_format.h"

const char *const mc_training_log_timers[] = {
    "forward-backward", "forward-compute", "backward-compute", "batch-generator", "forward-recv",
    "forward-send", "backward-recv", "backward-send", "forward-send-forward-recv",
    "forward-send-backward-recv", "backward-send-forward-recv", "backward-send-backward-recv",
    "forward-backward-send-forward-backward-recv", "layernorm-grads-all-reduce",
    "embedding-grads-all-reduce", "all-grads-sync", "params-all-gather",
    "optimizer-copy-to-main-grad", "optimizer-unscale-and-check-inf", "optimizer-clip-main-grad",
    "optimizer-count-zeros", "optimizer-inner-step", "optimizer-copy-main-to-model-params",
    "optimizer"};
const int mc_training_log_timers_count =
    (int)(sizeof(mc_training_log_timers) / sizeof(mc_training_log_timers[0]));

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mc_status mc_timers_init(struct mc_timers *t, int log_level, const char *option)
{
    memset(t, 0, sizeof(*t));
    if (strcmp(option, "max") && strcmp(option, "minmax") && strcmp(option, "all"))
        return mc_error(MC_ERR_CONFIG, "input log option %s is invalid. It must be one of "
                        "{'max', 'minmax', 'all'}", option);
    t->log_level = log_level;
    snprintf(t->option, sizeof(t->option), "%s", option);
    return MC_OK;
}

static struct mc_timer *find(struct mc_timers *t, const char *name)
{
    for (int k = 0; k < t->n; k++)
        if (!strcmp(t->t[k].name, name))
            return &t->t[k];
    return NULL;
}

struct mc_timer *mc_timers_get(struct mc_timers *t, const char *name, int level)
{
    struct mc_timer *tm = find(t, name);
    if (tm) {
        MC_ASSERT(level < 0 || level == tm->level);
        return tm;
    }
    if (level < 0)
        level = 2;
    MC_ASSERT(level <= 2);
    if (level > t->log_level)
        return NULL;
    MC_ASSERT(t->n < MC_TIMERS_MAX && strlen(name) < MC_TIMER_NAME_MAX);
    tm = &t->t[t->n++];
    memset(tm, 0, sizeof(*tm));
    snprintf(tm->name, sizeof(tm->name), "%s", name);
    tm->level = level;
    return tm;
}

void mc_timer_start(struct mc_timer *tm)
{
    if (!tm)
        return;
    MC_ASSERT(!tm->started);
    tm->start_s = now_s();
    tm->started = true;
}

void mc_timer_stop(struct mc_timer *tm)
{
    if (!tm)
        return;
    MC_ASSERT(tm->started);
    double e = now_s() - tm->start_s;
    tm->elapsed_s += e;
    tm->active_s += e;
    tm->started = false;
}

double mc_timer_elapsed(struct mc_timer *tm, bool reset)
{
    if (!tm)
        return 0.0;
    bool running = tm->started;
    if (running)
        mc_timer_stop(tm);
    double e = tm->elapsed_s;
    if (reset)
        tm->elapsed_s = 0.0;
    if (running)
        mc_timer_start(tm);
    return e;
}

mc_status mc_timers_log_string(struct mc_timers *t, const char *const *names, int n,
                               double normalizer, bool reset, mc_timers_gather_fn gather,
                               void *ctx, char *buf, size_t bufn, size_t *len)
{
    enum { MAX_WORLD = 4096 };
    static _Thread_local float local[MC_TIMERS_MAX], all[MC_TIMERS_MAX * 64];
    MC_ASSERT(n <= MC_TIMERS_MAX);
    for (int k = 0; k < n; k++) {
        struct mc_timer *tm = find(t, names[k]);
        local[k] = tm ? (float)mc_timer_elapsed(tm, reset) : 0.0f;
    }
    int world = 1;
    float *rows = all;
    float *heap = NULL;
    if (gather) {
        heap = mc_alloc(sizeof(float) * (size_t)n * MAX_WORLD);
        if (!heap)
            return mc_error(MC_ERR_NOMEM, "timers: no memory to gather %d timers", n);
        rows = heap;
        mc_status st = gather(ctx, local, n, rows, MAX_WORLD, &world);
        if (st != MC_OK) {
            mc_free(heap);
            return st;
        }
    } else {
        memcpy(rows, local, sizeof(float) * (size_t)n);
    }
    double scale = normalizer / 1000.0;
    double mins[MC_TIMERS_MAX], maxs[MC_TIMERS_MAX];
    double *per_rank = mc_alloc(sizeof(double) * (size_t)n * (size_t)world);
    if (!per_rank) {
        mc_free(heap);
        return mc_error(MC_ERR_NOMEM, "timers: no memory for %d ranks", world);
    }
    for (int k = 0; k < n; k++) {
        float lo = 0, hi = 0;
        bool any = false;
        for (int r = 0; r < world; r++) {
            float v = rows[(size_t)r * (size_t)n + (size_t)k];
            per_rank[(size_t)k * (size_t)world + (size_t)r] = (double)v / scale;
            if (v > 0.0f) {
                lo = any && lo < v ? lo : v;
                hi = any && hi > v ? hi : v;
                any = true;
            }
        }
        mins[k] = (double)lo / scale;
        maxs[k] = (double)hi / scale;
    }
    *len = mc_log_format_timers(buf, bufn, t->option, n, names, mins, maxs, per_rank, world);
    mc_free(per_rank);
    mc_free(heap);
    return MC_OK;
}
