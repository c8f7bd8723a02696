/* The communication layer: the only file of megatron.c that calls MPI (the role
 * torch.distributed plays for Megatron: init_process_group, new_group, all_reduce,
 * all_gather_into_tensor, reduce_scatter_tensor, batch_isend_irecv, barrier). Every
 * communicator returns errors (MPI_ERRORS_RETURN) and every failure becomes an mc_status
 * naming the operation; pretrain_gpt then prints it and brings the job down with
 * mc_comm_abort. Every wait goes through the idle, watched wait (wait_all) and every call that
 * moves data through the MC_COMM_STATS counters, both here. */
#include "parallel_state/parallel_state.h"

#include <limits.h>
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

/* Sums and maxima need arithmetic MPI has: none over bf16/f16 (moving them is fine). */
static mc_status check_type(enum mc_dtype t, bool reduce, const char *what)
{
    if ((unsigned)t >= MC_DTYPE_COUNT)
        return mc_error(MC_ERR_INTERNAL, "%s: dtype %d is not one of megatron.h's", what, (int)t);
    if (reduce && (t == MC_DTYPE_BF16 || t == MC_DTYPE_F16))
        return mc_error(MC_ERR_UNSUPPORTED, "%s: a reduction over %s is not supported (MPI has "
                        "no half-precision arithmetic; reduce in float32)", what,
                        mc_dtype_name(t));
    return MC_OK;
}

/* One call's count, checked against MPI's int counts. */
static mc_status int_count(int64_t n, const char *what)
{
    if (n > INT_MAX)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: %lld elements in one call (MPI counts are int: "
                        "at most 2^31-1)", what, (long long)n);
    return MC_OK;
}

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

static MPI_Comm g_world = MPI_COMM_NULL;
static bool g_we_initialized;
static mc_status comm_error(int rc, const char *what);

/* ---- requests: an MPI_Request kept in mc_comm_request's opaque bytes ---------------------- */
_Static_assert(sizeof(MPI_Request) <= sizeof(((mc_comm_request *)0)->impl),
               "mc_comm_request too small for this MPI's MPI_Request");

static MPI_Request req_get(const mc_comm_request *r)
{
    MPI_Request m = MPI_REQUEST_NULL;
    if (r->active)
        memcpy(&m, r->impl, sizeof(m));
    return m;
}

static void req_set(mc_comm_request *r, MPI_Request m)
{
    memset(r, 0, sizeof(*r));
    if (m != MPI_REQUEST_NULL) {
        memcpy(r->impl, &m, sizeof(m));
        r->active = true;
    }
}

enum { WAIT_MAX = 8 }; /* requests in one wait (p2p awaits 4) */

mc_status mc_comm_wait(int n, mc_comm_request *reqs, const void *comm, const char *op,
                       const char *what)
{
    MPI_Request m[WAIT_MAX];
    if (n < 0 || n > WAIT_MAX)
        return mc_error(MC_ERR_INTERNAL, "%s: %d requests in one wait (at most %d)", what, n,
                        WAIT_MAX);
    for (int i = 0; i < n; i++)
        m[i] = req_get(&reqs[i]);
    int rc = wait_all(n, m, comm, op, what);
    for (int i = 0; i < n; i++)
        req_set(&reqs[i], m[i]);
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, what);
}

bool mc_comm_test(mc_comm_request *req)
{
    MPI_Request m = req_get(req);
    int done = 0;
    MPI_Test(&m, &done, MPI_STATUS_IGNORE);
    req_set(req, m);
    return done != 0;
}

void mc_comm_drain(mc_comm_request *req)
{
    MPI_Request m = req_get(req);
    MPI_Wait(&m, MPI_STATUS_IGNORE);
    req_set(req, m);
}

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

bool mc_comm_available(void) { return true; }

void *mc_comm_world_handle(void) { return g_world == MPI_COMM_NULL ? NULL : &g_world; }

mc_status mc_comm_size_rank(const void *comm, int *size, int *rank)
{
    *size = 1;
    *rank = 0;
    if (!comm)
        return MC_OK;
    MPI_Comm c = *(const MPI_Comm *)comm;
    int rc = MPI_Comm_size(c, size);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(c, rank);
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, "MPI_Comm_size/rank");
}

mc_status mc_comm_world(void *world_comm, int *size, int *rank)
{
    return mc_comm_size_rank(world_comm, size, rank);
}

mc_status mc_comm_node_rank(const void *comm, int *local_rank)
{
    *local_rank = 0;
    if (!comm)
        return MC_OK;
    MPI_Comm c = *(const MPI_Comm *)comm, node;
    int rank = 0;
    int rc = MPI_Comm_rank(c, &rank);
    if (rc == MPI_SUCCESS) /* the ranks sharing this node's memory, in comm's rank order */
        rc = MPI_Comm_split_type(c, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS)
        return comm_error(rc, "MPI_Comm_rank/split_type (the ranks of this node)");
    rc = MPI_Comm_rank(node, local_rank);
    MPI_Comm_free(&node);
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, "MPI_Comm_rank on the node");
}

mc_status mc_comm_split(const void *comm, int color, int key, void **out, const char *what)
{
    *out = NULL;
    if (!comm)
        return mc_error(MC_ERR_INTERNAL, "%s: no communicator to split", what);
    MPI_Comm *c = mc_alloc(sizeof(*c));
    if (!c)
        return MC_ERR_NOMEM;
    int rc = MPI_Comm_split(*(const MPI_Comm *)comm, color < 0 ? MPI_UNDEFINED : color, key, c);
    if (rc != MPI_SUCCESS || *c == MPI_COMM_NULL) { /* a negative color: in no group */
        mc_free(c);
        return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, what);
    }
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    *out = c;
    return MC_OK;
}

void mc_comm_free(void *comm)
{
    if (!comm)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Comm_free((MPI_Comm *)comm);
    mc_free(comm);
}

/* bf16 and f16 travel as 16-bit words (check_type keeps them out of reductions). */
static MPI_Datatype mpi_type(enum mc_dtype t)
{
    switch (t) {
    case MC_DTYPE_F32: return MPI_FLOAT;
    case MC_DTYPE_F64: return MPI_DOUBLE;
    case MC_DTYPE_I64: return MPI_INT64_T;
    case MC_DTYPE_I32: return MPI_INT32_T;
    case MC_DTYPE_I16: return MPI_INT16_T;
    case MC_DTYPE_I8: return MPI_INT8_T;
    case MC_DTYPE_U8:
    case MC_DTYPE_BOOL: return MPI_UINT8_T; /* one byte, 0 or 1 */
    case MC_DTYPE_BF16:
    case MC_DTYPE_F16: return MPI_UINT16_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(enum mc_comm_op op) { return op == MC_COMM_SUM ? MPI_SUM : MPI_MAX; }

static int group_size(const void *comm)
{
    int gsize = 1;
    MPI_Comm_size(*(const MPI_Comm *)comm, &gsize);
    return gsize;
}

mc_status mc_comm_all_reduce(void *comm, void *buf, int64_t n, enum mc_dtype type,
                             enum mc_comm_op op, const char *what)
{
    mc_status st = check_type(type, true, what);
    if (st || !comm)
        return st;
    size_t esize = mc_dtype_size(type);
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_ALL_REDUCE, (double)n * (double)esize,
                      group_size(comm));
    for (int64_t done = 0; done < n;) { /* MPI counts are int */
        int chunk = n - done > (1 << 30) ? (1 << 30) : (int)(n - done);
        MPI_Request r;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + (size_t)done * esize, chunk,
                                mpi_type(type), mpi_op(op), *(MPI_Comm *)comm, &r);
        if (rc == MPI_SUCCESS)
            rc = wait_all(1, &r, comm, "all-reduce", what);
        if (rc != MPI_SUCCESS)
            return comm_error(rc, what);
        done += chunk;
    }
    return MC_OK;
}

mc_status mc_comm_iall_reduce(void *comm, void *buf, int64_t n, enum mc_dtype type,
                              enum mc_comm_op op, const char *what, mc_comm_request *req)
{
    memset(req, 0, sizeof(*req));
    mc_status st = check_type(type, true, what);
    if (st || !comm || (st = int_count(n, what)))
        return st;
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_ALL_REDUCE,
                      (double)n * (double)mc_dtype_size(type), group_size(comm));
    MPI_Request r;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(type), mpi_op(op),
                            *(MPI_Comm *)comm, &r);
    if (rc != MPI_SUCCESS)
        return comm_error(rc, what);
    req_set(req, r);
    return MC_OK;
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
                             enum mc_dtype type, const char *what)
{
    size_t esize = mc_dtype_size(type);
    mc_status st = check_type(type, false, what);
    if (st)
        return st;
    if (!comm) {
        if (full != local)
            memcpy(full, local, (size_t)n_local * esize);
        return MC_OK;
    }
    int gsize;
    if ((st = block_count(comm, n_local, what, &gsize)) != MC_OK)
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
                                 enum mc_dtype type, const char *what)
{
    size_t esize = mc_dtype_size(type);
    mc_status st = check_type(type, true, what);
    if (st)
        return st;
    if (!comm) {
        if (full != local)
            memcpy(local, full, (size_t)n_local * esize);
        return MC_OK;
    }
    int gsize;
    if ((st = block_count(comm, n_local, what, &gsize)) != MC_OK)
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

mc_status mc_comm_iall_gather_in_place(void *comm, void *full, int64_t n_local,
                                       enum mc_dtype type, const char *what,
                                       mc_comm_request *req)
{
    memset(req, 0, sizeof(*req));
    int gsize;
    mc_status st = check_type(type, false, what);
    if (st || !comm || (st = block_count(comm, n_local, what, &gsize)))
        return st;
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_ALL_GATHER,
                      (double)n_local * gsize * (double)mc_dtype_size(type), gsize);
    MPI_Request r;
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, full, (int)n_local,
                            mpi_type(type), *(MPI_Comm *)comm, &r);
    if (rc != MPI_SUCCESS)
        return comm_error(rc, what);
    req_set(req, r);
    return MC_OK;
}

mc_status mc_comm_ireduce_scatter(void *comm, void *local, const void *full, int64_t n_local,
                                  enum mc_dtype type, const char *what, mc_comm_request *req)
{
    memset(req, 0, sizeof(*req));
    size_t esize = mc_dtype_size(type);
    int gsize;
    mc_status st = check_type(type, true, what);
    if (st)
        return st;
    if (!comm) {
        if (full != local)
            memcpy(local, full, (size_t)n_local * esize);
        return MC_OK;
    }
    if ((st = block_count(comm, n_local, what, &gsize)))
        return st;
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_REDUCE_SCATTER,
                      (double)n_local * gsize * (double)esize, gsize);
    MPI_Request r;
    int rc = MPI_Ireduce_scatter_block(full, local, (int)n_local, mpi_type(type), MPI_SUM,
                                       *(MPI_Comm *)comm, &r);
    if (rc != MPI_SUCCESS)
        return comm_error(rc, what);
    req_set(req, r);
    return MC_OK;
}

mc_status mc_comm_batch_isend_irecv(void *comm, enum mc_dtype type,
                                    const struct mc_comm_p2p_op *ops, int nops,
                                    const char *what)
{
    for (int i = 0; i < nops; i++)
        memset(ops[i].req, 0, sizeof(*ops[i].req));
    mc_status st = check_type(type, false, what);
    if (st)
        return st;
    if (!comm)
        return mc_error(MC_ERR_INTERNAL, "%s: no communicator", what);
    size_t esize = mc_dtype_size(type);
    double sent = 0, received = 0;
    int rc = MPI_SUCCESS;
    for (int i = 0; i < nops && rc == MPI_SUCCESS; i++) {
        const struct mc_comm_p2p_op *o = &ops[i];
        if ((st = int_count(o->n, what)))
            return st;
        MPI_Request r;
        rc = o->send ? MPI_Isend(o->buf, (int)o->n, mpi_type(type), o->peer, o->tag,
                                 *(MPI_Comm *)comm, &r)
                     : MPI_Irecv(o->buf, (int)o->n, mpi_type(type), o->peer, o->tag,
                                 *(MPI_Comm *)comm, &r);
        if (rc == MPI_SUCCESS)
            req_set(o->req, r);
        *(o->send ? &sent : &received) += (double)o->n * (double)esize;
    }
    if (rc != MPI_SUCCESS)
        return comm_error(rc, what);
    /* one call per batch and direction, as Megatron's batched p2p ops */
    int gsize = group_size(comm);
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_SEND, sent, gsize);
    mc_comm_stats_add(mc_comm_stats_kind(comm), MC_COMM_RECV, received, gsize);
    return MC_OK;
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

bool mc_comm_available(void) { return false; }

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

mc_status mc_comm_size_rank(const void *comm, int *size, int *rank)
{
    (void)comm;
    *size = 1;
    *rank = 0;
    return MC_OK;
}

mc_status mc_comm_world(void *world_comm, int *size, int *rank)
{
    return mc_comm_size_rank(world_comm, size, rank);
}

mc_status mc_comm_node_rank(const void *comm, int *local_rank)
{
    (void)comm;
    *local_rank = 0;
    return MC_OK;
}

mc_status mc_comm_split(const void *comm, int color, int key, void **out, const char *what)
{
    (void)comm; (void)color; (void)key;
    *out = NULL;
    return mc_error(MC_ERR_UNSUPPORTED, "%s: this build of megatron.c has no MPI (rebuild with "
                    "an MPI installation)", what);
}

void mc_comm_free(void *comm) { mc_free(comm); }

/* Without MPI every communicator is NULL: one rank, whose collectives are no-ops or copies. */
mc_status mc_comm_all_reduce(void *comm, void *buf, int64_t n, enum mc_dtype type,
                             enum mc_comm_op op, const char *what)
{
    (void)comm; (void)buf; (void)n; (void)op;
    return check_type(type, true, what);
}

mc_status mc_comm_iall_reduce(void *comm, void *buf, int64_t n, enum mc_dtype type,
                              enum mc_comm_op op, const char *what, mc_comm_request *req)
{
    memset(req, 0, sizeof(*req));
    return mc_comm_all_reduce(comm, buf, n, type, op, what);
}

mc_status mc_comm_all_gather(void *comm, void *full, const void *local, int64_t n_local,
                             enum mc_dtype type, const char *what)
{
    (void)comm;
    mc_status st = check_type(type, false, what);
    if (!st && full != local)
        memcpy(full, local, (size_t)n_local * mc_dtype_size(type));
    return st;
}

mc_status mc_comm_iall_gather_in_place(void *comm, void *full, int64_t n_local,
                                       enum mc_dtype type, const char *what,
                                       mc_comm_request *req)
{
    (void)comm; (void)full; (void)n_local;
    memset(req, 0, sizeof(*req));
    return check_type(type, false, what);
}

mc_status mc_comm_reduce_scatter(void *comm, void *local, const void *full, int64_t n_local,
                                 enum mc_dtype type, const char *what)
{
    (void)comm;
    mc_status st = check_type(type, true, what);
    if (!st && full != local)
        memcpy(local, full, (size_t)n_local * mc_dtype_size(type));
    return st;
}

mc_status mc_comm_ireduce_scatter(void *comm, void *local, const void *full, int64_t n_local,
                                  enum mc_dtype type, const char *what, mc_comm_request *req)
{
    memset(req, 0, sizeof(*req));
    return mc_comm_reduce_scatter(comm, local, full, n_local, type, what);
}

mc_status mc_comm_batch_isend_irecv(void *comm, enum mc_dtype type,
                                    const struct mc_comm_p2p_op *ops, int nops,
                                    const char *what)
{
    (void)comm; (void)type;
    for (int i = 0; i < nops; i++)
        memset(ops[i].req, 0, sizeof(*ops[i].req));
    return mc_error(MC_ERR_UNSUPPORTED, "%s: point-to-point messages need an MPI build of "
                    "megatron.c", what);
}

mc_status mc_comm_wait(int n, mc_comm_request *reqs, const void *comm, const char *op,
                       const char *what)
{
    (void)n; (void)reqs; (void)comm; (void)op; (void)what;
    return MC_OK; /* nothing can be in flight */
}

bool mc_comm_test(mc_comm_request *req)
{
    (void)req;
    return true;
}

void mc_comm_drain(mc_comm_request *req) { (void)req; }

mc_status mc_comm_barrier(void *comm)
{
    (void)comm;
    return MC_OK;
}

void mc_comm_abort(int code) { (void)code; }
void mc_comm_finalize(void)
{
    (void)stats_enabled;
    (void)int_count;
    mc_comm_watchdog_stop();
}

#endif
