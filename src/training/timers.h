/* Named wall-clock timers with levels and the per-interval report: the counterpart of
 * megatron/core/timers.py (Timer, Timers.__call__, Timers.log) of Megatron-LM core_v0.12.1.
 * Collectives stay outside: the caller passes a gather function (MPI_Allgather in the loop). */
#ifndef MC_TRAINING_TIMERS_H
#define MC_TRAINING_TIMERS_H

#include <stddef.h>

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_TIMERS_MAX 48
#define MC_TIMER_NAME_MAX 64

struct mc_timer {
    char name[MC_TIMER_NAME_MAX];
    int level;
    bool started;
    double start_s, elapsed_s, active_s;
};

struct mc_timers {
    int log_level;        /* --timing-log-level: timers above it are no-ops */
    char option[8];       /* --timing-log-option: max, minmax or all */
    int n;
    struct mc_timer t[MC_TIMERS_MAX];
};

/* The timers training_log reports after each printed line, in Megatron's order. */
extern const char *const mc_training_log_timers[];
extern const int mc_training_log_timers_count;

MC_API mc_status mc_timers_init(struct mc_timers *t, int log_level, const char *option);
/* Timers(name, log_level): the timer, created on first use; level < 0 means 2 (the maximum).
 * NULL (a no-op timer) when level > log_level. MC_ASSERT on a level mismatch for an existing
 * timer or when MC_TIMERS_MAX is exceeded (programmer errors, as Megatron's asserts). */
MC_API struct mc_timer *mc_timers_get(struct mc_timers *t, const char *name, int level);
/* NULL-safe: a NULL timer does nothing and reads 0. */
MC_API void mc_timer_start(struct mc_timer *tm);
MC_API void mc_timer_stop(struct mc_timer *tm);
/* Seconds accumulated; with reset the accumulator restarts (a running timer keeps running). */
MC_API double mc_timer_elapsed(struct mc_timer *tm, bool reset);

/* Gathers every rank's row of n float32 seconds: all[r * n + k]; sets *world. */
typedef mc_status (*mc_timers_gather_fn)(void *ctx, const float *local, int n, float *all,
                                         int max_world, int *world);

/* Timers.log's text (empty when nothing qualifies): elapsed seconds of `names` on every rank
 * (missing timers read 0), reset when asked, shown in ms divided by normalizer, in the
 * --timing-log-option layout. gather NULL means a single rank. *len gets the text length. */
MC_API mc_status mc_timers_log_string(struct mc_timers *t, const char *const *names, int n,
                                      double normalizer, bool reset, mc_timers_gather_fn gather,
                                      void *ctx, char *buf, size_t bufn, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
