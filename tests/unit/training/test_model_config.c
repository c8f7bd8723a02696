/* Model/optimizer configs from the command line (src/training/model_config.c): a Llama-style
 * command line and a GPT-2 one, field by field. */
#include <string.h>

#include "test.h"
#include "training/model_config.h"
#include "training/validate.h"

static struct mc_args *config(int n, const char **argv)
{
    struct mc_args *a;
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    MC_ASSERT(mc_args_init(&a) == MC_OK);
    MC_ASSERT(mc_args_parse(a, n, (char **)argv) == MC_OK);
    MC_ASSERT(mc_args_validate(a, defaults, NULL, NULL) == MC_OK);
    return a;
}
#define CONFIG(...) config((int)(sizeof((const char *[]){"p", __VA_ARGS__}) / sizeof(char *)), \
                           (const char *[]){"p", __VA_ARGS__})

int main(void)
{
    struct mc_gpt_config g;
    struct mc_args *a = CONFIG("--num-layers", "2", "--hidden-size", "256", "--num-attention-heads",
                               "8", "--group-query-attention", "--num-query-groups", "2", "--swiglu",
                               "--normalization", "RMSNorm", "--norm-epsilon", "1e-6",
                               "--position-embedding-type", "rope", "--rotary-base", "500000",
                               "--disable-bias-linear", "--untie-embeddings-and-output-weights",
                               "--seq-length", "64", "--max-position-embeddings", "64",
                               "--micro-batch-size", "3", "--train-iters", "1", "--bf16",
                               "--attention-dropout", "0", "--hidden-dropout", "0", "--seed", "7",
                               "--optimizer", "sgd", "--sgd-momentum", "0.8", "--clip-grad", "0");
    CHECK(mc_gpt_config_from_args(a, 1000, 1024, 0, &g) == MC_OK);
    CHECK(g.num_layers == 2 && g.hidden_size == 256 && g.num_attention_heads == 8);
    CHECK(g.num_query_groups == 2 && g.kv_channels == 32);
    CHECK(g.ffn_hidden_size == 640); /* int((4*256*2/3)/64)*64 */
    CHECK(g.activation == MC_ACT_SWIGLU && g.normalization == MC_NORM_RMSNORM);
    CHECK(g.norm_epsilon == 1e-6f && g.rotary_base == 500000.0f);
    CHECK(g.position_embedding_type == MC_POS_ROPE);
    CHECK(!g.add_bias_linear && !g.add_qkv_bias && g.untie_embeddings_and_output_weights);
    CHECK(g.params_dtype == MC_DTYPE_BF16 && g.seed == 7 && g.micro_batch_size == 3);
    CHECK(g.vocab_size == 1000 && g.padded_vocab_size == 1024 && g.seq_length == 64);
    struct mc_optimizer_config o;
    mc_opt_config_from_args(a, &o);
    CHECK(o.optimizer == MC_OPT_SGD && o.sgd_momentum == 0.8f && o.clip_grad == 0.0f);
    mc_args_free(a);

    a = CONFIG("--num-layers", "12", "--hidden-size", "768", "--num-attention-heads", "12",
               "--seq-length", "1024", "--max-position-embeddings", "1024", "--micro-batch-size",
               "1", "--train-iters", "1");
    CHECK(mc_gpt_config_from_args(a, 50257, 50304, 0, &g) == MC_OK);
    CHECK(g.num_query_groups == 0 && g.ffn_hidden_size == 3072);
    CHECK(g.activation == MC_ACT_GELU_TANH); /* Megatron's fused bias-GELU */
    CHECK(g.add_bias_linear && g.add_qkv_bias && !g.untie_embeddings_and_output_weights);
    CHECK(g.position_embedding_type == MC_POS_LEARNED_ABSOLUTE && g.params_dtype == MC_DTYPE_F32);
    CHECK(g.hidden_dropout == 0.1f && g.init_method_std == 0.02f);
    mc_opt_config_from_args(a, &o);
    CHECK(o.optimizer == MC_OPT_ADAM && o.adam_beta2 == 0.999f && o.adam_eps == 1e-8f);
    mc_args_free(a);

    a = CONFIG("--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
               "--seq-length", "64", "--max-position-embeddings", "64", "--micro-batch-size", "1",
               "--train-iters", "1", "--no-bias-gelu-fusion", "--openai-gelu");
    CHECK(mc_gpt_config_from_args(a, 100, 128, 0, &g) == MC_ERR_UNSUPPORTED);
    mc_args_free(a);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_model_config");
}
