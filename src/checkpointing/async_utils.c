/* The queue of asynchronous checkpoint saves (megatron/core/dist_checkpointing/strategies/
 * async_utils.py, Megatron-LM core_v0.12.1): AsyncCallsQueue.schedule_async_request starts the
 * writer (TemporalAsyncCaller forks a process; here a pthread, as the snapshot the writer reads
 * is already private), maybe_finalize_async_calls checks with one collective that every rank's
 * writer is done (sync_all_async_calls' all_reduce of is_alive), joins it and runs the request's
 * finalize functions, oldest first. The writer thread only writes files: every collective stays
 * on the main thread, at the points where all ranks call in. */
#include "checkpointing/async_utils.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct mc_async_call {
    struct mc_async_request r;
    pthread_t thread;
    atomic_bool done; /* set by the writer as its last act */
    mc_status st;     /* the writer's outcome and message, read after the join */
    char msg[1024];
    struct mc_async_call *next;
};

static void *writer_main(void *arg)
{
    struct mc_async_call *c = arg;
    omp_set_num_threads(1); /* this thread's own setting: the cores stay with training */
    c->st = c->r.write(c->r.ctx);
    if (c->st)
        snprintf(c->msg, sizeof(c->msg), "%s", mc_last_error());
    atomic_store_explicit(&c->done, true, memory_order_release);
    return NULL;
}

mc_status mc_async_queue_schedule(struct mc_async_queue *q, const struct mc_async_request *r)
{
    struct mc_async_call *c = mc_calloc(1, sizeof(*c));
    if (!c) {
        r->free(r->ctx);
        return mc_error(MC_ERR_NOMEM, "--async-save: out of memory scheduling a save");
    }
    c->r = *r;
    atomic_init(&c->done, false);
    int e = pthread_create(&c->thread, NULL, writer_main, c);
    if (e) {
        r->free(r->ctx);
        mc_free(c);
        return mc_error(MC_ERR_INTERNAL, "--async-save: cannot start the checkpoint writer thread "
                        "(pthread_create: error %d)", e);
    }
    if (q->tail)
        q->tail->next = c;
    else
        q->head = c;
    q->tail = c;
    q->n++;
    return MC_OK;
}

static struct mc_async_call *pop(struct mc_async_queue *q)
{
    struct mc_async_call *c = q->head;
    q->head = c->next;
    if (!q->head)
        q->tail = NULL;
    q->n--;
    return c;
}

mc_status mc_async_queue_maybe_finalize(struct mc_async_queue *q, bool blocking)
{
    while (q->head) {
        struct mc_async_call *c = q->head;
        bool done = atomic_load_explicit(&c->done, memory_order_acquire);
        if (c->r.all_ok) { /* done on every rank? (every rank asks, blocking or not) */
            mc_status st = c->r.all_ok(c->r.comm_ctx, &done);
            if (st)
                return st;
        }
        if (!done && !blocking)
            return MC_OK;
        pthread_join(c->thread, NULL); /* blocking: waits for this rank's writer */
        pop(q);
        mc_status wst = c->st;
        if (wst)
            mc_error(wst, "%s", c->msg); /* the writer's message, on this thread */
        mc_status st = c->r.finalize(c->r.ctx, wst);
        c->r.free(c->r.ctx);
        mc_free(c);
        if (st)
            return st;
    }
    return MC_OK;
}

int mc_async_queue_unfinalized(const struct mc_async_queue *q) { return q->n; }

void mc_async_queue_abandon(struct mc_async_queue *q)
{
    while (q->head) {
        struct mc_async_call *c = pop(q);
        pthread_join(c->thread, NULL);
        if (c->r.abandon)
            c->r.abandon(c->r.ctx);
        c->r.free(c->r.ctx);
        mc_free(c);
    }
}

void mc_async_test_slow_write(void)
{
    const char *ms = getenv("MC_TEST_SLOW_WRITE");
    long v = ms ? atol(ms) : 0;
    if (v > 0) {
        struct timespec t = {v / 1000, (v % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
}
