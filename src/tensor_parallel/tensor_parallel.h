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

/* The tensor-model-parallel group of this rank. */
struct mc_tp_group {
    int size;   /* tensor_model_parallel_size */
    int rank;   /* this rank's index in the group */
    void *comm; /* the group's communicator (a comm.c handle) once parallel_state wires it */
    bool sequence_parallel; /* activations outside the TP regions are [T/size] row shards */
};

/* ---- mappings.c: the autograd regions of mappings.py, forward or backward half ---------- */
/* All-reduce (sum) in place over the group: the forward of reduce_from_tensor_model_parallel_region
 * and the backward of copy_to_tensor_model_parallel_region. */
mc_status mc_tp_all_reduce_sum(const struct mc_tp_group *g, float *x, int64_t n);
/* All-reduce (max) in place: the max step of the vocab-parallel cross-entropy. */
mc_status mc_tp_all_reduce_max(const struct mc_tp_group *g, float *x, int64_t n);
/* copy_to region: identity forward; backward all-reduces the input grad. */
mc_status mc_tp_copy_to_region_bwd(const struct mc_tp_group *g, float *dx, int64_t n);
/* reduce_from region: all-reduce forward; identity backward. */
mc_status mc_tp_reduce_from_region_fwd(const struct mc_tp_group *g, float *y, int64_t n);

/* gather_from_sequence_parallel_region forward (and the backward of scatter_to / reduce_scatter_to
 * the sequence-parallel region): full[size * n_local] = the ranks' local[n_local] blocks in rank
 * order (the first, sequence, dimension). */
mc_status mc_tp_all_gather_seq(const struct mc_tp_group *g, float *full, const float *local,
                               int64_t n_local);
/* reduce_scatter_to_sequence_parallel_region forward (and the backward of gather_from): local =
 * this rank's block of the element-wise sum over the group of full[size * n_local]. */
mc_status mc_tp_reduce_scatter_seq(const struct mc_tp_group *g, float *local, const float *full,
                                   int64_t n_local);

/* ---- layers.c ---------------------------------------------------------------------------- */
/* T is always the full token count. With g->sequence_parallel the tensors outside the TP
 * region (x of the column-parallel linear and its dx, y of the row-parallel linear and its dy,
 * the embedding output) are this rank's [T / size] rows, and `work` ([T, in] for the column,
 * [T, out] for the row-parallel linear, [T, h] for the embedding) holds the gathered or
 * not yet reduced full tensor; without sequence parallelism `work` is not used. */

/* ColumnParallelLinear (gather_output=False): y[T, out_l] = x[T, in] w[out_l, in]^T + b[out_l]
 * (b may be NULL, or skipped by the caller to fuse it into the activation); with SP x is
 * all-gathered first. */
mc_status mc_tp_linear_col_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   float *y, const float *x, const float *w, const float *b,
                                   int64_t T, int64_t in, int64_t out_l, float *work);
/* Backward: dw[out_l, in] += dy^T x; db[out_l] += colsum(dy) when db != NULL;
 * dx[T, in] = dy w, then all-reduced (the backward of copy_to). dx may be NULL (no input grad).
 * With SP x is all-gathered again (as Megatron does, instead of keeping it) and dx is
 * reduce-scattered to this rank's rows. */
mc_status mc_tp_linear_col_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *w, int64_t T, int64_t in,
                                    int64_t out_l, float *work);
/* RowParallelLinear (input_is_parallel, skip_bias_add): y[T, out] = all-reduce(x[T, in_l]
 * w[out, in_l]^T), or its reduce-scatter to this rank's rows with SP. The bias is added by the
 * caller after the reduction (bias-dropout-add). */
mc_status mc_tp_linear_row_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                   float *y, const float *x, const float *w, int64_t T,
                                   int64_t in_l, int64_t out, float *work);
/* Backward: dw[out, in_l] += dy^T x; dx[T, in_l] = dy w (with SP dy is all-gathered first). */
mc_status mc_tp_linear_row_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                    float *dx, float *dw, const float *dy, const float *x,
                                    const float *w, int64_t T, int64_t in_l, int64_t out,
                                    float *work);
/* VocabParallelEmbedding: y[T, h] = w[ids - start] on the owning rank, all-reduced; with SP
 * reduce-scattered to this rank's rows (reduce_scatter_embeddings). */
mc_status mc_tp_embedding_forward(struct mc_backend *be, const struct mc_tp_group *g,
                                  float *y, const float *w, const int64_t *ids, int64_t T,
                                  int64_t h, int64_t vocab_local, float *work);
/* dw[V_l, h] += scatter of dy by ids owned by this rank (the grad of the reduce region is the
 * identity, so dy is already the full grad on every rank). dy [T, h] is full: with SP the
 * caller all-gathers its rows first. */
void mc_tp_embedding_backward(struct mc_backend *be, const struct mc_tp_group *g,
                              float *dw, const float *dy, const int64_t *ids, int64_t T,
                              int64_t h, int64_t vocab_local);

/* ---- cross_entropy.c --------------------------------------------------------------------- */
/* loss[T] = log(sum_j exp(logits_j - max)) - (logits_target - max) over the whole (padded)
 * vocabulary spread over the group; max[T] and sumexp[T] are kept for backward.
 * target_logit[T] is scratch. */
mc_status mc_tp_cross_entropy_forward(struct mc_backend *be,
                                      const struct mc_tp_group *g, float *loss, float *max,
                                      float *sumexp, float *target_logit, const float *logits,
                                      const int64_t *target, int64_t T, int64_t vocab_local);
/* dlogits[T, V_l] = (softmax - onehot(target)) * dloss; may alias logits. */
void mc_tp_cross_entropy_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                  float *dlogits, const float *logits, const float *max,
                                  const float *sumexp, const int64_t *target, const float *dloss,
                                  int64_t T, int64_t vocab_local);

#endif /* MC_TENSOR_PARALLEL_H */
