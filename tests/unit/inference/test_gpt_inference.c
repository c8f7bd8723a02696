/* src/inference/gpt_inference_model.c and text_generation.c on random in-memory models (a
 * GPT-2-style one: LayerNorm, learned positions, tanh-GELU, biases, tied; a Llama-style one:
 * RMSNorm, RoPE, SwiGLU, GQA, no biases, untied): the logits of a sequence fed token by token
 * through the KV cache equal those of one forward over the whole sequence, a ragged batch of two
 * rows equals each row alone, greedy generation with and without the cache gives the same
 * tokens, and bad token ids / a full cache are refused. Run under ASan by `make asan`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "inference/inference.h"
#include "test.h"
#include "tools/checkpoint/convert.h"

enum { H = 16, NP = 4, V = 50, L = 2, S = 12 };

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f);
}

static void add(struct mc_cv_model *m, unsigned *seed, int ndim, int64_t d0, int64_t d1,
                const char *name, float base)
{
    struct mc_cv_tensor *t;
    MC_ASSERT(mc_cv_add(m, &t, MC_DTYPE_F32, ndim, d0, d1, "%s", name) == MC_OK);
    float *x = (float *)t->data;
    for (int64_t i = 0; i < d0 * (ndim > 1 ? d1 : 1); i++)
        x[i] = base + 0.5f * frand(seed);
}

static void build(struct mc_cv_model *m, bool llama)
{
    mc_cv_model_init(m);
    struct mc_cv_meta *md = &m->md;
    int64_t ng = llama ? 2 : NP, hn = H / NP, ffn = 24;
    md->num_layers = L, md->hidden_size = H, md->num_attention_heads = NP;
    md->num_query_groups = ng, md->kv_channels = hn, md->ffn_hidden_size = ffn;
    md->seq_length = S, md->max_position_embeddings = S;
    strcpy(md->position_embedding_type, llama ? "rope" : "learned_absolute");
    strcpy(md->normalization, llama ? "RMSNorm" : "LayerNorm");
    md->norm_epsilon = 1e-5, md->swiglu = llama, md->linear_bias = !llama, md->untied = llama;
    md->gelu_tanh = !llama, md->rotary_base = 10000, md->rotary_percent = 1.0;
    md->true_vocab_size = V;
    unsigned seed = llama ? 7u : 3u;
    char n[64];
    add(m, &seed, 2, V, H, "word embeddings", 0.0f);
    if (!llama)
        add(m, &seed, 2, S, H, "position embeddings", 0.0f);
    for (int l = 0; l < L; l++) {
#define NAME(what) (snprintf(n, sizeof(n), "layer %d %s", l, what), n)
        add(m, &seed, 1, H, 1, NAME("input norm weight"), 1.0f);
        if (!llama)
            add(m, &seed, 1, H, 1, NAME("input norm bias"), 0.0f);
        add(m, &seed, 2, (NP + 2 * ng) * hn, H, NAME("qkv weight"), 0.0f);
        if (!llama)
            add(m, &seed, 1, (NP + 2 * ng) * hn, 1, NAME("qkv bias"), 0.0f);
        add(m, &seed, 2, H, NP * hn, NAME("dense weight"), 0.0f);
        if (!llama)
            add(m, &seed, 1, H, 1, NAME("dense bias"), 0.0f);
        add(m, &seed, 1, H, 1, NAME("post norm weight"), 1.0f);
        if (!llama)
            add(m, &seed, 1, H, 1, NAME("post norm bias"), 0.0f);
        add(m, &seed, 2, (llama ? 2 : 1) * ffn, H, NAME("mlp l0 weight"), 0.0f);
        if (!llama)
            add(m, &seed, 1, ffn, 1, NAME("mlp l0 bias"), 0.0f);
        add(m, &seed, 2, H, ffn, NAME("mlp l1 weight"), 0.0f);
        if (!llama)
            add(m, &seed, 1, H, 1, NAME("mlp l1 bias"), 0.0f);
#undef NAME
    }
    add(m, &seed, 1, H, 1, "final norm weight", 1.0f);
    if (!llama)
        add(m, &seed, 1, H, 1, "final norm bias", 0.0f);
    if (llama)
        add(m, &seed, 2, V, H, "output layer weight", 0.0f);
    MC_ASSERT(mc_cv_check(m, "test model") == MC_OK);
}

static void run(bool llama, struct mc_backend *be)
{
    struct mc_cv_model cv;
    build(&cv, llama);
    mc_inf_model *m;
    CHECK(mc_inf_model_init(&cv, be, S, &m) == MC_OK);
    const int64_t toks[2][S] = {{3, 17, 8, 42, 0, 5, 9, 33, 21, 2}, {11, 4, 49, 7, 30, 1}};
    const int64_t len[2] = {10, 6};
    float full[2][S * V], step[S * V], ragged[(10 + 6) * V];
    mc_inf_cache *c;
    int64_t rows[S + S] = {0};
    for (int r = 0; r < 2; r++) { /* one forward over the whole row */
        CHECK(mc_inf_cache_init(m, 1, S, &c) == MC_OK);
        CHECK(mc_inf_forward(m, c, len[r], toks[r], rows, NULL, full[r]) == MC_OK);
        mc_inf_cache_free(c);
    }
    CHECK(mc_inf_cache_init(m, 1, S, &c) == MC_OK); /* token by token through the cache */
    for (int64_t i = 0; i < len[0]; i++)
        CHECK(mc_inf_forward(m, c, 1, &toks[0][i], rows, NULL, step + i * V) == MC_OK);
    check_tensor_close(llama ? "llama: cached vs full" : "gpt2: cached vs full", step, full[0],
                       len[0] * V, 1e-5f, 1e-5f);
    int64_t bad = V + 3; /* a token outside the vocabulary; then a full cache */
    CHECK(mc_inf_forward(m, c, 1, &bad, rows, NULL, step) == MC_ERR_SHAPE);
    CHECK(mc_inf_forward(m, c, 1, toks[0], rows, NULL, step) == MC_OK);
    CHECK(mc_inf_forward(m, c, 1, toks[0], rows, NULL, step) == MC_OK);
    CHECK(mc_inf_forward(m, c, 1, toks[0], rows, NULL, step) == MC_ERR_SHAPE);
    CHECK(mc_inf_cache_len(c, 0) == S); /* the refused steps changed nothing */
    mc_inf_cache_free(c);
    /* both rows packed in one forward, interleaved */
    int64_t packed[16], prow[16], k = 0;
    for (int64_t i = 0; i < 10; i++)
        for (int r = 0; r < 2; r++)
            if (i < len[r])
                packed[k] = toks[r][i], prow[k++] = r;
    CHECK(mc_inf_cache_init(m, 2, S, &c) == MC_OK);
    CHECK(mc_inf_forward(m, c, k, packed, prow, NULL, ragged) == MC_OK);
    mc_inf_cache_free(c);
    float want[16 * V];
    int64_t idx[2] = {0, 0};
    for (int64_t t = 0; t < k; t++)
        memcpy(want + t * V, full[prow[t]] + idx[prow[t]]++ * V, sizeof(float) * V);
    check_tensor_close(llama ? "llama: ragged vs alone" : "gpt2: ragged vs alone", ragged, want,
                       k * V, 1e-5f, 1e-5f);
    /* greedy generation, cache on and off */
    int64_t gen[2][8];
    for (int nc = 0; nc < 2; nc++) {
        struct mc_inf_request rq[2] = {{.prompt = toks[0], .n_prompt = 4},
                                       {.prompt = toks[1], .n_prompt = 2}};
        struct mc_inf_generate_options o = {.sampling = {.greedy = true}, .tokens_to_generate = 6,
                                            .eod = -1, .vocab_size = V, .logprobs = true,
                                            .no_kv_cache = nc};
        CHECK(mc_inf_generate(m, &o, rq, 2) == MC_OK);
        CHECK(rq[0].n_generated == 6 && rq[1].n_generated == 6);
        for (int i = 0; i < 6; i++) {
            if (nc)
                CHECK(rq[0].generated[i] == gen[0][i] && rq[1].generated[i] == gen[1][i]);
            gen[0][i] = rq[0].generated[i], gen[1][i] = rq[1].generated[i];
            CHECK(rq[0].generated_logprobs[i] <= 0.0f);
        }
        mc_inf_requests_free(rq, 2);
    }
    mc_inf_model_free(m);
    mc_cv_model_free(&cv);
}

int main(void)
{
    struct mc_backend *be;
    MC_ASSERT(mc_backend_create("cpu-ref", &be) == MC_OK);
    run(false, be);
    run(true, be);
    mc_backend_free(be);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_gpt_inference");
}
