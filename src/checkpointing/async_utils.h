/* Asynchronous checkpoint saves (--async-save): a queue of saves whose files a background
 * thread writes while training goes on, finalized in order on the main thread once every rank's
 * writer is done. Mirrors AsyncRequest / TemporalAsyncCaller / AsyncCallsQueue of
 * megatron/core/dist_checkpointing/strategies/async_utils.py (Megatron-LM core_v0.12.1), with a
 * thread where Megatron forks a process. Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_ASYNC_UTILS_H
#define MC_CHECKPOINTING_ASYNC_UTILS_H

#include <stdbool.h>
#include <stdint.h>

#include "megatron.h"

/* One save: `write` runs on the writer thread and must make no MPI call (the comm layer is not
 * thread-safe): it writes files, nothing else. `finalize` runs later on the main thread of every
 * rank, in the order the saves were scheduled, once every rank's writer has finished; it gets
 * the writer's status (its message is the thread's mc_last_error(), set again on the main
 * thread) and may use collectives. `free` releases ctx after finalize (or when abandoned).
 * `all_ok` (NULL: one process) is the collective that tells whether every rank is done: *ok in,
 * this rank's answer; out, the AND over all ranks (Megatron's all_reduce of is_alive). */
struct mc_async_request {
    mc_status (*write)(void *ctx);
    mc_status (*finalize)(void *ctx, mc_status written);
    void (*free)(void *ctx);
    /* After an error, instead of finalize (NULL: nothing): removes what the save wrote, so no
     * half-written iter_N.tmp directory outlives a run that stopped cleanly. */
    void (*abandon)(void *ctx);
    void *ctx;
    mc_status (*all_ok)(void *comm_ctx, bool *ok);
    void *comm_ctx;
};

struct mc_async_call; /* a scheduled request with its thread */

/* AsyncCallsQueue: zero-initialized is empty. */
struct mc_async_queue {
    struct mc_async_call *head, *tail;
    int n;
};

/* schedule_async_request: starts r.write on a new thread; the queue owns r.ctx from here (also
 * when this fails: then ctx is freed and the error returned). */
mc_status mc_async_queue_schedule(struct mc_async_queue *q, const struct mc_async_request *r);

/* maybe_finalize_async_calls: every rank calls it at the same points. While the oldest save is
 * done on every rank (blocking: waits for it), joins its thread and runs its finalize. Returns
 * the first finalize's error (the later saves stay queued). */
mc_status mc_async_queue_maybe_finalize(struct mc_async_queue *q, bool blocking);

/* get_num_unfinalized_calls: the same on every rank. */
int mc_async_queue_unfinalized(const struct mc_async_queue *q);

/* After an error: waits for the writers still running, abandons their saves unfinalized (their
 * iter_N.tmp directories are never renamed, and their abandon removes them; the last good
 * checkpoint stays the tracker's). */
void mc_async_queue_abandon(struct mc_async_queue *q);

/* Test only (MC_TEST_SLOW_WRITE=ms, docs/formats/checkpoint.md): a torch_dist save waits this
 * long before each item it writes, so that a test can kill a run in the middle of a save. */
void mc_async_test_slow_write(void);

#endif
