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
static double arg_float(const struct mc_pk *ns, const char *key, double dflt)
{
    double v;
    return mc_pk_number(mc_pk_get(ns, key), &v) ? v : dflt;
}
static bool arg_bool(const struct mc_pk *ns, const char *key, bool dflt)
{
    const struct mc_pk *v = mc_pk_get(ns, key);
    double x;
    return v && v->kind != MC_PK_NONE && mc_pk_number(v, &x) ? x != 0 : dflt;
}
static void arg_str(const struct mc_pk *ns, const char *key, char *buf, size_t n, const char *dflt)
{
    const struct mc_pk *v = mc_pk_get(ns, key);
    snprintf(buf, n, "%s", v && v->kind == MC_PK_STR ? v->s : dflt);
}

/* The features a torch_dist checkpoint may hold that generation does not run. */
static mc_status refuse(const char *dir, const struct mc_pk *a)
{
    static const char *const keys[][2] = {{"num_experts", "mixture of experts"},
                                          {"qk_layernorm", "--qk-layernorm"},
                                          {"apply_layernorm_1p", "--apply-layernorm-1p"},
                                          {"multi_latent_attention", "multi-latent attention"},
                                          {"mtp_num_layers", "multi-token prediction"}};
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        const struct mc_pk *v = mc_pk_get(a, keys[k][0]);
        double x = 0;
        if (v && v->kind != MC_PK_NONE && (!mc_pk_number(v, &x) || x != 0))
            return mc_error(MC_ERR_UNSUPPORTED, "--load %s: the checkpoint was trained with %s "
                            "(args.%s); generation does not implement it", dir, keys[k][1],
                            keys[k][0]);
    }
    return MC_OK;
}

/* build_checkpoint_metadata's fields, from the saved args */
static void meta_from_args(struct mc_cv_meta *md, const struct mc_pk *a)
{
    md->num_layers = arg_int(a, "num_layers", 0);
    md->hidden_size = arg_int(a, "hidden_size", 0);
    md->num_attention_heads = arg_int(a, "num_attention_heads", 1);
    md->num_query_groups = arg_bool(a, "group_query_attention", false)
                               ? arg_int(a, "num_query_groups", md->num_attention_heads)
                               : md->num_attention_heads;
    md->kv_channels = arg_int(a, "kv_channels", md->hidden_size / md->num_attention_heads);
    md->ffn_hidden_size = arg_int(a, "ffn_hidden_size", 4 * md->hidden_size);
    md->seq_length = arg_int(a, "seq_length", 0);
    md->max_position_embeddings = arg_int(a, "max_position_embeddings", 0);
    arg_str(a, "position_embedding_type", md->position_embedding_type,
            sizeof(md->position_embedding_type), "learned_absolute");
    arg_str(a, "normalization", md->normalization, sizeof(md->normalization), "LayerNorm");
    arg_str(a, "tokenizer_type", md->tokenizer_type, sizeof(md->tokenizer_type), "");
    md->norm_epsilon = arg_float(a, "norm_epsilon", 1e-5);
    md->swiglu = arg_bool(a, "swiglu", false);
    md->linear_bias = arg_bool(a, "add_bias_linear", true);
    md->qkv_bias = arg_bool(a, "add_qkv_bias", false);
    md->untied = arg_bool(a, "untie_embeddings_and_output_weights", false);
    md->gelu_tanh = arg_bool(a, "bias_gelu_fusion", true) && md->linear_bias && !md->swiglu;
    md->rotary_base = arg_float(a, "rotary_base", 10000);
    md->rotary_percent = arg_float(a, "rotary_percent", 1.0);
    md->rotary_interleaved = arg_bool(a, "rotary_interleaved", false);
    md->use_rope_scaling = arg_bool(a, "use_rope_scaling", false);
    md->rope_scaling_factor = arg_float(a, "rope_scaling_factor", 8.0);
    md->make_vocab_size_divisible_by = arg_int(a, "make_vocab_size_divisible_by", 128);
    md->true_vocab_size = -1;
    md->params_dtype = MC_DTYPE_F32;
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

mc_status mc_inf_load_dist(const char *dir, const char *iter_dir, struct mc_cv_model *cv, FILE *log)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/common.pt", iter_dir);
    mc_status st = mc_pk_doc_init(&cv->md.doc);
    struct mc_pk *common = NULL;
    if (!st)
        st = mc_torch_load(cv->md.doc, path, &common);
    const struct mc_pk *a = !st ? mc_pk_get(common, "args") : NULL;
    if (!st && (!a || a->kind != MC_PK_NAMESPACE))
        st = mc_error(MC_ERR_FORMAT, "%s: no 'args' Namespace (the model arguments)", path);
    if (st || (st = refuse(dir, a)))
        return st;
    cv->md.checkpoint_args = (struct mc_pk *)a;
    meta_from_args(&cv->md, a);
    int64_t padded = arg_int(a, "padded_vocab_size", 0);
    if (padded <= 0)
        return mc_error(MC_ERR_FORMAT, "%s: args has no padded_vocab_size", path);
    struct mc_gpt_config c;
    if ((st = gpt_config(&cv->md, padded, &c)))
        return mc_error(st, "--load %s: the checkpoint's arguments: %s", dir, mc_last_error());
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
        fprintf(log, "loading torch_dist checkpoint %s: %lld layers\n", iter_dir,
                (long long)c.num_layers);
    st = mc_ckpt_load(&s, NULL, &loaded);
    if (!st && !loaded)
        st = mc_error(MC_ERR_IO, "--load %s: nothing was loaded", dir);
    if (!st)
        st = copy_params(g, cv);
    mc_gpt_model_free(g);
    return st ? st : mc_cv_check(cv, dir);
}
