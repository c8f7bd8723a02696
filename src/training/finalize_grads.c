/* finalize_model_grads of megatron/core/distributed/finalize_model_grads.py (core_v0.12.1)
 * on the trainer's chunks: the data-parallel grad sync, the sequence-parallel layernorm
 * all-reduce, the pipeline's tied-embedding all-reduce and the per-token normalisation. */
#include "training/trainer.h"

#include <string.h>

/* finalize_model_grads' _allreduce_word_embedding_grads: the tied embedding's grad is summed
 * over the embedding group (first and last stage), after the data-parallel reduction (with
 * the distributed optimizer only the shard this rank owns, the part its step reads; Megatron
 * all-reduces the whole main_grad of the embedding). */
static mc_status pp_embedding_grad_sync(struct trainer *t)
{
    if (!t->pp.embedding_group)
        return MC_OK;
    struct mc_param_view v = mc_train_tied_embedding(t);
    float *g = v.grad;
    int64_t n = v.numel;
    int c = mc_ps_is_pipeline_first_stage(&t->par.ps) ? 0 : t->m.vp - 1; /* the chunk holding it */
    if (t->o.dopt) /* after the reduce-scatter: this rank's shard (same range on both stages) */
        mc_distopt_param_main_grad(t->o.dopts[c], mc_gpt_param_index(t->m.chunks[c], v.name), &g,
                                   &n);
    mc_status st = mc_comm_all_reduce(t->pp.embedding_group, g, n, MC_DTYPE_F32, MC_COMM_SUM,
                                      "embedding-group word-embedding grad all-reduce");
    return st ? st : mc_ddp_round_grads(mc_gpt_param_set(t->m.chunks[c]), g, n); /* fp16 sum */
}

/* finalize_model_grads' _allreduce_layernorm_grads (--sequence-parallel): after the
 * data-parallel reduction. With the distributed optimizer the reduced grads are this rank's
 * main_grad shards, so those are summed over the tensor-parallel group (every tp rank of a
 * data-parallel rank has the same buffer layout, hence the same shard ranges); Megatron
 * all-reduces the whole main_grad of these params. */
static mc_status sp_grad_sync_chunk(struct trainer *t, mc_gpt_model *m, mc_distopt *dopt)
{
    const struct mc_gpt_config *cfg = mc_gpt_model_config(m);
    if (!dopt || (!cfg->sequence_parallel && !cfg->qk_layernorm)) { /* + the q/k layernorms */
        mc_status st = mc_gpt_sequence_parallel_grad_sync(m);
        for (int64_t i = 0; i < mc_gpt_num_params(m) && !st; i++) /* an fp16 buffer's sums */
            if (mc_gpt_param(m, i).sequence_parallel)
                st = mc_ddp_round_grads(mc_gpt_param_set(m), mc_gpt_param(m, i).grad,
                                        mc_gpt_param(m, i).numel);
        return st;
    }
    int64_t total = 0, n;
    float *g;
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++)
        if (mc_gpt_param(m, i).sequence_parallel) {
            mc_distopt_param_main_grad(dopt, i, &g, &n);
            total += n;
        }
    if (total == 0)
        return MC_OK;
    float *tmp = mc_alloc((size_t)(total > 0 ? total : 1) * sizeof(float));
    if (!tmp)
        return MC_ERR_NOMEM;
    for (int pass = 0; pass < 2; pass++) { /* gather, all-reduce, scatter back */
        int64_t off = 0;
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
            if (!mc_gpt_param(m, i).sequence_parallel)
                continue;
            mc_distopt_param_main_grad(dopt, i, &g, &n);
            memcpy(pass ? g : tmp + off, pass ? tmp + off : g, (size_t)n * sizeof(float));
            off += n;
        }
        mc_status st = pass ? MC_OK : mc_comm_all_reduce(t->par.ps.group[MC_PS_TP].comm, tmp, total,
                                                         MC_DTYPE_F32, MC_COMM_SUM,
                                                         "sequence-parallel grad all-reduce");
        if (!st && !pass) /* an fp16 buffer's sums */
            st = mc_ddp_round_grads(mc_gpt_param_set(m), tmp, total);
        if (st) {
            mc_free(tmp);
            return st;
        }
    }
    mc_free(tmp);
    return MC_OK;
}

/* Megatron collects these grads of every model chunk; the sums are per element, so chunk by
 * chunk is the same. */
static mc_status sp_grad_sync(struct trainer *t)
{
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++)
        st = sp_grad_sync_chunk(t, t->m.chunks[v], t->o.dopt ? t->o.dopts[v] : NULL);
    return st;
}

/* finalize_model_grads: the data-parallel all-reduce, then the sequence-parallel layernorm
 * all-reduce over the tensor-parallel group (--sequence-parallel) and the pipeline
 * embedding all-reduce (tied embeddings with pp > 1), each under Megatron's timer, then the
 * per-token loss normalisation. */
mc_status mc_train_finalize_grads(struct trainer *t, bool per_token, float num_tokens)
{
    struct mc_timer *sync = timer(t, "all-grads-sync", 1);
    mc_timer_start(sync);
    /* the distributed optimizer reduce-scatters (and scales) the grads in its own step */
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++) /* each chunk's DDP, in chunk order */
        st = mc_ddp_grad_sync(t->o.ddps[v]);
    mc_timer_stop(sync);
    if (st)
        return st;
    static const char *const others[] = {"layernorm-grads-all-reduce",
                                         "embedding-grads-all-reduce"};
    for (int k = 0; k < 2; k++) {
        struct mc_timer *tm = timer(t, others[k], 1);
        mc_timer_start(tm);
        st = k == 1 ? pp_embedding_grad_sync(t) : sp_grad_sync(t);
        mc_timer_stop(tm);
        if (st)
            return st;
    }
    /* num_tokens is already the token count of the whole data-parallel step */
    for (int v = 0; v < t->m.vp && per_token && !t->o.dopt && !st; v++)
        st = mc_ddp_scale_grads(mc_gpt_param_set(t->m.chunks[v]), 1.0f / num_tokens);
    return st;
}
