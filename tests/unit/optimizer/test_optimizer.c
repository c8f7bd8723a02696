/* Optimizer checks against formulas evaluated independently here in double: AdamW
 * (torch.optim.AdamW: decoupled decay, bias correction), SGD with momentum and coupled decay
 * (torch.optim.SGD), Megatron's no-weight-decay group, the global grad norm, clipping by
 * clip_grad / (norm + 1e-6) and the zero count. */
#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static uint64_t st = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (double)(st >> 11) * 0x1p-53;
}

static mc_gpt_model *tiny_model(void)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 1;
    c.hidden_size = 8;
    c.num_attention_heads = 2;
    c.vocab_size = 10;
    c.make_vocab_size_divisible_by = 4;
    c.max_position_embeddings = 4;
    c.seq_length = 4;
    c.micro_batch_size = 1;
    mc_gpt_model *m = NULL;
    if (mc_gpt_model_init(&c, &m) != MC_OK)
        fprintf(stderr, "init: %s\n", mc_last_error());
    return m;
}

/* Random grads (with some exact zeros); returns copies of params and grads. */
static void fill_grads(mc_gpt_model *m, double scale, float **p0, float **g0)
{
    int64_t n = mc_gpt_num_elements(m);
    struct mc_param_view v0 = mc_gpt_param(m, 0);
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view v = mc_gpt_param(m, i);
        for (int64_t k = 0; k < v.numel; k++)
            v.grad[k] = urand() < 0.1 ? 0.0f : (float)((urand() - 0.5) * scale);
    }
    *p0 = malloc(sizeof(float) * (size_t)n);
    *g0 = malloc(sizeof(float) * (size_t)n);
    memcpy(*p0, v0.data, sizeof(float) * (size_t)n);
    memcpy(*g0, v0.grad, sizeof(float) * (size_t)n);
}

static void test_no_decay_rule(mc_gpt_model *m)
{
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view v = mc_gpt_param(m, i);
        size_t len = strlen(v.name);
        bool bias = len > 5 && strcmp(v.name + len - 5, ".bias") == 0;
        CHECK(v.no_weight_decay == (bias || v.ndim == 1));
    }
    int64_t qkv = mc_gpt_param_index(m, "decoder.layers.0.self_attention.linear_qkv.weight");
    CHECK(qkv >= 0 && !mc_gpt_param(m, qkv).no_weight_decay);
    int64_t ln = mc_gpt_param_index(m, "decoder.final_layernorm.weight");
    CHECK(ln >= 0 && mc_gpt_param(m, ln).no_weight_decay);
}

static void test_adam(bool clip)
{
    mc_gpt_model *m = tiny_model();
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.clip_grad = clip ? 0.5f : 0.0f;
    mc_optimizer *o = NULL;
    CHECK(mc_opt_init(&oc, mc_gpt_param_set(m), &o) == MC_OK);
    int64_t n = mc_gpt_num_elements(m);
    double *mm = calloc((size_t)n, sizeof(double)), *vv = calloc((size_t)n, sizeof(double));
    double *pp = calloc((size_t)n, sizeof(double));
    const float lr = 3e-3f, wd = 0.1f;
    for (int step = 1; step <= 3; step++) {
        float *p0, *g0;
        fill_grads(m, 2.0, &p0, &g0);
        if (step == 1)
            for (int64_t k = 0; k < n; k++)
                pp[k] = p0[k];
        double sq = 0.0;
        int64_t zeros = 0;
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
            struct mc_param_view v = mc_gpt_param(m, i);
            for (int64_t k = 0; k < v.numel; k++) {
                sq += (double)v.grad[k] * v.grad[k];
                zeros += v.grad[k] == 0.0f;
            }
        }
        double norm = sqrt(sq), coeff = clip ? 0.5 / (norm + 1e-6) : 1.0;
        if (coeff > 1.0)
            coeff = 1.0;
        struct mc_opt_step_result r;
        CHECK(mc_opt_step(o, lr, wd, &r) == MC_OK);
        CHECK_CLOSE(r.grad_norm, norm, 1e-5 * norm);
        CHECK(r.num_zeros == zeros);
        float *want = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
            struct mc_param_view v = mc_gpt_param(m, i);
            int64_t off = v.data - mc_gpt_param(m, 0).data;
            double wdi = v.no_weight_decay ? 0.0 : wd;
            for (int64_t k = off; k < off + v.numel; k++) {
                double g = g0[k] * coeff;
                pp[k] *= 1.0 - lr * wdi;
                mm[k] = 0.9 * mm[k] + 0.1 * g;
                vv[k] = 0.999 * vv[k] + 0.001 * g * g;
                double mh = mm[k] / (1.0 - pow(0.9, step)), vh = vv[k] / (1.0 - pow(0.999, step));
                pp[k] -= lr * mh / (sqrt(vh) + 1e-8);
                want[k] = (float)pp[k];
            }
            char label[160];
            snprintf(label, sizeof(label), "adam%s step %d %s", clip ? "+clip" : "", step, v.name);
            check_tensor_close(label, v.data, want + off, v.numel, 1e-5, 1e-6);
            struct mc_opt_param_state s = mc_opt_param_state(o, i);
            CHECK(s.exp_avg && s.exp_avg_sq && !s.momentum_buffer);
        }
        /* clipping scaled the grads in place */
        struct mc_param_view v0 = mc_gpt_param(m, 0);
        CHECK_CLOSE(v0.grad[1], g0[1] * coeff, 1e-6);
        free(want);
        free(p0);
        free(g0);
    }
    CHECK(mc_opt_step_count(o) == 3);
    free(mm);
    free(vv);
    free(pp);
    mc_opt_free(o);
    mc_gpt_model_free(m);
}

static void test_sgd(void)
{
    mc_gpt_model *m = tiny_model();
    test_no_decay_rule(m);
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.optimizer = MC_OPT_SGD;
    oc.clip_grad = 0.0f;
    mc_optimizer *o = NULL;
    CHECK(mc_opt_init(&oc, mc_gpt_param_set(m), &o) == MC_OK);
    int64_t n = mc_gpt_num_elements(m);
    double *buf = calloc((size_t)n, sizeof(double)), *pp = calloc((size_t)n, sizeof(double));
    const float lr = 0.05f, wd = 0.01f;
    for (int step = 1; step <= 3; step++) {
        float *p0, *g0;
        fill_grads(m, 1.0, &p0, &g0);
        if (step == 1)
            for (int64_t k = 0; k < n; k++)
                pp[k] = p0[k];
        CHECK(mc_opt_step(o, lr, wd, NULL) == MC_OK);
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
            struct mc_param_view v = mc_gpt_param(m, i);
            int64_t off = v.data - mc_gpt_param(m, 0).data;
            float *want = malloc(sizeof(float) * (size_t)v.numel);
            for (int64_t k = off; k < off + v.numel; k++) {
                double d = g0[k] + (v.no_weight_decay ? 0.0 : wd) * pp[k];
                buf[k] = step == 1 ? d : 0.9 * buf[k] + d;
                pp[k] -= lr * buf[k];
                want[k - off] = (float)pp[k];
            }
            check_tensor_close("sgd", v.data, want, v.numel, 1e-5, 1e-6);
            free(want);
        }
        free(p0);
        free(g0);
    }
    free(buf);
    free(pp);
    mc_opt_free(o);
    mc_gpt_model_free(m);
}

static void test_bad_config(void)
{
    mc_gpt_model *m = tiny_model();
    struct mc_optimizer_config oc;
    mc_optimizer *o = NULL;
    mc_opt_config_default(&oc);
    oc.adam_beta2 = 1.5f;
    CHECK(mc_opt_init(&oc, mc_gpt_param_set(m), &o) == MC_ERR_CONFIG && o == NULL);
    CHECK(strstr(mc_last_error(), "--adam-beta2") != NULL);
    mc_opt_config_default(&oc);
    oc.clip_grad = -1.0f;
    CHECK(mc_opt_init(&oc, mc_gpt_param_set(m), &o) == MC_ERR_CONFIG);
    mc_opt_config_default(&oc);
    oc.optimizer = (enum mc_optimizer_type)7;
    CHECK(mc_opt_init(&oc, mc_gpt_param_set(m), &o) == MC_ERR_CONFIG);
    mc_gpt_model_free(m);
}

int main(void)
{
    test_adam(false);
    test_adam(true);
    test_sgd();
    test_bad_config();
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_optimizer");
}
