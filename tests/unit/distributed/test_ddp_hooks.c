/* The engine's data-parallel hooks (src/models/gpt/gpt_hooks.c), which --overlap-grad-reduce
 * and --overlap-param-gather rest on. For a GPT-2-style (tied) and a Llama-style (untied)
 * model, whole and as pp=2 stages: (1) grad-ready: at every call the grads of the params it
 * declares final already equal their values after the whole backward (bit for bit), the
 * declared range only grows (one call for the head, one per layer, one for the embeddings)
 * and ends at param 0; (2) param-use: with every param not yet announced poisoned to NaN and
 * restored only when a call announces it, forward gives bit-identical losses / stage output,
 * so no param is read before its call. */
#include "models/gpt/gpt_model.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct mc_gpt_config config(bool llama)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 4;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.vocab_size = 90;
    c.make_vocab_size_divisible_by = 16;
    c.max_position_embeddings = c.seq_length = 12;
    c.micro_batch_size = 2;
    c.init_method_std = 0.1f;
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

enum { B = 2, S = 12, N = B * S };

struct rec {
    mc_gpt_model *m;
    float **snap;          /* grad block at each grad-ready call */
    int64_t first[16];
    int calls;
    const float *params;   /* clean params (param-use restores from here) */
    int64_t end;           /* params [0, end) announced so far */
    bool monotonic;
};

static mc_status on_grad_ready(void *ctx, int64_t first_ready)
{
    struct rec *r = ctx;
    if (r->calls >= 16)
        return mc_error(MC_ERR_INTERNAL, "too many grad-ready calls");
    size_t bytes = (size_t)r->m->n_elements * sizeof(float);
    r->snap[r->calls] = malloc(bytes);
    memcpy(r->snap[r->calls], r->m->grad_block, bytes);
    r->first[r->calls++] = first_ready;
    return MC_OK;
}

static mc_status on_param_use(void *ctx, int64_t end)
{
    struct rec *r = ctx;
    if (end < r->end)
        r->monotonic = false;
    for (int64_t i = r->end; i < end; i++) {
        const struct mc_gpt_param *p = &r->m->params[i];
        memcpy(r->m->param_block + p->offset, r->params + p->offset,
               (size_t)p->view.numel * sizeof(float));
    }
    if (end > r->end)
        r->end = end;
    return MC_OK;
}

/* Forward (+ backward) of one stage; output: the loss (last stage) or the stage output. */
static void pass(mc_gpt_model *m, const float *hidden_in, const float *dout, bool backward,
                 float *out)
{
    int64_t tok[N], lab[N];
    float dl[N];
    for (int64_t i = 0; i < N; i++) {
        tok[i] = (i * 37 + 5) % 90;
        lab[i] = (i * 11 + 2) % 90;
        dl[i] = 1.0f / (float)N;
    }
    bool last = m->dims.last_stage;
    struct mc_tensor x = mc_gpt_stage_tensor(m, B, S), g = x;
    x.data = (void *)hidden_in;
    g.data = (void *)dout;
    struct mc_gpt_batch bt = {B, S, m->dims.first_stage ? tok : NULL, last ? lab : NULL, NULL,
                              NULL, hidden_in ? &x : NULL};
    mc_gpt_set_step(m, 1);
    CHECK(mc_gpt_forward(m, &bt, true, last ? out : NULL) == MC_OK);
    if (!last)
        memcpy(out, mc_gpt_stage_output(m).data, sizeof(float) * N * (size_t)m->dims.h);
    if (backward)
        CHECK((last ? mc_gpt_backward(m, dl) : mc_gpt_backward_stage(m, &g)) == MC_OK);
}

static void check_stage(const char *label, mc_gpt_model *m, const float *hidden_in,
                        const float *dout)
{
    int64_t h = m->dims.h, nout = m->dims.last_stage ? N : N * h;
    float *ref = malloc(sizeof(float) * (size_t)nout), *got = malloc(sizeof(float) * (size_t)nout);
    size_t bytes = (size_t)m->n_elements * sizeof(float);
    float *final = malloc(bytes), *clean = malloc(bytes);
    struct rec r = {.m = m, .snap = calloc(16, sizeof(float *)), .monotonic = true};

    /* reference: no hooks */
    mc_gpt_zero_grad(m);
    pass(m, hidden_in, dout, true, ref);
    memcpy(final, m->grad_block, bytes);

    /* grad-ready */
    struct mc_param_set *set = mc_gpt_param_set(m);
    set->hooks = (struct mc_param_hooks){on_grad_ready, NULL, &r};
    mc_gpt_zero_grad(m);
    pass(m, hidden_in, dout, true, got);
    int want_calls = (int)m->dims.L + m->dims.first_stage + m->dims.last_stage;
    CHECK(r.calls == want_calls);
    CHECK(r.calls > 0 && r.first[r.calls - 1] == 0);
    CHECK(memcmp(final, m->grad_block, bytes) == 0);
    for (int k = 0; k < r.calls; k++) {
        CHECK(k == 0 || r.first[k] < r.first[k - 1]);
        for (int64_t i = r.first[k]; i < m->n_params; i++) {
            const struct mc_gpt_param *p = &m->params[i];
            if (memcmp(r.snap[k] + p->offset, final + p->offset,
                       (size_t)p->view.numel * sizeof(float)) != 0) {
                fprintf(stderr, "%s: call %d (first_ready %lld): %s not final yet\n", label, k,
                        (long long)r.first[k], p->name);
                CHECK(false);
            }
        }
        free(r.snap[k]);
    }
    if (m->dims.last_stage) /* the head's call declares the final norm and output layer */
        CHECK(r.first[0] == mc_gpt_param_index(m, "decoder.final_layernorm.weight"));

    /* param-use: not-yet-announced params are NaN */
    memcpy(clean, m->param_block, bytes);
    r.params = clean;
    set->hooks = (struct mc_param_hooks){NULL, on_param_use, &r};
    for (int64_t i = 0; i < m->n_elements; i++)
        m->param_block[i] = NAN;
    pass(m, hidden_in, dout, false, got);
    CHECK(r.monotonic && r.end == m->n_params);
    CHECK(memcmp(got, ref, sizeof(float) * (size_t)nout) == 0);
    CHECK(memcmp(clean, m->param_block, bytes) == 0);
    set->hooks = (struct mc_param_hooks){0};
    printf("%s: %d grad-ready calls, param use through %lld params\n", label, r.calls,
           (long long)r.end);
    free(r.snap);
    free(ref);
    free(got);
    free(final);
    free(clean);
}

static void run(const char *label, bool llama)
{
    struct mc_gpt_config c = config(llama);
    mc_gpt_model *whole = NULL, *st[2] = {0};
    CHECK(mc_gpt_model_init(&c, &whole) == MC_OK);
    for (int r = 0; r < 2; r++) {
        struct mc_gpt_config cs = c;
        cs.pipeline_model_parallel_size = 2;
        cs.pipeline_model_parallel_rank = r;
        CHECK(mc_gpt_model_init(&cs, &st[r]) == MC_OK);
    }
    if (!whole || !st[0] || !st[1])
        return;
    char name[64];
    snprintf(name, sizeof name, "%s pp1", label);
    check_stage(name, whole, NULL, NULL);
    int64_t nh = N * c.hidden_size;
    float *hid = malloc(sizeof(float) * (size_t)nh), *dout = malloc(sizeof(float) * (size_t)nh);
    pass(st[0], NULL, NULL, false, hid);
    for (int64_t i = 0; i < nh; i++)
        dout[i] = 0.01f * (float)sin(0.3 * (double)i);
    snprintf(name, sizeof name, "%s pp2 stage 0", label);
    check_stage(name, st[0], NULL, dout);
    snprintf(name, sizeof name, "%s pp2 stage 1", label);
    pass(st[0], NULL, NULL, false, hid);
    check_stage(name, st[1], hid, NULL);
    free(hid);
    free(dout);
    mc_gpt_model_free(whole);
    mc_gpt_model_free(st[0]);
    mc_gpt_model_free(st[1]);
}

int main(void)
{
    run("gpt2", false);
    run("llama", true);
    return test_summary("test_ddp_hooks");
}
