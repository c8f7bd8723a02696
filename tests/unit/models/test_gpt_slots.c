/* Activation slots (mc_gpt_set_activation_slots / mc_gpt_use_slot): a model that runs the
 * forwards of 3 micro-batches into 3 slots and then their backwards (in a different order)
 * must give bit-identical losses, stage outputs, input grads and accumulated parameter grads
 * to a one-slot model running forward + backward of each micro-batch in turn (the path checked
 * against PyTorch elsewhere), with dropout on (each slot keeps its own dropout stream) and
 * per-micro-batch attention masks written into ONE caller buffer (each slot copies its mask).
 * Checked on a whole model (loss backward) and on the first stage of pp=2 (output grad
 * backward), for GPT-2 and Llama-style configs. Also: memory accounting and misuse errors. */
#include "megatron/gpt.h"
#include "test.h"

#include <stdbool.h>

#include <stdlib.h>
#include <string.h>

enum { B = 2, S = 8, N = B * S, K = 3, H = 32 };

static struct mc_gpt_config config(bool llama, int pp, int rank)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 2;
    c.hidden_size = H;
    c.num_attention_heads = 4;
    c.vocab_size = 90;
    c.make_vocab_size_divisible_by = 16;
    c.max_position_embeddings = S;
    c.seq_length = S;
    c.micro_batch_size = B;
    c.init_method_std = 0.1f;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    c.pipeline_model_parallel_size = pp;
    c.pipeline_model_parallel_rank = rank;
    if (llama) {
        c.normalization = MC_NORM_RMSNORM;
        c.position_embedding_type = MC_POS_ROPE;
        c.activation = MC_ACT_SWIGLU;
        c.ffn_hidden_size = 48;
        c.add_bias_linear = false;
        c.untie_embeddings_and_output_weights = true;
        c.num_query_groups = 2;
    }
    return c;
}

/* Micro-batch k: tokens, labels and a block-causal mask (a reset at position 2 + k). */
static void make_batch(int k, int64_t *tok, int64_t *lab, uint8_t *mask)
{
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 37 + 5 + 13 * k) % 90;
        lab[i] = (i * 11 + 2 + 7 * k) % 90;
    }
    int reset = 2 + k;
    for (int b = 0; b < B; b++)
        for (int q = 0; q < S; q++)
            for (int j = 0; j < S; j++) {
                bool same_doc = (q < reset) == (j < reset);
                mask[(b * S + q) * S + j] = !(j <= q && same_doc);
            }
}

struct result {
    float loss[K][N];
    float out[K][N * H];   /* stage output (first stage of pp=2) */
    float *grads;          /* the whole grad block after all backwards */
};

static void grads_of(const mc_gpt_model *m, struct result *r)
{
    int64_t n = mc_gpt_num_elements(m), off = 0;
    r->grads = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view v = mc_gpt_param(m, i);
        memcpy(r->grads + off, v.grad, sizeof(float) * (size_t)v.numel);
        off += v.numel;
    }
}

/* Grad of stage output k (deterministic, different per micro-batch). */
static void out_grad(int k, float *g)
{
    for (int i = 0; i < N * H; i++)
        g[i] = (float)((i * 7 + k * 3) % 11) * 0.01f - 0.05f;
}

static int forward(mc_gpt_model *m, int k, bool last, struct result *r, uint8_t *mask)
{
    int64_t tok[N], lab[N];
    make_batch(k, tok, lab, mask);
    struct mc_gpt_batch bt = {B, S, tok, last ? lab : NULL, NULL, mask, NULL};
    mc_gpt_set_step(m, 10 + k); /* the pipeline's step per micro-batch */
    int st = mc_gpt_forward(m, &bt, true, last ? r->loss[k] : NULL);
    if (!st && !last)
        memcpy(r->out[k], mc_gpt_stage_output(m).data, sizeof(r->out[k]));
    return st;
}

static int backward(mc_gpt_model *m, int k, bool last)
{
    float dl[N], g[N * H];
    for (int i = 0; i < N; i++)
        dl[i] = (float)(i % 5 + 1) / (float)N;
    if (last)
        return mc_gpt_backward(m, dl);
    out_grad(k, g);
    struct mc_tensor gt = mc_gpt_stage_tensor(m, B, S);
    gt.data = g;
    return mc_gpt_backward_stage(m, &gt);
}

static void run(const char *label, bool llama, int pp)
{
    bool last = pp == 1;
    struct mc_gpt_config c = config(llama, pp, 0);
    mc_gpt_model *one = NULL, *many = NULL;
    CHECK(mc_gpt_model_init(&c, &one) == MC_OK);
    CHECK(mc_gpt_model_init(&c, &many) == MC_OK);
    if (!one || !many)
        return;
    size_t shared = mc_gpt_activation_bytes(many) - mc_gpt_slot_activation_bytes(many);
    CHECK(mc_gpt_activation_slots(many) == 1);
    CHECK(mc_gpt_set_activation_slots(many, K) == MC_OK);
    CHECK(mc_gpt_activation_slots(many) == K);
    /* shared scratch + K slots, each now with room for its mask copy */
    CHECK(mc_gpt_activation_bytes(many) == shared + K * mc_gpt_slot_activation_bytes(many));
    uint8_t mask[B * S * S];

    static struct result r1, rk;
    mc_gpt_zero_grad(one);
    for (int k = 0; k < K; k++) {
        CHECK(forward(one, k, last, &r1, mask) == MC_OK);
        CHECK(backward(one, k, last) == MC_OK);
    }
    grads_of(one, &r1);

    /* FIFO as 1F1B runs them: bit-identical; another order: the grads sum in another order */
    static const int orders[2][K] = {{0, 1, 2}, {1, 0, 2}};
    for (int o = 0; o < 2; o++) {
        mc_gpt_zero_grad(many);
        for (int k = 0; k < K; k++) {
            CHECK(mc_gpt_use_slot(many, k) == MC_OK);
            CHECK(forward(many, k, last, &rk, mask) == MC_OK); /* one mask buffer for all */
        }
        for (int i = 0; i < K; i++) {
            CHECK(mc_gpt_use_slot(many, orders[o][i]) == MC_OK);
            CHECK(backward(many, orders[o][i], last) == MC_OK);
        }
        grads_of(many, &rk);
        if (last)
            CHECK(memcmp(r1.loss, rk.loss, sizeof(r1.loss)) == 0);
        else
            CHECK(memcmp(r1.out, rk.out, sizeof(r1.out)) == 0);
        char msg[128];
        snprintf(msg, sizeof msg, "%s pp=%d: grads of %d slots vs one, order %d", label, pp, K, o);
        double tol = o == 0 ? 0.0 : 1e-5;
        CHECK(check_tensor_close(msg, rk.grads, r1.grads, mc_gpt_num_elements(one), tol, tol * 1e-2));
        free(rk.grads);
    }

    /* misuse: a slot out of range, a second backward of a slot, a bad count */
    CHECK(mc_gpt_use_slot(many, K) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "activation slot 3") != NULL);
    CHECK(mc_gpt_use_slot(many, 0) == MC_OK);
    CHECK(backward(many, 0, last) == MC_ERR_SHAPE);
    CHECK(mc_gpt_set_activation_slots(many, 0) == MC_ERR_CONFIG);
    CHECK(mc_gpt_activation_slots(many) == K);
    /* back to one slot: the old memory */
    CHECK(mc_gpt_set_activation_slots(many, 1) == MC_OK);
    CHECK(mc_gpt_activation_bytes(many) == mc_gpt_activation_bytes(one));
    free(r1.grads);
    mc_gpt_model_free(one);
    mc_gpt_model_free(many);
    printf("%s pp=%d: %d slots reproduce one-at-a-time\n", label, pp, K);
}

/* A middle stage: the input grad after each backward equals the one-slot model's. */
static void run_middle(void)
{
    struct mc_gpt_config c = config(false, 3, 1);
    c.num_layers = 3;
    mc_gpt_model *one = NULL, *many = NULL;
    CHECK(mc_gpt_model_init(&c, &one) == MC_OK && mc_gpt_model_init(&c, &many) == MC_OK);
    if (!one || !many)
        return;
    CHECK(mc_gpt_set_activation_slots(many, K) == MC_OK);
    static float in[K][N * H], dx1[K][N * H], dxk[K][N * H];
    uint8_t mask[B * S * S];
    int64_t tok[N], lab[N];
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N * H; i++)
            in[k][i] = (float)((i * 13 + k * 5) % 17) * 0.1f - 0.8f;
    for (int k = 0; k < K; k++) {
        make_batch(k, tok, lab, mask);
        struct mc_tensor x = mc_gpt_stage_tensor(one, B, S);
        x.data = in[k];
        struct mc_gpt_batch bt = {B, S, NULL, NULL, NULL, mask, &x};
        mc_gpt_set_step(one, k);
        CHECK(mc_gpt_forward(one, &bt, true, NULL) == MC_OK);
        CHECK(backward(one, k, false) == MC_OK);
        memcpy(dx1[k], mc_gpt_stage_input_grad(one).data, sizeof(dx1[k]));
    }
    for (int k = 0; k < K; k++) {
        make_batch(k, tok, lab, mask);
        struct mc_tensor x = mc_gpt_stage_tensor(many, B, S);
        x.data = in[k];
        struct mc_gpt_batch bt = {B, S, NULL, NULL, NULL, mask, &x};
        mc_gpt_set_step(many, k);
        CHECK(mc_gpt_use_slot(many, k) == MC_OK);
        CHECK(mc_gpt_forward(many, &bt, true, NULL) == MC_OK);
    }
    for (int k = K - 1; k >= 0; k--) {
        CHECK(mc_gpt_use_slot(many, k) == MC_OK);
        CHECK(backward(many, k, false) == MC_OK);
        memcpy(dxk[k], mc_gpt_stage_input_grad(many).data, sizeof(dxk[k]));
    }
    CHECK(check_tensor_close("middle stage input grads", dxk[0], dx1[0], K * N * H, 0.0, 0.0));
    mc_gpt_model_free(one);
    mc_gpt_model_free(many);
    printf("middle stage: input grads of %d slots reproduce one-at-a-time\n", K);
}

int main(void)
{
    run("gpt2", false, 1);
    run("llama", true, 1);
    run("gpt2", false, 2);
    run("llama", true, 2);
    run_middle();
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_gpt_slots");
}
