/* The state-dict name table of GPT models: mcore local spec <-> mcore Transformer Engine spec <->
 * legacy model (see state_dict_names.h). Mirrors the module attribute names of
 * megatron/core/models/gpt/gpt_layer_specs.py (local and TE layer specs), megatron/legacy/model/
 * {language_model,transformer,gpt_model}.py, and TransformerLayer's sharded_state_dict_keys_map
 * (Megatron-LM core_v0.12.1). The order columns give each scheme's module registration order,
 * which is the order torch's state_dict() lists the entries in. */
#include "checkpointing/state_dict_names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One transformer-layer entry, layer-relative, in the local spec's order. NULL: none. */
struct layer_row {
    const char *name[MC_SD_SCHEMES];
    signed char order[MC_SD_SCHEMES];
};

#define X "._extra_state"
static const struct layer_row layer_rows[] = {
    {{"input_layernorm.weight", "self_attention.linear_qkv.layer_norm_weight", "input_norm.weight"}, {0, 4, 0}},
    {{"input_layernorm.bias", "self_attention.linear_qkv.layer_norm_bias", "input_norm.bias"}, {1, 5, 1}},
    {{"self_attention.linear_proj.weight", "self_attention.linear_proj.weight", "self_attention.dense.weight"}, {2, 1, 5}},
    {{"self_attention.linear_proj.bias", "self_attention.linear_proj.bias", "self_attention.dense.bias"}, {3, 2, 6}},
    {{"self_attention.linear_proj" X, "self_attention.linear_proj" X, "self_attention.dense" X}, {4, 3, 7}},
    {{"self_attention.linear_qkv.weight", "self_attention.linear_qkv.weight",
      "self_attention.query_key_value.weight"}, {5, 6, 2}},
    {{"self_attention.linear_qkv.bias", "self_attention.linear_qkv.bias",
      "self_attention.query_key_value.bias"}, {6, 7, 3}},
    {{"self_attention.linear_qkv" X, "self_attention.linear_qkv" X, "self_attention.query_key_value" X},
     {7, 8, 4}},
    {{"self_attention.q_layernorm.weight", "self_attention.q_layernorm.weight", NULL}, {8, 9, -1}},
    {{"self_attention.q_layernorm.bias", "self_attention.q_layernorm.bias", NULL}, {9, 10, -1}},
    {{"self_attention.k_layernorm.weight", "self_attention.k_layernorm.weight", NULL}, {10, 11, -1}},
    {{"self_attention.k_layernorm.bias", "self_attention.k_layernorm.bias", NULL}, {11, 12, -1}},
    {{"pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight", "post_attention_norm.weight"}, {12, 13, 8}},
    {{"pre_mlp_layernorm.bias", "mlp.linear_fc1.layer_norm_bias", "post_attention_norm.bias"}, {13, 14, 9}},
    {{"mlp.linear_fc1.weight", "mlp.linear_fc1.weight", "mlp.dense_h_to_4h.weight"}, {14, 15, 10}},
    {{"mlp.linear_fc1.bias", "mlp.linear_fc1.bias", "mlp.dense_h_to_4h.bias"}, {15, 16, 11}},
    {{"mlp.linear_fc1" X, "mlp.linear_fc1" X, "mlp.dense_h_to_4h" X}, {16, 17, 12}},
    {{"mlp.linear_fc2.weight", "mlp.linear_fc2.weight", "mlp.dense_4h_to_h.weight"}, {17, 18, 13}},
    {{"mlp.linear_fc2.bias", "mlp.linear_fc2.bias", "mlp.dense_4h_to_h.bias"}, {18, 19, 14}},
    {{"mlp.linear_fc2" X, "mlp.linear_fc2" X, "mlp.dense_4h_to_h" X}, {19, 20, 15}},
    /* TE's DotProductAttention keeps fp8 metadata; registered before linear_proj */
    {{NULL, "self_attention.core_attention" X, NULL}, {-1, 0, -1}},
};
#define N_LAYER_ROWS (sizeof(layer_rows) / sizeof(*layer_rows))

/* Entries outside the layers. `section` orders them around the layers (which are section 1). */
struct model_row {
    const char *name[MC_SD_SCHEMES];
    const char *legacy_tied; /* the legacy name when the output layer is tied to the embeddings */
    int section, order;
};

static const struct model_row model_rows[] = {
    {{"embedding.word_embeddings.weight", "embedding.word_embeddings.weight",
      "language_model.embedding.word_embeddings.weight"}, NULL, 0, 0},
    {{"embedding.position_embeddings.weight", "embedding.position_embeddings.weight",
      "language_model.embedding.position_embeddings.weight"}, NULL, 0, 1},
    {{"decoder.final_layernorm.weight", "decoder.final_layernorm.weight",
      "language_model.encoder.final_norm.weight"}, NULL, 2, 0},
    {{"decoder.final_layernorm.bias", "decoder.final_layernorm.bias",
      "language_model.encoder.final_norm.bias"}, NULL, 2, 1},
    {{"output_layer.weight", "output_layer.weight", "language_model.output_layer.weight"},
     "word_embeddings_for_head.weight", 3, 0},
    {{"output_layer" X, "output_layer" X, "language_model.output_layer" X}, "", 3, 1},
};
#define N_MODEL_ROWS (sizeof(model_rows) / sizeof(*model_rows))

static const char *const layer_prefix[MC_SD_SCHEMES] = {"decoder.layers.", "decoder.layers.",
                                                        "language_model.encoder.layers."};

const char *mc_sd_scheme_name(enum mc_sd_scheme s)
{
    static const char *const names[] = {"local", "transformer_engine", "legacy"};
    return s < MC_SD_SCHEMES ? names[s] : "?";
}

/* Older legacy checkpoints: "transformer" for "encoder", *_layernorm for *_norm. */
static void legacy_normalize(const char *key, char *out, size_t n)
{
    static const char *const alias[][2] = {
        {"language_model.transformer.", "language_model.encoder."},
        {".input_layernorm.", ".input_norm."},
        {".post_attention_layernorm.", ".post_attention_norm."},
        {".final_layernorm.", ".final_norm."},
    };
    char buf[512];
    snprintf(out, n, "%s", key);
    for (size_t k = 0; k < sizeof(alias) / sizeof(*alias); k++) {
        char *at = strstr(out, alias[k][0]);
        if (!at)
            continue;
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - out), out, alias[k][1],
                 at + strlen(alias[k][0]));
        snprintf(out, n, "%s", buf);
    }
}

/* "decoder.layers.12.mlp..." -> layer 12 and the suffix "mlp..."; false if not a layer key. */
static bool split_layer(enum mc_sd_scheme s, const char *key, long *layer, const char **suffix)
{
    size_t pl = strlen(layer_prefix[s]);
    if (strncmp(key, layer_prefix[s], pl))
        return false;
    char *end;
    *layer = strtol(key + pl, &end, 10);
    if (end == key + pl || *end != '.' || *layer < 0)
        return false;
    *suffix = end + 1;
    return true;
}

static const struct layer_row *find_layer_row(enum mc_sd_scheme s, const char *suffix)
{
    for (size_t k = 0; k < N_LAYER_ROWS; k++)
        if (layer_rows[k].name[s] && !strcmp(layer_rows[k].name[s], suffix))
            return &layer_rows[k];
    return NULL;
}

static const struct model_row *find_model_row(enum mc_sd_scheme s, const char *key, bool tied_head)
{
    for (size_t k = 0; k < N_MODEL_ROWS; k++) {
        const struct model_row *r = &model_rows[k];
        const char *name = s == MC_SD_LEGACY && tied_head && r->legacy_tied ? r->legacy_tied : r->name[s];
        if (*name && !strcmp(name, key))
            return r;
    }
    return NULL;
}

/* A MoE layer's MLP entries (mlp.router.weight, mlp.experts.local_experts.<e>.linear_fc1...):
 * SequentialMLP's names, kept as they are in the local spec. */
static bool moe_suffix(const char *suffix)
{
    return !strncmp(suffix, "mlp.router.", 11) || !strncmp(suffix, "mlp.experts.", 12);
}

static mc_status set_out(char *out, size_t n, const char *key, const char *fmt, long layer, const char *s)
{
    int len = layer >= 0 ? snprintf(out, n, fmt, layer, s) : snprintf(out, n, "%s", s);
    if (len < 0 || (size_t)len >= n)
        return mc_error(MC_ERR_CONFIG, "state dict key '%s': the mapped name does not fit %zu bytes", key, n);
    return MC_OK;
}

mc_status mc_sd_name_map(enum mc_sd_scheme from, enum mc_sd_scheme to, const char *key,
                         bool tied_head, char *out, size_t n, bool *absent)
{
    char norm[512];
    *absent = false;
    if (n)
        *out = 0;
    if (from >= MC_SD_SCHEMES || to >= MC_SD_SCHEMES)
        return mc_error(MC_ERR_INTERNAL, "mc_sd_name_map: scheme %d -> %d", (int)from, (int)to);
    if (from == MC_SD_LEGACY)
        legacy_normalize(key, norm, sizeof(norm));
    else
        snprintf(norm, sizeof(norm), "%s", key);
    long layer;
    const char *suffix;
    if (split_layer(from, norm, &layer, &suffix) && moe_suffix(suffix)) {
        if (from != MC_SD_LOCAL || to != MC_SD_LOCAL)
            return mc_error(MC_ERR_UNSUPPORTED, "state dict key '%s': mixture-of-experts entries "
                            "are mapped for the local spec only (--transformer-impl local) by "
                            "megatron.c so far", key);
        char fmt[64];
        snprintf(fmt, sizeof(fmt), "%s%%ld.%%s", layer_prefix[to]);
        return set_out(out, n, key, fmt, layer, suffix);
    }
    if (split_layer(from, norm, &layer, &suffix)) {
        const struct layer_row *r = find_layer_row(from, suffix);
        if (!r)
            return mc_error(MC_ERR_FORMAT, "state dict key '%s' is not a %s-spec transformer layer "
                            "entry", key, mc_sd_scheme_name(from));
        if (!r->name[to]) {
            *absent = true;
            if (!strstr(suffix, X))
                return mc_error(MC_ERR_UNSUPPORTED, "state dict key '%s' has no counterpart in the "
                                "%s model (e.g. --qk-layernorm with --use-legacy-models)", key,
                                mc_sd_scheme_name(to));
            return MC_OK;
        }
        char fmt[64];
        snprintf(fmt, sizeof(fmt), "%s%%ld.%%s", layer_prefix[to]);
        return set_out(out, n, key, fmt, layer, r->name[to]);
    }
    const struct model_row *r = find_model_row(from, norm, tied_head);
    if (!r)
        return mc_error(MC_ERR_FORMAT, "state dict key '%s' is not a GPT model entry of the %s "
                        "spec", key, mc_sd_scheme_name(from));
    const char *name = to == MC_SD_LEGACY && tied_head && r->legacy_tied ? r->legacy_tied : r->name[to];
    if (!*name) {
        *absent = true;
        return MC_OK;
    }
    return set_out(out, n, key, "", -1, name);
}

long mc_sd_name_order(enum mc_sd_scheme s, const char *key)
{
    long layer;
    const char *suffix;
    if (s >= MC_SD_SCHEMES)
        return -1;
    if (split_layer(s, key, &layer, &suffix) && moe_suffix(suffix))
        return s == MC_SD_LOCAL ? 1000000000L + layer * 100 + 14 : -1; /* after pre_mlp_layernorm,
                                                                          * in insertion order */
    if (split_layer(s, key, &layer, &suffix)) {
        const struct layer_row *r = find_layer_row(s, suffix);
        return r ? 1000000000L + layer * 100 + r->order[s] : -1;
    }
    for (int tied = 0; tied < 2; tied++) {
        const struct model_row *r = find_model_row(s, key, tied);
        if (r)
            return (long)r->section * 1000000000L + r->order;
    }
    return -1;
}

int mc_sd_legacy_depth(const char *key)
{
    static const struct { const char *prefix; int depth; } levels[] = {
        {"language_model.embedding.", 3}, {"language_model.encoder.", 2},
        {"language_model.transformer.", 2}, {"language_model.output_layer.", 2},
        {"word_embeddings_for_head.", 1},
    };
    for (size_t k = 0; k < sizeof(levels) / sizeof(*levels); k++)
        if (!strncmp(key, levels[k].prefix, strlen(levels[k].prefix)))
            return levels[k].depth;
    return 0;
}

const char *const *mc_sd_layer_extras(enum mc_sd_scheme s)
{
    static const char *const te[] = {"self_attention.core_attention" X, NULL};
    static const char *const none[] = {NULL};
    return s == MC_SD_TE ? te : none;
}
