/* MPI wrappers for parallel_state, DDP and the training loop: the role torch.distributed
 * plays for Megatron (init_process_group, all_reduce, barrier). Every communicator returns
 * errors (MPI_ERRORS_RETURN) and every failure becomes an mc_status naming the collective;
 * pretrain_gpt then prints it and brings the job down with mc_comm_abort. */
#include "parallel_state/parallel_state.h"

#include <stdlib.h>
#include <string.h>

/* Communication counters (MC_COMM_STATS=1): [kind][verb] calls, payload and ring wire bytes. */
static double g_stat[MC_COMM_KIND_NUM][MC_COMM_VERB_NUM][3];
enum { STAT_REGISTRY = 32, PEERS_MAX = 160 };
/* Each registered communicator's kind, and its other members for the watchdog's message
 * ("world rank 1 on host-b"), written once when the group is made. */
static struct {
    const void *comm;
    enum mc_comm_kind kind;
    char peers[PEERS_MAX];
} g_reg[STAT_REGISTRY];
static int g_nreg;
static void describe_peers(const void *comm, char *buf, size_t n);

void mc_comm_stats_register(const void *comm, enum mc_comm_kind kind)
{
    if (!comm)
        return;
    for (int i = 0; i < g_nreg; i++)
        if (g_reg[i].comm == comm) { /* a freed and reused handle: the newest group wins */
            g_reg[i].kind = kind;
            describe_peers(comm, g_reg[i].peers, PEERS_MAX);
            return;
        }
    if (g_nreg < STAT_REGISTRY) {
        g_reg[g_nreg].comm = comm;
        g_reg[g_nreg].kind = kind;
        describe_peers(comm, g_reg[g_nreg++].peers, PEERS_MAX);
    }
}

const char *mc_comm_peers(const void *comm)
{
    for (int i = 0; comm && i < g_nreg; i++)
        if (g_reg[i].comm == comm)
            return g_reg[i].peers[0] ? g_reg[i].peers : NULL;
    return NULL;
}

enum mc_comm_kind mc_comm_stats_kind(const void *comm)
{
    for (int i = 0; i < g_nreg; i++)
        if (g_reg[i].comm == comm)
            return g_reg[i].kind;
    return MC_COMM_KIND_OTHER;
}

void mc_comm_stats_add(enum mc_comm_kind kind, enum mc_comm_verb verb, double bytes, int n)
{
    /* bytes one rank sends under a ring (bandwidth-optimal) algorithm */
    double f = n > 1 ? (double)(n - 1) / n : 0.0;
    double wire = verb == MC_COMM_ALL_REDUCE ? 2.0 * f * bytes
                  : verb == MC_COMM_SEND     ? bytes
                  : verb == MC_COMM_RECV     ? 0.0
                                             : f * bytes;
    if (bytes <= 0)
        return;
    g_stat[kind][verb][0] += 1.0;
    g_stat[kind][verb][1] += bytes;
    g_stat[kind][verb][2] += wire;
}

static bool stats_enabled(void)
{
    const char *e = getenv("MC_COMM_STATS");
    return e && *e && *e != '0';
}

/* Time spent in MPI waits (every call that blocks on other ranks): [0] waits, [1] seconds
 * waited, [2] waits that went to sleep, [3] seconds asleep. Main thread only. */
static double g_wait[4];

void mc_comm_wait_totals(double out[4]) { memcpy(out, g_wait, sizeof(g_wait)); }

#if defined(MC_HAVE_MPI)
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- idle waiting --------------------------------------------------------------------------
 * MPI's blocking calls spin in the progress engine for as long as they wait (Open MPI's
 * mpi_yield_when_idle only adds sched_yield, which still burns a core when the core is
 * free), so a rank whose peer is stopped, hung or simply slower burned a whole core until the
 * peer came back or the watchdog fired. Every blocking operation of megatron.c is therefore a
 * non-blocking one plus wait_all: it tests the requests in a tight loop (the fast path: a
 * wait that ends within WAIT_SPIN_S costs what MPI_Wait costs), then sleeps between tests,
 * the sleep doubling from WAIT_SLEEP_MIN_NS to WAIT_SLEEP_MAX_NS. A test that itself took
 * longer than WAIT_WORK_S did work (MPI copied or reduced data inside it: a large transfer
 * in progress), so the spin starts over and a long transfer is never slowed by sleeps.
 * The watchdog bracket surrounds the whole wait; the wait and sleep seconds are counted for
 * MC_COMM_STATS (comm-wait lines). */
#define WAIT_SPIN_S 1e-3
#define WAIT_WORK_S 20e-6
#define WAIT_SLEEP_MIN_NS 10000L
#define WAIT_SLEEP_MAX_NS 1000000L

static int wait_all(int n, MPI_Request *req, const void *comm, const char *op, const char *what)
{
    int done = 0;
    mc_comm_wait_begin_on(comm, op, what);
    double t0 = now_s(), busy = t0, slept = 0;
    long sleep_ns = WAIT_SLEEP_MIN_NS;
    int rc;
    for (;;) {
        double t = now_s();
        rc = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS || done)
            break;
        double after = now_s();
        if (after - t > WAIT_WORK_S) { /* MPI moved data inside the test: keep spinning */
            busy = after;
            sleep_ns = WAIT_SLEEP_MIN_NS;
        }
        if (after - busy < WAIT_SPIN_S)
            continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        slept += now_s() - after;
        sleep_ns = sleep_ns * 2 > WAIT_SLEEP_MAX_NS ? WAIT_SLEEP_MAX_NS : sleep_ns * 2;
    }
    mc_comm_wait_end();
    g_wait[0] += 1;
    g_wait[1] += now_s() - t0;
    g_wait[2] += slept > 0;
    g_wait[3] += slept;
    return rc;
}

int mc_comm_wait_requests(int n, void *mpi_requests, const void *comm, const char *op,
                          const char *what)
{
    return wait_all(n, (MPI_Request *)mpi_requests, comm, op, what);
}

static MPI_Comm g_world = MPI_COMM_NULL;
static bool g_we_initialized;
static mc_status comm_error(int rc, const char *what);

/* Every world rank's host (MPI_Get_processor_name, cut to HOST_MAX - 1 bytes), gathered once
 * at mc_comm_init so that a timed-out wait can name the ranks and hosts it waited for. */
enum { HOST_MAX = 48 };
static char (*g_hosts)[HOST_MAX];
static int g_world_size;

static mc_status gather_hosts(void)
{
    char me[MPI_MAX_PROCESSOR_NAME] = "", mine[HOST_MAX] = "";
    int len = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Get_processor_name(me, &len);
    size_t n = strnlen(me, sizeof(me));
    if (n > sizeof(mine) - 1)
        n = sizeof(mine) - 1; /* a cut host name still tells the user which host */
    memcpy(mine, me, n);
    g_hosts = mc_alloc(sizeof(*g_hosts) * (size_t)g_world_size);
    if (!g_hosts)
        return mc_error(MC_ERR_NOMEM, "host names of %d ranks", g_world_size);
    int rc = MPI_Allgather(mine, HOST_MAX, MPI_CHAR, g_hosts, HOST_MAX, MPI_CHAR,
                           MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, "gathering the ranks' host names");
}

/* "world rank 1 on hostB", "world ranks 1 on hostB, 3 on hostC", ... (the other members of
 * comm; "..." when they do not fit). Local calls only (no communication). */
static void describe_peers(const void *comm, char *buf, size_t n)
{
    buf[0] = 0;
    if (!comm || !g_hosts || *(const MPI_Comm *)comm == MPI_COMM_NULL)
        return;
    MPI_Comm c = *(const MPI_Comm *)comm;
    MPI_Group g, w;
    int size = 0, me = 0;
    MPI_Comm_size(c, &size);
    MPI_Comm_rank(c, &me);
    if (MPI_Comm_group(c, &g) != MPI_SUCCESS)
        return;
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    size_t used = (size_t)snprintf(buf, n, "world rank%s", size > 2 ? "s" : "");
    for (int i = 0, k = 0; i < size && used < n; i++) {
        int wr = MPI_UNDEFINED;
        MPI_Group_translate_ranks(g, 1, &i, w, &wr);
        if (i == me || wr == MPI_UNDEFINED || wr >= g_world_size)
            continue;
        int m = snprintf(buf + used, n - used, "%s %d on %s", k++ ? "," : "", wr, g_hosts[wr]);
        if (m < 0 || used + (size_t)m >= n - 4) {
            snprintf(buf + used, n - used, ", ...");
            break;
        }
        used += (size_t)m;
    }
    MPI_Group_free(&g);
    MPI_Group_free(&w);
}

static mc_status comm_error(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof(msg), "MPI error code %d", rc);
    return mc_error(MC_ERR_COMM, "%s failed: %s", what, msg);
}

mc_status mc_comm_init(int *argc, char ***argv, int64_t world_size, void **world_comm)
{
    *world_comm = NULL;
    if (world_size <= 1)
        return MC_OK;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* only the main thread calls MPI (OpenMP regions never communicate) */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return mc_error(MC_ERR_COMM, "MPI_Init_thread failed (world size %lld)",
                            (long long)world_size);
        g_we_initialized = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm w = MPI_COMM_WORLD;
    int mpi[MC_LAUNCH_NUM_VARS];
    mc_status st = mc_comm_launch_info(&w, mpi);
    if (st || (st = mc_launch_check(mpi)))
        return st;
    if (mpi[MC_LAUNCH_WORLD_SIZE] != world_size) /* not from a variable mc_launch_check saw */
        return mc_error(MC_ERR_COMM, "the launcher's world size (%lld) differs from MPI's (%d)",
                        (long long)world_size, mpi[MC_LAUNCH_WORLD_SIZE]);
    if ((st = gather_hosts()))
        return st;
    g_world = MPI_COMM_WORLD;
    *world_comm = &g_world;
    mc_comm_stats_register(&g_world, MC_COMM_KIND_WORLD);
    return MC_OK;
}

void *mc_comm_world_handle(void) { return g_world == MPI_COMM_NULL ? NULL : &g_world; }

mc_status mc_comm_world(void *world_comm, int *size, int *rank)
{
    *size = 1;
    *rank = 0;
    if (!world_comm)
        return MC_OK;
    MPI_Comm c = *(MPI_Comm *)world_comm;
    int rc = MPI_Comm_size(c, size);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(c, rank);
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, "MPI_Comm_size/rank");
}

static MPI_Datatype mpi_type(enum mc_comm_type t)
{
    return t == MC_COMM_FLOAT ? MPI_FLOAT : t == MC_COMM_DOUBLE ? MPI_DOUBLE : MPI_INT64_T;
}

mc_status mc_comm_all_reduce(void *comm, void *buf, int64_t n, enum mc_comm_type type,
                             enum mc_comm_op op, const char *what)
{
    if (!comm)
        return MC_OK;
    size_t esize = type == MC_COMM_FLOAT ? 4 : 8;
    int gsize = 1;
    MPI_Comm_size(*(MPI_Comm *)comm, &gsize);
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_ALL_REDUCE, (double)n * (double)esize,
                      gsize);
    for (int64_t done = 0; done < n;) { /* MPI counts are int */
        int chunk = n - done > (1 << 30) ? (1 << 30) : (int)(n - done);
        MPI_Request r;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + (size_t)done * esize, chunk,
                                mpi_type(type), op == MC_COMM_SUM ? MPI_SUM : MPI_MAX,
                                *(MPI_Comm *)comm, &r);
        if (rc == MPI_SUCCESS)
            rc = wait_all(1, &r, comm, "all-reduce", what);
        if (rc != MPI_SUCCESS)
            return comm_error(rc, what);
        done += chunk;
    }
    return MC_OK;
}

int mc_comm_wait_request(void *mpi_request, const char *what)
{
    return wait_all(1, (MPI_Request *)mpi_request, NULL, NULL, what);
}

/* One rank's block of an all-gather / reduce-scatter, checked against MPI's int counts. */
static mc_status block_count(void *comm, int64_t n_local, const char *what, int *gsize)
{
    *gsize = 1;
    MPI_Comm_size(*(MPI_Comm *)comm, gsize);
    if (n_local > 0x7fffffff)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: %lld elements per rank over %d ranks (MPI "
                        "counts are int: at most 2^31-1 per rank)", what, (long long)n_local,
                        *gsize);
    return MC_OK;
}

mc_status mc_comm_all_gather(void *comm, void *full, const void *local, int64_t n_local,
                             enum mc_comm_type type, const char *what)
{
    size_t esize = type == MC_COMM_FLOAT ? 4 : 8;
    if (!comm) {
        if (full != local)
            memcpy(full, local, (size_t)n_local * esize);
        return MC_OK;
    }
    int gsize;
    mc_status st = block_count(comm, n_local, what, &gsize);
    if (st != MC_OK)
        return st;
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_ALL_GATHER,
                      (double)n_local * gsize * (double)esize, gsize);
    MPI_Request r;
    int rc = MPI_Iallgather(local, (int)n_local, mpi_type(type), full, (int)n_local,
                            mpi_type(type), *(MPI_Comm *)comm, &r);
    if (rc == MPI_SUCCESS)
        rc = wait_all(1, &r, comm, "all-gather", what);
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, what);
}

mc_status mc_comm_reduce_scatter(void *comm, void *local, const void *full, int64_t n_local,
                                 enum mc_comm_type type, const char *what)
{
    size_t esize = type == MC_COMM_FLOAT ? 4 : 8;
    if (!comm) {
        if (full != local)
            memcpy(local, full, (size_t)n_local * esize);
        return MC_OK;
    }
    int gsize;
    mc_status st = block_count(comm, n_local, what, &gsize);
    if (st != MC_OK)
        return st;
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_REDUCE_SCATTER,
                      (double)n_local * gsize * (double)esize, gsize);
    MPI_Request r;
    int rc = MPI_Ireduce_scatter_block(full, local, (int)n_local, mpi_type(type), MPI_SUM,
                                       *(MPI_Comm *)comm, &r);
    if (rc == MPI_SUCCESS)
        rc = wait_all(1, &r, comm, "reduce-scatter", what);
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, what);
}

mc_status mc_comm_barrier(void *comm)
{
    if (!comm)
        return MC_OK;
    MPI_Request r;
    int rc = MPI_Ibarrier(*(MPI_Comm *)comm, &r);
    if (rc == MPI_SUCCESS)
        rc = wait_all(1, &r, comm, NULL, "barrier");
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, "barrier");
}

void mc_comm_abort(int code)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin)
        MPI_Abort(MPI_COMM_WORLD, code);
}


static const char *const kind_name[MC_COMM_KIND_NUM] = {
    "world", "tp", "dp", "pp", "embedding", "tp-pp", "other"};
static const char *const verb_name[MC_COMM_VERB_NUM] = {
    "all-reduce", "reduce-scatter", "all-gather", "send", "recv"};

/* Rank 0 prints every rank's nonzero counters, one machine-readable line each:
 * comm-stats rank=R group=G op=O calls=C payload_bytes=P wire_bytes=W */
static void stats_print(void)
{
    int size = 1, rank = 0;
    MPI_Comm_size(g_world, &size);
    MPI_Comm_rank(g_world, &rank);
    int n = (int)(sizeof(g_stat) / sizeof(double));
    double *all = rank == 0 ? mc_alloc(sizeof(double) * (size_t)(n + 4) * (size_t)size) : NULL;
    if (rank == 0 && !all) {
        fprintf(stderr, "MC_COMM_STATS: out of memory gathering the counters\n");
        return; /* the other ranks' gather still needs a root buffer */
    }
    /* the counters and this rank's wait totals (the gather's own wait is not in them) */
    double mine[sizeof(g_stat) / sizeof(double) + 4];
    memcpy(mine, g_stat, sizeof(g_stat));
    memcpy(mine + n, g_wait, sizeof(g_wait));
    MPI_Request r;
    int rc = MPI_Igather(mine, n + 4, MPI_DOUBLE, all, n + 4, MPI_DOUBLE, 0, g_world, &r);
    if (rc == MPI_SUCCESS)
        rc = wait_all(1, &r, &g_world, "gather", "MC_COMM_STATS counters");
    if (rc == MPI_SUCCESS && rank == 0) {
        for (int r = 0; r < size; r++)
            for (int k = 0; k < MC_COMM_KIND_NUM; k++)
                for (int v = 0; v < MC_COMM_VERB_NUM; v++) {
                    const double *c =
                        all + (size_t)r * (size_t)(n + 4) + (k * MC_COMM_VERB_NUM + v) * 3;
                    if (c[0] > 0)
                        printf("comm-stats rank=%d group=%s op=%s calls=%.0f payload_bytes=%.0f "
                               "wire_bytes=%.0f\n", r, kind_name[k], verb_name[v], c[0], c[1],
                               c[2]);
                }
        /* comm-wait rank=R waits=N wait_s=S slept_waits=M slept_s=T */
        for (int r = 0; r < size; r++) {
            const double *w = all + (size_t)r * (size_t)(n + 4) + n;
            printf("comm-wait rank=%d waits=%.0f wait_s=%.6f slept_waits=%.0f slept_s=%.6f\n", r,
                   w[0], w[1], w[2], w[3]);
        }
        fflush(stdout);
    }
    mc_free(all);
}

void mc_comm_finalize(void)
{
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && g_world != MPI_COMM_NULL && stats_enabled())
        stats_print(); /* still under the watchdog: a peer gone by now cannot hang it */
    mc_comm_watchdog_stop();
    if (g_we_initialized && !fin)
        MPI_Finalize();
    g_world = MPI_COMM_NULL;
    mc_free(g_hosts);
    g_hosts = NULL;
}

#else /* no MPI: one process */

static void describe_peers(const void *comm, char *buf, size_t n)
{
    (void)comm;
    if (n)
        buf[0] = 0;
}

mc_status mc_comm_init(int *argc, char ***argv, int64_t world_size, void **world_comm)
{
    (void)argc;
    (void)argv;
    *world_comm = NULL;
    if (world_size > 1)
        return mc_error(MC_ERR_UNSUPPORTED, "a world size of %lld: this build of megatron.c "
                        "has no MPI (rebuild with an MPI installation)", (long long)world_size);
    return MC_OK;
}

void *mc_comm_world_handle(void) { return NULL; }

mc_status mc_comm_world(void *world_comm, int *size, int *rank)
{
    (void)world_comm;
    *size = 1;
    *rank = 0;
    return MC_OK;
}

mc_status mc_comm_all_reduce(void *comm, void *buf, int64_t n, enum mc_comm_type type,
                             enum mc_comm_op op, const char *what)
{
    (void)comm; (void)buf; (void)n; (void)type; (void)op; (void)what;
    return MC_OK;
}

mc_status mc_comm_all_gather(void *comm, void *full, const void *local, int64_t n_local,
                             enum mc_comm_type type, const char *what)
{
    (void)comm; (void)what;
    if (full != local)
        memcpy(full, local, (size_t)n_local * (type == MC_COMM_FLOAT ? 4 : 8));
    return MC_OK;
}

mc_status mc_comm_reduce_scatter(void *comm, void *local, const void *full, int64_t n_local,
                                 enum mc_comm_type type, const char *what)
{
    (void)comm; (void)what;
    if (full != local)
        memcpy(local, full, (size_t)n_local * (type == MC_COMM_FLOAT ? 4 : 8));
    return MC_OK;
}

mc_status mc_comm_barrier(void *comm)
{
    (void)comm;
    return MC_OK;
}

void mc_comm_abort(int code) { (void)code; }
void mc_comm_finalize(void)
{
    (void)stats_enabled;
    mc_comm_watchdog_stop();
}

#endif
