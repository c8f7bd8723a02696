/* mc_gpt_config_validate: Megatron's derived values (kv channels, query groups, ffn size with
 * and without SwiGLU, padded vocab per tp) and a table of refused configurations, each of which
 * must return MC_ERR_CONFIG (or MC_ERR_UNSUPPORTED) with a message naming the option. */
#include "megatron/gpt.h"
#include "test.h"

#include <string.h>

static struct mc_gpt_config base(void)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 12;
    c.hidden_size = 768;
    c.num_attention_heads = 12;
    c.vocab_size = 50257;
    c.max_position_embeddings = 1024;
    c.seq_length = 1024;
    c.micro_batch_size = 4;
    return c;
}

static void test_derived(void)
{
    struct mc_gpt_config c = base();
    CHECK(mc_gpt_config_validate(&c) == MC_OK);
    CHECK(c.kv_channels == 64 && c.num_query_groups == 12 && c.ffn_hidden_size == 3072);
    CHECK(c.padded_vocab_size == 50304);
    CHECK(c.add_qkv_bias); /* validate_args: linear bias => qkv bias */
    CHECK(c.activation == MC_ACT_GELU_TANH);
    CHECK(c.hidden_dropout == 0.1f && c.attention_dropout == 0.1f && c.init_method_std == 0.02f);
    static const int64_t tp_pad[][2] = {{1, 50304}, {2, 50432}, {4, 50688}}; /* spec §2.4 */
    for (int i = 0; i < 3; i++) {
        c = base();
        c.tensor_model_parallel_size = (int)tp_pad[i][0];
        CHECK(mc_gpt_config_validate(&c) == MC_OK);
        CHECK(c.padded_vocab_size == tp_pad[i][1]);
    }
    c = base();
    c.activation = MC_ACT_SWIGLU;
    CHECK(mc_gpt_config_validate(&c) == MC_OK);
    CHECK(c.ffn_hidden_size == 2048); /* int((4*768*2/3)/64)*64 */
    c = base();
    c.hidden_size = 4096;
    c.num_attention_heads = 32;
    c.activation = MC_ACT_SWIGLU;
    CHECK(mc_gpt_config_validate(&c) == MC_OK);
    CHECK(c.ffn_hidden_size == 10880);
    c = base();
    c.add_bias_linear = false;
    c.activation = MC_ACT_GELU_ERF; /* what validate_args makes of --disable-bias-linear */
    CHECK(mc_gpt_config_validate(&c) == MC_OK);
    CHECK(c.activation == MC_ACT_GELU_ERF);
    CHECK(!c.add_qkv_bias);
    c = base();
    c.apply_query_key_layer_scaling = true;
    CHECK(mc_gpt_config_validate(&c) == MC_OK);
    CHECK(c.attention_softmax_in_fp32);
    c = base();
    c.position_embedding_type = MC_POS_ROPE;
    c.max_position_embeddings = 0;
    CHECK(mc_gpt_config_validate(&c) == MC_OK);
    CHECK(c.max_position_embeddings == 1024);
    c = base();
    c.hidden_size = 770;
    c.kv_channels = 64; /* explicit kv channels lift the divisibility rule */
    CHECK(mc_gpt_config_validate(&c) == MC_OK);
}

struct bad {
    const char *what;
    void (*edit)(struct mc_gpt_config *);
    const char *option; /* must appear in the message */
    mc_status status;
};

#define EDIT(name, body) static void name(struct mc_gpt_config *c) { body; }
EDIT(e_layers0, c->num_layers = 0)
EDIT(e_layers_neg, c->num_layers = -3)
EDIT(e_hidden0, c->hidden_size = 0)
EDIT(e_heads0, c->num_attention_heads = 0)
EDIT(e_vocab0, c->vocab_size = 0)
EDIT(e_seq0, c->seq_length = 0)
EDIT(e_mbs0, c->micro_batch_size = 0)
EDIT(e_div0, c->make_vocab_size_divisible_by = 0)
EDIT(e_hidden_heads, c->hidden_size = 770)
EDIT(e_heads_tp, c->num_attention_heads = 12; c->tensor_model_parallel_size = 8)
EDIT(e_groups_div, c->num_query_groups = 5)
EDIT(e_groups_tp, c->num_query_groups = 2; c->tensor_model_parallel_size = 4)
EDIT(e_ffn_tp, c->ffn_hidden_size = 3000; c->tensor_model_parallel_size = 16;
     c->num_attention_heads = 16; c->hidden_size = 1024)
EDIT(e_tp0, c->tensor_model_parallel_size = 0)
EDIT(e_rank, c->tensor_model_parallel_size = 2; c->tensor_model_parallel_rank = 2)
EDIT(e_rank_neg, c->tensor_model_parallel_rank = -1)
EDIT(e_padded_small, c->padded_vocab_size = 50000)
EDIT(e_padded_tp, c->padded_vocab_size = 50305; c->tensor_model_parallel_size = 2)
EDIT(e_maxpos_seq, c->max_position_embeddings = 512)
EDIT(e_maxpos_missing, c->max_position_embeddings = 0)
EDIT(e_rope_odd, c->position_embedding_type = MC_POS_ROPE; c->kv_channels = 63;
     c->rotary_percent = 1.0f)
EDIT(e_rope_pct_odd, c->position_embedding_type = MC_POS_ROPE; c->rotary_percent = 0.3f)
EDIT(e_rope_pct0, c->position_embedding_type = MC_POS_ROPE; c->rotary_percent = 0.0f)
EDIT(e_rope_pct2, c->position_embedding_type = MC_POS_ROPE; c->rotary_percent = 2.0f)
EDIT(e_rope_base, c->position_embedding_type = MC_POS_ROPE; c->rotary_base = 0.0f)
EDIT(e_rope_scale, c->position_embedding_type = MC_POS_ROPE; c->use_rope_scaling = true;
     c->rope_scaling_factor = -1.0f)
EDIT(e_hdrop, c->hidden_dropout = 1.0f)
EDIT(e_hdrop_neg, c->hidden_dropout = -0.1f)
EDIT(e_adrop, c->attention_dropout = 1.5f)
EDIT(e_adrop_nan, c->attention_dropout = NAN)
EDIT(e_std, c->init_method_std = -0.02f)
EDIT(e_eps, c->norm_epsilon = 0.0f)
EDIT(e_fp32res, c->fp32_residual_connection = true)
EDIT(e_int_params, c->params_dtype = MC_DTYPE_I32)
EDIT(e_bf16_fp32res, c->params_dtype = MC_DTYPE_BF16; c->fp32_residual_connection = true;
     c->sequence_parallel = true; c->tensor_model_parallel_size = 2)
EDIT(e_norm, c->normalization = (enum mc_normalization)9)
EDIT(e_pos, c->position_embedding_type = (enum mc_position_embedding)9)
EDIT(e_act, c->activation = (enum mc_activation)9)
EDIT(e_kv_neg, c->kv_channels = -1)
EDIT(e_ffn_neg, c->ffn_hidden_size = -1)
EDIT(e_groups_neg, c->num_query_groups = -2)
EDIT(e_tanh_no_bias, c->add_bias_linear = false; c->activation = MC_ACT_GELU_TANH)
EDIT(e_huge_seq, c->seq_length = (int64_t)1 << 40; c->max_position_embeddings = (int64_t)1 << 40)
EDIT(e_huge_hidden, c->hidden_size = (int64_t)1 << 45; c->num_attention_heads = 1;
     c->kv_channels = 1)
EDIT(e_pp_layers, c->pipeline_model_parallel_size = 5)
EDIT(e_pp_rank, c->pipeline_model_parallel_size = 2; c->pipeline_model_parallel_rank = 2)
EDIT(e_pp_neg, c->pipeline_model_parallel_size = -1)
EDIT(e_swiglu_tiny, c->activation = MC_ACT_SWIGLU; c->hidden_size = 12; c->num_attention_heads = 12)

static const struct bad bads[] = {
    {"zero layers", e_layers0, "--num-layers", MC_ERR_CONFIG},
    {"negative layers", e_layers_neg, "--num-layers", MC_ERR_CONFIG},
    {"zero hidden", e_hidden0, "--hidden-size", MC_ERR_CONFIG},
    {"zero heads", e_heads0, "--num-attention-heads", MC_ERR_CONFIG},
    {"zero vocab", e_vocab0, "vocab", MC_ERR_CONFIG},
    {"zero seq", e_seq0, "--seq-length", MC_ERR_CONFIG},
    {"zero micro batch", e_mbs0, "--micro-batch-size", MC_ERR_CONFIG},
    {"zero vocab divisor", e_div0, "--make-vocab-size-divisible-by", MC_ERR_CONFIG},
    {"hidden % heads", e_hidden_heads, "--num-attention-heads (12) must divide --hidden-size (770)", MC_ERR_CONFIG},
    {"heads % tp", e_heads_tp, "--tensor-model-parallel-size", MC_ERR_CONFIG},
    {"heads % groups", e_groups_div, "--num-query-groups (5)", MC_ERR_CONFIG},
    {"groups % tp", e_groups_tp, "--num-query-groups (2) must be a multiple", MC_ERR_CONFIG},
    {"ffn % tp", e_ffn_tp, "--ffn-hidden-size (3000)", MC_ERR_CONFIG},
    {"tp 0", e_tp0, "--tensor-model-parallel-size", MC_ERR_CONFIG},
    {"tp rank too big", e_rank, "rank 2", MC_ERR_CONFIG},
    {"tp rank negative", e_rank_neg, "rank -1", MC_ERR_CONFIG},
    {"padded vocab too small", e_padded_small, "padded vocab size (50000)", MC_ERR_CONFIG},
    {"padded vocab % tp", e_padded_tp, "padded vocab size (50305)", MC_ERR_CONFIG},
    {"max positions < seq", e_maxpos_seq, "--max-position-embeddings (512)", MC_ERR_CONFIG},
    {"max positions missing", e_maxpos_missing, "--max-position-embeddings", MC_ERR_CONFIG},
    {"odd rotary dim", e_rope_odd, "rotary dimension 63", MC_ERR_CONFIG},
    {"odd partial rotary dim", e_rope_pct_odd, "--rotary-percent", MC_ERR_CONFIG},
    {"rotary percent 0", e_rope_pct0, "--rotary-percent", MC_ERR_CONFIG},
    {"rotary percent 2", e_rope_pct2, "--rotary-percent", MC_ERR_CONFIG},
    {"rotary base 0", e_rope_base, "--rotary-base", MC_ERR_CONFIG},
    {"rope scaling factor", e_rope_scale, "--rope-scaling-factor", MC_ERR_CONFIG},
    {"hidden dropout 1", e_hdrop, "--hidden-dropout", MC_ERR_CONFIG},
    {"hidden dropout < 0", e_hdrop_neg, "--hidden-dropout", MC_ERR_CONFIG},
    {"attention dropout 1.5", e_adrop, "--attention-dropout", MC_ERR_CONFIG},
    {"attention dropout NaN", e_adrop_nan, "--attention-dropout", MC_ERR_CONFIG},
    {"init std < 0", e_std, "--init-method-std", MC_ERR_CONFIG},
    {"norm eps 0", e_eps, "--norm-epsilon", MC_ERR_CONFIG},
    {"fp32 residual in fp32", e_fp32res, "--fp32-residual-connection", MC_ERR_CONFIG},
    {"integer params", e_int_params, "params dtype int32", MC_ERR_CONFIG},
    {"bf16 with fp32 residual and sp", e_bf16_fp32res,
     "--fp32-residual-connection with bfloat16 params and --sequence-parallel", MC_ERR_UNSUPPORTED},
    {"bad normalization", e_norm, "--normalization", MC_ERR_CONFIG},
    {"bad position type", e_pos, "--position-embedding-type", MC_ERR_CONFIG},
    {"bad activation", e_act, "activation", MC_ERR_CONFIG},
    {"negative kv channels", e_kv_neg, "--kv-channels", MC_ERR_CONFIG},
    {"negative ffn", e_ffn_neg, "--ffn-hidden-size", MC_ERR_CONFIG},
    {"negative groups", e_groups_neg, "--num-query-groups", MC_ERR_CONFIG},
    {"fused tanh GELU without bias", e_tanh_no_bias, "--disable-bias-linear", MC_ERR_CONFIG},
    {"huge sequence", e_huge_seq, "--seq-length", MC_ERR_CONFIG},
    {"huge hidden", e_huge_hidden, "too large", MC_ERR_CONFIG},
    {"layers % pp", e_pp_layers, "divisible by the pipeline-model-parallel size", MC_ERR_CONFIG},
    {"pp rank too big", e_pp_rank, "pipeline-model-parallel rank 2", MC_ERR_CONFIG},
    {"negative pp", e_pp_neg, "--pipeline-model-parallel-size", MC_ERR_CONFIG},
    {"swiglu ffn rounds to 0", e_swiglu_tiny, "--ffn-hidden-size", MC_ERR_CONFIG},
};

static void test_refused(void)
{
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        struct mc_gpt_config c = base();
        bads[i].edit(&c);
        mc_clear_error();
        mc_status s = mc_gpt_config_validate(&c);
        CHECK(s == bads[i].status);
        CHECK(strstr(mc_last_error(), bads[i].option) != NULL);
        if (s != bads[i].status || !strstr(mc_last_error(), bads[i].option))
            fprintf(stderr, "  case '%s': status %s, message '%s'\n", bads[i].what,
                    mc_status_str(s), mc_last_error());
        /* the model refuses the same config without allocating anything */
        c = base();
        bads[i].edit(&c);
        mc_gpt_model *m = (mc_gpt_model *)&c; /* must be reset to NULL */
        CHECK(mc_gpt_model_init(&c, &m) == bads[i].status && m == NULL);
    }
    CHECK(mc_gpt_config_validate(NULL) == MC_ERR_CONFIG);
    CHECK(mc_alloc_live_bytes() == 0);
    printf("%zu refused configurations checked\n", sizeof(bads) / sizeof(bads[0]));
}

int main(void)
{
    test_derived();
    test_refused();
    return test_summary("test_config");
}
