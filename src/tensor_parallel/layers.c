/* Column- and row-parallel linear layers and the vocab-parallel embedding, mirrors
 * megatron/core/tensor_parallel/layers.py (ColumnParallelLinear, RowParallelLinear,
 * VocabParallelEmbedding) without sequence parallelism. Weights are [out, in] as torch stores
 * them, so every matmul is a GEMM against a transposed operand, never a copied transpose. */
#include "tensor_parallel/tensor_parallel.h"

#include <string.h>

mc_status mc_tp_linear_col_forward(const struct mc_backend_ops *be, const struct mc_tp_group *g,
                                   float *y, const float *x, const float *w, const float *b,
                                   int64_t T, int64_t in, int64_t out_l)
{
    (void)g; /* copy_to region: identity in forward */
    be->gemm(false, true, T, out_l, in, 1.0f, x, in, w, in, 0.0f, y, out_l);
    if (b)
        be->bias_dropout_add(y, y, b, NULL, NULL, 1.0f, T, out_l);
    return MC_OK;
}

mc_status mc_tp_linear_col_backward(const struct mc_backend_ops *be, const struct mc_tp_group *g,
                                    float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *w, int64_t T, int64_t in,
                                    int64_t out_l)
{
    be->gemm(true, false, out_l, in, T, 1.0f, dy, out_l, x, in, 1.0f, dw, in);
    if (db)
        be->bias_grad(db, dy, T, out_l);
    if (!dx)
        return MC_OK;
    be->gemm(false, false, T, in, out_l, 1.0f, dy, out_l, w, in, 0.0f, dx, in);
    return mc_tp_copy_to_region_bwd(g, dx, T * in);
}

mc_status mc_tp_linear_row_forward(const struct mc_backend_ops *be, const struct mc_tp_group *g,
                                   float *y, const float *x, const float *w, int64_t T,
                                   int64_t in_l, int64_t out)
{
    be->gemm(false, true, T, out, in_l, 1.0f, x, in_l, w, in_l, 0.0f, y, out);
    return mc_tp_reduce_from_region_fwd(g, y, T * out);
}

mc_status mc_tp_linear_row_backward(const struct mc_backend_ops *be, float *dx, float *dw,
                                    const float *dy, const float *x, const float *w, int64_t T,
                                    int64_t in_l, int64_t out)
{
    be->gemm(true, false, out, in_l, T, 1.0f, dy, out, x, in_l, 1.0f, dw, in_l);
    be->gemm(false, false, T, in_l, out, 1.0f, dy, out, w, in_l, 0.0f, dx, in_l);
    return MC_OK;
}

mc_status mc_tp_embedding_forward(const struct mc_backend_ops *be, const struct mc_tp_group *g,
                                  float *y, const float *w, const int64_t *ids, int64_t T,
                                  int64_t h, int64_t vocab_local)
{
    be->embedding_fwd(y, w, ids, T, h, (int64_t)g->rank * vocab_local, vocab_local);
    return mc_tp_reduce_from_region_fwd(g, y, T * h);
}

void mc_tp_embedding_backward(const struct mc_backend_ops *be, const struct mc_tp_group *g,
                              float *dw, const float *dy, const int64_t *ids, int64_t T,
                              int64_t h, int64_t vocab_local)
{
    be->embedding_bwd(dw, dy, ids, T, h, (int64_t)g->rank * vocab_local, vocab_local);
}
