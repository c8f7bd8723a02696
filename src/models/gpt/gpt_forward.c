/* GPTModel forward (embedding -> decoder layers -> final norm -> output layer -> per-token
 * vocab-parallel cross-entropy) and backward, mirrors GPTModel.forward in
 * megatron/core/models/gpt/gpt_model.py, LanguageModelEmbedding and
 * TransformerBlock.forward (transformer_block.py). Batches arrive batch-first [b, s] as
 * pretrain_gpt's get_batch returns them; inside, everything is sequence-first. */
#include "models/gpt/gpt_model.h"

#include "megatron/dump.h"

#include <stdio.h>
#include <string.h>

static mc_status check_ids(const int64_t *ids, int64_t n, int64_t limit, const char *what,
                           const char *bound)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= limit)
            return mc_error(MC_ERR_SHAPE, "%s[%lld] = %lld is outside [0, %lld) (%s)", what,
                            (long long)i, (long long)ids[i], (long long)limit, bound);
    return MC_OK;
}

/* A tensor coming in at the stage boundary (what names it in errors) must be the stage tensor
 * of a b x s micro-batch (in any memory: stage_tensor_in copies from each kind). */
static mc_status check_stage_tensor(const struct mc_gpt_model *m, const struct mc_tensor *t,
                                    int64_t b, int64_t s, const char *what)
{
    struct mc_tensor want = mc_gpt_stage_tensor(m, b, s);
    if (!t || !t->data)
        return mc_error(MC_ERR_SHAPE, "pipeline stage %d: %s is missing",
                        m->cfg.pipeline_model_parallel_rank, what);
    if (t->dtype != want.dtype || !mc_tensor_same_shape(t, &want))
        return mc_error(MC_ERR_SHAPE, "%s is %s [%lld, %lld, %lld] (%d dims); expected %s "
                        "[%lld, %lld, %lld] (the residual stream's dtype, [s%s, b, h])", what,
                        mc_dtype_name(t->dtype), (long long)t->shape[0], (long long)t->shape[1],
                        (long long)t->shape[2], t->ndim, mc_dtype_name(want.dtype),
                        (long long)want.shape[0], (long long)want.shape[1],
                        (long long)want.shape[2], m->cfg.sequence_parallel ? "/tp" : "");
    return MC_OK;
}

/* Copies a checked stage tensor into the backend buffer dst: within the model's backend, from
 * the host, or from another backend's memory (another model's, e.g. the previous stage in
 * this process) through the host with that backend's copy op. */
static mc_status stage_tensor_in(struct mc_gpt_model *m, void *dst, const struct mc_tensor *t)
{
    struct mc_backend *be = m->be, *from = (struct mc_backend *)t->backend;
    size_t n = mc_tensor_nbytes(t);
    if (from == be) {
        be->ops->copy(be, dst, t->data, n);
    } else if (!from) {
        be->ops->copy_to_backend(be, dst, t->data, n);
    } else {
        void *h = MC_MEM_AS(MC_MEM_WORKSPACE, mc_alloc(n));
        if (!h)
            return mc_error(MC_ERR_NOMEM, "no host memory to stage a %zu-byte stage tensor", n);
        from->ops->copy_to_host(from, h, t->data, n);
        be->ops->copy_to_backend(be, dst, h, n);
        mc_free(h);
    }
    return MC_OK;
}

static mc_status check_batch(const struct mc_gpt_model *m, const struct mc_gpt_batch *bt)
{
    const struct mc_gpt_config *c = &m->cfg;
    const struct mc_tfm_dims *d = &m->dims;
    if (!bt)
        return mc_error(MC_ERR_SHAPE, "forward: no batch");
    if (d->first_stage && !bt->tokens)
        return mc_error(MC_ERR_SHAPE, "forward: no tokens");
    if (bt->b < 1 || bt->b > c->micro_batch_size)
        return mc_error(MC_ERR_SHAPE, "forward: batch size %lld is outside [1, %lld] "
                        "(--micro-batch-size)", (long long)bt->b,
                        (long long)c->micro_batch_size);
    if (bt->s < 1 || bt->s > c->seq_length)
        return mc_error(MC_ERR_SHAPE, "forward: sequence length %lld is outside [1, %lld] "
                        "(--seq-length)", (long long)bt->s, (long long)c->seq_length);
    if (c->sequence_parallel && bt->s % c->tensor_model_parallel_size != 0)
        return mc_error(MC_ERR_SHAPE, "forward: sequence length %lld is not divisible by "
                        "--tensor-model-parallel-size %d (--sequence-parallel: the first "
                        "dimension of the tensor should be divisible by tensor parallel size)",
                        (long long)bt->s, c->tensor_model_parallel_size);
    int64_t n = bt->b * bt->s;
    mc_status st;
    if (d->first_stage &&
        (st = check_ids(bt->tokens, n, c->padded_vocab_size, "tokens", "padded vocab")) != MC_OK)
        return st;
    if (d->last_stage && bt->labels &&
        (st = check_ids(bt->labels, n, c->padded_vocab_size, "labels", "padded vocab")) != MC_OK)
        return st;
    if (d->first_stage && bt->position_ids && c->position_embedding_type == MC_POS_LEARNED_ABSOLUTE &&
        (st = check_ids(bt->position_ids, n, c->max_position_embeddings, "position_ids",
                        "--max-position-embeddings")) != MC_OK)
        return st;
    if (!d->first_stage)
        return check_stage_tensor(m, bt->hidden_in, bt->b, bt->s,
                                  "forward: the previous stage's output (batch hidden_in)");
    return MC_OK;
}

/* [b, s] batch-first -> [s, b] sequence-first. */
static void to_seq_first(int64_t *dst, const int64_t *src, int64_t b, int64_t s)
{
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t si = 0; si < s; si++)
            dst[si * b + bi] = src[bi * s + si];
}

/* Host ids [b, s] (NULL: the positions t / b) into the backend buffer dst [s, b]: reordered in
 * host memory, then one copy_to_backend (the buffers are backend memory, not host). */
static mc_status ids_to_backend(struct mc_gpt_model *m, int64_t *dst, const int64_t *src,
                                int64_t b, int64_t s)
{
    int64_t T = b * s, *h = MC_MEM_AS(MC_MEM_WORKSPACE, mc_alloc((size_t)T * sizeof(*h)));
    if (!h)
        return mc_error(MC_ERR_NOMEM, "forward: no host memory to stage %lld ids", (long long)T);
    if (src)
        to_seq_first(h, src, b, s);
    else
        for (int64_t t = 0; t < T; t++)
            h[t] = t / b;
    m->be->ops->copy_to_backend(m->be, dst, h, (size_t)T * sizeof(*h));
    mc_free(h);
    return MC_OK;
}

/* Per-token floats between host [b, s] and backend [s, b], staged in host memory: with out,
 * the backend buffer is copied out and reordered into it; else in is reordered and copied in. */
static mc_status tokens_f32(struct mc_gpt_model *m, float *out, const float *in, float *dev,
                            int64_t b, int64_t s)
{
    bool to_host = out != NULL;
    float *h = MC_MEM_AS(MC_MEM_WORKSPACE, mc_alloc((size_t)(b * s) * sizeof(*h)));
    if (!h)
        return mc_error(MC_ERR_NOMEM, "no host memory to stage %lld per-token values",
                        (long long)(b * s));
    if (to_host)
        m->be->ops->copy_to_host(m->be, h, dev, (size_t)(b * s) * sizeof(*h));
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t si = 0; si < s; si++) {
            if (to_host)
                out[bi * s + si] = h[si * b + bi];
            else
                h[si * b + bi] = in[bi * s + si];
        }
    if (!to_host)
        m->be->ops->copy_to_backend(m->be, dev, h, (size_t)(b * s) * sizeof(*h));
    mc_free(h);
    return MC_OK;
}

/* The call context of the forward held in slot sl (its shapes, mask and dropout stream). */
static struct mc_tfm_ctx make_ctx(struct mc_gpt_model *m, const struct mc_gpt_slot *sl)
{
    const struct mc_gpt_config *c = &m->cfg;
    int64_t b = sl->b, s = sl->s;
    int64_t T_sp = c->sequence_parallel ? b * s / m->tp.size : b * s;
    return (struct mc_tfm_ctx){
        .be = m->be,
        .dt = m->dt,
        .rdt = m->rdt,
        .tp = &m->tp,
        .cfg = c,
        .d = &m->dims,
        .scr = &m->scratch,
        .b = b,
        .s = s,
        .T = b * s,
        .T_sp = T_sp,
        .sp_first = c->sequence_parallel ? m->tp.rank * T_sp : 0,
        .attn_mask = sl->mask,
        .rope_cos = m->rope_cos,
        .rope_sin = m->rope_sin,
        .hidden_dropout = sl->training && c->hidden_dropout > 0.0f,
        .attention_dropout = sl->training && c->attention_dropout > 0.0f,
        .recompute_core_attention = c->recompute_granularity == MC_RECOMPUTE_SELECTIVE &&
                                    c->recompute_core_attention && !c->flash_attention,
        .seed = c->seed,
        .step = sl->step,
        .micro = sl->micro,
        .training = sl->training,
        .moe = m->moe,
    };
}

/* LanguageModelEmbedding: word (+ learned position) embeddings, then embedding dropout. With
 * sequence parallelism the word embeddings are reduce-scattered to this rank's rows (Megatron
 * does that with RoPE; with learned positions it all-reduces and then splits: the same values,
 * as each token's row comes from exactly one rank) and the rest runs on those rows. */
static mc_status embed(struct mc_gpt_model *m, struct mc_gpt_slot *sl,
                       const struct mc_tfm_ctx *c, void *x_out)
{
    const struct mc_tfm_dims *d = &m->dims;
    /* --fp32-residual-connection: the dt sum in scratch r32b, then embeddings.float() and the
     * dropout in fp32 */
    bool widen = m->rdt != m->dt;
    void *x0 = widen ? (void *)m->scratch.r32b : x_out;
    mc_status st = mc_tp_embedding_forward(m->be, &m->tp, x0, m->word_w, sl->ids_sf, c->T, d->h,
                                           d->V_l, m->scratch.h2);
    if (st != MC_OK)
        return st;
    if (m->pos_w) { /* words + positions: one dt add (rounded once) */
        void *pe = m->scratch.h1;
        m->be->ops->embedding_fwd(m->be, m->dt, pe, m->pos_w, sl->pos_sf + c->sp_first,
                                  c->T_sp, d->h, 0, m->cfg.max_position_embeddings);
        m->be->ops->bias_dropout_add(m->be, m->dt, x0, x0, NULL, pe, NULL, 1.0f, c->T_sp, d->h);
    }
    if (widen)
        m->be->ops->convert(m->be, x_out, m->rdt, x0, m->dt, c->T_sp * d->h);
    if (c->hidden_dropout) {
        mc_tfm_dropout_mask(c, sl->emb_keep, MC_TFM_SITE_EMBEDDING, c->sp_first * d->h,
                            c->T_sp * d->h, m->cfg.hidden_dropout);
        m->be->ops->bias_dropout_add(m->be, m->rdt, x_out, x_out, NULL, NULL, sl->emb_keep,
                                     mc_tfm_dropout_scale(m->rdt, m->cfg.hidden_dropout),
                                     c->T_sp, d->h);
    }
    return MC_OK;
}

/* Debug hook point and run-dump point (include/megatron/dump.h): forward tensors go to both
 * under the same module name ("forward." in a run dump), backward ones to the run dump only.
 * One branch each while neither records. */
static void hook_point(const struct mc_gpt_model *m, enum mc_dump_point pt, const char *name,
                       enum mc_dtype dt, const void *x, int64_t s, int64_t b, int64_t n)
{
    bool debug = pt == MC_DUMP_POINT_FORWARD && mc_dump_hooks_active();
    if (!debug && !mc_dump_point_on(pt))
        return;
    int64_t shape[3] = {s, b, n};
    if (debug)
        mc_dump_hook(name, dt, 3, shape, x);
    mc_dump_point(pt, pt == MC_DUMP_POINT_FORWARD ? "forward." : "backward.", name, dt, 3,
                  shape, x);
}

/* dt: the tensor's dtype (m->dt, or m->rdt for the residual stream's) */
static void hook(const struct mc_gpt_model *m, const char *name, enum mc_dtype dt, const void *x,
                 int64_t s, int64_t b, int64_t n)
{
    hook_point(m, MC_DUMP_POINT_FORWARD, name, dt, x, s, b, n);
}

/* A layer's point: decoder.layers.<global index>.<what> (Megatron's module name). */
static void layer_point(const struct mc_gpt_model *m, enum mc_dump_point pt, int64_t gl,
                        const char *what, const void *x, int64_t s, int64_t b)
{
    if (!mc_dump_point_on(pt) && !(pt == MC_DUMP_POINT_FORWARD && mc_dump_hooks_active()))
        return;
    char name[64];
    snprintf(name, sizeof name, "decoder.layers.%lld.%s", (long long)gl, what);
    if (strcmp(what, "input") == 0 && pt == MC_DUMP_POINT_FORWARD) /* not a debug hook point */
        mc_dump_point(pt, "forward.", name, m->rdt, 3, (int64_t[3]){s, b, m->dims.h}, x);
    else
        hook_point(m, pt, name, m->rdt, x, s, b, m->dims.h);
}

/* The context of global layer gl: the model's, or under MC_TEST_PERTURB_LN_EPS (tests of the
 * alignment tools, include/megatron/dump.h) a copy whose norm epsilon is 1e4 times too large. */
static const struct mc_tfm_ctx *layer_ctx(const struct mc_tfm_ctx *c, int64_t gl,
                                          struct mc_tfm_ctx *pc, struct mc_gpt_config *pcfg)
{
    if (!mc_dump_test_perturbed_layer(gl))
        return c;
    *pcfg = *c->cfg;
    pcfg->norm_epsilon *= 1e4f;
    *pc = *c;
    pc->cfg = pcfg;
    return pc;
}

static const void *output_weight(const struct mc_gpt_model *m)
{
    return m->out_w ? m->out_w : m->word_w;
}

/* Last stage: final norm, output layer (logits [s, b, V/tp]) and the per-token loss. */
static mc_status head_forward(struct mc_gpt_model *m, struct mc_gpt_slot *sl,
                              const struct mc_tfm_ctx *c, const struct mc_gpt_batch *batch,
                              float *loss)
{
    const struct mc_tfm_dims *d = &m->dims;
    int64_t b = c->b, s = c->s, T = c->T;
    mc_status st;
    mc_tfm_norm_forward(c, sl->lnf, sl->lnf_mean, sl->lnf_rstd, sl->x_final, m->lnf_w, m->lnf_b);
    hook(m, "decoder.final_layernorm.output", m->dt, sl->lnf, c->T_sp / b, b, d->h);
    if ((st = mc_tp_linear_col_forward(m->be, &m->tp, sl->logits, sl->lnf, output_weight(m), NULL,
                                       T, d->h, d->V_l, m->scratch.h2)) != MC_OK)
        return st;
    hook(m, "output_layer.output", m->dt, sl->logits, s, b, d->V_l);
    if (!batch->labels)
        return MC_OK;
    if ((st = ids_to_backend(m, sl->labels_sf, batch->labels, b, s)) != MC_OK)
        return st;
    if ((st = mc_tp_cross_entropy_forward(m->be, &m->tp, m->loss_sf, sl->xent_max,
                                          sl->xent_sumexp, m->xent_target, sl->logits,
                                          sl->labels_sf, T,
                                          d->V_l)) != MC_OK)
        return st;
    return loss ? tokens_f32(m, loss, NULL, m->loss_sf, b, s) : MC_OK;
}

mc_status mc_gpt_forward(mc_gpt_model *m, const struct mc_gpt_batch *batch, bool training,
                         float *loss)
{
    struct mc_gpt_slot *sl = &m->slots[m->cur];
    sl->valid = false;
    mc_status st = check_batch(m, batch);
    if (st != MC_OK)
        return st;
    if (loss && !batch->labels)
        return mc_error(MC_ERR_SHAPE, "forward: a loss output needs labels");
    if (loss && !m->dims.last_stage)
        return mc_error(MC_ERR_SHAPE, "forward: the loss is computed on the last pipeline stage "
                        "(this is stage %d of %d)", m->cfg.pipeline_model_parallel_rank,
                        m->cfg.pipeline_model_parallel_size);
    const struct mc_tfm_dims *d = &m->dims;
    int64_t b = batch->b, s = batch->s;
    sl->b = b;
    sl->s = s;
    sl->mask = batch->attention_mask;
    if (sl->mask && !sl->mask_copy)
        return mc_error(MC_ERR_CONFIG, "forward: the batch has an explicit attention mask but "
                        "the model was built causal-only (causal_mask_only, no "
                        "--reset-attention-mask): it has no room to keep the mask");
    if (sl->mask) { /* host memory, and the caller's buffer may hold another micro-batch later */
        m->be->ops->copy_to_backend(m->be, sl->mask_copy, sl->mask, (size_t)(b * s * s));
        sl->mask = sl->mask_copy;
    }
    sl->training = training;
    sl->labels = batch->labels != NULL;
    sl->step = (uint32_t)m->step;
    sl->micro = training ? m->micro_next++ : 0;
    struct mc_tfm_ctx c = make_ctx(m, sl);

    void *x0 = sl->acts[0].x_in;
    if (d->first_stage) {
        if ((st = mc_gpt_hook_param_use(m, mc_gpt_layer_first_param(m, 0))) != MC_OK)
            return st;
        if ((st = ids_to_backend(m, sl->ids_sf, batch->tokens, b, s)) != MC_OK ||
            (m->pos_w && (st = ids_to_backend(m, sl->pos_sf, batch->position_ids, b, s))))
            return st;
        if ((st = embed(m, sl, &c, x0)) != MC_OK)
            return st;
        hook(m, "embedding.output", m->rdt, x0, c.T_sp / b, b, d->h);
    } else {
        if ((st = stage_tensor_in(m, x0, batch->hidden_in)) != MC_OK)
            return st;
    }
    if (m->cfg.distribute_saved_activations && (c.T_sp * d->h) % m->tp.size)
        return mc_error(MC_ERR_SHAPE, "forward: --distribute-saved-activations splits each "
                        "checkpointed [s, b, h] input into %d equal parts, but %lld x %lld x "
                        "%lld elements do not divide", m->tp.size, (long long)s, (long long)b,
                        (long long)d->h);
    struct mc_tfm_ctx pc;
    struct mc_gpt_config pcfg;
    for (int64_t l = 0; l < d->L; l++) {
        void *out = l + 1 < d->L ? sl->acts[l + 1].x_in : sl->x_final;
        if (sl->ckpt[l]) /* the group's input: this rank's 1/tp of it is what stays */
            m->be->ops->copy(m->be, sl->ckpt[l],
                             mc_tp_at(sl->acts[l].x_in, m->rdt, m->tp.rank * (c.T_sp * d->h /
                                                                             m->tp.size)),
                             m->rsize * (size_t)(c.T_sp * d->h / m->tp.size));
        int64_t gl = d->layer_offset + l; /* dropout sites and layer scaling use the global index */
        layer_point(m, MC_DUMP_POINT_FORWARD, gl, "input", sl->acts[l].x_in, c.T_sp / b, b);
        if ((st = mc_gpt_hook_param_use(m, mc_gpt_layer_first_param(m, l + 1))) != MC_OK ||
            (st = mc_tfm_layer_forward(layer_ctx(&c, gl, &pc, &pcfg), gl, &m->layer_w[l],
                                       &sl->acts[l], out)) != MC_OK)
            return st;
        layer_point(m, MC_DUMP_POINT_FORWARD, gl, "output", out, c.T_sp / b, b);
    }
    if (d->last_stage && ((st = mc_gpt_hook_param_use(m, m->n_params)) != MC_OK ||
                          (st = head_forward(m, sl, &c, batch, loss)) != MC_OK))
        return st;
    sl->valid = true;
    return MC_OK;
}

/* Full recompute: reruns the forward of the group [first, end) from its kept input, with
 * the forward's context (shapes, mask, dropout stream: the same bits), refilling the work
 * area its backward reads; the group's output goes to rc_out (the forward's copy was
 * consumed or sent on). tensor_parallel.random's CheckpointFunction, without RNG states to
 * restore: the dropout masks are drawn from counters. */
static mc_status recompute_group(struct mc_gpt_model *m, const struct mc_gpt_slot *sl,
                                 const struct mc_tfm_ctx *c, int64_t first, int64_t end)
{
    const struct mc_tfm_dims *d = &m->dims;
    mc_status st;
    if (sl->ckpt[first] &&
        (st = mc_tp_all_gather_seq(&m->tp, sl->acts[first].x_in, sl->ckpt[first],
                                   c->T_sp * d->h / m->tp.size)) != MC_OK)
        return st;
    for (int64_t l = first; l < end; l++) {
        void *out = l + 1 < end ? sl->acts[l + 1].x_in : m->rc_out;
        if ((st = mc_tfm_layer_forward(c, d->layer_offset + l, &m->layer_w[l], &sl->acts[l],
                                       out)) != MC_OK)
            return st;
    }
    return MC_OK;
}

/* Layers in reverse, then the embeddings on the first stage; m->dx holds the grad of the
 * last layer's output on entry and the grad of this stage's input on exit. The last layer of
 * a recomputed group first reruns the group. */
static mc_status body_backward(struct mc_gpt_model *m, const struct mc_gpt_slot *sl,
                               const struct mc_tfm_ctx *c)
{
    const struct mc_tfm_dims *d = &m->dims;
    mc_status st;
    for (int64_t l = d->L - 1; l >= 0; l--) {
        int64_t first = mc_gpt_recompute_group(m, l);
        if (first >= 0 && l + 1 == mc_gpt_recompute_group_end(m, first) &&
            (st = recompute_group(m, sl, c, first, l + 1)) != MC_OK)
            return st;
        layer_point(m, MC_DUMP_POINT_BACKWARD, d->layer_offset + l, "output", m->dx, c->T_sp / c->b,
                    c->b);
        if ((st = mc_tfm_layer_backward(c, d->layer_offset + l, &m->layer_w[l], &m->layer_g[l],
                                        &sl->acts[l], m->dx)) != MC_OK ||
            (st = mc_gpt_hook_grad_ready(m, mc_gpt_layer_first_param(m, l))) != MC_OK)
            return st;
        layer_point(m, MC_DUMP_POINT_BACKWARD, d->layer_offset + l, "input", m->dx, c->T_sp / c->b,
                    c->b);
    }
    if (!d->first_stage)
        return MC_OK;
    if (c->hidden_dropout)
        m->be->ops->bias_dropout_add(m->be, m->rdt, m->dx, m->dx, NULL, NULL, sl->emb_keep,
                                     mc_tfm_dropout_scale(m->rdt, m->cfg.hidden_dropout),
                                     c->T_sp, d->h);
    /* the backward of embeddings.float() (--fp32-residual-connection): the grad rounded to dt */
    void *dx = m->dx;
    if (m->rdt != m->dt) {
        dx = m->scratch.r32b;
        m->be->ops->convert(m->be, dx, m->dt, m->dx, m->rdt, c->T_sp * d->h);
    }
    /* the backward of the sequence-parallel scatter: every rank needs every row's grad */
    if (m->cfg.sequence_parallel) {
        void *shard = dx;
        dx = m->scratch.h1;
        if ((st = mc_tp_all_gather_seq(&m->tp, dx, shard, c->T_sp * d->h)) != MC_OK)
            return st;
    }
    /* the tied weight's first grad (the output layer's) waits in tied_wgrad (16-bit) */
    mc_tp_embedding_backward(m->be, &m->tp, m->word_g, m->tied_wgrad, dx, sl->ids_sf, c->T, d->h,
                             d->V_l);
    if (m->pos_g) {
        int64_t n = m->cfg.max_position_embeddings * d->h;
        void *t = mc_tp_wgrad_target(&m->tp, m->pos_g, 0, n, true);
        m->be->ops->embedding_bwd(m->be, m->dt, t, dx, sl->pos_sf, c->T, d->h, 0,
                                  m->cfg.max_position_embeddings);
        mc_tp_wgrad_commit(&m->tp, m->pos_g, 0, n);
    }
    return mc_gpt_hook_grad_ready(m, 0);
}

mc_status mc_gpt_backward(mc_gpt_model *m, const float *dloss)
{
    if (!m->dims.last_stage)
        return mc_error(MC_ERR_SHAPE, "backward from the loss runs on the last pipeline stage; "
                        "stage %d takes the grad of its output (mc_gpt_backward_stage)",
                        m->cfg.pipeline_model_parallel_rank);
    struct mc_gpt_slot *sl = &m->slots[m->cur];
    if (!sl->valid || !sl->labels)
        return mc_error(MC_ERR_SHAPE, "backward needs a successful forward with labels "
                        "(and at most one backward per forward)");
    if (!dloss)
        return mc_error(MC_ERR_SHAPE, "backward: no dloss");
    sl->valid = false; /* the logits are overwritten by their grad below */
    const struct mc_tfm_dims *d = &m->dims;
    struct mc_tfm_ctx c = make_ctx(m, sl);
    int64_t b = c.b, s = c.s, T = c.T;
    mc_status st;
    if ((st = tokens_f32(m, NULL, dloss, m->dloss_sf, b, s)) != MC_OK)
        return st;

    mc_tp_cross_entropy_backward(m->be, &m->tp, sl->logits, sl->logits, sl->xent_max,
                                 sl->xent_sumexp, sl->labels_sf, m->dloss_sf, T, d->V_l);
    void *dlnf = m->scratch.h2;
    /* with the tied embedding on this stage the output layer's dt grad is kept for the
     * embedding's backward to add to (tied_wgrad; NULL otherwise) */
    if ((st = mc_tp_linear_col_backward(m->be, &m->tp, dlnf, m->out_g ? m->out_g : m->word_g,
                                        m->out_g ? NULL : m->tied_wgrad, NULL, sl->logits,
                                        sl->lnf, output_weight(m), T, d->h, d->V_l,
                                        m->scratch.h1)) != MC_OK)
        return st;
    mc_tfm_norm_backward(&c, m->dx, m->lnf_g, m->lnf_bg, dlnf, sl->x_final, m->lnf_w,
                         sl->lnf_mean, sl->lnf_rstd);
    if ((st = mc_gpt_hook_grad_ready(m, mc_gpt_layer_first_param(m, d->L))) != MC_OK)
        return st;
    return body_backward(m, sl, &c);
}

mc_status mc_gpt_backward_stage(mc_gpt_model *m, const struct mc_tensor *dhidden_out)
{
    if (m->dims.last_stage)
        return mc_error(MC_ERR_SHAPE, "mc_gpt_backward_stage is for pipeline stages before the "
                        "last; the last stage starts from the loss (mc_gpt_backward)");
    struct mc_gpt_slot *sl = &m->slots[m->cur];
    if (!sl->valid)
        return mc_error(MC_ERR_SHAPE, "backward needs a successful forward "
                        "(and at most one backward per forward)");
    mc_status st = check_stage_tensor(m, dhidden_out, sl->b, sl->s,
                                      "backward: the grad of this stage's output");
    if (st)
        return st;
    sl->valid = false;
    struct mc_tfm_ctx c = make_ctx(m, sl);
    if ((st = stage_tensor_in(m, m->dx, dhidden_out)) != MC_OK)
        return st;
    return body_backward(m, sl, &c);
}
