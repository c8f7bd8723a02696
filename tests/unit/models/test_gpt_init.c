/* GPTModel construction: state-dict names, order and shapes (spec §3.7), init statistics
 * (spec §4), and tensor-parallel invariance of the initialization: the shards that ranks
 * r = 0..n-1 of a tp=n model draw are exactly the slices of the tp=1 weights, including the
 * SwiGLU fc1 [gate_r; up_r] layout and the per-query-group QKV rows. */
#include "megatron/gpt.h"
#include "test.h"

#include <string.h>

static struct mc_gpt_config gpt2(void)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.vocab_size = 50;
    c.padded_vocab_size = 64; /* the same padded vocab for every tp (spec §4) */
    c.max_position_embeddings = 16;
    c.seq_length = 8;
    c.micro_batch_size = 2;
    return c;
}

static struct mc_gpt_config llama(void)
{
    struct mc_gpt_config c = gpt2();
    c.normalization = MC_NORM_RMSNORM;
    c.position_embedding_type = MC_POS_ROPE;
    c.activation = MC_ACT_SWIGLU;
    c.ffn_hidden_size = 48;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
    c.num_query_groups = 4;
    c.num_attention_heads = 8;
    return c;
}

static void test_names(void)
{
    struct mc_gpt_config c = gpt2();
    mc_gpt_model *m = NULL;
    CHECK(mc_gpt_model_init(&c, &m) == MC_OK);
    static const char *want[] = {
        "embedding.word_embeddings.weight", "embedding.position_embeddings.weight",
        "decoder.layers.0.input_layernorm.weight", "decoder.layers.0.input_layernorm.bias",
        "decoder.layers.0.self_attention.linear_proj.weight",
        "decoder.layers.0.self_attention.linear_proj.bias",
        "decoder.layers.0.self_attention.linear_qkv.weight",
        "decoder.layers.0.self_attention.linear_qkv.bias",
        "decoder.layers.0.pre_mlp_layernorm.weight", "decoder.layers.0.pre_mlp_layernorm.bias",
        "decoder.layers.0.mlp.linear_fc1.weight", "decoder.layers.0.mlp.linear_fc1.bias",
        "decoder.layers.0.mlp.linear_fc2.weight", "decoder.layers.0.mlp.linear_fc2.bias"};
    for (int i = 0; i < 14; i++)
        CHECK(strcmp(mc_gpt_param(m, i).name, want[i]) == 0);
    CHECK(mc_gpt_num_params(m) == 2 + 12 * 2 + 2);
    CHECK(strcmp(mc_gpt_param(m, mc_gpt_num_params(m) - 1).name,
                 "decoder.final_layernorm.bias") == 0);
    struct mc_param_view qkv = mc_gpt_param(m, 6);
    CHECK(qkv.shape[0] == 96 && qkv.shape[1] == 32 && qkv.partition_dim == 0);
    struct mc_param_view proj = mc_gpt_param(m, 4);
    CHECK(proj.shape[0] == 32 && proj.shape[1] == 32 && proj.partition_dim == 1);
    /* one 64-byte aligned block holding exactly the parameters, views packed in order */
    CHECK(((uintptr_t)mc_gpt_param(m, 0).data & 63) == 0);
    int64_t total = 0;
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        CHECK(mc_gpt_param(m, i).data == mc_gpt_param(m, 0).data + total);
        CHECK(mc_gpt_param(m, i).grad == mc_gpt_param(m, 0).grad + total);
        total += mc_gpt_param(m, i).numel;
    }
    CHECK(total == mc_gpt_num_elements(m));
    mc_gpt_model_free(m);

    c = llama();
    CHECK(mc_gpt_model_init(&c, &m) == MC_OK);
    CHECK(mc_gpt_param_index(m, "embedding.position_embeddings.weight") < 0);
    CHECK(mc_gpt_param_index(m, "decoder.layers.0.input_layernorm.bias") < 0);
    CHECK(mc_gpt_param_index(m, "decoder.layers.0.mlp.linear_fc1.bias") < 0);
    int64_t out = mc_gpt_param_index(m, "output_layer.weight");
    CHECK(out == mc_gpt_num_params(m) - 1);
    int64_t fc1 = mc_gpt_param_index(m, "decoder.layers.1.mlp.linear_fc1.weight");
    CHECK(fc1 >= 0 && mc_gpt_param(m, fc1).shape[0] == 96);
    int64_t q = mc_gpt_param_index(m, "decoder.layers.1.self_attention.linear_qkv.weight");
    CHECK(q >= 0 && mc_gpt_param(m, q).shape[0] == (8 + 2 * 4) * 4);
    mc_gpt_model_free(m);
}

static double stdev(const float *x, int64_t n)
{
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
    }
    return sqrt(s2 / (double)n - (s / (double)n) * (s / (double)n));
}

static void test_statistics(void)
{
    struct mc_gpt_config c = gpt2();
    c.num_layers = 8;
    c.hidden_size = 128;
    mc_gpt_model *m = NULL;
    CHECK(mc_gpt_model_init(&c, &m) == MC_OK);
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view v = mc_gpt_param(m, i);
        size_t len = strlen(v.name);
        if (strstr(v.name, "layernorm.weight")) {
            for (int64_t k = 0; k < v.numel; k++)
                CHECK(v.data[k] == 1.0f);
        } else if (len > 5 && strcmp(v.name + len - 5, ".bias") == 0) {
            for (int64_t k = 0; k < v.numel; k++)
                CHECK(v.data[k] == 0.0f);
        } else {
            double want = strstr(v.name, "linear_proj") || strstr(v.name, "linear_fc2")
                              ? 0.02 / sqrt(16.0) : 0.02;
            double got = stdev(v.data, v.numel);
            CHECK_CLOSE(got, want, want * 0.06);
        }
    }
    mc_gpt_model_free(m);
}

/* Logical (tp=1) element of the weight for local (r, c) of rank `rank` of `tp`. */
static float logical(const struct mc_param_view *full, const struct mc_param_view *shard,
                     int rank, int tp, bool gated, int64_t r, int64_t c)
{
    int64_t rows = shard->ndim == 1 ? shard->shape[0] : shard->shape[0];
    int64_t cols = shard->ndim == 1 ? 1 : shard->shape[1];
    int64_t fcols = full->ndim == 1 ? 1 : full->shape[1];
    if (shard->partition_dim == 0) {
        int64_t fr;
        if (gated) {
            int64_t half = rows / 2;
            fr = r < half ? rank * half + r : half * tp + rank * half + (r - half);
        } else {
            fr = rank * rows + r;
        }
        return full->data[fr * fcols + c];
    }
    if (shard->partition_dim == 1)
        return full->data[r * fcols + rank * cols + c];
    return full->data[r * fcols + c];
}

static void test_tp_invariance(const char *label, struct mc_gpt_config base)
{
    mc_gpt_model *ref = NULL;
    CHECK(mc_gpt_model_init(&base, &ref) == MC_OK);
    int tps[] = {2, 4};
    for (int ti = 0; ti < 2; ti++) {
        for (int rank = 0; rank < tps[ti]; rank++) {
            struct mc_gpt_config c = base;
            c.tensor_model_parallel_size = tps[ti];
            c.tensor_model_parallel_rank = rank;
            mc_gpt_model *m = NULL;
            if (mc_gpt_model_init(&c, &m) != MC_OK) {
                CHECK(!"init tp shard");
                fprintf(stderr, "%s\n", mc_last_error());
                continue;
            }
            CHECK(mc_gpt_num_params(m) == mc_gpt_num_params(ref));
            int64_t bad = 0;
            for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
                struct mc_param_view s = mc_gpt_param(m, i), f = mc_gpt_param(ref, i);
                CHECK(strcmp(s.name, f.name) == 0);
                bool gated = strstr(s.name, "linear_fc1") && base.activation == MC_ACT_SWIGLU;
                int64_t rows = s.shape[0], cols = s.ndim == 1 ? 1 : s.shape[1];
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t k = 0; k < cols; k++)
                        bad += s.data[r * cols + k] !=
                               logical(&f, &s, rank, tps[ti], gated, r, k);
            }
            CHECK(bad == 0);
            if (bad)
                fprintf(stderr, "%s: tp %d rank %d: %lld elements differ\n", label, tps[ti],
                        rank, (long long)bad);
            mc_gpt_model_free(m);
        }
    }
    mc_gpt_model_free(ref);
    printf("%s: tp=2,4 shards equal the tp=1 weights\n", label);
}

int main(void)
{
    test_names();
    test_statistics();
    test_tp_invariance("gpt2", gpt2());
    test_tp_invariance("llama-swiglu-gqa", llama());
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_gpt_init");
}
