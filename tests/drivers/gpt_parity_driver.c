/* gpt_parity_driver: runs the C GPTModel (include/megatron/gpt.h) and optimizer
 * (include/megatron/optimizer.h) on a configuration, weights and batch read from a dump, and
 * writes what the PyTorch twin (tests/reference/gpt_twin.py) computes, for the parity tests in
 * tests/parity/. Megatron counterpart: one pretrain_gpt.py forward_step + backward + optimizer
 * step, at tp = pp = dp = 1.
 *
 *   gpt_parity_driver IN.dump OUT.dump
 *
 * IN holds: config.<field> scalars for every struct mc_gpt_config field the tests set (ints as
 * i64, floats as f32, enums as their codes); param.<Megatron name> for every parameter; tokens,
 * labels [b, s] i64; dloss [b, s] f32 (d total loss / d per-token loss, i.e. loss_mask / count);
 * optionally attention_mask [b, 1, s, s] u8 (1 = masked) and position_ids [b, s] i64; and
 * opt.steps (i64), opt.lr, opt.weight_decay ([steps] f32), opt.beta1, opt.beta2, opt.eps,
 * opt.clip_grad (f32) for the training run, and optionally opt.optimizer (0 adam, 1 sgd) with
 * opt.sgd_momentum, and opt.loss_scale (f32: fp16's constant scaler; dloss comes scaled).
 * OUT holds: logits [s, b, V] from an eval forward; loss [b, s] and grad.<name> for every
 * parameter from a training forward/backward on the initial weights; then for opt.steps steps of
 * (zero grads, forward, backward, optimizer step): train.loss [steps] (sum of loss * dloss before the
 * step), train.grad_norm [steps] and param.<name> after the last step.
 * Gradient accumulation (optional): accum.tokens, accum.labels [M, b, s] i64 and accum.dloss
 * [M, b, s] f32 run M training micro-batches at mc_gpt_set_step(0) with grads accumulating, as
 * Megatron's forward_backward_no_pipelining does; OUT gets accum.loss [M, b, s] and
 * accum.grad.<name>.
 * Mixed precision: config.params_dtype (the enum mc_dtype code: 0 f32, 1 bf16, 2 f16) makes
 * the model compute in that dtype; param.<name> may then be f32 (the main params, the dt
 * weights rounded from them) or that dtype (widened exactly); logits and the hook points are
 * written in the params dtype, grads and params stay the fp32 main grads / main params.
 * With MC_DUMP_HOOKS=PATH the debug hook points (include/megatron/dump.h) of the eval forward
 * are written to PATH.
 * Every failure prints the status and message and exits 1. */
#include "megatron/dump.h"
#include "megatron/gpt.h"
#include "megatron/optimizer.h"

#include "core/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                         \
    do {                                                                                  \
        mc_status st_ = (call);                                                           \
        if (st_ != MC_OK) {                                                               \
            fprintf(stderr, "gpt_parity_driver: %s failed: %s: %s\n", #call,              \
                    mc_status_str(st_), mc_last_error());                                 \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static void die(const char *msg, const char *what)
{
    fprintf(stderr, "gpt_parity_driver: %s%s\n", msg, what ? what : "");
    exit(1);
}

/* Optional config fields: absent keeps mc_gpt_config_default's value. */
static void get_i64(const mc_dump *in, const char *field, int64_t *v)
{
    char key[128];
    snprintf(key, sizeof(key), "config.%s", field);
    if (mc_dump_find(in, key))
        TRY(mc_dump_get_i64(in, key, v));
}

static void get_int(const mc_dump *in, const char *field, int *v)
{
    int64_t x = *v;
    get_i64(in, field, &x);
    *v = (int)x;
}

static void get_bool(const mc_dump *in, const char *field, bool *v)
{
    int64_t x = *v;
    get_i64(in, field, &x);
    *v = x != 0;
}

static void get_f32(const mc_dump *in, const char *field, float *v)
{
    char key[128];
    double x;
    snprintf(key, sizeof(key), "config.%s", field);
    if (mc_dump_find(in, key)) {
        TRY(mc_dump_get_f64(in, key, &x));
        *v = (float)x;
    }
}

static void read_config(const mc_dump *in, struct mc_gpt_config *c)
{
    mc_gpt_config_default(c);
    get_i64(in, "num_layers", &c->num_layers);
    get_i64(in, "hidden_size", &c->hidden_size);
    get_i64(in, "num_attention_heads", &c->num_attention_heads);
    get_i64(in, "num_query_groups", &c->num_query_groups);
    get_i64(in, "kv_channels", &c->kv_channels);
    get_i64(in, "ffn_hidden_size", &c->ffn_hidden_size);
    get_i64(in, "vocab_size", &c->vocab_size);
    get_i64(in, "padded_vocab_size", &c->padded_vocab_size);
    get_i64(in, "make_vocab_size_divisible_by", &c->make_vocab_size_divisible_by);
    get_i64(in, "max_position_embeddings", &c->max_position_embeddings);
    get_i64(in, "seq_length", &c->seq_length);
    get_i64(in, "micro_batch_size", &c->micro_batch_size);
    int e = (int)c->normalization;
    get_int(in, "normalization", &e);
    c->normalization = (enum mc_normalization)e;
    get_f32(in, "norm_epsilon", &c->norm_epsilon);
    get_bool(in, "layernorm_zero_centered_gamma", &c->layernorm_zero_centered_gamma);
    e = (int)c->position_embedding_type;
    get_int(in, "position_embedding_type", &e);
    c->position_embedding_type = (enum mc_position_embedding)e;
    get_f32(in, "rotary_percent", &c->rotary_percent);
    get_f32(in, "rotary_base", &c->rotary_base);
    get_bool(in, "rotary_interleaved", &c->rotary_interleaved);
    get_bool(in, "use_rope_scaling", &c->use_rope_scaling);
    get_f32(in, "rope_scaling_factor", &c->rope_scaling_factor);
    get_f32(in, "rope_low_freq_factor", &c->rope_low_freq_factor);
    get_f32(in, "rope_high_freq_factor", &c->rope_high_freq_factor);
    get_f32(in, "rope_original_max_position", &c->rope_original_max_position);
    e = (int)c->activation;
    get_int(in, "activation", &e);
    c->activation = (enum mc_activation)e;
    get_bool(in, "add_bias_linear", &c->add_bias_linear);
    get_bool(in, "add_qkv_bias", &c->add_qkv_bias);
    get_bool(in, "apply_query_key_layer_scaling", &c->apply_query_key_layer_scaling);
    get_bool(in, "attention_softmax_in_fp32", &c->attention_softmax_in_fp32);
    get_bool(in, "untie_embeddings_and_output_weights", &c->untie_embeddings_and_output_weights);
    get_bool(in, "fp32_residual_connection", &c->fp32_residual_connection);
    get_f32(in, "hidden_dropout", &c->hidden_dropout);
    get_f32(in, "attention_dropout", &c->attention_dropout);
    get_f32(in, "init_method_std", &c->init_method_std);
    get_i64(in, "sliding_window", &c->sliding_window);
    get_int(in, "alibi", &c->alibi);
    get_bool(in, "alibi_fill_neg_inf", &c->alibi_fill_neg_inf);
    get_bool(in, "flash_attention", &c->flash_attention);
    int64_t seed = (int64_t)c->seed;
    get_i64(in, "seed", &seed);
    c->seed = (uint64_t)seed;
    e = (int)c->params_dtype;
    get_int(in, "params_dtype", &e);
    c->params_dtype = (enum mc_dtype)e;
}

/* The named tensor with the expected dtype and element count, or exit naming what differs. */
static const void *tensor(const mc_dump *in, const char *name, enum mc_dtype dtype, int64_t numel,
                          bool required)
{
    const struct mc_dump_tensor *t = mc_dump_find(in, name);
    if (!t) {
        if (required)
            die("input dump lacks tensor ", name);
        return NULL;
    }
    if (t->dtype != dtype || t->numel != numel) {
        fprintf(stderr, "gpt_parity_driver: tensor %s is %s with %lld elements, expected %s with "
                "%lld\n", name, mc_dtype_name(t->dtype), (long long)t->numel,
                mc_dtype_name(dtype), (long long)numel);
        exit(1);
    }
    return t->data;
}

/* Every model parameter must come from the dump (and every param.* in the dump must exist). */
static void load_params(const mc_dump *in, mc_gpt_model *m)
{
    char key[512];
    int64_t loaded = 0;
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view p = mc_gpt_param(m, i);
        snprintf(key, sizeof(key), "param.%s", p.name);
        const struct mc_dump_tensor *t = mc_dump_find(in, key);
        enum mc_dtype dt = mc_gpt_model_config(m)->params_dtype;
        if (t && t->dtype == dt && dt != MC_DTYPE_F32 && t->numel == p.numel)
            mc_dtype_to_f32(p.data, t->data, dt, p.numel); /* 16-bit weights, widened */
        else
            memcpy(p.data, tensor(in, key, MC_DTYPE_F32, p.numel, true),
                   (size_t)p.numel * sizeof(float));
        loaded++;
    }
    mc_param_set_refresh_compute(mc_gpt_param_set(m)); /* the dt weights from the main params */
    for (int64_t i = 0; i < mc_dump_count(in); i++) {
        const char *n = mc_dump_get(in, i)->name;
        if (strncmp(n, "param.", 6) == 0 && mc_gpt_param_index(m, n + 6) < 0)
            die("the C model has no parameter named ", n + 6);
    }
    (void)loaded;
}

static void dump_params(mc_dump *out, const mc_gpt_model *m, const char *prefix, bool grads)
{
    char key[512];
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view p = mc_gpt_param(m, i);
        snprintf(key, sizeof(key), "%s%s", prefix, p.name);
        TRY(mc_dump_add_f32(out, key, p.ndim, p.shape, grads ? p.grad : p.data));
    }
}

/* M micro-batches, one optimizer step's worth: zero grads once, then forward + backward each
 * (the model counts the micro-batches for its dropout streams). */
static void accumulate(const mc_dump *in, mc_gpt_model *m, mc_dump *out)
{
    const struct mc_dump_tensor *tok = mc_dump_find(in, "accum.tokens");
    if (!tok)
        return;
    if (tok->ndim != 3)
        die("accum.tokens must be [M, b, s]", NULL);
    int64_t M = tok->shape[0], b = tok->shape[1], s = tok->shape[2], n = b * s;
    const int64_t *tokens = tensor(in, "accum.tokens", MC_DTYPE_I64, M * n, true);
    const int64_t *labels = tensor(in, "accum.labels", MC_DTYPE_I64, M * n, true);
    const float *dloss = tensor(in, "accum.dloss", MC_DTYPE_F32, M * n, true);
    float *loss = mc_alloc((size_t)(M * n) * sizeof(float));
    if (!loss)
        die("out of memory", NULL);
    mc_gpt_zero_grad(m);
    mc_gpt_set_step(m, 0);
    for (int64_t k = 0; k < M; k++) {
        struct mc_gpt_batch mb = {.b = b, .s = s, .tokens = tokens + k * n,
                                  .labels = labels + k * n};
        TRY(mc_gpt_forward(m, &mb, true, loss + k * n));
        TRY(mc_gpt_backward(m, dloss + k * n));
    }
    int64_t shape[3] = {M, b, s};
    TRY(mc_dump_add_f32(out, "accum.loss", 3, shape, loss));
    dump_params(out, m, "accum.grad.", true);
    mc_free(loss);
}

static float read_opt_f32(const mc_dump *in, const char *key)
{
    double v;
    TRY(mc_dump_get_f64(in, key, &v));
    return (float)v;
}

/* opt.steps iterations of Megatron's train_step at one micro-batch: zero grads, forward,
 * backward, optimizer step (clipping inside) with this iteration's lr and weight decay. */
static void train(const mc_dump *in, mc_gpt_model *m, const struct mc_gpt_batch *batch,
                  const float *dloss, mc_dump *out)
{
    int64_t steps = 0;
    if (mc_dump_find(in, "opt.steps"))
        TRY(mc_dump_get_i64(in, "opt.steps", &steps));
    if (steps <= 0)
        return;
    const float *lr = tensor(in, "opt.lr", MC_DTYPE_F32, steps, true);
    const float *wd = tensor(in, "opt.weight_decay", MC_DTYPE_F32, steps, true);
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.optimizer = MC_OPT_ADAM;
    if (mc_dump_find(in, "opt.optimizer")) {
        int64_t kind;
        TRY(mc_dump_get_i64(in, "opt.optimizer", &kind));
        if (kind != MC_OPT_ADAM && kind != MC_OPT_SGD)
            die("opt.optimizer must be 0 (adam) or 1 (sgd)", NULL);
        oc.optimizer = (enum mc_optimizer_type)kind;
        if (kind == MC_OPT_SGD)
            oc.sgd_momentum = read_opt_f32(in, "opt.sgd_momentum");
    }
    oc.adam_beta1 = read_opt_f32(in, "opt.beta1");
    oc.adam_beta2 = read_opt_f32(in, "opt.beta2");
    oc.adam_eps = read_opt_f32(in, "opt.eps");
    oc.clip_grad = read_opt_f32(in, "opt.clip_grad");
    /* a 16-bit model trains with Megatron's mixed-precision optimizer; fp16 with the constant
     * loss scale opt.loss_scale, which the tests have already multiplied into dloss */
    enum mc_dtype pdt = mc_gpt_model_config(m)->params_dtype;
    oc.bf16 = pdt == MC_DTYPE_BF16;
    oc.fp16 = pdt == MC_DTYPE_F16;
    if (mc_dump_find(in, "opt.loss_scale"))
        oc.loss_scale = read_opt_f32(in, "opt.loss_scale");
    mc_optimizer *opt = NULL;
    TRY(mc_opt_init(&oc, mc_gpt_param_set(m), &opt));
    int64_t n = batch->b * batch->s;
    float *loss = mc_alloc((size_t)n * sizeof(float));
    float *curve = mc_alloc((size_t)steps * sizeof(float));
    float *norms = mc_alloc((size_t)steps * sizeof(float));
    if (!loss || !curve || !norms)
        die("out of memory", NULL);
    for (int64_t it = 0; it < steps; it++) {
        mc_gpt_zero_grad(m);
        mc_gpt_set_step(m, it);
        TRY(mc_gpt_forward(m, batch, true, loss));
        double total = 0;
        for (int64_t i = 0; i < n; i++)
            total += (double)loss[i] * dloss[i];
        curve[it] = (float)total;
        TRY(mc_gpt_backward(m, dloss));
        struct mc_opt_step_result r;
        TRY(mc_opt_step(opt, lr[it], wd[it], &r));
        mc_param_set_refresh_compute(mc_gpt_param_set(m)); /* as mc_opt_step does (no-op fp32) */
        norms[it] = r.grad_norm;
    }
    TRY(mc_dump_add_f32(out, "train.loss", 1, &steps, curve));
    TRY(mc_dump_add_f32(out, "train.grad_norm", 1, &steps, norms));
    dump_params(out, m, "param.", false);
    mc_free(norms);
    mc_free(curve);
    mc_free(loss);
    mc_opt_free(opt);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s IN.dump OUT.dump\n", argv[0]);
        return 2;
    }
    mc_dump *in = NULL, *out = NULL;
    TRY(mc_dump_read(argv[1], &in));
    struct mc_gpt_config cfg;
    read_config(in, &cfg);
    mc_gpt_model *m = NULL;
    TRY(mc_gpt_model_init(&cfg, &m));
    load_params(in, m);

    const struct mc_dump_tensor *tok = mc_dump_find(in, "tokens");
    if (!tok || tok->ndim != 2)
        die("input dump lacks tokens [b, s]", NULL);
    int64_t b = tok->shape[0], s = tok->shape[1], n = b * s;
    struct mc_gpt_batch batch = {
        .b = b, .s = s,
        .tokens = tensor(in, "tokens", MC_DTYPE_I64, n, true),
        .labels = NULL,
        .position_ids = tensor(in, "position_ids", MC_DTYPE_I64, n, false),
        .attention_mask = tensor(in, "attention_mask", MC_DTYPE_U8, n * s, false),
    };
    const int64_t *labels = tensor(in, "labels", MC_DTYPE_I64, n, true);
    const float *dloss = tensor(in, "dloss", MC_DTYPE_F32, n, true);

    TRY(mc_dump_init(&out));
    /* with MC_DUMP_HOOKS=path, the hook points of this eval forward only go to path */
    bool hooks = mc_dump_hooks_active();
    TRY(mc_gpt_forward(m, &batch, false, NULL));
    if (hooks) {
        TRY(mc_dump_hooks_flush());
        mc_dump_hooks_disable();
    }
    struct mc_tensor lg = mc_gpt_logits(m); /* [s, b, V/tp] */
    TRY(mc_dump_add(out, "logits", lg.dtype, lg.ndim, lg.shape, lg.data));

    float *loss = mc_alloc((size_t)n * sizeof(float));
    if (!loss)
        die("out of memory", NULL);
    batch.labels = labels;
    mc_gpt_zero_grad(m);
    mc_gpt_set_step(m, 0);
    TRY(mc_gpt_forward(m, &batch, true, loss));
    TRY(mc_gpt_backward(m, dloss));
    int64_t bs[2] = {b, s};
    TRY(mc_dump_add_f32(out, "loss", 2, bs, loss));
    dump_params(out, m, "grad.", true);
    mc_free(loss);

    accumulate(in, m, out);
    train(in, m, &batch, dloss, out);
    TRY(mc_dump_write(out, argv[2]));
    mc_dump_free(out);
    mc_gpt_model_free(m);
    mc_dump_free(in);
    return 0;
}
