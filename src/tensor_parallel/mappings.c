/* The tensor-parallel communication regions, mirrors megatron/core/tensor_parallel/mappings.py,
 * including the sequence-parallel ones (all-gather / reduce-scatter along the first dimension,
 * which is contiguous here: rank r's rows are one block). Size-1 groups need no communication.
 * Larger groups all-reduce, all-gather or reduce-scatter over the MPI communicator that
 * parallel_state attaches to the group (mc_gpt_set_tp_comm in gpt.h); without one (or in a build
 * without MPI) they refuse with MC_ERR_UNSUPPORTED instead of silently computing a single
 * rank's partial result. */
#include "tensor_parallel/tensor_parallel.h"
#include "parallel_state/parallel_state.h"

#include <string.h>

#if defined(MC_HAVE_MPI)
#include <mpi.h>
#endif

static mc_status need_comm(const struct mc_tp_group *g, const char *what)
{
    return mc_error(MC_ERR_UNSUPPORTED,
                    "%s across --tensor-model-parallel-size %d: no tensor-parallel communicator "
                    "is attached to the model (or this build has no MPI)",
                    what, g->size);
}

#if defined(MC_HAVE_MPI)
static mc_status all_reduce(const struct mc_tp_group *g, float *x, int64_t n, MPI_Op op,
                            const char *what)
{
    MPI_Comm comm = *(const MPI_Comm *)g->comm;
    mc_comm_stats_add(mc_comm_stats_kind(g->comm), MC_COMM_ALL_REDUCE,
                      (double)n * sizeof(float), g->size);
    for (int64_t done = 0; done < n;) { /* MPI counts are int */
        int chunk = n - done > (1 << 30) ? (1 << 30) : (int)(n - done);
        mc_comm_wait_begin("tensor-parallel all-reduce");
        int rc = MPI_Allreduce(MPI_IN_PLACE, x + done, chunk, MPI_FLOAT, op, comm);
        mc_comm_wait_end();
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, msg, &len);
            return mc_error(MC_ERR_COMM, "tensor-parallel %s of %lld floats failed: %s", what,
                            (long long)n, msg);
        }
        done += chunk;
    }
    return MC_OK;
}
#endif

mc_status mc_tp_all_reduce_sum(const struct mc_tp_group *g, float *x, int64_t n)
{
    if (g->size == 1)
        return MC_OK;
#if defined(MC_HAVE_MPI)
    if (g->comm)
        return all_reduce(g, x, n, MPI_SUM, "all-reduce(sum)");
#endif
    (void)x;
    (void)n;
    return need_comm(g, "all-reduce(sum)");
}

mc_status mc_tp_all_reduce_max(const struct mc_tp_group *g, float *x, int64_t n)
{
    if (g->size == 1)
        return MC_OK;
#if defined(MC_HAVE_MPI)
    if (g->comm)
        return all_reduce(g, x, n, MPI_MAX, "all-reduce(max)");
#endif
    (void)x;
    (void)n;
    return need_comm(g, "all-reduce(max)");
}

mc_status mc_tp_copy_to_region_bwd(const struct mc_tp_group *g, float *dx, int64_t n)
{
    return mc_tp_all_reduce_sum(g, dx, n);
}

mc_status mc_tp_reduce_from_region_fwd(const struct mc_tp_group *g, float *y, int64_t n)
{
    return mc_tp_all_reduce_sum(g, y, n);
}

#if defined(MC_HAVE_MPI)
/* MPI counts are int: a block (per-rank share) beyond that is refused, not split. */
static mc_status seq_block(const struct mc_tp_group *g, int64_t n_local, const char *what)
{
    if (n_local > 0x7fffffff)
        return mc_error(MC_ERR_UNSUPPORTED, "sequence-parallel %s of %lld floats per rank over "
                        "%d ranks: more than 2^31-1 floats per rank", what, (long long)n_local,
                        g->size);
    return MC_OK;
}

static mc_status seq_fail(int rc, const char *what, int64_t n_local)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return mc_error(MC_ERR_COMM, "sequence-parallel %s of %lld floats per rank failed: %s", what,
                    (long long)n_local, msg);
}
#endif

mc_status mc_tp_all_gather_seq(const struct mc_tp_group *g, float *full, const float *local,
                               int64_t n_local)
{
    if (g->size == 1) {
        if (full != local)
            memcpy(full, local, sizeof(float) * (size_t)n_local);
        return MC_OK;
    }
#if defined(MC_HAVE_MPI)
    if (g->comm) {
        mc_status st = seq_block(g, n_local, "all-gather");
        if (st != MC_OK)
            return st;
        mc_comm_stats_add(mc_comm_stats_kind(g->comm), MC_COMM_ALL_GATHER,
                          (double)n_local * g->size * sizeof(float), g->size);
        mc_comm_wait_begin("sequence-parallel all-gather");
        int rc = MPI_Allgather(local, (int)n_local, MPI_FLOAT, full, (int)n_local, MPI_FLOAT,
                               *(const MPI_Comm *)g->comm);
        mc_comm_wait_end();
        return rc == MPI_SUCCESS ? MC_OK : seq_fail(rc, "all-gather", n_local);
    }
#endif
    (void)full;
    (void)local;
    return need_comm(g, "sequence-parallel all-gather");
}

mc_status mc_tp_reduce_scatter_seq(const struct mc_tp_group *g, float *local, const float *full,
                                   int64_t n_local)
{
    if (g->size == 1) {
        if (full != local)
            memcpy(local, full, sizeof(float) * (size_t)n_local);
        return MC_OK;
    }
#if defined(MC_HAVE_MPI)
    if (g->comm) {
        mc_status st = seq_block(g, n_local, "reduce-scatter");
        if (st != MC_OK)
            return st;
        mc_comm_stats_add(mc_comm_stats_kind(g->comm), MC_COMM_REDUCE_SCATTER,
                          (double)n_local * g->size * sizeof(float), g->size);
        mc_comm_wait_begin("sequence-parallel reduce-scatter");
        int rc = MPI_Reduce_scatter_block(full, local, (int)n_local, MPI_FLOAT, MPI_SUM,
                                          *(const MPI_Comm *)g->comm);
        mc_comm_wait_end();
        return rc == MPI_SUCCESS ? MC_OK : seq_fail(rc, "reduce-scatter", n_local);
    }
#endif
    (void)full;
    (void)local;
    return need_comm(g, "sequence-parallel reduce-scatter");
}
