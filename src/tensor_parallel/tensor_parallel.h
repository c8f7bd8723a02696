/* Tensor parallelism: the communication regions (mappings.c, mirrors
 * megatron/core/tensor_parallel/mappings.py), the column/row-parallel linear layers and the
 * vocab-parallel embedding (layers.c, mirrors layers.py) and the vocab-parallel cross-entropy
 * (cross_entropy.c, mirrors cross_entropy.py). Private header.
 *
 * Every communication point is an explicit call. With group size 1 each is a no-op; with size
 * > 1 they need the group's communicator (filled in by parallel_state); until then they fail
 * with MC_ERR_UNSUPPORTED rather than compute a wrong answer. */
#ifndef MC_TENSOR_PARALLEL_H
#define MC_TENSOR_PARALLEL_H

#include "backend/backend.h"
#include "megatron.h"

/* The tensor-model-parallel group of this rank, and the dtype its activations travel in. */
struct mc_tp_group {
    int size;   /* tensor_model_parallel_size */
    int rank;   /* this rank's index in the group */
    void *comm; /* the group's communicator (a comm.c handle) once parallel_state wires it */
    bool sequence_parallel; /* activations outside the TP regions are [T/size] row shards */
    /* Mixed precision. dt: the activations' and weights' dtype (params_dtype). MPI has no
     * 16-bit arithmetic, so with a 16-bit dt and size > 1 the sums go through `red`, an fp32
     * scratch of [T, h] + [T/size, h] floats: widened, summed in fp32, rounded once (for two
     * ranks the bits of a bf16/fp16 add). wgrad: the zeroed dt temporary every 16-bit weight
     * grad is written to before it is added to the fp32 main grad (mc_tp_wgrad_*). */
    enum mc_dtype dt;
    struct mc_backend *be;
    float *red;
    void *wgrad;
    /* the main grads' dtype (mc_param_set.grad_dtype): F16 / BF16 round every commit to it */
    enum mc_dtype grad_dt;
};

/* Element i of a dt array (activations and weights are `void *` + the group's dtype). */
static inline void *mc_tp_at(const void *p, enum mc_dtype dt, int64_t i)
{
    return (char *)p + (size_t)i * mc_dtype_size(dt);
}

/* ---- weight grads (Megatron without gradient-accumulation fusion) ----------------------- */
/* Where a backward op writes the grad of an n-element weight whose fp32 main grad is `grad`:
 * fp32: `grad` itself (the op adds into it, as before mixed precision); 16-bit: the group's
 * wgrad temporary at element `slot` (zeroed when `zero`: ops that ADD need it; a GEMM with
 * beta 0 does not), so the op makes Megatron's dt `param.grad`. */
void *mc_tp_wgrad_target(const struct mc_tp_group *g, float *grad, int64_t slot, int64_t n,
                         bool zero);
/* main_grad += float(param.grad): adds the temporary at `slot` into `grad` (16-bit only; with
 * grad_dt F16 the sum is rounded to fp16, Megatron's fp16 main_grad.add_(param.grad), and the
 * temporary is overwritten). */
void mc_tp_wgrad_commit(const struct mc_tp_group *g, float *grad, int64_t slot, int64_t n);

/* ---- mappings.c: the autograd regions of mappings.py, forward or backward half ---------- */
/* All-reduce (sum) in place over the group: the forward of reduce_from_tensor_model_parallel_region
 * and the backward of copy_to_tensor_model_parallel_region. */
/* x is in the group's dt (16-bit: summed in fp32 through g->red, rounded once). */
mc_status mc_tp_all_reduce_sum(const struct mc_tp_group *g, void *x, int64_t n);
/* fp32 all-reduces (the cross-entropy statistics, fp32 whatever dt). */
mc_status mc_tp_all_reduce_sum_f32(const struct mc_tp_group *g, float *x, int64_t n);
/* All-reduce (max) in place: the max step of the vocab-parallel cross-entropy (fp32). */
mc_status mc_tp_all_reduce_max(const struct mc_tp_group *g, float *x, int64_t n);
/* copy_to region: identity forward; backward all-reduces the input grad. */
mc_status mc_tp_copy_to_region_bwd(const struct mc_tp_group *g, void *dx, int64_t n);
/* reduce_from region: all-reduce forward; identity backward. */
mc_status mc_tp_reduce_from_region_fwd(const struct mc_tp_group *g, void *y, int64_t n);

/* gather_from_sequence_parallel_region forward (and the backward of scatter_to / reduce_scatter_to
 * the sequence-parallel region): full[size * n_local] = the ranks' local[n_local] blocks in rank
 * order (the first, sequence, dimension). */
mc_status mc_tp_all_gather_seq(const struct mc_tp_group *g, void *full, const void *local,
                               int64_t n_local);
/* reduce_scatter_to_sequence_parallel_region forward (and the backward of gather_from): local =
 * this rank's block of the element-wise sum over the group of full[size * n_local]. */
mc_status mc_tp_reduce_scatter_seq(const struct mc_tp_group *g, void *local, const void *full,
                                   int64_t n_local);

/* ---- layers.c ---------------------------------------------------------------------------- */
/* T is always the full token count. With g->sequence_parallel the tensors outside the TP
 * region (x of the column-parallel linear and its dx, y of the row-parallel linear and its dy,
 * the embedding output) are this rank's [T / size] rows, and `work` ([T, in] for the column,
 * [T, out] for the row-parallel linear, [T, h] for the embedding) holds the gathered or
 * not yet reduced full tensor; without sequence parallelism `work` is not used. */

/* Activations (x, y, dx, dy, work) and weights (w, b) are in g->dt; the weight grads dw, db
 * are the fp32 main grads, reached through mc_tp_wgrad_* (16-bit: each rounded to dt first).
 *
 * ColumnParallelLinear (gather_output=False): y[T, out_l] = x[T, in] w[out_l, in]^T + b[out_l]
 * (b may be NULL, or skipped by the caller to fuse it into the activation); with SP x is
 * all-gathered first. 16-bit: round(round(x w^T) + b), the two torch ops. */
mc_status mc_tp_linear_col_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   void *y, const void *x, const void *w, const void *b,
                                   int64_t T, int64_t in, int64_t out_l, void *work);
/* Backward: dw[out_l, in] += dy^T x; db[out_l] += colsum(dy) when db != NULL;
 * dx[T, in] = dy w, then all-reduced (the backward of copy_to). dx may be NULL (no input grad).
 * With SP x is all-gathered again (as Megatron does, instead of keeping it) and dx is
 * reduce-scattered to this rank's rows. dw_keep (16-bit dt only, else NULL): the dt weight
 * grad is written there and NOT added to dw (a tied weight whose other use adds to it first,
 * as autograd sums the two grads of one parameter in dt). */
mc_status mc_tp_linear_col_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    void *dx, float *dw, void *dw_keep, float *db,
                                    const void *dy, const void *x, const void *w, int64_t T,
                                    int64_t in, int64_t out_l, void *work);
/* RowParallelLinear (input_is_parallel, skip_bias_add): y[T, out] = all-reduce(x[T, in_l]
 * w[out, in_l]^T), or its reduce-scatter to this rank's rows with SP. The bias is added by the
 * caller after the reduction (bias-dropout-add). */
mc_status mc_tp_linear_row_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   void *y, const void *x, const void *w, int64_t T,
                                   int64_t in_l, int64_t out, void *work);
/* Backward: dw[out, in_l] += dy^T x; dx[T, in_l] = dy w (with SP dy is all-gathered first). */
mc_status mc_tp_linear_row_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    void *dx, float *dw, const void *dy, const void *x,
                                    const void *w, int64_t T, int64_t in_l, int64_t out,
                                    void *work);
/* VocabParallelEmbedding: y[T, h] = w[ids - start] on the owning rank, all-reduced; with SP
 * reduce-scattered to this rank's rows (reduce_scatter_embeddings). */
mc_status mc_tp_embedding_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                  void *y, const void *w, const int64_t *ids, int64_t T,
                                  int64_t h, int64_t vocab_local, void *work);
/* dw[V_l, h] += scatter of dy by ids owned by this rank (the grad of the reduce region is the
 * identity, so dy is already the full grad on every rank). dy [T, h] is full: with SP the
 * caller all-gathers its rows first. dw_keep: as for mc_tp_linear_col_backward, but added to
 * (in dt) rather than overwritten: keep = round(keep + round(this grad)), then keep goes into
 * dw. */
void mc_tp_embedding_backward(struct mc_backend *be, const struct mc_tp_group *g,
                              float *dw, void *dw_keep, const void *dy, const int64_t *ids,
                              int64_t T, int64_t h, int64_t vocab_local);

/* ---- cross_entropy.c --------------------------------------------------------------------- */
/* loss[T] = log(sum_j exp(logits_j - max)) - (logits_target - max) over the whole (padded)
 * vocabulary spread over the group; max[T] and sumexp[T] are kept for backward.
 * target_logit[T] is scratch. Everything is fp32: with 16-bit params the model widens the
 * logits (GPTModel's output.float(), as Megatron without --fp16-lm-cross-entropy): the ops
 * read the dt logits, widen them exactly and compute in fp32. */
mc_status mc_tp_cross_entropy_forward(struct mc_backend *be,
                                      const struct mc_tp_group *g, float *loss, float *max,
                                      float *sumexp, float *target_logit, const void *logits,
                                      const int64_t *target, int64_t T, int64_t vocab_local);
/* dlogits[T, V_l] = (softmax - onehot(target)) * dloss, computed in fp32 and rounded once to
 * dt (the backward of output.float()); may alias logits. */
void mc_tp_cross_entropy_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                  void *dlogits, const void *logits, const float *max,
                                  const float *sumexp, const int64_t *target, const float *dloss,
                                  int64_t T, int64_t vocab_local);

#endif /* MC_TENSOR_PARALLEL_H */
