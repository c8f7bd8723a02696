/* The GPT model for generation with a KV cache: mirrors megatron/core/inference's
 * GPTInferenceWrapper over GPTModel with a StaticInferenceContext (the key/value memory of every
 * layer, appended to at each step). fp32 throughout: 16-bit checkpoints are widened on loading.
 *
 * One forward step takes n packed tokens (inference.h: ragged rows) and runs the layers of the
 * local spec on them as Megatron's forward does on [s, b, h] (input norm, fused QKV, RoPE, core
 * attention, linear_proj + residual, pre-MLP norm, fc1, activation, fc2 + residual, final norm,
 * output layer); the linear layers are the backend's GEMM, the norms and activations its ops.
 * Only core attention is ours: each token's queries against its own row's cached keys
 * [0, position], softmax in fp32 (the causal mask as a length).
 *
 * Tensor parallel (mc_inf_model_init_tp, one rank of a tp group under mpirun): each rank holds
 * its shard as Megatron splits it (the converter's split table, mc_cv_split_of: QKV and fc1
 * by whole query groups / ffn columns, linear_proj and fc2 by their input, the word embedding
 * and output layer by vocabulary rows) and the step runs the training model's tensor-parallel
 * layers (src/tensor_parallel: column- and row-parallel linear, vocab-parallel embedding) with
 * their all-reduces; the output layer's logits are all-gathered into the full vocabulary (what
 * Megatron's GPTModel does with parallel_output=False for generation). The struct's head,
 * group, ffn and qkv sizes are this rank's. */
#include "inference/inference.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/backend.h"
#include "core/dtype.h"
#include "parallel_state/parallel_state.h"
#include "tensor_parallel/tensor_parallel.h"
#include "tools/checkpoint/convert.h"
#include "transformer/transformer.h"

struct layer {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b; /* [h], [qkv, h], [h, np hn] */
    float *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;   /* [fc1, h], [h, ffn] */
};

struct mc_inf_model {
    struct mc_gpt_config cfg;
    struct mc_backend *be;
    int64_t h, np, ng, hn, per_group, qkv, ffn, fc1, V, L, rot_dim, max_seq;
    /* tensor parallel: the group, and this rank's vocabulary rows [V_l]: the padded vocabulary
     * split in ceil(V / tp) rows a rank (the last rank's tail is zero rows, never gathered) */
    struct mc_tp_group tp;
    int64_t V_l;
    bool shard;                                /* the converter model holds this rank's shards */
    float *lg_local, *lg_all;                  /* [cap, V_l], [tp, cap, V_l] (tp > 1) */
    bool layernorm;
    float *word, *pos, *lnf_w, *lnf_b, *out_w; /* out_w == word when tied */
    struct layer *layers;
    float *rope_cos, *rope_sin;                /* [max_seq, rot_dim] */
    /* step scratch for up to cap tokens (grown on demand) */
    int64_t cap;
    float *x, *y, *qkv_buf, *ctx, *ff, *act, *mean, *rstd, *sel;
    int64_t *pos_ids;
    float *scores;                             /* [threads, max_seq] */
    int n_threads;
};

struct mc_inf_cache {
    int64_t rows, max_seq, kv;                 /* kv = ng hn floats per token and layer */
    int64_t L;
    float *k, *v;                              /* [L, rows, max_seq, kv] */
    int64_t *len;                              /* [rows] */
};

/* ---- loading the weights ----------------------------------------------------------------- */
/* This rank's block of the converter tensor `name` (full, any dtype) widened to fp32, split as
 * Megatron splits it (mc_cv_split_of). want: the block's element count (-1: unchecked). The
 * vocabulary tables are split into m->V_l rows a rank, zero-padded at the end. */
static mc_status take(const mc_inf_model *m, const struct mc_cv_model *cv, float **dst,
                      int64_t want, const char *name)
{
    const struct mc_cv_tensor *t = mc_cv_get(cv, "%s", name);
    if (!t)
        return mc_error(MC_ERR_FORMAT, "the checkpoint has no tensor for '%s'", name);
    int tp = m->tp.size, k = m->tp.rank;
    enum mc_cv_split split = tp > 1 && !m->shard ? mc_cv_split_of(&cv->md, name) : MC_CV_SPLIT_REP;
    bool vocab = !m->shard && (!strcmp(name, "word embeddings") ||
                               !strcmp(name, "output layer weight"));
    int64_t cols = t->ndim > 1 ? t->shape[1] : 1, full = t->shape[0] * cols;
    int64_t n = vocab ? m->V_l * cols
                : split == MC_CV_SPLIT_REP ? full : full / tp;
    if (want >= 0 && n != want)
        return mc_error(MC_ERR_SHAPE, "'%s' has %lld elements (this rank's share), the model's "
                        "arguments need %lld", name, (long long)n, (long long)want);
    if (!(*dst = mc_calloc((size_t)n, sizeof(float))))
        return MC_ERR_NOMEM;
    size_t es = mc_dtype_size(t->dtype);
    if (vocab) { /* rows [k V_l, (k + 1) V_l) of the table, those that exist */
        int64_t r0 = k * m->V_l, rows = t->shape[0] - r0 < m->V_l ? t->shape[0] - r0 : m->V_l;
        if (rows > 0)
            mc_dtype_to_f32(*dst, t->data + (size_t)(r0 * cols) * es, t->dtype, rows * cols);
        return MC_OK;
    }
    if (split == MC_CV_SPLIT_REP) {
        mc_dtype_to_f32(*dst, t->data, t->dtype, n); /* bf16 / fp16 widened exactly */
        return MC_OK;
    }
    uint8_t *blk = mc_alloc(es * (size_t)n);
    if (!blk)
        return MC_ERR_NOMEM;
    int64_t br, bc;
    mc_cv_shard_copy(blk, t, split, k, tp, &br, &bc);
    mc_dtype_to_f32(*dst, blk, t->dtype, n);
    mc_free(blk);
    return MC_OK;
}

static mc_status take_opt(const mc_inf_model *m, const struct mc_cv_model *cv, float **dst,
                          int64_t want, bool present, const char *name)
{
    *dst = NULL;
    return present ? take(m, cv, dst, want, name) : MC_OK;
}

/* The converter's metadata as Megatron's TransformerConfig fields (tp: the shards' group size
 * when cv holds shards, else 1). */
static mc_status config_from_meta(const struct mc_cv_model *cv, int tp, struct mc_gpt_config *c)
{
    const struct mc_cv_meta *md = &cv->md;
    const struct mc_cv_tensor *word = mc_cv_get(cv, "word embeddings");
    if (!word)
        return mc_error(MC_ERR_FORMAT, "the checkpoint has no word embeddings");
    if (!strcmp(md->position_embedding_type, "alibi")) /* the KV-cache attention has no bias */
        return mc_error(MC_ERR_UNSUPPORTED, "text generation of an ALiBi model "
                        "(position_embedding_type alibi in the checkpoint) is not supported by "
                        "megatron.c yet");
    mc_gpt_config_default(c);
    c->num_layers = md->num_layers;
    c->hidden_size = md->hidden_size;
    c->num_attention_heads = md->num_attention_heads;
    c->num_query_groups = md->num_query_groups;
    c->kv_channels = md->kv_channels;
    c->ffn_hidden_size = md->ffn_hidden_size;
    c->padded_vocab_size = word->shape[0] * tp;
    c->vocab_size = md->true_vocab_size > 0 ? md->true_vocab_size : c->padded_vocab_size;
    c->max_position_embeddings = md->max_position_embeddings;
    c->seq_length = md->seq_length;
    c->normalization = !strcmp(md->normalization, "RMSNorm") ? MC_NORM_RMSNORM : MC_NORM_LAYERNORM;
    c->norm_epsilon = (float)md->norm_epsilon;
    if (!strcmp(md->position_embedding_type, "rope"))
        c->position_embedding_type = MC_POS_ROPE;
    else if (!strcmp(md->position_embedding_type, "none"))
        c->position_embedding_type = MC_POS_NONE;
    else
        c->position_embedding_type = MC_POS_LEARNED_ABSOLUTE;
    c->rotary_percent = (float)md->rotary_percent;
    c->rotary_base = (float)md->rotary_base;
    c->rotary_interleaved = md->rotary_interleaved;
    c->use_rope_scaling = md->use_rope_scaling;
    c->rope_scaling_factor = (float)md->rope_scaling_factor;
    c->activation = md->swiglu ? MC_ACT_SWIGLU : md->gelu_tanh ? MC_ACT_GELU_TANH : MC_ACT_GELU_ERF;
    c->add_bias_linear = md->linear_bias;
    c->add_qkv_bias = md->qkv_bias || md->linear_bias;
    c->untie_embeddings_and_output_weights = md->untied;
    c->params_dtype = MC_DTYPE_F32;
    c->hidden_dropout = c->attention_dropout = 0.0f;
    return MC_OK;
}

static mc_status load_layer(mc_inf_model *m, const struct mc_cv_model *cv, int64_t l)
{
    struct layer *w = &m->layers[l];
    bool b = m->cfg.add_bias_linear, qb = m->cfg.add_qkv_bias, ln = m->layernorm;
    int64_t h = m->h;
    char n[12][64];
    static const char *const what[12] = {"input norm weight", "input norm bias", "qkv weight",
                                         "qkv bias", "dense weight", "dense bias",
                                         "post norm weight", "post norm bias", "mlp l0 weight",
                                         "mlp l0 bias", "mlp l1 weight", "mlp l1 bias"};
    for (int k = 0; k < 12; k++)
        snprintf(n[k], sizeof(n[k]), "layer %lld %s", (long long)l, what[k]);
    mc_status st;
    if ((st = take(m, cv, &w->ln1_w, h, n[0])) || (st = take_opt(m, cv, &w->ln1_b, h, ln, n[1])) ||
        (st = take(m, cv, &w->qkv_w, m->qkv * h, n[2])) ||
        (st = take_opt(m, cv, &w->qkv_b, m->qkv, qb, n[3])) ||
        (st = take(m, cv, &w->proj_w, h * m->np * m->hn, n[4])) ||
        (st = take_opt(m, cv, &w->proj_b, h, b, n[5])) || (st = take(m, cv, &w->ln2_w, h, n[6])) ||
        (st = take_opt(m, cv, &w->ln2_b, h, ln, n[7])) ||
        (st = take(m, cv, &w->fc1_w, m->fc1 * h, n[8])) ||
        (st = take_opt(m, cv, &w->fc1_b, m->fc1, b, n[9])) ||
        (st = take(m, cv, &w->fc2_w, h * m->ffn, n[10])) ||
        (st = take_opt(m, cv, &w->fc2_b, h, b, n[11])))
        return st;
    return MC_OK;
}

static mc_status load_weights(mc_inf_model *m, const struct mc_cv_model *cv)
{
    mc_status st;
    bool learned = m->cfg.position_embedding_type == MC_POS_LEARNED_ABSOLUTE;
    if ((st = take(m, cv, &m->word, m->V_l * m->h, "word embeddings")) ||
        (st = take_opt(m, cv, &m->pos, m->cfg.max_position_embeddings * m->h, learned,
                       "position embeddings")))
        return st;
    if (!(m->layers = mc_calloc((size_t)m->L, sizeof(*m->layers))))
        return MC_ERR_NOMEM;
    for (int64_t l = 0; l < m->L; l++)
        if ((st = load_layer(m, cv, l)))
            return st;
    if ((st = take(m, cv, &m->lnf_w, m->h, "final norm weight")) ||
        (st = take_opt(m, cv, &m->lnf_b, m->h, m->layernorm, "final norm bias")))
        return st;
    if (!m->cfg.untie_embeddings_and_output_weights) {
        m->out_w = m->word; /* tied: the output layer is the word embedding */
        return MC_OK;
    }
    return take(m, cv, &m->out_w, m->V_l * m->h, "output layer weight");
}

static mc_status check_config(const mc_inf_model *m)
{
    const struct mc_gpt_config *c = &m->cfg;
    if (c->num_layers <= 0 || c->hidden_size <= 0 || c->num_attention_heads <= 0 ||
        c->num_query_groups <= 0 || c->num_attention_heads % c->num_query_groups ||
        c->kv_channels <= 0 || c->ffn_hidden_size <= 0)
        return mc_error(MC_ERR_FORMAT, "the checkpoint's model arguments are inconsistent "
                        "(layers %lld, hidden %lld, heads %lld, query groups %lld, kv channels "
                        "%lld, ffn %lld)", (long long)c->num_layers, (long long)c->hidden_size,
                        (long long)c->num_attention_heads, (long long)c->num_query_groups,
                        (long long)c->kv_channels, (long long)c->ffn_hidden_size);
    if (c->position_embedding_type == MC_POS_LEARNED_ABSOLUTE &&
        m->max_seq > c->max_position_embeddings)
        return mc_error(MC_ERR_CONFIG, "a sequence of %lld tokens (prompt + tokens to generate) "
                        "is longer than the model's learned position embeddings "
                        "(--max-position-embeddings %lld)", (long long)m->max_seq,
                        (long long)c->max_position_embeddings);
    return MC_OK;
}

/* Megatron's tensor-parallel divisibility (heads, query groups, ffn columns split evenly). */
static mc_status check_tp(const mc_inf_model *m)
{
    const struct mc_gpt_config *c = &m->cfg;
    int tp = m->tp.size;
    const char *what = c->num_attention_heads % tp ? "num_attention_heads"
                       : c->num_query_groups % tp  ? "num_query_groups"
                       : c->ffn_hidden_size % tp   ? "ffn_hidden_size" : NULL;
    int64_t v = c->num_attention_heads % tp ? c->num_attention_heads
                : c->num_query_groups % tp  ? c->num_query_groups : c->ffn_hidden_size;
    if (what)
        return mc_error(MC_ERR_CONFIG, "--tensor-model-parallel-size %d does not divide the "
                        "checkpoint's %s (%lld): tensor parallelism splits whole attention heads, "
                        "query groups and ffn columns", tp, what, (long long)v);
    return MC_OK;
}

mc_status mc_inf_model_init(const struct mc_cv_model *cv, struct mc_backend *be, int64_t max_seq,
                            mc_inf_model **out)
{
    return mc_inf_model_init_tp(cv, be, max_seq, NULL, out);
}

mc_status mc_inf_model_init_tp(const struct mc_cv_model *cv, struct mc_backend *be,
                               int64_t max_seq, void *tp_comm, mc_inf_model **out)
{
    return mc_inf_model_init_shard(cv, false, be, max_seq, tp_comm, out);
}

mc_status mc_inf_model_init_shard(const struct mc_cv_model *cv, bool shard, struct mc_backend *be,
                                  int64_t max_seq, void *tp_comm, mc_inf_model **out)
{
    *out = NULL;
    if (max_seq < 1)
        return mc_error(MC_ERR_CONFIG, "the KV cache needs room for at least one token");
    mc_inf_model *m = mc_calloc(1, sizeof(*m));
    if (!m)
        return MC_ERR_NOMEM;
    m->be = be;
    m->max_seq = max_seq;
    m->tp = (struct mc_tp_group){.size = 1, .comm = tp_comm, .dt = MC_DTYPE_F32, .be = be,
                                 .grad_dt = MC_DTYPE_F32};
    mc_status st0 = mc_comm_size_rank(tp_comm, &m->tp.size, &m->tp.rank);
    if (st0) {
        mc_free(m);
        return st0;
    }
    m->n_threads = be->n_threads > 0 ? be->n_threads : 1;
    m->shard = shard && m->tp.size > 1;
    mc_status st = config_from_meta(cv, m->shard ? m->tp.size : 1, &m->cfg);
    if (st)
        goto fail;
    const struct mc_gpt_config *c = &m->cfg;
    if ((st = check_config(m)) || (st = check_tp(m)))
        goto fail;
    int tp = m->tp.size; /* this rank's share of heads, groups and ffn columns */
    m->h = c->hidden_size, m->np = c->num_attention_heads / tp, m->ng = c->num_query_groups / tp;
    m->hn = c->kv_channels, m->ffn = c->ffn_hidden_size / tp, m->L = c->num_layers;
    m->per_group = m->ng > 0 ? m->np / m->ng : 0;
    m->qkv = (m->np + 2 * m->ng) * m->hn;
    m->fc1 = c->activation == MC_ACT_SWIGLU ? 2 * m->ffn : m->ffn;
    m->V = c->padded_vocab_size;
    m->V_l = (m->V + tp - 1) / tp;
    m->layernorm = c->normalization == MC_NORM_LAYERNORM;
    if ((st = load_weights(m, cv)))
        goto fail;
    if (c->position_embedding_type == MC_POS_ROPE) {
        m->rot_dim = c->rotary_percent < 1.0f
                         ? (int64_t)((double)m->hn * (double)c->rotary_percent) : m->hn;
        m->rope_cos = mc_alloc(sizeof(float) * (size_t)(max_seq * m->rot_dim));
        m->rope_sin = mc_alloc(sizeof(float) * (size_t)(max_seq * m->rot_dim));
        if (!m->rope_cos || !m->rope_sin) {
            st = MC_ERR_NOMEM;
            goto fail;
        }
        mc_tfm_rope_tables(m->rope_cos, m->rope_sin, c, m->rot_dim, max_seq);
    }
    if (!(m->scores = mc_alloc(sizeof(float) * (size_t)(m->n_threads * max_seq)))) {
        st = MC_ERR_NOMEM;
        goto fail;
    }
    *out = m;
    return MC_OK;
fail:
    mc_inf_model_free(m);
    return st;
}

static void free_scratch(mc_inf_model *m)
{
    float **bufs[] = {&m->x, &m->y, &m->qkv_buf, &m->ctx, &m->ff, &m->act, &m->mean, &m->rstd,
                      &m->sel, &m->lg_local, &m->lg_all};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        mc_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    mc_free(m->pos_ids);
    m->pos_ids = NULL;
    m->cap = 0;
}

void mc_inf_model_free(mc_inf_model *m)
{
    if (!m)
        return;
    free_scratch(m);
    mc_free(m->scores);
    mc_free(m->rope_cos);
    mc_free(m->rope_sin);
    if (m->out_w != m->word)
        mc_free(m->out_w);
    mc_free(m->lnf_b);
    mc_free(m->lnf_w);
    for (int64_t l = 0; m->layers && l < m->L; l++) {
        struct layer *w = &m->layers[l];
        float *all[] = {w->ln1_w, w->ln1_b, w->qkv_w, w->qkv_b, w->proj_w, w->proj_b,
                        w->ln2_w, w->ln2_b, w->fc1_w, w->fc1_b, w->fc2_w, w->fc2_b};
        for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
            mc_free(all[k]);
    }
    mc_free(m->layers);
    mc_free(m->pos);
    mc_free(m->word);
    mc_free(m);
}

const struct mc_gpt_config *mc_inf_model_config(const mc_inf_model *m) { return &m->cfg; }
int mc_inf_model_tp_rank(const mc_inf_model *m) { return m->tp.rank; }
int mc_inf_model_tp_size(const mc_inf_model *m) { return m->tp.size; }

/* Rank 0's n elements of buf on every rank of the tp group (Megatron's broadcast from the
 * group's source rank): the others contribute zeros to a sum, exact for the integer and byte
 * types it carries. */
mc_status mc_inf_broadcast(const mc_inf_model *m, void *buf, int64_t n, enum mc_dtype type)
{
    if (m->tp.size == 1 || n == 0)
        return MC_OK;
    if (m->tp.rank != 0)
        memset(buf, 0, (size_t)n * mc_dtype_size(type));
    return mc_comm_all_reduce(m->tp.comm, buf, n, type, MC_COMM_SUM, "generation broadcast");
}
int64_t mc_inf_model_max_seq(const mc_inf_model *m) { return m->max_seq; }

/* ---- the KV cache ------------------------------------------------------------------------- */
mc_status mc_inf_cache_init(const mc_inf_model *m, int64_t max_batch, int64_t max_len,
                            mc_inf_cache **out)
{
    *out = NULL;
    if (max_len < 1 || max_len > m->max_seq || max_batch < 1)
        return mc_error(MC_ERR_CONFIG, "KV cache of %lld rows x %lld tokens: the model was set up "
                        "for at most %lld tokens a row", (long long)max_batch, (long long)max_len,
                        (long long)m->max_seq);
    mc_inf_cache *c = mc_calloc(1, sizeof(*c));
    if (!c)
        return MC_ERR_NOMEM;
    c->rows = max_batch, c->max_seq = max_len, c->kv = m->ng * m->hn, c->L = m->L;
    size_t n = (size_t)(c->L * c->rows * c->max_seq * c->kv);
    c->k = mc_alloc(sizeof(float) * n);
    c->v = mc_alloc(sizeof(float) * n);
    c->len = mc_calloc((size_t)max_batch, sizeof(int64_t));
    if (!c->k || !c->v || !c->len) {
        mc_inf_cache_free(c);
        return mc_error(MC_ERR_NOMEM, "KV cache of %lld rows x %lld tokens x %lld layers: out of "
                        "memory", (long long)max_batch, (long long)max_len, (long long)m->L);
    }
    *out = c;
    return MC_OK;
}

void mc_inf_cache_free(mc_inf_cache *c)
{
    if (!c)
        return;
    mc_free(c->len);
    mc_free(c->v);
    mc_free(c->k);
    mc_free(c);
}

void mc_inf_cache_reset(mc_inf_cache *c, int64_t row) { c->len[row] = 0; }
int64_t mc_inf_cache_len(const mc_inf_cache *c, int64_t row) { return c->len[row]; }

static float *kv_at(const mc_inf_cache *c, float *base, int64_t l, int64_t row, int64_t pos)
{
    return base + ((l * c->rows + row) * c->max_seq + pos) * c->kv;
}

/* ---- one step ----------------------------------------------------------------------------- */
static mc_status grow(mc_inf_model *m, int64_t n)
{
    if (n <= m->cap)
        return MC_OK;
    free_scratch(m);
    size_t t = (size_t)n, w = (size_t)(m->fc1 > m->qkv ? m->fc1 : m->qkv);
    m->x = mc_alloc(sizeof(float) * t * (size_t)m->h);
    m->y = mc_alloc(sizeof(float) * t * (size_t)m->h);
    m->qkv_buf = mc_alloc(sizeof(float) * t * (size_t)m->qkv);
    m->ctx = mc_alloc(sizeof(float) * t * (size_t)(m->np * m->hn));
    m->ff = mc_alloc(sizeof(float) * t * w);
    m->act = mc_alloc(sizeof(float) * t * (size_t)m->ffn);
    m->mean = mc_alloc(sizeof(float) * t);
    m->rstd = mc_alloc(sizeof(float) * t);
    m->sel = mc_alloc(sizeof(float) * t * (size_t)m->h);
    m->pos_ids = mc_alloc(sizeof(int64_t) * t);
    if (m->tp.size > 1) { /* the output layer's local logits and their gather */
        m->lg_local = mc_alloc(sizeof(float) * t * (size_t)m->V_l);
        m->lg_all = mc_alloc(sizeof(float) * t * (size_t)(m->V_l * m->tp.size));
    }
    bool lg_ok = m->tp.size == 1 || (m->lg_local && m->lg_all);
    if (!m->x || !m->y || !m->qkv_buf || !m->ctx || !m->ff || !m->act || !m->mean || !m->rstd ||
        !m->sel || !m->pos_ids || !lg_ok) {
        free_scratch(m);
        return MC_ERR_NOMEM;
    }
    m->cap = n;
    return MC_OK;
}

static void norm(mc_inf_model *m, float *y, const float *x, const float *w, const float *b,
                 int64_t rows)
{
    struct mc_backend *be = m->be;
    if (m->layernorm)
        be->ops->layernorm_fwd(be, MC_DTYPE_F32, y, m->mean, m->rstd, x, w, b, rows, m->h,
                               m->cfg.norm_epsilon);
    else
        be->ops->rmsnorm_fwd(be, MC_DTYPE_F32, y, m->rstd, x, w, rows, m->h, m->cfg.norm_epsilon);
}

/* y [n, out] = x [n, in] @ w^T (w [out, in], torch's layout) */
static void linear(mc_inf_model *m, float *y, const float *x, const float *w, int64_t n,
                   int64_t out, int64_t in)
{
    m->be->ops->gemm(m->be, false, true, n, out, in, 1.0f, x, MC_DTYPE_F32, in, w, MC_DTYPE_F32,
                     in, 0.0f, y, MC_DTYPE_F32, out, MC_DTYPE_F32);
}

/* DotProductAttention for one token and one query head against its row's cached keys
 * [0, pos]: softmax(q k^T / sqrt(hn)) v, with the scores in fp32 (Megatron's causal mask is the
 * length: a token sees its own position and the ones before). */
static void attend(const mc_inf_model *m, const mc_inf_cache *c, int64_t l, int64_t row,
                   int64_t pos, const float *q, int64_t group, float *out, float *s)
{
    int64_t hn = m->hn;
    float alpha = 1.0f / sqrtf((float)hn), mx = -INFINITY;
    for (int64_t j = 0; j <= pos; j++) {
        const float *k = kv_at(c, c->k, l, row, j) + group * hn;
        float dot = 0.0f;
        for (int64_t d = 0; d < hn; d++)
            dot += q[d] * k[d];
        s[j] = dot * alpha;
        mx = s[j] > mx ? s[j] : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= pos; j++)
        sum += (s[j] = expf(s[j] - mx));
    for (int64_t d = 0; d < hn; d++)
        out[d] = 0.0f;
    for (int64_t j = 0; j <= pos; j++) {
        const float *v = kv_at(c, c->v, l, row, j) + group * hn;
        float p = s[j] / sum;
        for (int64_t d = 0; d < hn; d++)
            out[d] += p * v[d];
    }
}

/* The attention block of layer l on the packed tokens: QKV, RoPE, cache append, core
 * attention, linear_proj; adds its output (with bias) to the residual stream m->x. */
static mc_status attention(mc_inf_model *m, mc_inf_cache *c, int64_t l, int64_t n,
                           const int64_t *rows)
{
    const struct layer *w = &m->layers[l];
    struct mc_backend *be = m->be;
    int64_t grp = (m->per_group + 2) * m->hn;
    norm(m, m->y, m->x, w->ln1_w, w->ln1_b, n);
    mc_status st = mc_tp_linear_col_forward(be, &m->tp, m->qkv_buf, m->y, w->qkv_w, w->qkv_b, n,
                                            m->h, m->qkv, NULL);
    if (st)
        return st;
    for (int64_t t = 0; t < n; t++) {
        float *r = m->qkv_buf + t * m->qkv;
        int64_t p = m->pos_ids[t];
        for (int64_t g = 0; m->rot_dim && g < m->ng; g++) /* the group's query heads and key */
            be->ops->rope_fwd(be, MC_DTYPE_F32, r + g * grp, m->rope_cos + p * m->rot_dim,
                              m->rope_sin + p * m->rot_dim, 1, m->per_group + 1, m->hn,
                              m->rot_dim, m->cfg.rotary_interleaved);
        float *k = kv_at(c, c->k, l, rows[t], p), *v = kv_at(c, c->v, l, rows[t], p);
        for (int64_t g = 0; g < m->ng; g++) {
            memcpy(k + g * m->hn, r + g * grp + m->per_group * m->hn, sizeof(float) * (size_t)m->hn);
            memcpy(v + g * m->hn, r + g * grp + (m->per_group + 1) * m->hn,
                   sizeof(float) * (size_t)m->hn);
        }
    }
    int64_t jobs = n * m->np;
#pragma omp parallel for schedule(dynamic, 1) num_threads(m->n_threads)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t t = job / m->np, head = job % m->np, g = head / m->per_group;
        const float *q = m->qkv_buf + t * m->qkv + g * grp + (head % m->per_group) * m->hn;
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        attend(m, c, l, rows[t], m->pos_ids[t], q, g, m->ctx + t * m->np * m->hn + head * m->hn,
               m->scores + (int64_t)tid * m->max_seq);
    }
    /* RowParallelLinear: the partial products all-reduced, then bias + residual */
    if ((st = mc_tp_linear_row_forward(be, &m->tp, m->y, m->ctx, w->proj_w, n, m->np * m->hn,
                                       m->h, NULL)))
        return st;
    be->ops->bias_dropout_add(be, MC_DTYPE_F32, m->x, m->y, w->proj_b, m->x, NULL, 1.0f, n, m->h);
    return MC_OK;
}

static mc_status mlp(mc_inf_model *m, int64_t l, int64_t n)
{
    const struct layer *w = &m->layers[l];
    struct mc_backend *be = m->be;
    norm(m, m->y, m->x, w->ln2_w, w->ln2_b, n);
    /* ColumnParallelLinear without its bias: the activation adds it (the fused bias-GELU) */
    mc_status st = mc_tp_linear_col_forward(be, &m->tp, m->ff, m->y, w->fc1_w, NULL, n, m->h,
                                            m->fc1, NULL);
    if (st)
        return st;
    switch (m->cfg.activation) {
    case MC_ACT_SWIGLU:
        be->ops->swiglu_fwd(be, MC_DTYPE_F32, m->act, m->ff, w->fc1_b, n, m->ffn);
        break;
    case MC_ACT_GELU_TANH:
        be->ops->gelu_tanh_fwd(be, MC_DTYPE_F32, m->act, m->ff, w->fc1_b, n, m->ffn);
        break;
    case MC_ACT_SQUARED_RELU:
        be->ops->squared_relu_fwd(be, MC_DTYPE_F32, m->act, m->ff, w->fc1_b, n, m->ffn);
        break;
    default:
        be->ops->gelu_erf_fwd(be, MC_DTYPE_F32, m->act, m->ff, w->fc1_b, n, m->ffn);
        break;
    }
    if ((st = mc_tp_linear_row_forward(be, &m->tp, m->y, m->act, w->fc2_w, n, m->ffn, m->h,
                                       NULL)))
        return st;
    be->ops->bias_dropout_add(be, MC_DTYPE_F32, m->x, m->y, w->fc2_b, m->x, NULL, 1.0f, n, m->h);
    return MC_OK;
}

/* The positions of the packed tokens: each row continues where its cache ends. */
static mc_status place_tokens(mc_inf_model *m, mc_inf_cache *c, int64_t n, const int64_t *tokens,
                              const int64_t *rows)
{
    for (int64_t t = 0; t < n; t++) /* ids and rows first: nothing changes when one is bad */
        if (rows[t] < 0 || rows[t] >= c->rows || tokens[t] < 0 || tokens[t] >= m->V)
            return mc_error(MC_ERR_SHAPE, "token %lld: id %lld (vocabulary %lld), row %lld (cache "
                            "rows %lld): out of range", (long long)t, (long long)tokens[t],
                            (long long)m->V, (long long)rows[t], (long long)c->rows);
    for (int64_t t = 0; t < n; t++)
        m->pos_ids[t] = c->len[rows[t]]++;
    for (int64_t t = 0; t < n; t++)
        if (m->pos_ids[t] >= c->max_seq) {
            for (int64_t u = 0; u < n; u++) /* a refused step leaves the cache as it was */
                c->len[rows[u]]--;
            return mc_error(MC_ERR_SHAPE, "row %lld: the KV cache holds %lld tokens, no room for "
                            "more", (long long)rows[t], (long long)c->max_seq);
        }
    return MC_OK;
}

/* The vocab-parallel output layer: this rank's [k, V_l] logits, all-gathered ([tp, k, V_l] in
 * rank order) and laid out as [k, V] (gather_from_tensor_model_parallel_region on the last
 * dimension); the zero rows past V on the last rank are dropped. */
static mc_status gathered_logits(mc_inf_model *m, int64_t k, float *logits)
{
    int64_t Vl = m->V_l;
    linear(m, m->lg_local, m->y, m->out_w, k, Vl, m->h);
    mc_status st = mc_comm_all_gather(m->tp.comm, m->lg_all, m->lg_local, k * Vl, MC_DTYPE_F32,
                                      "output layer logits all-gather");
    if (st)
        return st;
    for (int r = 0; r < m->tp.size; r++) {
        int64_t c0 = (int64_t)r * Vl, nc = m->V - c0 < Vl ? m->V - c0 : Vl;
        for (int64_t t = 0; t < k && nc > 0; t++)
            memcpy(logits + t * m->V + c0, m->lg_all + ((int64_t)r * k + t) * Vl,
                   sizeof(float) * (size_t)nc);
    }
    return MC_OK;
}

mc_status mc_inf_forward(mc_inf_model *m, mc_inf_cache *c, int64_t n, const int64_t *tokens,
                         const int64_t *rows, const bool *want, float *logits)
{
    if (n <= 0)
        return MC_OK;
    mc_status st = grow(m, n);
    if (st || (st = place_tokens(m, c, n, tokens, rows)))
        return st;
    struct mc_backend *be = m->be;
    /* VocabParallelEmbedding: this rank's rows, the others' zeros, all-reduced */
    if ((st = mc_tp_embedding_forward(be, &m->tp, m->x, m->word, tokens, n, m->h, m->V_l, NULL)))
        return st;
    if (m->pos) { /* learned absolute positions: x += position_embeddings[pos] */
        be->ops->embedding_fwd(be, MC_DTYPE_F32, m->y, m->pos, m->pos_ids, n, m->h, 0,
                               m->cfg.max_position_embeddings);
        be->ops->bias_dropout_add(be, MC_DTYPE_F32, m->x, m->x, NULL, m->y, NULL, 1.0f, n, m->h);
    }
    for (int64_t l = 0; l < m->L; l++)
        if ((st = attention(m, c, l, n, rows)) || (st = mlp(m, l, n)))
            return st;
    int64_t k = 0; /* the rows whose logits are wanted, then the final norm on them only */
    for (int64_t t = 0; t < n; t++)
        if (!want || want[t])
            memcpy(m->sel + k++ * m->h, m->x + t * m->h, sizeof(float) * (size_t)m->h);
    norm(m, m->y, m->sel, m->lnf_w, m->lnf_b, k);
    if (m->tp.size == 1) {
        linear(m, logits, m->y, m->out_w, k, m->V, m->h);
        return MC_OK;
    }
    return gathered_logits(m, k, logits);
}
