/* The tensor-parallel communication regions, mirrors megatron/core/tensor_parallel/mappings.py.
 * Size-1 groups need no communication. Larger groups need the MPI communicator that
 * parallel_state attaches to the group; without one these refuse (MC_ERR_UNSUPPORTED) instead
 * of silently computing a single rank's partial result. */
#include "tensor_parallel/tensor_parallel.h"

static mc_status need_comm(const struct mc_tp_group *g, const char *what)
{
    return mc_error(MC_ERR_UNSUPPORTED,
                    "%s across --tensor-model-parallel-size %d: tensor-parallel communication "
                    "is not wired in this build (no communicator attached to the group)",
                    what, g->size);
}

mc_status mc_tp_all_reduce_sum(const struct mc_tp_group *g, float *x, int64_t n)
{
    (void)x;
    (void)n;
    if (g->size == 1)
        return MC_OK;
    return need_comm(g, "all-reduce(sum)");
}

mc_status mc_tp_all_reduce_max(const struct mc_tp_group *g, float *x, int64_t n)
{
    (void)x;
    (void)n;
    if (g->size == 1)
        return MC_OK;
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
