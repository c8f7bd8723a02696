/* The "timed" backend wrapper: per-op timers for the step breakdown (bench/train_step
 * --breakdown, docs/performance.md). It forwards every op unchanged to an inner backend and adds
 * the wall time (CLOCK_MONOTONIC) and the process CPU time (CLOCK_PROCESS_CPUTIME_ID, every
 * thread's) of each call to the op's class; GEMMs are kept per shape and transposes. The numbers
 * are the inner backend's bits: the wrapper reads clocks around the calls and nothing else. Off
 * unless a program wraps its backend with it (nothing in the library does). */
#ifndef MC_TIMED_BACKEND_H
#define MC_TIMED_BACKEND_H

#include "backend/backend.h"

#include <stdio.h>

/* Wraps inner (which stays the caller's: free it after the wrapper). */
mc_status mc_timed_backend_create(struct mc_backend *inner, struct mc_backend **out);
void mc_timed_backend_free(struct mc_backend *be); /* the wrapper only; NULL does nothing */
/* Clears every timer (call after the warm-up steps). */
void mc_timed_backend_reset(struct mc_backend *be);
/* Prints the table, per step over `steps` steps, as fractions of the measured step times
 * (wall and process CPU seconds summed over those steps); the time outside every op is the
 * "rest (outside backend ops)" row. */
void mc_timed_backend_report(const struct mc_backend *be, FILE *f, int steps, double step_wall,
                             double step_cpu);

#endif /* MC_TIMED_BACKEND_H */
