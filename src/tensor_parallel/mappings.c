/* The tensor-parallel communication regions, mirrors megatron/core/tensor_parallel/mappings.py,
 * including the sequence-parallel ones (all-gather / reduce-scatter along the first dimension,
 * which is contiguous here: rank r's rows are one block). Size-1 groups need no communication.
 * Larger groups all-reduce, all-gather or reduce-scatter over the MPI communicator that
 * parallel_state attaches to the group (mc_gpt_set_tp_comm in gpt.h); without one (or in a build
 * without MPI) they refuse with MC_ERR_UNSUPPORTED instead of silently computing a single
 * rank's partial result. With 16-bit activations the sums run in fp32 (tensor_parallel.h:
 * mc_tp_group.red): MPI has no bf16/fp16 arithmetic. */
#include "tensor_parallel/tensor_parallel.h"
#include "parallel_state/parallel_state.h"

static mc_status need_comm(const struct mc_tp_group *g, const char *what)
{
    return mc_error(MC_ERR_UNSUPPORTED,
                    "%s across --tensor-model-parallel-size %d: no tensor-parallel communicator "
                    "is attached to the model (or this build has no MPI)",
                    what, g->size);
}

/* non-blocking plus an idle wait (parallel_state/comm.c) */
static mc_status all_reduce(const struct mc_tp_group *g, float *x, int64_t n, enum mc_comm_op op)
{
    return mc_comm_all_reduce(g->comm, x, n, MC_DTYPE_F32, op, "tensor-parallel all-reduce");
}

mc_status mc_tp_all_reduce_sum_f32(const struct mc_tp_group *g, float *x, int64_t n)
{
    if (g->size == 1)
        return MC_OK;
    if (g->comm)
        return all_reduce(g, x, n, MC_COMM_SUM);
    return need_comm(g, "all-reduce(sum)");
}

/* 16-bit sums: widened into the fp32 scratch, reduced there, rounded back once. */
mc_status mc_tp_all_reduce_sum(const struct mc_tp_group *g, void *x, int64_t n)
{
    if (g->dt == MC_DTYPE_F32 || g->size == 1)
        return mc_tp_all_reduce_sum_f32(g, x, n);
    if (!g->comm)
        return need_comm(g, "all-reduce(sum)");
    g->be->ops->convert(g->be, g->red, MC_DTYPE_F32, x, g->dt, n);
    mc_status st = all_reduce(g, g->red, n, MC_COMM_SUM);
    if (st == MC_OK)
        g->be->ops->convert(g->be, x, g->dt, g->red, MC_DTYPE_F32, n);
    return st;
}

mc_status mc_tp_all_reduce_max(const struct mc_tp_group *g, float *x, int64_t n)
{
    if (g->size == 1)
        return MC_OK;
    if (g->comm)
        return all_reduce(g, x, n, MC_COMM_MAX);
    return need_comm(g, "all-reduce(max)");
}

mc_status mc_tp_copy_to_region_bwd(const struct mc_tp_group *g, void *dx, int64_t n)
{
    return mc_tp_all_reduce_sum(g, dx, n);
}

mc_status mc_tp_reduce_from_region_fwd(const struct mc_tp_group *g, void *y, int64_t n)
{
    return mc_tp_all_reduce_sum(g, y, n);
}

/* Size-1 groups copy (the comm layer does that for a NULL communicator); larger ones need the
 * group's communicator. */
static void *seq_comm(const struct mc_tp_group *g)
{
    return g->size == 1 ? NULL : g->comm;
}

/* Moving elements needs no arithmetic: the gather sends dt as it is. */
mc_status mc_tp_all_gather_seq(const struct mc_tp_group *g, void *full, const void *local,
                               int64_t n_local)
{
    if (g->size > 1 && !g->comm)
        return need_comm(g, "sequence-parallel all-gather");
    return mc_comm_all_gather(seq_comm(g), full, local, n_local, g->dt,
                              "tensor-parallel sequence all-gather");
}

mc_status mc_tp_reduce_scatter_seq(const struct mc_tp_group *g, void *local, const void *full,
                                   int64_t n_local)
{
    if (g->size > 1 && !g->comm)
        return need_comm(g, "sequence-parallel reduce-scatter");
    if (g->dt == MC_DTYPE_F32 || g->size == 1)
        return mc_comm_reduce_scatter(seq_comm(g), local, full, n_local, g->dt,
                                      "tensor-parallel sequence reduce-scatter");
    /* fp32 sum: the full tensor widened into red, this rank's block after it */
    int64_t n = n_local * g->size;
    float *sum = g->red + n;
    g->be->ops->convert(g->be, g->red, MC_DTYPE_F32, full, g->dt, n);
    mc_status st = mc_comm_reduce_scatter(g->comm, sum, g->red, n_local, MC_DTYPE_F32,
                                          "tensor-parallel sequence reduce-scatter");
    if (st == MC_OK)
        g->be->ops->convert(g->be, local, g->dt, sum, MC_DTYPE_F32, n_local);
    return st;
}
