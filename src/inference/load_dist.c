/* Checkpoints read by the training checkpoint loader for generation: torch_dist (Megatron's
 * default --ckpt-format: the model arguments from the iteration's common.pt;
 * src/checkpointing/dist_checkpoint.c resolves any saved TP/PP layout) and, under tensor
 * parallelism, a torch checkpoint saved at the same tensor-parallel size without pipeline
 * parallelism (each rank reads its own mp_rank_NN file). A GPTModel is built from the saved
 * arguments (its activation buffers sized for one token): this rank's tensor-parallel shard
 * when the layout allows it, so only that shard is read, else the whole model; its weights are
 * copied into the converter's in-memory model under the converter's tensor names, so the rest
 * of generation sees the same thing as for a checkpoint the converter reads. */
#include "inference/inference.h"

#include <string.h>
#include <unistd.h>

#include "checkpointing/dist_checkpoint.h"
#include "checkpointing/torch_pickle.h"
#include "megatron/checkpoint.h"
#include "megatron/gpt.h"
#include "tools/checkpoint/convert.h"

static int64_t arg_int(const struct mc_pk *ns, const char *key, int64_t dflt)
{
    double v;
    return mc_pk_number(mc_pk_get(ns, key), &v) ? (int64_t)v : dflt;
}
static mc_status gpt_config(const struct mc_cv_meta *md, int64_t padded, struct mc_gpt_config *c)
{
    mc_gpt_config_default(c);
    c->num_layers = md->num_layers, c->hidden_size = md->hidden_size;
    c->num_attention_heads = md->num_attention_heads, c->num_query_groups = md->num_query_groups;
    c->kv_channels = md->kv_channels, c->ffn_hidden_size = md->ffn_hidden_size;
    c->vocab_size = c->padded_vocab_size = padded;
    c->make_vocab_size_divisible_by = 1;
    c->max_position_embeddings = md->max_position_embeddings > 0 ? md->max_position_embeddings : 1;
    c->seq_length = 1, c->micro_batch_size = 1; /* the loading model never runs */
    c->normalization = !strcmp(md->normalization, "RMSNorm") ? MC_NORM_RMSNORM : MC_NORM_LAYERNORM;
    c->norm_epsilon = (float)md->norm_epsilon;
    c->position_embedding_type = !strcmp(md->position_embedding_type, "rope") ? MC_POS_ROPE
                                 : !strcmp(md->position_embedding_type, "none")
                                     ? MC_POS_NONE : MC_POS_LEARNED_ABSOLUTE;
    c->rotary_percent = (float)md->rotary_percent, c->rotary_base = (float)md->rotary_base;
    c->rotary_interleaved = md->rotary_interleaved, c->use_rope_scaling = md->use_rope_scaling;
    c->rope_scaling_factor = (float)md->rope_scaling_factor;
    c->activation = md->swiglu ? MC_ACT_SWIGLU : md->gelu_tanh ? MC_ACT_GELU_TANH : MC_ACT_GELU_ERF;
    c->add_bias_linear = md->linear_bias, c->add_qkv_bias = md->qkv_bias || md->linear_bias;
    c->untie_embeddings_and_output_weights = md->untied;
    c->hidden_dropout = c->attention_dropout = 0.0f;
    return mc_gpt_config_validate(c);
}

/* The model parameter `name` (Megatron's local-spec name) under the converter's name. */
static bool cv_name(const char *name, char *out, size_t n)
{
    static const char *const model[][2] = {
        {"embedding.word_embeddings.weight", "word embeddings"},
        {"embedding.position_embeddings.weight", "position embeddings"},
        {"decoder.final_layernorm.weight", "final norm weight"},
        {"decoder.final_layernorm.bias", "final norm bias"},
        {"output_layer.weight", "output layer weight"}};
    static const char *const layer[][2] = {
        {"input_layernorm.weight", "input norm weight"}, {"input_layernorm.bias", "input norm bias"},
        {"self_attention.linear_proj.weight", "dense weight"},
        {"self_attention.linear_proj.bias", "dense bias"},
        {"self_attention.linear_qkv.weight", "qkv weight"},
        {"self_attention.linear_qkv.bias", "qkv bias"},
        {"pre_mlp_layernorm.weight", "post norm weight"},
        {"pre_mlp_layernorm.bias", "post norm bias"},
        {"mlp.linear_fc1.weight", "mlp l0 weight"}, {"mlp.linear_fc1.bias", "mlp l0 bias"},
        {"mlp.linear_fc2.weight", "mlp l1 weight"}, {"mlp.linear_fc2.bias", "mlp l1 bias"}};
    for (size_t k = 0; k < sizeof(model) / sizeof(model[0]); k++)
        if (!strcmp(name, model[k][0]))
            return snprintf(out, n, "%s", model[k][1]), true;
    long l;
    int used = 0;
    if (sscanf(name, "decoder.layers.%ld.%n", &l, &used) != 1 || !used)
        return false;
    for (size_t k = 0; k < sizeof(layer) / sizeof(layer[0]); k++)
        if (!strcmp(name + used, layer[k][0]))
            return snprintf(out, n, "layer %ld %s", l, layer[k][1]), true;
    return false;
}

static mc_status copy_params(const mc_gpt_model *g, struct mc_cv_model *cv)
{
    for (int64_t i = 0; i < mc_gpt_num_params(g); i++) {
        struct mc_param_view v = mc_gpt_param(g, i);
        char name[64];
        if (!cv_name(v.name, name, sizeof(name)))
            return mc_error(MC_ERR_UNSUPPORTED, "parameter %s: not one generation reads", v.name);
        struct mc_cv_tensor *t;
        mc_status st = mc_cv_add(cv, &t, MC_DTYPE_F32, v.ndim, v.shape[0],
                                 v.ndim > 1 ? v.shape[1] : 1, "%s", name);
        if (st)
            return st;
        memcpy(t->data, v.data, sizeof(float) * (size_t)v.numel);
    }
    return MC_OK;
}

/* Whether rank tp_rank's shards can be read alone: the training model's split needs the padded
 * vocabulary, heads, query groups and ffn columns to divide by tp. */
static bool shardable(const struct mc_gpt_config *c, int tp)
{
    return tp > 1 && c->padded_vocab_size % tp == 0 && c->num_attention_heads % tp == 0 &&
           c->num_query_groups % tp == 0 && c->ffn_hidden_size % tp == 0;
}

/* The model of the saved args a (in cv->md.doc), read by the training loader in format fmt:
 * this rank's shard when tp > 1 and the layout allows it (*shard), else the whole model. */
static mc_status load_through_training(const char *dir, const char *iter_dir, const char *fmt,
                                       const struct mc_pk *a, struct mc_cv_model *cv, FILE *log,
                                       int tp, int tp_rank, bool *shard)
{
    char what[4300];
    snprintf(what, sizeof(what), "--load %s", dir);
    mc_status st = mc_cv_meta_from_args(&cv->md, a, what, "generation does not implement it");
    if (st)
        return st;
    cv->md.true_vocab_size = -1;
    cv->md.params_dtype = MC_DTYPE_F32; /* copied out of the fp32 loading model */
    int64_t padded = arg_int(a, "padded_vocab_size", 0);
    if (padded <= 0)
        return mc_error(MC_ERR_FORMAT, "%s: the saved args have no padded_vocab_size", iter_dir);
    struct mc_gpt_config c;
    if ((st = gpt_config(&cv->md, padded, &c)))
        return mc_error(st, "--load %s: the checkpoint's arguments: %s", dir, mc_last_error());
    if (shardable(&c, tp)) { /* the loading model is this rank's shard: only its bytes are read */
        c.tensor_model_parallel_size = tp, c.tensor_model_parallel_rank = tp_rank;
        if ((st = mc_gpt_config_validate(&c)))
            return st;
        *shard = true;
    }
    bool dist = !strcmp(fmt, "torch_dist");
    if (!dist && !*shard) /* the training loader reads one torch file: it must be the shard */
        return mc_error(MC_ERR_CONFIG, "--load %s: the checkpoint's sizes do not divide by "
                        "--tensor-model-parallel-size %d", dir, tp);
    mc_gpt_model *g = NULL;
    if ((st = mc_gpt_model_init(&c, &g)))
        return st;
    struct mc_ckpt_state s = {
        .opts = {.dir = dir, .finetune = true, .load_optim = false, .exit_on_missing = true,
                 .ckpt_format = fmt, .read_dist = dist},
        .model = g,
        .tp_rank = *shard ? tp_rank : 0, .tp_size = *shard ? tp : 1, .pp_size = 1,
    };
    bool loaded = false;
    if (log)
        fprintf(log, "loading %s checkpoint %s: %lld layers%s\n", fmt, iter_dir,
                (long long)c.num_layers, *shard ? ", this rank's tensor-parallel shard" : "");
    st = mc_ckpt_load(&s, NULL, &loaded);
    if (!st && !loaded)
        st = mc_error(MC_ERR_IO, "--load %s: nothing was loaded", dir);
    if (!st)
        st = copy_params(g, cv);
    mc_gpt_model_free(g);
    return st || *shard ? st : mc_cv_check(cv, dir); /* a shard has the local shapes */
}

/* The saved args Namespace of file path, read into cv->md.doc. */
static mc_status saved_args(const char *path, struct mc_cv_model *cv, const struct mc_pk **a)
{
    mc_status st = mc_pk_doc_init(&cv->md.doc);
    struct mc_pk *root = NULL;
    if (!st)
        st = mc_torch_load(cv->md.doc, path, &root);
    *a = !st ? mc_pk_get(root, "args") : NULL;
    if (!st && (!*a || (*a)->kind != MC_PK_NAMESPACE))
        st = mc_error(MC_ERR_FORMAT, "%s: no 'args' Namespace (the model arguments)", path);
    return st;
}

mc_status mc_inf_load_dist_shard(const char *dir, const char *iter_dir, struct mc_cv_model *cv,
                                 FILE *log, int tp, int tp_rank, bool *shard)
{
    char path[4200];
    *shard = false;
    snprintf(path, sizeof(path), "%s/common.pt", iter_dir);
    const struct mc_pk *a;
    mc_status st = saved_args(path, cv, &a);
    return st ? st : load_through_training(dir, iter_dir, "torch_dist", a, cv, log, tp, tp_rank,
                                           shard);
}

bool mc_inf_torch_shard_layout(const char *iter_dir, int tp)
{
    char p[4300];
    if (tp < 2)
        return false;
    snprintf(p, sizeof(p), "%s/mp_rank_00_000", iter_dir); /* pipeline-parallel: not here */
    if (!access(p, F_OK))
        return false;
    snprintf(p, sizeof(p), "%s/mp_rank_%02d/model_optim_rng.pt", iter_dir, tp - 1);
    bool last = !access(p, R_OK);
    snprintf(p, sizeof(p), "%s/mp_rank_%02d", iter_dir, tp);
    return last && access(p, F_OK) != 0;
}

mc_status mc_inf_load_torch_shard(const char *dir, const char *iter_dir, struct mc_cv_model *cv,
                                  FILE *log, int tp, int tp_rank, bool *shard)
{
    char path[4300];
    *shard = false;
    snprintf(path, sizeof(path), "%s/mp_rank_%02d/model_optim_rng.pt", iter_dir, tp_rank);
    const struct mc_pk *a;
    mc_status st = saved_args(path, cv, &a);
    if (st)
        return st;
    if (arg_int(a, "tensor_model_parallel_size", 1) != tp ||
        arg_int(a, "pipeline_model_parallel_size", 1) != 1 ||
        arg_int(a, "virtual_pipeline_model_parallel_size", 1) > 1)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: saved at another layout than its directories say",
                        path);
    return load_through_training(dir, iter_dir, "torch", a, cv, log, tp, tp_rank, shard);
}
