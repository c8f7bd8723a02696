/* GPTModel: mirrors megatron/core/models/gpt/gpt_model.py with the local layer spec
 * (gpt_layer_specs.py:get_gpt_layer_local_spec), LanguageModelEmbedding and the output layer +
 * vocab-parallel loss. Owns one parameter block and one grad block (named views in Megatron's
 * state_dict order) and every activation buffer, sized at init for (micro_batch_size,
 * seq_length) so that forward and backward never allocate. The activations backward reads are
 * kept per slot (mc_gpt_set_activation_slots): a pipeline stage keeps each in-flight
 * micro-batch in its own slot, as Megatron keeps each one's autograd graph; the scratch,
 * weights and grads are shared.
 *
 * Dropout randomness (the exact contract the PyTorch twin reproduces; rng.h defines Philox
 * and the keep rule): key = config seed; counter word c2 = the step set by mc_gpt_set_step;
 * c3 = ((micro & 0xff) << 24) | site and c1_hi = micro >> 8 (so c1 = (j >> 32) | (c1_hi << 16)),
 * where micro counts the training forwards since the last mc_gpt_set_step (< 2^24) and site is
 * 0 for the embedding dropout, 1 + 3l for the attention probabilities of layer l (0-based,
 * global across pipeline stages), 2 + 3l after linear_proj and 3 + 3l after linear_fc2.
 * Element indices: hidden sites index the sequence-first [s, b, h] tensor; attention sites
 * index the GLOBAL [b, num_attention_heads, s, s] probabilities (so masks do not depend on the
 * tensor-parallel size); with sequence parallelism a rank draws the elements of its own rows
 * of the global [s, b, h] tensor (so masks do not depend on it either).
 *
 * Initialization (spec §4): every weight is a slice of a full master matrix whose element k is
 * normal sample k of Philox stream (c2 = 0xffffffff, c3 = ordinal) with ordinals in Megatron's
 * construction order: word embeddings 0, position embeddings 1, layer l (global): linear_proj
 * 2 + 4l, linear_qkv 3 + 4l, linear_fc1 4 + 4l, linear_fc2 5 + 4l, untied output layer 2 + 4L
 * (the tied copy on the last pipeline stage draws the word-embedding stream 0). Std is
 * init_method_std, or init_method_std / sqrt(2 num_layers) for linear_proj and linear_fc2.
 * The SwiGLU fc1 master is the logical [gate_full; up_full] and rank r holds
 * [gate_r; up_r], so the model is the same for any tensor-parallel size or pipeline split
 * (Megatron's CPU init is not, spec §4). */
#include "models/gpt/gpt_model.h"

#include "parallel_state/parallel_state.h"
#include "transformer/moe/moe.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- dims ------------------------------------------------------------------------------- */

static void derive_dims(struct mc_tfm_dims *d, const struct mc_gpt_config *c)
{
    /* virtual stage v * pp + r of pp * vp (vp = 1 without interleaving), spec §1.5; its
     * layers as Megatron assigns them (even, or uneven first / last stages) */
    int pp = c->pipeline_model_parallel_size;
    int vp = c->virtual_pipeline_model_parallel_size ? c->virtual_pipeline_model_parallel_size : 1;
    int64_t stage = (int64_t)c->virtual_pipeline_model_parallel_rank * pp +
                    c->pipeline_model_parallel_rank;
    mc_gpt_stage_layers(c, c->pipeline_model_parallel_rank, c->virtual_pipeline_model_parallel_rank,
                        &d->L, &d->layer_offset);
    d->first_stage = stage == 0;
    d->last_stage = stage == (int64_t)pp * vp - 1;
    d->h = c->hidden_size;
    d->np = c->num_attention_heads;
    d->ng = c->num_query_groups;
    d->hn = c->kv_channels;
    d->ffn = c->ffn_hidden_size;
    d->V = c->padded_vocab_size;
    d->tp = c->tensor_model_parallel_size;
    d->tp_rank = c->tensor_model_parallel_rank;
    d->np_l = d->np / d->tp;
    d->ng_l = d->ng / d->tp;
    d->per_group = d->np / d->ng;
    d->qkv_l = (d->np + 2 * d->ng) * d->hn / d->tp;
    d->ctx_l = d->np_l * d->hn;
    d->gated = c->activation == MC_ACT_SWIGLU;
    d->ffn_l = d->ffn / d->tp;
    d->fc1_l = d->gated ? 2 * d->ffn_l : d->ffn_l;
    d->V_l = d->V / d->tp;
    d->rot_dim = 0;
    if (c->position_embedding_type == MC_POS_ROPE) {
        d->rot_dim = d->hn;
        if (c->rotary_percent < 1.0f)
            d->rot_dim = (int64_t)((double)d->hn * (double)c->rotary_percent);
    }
    d->b_max = c->micro_batch_size;
    d->s_max = c->seq_length;
    d->layernorm = c->normalization == MC_NORM_LAYERNORM;
    d->linear_bias = c->add_bias_linear;
    d->qkv_bias = c->add_bias_linear || c->add_qkv_bias;
    d->qk_layernorm = c->qk_layernorm;
    d->qk_rows = d->np_l + d->ng_l;
    if (c->num_moe_experts > 0) { /* mixture of experts (transformer/moe/) */
        d->E = c->num_moe_experts;
        d->topk = c->moe_router_topk;
        d->moe_ffn_l = c->moe_ffn_hidden_size / d->tp;
        d->moe_fc1_l = d->gated ? 2 * d->moe_ffn_l : d->moe_ffn_l;
        d->moe_rows = d->b_max * d->s_max * d->topk;
    }
}

/* ---- parameters ------------------------------------------------------------------------- */

/* Adds one parameter (pass 2 also records its slot pointers). */
static void add_param(struct mc_gpt_model *m, bool assign, const struct mc_gpt_param_spec *sp,
                      void **slot_p, float **slot_g)
{
    int64_t numel = sp->ndim == 1 ? sp->d0 : sp->d0 * sp->d1;
    if (assign) {
        struct mc_gpt_param *p = &m->params[m->n_params];
        snprintf(p->name, sizeof(p->name), "%s", sp->name);
        p->offset = m->n_elements;
        p->init = sp->init;
        p->ordinal = sp->ordinal;
        p->gated = sp->gated;
        size_t len = strlen(sp->name);
        p->view = (struct mc_param_view){
            .name = p->name,
            .ndim = sp->ndim,
            .shape = {sp->d0, sp->ndim == 1 ? 0 : sp->d1},
            .numel = numel,
            .data = m->param_block + p->offset,
            .grad = m->grad_block + p->offset,
            .no_weight_decay = sp->ndim == 1 || (len >= 5 && strcmp(sp->name + len - 5, ".bias") == 0),
            .tensor_parallel = sp->partition_dim >= 0,
            .partition_dim = sp->partition_dim,
            .shared = sp->shared,
        };
        /* the layers read the dt weights: the compute block, or the fp32 params themselves */
        *slot_p = m->compute_block ? (char *)m->compute_block + (size_t)p->offset * m->esize
                                   : (void *)p->view.data;
        *slot_g = p->view.grad;
    }
    m->n_params++;
    m->n_elements += numel; /* views are packed: the block holds exactly the parameters */
}

/* Shorthands for the parameter table below. */
#define VEC(nm, n, ini) (&(struct mc_gpt_param_spec){nm, 1, n, 0, ini, -1, -1, false, false})
#define COL(nm, r, c, ini, ord, gate) \
    (&(struct mc_gpt_param_spec){nm, 2, r, c, ini, ord, 0, gate, false})
#define ROW(nm, r, c, ord) \
    (&(struct mc_gpt_param_spec){nm, 2, r, c, MC_INIT_SCALED_NORMAL, ord, 1, false, false})
#define BIAS(nm, n, gate) (&(struct mc_gpt_param_spec){nm, 1, n, 0, MC_INIT_ZERO, -1, 0, gate, false})

/* A norm's weight: ones, or zeros when it is stored zero-centered (--apply-layernorm-1p: TE's
 * and FusedLayerNorm's reset_parameters). */
static enum mc_gpt_init gamma_init(const struct mc_gpt_model *m)
{
    return m->cfg.layernorm_zero_centered_gamma ? MC_INIT_ZERO : MC_INIT_ONE;
}

/* --qk-layernorm: q_layernorm then k_layernorm, each [hn] (replicated over tp). */
static void walk_qk_norms(struct mc_gpt_model *m, bool assign, struct mc_tfm_layer_weights *w,
                          struct mc_tfm_layer_grads *g, int64_t l)
{
    const struct mc_tfm_dims *d = &m->dims;
    char nm[MC_GPT_NAME_MAX];
#define NAME(suffix) (snprintf(nm, sizeof(nm), "decoder.layers.%lld.%s", (long long)l, suffix), nm)
    add_param(m, assign, VEC(NAME("self_attention.q_layernorm.weight"), d->hn, gamma_init(m)),
              &w->qln_w, &g->qln_w);
    if (d->layernorm)
        add_param(m, assign, VEC(NAME("self_attention.q_layernorm.bias"), d->hn, MC_INIT_ZERO),
                  &w->qln_b, &g->qln_b);
    add_param(m, assign, VEC(NAME("self_attention.k_layernorm.weight"), d->hn, gamma_init(m)),
              &w->kln_w, &g->kln_w);
    if (d->layernorm)
        add_param(m, assign, VEC(NAME("self_attention.k_layernorm.bias"), d->hn, MC_INIT_ZERO),
                  &w->kln_b, &g->kln_b);
#undef NAME
}

/* A MoE layer's MLP (MoELayer's state_dict: the router, then SequentialMLP's
 * local_experts.e.linear_fc1 / linear_fc2, packed: transformer/moe/experts.c reads them at a
 * fixed stride). Init streams: the router takes this layer's linear_fc1 ordinal 4 + 4 gl,
 * expert e the layer's fc1 / fc2 ordinals plus (e + 1) 2^20 (spec §4's scheme, one stream per
 * master matrix). Megatron draws the router with init_method, each expert's fc1 with
 * init_method and fc2 with output_layer_init_method, as here. */
static void walk_moe(struct mc_gpt_model *m, bool assign, struct mc_tfm_layer_weights *w,
                     struct mc_tfm_layer_grads *g, int64_t l, int64_t gl)
{
    const struct mc_tfm_dims *d = &m->dims;
    char nm[MC_GPT_NAME_MAX];
    void *skip_w;
    float *skip_g;
    snprintf(nm, sizeof(nm), "decoder.layers.%lld.mlp.router.weight", (long long)l);
    add_param(m, assign, &(struct mc_gpt_param_spec){nm, 2, d->E, d->h, MC_INIT_NORMAL, 4 + 4 * gl,
                                                     -1, false, false},
              &w->router_w, &g->router_w);
    for (int64_t e = 0; e < d->E; e++) {
        int64_t ord = 4 + 4 * gl + ((e + 1) << 20);
        snprintf(nm, sizeof(nm), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc1.weight",
                 (int)l, (int)e);
        add_param(m, assign, COL(nm, d->moe_fc1_l, d->h, MC_INIT_NORMAL, ord, d->gated),
                  e ? &skip_w : &w->experts_w, e ? &skip_g : &g->experts_w);
        snprintf(nm, sizeof(nm), "decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc2.weight",
                 (int)l, (int)e);
        add_param(m, assign, ROW(nm, d->h, d->moe_ffn_l, ord + 1), &skip_w, &skip_g);
    }
}

static void walk_layer(struct mc_gpt_model *m, bool assign, int64_t l)
{
    const struct mc_tfm_dims *d = &m->dims;
    struct mc_tfm_layer_weights *w = &m->layer_w[l];
    struct mc_tfm_layer_grads *g = &m->layer_g[l];
    int64_t gl = d->layer_offset + l; /* construction order is global */
    char nm[MC_GPT_NAME_MAX];
#define NAME(suffix) (snprintf(nm, sizeof(nm), "decoder.layers.%lld.%s", (long long)l, suffix), nm)
    add_param(m, assign, VEC(NAME("input_layernorm.weight"), d->h, gamma_init(m)), &w->ln1_w, &g->ln1_w);
    if (d->layernorm)
        add_param(m, assign, VEC(NAME("input_layernorm.bias"), d->h, MC_INIT_ZERO), &w->ln1_b,
                  &g->ln1_b);
    add_param(m, assign, ROW(NAME("self_attention.linear_proj.weight"), d->h, d->ctx_l, 2 + 4 * gl),
              &w->proj_w, &g->proj_w);
    if (d->linear_bias)
        add_param(m, assign, VEC(NAME("self_attention.linear_proj.bias"), d->h, MC_INIT_ZERO),
                  &w->proj_b, &g->proj_b);
    add_param(m, assign, COL(NAME("self_attention.linear_qkv.weight"), d->qkv_l, d->h,
                             MC_INIT_NORMAL, 3 + 4 * gl, false), &w->qkv_w, &g->qkv_w);
    if (d->qkv_bias)
        add_param(m, assign, BIAS(NAME("self_attention.linear_qkv.bias"), d->qkv_l, false),
                  &w->qkv_b, &g->qkv_b);
    if (d->qk_layernorm) /* SelfAttention registers them after linear_qkv */
        walk_qk_norms(m, assign, w, g, l);
    add_param(m, assign, VEC(NAME("pre_mlp_layernorm.weight"), d->h, gamma_init(m)), &w->ln2_w,
              &g->ln2_w);
    if (d->layernorm)
        add_param(m, assign, VEC(NAME("pre_mlp_layernorm.bias"), d->h, MC_INIT_ZERO), &w->ln2_b,
                  &g->ln2_b);
    if (mc_gpt_moe_layer(&m->cfg, gl)) {
        walk_moe(m, assign, w, g, l, gl);
        return;
    }
    add_param(m, assign, COL(NAME("mlp.linear_fc1.weight"), d->fc1_l, d->h, MC_INIT_NORMAL,
                             4 + 4 * gl, d->gated), &w->fc1_w, &g->fc1_w);
    if (d->linear_bias)
        add_param(m, assign, BIAS(NAME("mlp.linear_fc1.bias"), d->fc1_l, d->gated), &w->fc1_b,
                  &g->fc1_b);
    add_param(m, assign, ROW(NAME("mlp.linear_fc2.weight"), d->h, d->ffn_l, 5 + 4 * gl), &w->fc2_w,
              &g->fc2_w);
    if (d->linear_bias)
        add_param(m, assign, VEC(NAME("mlp.linear_fc2.bias"), d->h, MC_INIT_ZERO), &w->fc2_b,
                  &g->fc2_b);
#undef NAME
}

/* Walks this stage's parameters in Megatron's state_dict order (spec §3.7). With tied
 * embeddings and pp > 1 the last stage owns output_layer.weight, a shared copy initialized
 * from the word-embedding stream (ordinal 0), so it equals the first stage's embedding. */
static void walk_params(struct mc_gpt_model *m, bool assign)
{
    const struct mc_tfm_dims *d = &m->dims;
    const struct mc_gpt_config *c = &m->cfg;
    m->n_params = 0;
    m->n_elements = 0;
    if (d->first_stage) {
        add_param(m, assign, COL("embedding.word_embeddings.weight", d->V_l, d->h, MC_INIT_NORMAL,
                                 0, false), &m->word_w, &m->word_g);
        if (c->position_embedding_type == MC_POS_LEARNED_ABSOLUTE)
            add_param(m, assign,
                      &(struct mc_gpt_param_spec){"embedding.position_embeddings.weight", 2,
                                                  c->max_position_embeddings, d->h,
                                                  MC_INIT_NORMAL, 1, -1, false, false},
                      &m->pos_w, &m->pos_g);
    }
    for (int64_t l = 0; l < d->L; l++)
        walk_layer(m, assign, l);
    if (!d->last_stage)
        return;
    add_param(m, assign, VEC("decoder.final_layernorm.weight", d->h, gamma_init(m)), &m->lnf_w,
              &m->lnf_g);
    if (d->layernorm)
        add_param(m, assign, VEC("decoder.final_layernorm.bias", d->h, MC_INIT_ZERO), &m->lnf_b,
                  &m->lnf_bg);
    bool tied = !c->untie_embeddings_and_output_weights;
    if (!tied || !d->first_stage)
        add_param(m, assign,
                  &(struct mc_gpt_param_spec){"output_layer.weight", 2, d->V_l, d->h,
                                              MC_INIT_NORMAL, tied ? 0 : 2 + 4 * c->num_layers, 0,
                                              false, tied},
                  &m->out_w, &m->out_g);
}
#undef VEC
#undef COL
#undef ROW
#undef BIAS

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The parameters Megatron flags `sequence_parallel` (the norms' weight and bias, the
 * row-parallel biases: replicated, but each rank's grad covers only its sequence shard), and
 * the size of the buffer that coalesces their grads. The q/k layernorms join them with tp > 1
 * (finalize_model_grads' _allreduce_layernorm_grads sums them over tp: each rank's grad covers
 * only its heads), with or without sequence parallelism. */
static void mark_sequence_parallel(struct mc_gpt_model *m)
{
    static const char *const suffix[] = {"layernorm.weight", "layernorm.bias",
                                         "linear_proj.bias", "linear_fc2.bias"};
    bool qk = m->cfg.qk_layernorm && m->dims.tp > 1;
    m->sp_numel = 0;
    for (int64_t i = 0; (m->cfg.sequence_parallel || qk) && i < m->n_params; i++) {
        struct mc_param_view *v = &m->params[i].view;
        for (size_t k = 0; m->cfg.sequence_parallel && k < sizeof(suffix) / sizeof(suffix[0]); k++)
            v->sequence_parallel = v->sequence_parallel || ends_with(v->name, suffix[k]);
        v->sequence_parallel = v->sequence_parallel || (qk && (strstr(v->name, ".q_layernorm.") ||
                                                               strstr(v->name, ".k_layernorm.")));
        if (v->sequence_parallel)
            m->sp_numel += v->numel;
    }
}

/* Master row of local row r of a dim-0 sharded weight (SwiGLU fc1: [gate_r; up_r] of the
 * logical [gate; up]). */
static int64_t master_row(const struct mc_gpt_model *m, const struct mc_gpt_param *p, int64_t r)
{
    int64_t rows = p->view.shape[0], rank = m->dims.tp_rank;
    if (!p->gated)
        return rank * rows + r;
    int64_t half = rows / 2, full_half = half * m->dims.tp;
    return r < half ? rank * half + r : full_half + rank * half + (r - half);
}

static mc_status init_param(const struct mc_gpt_model *m, const struct mc_gpt_param *p)
{
    const struct mc_param_view *v = &p->view;
    if (p->init == MC_INIT_ZERO) {
        m->be->ops->set(m->be, v->data, 0, (size_t)v->numel * sizeof(float));
        return MC_OK;
    }
    if (p->init == MC_INIT_ONE) { /* ones, written in host memory and copied in */
        float *h = mc_alloc((size_t)v->numel * sizeof(float));
        if (!h)
            return mc_error(MC_ERR_NOMEM, "init: no host memory for %s", p->name);
        for (int64_t i = 0; i < v->numel; i++)
            h[i] = 1.0f;
        m->be->ops->copy_to_backend(m->be, v->data, h, (size_t)v->numel * sizeof(float));
        mc_free(h);
        return MC_OK;
    }
    float std = m->cfg.init_method_std;
    if (p->init == MC_INIT_SCALED_NORMAL)
        std = (float)((double)std / sqrt(2.0 * (double)m->cfg.num_layers));
    int64_t rows = v->shape[0], cols = v->shape[1];
    uint32_t c3 = (uint32_t)p->ordinal;
    for (int64_t r = 0; r < rows; r++) {
        int64_t first;
        if (v->partition_dim == 0)
            first = master_row(m, p, r) * cols;
        else if (v->partition_dim == 1)
            first = r * cols * m->dims.tp + m->dims.tp_rank * cols;
        else
            first = r * cols;
        m->be->ops->fill_normal(m->be, MC_DTYPE_F32, v->data + r * cols, first, cols, m->cfg.seed,
                                0xffffffffu, c3, std);
    }
    return MC_OK;
}

/* ---- activations ------------------------------------------------------------------------ */

/* Carves sub-buffers from one block; with base == NULL it only counts. */
struct carver {
    char *base;
    size_t used;
};

/* The params dtype and the residual stream's (--fp32-residual-connection: fp32 with 16-bit
 * params, LanguageModelEmbedding's embeddings.float()). */
static void set_dtypes(struct mc_gpt_model *m)
{
    m->dt = m->cfg.params_dtype;
    m->esize = mc_dtype_size(m->dt);
    m->rdt = m->cfg.fp32_residual_connection ? MC_DTYPE_F32 : m->dt;
    m->rsize = mc_dtype_size(m->rdt);
}

static void *carve(struct carver *cv, int64_t n, size_t elem)
{
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += ((size_t)n * elem + 63) / 64 * 64;
    return p;
}

/* ---- activation recompute (TransformerBlock._checkpointed_forward) --------------------- */

/* Selective recompute of core attention; flash attention keeps no probabilities, so there
 * is nothing to recompute (Megatron's TransformerConfig warns the same for fused attention). */
static bool selective_recompute(const struct mc_gpt_config *c)
{
    return c->recompute_granularity == MC_RECOMPUTE_SELECTIVE && c->recompute_core_attention &&
           !c->flash_attention;
}

/* uniform: layers [k g, k g + k) of this chunk form group g (Megatron's loop runs past the
 * chunk's last layer when k does not divide it, an IndexError: here the last group is shorter,
 * COMPATIBILITY.md); block: each of the first k layers is a group of its own. */
int64_t mc_gpt_recompute_group(const struct mc_gpt_model *m, int64_t l)
{
    const struct mc_gpt_config *c = &m->cfg;
    int64_t k = c->recompute_num_layers;
    if (c->recompute_granularity != MC_RECOMPUTE_FULL || k < 1)
        return -1;
    if (c->recompute_method == MC_RECOMPUTE_UNIFORM)
        return l / k * k;
    return l < k ? l : -1;
}

int64_t mc_gpt_recompute_group_end(const struct mc_gpt_model *m, int64_t first)
{
    int64_t k = m->cfg.recompute_num_layers, L = m->dims.L;
    if (m->cfg.recompute_method == MC_RECOMPUTE_BLOCK)
        return first + 1;
    return first + k < L ? first + k : L;
}

/* The layers the work area must hold: the longest group. */
static int64_t recompute_work_layers(const struct mc_gpt_model *m)
{
    int64_t n = 0;
    for (int64_t l = 0; l < m->dims.L; l++) {
        int64_t first = mc_gpt_recompute_group(m, l);
        if (first >= 0 && l - first + 1 > n)
            n = l - first + 1;
    }
    return n;
}

/* One layer's saved activations (a slot's, or one layer of the full-recompute work area).
 * With selective recompute the probabilities are the shared scratch's. */
static void carve_layer(const struct mc_gpt_model *m, struct carver *cv,
                        struct mc_tfm_layer_acts *a, bool moe)
{
    const struct mc_tfm_dims *d = &m->dims;
    int64_t T = d->b_max * d->s_max, P = d->b_max * d->np_l * d->s_max * d->s_max;
    bool flash = m->cfg.flash_attention; /* lse [b, np_l, s] instead of the probabilities */
    /* outside the tensor-parallel regions: this rank's sequence shard */
    int64_t Ts = m->cfg.sequence_parallel ? T / d->tp : T;
    /* E: activations in dt; F: fp32 statistics; B: keep masks */
    const size_t F = sizeof(float), B = 1, E = m->esize, R = m->rsize; /* R: residual stream */
    bool drop_h = m->cfg.hidden_dropout > 0.0f;
    a->x_in = carve(cv, Ts * d->h, R);
    a->ln1_mean = carve(cv, Ts, F);
    a->ln1_rstd = carve(cv, Ts, F);
    a->qkv = carve(cv, T * d->qkv_l, E);
    a->probs = flash ? NULL : selective_recompute(&m->cfg) ? m->scratch.attn_probs
                                                            : carve(cv, P, E);
    a->lse = flash ? carve(cv, d->b_max * d->np_l * d->s_max, F) : NULL;
    a->ctx = carve(cv, T * d->ctx_l, E);
    a->keep_attn_out = drop_h ? carve(cv, Ts * d->h, B) : NULL;
    a->x_mid = carve(cv, Ts * d->h, R);
    a->ln2_mean = carve(cv, Ts, F);
    a->ln2_rstd = carve(cv, Ts, F);
    a->fc1 = moe ? carve(cv, d->moe_rows * d->moe_fc1_l, E) : carve(cv, T * d->fc1_l, E);
    a->keep_mlp_out = drop_h ? carve(cv, Ts * d->h, B) : NULL;
    a->qk_in = d->qk_layernorm ? carve(cv, T * d->qk_rows * d->hn, E) : NULL;
    a->qk_mean = d->qk_layernorm ? carve(cv, T * d->qk_rows, F) : NULL;
    a->qk_rstd = d->qk_layernorm ? carve(cv, T * d->qk_rows, F) : NULL;
}

/* One slot: what backward reads of its forward. A layer of a recomputed group uses the work
 * area; the slot keeps only the group's input (its first layer's x_in, or with
 * distribute_saved_activations this rank's 1/tp of it). */
static void carve_slot(const struct mc_gpt_model *m, struct carver *cv, struct mc_gpt_slot *sl)
{
    const struct mc_tfm_dims *d = &m->dims;
    int64_t T = d->b_max * d->s_max;
    int64_t Ts = m->cfg.sequence_parallel ? T / d->tp : T;
    const size_t F = sizeof(float), B = 1, E = m->esize, R = m->rsize;
    bool drop_h = m->cfg.hidden_dropout > 0.0f;
    for (int64_t l = 0; l < d->L; l++) {
        int64_t first = mc_gpt_recompute_group(m, l);
        sl->ckpt[l] = NULL;
        if (first < 0) {
            carve_layer(m, cv, &sl->acts[l], mc_gpt_moe_layer(&m->cfg, d->layer_offset + l));
            continue;
        }
        sl->acts[l] = m->rc_work[l - first];
        if (l == first && m->cfg.distribute_saved_activations)
            sl->ckpt[l] = carve(cv, Ts * d->h / d->tp, R);
        else if (l == first)
            sl->acts[l].x_in = carve(cv, Ts * d->h, R);
    }
    sl->emb_keep = drop_h ? carve(cv, Ts * d->h, B) : NULL;
    sl->x_final = carve(cv, Ts * d->h, R);
    sl->lnf = carve(cv, Ts * d->h, E);
    sl->lnf_mean = carve(cv, Ts, F);
    sl->lnf_rstd = carve(cv, Ts, F);
    /* the largest buffer; the cross-entropy ops read it in dt and compute in fp32 */
    sl->logits = d->last_stage ? carve(cv, T * d->V_l, E) : NULL;
    sl->xent_max = carve(cv, T, F);
    sl->xent_sumexp = carve(cv, T, F);
    sl->ids_sf = carve(cv, T, sizeof(int64_t));
    sl->pos_sf = carve(cv, T, sizeof(int64_t));
    sl->labels_sf = carve(cv, T, sizeof(int64_t));
    /* host masks copied in; none where every mask is the causal one the kernels apply */
    sl->mask_copy = m->cfg.causal_mask_only ? NULL : carve(cv, d->b_max * d->s_max * d->s_max, B);
}

/* The scratch shared by all slots, then the slots. */
static void carve_all(struct mc_gpt_model *m, struct carver *cv)
{
    const struct mc_tfm_dims *d = &m->dims;
    int64_t T = d->b_max * d->s_max, P = d->b_max * d->np_l * d->s_max * d->s_max;
    int64_t Ts = m->cfg.sequence_parallel ? T / d->tp : T;
    const size_t F = sizeof(float), B = 1, E = m->esize, R = m->rsize;
    bool drop_a = m->cfg.attention_dropout > 0.0f, flash = m->cfg.flash_attention;
    struct mc_tfm_scratch *s = &m->scratch;
    s->attn_a = flash ? NULL : carve(cv, P, E);
    s->attn_b = flash ? NULL : carve(cv, P, E);
    s->attn_keep = drop_a && !flash ? carve(cv, P, B) : NULL;
    s->attn_probs = selective_recompute(&m->cfg) ? carve(cv, P, E) : NULL;
    s->h1 = carve(cv, T * d->h, R); /* also a norm's input grad, in the residual dtype */
    s->h2 = carve(cv, T * d->h, E);
    s->norm_out = carve(cv, Ts * d->h, E);
    if (m->rdt != m->dt) { /* --fp32-residual-connection: the fp32 sides of the mixed ops */
        s->r32a = carve(cv, T * d->h, F);
        s->r32b = carve(cv, T * d->h, F);
        s->w32 = carve(cv, d->h, F);
        s->b32 = carve(cv, d->h, F);
        s->dw32 = carve(cv, 2 * d->h, F); /* dw32 then db32, cleared together */
        s->db32 = s->dw32 ? s->dw32 + d->h : NULL;
    }
    s->norm_mean = carve(cv, Ts, F);
    s->norm_rstd = carve(cv, Ts, F);
    s->gamma1 = m->cfg.layernorm_zero_centered_gamma ? carve(cv, d->h > d->hn ? d->h : d->hn, E)
                                                     : NULL;
    s->qk_a = d->qk_layernorm ? carve(cv, T * d->qk_rows * d->hn, E) : NULL;
    s->qk_b = d->qk_layernorm ? carve(cv, T * d->qk_rows * d->hn, E) : NULL;
    /* MoE layers: the expert rows need T k rows of the expert widths */
    int64_t ffn_n = T * d->ffn_l > d->moe_rows * d->moe_ffn_l ? T * d->ffn_l : d->moe_rows * d->moe_ffn_l;
    int64_t fc1_n = T * d->fc1_l > d->moe_rows * d->moe_fc1_l ? T * d->fc1_l : d->moe_rows * d->moe_fc1_l;
    s->act = carve(cv, ffn_n, E);
    s->dqkv = carve(cv, T * d->qkv_l, E);
    s->dctx = carve(cv, T * d->ctx_l, E);
    s->dfc1 = carve(cv, fc1_n, E);
    s->dact = carve(cv, ffn_n, E);
    if (d->E > 0) {
        s->moe_x = carve(cv, d->moe_rows * d->h, E);
        s->moe_y = carve(cv, d->moe_rows * d->h, E);
        s->moe_logits = carve(cv, T * d->E, E);
        s->moe_dot = carve(cv, d->moe_rows, F);
    }
    m->xent_target = carve(cv, T, F);
    m->loss_sf = carve(cv, T, F);
    m->dloss_sf = carve(cv, T, F);
    m->dx = carve(cv, Ts * d->h, R);
    /* 16-bit sums over tp run in fp32 (tensor_parallel.h) */
    m->tp_red = m->dt != MC_DTYPE_F32 && d->tp > 1 ? carve(cv, T * d->h + T / d->tp * d->h, F)
                                                   : NULL;
    if (d->rot_dim > 0) {
        m->rope_cos = carve(cv, d->s_max * d->rot_dim, F);
        m->rope_sin = carve(cv, d->s_max * d->rot_dim, F);
    }
    for (int64_t i = 0; i < m->rc_work_layers; i++)
        carve_layer(m, cv, &m->rc_work[i], false); /* full recompute: dense models only */
    m->rc_out = m->rc_work_layers ? carve(cv, Ts * d->h, R) : NULL;
    size_t before = cv->used;
    for (int i = 0; i < m->n_slots; i++)
        carve_slot(m, cv, &m->slots[i]);
    m->slot_bytes = m->n_slots ? (cv->used - before) / (size_t)m->n_slots : 0;
}

static void free_slots(struct mc_gpt_slot *slots, int n)
{
    for (int i = 0; slots && i < n; i++) {
        mc_free(slots[i].acts);
        mc_free(slots[i].ckpt);
    }
    mc_free(slots);
}

static struct mc_gpt_slot *alloc_slots(int n, int64_t L)
{
    struct mc_gpt_slot *slots = mc_calloc((size_t)n, sizeof(*slots));
    size_t nl = (size_t)(L > 0 ? L : 1);
    for (int i = 0; slots && i < n; i++)
        if (!(slots[i].acts = mc_calloc(nl, sizeof(*slots[i].acts))) ||
            !(slots[i].ckpt = mc_calloc(nl, sizeof(*slots[i].ckpt)))) {
            free_slots(slots, n);
            return NULL;
        }
    return slots;
}

/* The RoPE cos/sin tables, computed in host memory and copied into the activation block. */
static mc_status rope_tables_to_backend(struct mc_gpt_model *m)
{
    size_t n = (size_t)(m->dims.s_max * m->dims.rot_dim), bytes = n * sizeof(float);
    float *h = mc_alloc(2 * bytes);
    if (!h)
        return mc_error(MC_ERR_NOMEM, "RoPE tables: no host memory (%zu bytes)", 2 * bytes);
    mc_tfm_rope_tables(h, h + n, &m->cfg, m->dims.rot_dim, m->dims.s_max);
    m->be->ops->copy_to_backend(m->be, m->rope_cos, h, bytes);
    m->be->ops->copy_to_backend(m->be, m->rope_sin, h + n, bytes);
    mc_free(h);
    return MC_OK;
}

/* (Re)builds the activation block for n slots; on failure the model keeps its old block. */
/* The host routing records of every slot's MoE layers (moe.h), rebuilt with the slots. */
static mc_status attach_moe_acts(struct mc_gpt_model *m)
{
    int64_t L = m->dims.L, n = (int64_t)m->n_slots * L;
    mc_moe_acts_free(m->moe_acts, m->n_moe_acts);
    m->moe_acts = NULL;
    m->n_moe_acts = 0;
    if (m->dims.E == 0)
        return MC_OK;
    if (!(m->moe_acts = mc_moe_acts_init(&m->dims, n)))
        return mc_error(MC_ERR_NOMEM, "MoE routing records: no host memory for %d slots",
                        m->n_slots);
    m->n_moe_acts = n;
    for (int i = 0; i < m->n_slots; i++)
        for (int64_t l = 0; l < L; l++)
            if (mc_gpt_moe_layer(&m->cfg, m->dims.layer_offset + l))
                m->slots[i].acts[l].moe = &m->moe_acts[i * L + l];
    return MC_OK;
}

static mc_status build_act_block(struct mc_gpt_model *m, int n)
{
    mc_status st;
    struct mc_gpt_slot *slots = alloc_slots(n, m->dims.L), *old_slots = m->slots;
    if (!slots)
        return mc_error(MC_ERR_NOMEM, "activation slots: cannot allocate %d slot records", n);
    int old_n = m->n_slots;
    m->slots = slots;
    m->n_slots = n;
    struct carver cv = {NULL, 0};
    carve_all(m, &cv);
    void *block = MC_MEM_AS(MC_MEM_ACTIVATIONS, m->be->ops->alloc(m->be, cv.used));
    if (!block) {
        m->slots = old_slots;
        m->n_slots = old_n;
        free_slots(slots, n);
        return mc_error(MC_ERR_NOMEM, "activation slots: cannot allocate %d slots (%.1f MiB)", n,
                        (double)cv.used / 1048576.0);
    }
    free_slots(old_slots, old_n);
    m->be->ops->free(m->be, m->act_block);
    m->act_block = block;
    m->act_bytes = cv.used;
    cv = (struct carver){block, 0};
    carve_all(m, &cv);
    if ((st = attach_moe_acts(m)) != MC_OK)
        return st;
    m->tp.red = m->tp_red;
    m->cur = 0;
    return m->dims.rot_dim > 0 ? rope_tables_to_backend(m) : MC_OK;
}

mc_status mc_gpt_set_activation_slots(mc_gpt_model *m, int n)
{
    if (n < 1 || n > MC_GPT_MAX_SLOTS)
        return mc_error(MC_ERR_CONFIG, "activation slots: %d is outside [1, %d]", n,
                        MC_GPT_MAX_SLOTS);
    return n == m->n_slots ? MC_OK : build_act_block(m, n);
}

int mc_gpt_activation_slots(const mc_gpt_model *m) { return m->n_slots; }

size_t mc_gpt_slot_activation_bytes(const mc_gpt_model *m) { return m->slot_bytes; }

mc_status mc_gpt_use_slot(mc_gpt_model *m, int slot)
{
    if (slot < 0 || slot >= m->n_slots)
        return mc_error(MC_ERR_CONFIG, "activation slot %d: the model has %d (slots 0..%d)", slot,
                        m->n_slots, m->n_slots - 1);
    m->cur = slot;
    return MC_OK;
}

/* ---- the parameter set (megatron/param_set.h) ---------------------------------------- */

/* Megatron's shared_embedding attribute: with tied embeddings split across pipeline stages,
 * the first (virtual) stage's word embedding (when it is not also the last) and the last
 * stage's copy. */
static bool is_shared_embedding(const struct mc_gpt_model *m, const struct mc_gpt_param *p)
{
    const struct mc_gpt_config *c = &m->cfg;
    if (c->pipeline_model_parallel_size == 1 || c->untie_embeddings_and_output_weights)
        return false;
    if (p->view.shared)
        return true;
    return m->dims.first_stage && /* chunk 0 of the first stage with interleaving */
           !strcmp(p->name, "embedding.word_embeddings.weight");
}

/* What the optimizer and DDP see: the views with their attributes, the blocks, the kernels and
 * the grad norm's group (the communicators follow mc_gpt_set_tp_comm / _mp_comm). */
static mc_status build_param_set(struct mc_gpt_model *m)
{
    m->pset_params = mc_calloc((size_t)m->n_params, sizeof(*m->pset_params));
    if (!m->pset_params)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < m->n_params; i++)
        m->pset_params[i] = (struct mc_param){m->params[i].view, m->params[i].offset,
                                              is_shared_embedding(m, &m->params[i])};
    m->pset = (struct mc_param_set){
        .n_params = m->n_params, .params = m->pset_params, .n_elements = m->n_elements,
        .param_block = m->param_block, .grad_block = m->grad_block,
        .grad_dtype = m->cfg.grad_dtype,
        .compute_dtype = m->dt, .compute_block = m->compute_block, .be = m->be,
        .tp_size = m->tp.size, .tp_rank = m->tp.rank,
        .pp_size = m->cfg.pipeline_model_parallel_size, .tp_comm = m->tp.comm,
        .mp_comm_setter = "mc_gpt_set_mp_comm"};
    return MC_OK;
}

/* ---- init / free ------------------------------------------------------------------------ */

/* Elements of the largest parameter of this stage (after walk_params). */
static int64_t largest_param(const struct mc_gpt_model *m)
{
    int64_t n = 0;
    for (int64_t i = 0; i < m->n_params; i++)
        if (m->params[i].view.numel > n)
            n = m->params[i].view.numel;
    return n;
}

/* The parameter and grad blocks, in backend memory: params zeroed before their init (norm
 * weights and biases are set by init_param, the rest drawn), grads zeroed. With 16-bit
 * params also the compute block (the dt weights); the weight-grad temporaries come after
 * the views (alloc_wgrad). */
static mc_status alloc_blocks(struct mc_gpt_model *m)
{
    size_t bytes = (size_t)m->n_elements * sizeof(float);
    m->params = mc_calloc((size_t)m->n_params, sizeof(*m->params));
    m->param_block = MC_MEM_AS(MC_MEM_PARAMS, m->be->ops->alloc(m->be, bytes));
    m->grad_block = MC_MEM_AS(MC_MEM_GRADS, m->be->ops->alloc(m->be, bytes));
    if (!m->params || !m->param_block || !m->grad_block)
        return MC_ERR_NOMEM;
    if (m->dt != MC_DTYPE_F32 &&
        !(m->compute_block = MC_MEM_AS(MC_MEM_PARAMS,
                                       m->be->ops->alloc(m->be, (size_t)m->n_elements * m->esize))))
        return MC_ERR_NOMEM;
    m->be->ops->set(m->be, m->param_block, 0, bytes);
    m->be->ops->set(m->be, m->grad_block, 0, bytes);
    return MC_OK;
}

/* 16-bit only: the dt weight-grad temporary (the largest parameter, or a norm's weight and
 * bias side by side) and, when one stage holds both uses of the tied word embedding, the dt
 * grad they are summed in (as autograd sums a parameter's grads before its hook). */
static mc_status alloc_wgrad(struct mc_gpt_model *m)
{
    if (m->dt == MC_DTYPE_F32)
        return MC_OK;
    int64_t n = largest_param(m);
    if (n < 2 * m->dims.h)
        n = 2 * m->dims.h;
    if (!(m->wgrad = MC_MEM_AS(MC_MEM_GRADS, m->be->ops->alloc(m->be, (size_t)n * m->esize))))
        return MC_ERR_NOMEM;
    bool tied_here = m->dims.first_stage && m->dims.last_stage &&
                     !m->cfg.untie_embeddings_and_output_weights;
    if (tied_here && !(m->tied_wgrad = MC_MEM_AS(MC_MEM_GRADS, m->be->ops->alloc(
                           m->be, (size_t)(m->dims.V_l * m->dims.h) * m->esize))))
        return MC_ERR_NOMEM;
    m->tp.wgrad = m->wgrad;
    return MC_OK;
}

size_t mc_gpt_wgrad_temp_bytes(const struct mc_gpt_model *m)
{
    if (m->dt == MC_DTYPE_F32)
        return 0;
    int64_t n = largest_param(m);
    n = n < 2 * m->dims.h ? 2 * m->dims.h : n;
    size_t bytes = (size_t)n * m->esize;
    if (m->tied_wgrad)
        bytes += (size_t)(m->dims.V_l * m->dims.h) * m->esize;
    return bytes;
}

/* Design §1 (Megatron with --use-cpu-initialization): the fp32 master init rounded to dt
 * gives the model's weights, and the main params are float() of those. */
static void round_initial_params(struct mc_gpt_model *m)
{
    if (m->dt == MC_DTYPE_F32)
        return;
    m->be->ops->convert(m->be, m->compute_block, m->dt, m->param_block, MC_DTYPE_F32,
                        m->n_elements);
    m->be->ops->convert(m->be, m->param_block, MC_DTYPE_F32, m->compute_block, m->dt,
                        m->n_elements);
}

/* A 16-bit model needs every op it calls in dt from its backend: refused at init, naming the
 * op, rather than stopping the process at the first forward. */
static mc_status check_backend_dtype(const struct mc_gpt_model *m)
{
    enum mc_dtype dt = m->dt, F = MC_DTYPE_F32;
    if (dt == F)
        return MC_OK;
    enum mc_backend_op act = m->cfg.activation == MC_ACT_GELU_TANH ? MC_OP_GELU_TANH
                             : m->cfg.activation == MC_ACT_GELU_ERF ? MC_OP_GELU_ERF
                             : m->cfg.activation == MC_ACT_SWIGLU   ? MC_OP_SWIGLU
                                                                    : MC_OP_SQUARED_RELU;
    const struct {
        enum mc_backend_op op;
        const char *name;
        int n;
        enum mc_dtype t[4];
    } need[] = {
        {MC_OP_GEMM, "gemm", 4, {dt, dt, dt, F}},
        {m->dims.layernorm ? MC_OP_LAYERNORM : MC_OP_RMSNORM, "norm", 1, {dt}},
        {act, "MLP activation", 1, {dt}},
        {MC_OP_BIAS_GRAD, "bias_grad", 1, {dt}},
        {MC_OP_BIAS_DROPOUT_ADD, "bias_dropout_add", 1, {dt}},
        {m->cfg.flash_attention ? MC_OP_FLASH_ATTENTION : MC_OP_ATTENTION, "attention", 1, {dt}},
        {MC_OP_EMBEDDING, "embedding", 1, {dt}},
        {MC_OP_CROSS_ENTROPY, "cross_entropy", 1, {dt}},
        {MC_OP_ROPE, "rope", 1, {dt}},
        {MC_OP_CONVERT, "convert", 2, {dt, F}},
        {MC_OP_CONVERT, "convert", 2, {F, dt}},
        {MC_OP_ACCUMULATE, "accumulate", 2, {F, dt}},
        {MC_OP_ACCUMULATE, "accumulate", 2, {dt, dt}},
    };
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        if (need[i].op == MC_OP_ROPE && m->dims.rot_dim == 0)
            continue;
        if (!m->be->ops->supports(m->be, need[i].op, need[i].t, need[i].n))
            return mc_error(MC_ERR_UNSUPPORTED, "params dtype %s (--%s): backend %s has no %s "
                            "op in %s yet", mc_dtype_name(dt),
                            dt == MC_DTYPE_BF16 ? "bf16" : "fp16", m->be->name, need[i].name,
                            mc_dtype_name(dt));
    }
    return MC_OK;
}

mc_status mc_gpt_model_init(const struct mc_gpt_config *cfg, mc_gpt_model **out)
{
    return mc_gpt_model_init_backend(cfg, NULL, out);
}

mc_status mc_gpt_model_init_backend(const struct mc_gpt_config *cfg, struct mc_backend *be,
                                    mc_gpt_model **out)
{
    if (!out)
        return mc_error(MC_ERR_CONFIG, "mc_gpt_model_init: no output pointer");
    *out = NULL;
    if (!cfg)
        return mc_error(MC_ERR_CONFIG, "mc_gpt_model_init: no config");
    mc_status st = MC_ERR_NOMEM;
    struct mc_gpt_model *m = mc_calloc(1, sizeof(*m));
    if (!m)
        return MC_ERR_NOMEM;
    m->be = be;
    if (!be && (st = mc_backend_create(NULL, &m->be)) != MC_OK) {
        mc_free(m);
        return st;
    }
    m->owns_be = !be;
    m->cfg = *cfg;
    if ((st = mc_gpt_config_validate(&m->cfg)) != MC_OK)
        goto out_free;
    st = MC_ERR_NOMEM;
    derive_dims(&m->dims, &m->cfg);
    set_dtypes(m);
    if ((st = check_backend_dtype(m)) != MC_OK)
        goto out_free;
    st = MC_ERR_NOMEM;
    m->tp = (struct mc_tp_group){m->cfg.tensor_model_parallel_size,
                                 m->cfg.tensor_model_parallel_rank, NULL,
                                 m->cfg.sequence_parallel, m->dt, m->be, NULL, NULL,
                                 m->cfg.grad_dtype};
    m->rc_work_layers = recompute_work_layers(m);
    if (m->rc_work_layers &&
        !(m->rc_work = mc_calloc((size_t)m->rc_work_layers, sizeof(*m->rc_work))))
        goto out_free;
    m->layer_w = mc_calloc((size_t)m->dims.L, sizeof(*m->layer_w));
    m->layer_g = mc_calloc((size_t)m->dims.L, sizeof(*m->layer_g));
    if (!m->layer_w || !m->layer_g)
        goto out_free;

    walk_params(m, false);
    if ((st = alloc_blocks(m)) != MC_OK)
        goto out_free;
    st = MC_ERR_NOMEM;
    walk_params(m, true);
    for (int64_t i = 0; i < m->n_params; i++)
        if ((st = init_param(m, &m->params[i])) != MC_OK)
            goto out_free;
    round_initial_params(m);
    if ((st = alloc_wgrad(m)) != MC_OK)
        goto out_free;
    st = MC_ERR_NOMEM;
    mark_sequence_parallel(m);
    if (build_param_set(m) != MC_OK)
        goto out_free;
    if (m->sp_numel > 0 &&
        !(m->sp_grads = MC_MEM_AS(MC_MEM_GRADS,
                                  m->be->ops->alloc(m->be, (size_t)m->sp_numel * sizeof(float)))))
        goto out_free;

    if (m->dims.E > 0 && !(m->moe = mc_moe_state_init(&m->cfg, &m->dims)))
        goto out_free;
    if ((st = build_act_block(m, 1)) != MC_OK)
        goto out_free;
    *out = m;
    return MC_OK;

out_free:
    mc_gpt_model_free(m);
    return st;
}

void mc_gpt_model_free(mc_gpt_model *m)
{
    if (!m)
        return;
    if (m->be) {
        m->be->ops->free(m->be, m->act_block);
        m->be->ops->free(m->be, m->sp_grads);
        m->be->ops->free(m->be, m->tied_wgrad);
        m->be->ops->free(m->be, m->wgrad);
        m->be->ops->free(m->be, m->compute_block);
        m->be->ops->free(m->be, m->grad_block);
        m->be->ops->free(m->be, m->param_block);
    }
    mc_free(m->pset_params);
    mc_free(m->params);
    free_slots(m->slots, m->n_slots);
    mc_moe_acts_free(m->moe_acts, m->n_moe_acts);
    mc_moe_state_free(m->moe);
    mc_free(m->rc_work);
    mc_free(m->layer_g);
    mc_free(m->layer_w);
    if (m->owns_be)
        mc_backend_free(m->be);
    mc_free(m);
}

const struct mc_gpt_config *mc_gpt_model_config(const mc_gpt_model *m) { return &m->cfg; }

int64_t mc_gpt_num_params(const mc_gpt_model *m) { return m->n_params; }

struct mc_param_view mc_gpt_param(const mc_gpt_model *m, int64_t i)
{
    MC_ASSERT(i >= 0 && i < m->n_params);
    return m->params[i].view;
}

int64_t mc_gpt_param_index(const mc_gpt_model *m, const char *name)
{
    for (int64_t i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return i;
    return -1;
}

int64_t mc_gpt_num_elements(const mc_gpt_model *m) { return m->n_elements; }

struct mc_param_set *mc_gpt_param_set(mc_gpt_model *m) { return &m->pset; }

void mc_gpt_zero_grad(mc_gpt_model *m)
{
    m->be->ops->set(m->be, m->grad_block, 0, (size_t)m->n_elements * sizeof(float));
}

void mc_gpt_set_moe_aux_loss_scale(mc_gpt_model *m, float scale)
{
    if (m->moe)
        m->moe->aux_scale = scale;
}

const float *mc_gpt_moe_tracker(const mc_gpt_model *m, int which)
{
    if (!m->moe)
        return NULL;
    return which == 0 ? m->moe->track_lb : m->moe->track_z;
}

void mc_gpt_moe_tracker_clear(mc_gpt_model *m)
{
    for (int64_t l = 0; m->moe && l < m->cfg.num_layers; l++)
        m->moe->track_lb[l] = m->moe->track_z[l] = 0.0f;
}

void mc_gpt_set_step(mc_gpt_model *m, int64_t step)
{
    m->step = step;
    m->micro_next = 0;
}

struct mc_tensor mc_gpt_logits(const mc_gpt_model *m)
{
    const struct mc_gpt_slot *sl = &m->slots[m->cur];
    int64_t shape[3] = {sl->s, sl->b, m->dims.V_l};
    struct mc_tensor t = mc_tensor_view(sl->logits, m->dt, 3, shape); /* NULL off the last stage */
    t.backend = m->be;
    return t;
}

mc_status mc_gpt_set_mp_comm(mc_gpt_model *m, void *mpi_comm)
{
    if (!mc_comm_available())
        return mc_error(MC_ERR_UNSUPPORTED,
                        "pipeline parallelism needs an MPI build of megatron.c");
    if (mpi_comm) {
        int size = 0, rank = 0;
        mc_status st = mc_comm_size_rank(mpi_comm, &size, &rank);
        if (st)
            return st;
        int want = m->cfg.tensor_model_parallel_size * m->cfg.pipeline_model_parallel_size;
        if (size != want)
            return mc_error(MC_ERR_CONFIG, "model-parallel communicator has size %d; expected "
                            "--tensor-model-parallel-size x --pipeline-model-parallel-size = %d",
                            size, want);
    }
    m->pset.mp_comm = mpi_comm;
    return MC_OK;
}

struct mc_tensor mc_gpt_stage_tensor(const mc_gpt_model *m, int64_t b, int64_t s)
{
    int64_t shape[3] = {m->cfg.sequence_parallel ? s / m->tp.size : s, b, m->dims.h};
    return mc_tensor_view(NULL, m->rdt, 3, shape);
}

/* The stage tensor of the current slot's micro-batch over data in the model's memory. */
static struct mc_tensor stage_view(const mc_gpt_model *m, void *data)
{
    const struct mc_gpt_slot *sl = &m->slots[m->cur];
    struct mc_tensor t = mc_gpt_stage_tensor(m, sl->b, sl->s);
    t.data = data;
    t.backend = m->be;
    return t;
}

struct mc_tensor mc_gpt_stage_output(const mc_gpt_model *m)
{
    return stage_view(m, m->dims.last_stage ? NULL : m->slots[m->cur].x_final);
}

struct mc_tensor mc_gpt_stage_input_grad(const mc_gpt_model *m)
{
    return stage_view(m, m->dims.first_stage ? NULL : m->dx);
}

mc_status mc_gpt_set_tp_comm(mc_gpt_model *m, void *mpi_comm)
{
    if (!mc_comm_available())
        return mc_error(MC_ERR_UNSUPPORTED,
                        "tensor parallelism needs an MPI build of megatron.c");
    if (mpi_comm) {
        int size = 0, rank = 0;
        mc_status st = mc_comm_size_rank(mpi_comm, &size, &rank);
        if (st)
            return st;
        if (size != m->tp.size || rank != m->tp.rank)
            return mc_error(MC_ERR_CONFIG, "tensor-parallel communicator has size %d, rank %d; "
                            "the model was built for --tensor-model-parallel-size %d, rank %d",
                            size, rank, m->tp.size, m->tp.rank);
    }
    m->tp.comm = mpi_comm;
    m->pset.tp_comm = mpi_comm;
    return MC_OK;
}

size_t mc_gpt_activation_bytes(const mc_gpt_model *m) { return m->act_bytes; }

mc_status mc_gpt_config_activation_bytes(const struct mc_gpt_config *cfg, size_t *shared,
                                         size_t *per_slot)
{
    struct mc_gpt_model m = {.cfg = *cfg, .n_slots = 1};
    mc_status st = mc_gpt_config_validate(&m.cfg);
    if (st != MC_OK)
        return st;
    derive_dims(&m.dims, &m.cfg);
    set_dtypes(&m);
    m.rc_work_layers = recompute_work_layers(&m);
    m.slots = alloc_slots(1, m.dims.L);
    m.rc_work = mc_calloc((size_t)(m.rc_work_layers > 0 ? m.rc_work_layers : 1),
                          sizeof(*m.rc_work));
    if (m.slots && m.rc_work) { /* counted, not carved (base NULL) */
        struct carver cv = {NULL, 0};
        carve_all(&m, &cv);
        *per_slot = m.slot_bytes;
        *shared = cv.used - m.slot_bytes;
    }
    st = m.slots && m.rc_work ? MC_OK : MC_ERR_NOMEM;
    free_slots(m.slots, 1);
    mc_free(m.rc_work);
    return st;
}

mc_status mc_gpt_sequence_parallel_grad_sync(mc_gpt_model *m)
{
    if (m->sp_numel == 0)
        return MC_OK;
    int64_t off = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        const struct mc_param_view *v = &m->params[i].view;
        if (v->sequence_parallel) {
            m->be->ops->copy(m->be, m->sp_grads + off, v->grad, sizeof(float) * (size_t)v->numel);
            off += v->numel;
        }
    }
    mc_status st = mc_tp_all_reduce_sum_f32(&m->tp, m->sp_grads, m->sp_numel);
    if (st != MC_OK)
        return st;
    off = 0;
    for (int64_t i = 0; i < m->n_params; i++) {
        const struct mc_param_view *v = &m->params[i].view;
        if (v->sequence_parallel) {
            m->be->ops->copy(m->be, v->grad, m->sp_grads + off, sizeof(float) * (size_t)v->numel);
            off += v->numel;
        }
    }
    return MC_OK;
}
