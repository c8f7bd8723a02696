/* torch_dist checkpoints for generation (Megatron's default --ckpt-format): the model arguments
 * from the iteration's common.pt, a one-process GPTModel built from them (its activation
 * buffers sized for one token), the weights read into it by the training checkpoint loader
 * (src/checkpointing/dist_checkpoint.c resolves any saved TP/PP layout), then copied into the
 * converter's in-memory model under the converter's tensor names, so the rest of generation
 * sees the same thing as for a torch checkpoint. */
#include "inference/inference.h"

#include <string.h>

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

mc_status mc_inf_load_dist(const char *dir, const char *iter_dir, struct mc_cv_model *cv, FILE *log)
{
    bool shard;
    return mc_inf_load_dist_shard(dir, iter_dir, cv, log, 1, 0, &shard);
}

mc_status mc_inf_load_dist_shard(const char *dir, const char *iter_dir, struct mc_cv_model *cv,
                                 FILE *log, int tp, int tp_rank, bool *shard)
{
    char path[4200];
    *shard = false;
    snprintf(path, sizeof(path), "%s/common.pt", iter_dir);
    mc_status st = mc_pk_doc_init(&cv->md.doc);
    struct mc_pk *common = NULL;
    if (!st)
        st = mc_torch_load(cv->md.doc, path, &common);
    const struct mc_pk *a = !st ? mc_pk_get(common, "args") : NULL;
    if (!st && (!a || a->kind != MC_PK_NAMESPACE))
        st = mc_error(MC_ERR_FORMAT, "%s: no 'args' Namespace (the model arguments)", path);
    char what[4300];
    snprintf(what, sizeof(what), "--load %s", dir);
    if (st || (st = mc_cv_meta_from_args(&cv->md, a, what, "generation does not implement it")))
        return st;
    cv->md.true_vocab_size = -1;
    cv->md.params_dtype = MC_DTYPE_F32; /* copied out of the fp32 loading model */
    int64_t padded = arg_int(a, "padded_vocab_size", 0);
    if (padded <= 0)
        return mc_error(MC_ERR_FORMAT, "%s: args has no padded_vocab_size", path);
    struct mc_gpt_config c;
    if ((st = gpt_config(&cv->md, padded, &c)))
        return mc_error(st, "--load %s: the checkpoint's arguments: %s", dir, mc_last_error());
    if (shardable(&c, tp)) { /* the loading model is this rank's shard: only its bytes are read */
        c.tensor_model_parallel_size = tp, c.tensor_model_parallel_rank = tp_rank;
        if ((st = mc_gpt_config_validate(&c)))
            return st;
        *shard = true;
    }
    mc_gpt_model *g = NULL;
    if ((st = mc_gpt_model_init(&c, &g)))
        return st;
    struct mc_ckpt_state s = {
        .opts = {.dir = dir, .finetune = true, .load_optim = false, .exit_on_missing = true,
                 .ckpt_format = "torch_dist", .read_dist = true},
        .model = g,
    };
    bool loaded = false;
    if (log)
        fprintf(log, "loading torch_dist checkpoint %s: %lld layers%s\n", iter_dir,
                (long long)c.num_layers, *shard ? ", this rank's tensor-parallel shard" : "");
    st = mc_ckpt_load(&s, NULL, &loaded);
    if (!st && !loaded)
        st = mc_error(MC_ERR_IO, "--load %s: nothing was loaded", dir);
    if (!st)
        st = copy_params(g, cv);
    mc_gpt_model_free(g);
    return st || *shard ? st : mc_cv_check(cv, dir); /* a shard has the local shapes */
}
