/* Vocab-parallel cross-entropy, mirrors megatron/core/tensor_parallel/cross_entropy.py
 * (_VocabParallelCrossEntropy without label smoothing): local max -> all-reduce MAX, local sum
 * of exps and target logit -> all-reduce SUM, loss = log(sumexp) - target_logit. Padded vocab
 * entries are real logits and take part in the softmax, as in Megatron. The logits are in the
 * group's dt; the ops widen them (exactly) and compute in fp32, so 16-bit logits give the
 * numbers of Megatron's fp32 loss on output.float(). */
#include "tensor_parallel/tensor_parallel.h"

#include <math.h>

mc_status mc_tp_cross_entropy_forward(struct mc_backend *be,
                                      const struct mc_tp_group *g, float *loss, float *max,
                                      float *sumexp, float *target_logit, const void *logits,
                                      const int64_t *target, int64_t T, int64_t vocab_local)
{
    be->ops->xent_max(be, g->dt, max, logits, T, vocab_local);
    mc_status st = mc_tp_all_reduce_max(g, max, T);
    if (st != MC_OK)
        return st;
    be->ops->xent_sumexp(be, g->dt, sumexp, target_logit, logits, max, target, T,
                         vocab_local, (int64_t)g->rank * vocab_local);
    if ((st = mc_tp_all_reduce_sum_f32(g, sumexp, T)) != MC_OK)
        return st;
    if ((st = mc_tp_all_reduce_sum_f32(g, target_logit, T)) != MC_OK)
        return st;
    for (int64_t t = 0; t < T; t++)
        loss[t] = logf(sumexp[t]) - target_logit[t];
    return MC_OK;
}

void mc_tp_cross_entropy_backward(struct mc_backend *be, const struct mc_tp_group *g,
                                  void *dlogits, const void *logits, const float *max,
                                  const float *sumexp, const int64_t *target, const float *dloss,
                                  int64_t T, int64_t vocab_local)
{
    be->ops->xent_bwd(be, g->dt, dlogits, logits, max, sumexp, target, dloss, T, vocab_local,
                      (int64_t)g->rank * vocab_local);
}
