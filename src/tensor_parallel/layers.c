/* Column- and row-parallel linear layers and the vocab-parallel embedding, mirrors
 * megatron/core/tensor_parallel/layers.py (ColumnParallelLinear, RowParallelLinear,
 * VocabParallelEmbedding), with sequence parallelism as
 * LinearWithGradAccumulationAndAsyncCommunication does it: the column-parallel input is
 * all-gathered along the sequence in forward and again in backward (for the weight grad, rather
 * than keeping the gathered copy), its grad reduce-scattered; the row-parallel output is
 * reduce-scattered and its grad all-gathered. Weights are [out, in] as torch stores them, so
 * every matmul is a GEMM against a transposed operand, never a copied transpose. In 16 bits
 * (params_dtype bf16/fp16) every GEMM reads dt, accumulates in fp32 and rounds its output once
 * to dt; weight grads are made in dt and added to the fp32 main grads (wgrad_gemm). */
#include "tensor_parallel/tensor_parallel.h"

#include <string.h>

/* The full [T, width] input: x itself, or x's row shards all-gathered into work. */
static mc_status gathered(const struct mc_tp_group *g, const void **full, const void *x,
                          void *work, int64_t T, int64_t width)
{
    *full = x;
    if (!g->sequence_parallel)
        return MC_OK;
    *full = work;
    return mc_tp_all_gather_seq(g, work, x, T / g->size * width);
}

void *mc_tp_wgrad_target(const struct mc_tp_group *g, float *grad, int64_t slot, int64_t n,
                         bool zero)
{
    if (g->dt == MC_DTYPE_F32)
        return grad;
    void *t = mc_tp_at(g->wgrad, g->dt, slot);
    if (zero)
        g->be->ops->set(g->be, t, 0, (size_t)n * mc_dtype_size(g->dt));
    return t;
}

/* main_grad.add_(param.grad) for the dt grad at src. fp32 main grads: one widening add. A
 * 16-bit main grad (Megatron's fp16 / bf16 DDP buffer, grad_dt == dt): the sum rounded to dt,
 * made in src itself (src = round(src + main), the same bits as round(main + src)) and copied
 * back widened, so the fp32 block holds exactly what Megatron's 16-bit buffer holds after
 * every micro-batch. */
static void commit_from(const struct mc_tp_group *g, float *grad, void *src, int64_t n)
{
    if (g->grad_dt == MC_DTYPE_F32) {
        g->be->ops->accumulate(g->be, grad, MC_DTYPE_F32, src, g->dt, n);
        return;
    }
    g->be->ops->accumulate(g->be, src, g->grad_dt, grad, MC_DTYPE_F32, n);
    g->be->ops->convert(g->be, grad, MC_DTYPE_F32, src, g->grad_dt, n);
}

void mc_tp_wgrad_commit(const struct mc_tp_group *g, float *grad, int64_t slot, int64_t n)
{
    if (g->dt != MC_DTYPE_F32)
        commit_from(g, grad, mc_tp_at(g->wgrad, g->dt, slot), n);
}

/* dw (+)= dy^T x as [M, N] over K tokens: fp32 adds into the main grad (beta 1); 16-bit writes
 * round(dy^T x) (beta 0) to the temporary or to keep, then commits the temporary. */
static void wgrad_gemm(struct mc_backend *be, const struct mc_tp_group *g, float *dw,
                       void *keep, const void *dy, const void *x, int64_t M, int64_t N,
                       int64_t K)
{
    enum mc_dtype dt = g->dt;
    void *c = keep ? keep : mc_tp_wgrad_target(g, dw, 0, M * N, false);
    be->ops->gemm(be, true, false, M, N, K, 1.0f, dy, dt, M, x, dt, N,
                  dt == MC_DTYPE_F32 ? 1.0f : 0.0f, c, dt, N, MC_DTYPE_F32);
    if (!keep)
        mc_tp_wgrad_commit(g, dw, 0, M * N);
}

static void bias_grad(struct mc_backend *be, const struct mc_tp_group *g, float *db,
                      const void *dy, int64_t T, int64_t n)
{
    be->ops->bias_grad(be, g->dt, mc_tp_wgrad_target(g, db, 0, n, true), dy, T, n);
    mc_tp_wgrad_commit(g, db, 0, n);
}

mc_status mc_tp_linear_col_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   void *y, const void *x, const void *w, const void *b,
                                   int64_t T, int64_t in, int64_t out_l, void *work)
{
    /* copy_to region (identity) or gather_from_sequence_parallel_region */
    const void *xf;
    enum mc_dtype dt = g->dt;
    mc_status st = gathered(g, &xf, x, work, T, in);
    if (st != MC_OK)
        return st;
    be->ops->gemm(be, false, true, T, out_l, in, 1.0f, xf, dt, in, w, dt, in, 0.0f, y, dt, out_l,
                  MC_DTYPE_F32);
    if (b)
        be->ops->bias_dropout_add(be, dt, y, y, b, NULL, NULL, 1.0f, T, out_l);
    return MC_OK;
}

mc_status mc_tp_linear_col_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    void *dx, float *dw, void *dw_keep, float *db,
                                    const void *dy, const void *x, const void *w, int64_t T,
                                    int64_t in, int64_t out_l, void *work)
{
    const void *xf;
    enum mc_dtype dt = g->dt;
    mc_status st = gathered(g, &xf, x, work, T, in);
    if (st != MC_OK)
        return st;
    wgrad_gemm(be, g, dw, dt == MC_DTYPE_F32 ? NULL : dw_keep, dy, xf, out_l, in, T);
    if (db)
        bias_grad(be, g, db, dy, T, out_l);
    if (!dx)
        return MC_OK;
    if (!g->sequence_parallel) {
        be->ops->gemm(be, false, false, T, in, out_l, 1.0f, dy, dt, out_l, w, dt, in, 0.0f, dx,
                      dt, in, MC_DTYPE_F32);
        return mc_tp_copy_to_region_bwd(g, dx, T * in);
    }
    /* the gathered input is no longer needed: its buffer takes the full input grad */
    be->ops->gemm(be, false, false, T, in, out_l, 1.0f, dy, dt, out_l, w, dt, in, 0.0f, work, dt,
                  in, MC_DTYPE_F32);
    return mc_tp_reduce_scatter_seq(g, dx, work, T / g->size * in);
}

mc_status mc_tp_linear_row_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   void *y, const void *x, const void *w, int64_t T,
                                   int64_t in_l, int64_t out, void *work)
{
    enum mc_dtype dt = g->dt;
    if (!g->sequence_parallel) {
        be->ops->gemm(be, false, true, T, out, in_l, 1.0f, x, dt, in_l, w, dt, in_l, 0.0f, y, dt,
                      out, MC_DTYPE_F32);
        return mc_tp_reduce_from_region_fwd(g, y, T * out);
    }
    be->ops->gemm(be, false, true, T, out, in_l, 1.0f, x, dt, in_l, w, dt, in_l, 0.0f, work, dt,
                  out, MC_DTYPE_F32);
    return mc_tp_reduce_scatter_seq(g, y, work, T / g->size * out);
}

mc_status mc_tp_linear_row_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    void *dx, float *dw, const void *dy, const void *x,
                                    const void *w, int64_t T, int64_t in_l, int64_t out,
                                    void *work)
{
    const void *dyf;
    enum mc_dtype dt = g->dt;
    mc_status st = gathered(g, &dyf, dy, work, T, out);
    if (st != MC_OK)
        return st;
    wgrad_gemm(be, g, dw, NULL, dyf, x, out, in_l, T);
    be->ops->gemm(be, false, false, T, in_l, out, 1.0f, dyf, dt, out, w, dt, in_l, 0.0f, dx, dt,
                  in_l, MC_DTYPE_F32);
    return MC_OK;
}

mc_status mc_tp_embedding_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                  void *y, const void *w, const int64_t *ids, int64_t T,
                                  int64_t h, int64_t vocab_local, void *work)
{
    enum mc_dtype dt = g->dt;
    if (!g->sequence_parallel) {
        be->ops->embedding_fwd(be, dt, y, w, ids, T, h, (int64_t)g->rank * vocab_local,
                               vocab_local);
        return mc_tp_reduce_from_region_fwd(g, y, T * h);
    }
    be->ops->embedding_fwd(be, dt, work, w, ids, T, h, (int64_t)g->rank * vocab_local,
                           vocab_local);
    return mc_tp_reduce_scatter_seq(g, y, work, T / g->size * h);
}

void mc_tp_embedding_backward(struct mc_backend *be, const struct mc_tp_group *g,
                              float *dw, void *dw_keep, const void *dy, const int64_t *ids,
                              int64_t T, int64_t h, int64_t vocab_local)
{
    int64_t n = vocab_local * h;
    be->ops->embedding_bwd(be, g->dt, mc_tp_wgrad_target(g, dw, 0, n, true), dy, ids, T, h,
                           (int64_t)g->rank * vocab_local, vocab_local);
    if (g->dt == MC_DTYPE_F32 || !dw_keep) {
        mc_tp_wgrad_commit(g, dw, 0, n);
        return;
    }
    /* the tied weight's two grads summed in dt (autograd), then into the main grad */
    be->ops->accumulate(be, dw_keep, g->dt, mc_tp_at(g->wgrad, g->dt, 0), g->dt, n);
    commit_from(g, dw, dw_keep, n);
}
