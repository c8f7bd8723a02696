/* GPTModel self-checks independent of PyTorch: every parameter's gradient against a central
 * finite difference of the loss along a random direction (directional derivative), for the
 * GPT-2 and Llama families and the other variants (erf GELU, squared ReLU, interleaved and
 * partial RoPE, RoPE scaling, QK layer scaling, explicit mask, dropout); and bit-identical
 * results across reruns and thread counts. */
#include "megatron/gpt.h"
#include "test.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 88172645463325252ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

struct problem {
    int64_t b, s;
    int64_t *tokens, *labels;
    float *w;          /* per-token loss weights, the dloss */
    uint8_t *mask;     /* optional explicit [b, 1, s, s] mask */
    bool training;
};

static void problem_init(struct problem *p, const struct mc_gpt_config *c, bool with_mask,
                         bool training)
{
    p->b = c->micro_batch_size;
    p->s = c->seq_length;
    int64_t n = p->b * p->s;
    p->tokens = malloc(sizeof(int64_t) * (size_t)n);
    p->labels = malloc(sizeof(int64_t) * (size_t)n);
    p->w = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        p->tokens[i] = (int64_t)(urand() * (double)c->vocab_size);
        p->labels[i] = (int64_t)(urand() * (double)c->vocab_size);
        p->w[i] = (float)(0.5 + urand());
    }
    p->mask = NULL;
    if (with_mask) { /* causal plus a few extra masked keys, and one fully masked row (its
                        * probabilities are uniform and pass no gradient to the scores) */
        p->mask = malloc((size_t)(p->b * p->s * p->s));
        for (int64_t bi = 0; bi < p->b; bi++)
            for (int64_t i = 0; i < p->s; i++)
                for (int64_t j = 0; j < p->s; j++)
                    p->mask[(bi * p->s + i) * p->s + j] =
                        j > i || (j > 0 && j < i && urand() < 0.3) || (bi == 0 && i == 3);
    }
    p->training = training;
}

static void problem_free(struct problem *p)
{
    free(p->tokens);
    free(p->labels);
    free(p->w);
    free(p->mask);
}

/* Weighted loss sum in double; -1e30 on failure. */
static double loss_of(mc_gpt_model *m, const struct problem *p, float *loss)
{
    struct mc_gpt_batch bt = {p->b, p->s, p->tokens, p->labels, NULL, p->mask, NULL};
    mc_gpt_set_step(m, 3);
    if (mc_gpt_forward(m, &bt, p->training, loss) != MC_OK) {
        fprintf(stderr, "forward failed: %s\n", mc_last_error());
        return -1e30;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < p->b * p->s; i++)
        sum += (double)p->w[i] * loss[i];
    return sum;
}

static void check_grads(const char *label, struct mc_gpt_config cfg, bool with_mask, bool training)
{
    mc_gpt_model *m = NULL;
    mc_status st = mc_gpt_model_init(&cfg, &m);
    CHECK(st == MC_OK);
    if (st != MC_OK) {
        fprintf(stderr, "%s: init failed: %s\n", label, mc_last_error());
        return;
    }
    struct problem p;
    problem_init(&p, mc_gpt_model_config(m), with_mask, training);
    float *loss = malloc(sizeof(float) * (size_t)(p.b * p.s));
    double l0 = loss_of(m, &p, loss);
    CHECK(l0 > -1e29);
    mc_gpt_zero_grad(m);
    CHECK(mc_gpt_backward(m, p.w) == MC_OK);
    int bad = 0;
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view v = mc_gpt_param(m, i);
        float *dir = malloc(sizeof(float) * (size_t)v.numel);
        float *save = malloc(sizeof(float) * (size_t)v.numel);
        memcpy(save, v.data, sizeof(float) * (size_t)v.numel);
        double analytic = 0.0, gnorm = 0.0;
        for (int64_t k = 0; k < v.numel; k++) {
            dir[k] = (float)(urand() * 2.0 - 1.0);
            analytic += (double)dir[k] * v.grad[k];
            gnorm += (double)v.grad[k] * v.grad[k];
        }
        const double eps = 1e-2;
        for (int64_t k = 0; k < v.numel; k++)
            v.data[k] = save[k] + (float)eps * dir[k];
        double lp = loss_of(m, &p, loss);
        for (int64_t k = 0; k < v.numel; k++)
            v.data[k] = save[k] - (float)eps * dir[k];
        double lm = loss_of(m, &p, loss);
        memcpy(v.data, save, sizeof(float) * (size_t)v.numel);
        double fd = (lp - lm) / (2.0 * eps);
        double tol = 2e-2 * fabs(analytic) + 2e-3 * sqrt(gnorm * (double)v.numel) + 1e-3;
        if (!(fabs(fd - analytic) <= tol)) {
            bad++;
            fprintf(stderr, "%s: %s: finite difference %.6g vs backward %.6g (tol %.3g)\n", label,
                    v.name, fd, analytic, tol);
        }
        test_checks++;
        free(dir);
        free(save);
    }
    test_failures += bad;
    printf("%s: %lld parameter tensors checked, loss %.6f, %d mismatched\n", label,
           (long long)mc_gpt_num_params(m), l0, bad);
    free(loss);
    problem_free(&p);
    mc_gpt_model_free(m);
}

static struct mc_gpt_config gpt2_tiny(void)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 2;
    c.hidden_size = 16;
    c.num_attention_heads = 4;
    c.vocab_size = 50;
    c.make_vocab_size_divisible_by = 8;
    c.max_position_embeddings = 12;
    c.seq_length = 8;
    c.micro_batch_size = 2;
    c.hidden_dropout = 0.0f;
    c.attention_dropout = 0.0f;
    c.init_method_std = 0.3f; /* large weights so every gradient is well above fp32 noise */
    return c;
}

static struct mc_gpt_config llama_tiny(void)
{
    struct mc_gpt_config c = gpt2_tiny();
    c.normalization = MC_NORM_RMSNORM;
    c.position_embedding_type = MC_POS_ROPE;
    c.activation = MC_ACT_SWIGLU;
    c.ffn_hidden_size = 24;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
    c.num_query_groups = 2;
    c.max_position_embeddings = 0;
    return c;
}

/* Bit-identical reruns and thread counts (1 vs 2) for one config. */
static void check_determinism(const char *label, struct mc_gpt_config cfg)
{
    float *g[3] = {0}, *l[3] = {0};
    int64_t n = 0, nl = 0;
    int threads[3] = {2, 2, 1};
    for (int run = 0; run < 3; run++) {
        omp_set_num_threads(threads[run]);
        mc_gpt_model *m = NULL;
        if (mc_gpt_model_init(&cfg, &m) != MC_OK) {
            CHECK(!"init");
            return;
        }
        struct problem p;
        rng_state = 12345;
        problem_init(&p, mc_gpt_model_config(m), false, true);
        nl = p.b * p.s;
        l[run] = malloc(sizeof(float) * (size_t)nl);
        CHECK(loss_of(m, &p, l[run]) > -1e29);
        mc_gpt_zero_grad(m);
        CHECK(mc_gpt_backward(m, p.w) == MC_OK);
        n = mc_gpt_num_elements(m);
        g[run] = malloc(sizeof(float) * (size_t)n);
        memcpy(g[run], mc_gpt_param(m, 0).grad, sizeof(float) * (size_t)n);
        problem_free(&p);
        mc_gpt_model_free(m);
    }
    omp_set_num_threads(2);
    CHECK(memcmp(l[0], l[1], sizeof(float) * (size_t)nl) == 0);
    CHECK(memcmp(g[0], g[1], sizeof(float) * (size_t)n) == 0);
    CHECK(memcmp(l[0], l[2], sizeof(float) * (size_t)nl) == 0);
    CHECK(memcmp(g[0], g[2], sizeof(float) * (size_t)n) == 0);
    printf("%s: determinism (rerun, 1 vs 2 threads) checked\n", label);
    for (int i = 0; i < 3; i++) {
        free(g[i]);
        free(l[i]);
    }
}

int main(void)
{
    struct mc_gpt_config c = gpt2_tiny();
    check_grads("gpt2", c, false, false);
    c.activation = MC_ACT_GELU_ERF;
    check_grads("gpt2-erf-gelu", c, false, false);
    c.activation = MC_ACT_SQUARED_RELU;
    c.apply_query_key_layer_scaling = true;
    check_grads("squared-relu+qk-layer-scaling", c, true, false);

    c = gpt2_tiny();
    c.hidden_dropout = 0.2f;
    c.attention_dropout = 0.25f;
    check_grads("gpt2-dropout", c, false, true);

    c = llama_tiny();
    check_grads("llama", c, false, false);
    c.rotary_interleaved = true;
    c.rotary_percent = 0.5f;
    c.num_query_groups = 1;
    check_grads("llama-mqa-interleaved-partial-rope", c, false, false);
    c = llama_tiny();
    c.use_rope_scaling = true;
    c.rotary_base = 500000.0f;
    c.normalization = MC_NORM_LAYERNORM;
    c.add_qkv_bias = true;
    check_grads("llama-rope-scaling-layernorm-qkv-bias", c, true, false);

    c = gpt2_tiny();
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    check_determinism("gpt2-dropout", c);
    c = llama_tiny();
    check_determinism("llama", c);
    return test_summary("test_gpt_grad");
}
