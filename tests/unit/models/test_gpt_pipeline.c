/* Pipeline stages in one process: the stages of a pp=2 and pp=4 split, and the model chunks of
 * interleaved pp=2 x vp=2 (virtual stage v * pp + r = chunk v of stage r: layer names from 0,
 * values of global layer (v pp + r) L/(pp vp) + l) (layers, embeddings on
 * the first stage, final norm / output layer / loss on the last, tied embeddings as a shared
 * copy on the last stage) chained through mc_gpt_stage_output / batch.hidden_in and
 * mc_gpt_backward_stage / mc_gpt_stage_input_grad must reproduce the pp=1 model: the same
 * initial weights, bit-identical losses and grads (with dropout on), and the tied embedding
 * grad as the sum of the two copies. The same in bf16 and fp16 (params_dtype): the split does
 * not change the order of any reduction, so losses and grads stay bit-identical, but for the
 * tied embedding, whose two dt grads one stage sums in dt (autograd) and two stages in fp32
 * (the embedding group's all-reduce of the main grads, as Megatron). */
#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static struct mc_gpt_config config(bool llama, enum mc_dtype dt)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.params_dtype = dt;
    c.num_layers = 4;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.vocab_size = 90;
    c.make_vocab_size_divisible_by = 16;
    c.max_position_embeddings = 12;
    c.seq_length = 12;
    c.micro_batch_size = 2;
    c.init_method_std = 0.1f;
    c.hidden_dropout = 0.1f;
    c.attention_dropout = 0.1f;
    c.apply_query_key_layer_scaling = true; /* uses the global layer number */
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

/* The pp=1 name of a stage's parameter (layer indices are stage-local in Megatron). */
static void global_name(char *out, size_t n, const char *name, int64_t offset)
{
    long long l;
    int pos = 0;
    if (sscanf(name, "decoder.layers.%lld.%n", &l, &pos) == 1 && pos > 0)
        snprintf(out, n, "decoder.layers.%lld.%s", l + offset, name + pos);
    else
        snprintf(out, n, "%s", name);
}

/* pp stages of vp chunks each (vp = 1: no interleaving); below, `pp` counts virtual stages */
static void run(const char *label, bool llama, int ranks, int vp, enum mc_dtype dt)
{
    struct mc_gpt_config c1 = config(llama, dt);
    mc_gpt_model *ref = NULL, *st[4] = {0};
    int pp = ranks * vp;
    CHECK(mc_gpt_model_init(&c1, &ref) == MC_OK);
    for (int r = 0; r < pp; r++) {
        struct mc_gpt_config c = c1;
        c.pipeline_model_parallel_size = ranks;
        c.pipeline_model_parallel_rank = r % ranks;
        c.virtual_pipeline_model_parallel_size = vp > 1 ? vp : 0;
        c.virtual_pipeline_model_parallel_rank = r / ranks;
        CHECK(mc_gpt_model_init(&c, &st[r]) == MC_OK);
        if (!st[r]) {
            fprintf(stderr, "%s: %s\n", label, mc_last_error());
            return;
        }
    }
    int64_t per = c1.num_layers / pp, B = 2, S = 12, n = B * S, h = c1.hidden_size;
    int64_t tok[24], lab[24];
    float l1[24], lp[24], dl[24];
    for (int64_t i = 0; i < n; i++) {
        tok[i] = (i * 37 + 5) % 90;
        lab[i] = (i * 11 + 2) % 90;
        dl[i] = 1.0f / (float)n;
    }
    /* same initial weights, by Megatron name */
    int64_t total = 0;
    for (int r = 0; r < pp; r++)
        for (int64_t i = 0; i < mc_gpt_num_params(st[r]); i++) {
            struct mc_param_view v = mc_gpt_param(st[r], i);
            char gname[128];
            global_name(gname, sizeof gname, v.name, r * per);
            if (v.shared) /* the last stage's tied copy equals the word embeddings */
                snprintf(gname, sizeof gname, "embedding.word_embeddings.weight");
            else
                total += v.numel;
            int64_t j = mc_gpt_param_index(ref, gname);
            CHECK(j >= 0);
            if (j >= 0)
                CHECK(memcmp(v.data, mc_gpt_param(ref, j).data, sizeof(float) * (size_t)v.numel) == 0);
        }
    CHECK(total == mc_gpt_num_elements(ref));

    /* forward through the chain */
    struct mc_gpt_batch bt = {B, S, tok, lab, NULL, NULL, NULL};
    mc_gpt_set_step(ref, 2);
    CHECK(mc_gpt_forward(ref, &bt, true, l1) == MC_OK);
    struct mc_tensor hid = {0};
    for (int r = 0; r < pp; r++) {
        mc_gpt_set_step(st[r], 2);
        struct mc_gpt_batch sb = {B, S, r == 0 ? tok : NULL, r == pp - 1 ? lab : NULL, NULL, NULL,
                                  r == 0 ? NULL : &hid};
        CHECK(mc_gpt_forward(st[r], &sb, true, r == pp - 1 ? lp : NULL) == MC_OK);
        hid = mc_gpt_stage_output(st[r]);
        CHECK((hid.data == NULL) == (r == pp - 1));
        /* the boundary tensor says what it is: [s, b, h] of params_dtype in the stage's memory */
        CHECK(hid.dtype == c1.params_dtype && hid.ndim == 3 && hid.shape[0] == S &&
              hid.shape[1] == B && hid.shape[2] == h && hid.backend != NULL);
    }
    CHECK(memcmp(l1, lp, sizeof l1) == 0);

    /* backward through the chain */
    mc_gpt_zero_grad(ref);
    CHECK(mc_gpt_backward(ref, dl) == MC_OK);
    for (int r = pp - 1; r >= 0; r--) {
        mc_gpt_zero_grad(st[r]);
        if (r == pp - 1)
            CHECK(mc_gpt_backward(st[r], dl) == MC_OK);
        else {
            struct mc_tensor g = mc_gpt_stage_input_grad(st[r + 1]);
            CHECK(mc_gpt_backward_stage(st[r], &g) == MC_OK);
        }
    }
    CHECK(mc_gpt_stage_input_grad(st[0]).data == NULL);
    int64_t wi = mc_gpt_param_index(st[0], "embedding.word_embeddings.weight");
    int64_t oi = mc_gpt_param_index(st[pp - 1], "output_layer.weight");
    for (int r = 0; r < pp; r++)
        for (int64_t i = 0; i < mc_gpt_num_params(st[r]); i++) {
            struct mc_param_view v = mc_gpt_param(st[r], i);
            char gname[128];
            global_name(gname, sizeof gname, v.name, r * per);
            if (v.shared)
                continue;
            struct mc_param_view g = mc_gpt_param(ref, mc_gpt_param_index(ref, gname));
            if (!llama && r == 0 && i == wi) { /* tied: first-stage grad + last-stage copy's grad */
                struct mc_param_view o = mc_gpt_param(st[pp - 1], oi);
                float *sum = malloc(sizeof(float) * (size_t)v.numel);
                for (int64_t k = 0; k < v.numel; k++)
                    sum[k] = v.grad[k] + o.grad[k];
                /* 16-bit: one stage rounds the sum of the two dt grads to dt */
                double rtol = dt == MC_DTYPE_BF16 ? 8e-3 : dt == MC_DTYPE_F16 ? 1e-3 : 1e-5;
                check_tensor_close("tied embedding grad", sum, g.grad, v.numel, rtol, 1e-7);
                free(sum);
            } else {
                char msg[200];
                snprintf(msg, sizeof msg, "%s %s pp=%d stage %d %s", label, mc_dtype_name(dt), pp,
                         r, v.name);
                CHECK(check_tensor_close(msg, v.grad, g.grad, v.numel, 0.0, 0.0));
            }
        }
    (void)h;

    /* the grad norm needs the model-parallel group with pp > 1 */
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    mc_optimizer *o = NULL;
    const struct mc_param_set *sets[4];
    for (int c = 0; c < vp; c++)
        sets[c] = mc_gpt_param_set(st[c]);
    CHECK(mc_opt_init_chunks(&oc, sets, vp, &o) == MC_OK);
    CHECK(mc_opt_step(o, 1e-3f, 0.0f, NULL) == MC_ERR_UNSUPPORTED);
    CHECK(strstr(mc_last_error(), "mc_gpt_set_mp_comm") != NULL);
    mc_opt_free(o);

    /* wrong calls for a stage are refused */
    if (pp > 1) {
        CHECK(mc_gpt_backward(st[0], dl) == MC_ERR_SHAPE);
        struct mc_tensor g = mc_gpt_stage_tensor(st[pp - 1], B, S);
        g.data = dl;
        CHECK(mc_gpt_backward_stage(st[pp - 1], &g) == MC_ERR_SHAPE);
        struct mc_gpt_batch nb = {B, S, tok, NULL, NULL, NULL, NULL};
        CHECK(mc_gpt_forward(st[1], &nb, false, NULL) == MC_ERR_SHAPE); /* no hidden_in */
        /* a hidden_in of another dtype or shape is refused, naming what was expected */
        float *x = calloc((size_t)(n * h), sizeof(float));
        struct mc_tensor wrong = mc_gpt_stage_tensor(st[1], B, S);
        enum mc_dtype other = c1.params_dtype == MC_DTYPE_F32 ? MC_DTYPE_F16 : MC_DTYPE_F32;
        char got[64], want[64];
        snprintf(got, sizeof got, "is %s [12, 2, 32]", mc_dtype_name(other));
        snprintf(want, sizeof want, "expected %s [12, 2, 32]", mc_dtype_name(c1.params_dtype));
        wrong.data = x;
        wrong.dtype = other;
        nb.tokens = NULL;
        nb.hidden_in = &wrong;
        CHECK(mc_gpt_forward(st[1], &nb, false, NULL) == MC_ERR_SHAPE);
        CHECK(strstr(mc_last_error(), got) && strstr(mc_last_error(), want));
        wrong = mc_gpt_stage_tensor(st[1], B, S - 1);
        wrong.data = x;
        CHECK(mc_gpt_forward(st[1], &nb, false, NULL) == MC_ERR_SHAPE);
        wrong = mc_gpt_stage_tensor(st[1], B, S);
        wrong.data = x;
        CHECK(mc_gpt_forward(st[1], &nb, false, NULL) == MC_OK);
        free(x);
        CHECK(mc_gpt_forward(st[0], &bt, false, lp) == MC_ERR_SHAPE);   /* loss on stage 0 */
    }
    for (int r = 0; r < pp; r++)
        mc_gpt_model_free(st[r]);
    mc_gpt_model_free(ref);
    printf("%s %s: pp=%d vp=%d stages reproduce pp=1\n", label, mc_dtype_name(dt), ranks, vp);
}

int main(void)
{
    const enum mc_dtype F = MC_DTYPE_F32, BF = MC_DTYPE_BF16, H = MC_DTYPE_F16;
    run("gpt2-tied", false, 2, 1, F);
    run("gpt2-tied", false, 4, 1, F);
    run("llama", true, 2, 1, F);
    run("gpt2-tied", false, 2, 2, F);
    run("llama", true, 2, 2, F);
    run("gpt2-tied", false, 2, 1, BF);
    run("llama", true, 2, 1, BF);
    run("gpt2-tied", false, 2, 2, BF);
    run("llama", true, 2, 2, BF);
    run("gpt2-tied", false, 2, 1, H);
    /* chunks must share a stage's layers evenly */
    struct mc_gpt_config c = config(false, F);
    mc_gpt_model *m = NULL;
    c.pipeline_model_parallel_size = 2;
    c.virtual_pipeline_model_parallel_size = 3;
    CHECK(mc_gpt_model_init(&c, &m) == MC_ERR_CONFIG && m == NULL);
    CHECK(strstr(mc_last_error(), "x 3 virtual stages") != NULL);
    c.virtual_pipeline_model_parallel_size = 2;
    c.virtual_pipeline_model_parallel_rank = 2;
    CHECK(mc_gpt_model_init(&c, &m) == MC_ERR_CONFIG && m == NULL);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_gpt_pipeline");
}
