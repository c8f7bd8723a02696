/* The collective watchdog: megatron.c's counterpart of the timeout torch.distributed gets from
 * --distributed-timeout-minutes (init_process_group(timeout=...) in Megatron's
 * initialize.py, enforced by the NCCL watchdog thread). MPI has no timeout on a blocking
 * collective, so a rank that hangs (or dies under a launcher that does not tear the job down)
 * would leave the others waiting forever. Every wait on MPI (comm.c's mc_comm_wait, under
 * every collective and point-to-point call of the project) brackets the call with
 * mc_comm_wait_begin / mc_comm_wait_end; a thread wakes a few times per timeout and, when one
 * wait has lasted longer than the timeout, prints what this rank was waiting for and brings
 * the whole job down with MPI_Abort.
 *
 * Cost on the hot path: two relaxed atomic increments per MPI call, no clock reads. The
 * watchdog samples a sequence number (odd while a wait is in progress); seeing the same odd
 * number for longer than the timeout means one wait has not returned. */
#include "parallel_state/parallel_state.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_ulong g_seq;                 /* odd while this rank waits in MPI */
static _Atomic(const char *) g_what;       /* what the current wait is */
static _Atomic(const char *) g_op;         /* the collective it is in, or NULL */
static _Atomic(const void *) g_comm;       /* the communicator it waits on, or NULL */

static struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool running, stop;
    double timeout_s, poll_s;
    int rank;
    char source[96]; /* where the limit came from, for the message */
} g_dog = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

void mc_comm_wait_begin(const char *what) { mc_comm_wait_begin_op(NULL, what); }

void mc_comm_wait_begin_op(const char *op, const char *what)
{
    mc_comm_wait_begin_on(NULL, op, what);
}

void mc_comm_wait_begin_on(const void *comm, const char *op, const char *what)
{
    atomic_store_explicit(&g_comm, comm, memory_order_relaxed);
    atomic_store_explicit(&g_op, op, memory_order_relaxed);
    atomic_store_explicit(&g_what, what, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_seq, 1, memory_order_release);
}

void mc_comm_wait_end(void)
{
    atomic_fetch_add_explicit(&g_seq, 1, memory_order_release);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints once and ends the job; runs on the watchdog thread while the main thread is stuck
 * inside MPI, so it neither returns nor touches the main thread's state. */
static void fire(double waited)
{
    const char *what = atomic_load_explicit(&g_what, memory_order_relaxed);
    const char *op = atomic_load_explicit(&g_op, memory_order_relaxed);
    /* the registry is written only while groups are made, never during a wait */
    const char *peers = mc_comm_peers(atomic_load_explicit(&g_comm, memory_order_relaxed));
    fprintf(stderr, "megatron.c: rank %d: %s%s%s%s%s%s has waited %.1f s, longer than the "
            "distributed timeout (%s): another rank has stopped (hung, crashed or killed) or "
            "the network to it is down; aborting every rank\n", g_dog.rank, op ? op : "",
            op ? " (" : "", what ? what : "an MPI call", op ? ")" : "",
            peers ? " with " : "", peers ? peers : "", waited, g_dog.source);
    fflush(stderr);
    mc_comm_abort(1);
    _exit(1); /* MPI was not running (or MPI_Abort returned): end this process at least */
}

static void *watch(void *arg)
{
    (void)arg;
    unsigned long seen = 0;
    double since = 0;
    pthread_mutex_lock(&g_dog.lock);
    while (!g_dog.stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + g_dog.poll_s;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        int rc = pthread_cond_timedwait(&g_dog.wake, &g_dog.lock, &until);
        if (g_dog.stop || (rc && rc != ETIMEDOUT))
            break;
        unsigned long s = atomic_load_explicit(&g_seq, memory_order_acquire);
        if (!(s & 1)) {
            seen = 0;
        } else if (s != seen) { /* a new wait: it began within the last poll interval */
            seen = s;
            since = now_s();
        } else if (now_s() - since > g_dog.timeout_s) {
            fire(now_s() - since);
        }
    }
    pthread_mutex_unlock(&g_dog.lock);
    return NULL;
}

mc_status mc_comm_watchdog_start(int rank, double timeout_s, const char *source)
{
    if (!(timeout_s > 0))
        return mc_error(MC_ERR_CONFIG, "distributed timeout %g s (%s): expected a positive "
                        "value", timeout_s, source);
    if (g_dog.running)
        return mc_error(MC_ERR_INTERNAL, "the collective watchdog is already running");
    g_dog.rank = rank;
    g_dog.timeout_s = timeout_s;
    /* a few samples per timeout, at most one wake-up per second */
    g_dog.poll_s = timeout_s / 8 < 1.0 ? timeout_s / 8 : 1.0;
    g_dog.stop = false;
    snprintf(g_dog.source, sizeof(g_dog.source), "%s", source);
    int rc = pthread_create(&g_dog.thread, NULL, watch, NULL);
    if (rc)
        return mc_error(MC_ERR_INTERNAL, "cannot start the collective watchdog thread "
                        "(pthread_create: error %d)", rc);
    g_dog.running = true;
    return MC_OK;
}

void mc_comm_watchdog_stop(void)
{
    if (!g_dog.running)
        return;
    pthread_mutex_lock(&g_dog.lock);
    g_dog.stop = true;
    pthread_cond_signal(&g_dog.wake);
    pthread_mutex_unlock(&g_dog.lock);
    pthread_join(g_dog.thread, NULL);
    g_dog.running = false;
}
