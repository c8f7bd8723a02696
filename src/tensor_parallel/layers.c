/* Column- and row-parallel linear layers and the vocab-parallel embedding, mirrors
 * megatron/core/tensor_parallel/layers.py (ColumnParallelLinear, RowParallelLinear,
 * VocabParallelEmbedding), with sequence parallelism as
 * LinearWithGradAccumulationAndAsyncCommunication does it: the column-parallel input is
 * all-gathered along the sequence in forward and again in backward (for the weight grad, rather
 * than keeping the gathered copy), its grad reduce-scattered; the row-parallel output is
 * reduce-scattered and its grad all-gathered. Weights are [out, in] as torch stores them, so
 * every matmul is a GEMM against a transposed operand, never a copied transpose. */
#include "tensor_parallel/tensor_parallel.h"

#include <string.h>

/* The full [T, width] input: x itself, or x's row shards all-gathered into work. */
static mc_status gathered(const struct mc_tp_group *g, const float **full, const float *x,
                          float *work, int64_t T, int64_t width)
{
    *full = x;
    if (!g->sequence_parallel)
        return MC_OK;
    *full = work;
    return mc_tp_all_gather_seq(g, work, x, T / g->size * width);
}

mc_status mc_tp_linear_col_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   float *y, const float *x, const float *w, const float *b,
                                   int64_t T, int64_t in, int64_t out_l, float *work)
{
    /* copy_to region (identity) or gather_from_sequence_parallel_region */
    const float *xf;
    mc_status st = gathered(g, &xf, x, work, T, in);
    if (st != MC_OK)
        return st;
    be->ops->gemm(be, false, true, T, out_l, in, 1.0f, xf, MC_DTYPE_F32, in, w, MC_DTYPE_F32, in,
                  0.0f, y, MC_DTYPE_F32, out_l, MC_DTYPE_F32);
    if (b)
        be->ops->bias_dropout_add(be, MC_DTYPE_F32, y, y, b, NULL, NULL, 1.0f, T, out_l);
    return MC_OK;
}

mc_status mc_tp_linear_col_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *w, int64_t T, int64_t in,
                                    int64_t out_l, float *work)
{
    const float *xf;
    mc_status st = gathered(g, &xf, x, work, T, in);
    if (st != MC_OK)
        return st;
    be->ops->gemm(be, true, false, out_l, in, T, 1.0f, dy, MC_DTYPE_F32, out_l, xf, MC_DTYPE_F32,
                  in, 1.0f, dw, MC_DTYPE_F32, in, MC_DTYPE_F32);
    if (db)
        be->ops->bias_grad(be, MC_DTYPE_F32, db, dy, T, out_l);
    if (!dx)
        return MC_OK;
    if (!g->sequence_parallel) {
        be->ops->gemm(be, false, false, T, in, out_l, 1.0f, dy, MC_DTYPE_F32, out_l, w,
                      MC_DTYPE_F32, in, 0.0f, dx, MC_DTYPE_F32, in, MC_DTYPE_F32);
        return mc_tp_copy_to_region_bwd(g, dx, T * in);
    }
    /* the gathered input is no longer needed: its buffer takes the full input grad */
    be->ops->gemm(be, false, false, T, in, out_l, 1.0f, dy, MC_DTYPE_F32, out_l, w, MC_DTYPE_F32,
                  in, 0.0f, work, MC_DTYPE_F32, in, MC_DTYPE_F32);
    return mc_tp_reduce_scatter_seq(g, dx, work, T / g->size * in);
}

mc_status mc_tp_linear_row_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   float *y, const float *x, const float *w, int64_t T,
                                   int64_t in_l, int64_t out, float *work)
{
    if (!g->sequence_parallel) {
        be->ops->gemm(be, false, true, T, out, in_l, 1.0f, x, MC_DTYPE_F32, in_l, w, MC_DTYPE_F32,
                      in_l, 0.0f, y, MC_DTYPE_F32, out, MC_DTYPE_F32);
        return mc_tp_reduce_from_region_fwd(g, y, T * out);
    }
    be->ops->gemm(be, false, true, T, out, in_l, 1.0f, x, MC_DTYPE_F32, in_l, w, MC_DTYPE_F32, in_l,
                  0.0f, work, MC_DTYPE_F32, out, MC_DTYPE_F32);
    return mc_tp_reduce_scatter_seq(g, y, work, T / g->size * out);
}

mc_status mc_tp_linear_row_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    float *dx, float *dw, const float *dy, const float *x,
                                    const float *w, int64_t T, int64_t in_l, int64_t out,
                                    float *work)
{
    const float *dyf;
    mc_status st = gathered(g, &dyf, dy, work, T, out);
    if (st != MC_OK)
        return st;
    be->ops->gemm(be, true, false, out, in_l, T, 1.0f, dyf, MC_DTYPE_F32, out, x, MC_DTYPE_F32,
                  in_l, 1.0f, dw, MC_DTYPE_F32, in_l, MC_DTYPE_F32);
    be->ops->gemm(be, false, false, T, in_l, out, 1.0f, dyf, MC_DTYPE_F32, out, w, MC_DTYPE_F32,
                  in_l, 0.0f, dx, MC_DTYPE_F32, in_l, MC_DTYPE_F32);
    return MC_OK;
}

mc_status mc_tp_embedding_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                  float *y, const float *w, const int64_t *ids, int64_t T,
                                  int64_t h, int64_t vocab_local, float *work)
{
    if (!g->sequence_parallel) {
        be->ops->embedding_fwd(be, MC_DTYPE_F32, y, w, ids, T, h, (int64_t)g->rank * vocab_local,
                               vocab_local);
        return mc_tp_reduce_from_region_fwd(g, y, T * h);
    }
    be->ops->embedding_fwd(be, MC_DTYPE_F32, work, w, ids, T, h, (int64_t)g->rank * vocab_local,
                           vocab_local);
    return mc_tp_reduce_scatter_seq(g, y, work, T / g->size * h);
}

void mc_tp_embedding_backward(struct mc_backend *be, const struct mc_tp_group *g,
                              float *dw, const float *dy, const int64_t *ids, int64_t T,
                              int64_t h, int64_t vocab_local)
{
    be->ops->embedding_bwd(be, MC_DTYPE_F32, dw, dy, ids, T, h, (int64_t)g->rank * vocab_local,
                           vocab_local);
}
