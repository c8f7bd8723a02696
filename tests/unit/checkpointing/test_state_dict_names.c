/* The state-dict name table (src/checkpointing/state_dict_names.c): every mcore-local key of a
 * GPT layer maps to the TE and legacy names Megatron-LM core_v0.12.1's modules register (spelled
 * out here from megatron/legacy/model/transformer.py, language_model.py and the TE layer spec),
 * maps back unchanged, and the order keys give each model's state_dict() order. */
#include <string.h>

#include "checkpointing/state_dict_names.h"
#include "test.h"

static const char *map(enum mc_sd_scheme from, enum mc_sd_scheme to, const char *key, bool tied)
{
    static char out[512];
    bool absent;
    if (mc_sd_name_map(from, to, key, tied, out, sizeof(out), &absent))
        return "<error>";
    return absent ? "<absent>" : out;
}

static void test_layer_names(void)
{
    static const char *const rows[][3] = {
        {"decoder.layers.3.input_layernorm.weight", "decoder.layers.3.self_attention.linear_qkv.layer_norm_weight",
         "language_model.encoder.layers.3.input_norm.weight"},
        {"decoder.layers.0.input_layernorm.bias", "decoder.layers.0.self_attention.linear_qkv.layer_norm_bias",
         "language_model.encoder.layers.0.input_norm.bias"},
        {"decoder.layers.1.self_attention.linear_proj.weight", "decoder.layers.1.self_attention.linear_proj.weight",
         "language_model.encoder.layers.1.self_attention.dense.weight"},
        {"decoder.layers.1.self_attention.linear_qkv._extra_state", "decoder.layers.1.self_attention.linear_qkv._extra_state",
         "language_model.encoder.layers.1.self_attention.query_key_value._extra_state"},
        {"decoder.layers.10.pre_mlp_layernorm.weight", "decoder.layers.10.mlp.linear_fc1.layer_norm_weight",
         "language_model.encoder.layers.10.post_attention_norm.weight"},
        {"decoder.layers.2.mlp.linear_fc1.bias", "decoder.layers.2.mlp.linear_fc1.bias",
         "language_model.encoder.layers.2.mlp.dense_h_to_4h.bias"},
        {"decoder.layers.2.mlp.linear_fc2.weight", "decoder.layers.2.mlp.linear_fc2.weight",
         "language_model.encoder.layers.2.mlp.dense_4h_to_h.weight"},
        {"embedding.word_embeddings.weight", "embedding.word_embeddings.weight",
         "language_model.embedding.word_embeddings.weight"},
        {"embedding.position_embeddings.weight", "embedding.position_embeddings.weight",
         "language_model.embedding.position_embeddings.weight"},
        {"decoder.final_layernorm.bias", "decoder.final_layernorm.bias", "language_model.encoder.final_norm.bias"},
        {"output_layer.weight", "output_layer.weight", "language_model.output_layer.weight"},
        {"output_layer._extra_state", "output_layer._extra_state", "language_model.output_layer._extra_state"},
    };
    for (size_t k = 0; k < sizeof(rows) / sizeof(*rows); k++)
        for (int f = 0; f < 3; f++)
            for (int t = 0; t < 3; t++) {
                const char *got = map((enum mc_sd_scheme)f, (enum mc_sd_scheme)t, rows[k][f], false);
                CHECK(!strcmp(got, rows[k][t]));
                if (strcmp(got, rows[k][t]))
                    printf("  %s -> %s: %s (want %s)\n", rows[k][f], mc_sd_scheme_name(t), got, rows[k][t]);
            }
}

static void test_tied_and_absent(void)
{
    CHECK(!strcmp(map(MC_SD_LOCAL, MC_SD_LEGACY, "output_layer.weight", true), "word_embeddings_for_head.weight"));
    CHECK(!strcmp(map(MC_SD_LEGACY, MC_SD_LOCAL, "word_embeddings_for_head.weight", true), "output_layer.weight"));
    CHECK(!strcmp(map(MC_SD_LOCAL, MC_SD_LEGACY, "output_layer._extra_state", true), "<absent>"));
    CHECK(!strcmp(map(MC_SD_TE, MC_SD_LOCAL, "decoder.layers.4.self_attention.core_attention._extra_state", false),
                  "<absent>"));
    CHECK(!strcmp(map(MC_SD_LOCAL, MC_SD_LEGACY, "decoder.layers.0.self_attention.q_layernorm.weight", false),
                  "<error>"));
    CHECK(!strcmp(map(MC_SD_LOCAL, MC_SD_TE, "decoder.layers.0.self_attention.q_layernorm.weight", false),
                  "decoder.layers.0.self_attention.q_layernorm.weight"));
    CHECK(!strcmp(map(MC_SD_LOCAL, MC_SD_TE, "decoder.layers.0.nonsense.weight", false), "<error>"));
    CHECK(!strcmp(map(MC_SD_LOCAL, MC_SD_TE, "decoder.layers.x.mlp.linear_fc1.weight", false), "<error>"));
    CHECK(!strcmp(map(MC_SD_LOCAL, MC_SD_TE, "embedding.word_embeddings", false), "<error>"));
    /* older legacy spellings */
    CHECK(!strcmp(map(MC_SD_LEGACY, MC_SD_LOCAL, "language_model.transformer.layers.1.input_layernorm.weight", false),
                  "decoder.layers.1.input_layernorm.weight"));
    CHECK(!strcmp(map(MC_SD_LEGACY, MC_SD_LOCAL, "language_model.transformer.final_layernorm.weight", false),
                  "decoder.final_layernorm.weight"));
    CHECK(mc_sd_layer_extras(MC_SD_TE)[0] && !mc_sd_layer_extras(MC_SD_LOCAL)[0]);
}

static void test_depth_and_order(void)
{
    CHECK(mc_sd_legacy_depth("language_model.encoder.layers.0.mlp.dense_4h_to_h.bias") == 2);
    CHECK(mc_sd_legacy_depth("language_model.embedding.word_embeddings.weight") == 3);
    CHECK(mc_sd_legacy_depth("language_model.output_layer.weight") == 2);
    CHECK(mc_sd_legacy_depth("word_embeddings_for_head.weight") == 1);
    /* TE: core_attention state, linear_proj, then the fused norm before the qkv weight */
    const char *te[] = {"embedding.word_embeddings.weight",
                        "decoder.layers.0.self_attention.core_attention._extra_state",
                        "decoder.layers.0.self_attention.linear_proj.weight",
                        "decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
                        "decoder.layers.0.self_attention.linear_qkv.weight",
                        "decoder.layers.0.mlp.linear_fc1.layer_norm_bias",
                        "decoder.layers.0.mlp.linear_fc2._extra_state",
                        "decoder.layers.1.self_attention.core_attention._extra_state",
                        "decoder.final_layernorm.weight", "output_layer.weight", "output_layer._extra_state"};
    for (size_t k = 1; k < sizeof(te) / sizeof(*te); k++)
        CHECK(mc_sd_name_order(MC_SD_TE, te[k - 1]) < mc_sd_name_order(MC_SD_TE, te[k]));
    /* legacy: query_key_value before dense (local has linear_proj first) */
    CHECK(mc_sd_name_order(MC_SD_LEGACY, "language_model.encoder.layers.0.self_attention.query_key_value.weight") <
          mc_sd_name_order(MC_SD_LEGACY, "language_model.encoder.layers.0.self_attention.dense.weight"));
    CHECK(mc_sd_name_order(MC_SD_LOCAL, "decoder.layers.0.self_attention.linear_proj.weight") <
          mc_sd_name_order(MC_SD_LOCAL, "decoder.layers.0.self_attention.linear_qkv.weight"));
    CHECK(mc_sd_name_order(MC_SD_LEGACY, "language_model.encoder.final_norm.weight") <
          mc_sd_name_order(MC_SD_LEGACY, "word_embeddings_for_head.weight"));
    CHECK(mc_sd_name_order(MC_SD_LOCAL, "decoder.layers.9.foo") == -1);
}

int main(void)
{
    test_layer_names();
    test_tied_and_absent();
    test_depth_and_order();
    return test_summary("test_state_dict_names");
}
