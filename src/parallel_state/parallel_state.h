/* Model-parallel process groups: the counterpart of megatron/core/parallel_state.py
 * (RankGenerator, initialize_model_parallel and the get_* getters) over MPI communicators, and
 * the thin MPI wrappers of comm.c. Private header.
 *
 * Ranks are laid out as Megatron's mixed-radix numbering over the order string (default
 * "tp-cp-ep-dp-pp", first token varies fastest), so a rank holds the same tensor, pipeline and
 * data-parallel coordinates as under Megatron with the same sizes (spec:
 * megatron-model-parallel-ckpt.md section 1). */
#ifndef MC_PARALLEL_STATE_H
#define MC_PARALLEL_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "megatron.h"

/* ---- RankGenerator: pure arithmetic, no communication ----------------------------------- */
#define MC_RANK_GEN_DIMS 5

struct mc_rank_gen {
    int ndims;
    char names[MC_RANK_GEN_DIMS][3]; /* in order, first = fastest varying */
    int sizes[MC_RANK_GEN_DIMS];
    int world;
    int rank_offset;
};

/* Megatron's RankGenerator(tp, ep, dp, pp, cp, order, rank_offset): size-1 dimensions missing
 * from order are appended; a dimension > 1 missing from it, an unknown or repeated token, or
 * ep > 1 together with cp > 1 is MC_ERR_CONFIG. */
mc_status mc_rank_gen_init(struct mc_rank_gen *g, int tp, int ep, int dp, int pp, int cp,
                           const char *order, int rank_offset);
/* get_ranks(token) ("dp", "tp-pp", ...): ranks[num_groups * group_size], group-major, in
 * Megatron's group and member order. ranks must hold g->world ints. */
mc_status mc_rank_gen_get_ranks(const struct mc_rank_gen *g, const char *token, int *ranks,
                                int *num_groups, int *group_size);

/* ---- initialize_model_parallel ------------------------------------------------------------ */
/* The dense groups of initialize_model_parallel, in its creation order. */
enum mc_ps_group {
    MC_PS_DP,         /* "dp": data parallel */
    MC_PS_DP_CP,      /* "dp-cp": what DDP reduces grads over */
    MC_PS_CP,         /* "cp" */
    MC_PS_MP,         /* "tp-pp": model parallel (grad-norm reduction) */
    MC_PS_TP,         /* "tp" */
    MC_PS_PP,         /* "pp" */
    MC_PS_TP_DP_CP,   /* "tp-dp-cp" */
    MC_PS_TP_DP,      /* "tp-dp" */
    MC_PS_TP_CP,      /* "tp-cp" */
    MC_PS_NUM_GROUPS
};

struct mc_ps_config {
    int tensor_model_parallel_size;   /* --tensor-model-parallel-size */
    int pipeline_model_parallel_size; /* --pipeline-model-parallel-size */
    int context_parallel_size;        /* --context-parallel-size */
    int expert_model_parallel_size;   /* --expert-model-parallel-size */
    const char *order;                /* NULL: "tp-cp-ep-dp-pp" */
};

struct mc_ps_comm {
    int size, rank;   /* this rank's index in the group */
    int *ranks;       /* [size] world ranks of the members, in Megatron's order */
    void *comm;       /* comm.c handle (NULL for a single process or without MPI) */
};

struct mc_parallel_state {
    int world, rank;
    int tp, pp, cp, ep, dp;
    struct mc_ps_comm group[MC_PS_NUM_GROUPS];
};

/* initialize_model_parallel over world_comm (a comm.c handle; NULL means a single process).
 * Collective over world_comm. Every group's communicator returns errors instead of
 * aborting, so the caller reports them. */
mc_status mc_ps_init(struct mc_parallel_state *ps, void *world_comm, const struct mc_ps_config *c);
void mc_ps_free(struct mc_parallel_state *ps);

static inline int mc_ps_size(const struct mc_parallel_state *ps, enum mc_ps_group g)
{
    return ps->group[g].size;
}
static inline int mc_ps_rank(const struct mc_parallel_state *ps, enum mc_ps_group g)
{
    return ps->group[g].rank;
}
/* get_{tensor_model,data}_parallel_src_rank and friends: the first member's world rank. */
static inline int mc_ps_src_rank(const struct mc_parallel_state *ps, enum mc_ps_group g)
{
    return ps->group[g].ranks[0];
}
/* get_pipeline_model_parallel_{first,last}_rank (world ranks). */
static inline int mc_ps_pipeline_last_rank(const struct mc_parallel_state *ps)
{
    return ps->group[MC_PS_PP].ranks[ps->pp - 1];
}
static inline bool mc_ps_is_pipeline_first_stage(const struct mc_parallel_state *ps)
{
    return ps->group[MC_PS_PP].rank == 0;
}
static inline bool mc_ps_is_pipeline_last_stage(const struct mc_parallel_state *ps)
{
    return ps->group[MC_PS_PP].rank == ps->pp - 1;
}

/* ---- comm.c: the communication layer -------------------------------------------------------
 * Every message between ranks goes through comm.c (the role torch.distributed plays for
 * Megatron); no other file of megatron.c calls MPI (tests/parallel/test_comm_layer_only.py).
 * A communicator is an opaque handle (void *) made here: mc_comm_init's world and the groups
 * split from it. NULL stands for a group of one rank (or a build without MPI): collectives on
 * it are no-ops or copies. Buffers are tagged with the project's dtype (megatron.h): MPI sees
 * f32/f64/i32/i64/u8 as such and bf16/f16 as 16-bit words, which moves them exactly; a sum or
 * max over bf16/f16 is MC_ERR_UNSUPPORTED (MPI has no half-precision arithmetic). Every
 * failure becomes an mc_status "<what> failed: <MPI's message>"; every blocking call is the
 * non-blocking form plus the idle, watched, counted wait below (mc_comm_wait). */
enum mc_comm_op { MC_COMM_SUM, MC_COMM_MAX };

/* A non-blocking operation in flight. A zeroed request is no operation: waiting on it or
 * testing it returns at once. Copyable by assignment; opaque outside comm.c. */
typedef struct mc_comm_request {
    _Alignas(8) unsigned char impl[16]; /* the MPI request */
    bool active;
} mc_comm_request;

/* Whether this build can talk to other ranks (it has MPI). */
bool mc_comm_available(void);
/* Initialises MPI when the launcher started several processes (world_size > 1) and makes
 * the world return errors; *world_comm is then a handle valid until mc_comm_finalize, else
 * NULL. A build without MPI refuses world_size > 1. */
mc_status mc_comm_init(int *argc, char ***argv, int64_t world_size, void **world_comm);
/* The world communicator mc_comm_init set up (NULL for one process). */
void *mc_comm_world_handle(void);
/* Size of comm and this rank's index in it (1 and 0 for NULL). */
mc_status mc_comm_size_rank(const void *comm, int *size, int *rank);
/* The same for the world handle (kept for parallel_state's wording). */
mc_status mc_comm_world(void *world_comm, int *size, int *rank);
/* This rank's index among the ranks of comm that share its node's memory, in comm's rank
 * order (the local rank); 0 for NULL. Collective over comm. */
mc_status mc_comm_node_rank(const void *comm, int *local_rank);
/* Splits comm (collective over it): the ranks giving the same color >= 0 form one group,
 * ordered by key; *out is its handle (free with mc_comm_free), NULL for a negative color.
 * The new group returns errors instead of aborting. what names the group in an error. */
mc_status mc_comm_split(const void *comm, int color, int key, void **out, const char *what);
/* Frees a handle from mc_comm_split (NULL: nothing); after MPI_Finalize only the memory. */
void mc_comm_free(void *comm);

/* In-place all-reduce of n elements over comm (NULL: nothing to do); what names the
 * collective in the error message and the watchdog's. Any n (sent in chunks of 2^30). */
mc_status mc_comm_all_reduce(void *comm, void *buf, int64_t n, enum mc_dtype type,
                             enum mc_comm_op op, const char *what);
/* All-gather: full[size * n_local] = every rank's local[n_local] in rank order; reduce-scatter
 * (sum): local[n_local] = this rank's block of the element-wise sum of every rank's
 * full[size * n_local]. comm NULL (one rank): a copy. Counted by MC_COMM_STATS with the full
 * buffer as payload. A block over 2^31-1 elements is MC_ERR_UNSUPPORTED (MPI counts are int). */
mc_status mc_comm_all_gather(void *comm, void *full, const void *local, int64_t n_local,
                             enum mc_dtype type, const char *what);
mc_status mc_comm_reduce_scatter(void *comm, void *local, const void *full, int64_t n_local,
                                 enum mc_dtype type, const char *what);
/* Non-blocking forms, completed by mc_comm_wait (the buffers stay untouched until then);
 * counted when posted. n / n_local at most 2^31-1. comm NULL: *req is no operation (and the
 * reduce-scatter copies at once). The all-gather is in place: rank r's block of full is its
 * input. */
mc_status mc_comm_iall_reduce(void *comm, void *buf, int64_t n, enum mc_dtype type,
                              enum mc_comm_op op, const char *what, mc_comm_request *req);
mc_status mc_comm_iall_gather_in_place(void *comm, void *full, int64_t n_local,
                                       enum mc_dtype type, const char *what,
                                       mc_comm_request *req);
mc_status mc_comm_ireduce_scatter(void *comm, void *local, const void *full, int64_t n_local,
                                  enum mc_dtype type, const char *what, mc_comm_request *req);
/* Point to point, as torch.distributed.batch_isend_irecv: the operations are posted in the
 * order given (each to or from rank peer of comm, n elements, matched by tag) and each sets
 * its *req; counted as one send call (the sends' bytes) and one receive call. */
struct mc_comm_p2p_op {
    bool send;        /* false: receive into buf */
    void *buf;
    int64_t n;        /* at most 2^31-1 */
    int peer, tag;
    mc_comm_request *req;
};
mc_status mc_comm_batch_isend_irecv(void *comm, enum mc_dtype type,
                                    const struct mc_comm_p2p_op *ops, int nops,
                                    const char *what);
mc_status mc_comm_barrier(void *comm);
/* Brings every rank down (MPI_Abort on the world); a no-op when MPI is not running. */
void mc_comm_abort(int code);
/* Also prints the communication counters below when MC_COMM_STATS=1 (collective). */
void mc_comm_finalize(void);

/* ---- launcher.c: rank, world size and local rank --------------------------------------
 * MPI's values are authoritative; the launchers' environment variables (torchrun-style
 * RANK/WORLD_SIZE/LOCAL_RANK, Open MPI's OMPI_COMM_WORLD_*, PMI_RANK/PMI_SIZE/MPI_LOCALRANKID,
 * MVAPICH2's MV2_COMM_WORLD_*, Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, PMIX_RANK)
 * only decide, before MPI starts, whether it starts at all, and are cross-checked after. */
enum mc_launch_var { MC_LAUNCH_RANK, MC_LAUNCH_WORLD_SIZE, MC_LAUNCH_LOCAL_RANK,
                     MC_LAUNCH_NUM_VARS };
/* The first launcher variable set for v, in the order RANK/WORLD_SIZE/LOCAL_RANK, Open MPI,
 * PMI, MVAPICH2, Slurm, PMIx; *name (if given) gets its name. NULL when none is set. */
const char *mc_launch_env(enum mc_launch_var v, const char **name);
/* MPI's rank, world size and local rank (0, 1, 0 for a NULL world). Collective. */
mc_status mc_comm_launch_info(void *world_comm, int out[MC_LAUNCH_NUM_VARS]);
/* MC_ERR_COMM naming the variable when torchrun-style variables, or those of the launcher
 * that started this process, disagree with MPI's values mpi[] (MC_ERR_CONFIG: not a number). */
mc_status mc_launch_check(const int mpi[MC_LAUNCH_NUM_VARS]);

/* threads.c: without OMP_NUM_THREADS, sets this rank's OpenMP threads to its share of the cores
 * it may run on (its affinity mask when bound to part of the node, else the node's cores over
 * the ranks on this node, at least 1); logs the count and the cores, and warns when a rank has
 * more threads than cores. Call once, before the first parallel region. */
void mc_launch_set_threads(void);

/* ---- watchdog.c: --distributed-timeout-minutes ------------------------------------------
 * MPI has no timeout on a blocking call. Every wait on MPI is bracketed (by mc_comm_wait,
 * or by hand) with mc_comm_wait_begin(what) / mc_comm_wait_end() (two
 * atomic increments; what is a static string naming the call). Once mc_comm_watchdog_start
 * has run, a thread aborts the whole job (message naming this rank, the call, the peers and
 * source, then MPI_Abort) when one wait lasts longer than timeout_s. source says where the
 * limit came from ("--distributed-timeout-minutes 10"). mc_comm_finalize stops the thread. */
mc_status mc_comm_watchdog_start(int rank, double timeout_s, const char *source);
void mc_comm_watchdog_stop(void);
void mc_comm_wait_begin(const char *what);
/* The same, naming the collective too ("all-reduce"): the message says both. */
void mc_comm_wait_begin_op(const char *op, const char *what);
/* The same, with the communicator waited on: a timed-out wait names its other members
 * (mc_comm_peers). */
void mc_comm_wait_begin_on(const void *comm, const char *op, const char *what);
void mc_comm_wait_end(void);
/* Idle waiting (comm.c): completes n requests inside such a bracket, op and what naming the
 * wait, comm (a handle registered with mc_comm_stats_register, or NULL) the group whose other
 * members the watchdog names. It spins on MPI_Testall while the wait is short (1 ms after the
 * last test that moved data), then sleeps between tests (10 us doubling to 1 ms), so a rank
 * waiting for a stopped or slow peer uses next to no CPU. Requests that are no operation
 * count as done (the wait itself is still bracketed and counted). Every blocking MPI operation
 * of megatron.c is its non-blocking form plus this wait. An error is "<what> failed: ...". */
mc_status mc_comm_wait(int n, mc_comm_request *reqs, const void *comm, const char *op,
                       const char *what);
/* MPI progresses non-blocking operations only inside MPI calls: one test of req, which
 * becomes no operation when it has completed (true then). Not a wait: not counted. */
bool mc_comm_test(mc_comm_request *req);
/* Completes req with a plain wait, outside the watchdog and the wait counters: teardown,
 * where MPI must stop writing into a buffer before it is freed. */
void mc_comm_drain(mc_comm_request *req);
/* This rank's waits so far: [0] count, [1] seconds waited, [2] waits that slept, [3] seconds
 * asleep (MC_COMM_STATS prints them as comm-wait lines). */
void mc_comm_wait_totals(double out[4]);

/* ---- comm.c: per-rank communication counters (MC_COMM_STATS=1) ----------------------------
 * Private to megatron.c: every wrapper that moves data (all-reduce, reduce-scatter,
 * all-gather, pipeline send/recv) adds the call's payload and the bytes this rank puts on the
 * wire under a ring algorithm (all-reduce 2(n-1)/n*S, reduce-scatter and all-gather
 * (n-1)/n*S, send S). Counting is a few additions per call; nothing is printed unless the
 * environment variable is set. */
enum mc_comm_kind {
    MC_COMM_KIND_WORLD, MC_COMM_KIND_TP, MC_COMM_KIND_DP, MC_COMM_KIND_PP,
    MC_COMM_KIND_EMBEDDING, MC_COMM_KIND_MP, MC_COMM_KIND_OTHER, MC_COMM_KIND_NUM
};
enum mc_comm_verb {
    MC_COMM_ALL_REDUCE, MC_COMM_REDUCE_SCATTER, MC_COMM_ALL_GATHER, MC_COMM_SEND,
    MC_COMM_RECV, MC_COMM_VERB_NUM
};
/* Names the group a communicator belongs to, so mc_comm_all_reduce can file its bytes. */
void mc_comm_stats_register(const void *comm, enum mc_comm_kind kind);
/* The other members of a registered comm with their hosts ("world rank 1 on node-b"), or
 * NULL; valid until the next registration of that handle. */
const char *mc_comm_peers(const void *comm);
/* The kind registered for comm (MC_COMM_KIND_OTHER when none). */
enum mc_comm_kind mc_comm_stats_kind(const void *comm);
/* Adds one call moving `bytes` of payload (the full buffer S) over a group of `n` ranks. */
void mc_comm_stats_add(enum mc_comm_kind kind, enum mc_comm_verb verb, double bytes, int n);

#endif /* MC_PARALLEL_STATE_H */
