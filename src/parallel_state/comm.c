/* MPI wrappers for parallel_state, DDP and the training loop: the role torch.distributed
 * plays for Megatron (init_process_group, all_reduce, barrier). Every communicator returns
 * errors (MPI_ERRORS_RETURN) and every failure becomes an mc_status naming the collective;
 * pretrain_gpt then prints it and brings the job down with mc_comm_abort. */
#include "parallel_state/parallel_state.h"

#include <stdlib.h>
#include <string.h>

/* Communication counters (MC_COMM_STATS=1): [kind][verb] calls, payload and ring wire bytes. */
static double g_stat[MC_COMM_KIND_NUM][MC_COMM_VERB_NUM][3];
enum { STAT_REGISTRY = 32 };
static struct { const void *comm; enum mc_comm_kind kind; } g_reg[STAT_REGISTRY];
static int g_nreg;

void mc_comm_stats_register(const void *comm, enum mc_comm_kind kind)
{
    if (!comm)
        return;
    for (int i = 0; i < g_nreg; i++)
        if (g_reg[i].comm == comm) { /* a freed and reused handle: the newest group wins */
            g_reg[i].kind = kind;
            return;
        }
    if (g_nreg < STAT_REGISTRY) {
        g_reg[g_nreg].comm = comm;
        g_reg[g_nreg++].kind = kind;
    }
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

#if defined(MC_HAVE_MPI)
#include <mpi.h>
#include <stdio.h>

static MPI_Comm g_world = MPI_COMM_NULL;
static bool g_we_initialized;

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
        mc_comm_wait_begin_op("all-reduce", what);
        int rc = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)done * esize, chunk,
                               mpi_type(type), op == MC_COMM_SUM ? MPI_SUM : MPI_MAX,
                               *(MPI_Comm *)comm);
        mc_comm_wait_end();
        if (rc != MPI_SUCCESS)
            return comm_error(rc, what);
        done += chunk;
    }
    return MC_OK;
}

int mc_comm_wait_request(void *mpi_request, const char *what)
{
    mc_comm_wait_begin(what);
    int rc = MPI_Wait((MPI_Request *)mpi_request, MPI_STATUS_IGNORE);
    mc_comm_wait_end();
    return rc;
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
    mc_comm_wait_begin_op("all-gather", what);
    int rc = MPI_Allgather(local, (int)n_local, mpi_type(type), full, (int)n_local,
                           mpi_type(type), *(MPI_Comm *)comm);
    mc_comm_wait_end();
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
    mc_comm_wait_begin_op("reduce-scatter", what);
    int rc = MPI_Reduce_scatter_block(full, local, (int)n_local, mpi_type(type), MPI_SUM,
                                      *(MPI_Comm *)comm);
    mc_comm_wait_end();
    return rc == MPI_SUCCESS ? MC_OK : comm_error(rc, what);
}

mc_status mc_comm_barrier(void *comm)
{
    if (!comm)
        return MC_OK;
    mc_comm_wait_begin("barrier");
    int rc = MPI_Barrier(*(MPI_Comm *)comm);
    mc_comm_wait_end();
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
    double *all = rank == 0 ? mc_alloc(sizeof(double) * (size_t)n * (size_t)size) : NULL;
    if (rank == 0 && !all) {
        fprintf(stderr, "MC_COMM_STATS: out of memory gathering the counters\n");
        return; /* the other ranks' gather still needs a root buffer */
    }
    if (MPI_Gather(&g_stat[0][0][0], n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, g_world) ==
            MPI_SUCCESS && rank == 0) {
        for (int r = 0; r < size; r++)
            for (int k = 0; k < MC_COMM_KIND_NUM; k++)
                for (int v = 0; v < MC_COMM_VERB_NUM; v++) {
                    const double *c =
                        all + (size_t)r * (size_t)n + (k * MC_COMM_VERB_NUM + v) * 3;
                    if (c[0] > 0)
                        printf("comm-stats rank=%d group=%s op=%s calls=%.0f payload_bytes=%.0f "
                               "wire_bytes=%.0f\n", r, kind_name[k], verb_name[v], c[0], c[1],
                               c[2]);
                }
        fflush(stdout);
    }
    mc_free(all);
}

void mc_comm_finalize(void)
{
    int fin = 0;
    mc_comm_watchdog_stop();
    MPI_Finalized(&fin);
    if (!fin && g_world != MPI_COMM_NULL && stats_enabled())
        stats_print();
    if (g_we_initialized && !fin)
        MPI_Finalize();
    g_world = MPI_COMM_NULL;
}

#else /* no MPI: one process */

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
