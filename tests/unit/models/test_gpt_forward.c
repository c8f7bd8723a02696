/* GPTModel forward against a naive double-precision re-implementation written here from the
 * Megatron formulas (spec §3): embeddings, pre-norm layers (LayerNorm/RMSNorm, per-group QKV,
 * RoPE rotate-half or interleaved, causal softmax with -10000 fill, GELU tanh/erf, SwiGLU,
 * squared ReLU), final norm, tied/untied output, cross-entropy over the padded vocab. Plus
 * API behaviour: logits-only forward, explicit masks, smaller batches, eval vs training
 * dropout, bad input refused with MC_ERR_SHAPE, tp > 1 refused without communication. */
#include "megatron/dump.h"
#include "megatron/gpt.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const float *P(const mc_gpt_model *m, const char *name)
{
    int64_t i = mc_gpt_param_index(m, name);
    return i < 0 ? NULL : mc_gpt_param(m, i).data;
}

static const float *LP(const mc_gpt_model *m, int64_t l, const char *suffix)
{
    char nm[160];
    snprintf(nm, sizeof(nm), "decoder.layers.%lld.%s", (long long)l, suffix);
    return P(m, nm);
}

/* y[n] = norm(x[n]) over h */
static void ref_norm(double *y, const double *x, const float *w, const float *b, int64_t h,
                     bool layernorm, double eps)
{
    double mu = 0, v = 0;
    if (layernorm) {
        for (int64_t j = 0; j < h; j++)
            mu += x[j];
        mu /= (double)h;
    }
    for (int64_t j = 0; j < h; j++)
        v += (x[j] - mu) * (x[j] - mu);
    double r = 1.0 / sqrt(v / (double)h + eps);
    for (int64_t j = 0; j < h; j++)
        y[j] = (x[j] - mu) * r * w[j] + (b ? b[j] : 0.0);
}

/* y[out] = W[out, in] x + b */
static void ref_linear(double *y, const double *x, const float *W, const float *b, int64_t out,
                       int64_t in)
{
    for (int64_t o = 0; o < out; o++) {
        double acc = b ? b[o] : 0.0;
        for (int64_t i = 0; i < in; i++)
            acc += (double)W[o * in + i] * x[i];
        y[o] = acc;
    }
}

static double ref_act(const struct mc_gpt_config *c, double x)
{
    switch (c->activation) {
    case MC_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(0.79788456 * x * (1.0 + 0.044715 * x * x)));
    case MC_ACT_GELU_ERF: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case MC_ACT_SQUARED_RELU: return x > 0 ? x * x : 0.0;
    default: return x / (1.0 + exp(-x)); /* silu, the gate of SwiGLU */
    }
}

static void ref_rope(double *t, int64_t pos, const struct mc_gpt_config *c, int64_t hn)
{
    int64_t dim = c->rotary_percent < 1.0f ? (int64_t)(hn * (double)c->rotary_percent) : hn;
    double tmp[256];
    for (int64_t i = 0; i < dim; i++)
        tmp[i] = t[i];
    for (int64_t i = 0; i < dim / 2; i++) {
        double inv = 1.0 / pow(c->rotary_base, 2.0 * (double)i / (double)dim);
        if (c->use_rope_scaling) { /* Llama 3: factor, low 1, high 4, original context 8192 */
            double wl = 2.0 * M_PI / inv, fac = c->rope_scaling_factor;
            if (wl > 8192.0)
                inv /= fac;
            else if (wl >= 8192.0 / 4.0) {
                double sm = (8192.0 / wl - 1.0) / 3.0;
                inv = (1.0 - sm) * inv / fac + sm * inv;
            }
        }
        double f = (double)pos * inv;
        double cs = cos(f), sn = sin(f);
        int64_t a = c->rotary_interleaved ? 2 * i : i;
        int64_t b = c->rotary_interleaved ? 2 * i + 1 : i + dim / 2;
        t[a] = tmp[a] * cs - tmp[b] * sn;
        t[b] = tmp[b] * cs + tmp[a] * sn;
    }
}

/* Per-token losses [b, s] of the model on tokens/labels (dropout off). */
static void ref_forward(const mc_gpt_model *m, const int64_t *tok, const int64_t *lab, int64_t B,
                        int64_t S, double *loss)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(m);
    int64_t h = c->hidden_size, np = c->num_attention_heads, ng = c->num_query_groups;
    int64_t hn = c->kv_channels, ffn = c->ffn_hidden_size, V = c->padded_vocab_size;
    int64_t per = np / ng, L = c->num_layers, qkvn = (np + 2 * ng) * hn;
    bool ln = c->normalization == MC_NORM_LAYERNORM, gated = c->activation == MC_ACT_SWIGLU;
    double eps = c->norm_epsilon;
    double *x = calloc((size_t)(S * h), sizeof(double)), *y = calloc((size_t)(S * h), sizeof(double));
    double *qkv = calloc((size_t)(S * qkvn), sizeof(double));
    double *ctx = calloc((size_t)(S * np * hn), sizeof(double));
    double *u = calloc((size_t)(2 * ffn), sizeof(double)), *g = calloc((size_t)ffn, sizeof(double));
    double *tmp = calloc((size_t)(h > V ? h : V), sizeof(double)), *sc = calloc((size_t)S, sizeof(double));
    for (int64_t bi = 0; bi < B; bi++) {
        const float *we = P(m, "embedding.word_embeddings.weight");
        const float *pe = P(m, "embedding.position_embeddings.weight");
        for (int64_t t = 0; t < S; t++)
            for (int64_t j = 0; j < h; j++)
                x[t * h + j] = we[tok[bi * S + t] * h + j] + (pe ? pe[t * h + j] : 0.0);
        for (int64_t l = 0; l < L; l++) {
            for (int64_t t = 0; t < S; t++) {
                ref_norm(y + t * h, x + t * h, LP(m, l, "input_layernorm.weight"),
                         LP(m, l, "input_layernorm.bias"), h, ln, eps);
                ref_linear(qkv + t * qkvn, y + t * h, LP(m, l, "self_attention.linear_qkv.weight"),
                           LP(m, l, "self_attention.linear_qkv.bias"), qkvn, h);
                if (c->position_embedding_type == MC_POS_ROPE)
                    for (int64_t k = 0; k < ng * (per + 2); k++)
                        if (k % (per + 2) != per + 1) /* not a value head */
                            ref_rope(qkv + t * qkvn + k * hn, t, c, hn);
            }
            for (int64_t hd = 0; hd < np; hd++) {
                int64_t grp = hd / per, qoff = grp * (per + 2) * hn + (hd % per) * hn;
                int64_t koff = grp * (per + 2) * hn + per * hn, voff = koff + hn;
                for (int64_t i = 0; i < S; i++) {
                    double mx = -1e300, sum = 0;
                    for (int64_t j = 0; j < S; j++) {
                        double d = 0;
                        for (int64_t k = 0; k < hn; k++)
                            d += qkv[i * qkvn + qoff + k] * qkv[j * qkvn + koff + k];
                        sc[j] = j > i ? -10000.0 : d / sqrt((double)hn);
                        mx = sc[j] > mx ? sc[j] : mx;
                    }
                    for (int64_t j = 0; j < S; j++)
                        sum += (sc[j] = exp(sc[j] - mx));
                    for (int64_t k = 0; k < hn; k++) {
                        double acc = 0;
                        for (int64_t j = 0; j < S; j++)
                            acc += sc[j] / sum * qkv[j * qkvn + voff + k];
                        ctx[i * np * hn + hd * hn + k] = acc;
                    }
                }
            }
            for (int64_t t = 0; t < S; t++) {
                ref_linear(tmp, ctx + t * np * hn, LP(m, l, "self_attention.linear_proj.weight"),
                           LP(m, l, "self_attention.linear_proj.bias"), h, np * hn);
                for (int64_t j = 0; j < h; j++)
                    x[t * h + j] += tmp[j];
                ref_norm(y + t * h, x + t * h, LP(m, l, "pre_mlp_layernorm.weight"),
                         LP(m, l, "pre_mlp_layernorm.bias"), h, ln, eps);
                ref_linear(u, y + t * h, LP(m, l, "mlp.linear_fc1.weight"),
                           LP(m, l, "mlp.linear_fc1.bias"), gated ? 2 * ffn : ffn, h);
                for (int64_t k = 0; k < ffn; k++)
                    g[k] = gated ? ref_act(c, u[k]) * u[ffn + k] : ref_act(c, u[k]);
                ref_linear(tmp, g, LP(m, l, "mlp.linear_fc2.weight"), LP(m, l, "mlp.linear_fc2.bias"),
                           h, ffn);
                for (int64_t j = 0; j < h; j++)
                    x[t * h + j] += tmp[j];
            }
        }
        const float *wo = P(m, "output_layer.weight");
        for (int64_t t = 0; t < S; t++) {
            ref_norm(y + t * h, x + t * h, P(m, "decoder.final_layernorm.weight"),
                     P(m, "decoder.final_layernorm.bias"), h, ln, eps);
            ref_linear(tmp, y + t * h, wo ? wo : we, NULL, V, h);
            double mx = -1e300, sum = 0;
            for (int64_t v = 0; v < V; v++)
                mx = tmp[v] > mx ? tmp[v] : mx;
            for (int64_t v = 0; v < V; v++)
                sum += exp(tmp[v] - mx);
            loss[bi * S + t] = log(sum) + mx - tmp[lab[bi * S + t]];
        }
    }
    free(x); free(y); free(qkv); free(ctx); free(u); free(g); free(tmp); free(sc);
}

static struct mc_gpt_config gpt2(void)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 2;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.vocab_size = 70;
    c.make_vocab_size_divisible_by = 16;
    c.max_position_embeddings = 16;
    c.seq_length = 12;
    c.micro_batch_size = 3;
    c.init_method_std = 0.1f;
    return c;
}

static struct mc_gpt_config llama(void)
{
    struct mc_gpt_config c = gpt2();
    c.normalization = MC_NORM_RMSNORM;
    c.position_embedding_type = MC_POS_ROPE;
    c.activation = MC_ACT_SWIGLU;
    c.ffn_hidden_size = 40;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
    c.num_attention_heads = 8;
    c.num_query_groups = 2;
    c.max_position_embeddings = 0;
    return c;
}

static void fill_batch(int64_t *tok, int64_t *lab, int64_t n, int64_t vocab, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int64_t)((seed >> 33) % (uint64_t)vocab);
        lab[i] = (int64_t)((seed >> 13) % (uint64_t)vocab);
    }
}

static void check_against_reference(const char *label, struct mc_gpt_config c)
{
    mc_gpt_model *m = NULL;
    CHECK(mc_gpt_model_init(&c, &m) == MC_OK);
    if (!m) {
        fprintf(stderr, "%s: %s\n", label, mc_last_error());
        return;
    }
    int64_t B = c.micro_batch_size, S = c.seq_length, n = B * S;
    int64_t tok[64], lab[64];
    fill_batch(tok, lab, n, c.vocab_size, 99);
    float loss[64];
    double want[64];
    struct mc_gpt_batch bt = {B, S, tok, lab, NULL, NULL, NULL};
    CHECK(mc_gpt_forward(m, &bt, false, loss) == MC_OK);
    ref_forward(m, tok, lab, B, S, want);
    float wf[64];
    for (int64_t i = 0; i < n; i++)
        wf[i] = (float)want[i];
    CHECK(check_tensor_close(label, loss, wf, n, 1e-5, 1e-5));
    printf("%s: loss[0] %.6f (reference %.6f)\n", label, loss[0], want[0]);
    mc_gpt_model_free(m);
}

static void test_api(void)
{
    struct mc_gpt_config c = gpt2();
    c.hidden_dropout = 0.3f;
    c.attention_dropout = 0.3f;
    mc_gpt_model *m = NULL, *m0 = NULL;
    CHECK(mc_gpt_model_init(&c, &m) == MC_OK);
    struct mc_gpt_config c0 = gpt2();
    c0.hidden_dropout = c0.attention_dropout = 0.0f;
    CHECK(mc_gpt_model_init(&c0, &m0) == MC_OK);
    int64_t B = c.micro_batch_size, S = c.seq_length, n = B * S, V = 80;
    int64_t tok[64], lab[64];
    fill_batch(tok, lab, n, c.vocab_size, 5);
    float l1[64], l2[64], l3[64], l4[64];
    struct mc_gpt_batch bt = {B, S, tok, lab, NULL, NULL, NULL};

    /* eval forward ignores dropout: same as the dropout-free model with the same seed */
    CHECK(mc_gpt_forward(m, &bt, false, l1) == MC_OK);
    CHECK(mc_gpt_forward(m0, &bt, false, l2) == MC_OK);
    CHECK(memcmp(l1, l2, sizeof(float) * (size_t)n) == 0);

    /* logits-only forward; the loss is log-softmax of those logits over the padded vocab */
    struct mc_gpt_batch bl = {B, S, tok, NULL, NULL, NULL, NULL};
    CHECK(mc_gpt_forward(m0, &bl, false, NULL) == MC_OK);
    struct mc_tensor lt = mc_gpt_logits(m0);
    CHECK(lt.dtype == MC_DTYPE_F32 && lt.ndim == 3 && lt.shape[0] == S && lt.shape[1] == B &&
          lt.shape[2] == V && lt.backend != NULL);
    const float *lg = lt.data;
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t si = 0; si < S; si++) {
            const float *row = lg + (si * B + bi) * V;
            double mx = -1e30, sum = 0;
            for (int64_t v = 0; v < V; v++)
                mx = row[v] > mx ? row[v] : mx;
            for (int64_t v = 0; v < V; v++)
                sum += exp(row[v] - mx);
            CHECK_CLOSE(l2[bi * S + si], log(sum) + mx - row[lab[bi * S + si]], 1e-5);
        }
    CHECK(mc_gpt_backward(m0, l2) == MC_ERR_SHAPE); /* no labels in the last forward */

    /* an explicit causal mask gives the same result as the implicit one */
    uint8_t *mask = malloc((size_t)(B * S * S));
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < S; j++)
                mask[(bi * S + i) * S + j] = j > i;
    struct mc_gpt_batch bm = {B, S, tok, lab, NULL, mask, NULL};
    CHECK(mc_gpt_forward(m0, &bm, false, l3) == MC_OK);
    CHECK(memcmp(l3, l2, sizeof(float) * (size_t)n) == 0);
    free(mask);

    /* a smaller batch gives the same per-sequence losses */
    struct mc_gpt_batch b1 = {1, S - 2, tok + S, lab + S, NULL, NULL, NULL};
    CHECK(mc_gpt_forward(m0, &b1, false, l4) == MC_OK);
    CHECK(check_tensor_close("smaller batch", l4, l2 + S, S - 2, 1e-5, 1e-6));

    /* training dropout: deterministic per step, fresh per micro-batch and per step */
    mc_gpt_set_step(m, 1);
    CHECK(mc_gpt_forward(m, &bt, true, l1) == MC_OK);
    CHECK(mc_gpt_forward(m, &bt, true, l2) == MC_OK); /* second micro-batch of the step */
    mc_gpt_set_step(m, 1);
    CHECK(mc_gpt_forward(m, &bt, true, l3) == MC_OK);
    mc_gpt_set_step(m, 2);
    CHECK(mc_gpt_forward(m, &bt, true, l4) == MC_OK);
    CHECK(memcmp(l1, l3, sizeof(float) * (size_t)n) == 0);
    CHECK(memcmp(l1, l2, sizeof(float) * (size_t)n) != 0);
    CHECK(memcmp(l1, l4, sizeof(float) * (size_t)n) != 0);
    CHECK(mc_gpt_backward(m, l1) == MC_OK);
    CHECK(mc_gpt_backward(m, l1) == MC_ERR_SHAPE); /* one backward per forward */
    /* micro-batch 256 of a step does not repeat micro-batch 0's masks */
    mc_gpt_set_step(m, 1);
    for (int i = 0; i <= 256; i++)
        CHECK(mc_gpt_forward(m, &bt, true, l4) == MC_OK);
    CHECK(memcmp(l1, l4, sizeof(float) * (size_t)n) != 0);

    /* bad input is refused, never a crash */
    int64_t badtok[64];
    memcpy(badtok, tok, sizeof(badtok));
    badtok[7] = V;
    struct mc_gpt_batch bb = {B, S, badtok, lab, NULL, NULL, NULL};
    CHECK(mc_gpt_forward(m, &bb, false, l1) == MC_ERR_SHAPE);
    CHECK(strstr(mc_last_error(), "tokens[7]") != NULL);
    badtok[7] = -1;
    CHECK(mc_gpt_forward(m, &bb, false, l1) == MC_ERR_SHAPE);
    struct mc_gpt_batch big = {B + 1, S, tok, lab, NULL, NULL, NULL};
    CHECK(mc_gpt_forward(m, &big, false, l1) == MC_ERR_SHAPE);
    struct mc_gpt_batch lng = {1, S + 1, tok, lab, NULL, NULL, NULL};
    CHECK(mc_gpt_forward(m, &lng, false, l1) == MC_ERR_SHAPE);
    int64_t badpos[64] = {0};
    badpos[3] = 16;
    struct mc_gpt_batch bp = {B, S, tok, lab, badpos, NULL, NULL};
    CHECK(mc_gpt_forward(m, &bp, false, l1) == MC_ERR_SHAPE);
    CHECK(mc_gpt_forward(m, NULL, false, l1) == MC_ERR_SHAPE);
    CHECK(mc_gpt_forward(m, &bl, false, l1) == MC_ERR_SHAPE); /* loss without labels */
    mc_gpt_model_free(m);
    mc_gpt_model_free(m0);

    /* tp > 1 builds (weights are sliced) but forward needs communication: refused */
    c = gpt2();
    c.tensor_model_parallel_size = 2;
    c.tensor_model_parallel_rank = 1;
    CHECK(mc_gpt_model_init(&c, &m) == MC_OK);
    CHECK(mc_gpt_forward(m, &bt, false, l1) == MC_ERR_UNSUPPORTED);
    CHECK(strstr(mc_last_error(), "--tensor-model-parallel-size 2") != NULL);
    mc_gpt_model_free(m);
}

/* The debug hook points of include/megatron/dump.h: names, shapes, and the logits tensor. */
static void test_hooks(void)
{
    struct mc_gpt_config c = gpt2();
    mc_gpt_model *m = NULL;
    CHECK(mc_gpt_model_init(&c, &m) == MC_OK);
    int64_t B = 2, S = 5, tok[10], lab[10];
    fill_batch(tok, lab, B * S, c.vocab_size, 3);
    char path[] = "/tmp/mc_test_hooks_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(mc_dump_hooks_enable(path) == MC_OK);
    struct mc_gpt_batch bt = {B, S, tok, lab, NULL, NULL, NULL};
    float loss[10];
    CHECK(mc_gpt_forward(m, &bt, false, loss) == MC_OK);
    CHECK(mc_dump_hooks_flush() == MC_OK);
    mc_dump_hooks_disable();
    mc_dump *d = NULL;
    CHECK(mc_dump_read(path, &d) == MC_OK);
    if (d) {
        static const char *names[] = {"embedding.output", "decoder.layers.0.output",
                                      "decoder.layers.1.output", "decoder.final_layernorm.output",
                                      "output_layer.output"};
        CHECK(mc_dump_count(d) == 5);
        for (int i = 0; i < 5; i++) {
            const struct mc_dump_tensor *t = mc_dump_find(d, names[i]);
            CHECK(t && t->ndim == 3 && t->shape[0] == S && t->shape[1] == B);
        }
        const struct mc_dump_tensor *lg = mc_dump_find(d, "output_layer.output");
        CHECK(lg && lg->shape[2] == 80 &&
              memcmp(lg->data, mc_gpt_logits(m).data, sizeof(float) * (size_t)(S * B * 80)) == 0);
        mc_dump_free(d);
    }
    remove(path);
    mc_gpt_model_free(m);
}

int main(void)
{
    test_hooks();
    check_against_reference("gpt2", gpt2());
    struct mc_gpt_config c = gpt2();
    c.activation = MC_ACT_GELU_ERF;
    c.untie_embeddings_and_output_weights = true;
    check_against_reference("gpt2-erf-untied", c);
    c = gpt2();
    c.activation = MC_ACT_SQUARED_RELU;
    c.add_bias_linear = false;
    check_against_reference("squared-relu-no-bias", c);
    check_against_reference("llama-gqa", llama());
    c = llama();
    c.rotary_interleaved = true;
    c.rotary_percent = 0.5f;
    c.num_query_groups = 8;
    check_against_reference("llama-interleaved-partial-rope", c);
    c = llama();
    c.use_rope_scaling = true;
    c.rope_scaling_factor = 8.0f;
    c.rotary_base = 500000.0f;
    c.kv_channels = 32; /* wavelengths spanning all three regimes of the scaling */
    check_against_reference("llama3-rope-scaling", c);
    test_api();
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_gpt_forward");
}
