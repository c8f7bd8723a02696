/* Adam (decoupled weight decay) and SGD over a model's parameter set (megatron/param_set.h),
 * mirrors megatron/core/optimizer/optimizer.py (FP32Optimizer.step: grad norm, clip, count
 * zeros, inner optimizer step) with torch.optim.AdamW / SGD as the inner optimizers. Weight
 * decay is 0 for Megatron's no-decay group (biases and 1-D parameters). State lives in one
 * block per parameter set (model chunk) laid out like its parameter block; with interleaved
 * pipelining one optimizer steps the sets of every chunk of the rank. */
#include "optimizer/optimizer_internal.h"

#include <string.h>

struct mc_optimizer {
    struct mc_optimizer_config cfg;
    int n_chunks;
    const struct mc_param_set **set; /* [n_chunks] */
    float **state; /* [n_chunks] Adam: [exp_avg block | exp_avg_sq block]; SGD: [momentum block] */
    int64_t step;
    bool decoupled;   /* --decoupled-lr: the embedding / output params step with decoupled_lr */
    float decoupled_lr;
    struct mc_grad_scaler scaler; /* Float16OptimizerWithFloat16Params' (fp16/bf16), else none */
};

void mc_opt_config_default(struct mc_optimizer_config *cfg)
{
    *cfg = (struct mc_optimizer_config){
        .optimizer = MC_OPT_ADAM,
        .adam_beta1 = 0.9f,
        .adam_beta2 = 0.999f,
        .adam_eps = 1e-8f,
        .sgd_momentum = 0.9f,
        .clip_grad = 1.0f,
        .initial_loss_scale = 4294967296.0, /* 2**32 */
        .min_loss_scale = 1.0,
        .loss_scale_window = 1000.0,
        .hysteresis = 2,
    };
}

mc_status mc_opt_config_check(const struct mc_optimizer_config *c)
{
    if (c->optimizer != MC_OPT_ADAM && c->optimizer != MC_OPT_SGD)
        return mc_error(MC_ERR_CONFIG, "--optimizer: invalid value %d (expected adam or sgd)",
                        (int)c->optimizer);
    if (!(c->adam_beta1 >= 0.0f && c->adam_beta1 < 1.0f))
        return mc_error(MC_ERR_CONFIG, "--adam-beta1 (%g) must be in [0, 1)",
                        (double)c->adam_beta1);
    if (!(c->adam_beta2 >= 0.0f && c->adam_beta2 < 1.0f))
        return mc_error(MC_ERR_CONFIG, "--adam-beta2 (%g) must be in [0, 1)",
                        (double)c->adam_beta2);
    if (!(c->adam_eps >= 0.0f))
        return mc_error(MC_ERR_CONFIG, "--adam-eps (%g) must be >= 0", (double)c->adam_eps);
    if (!(c->sgd_momentum >= 0.0f))
        return mc_error(MC_ERR_CONFIG, "--sgd-momentum (%g) must be >= 0",
                        (double)c->sgd_momentum);
    if (!(c->clip_grad >= 0.0f))
        return mc_error(MC_ERR_CONFIG, "--clip-grad (%g) must be >= 0", (double)c->clip_grad);
    if (c->fp16 && c->bf16)
        return mc_error(MC_ERR_CONFIG, "--fp16 and --bf16 given together (expected one)");
    if (c->precision_aware && c->optimizer != MC_OPT_ADAM)
        return mc_error(MC_ERR_CONFIG, "--use-precision-aware-optimizer only supported with adam");
    const enum mc_dtype dts[3] = {c->main_params_dtype, c->exp_avg_dtype, c->exp_avg_sq_dtype};
    const char *names[3] = {"--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype"};
    for (int i = 0; i < 3; i++) {
        if (dts[i] != MC_DTYPE_F32 && !c->precision_aware)
            return mc_error(MC_ERR_CONFIG, "%s can only be fp32 when not using precision-aware "
                            "optimizer", names[i]);
        if (dts[i] != MC_DTYPE_F32 && dts[i] != MC_DTYPE_F16)
            return mc_error(MC_ERR_CONFIG, "%s: only fp32 and fp16 are implemented (fp8 "
                            "states need Transformer Engine's Float8Tensor)", names[i]);
    }
    return MC_OK;
}

mc_status mc_opt_init_chunks(const struct mc_optimizer_config *cfg,
                             const struct mc_param_set *const *sets, int n, mc_optimizer **out)
{
    if (!out || !cfg || !sets || n < 1)
        return mc_error(MC_ERR_CONFIG, "mc_opt_init: missing config, parameter set or output");
    *out = NULL;
    for (int c = 0; c < n; c++)
        if (!sets[c])
            return mc_error(MC_ERR_CONFIG, "mc_opt_init: parameter set of chunk %d missing", c);
    mc_status st = mc_opt_config_check(cfg);
    if (st != MC_OK)
        return st;
    if (cfg->precision_aware) /* OptimizerConfig.__post_init__'s rule */
        return mc_error(MC_ERR_CONFIG, "--use-precision-aware-optimizer only supported with "
                        "distributed optimizer");
    mc_optimizer *o = mc_calloc(1, sizeof(*o));
    if (!o)
        return MC_ERR_NOMEM;
    o->cfg = *cfg;
    o->n_chunks = n;
    if ((st = mc_grad_scaler_init(&o->scaler, cfg, cfg->fp16 || cfg->bf16)) != MC_OK) {
        mc_free(o);
        return st;
    }
    o->set = mc_calloc((size_t)n, sizeof(*o->set));
    o->state = mc_calloc((size_t)n, sizeof(*o->state));
    if (!o->set || !o->state) {
        mc_opt_free(o);
        return MC_ERR_NOMEM;
    }
    int64_t blocks = cfg->optimizer == MC_OPT_ADAM ? 2 : 1;
    for (int c = 0; c < n; c++) {
        o->set[c] = sets[c];
        /* the moments are backend memory (the update op reads them), zeroed there */
        struct mc_backend *be = sets[c]->be;
        size_t bytes = (size_t)(blocks * sets[c]->n_elements) * sizeof(float);
        if (!(o->state[c] = MC_MEM_AS(MC_MEM_OPTIMIZER, be->ops->alloc(be, bytes)))) {
            mc_opt_free(o);
            return MC_ERR_NOMEM;
        }
        be->ops->set(be, o->state[c], 0, bytes);
    }
    *out = o;
    return MC_OK;
}

mc_status mc_opt_init(const struct mc_optimizer_config *cfg, const struct mc_param_set *set,
                      mc_optimizer **out)
{
    return mc_opt_init_chunks(cfg, &set, 1, out);
}

void mc_opt_free(mc_optimizer *o)
{
    if (!o)
        return;
    for (int c = 0; o->state && c < o->n_chunks; c++)
        if (o->state[c])
            o->set[c]->be->ops->free(o->set[c]->be, o->state[c]);
    mc_free(o->state);
    mc_free(o->set);
    mc_free(o);
}

struct mc_opt_param_state mc_opt_param_state(const mc_optimizer *o, int64_t i)
{
    int c = 0;
    while (c < o->n_chunks - 1 && i >= o->set[c]->n_params)
        i -= o->set[c++]->n_params;
    const struct mc_param_set *s = o->set[c];
    MC_ASSERT(i >= 0 && i < s->n_params);
    int64_t off = s->params[i].offset;
    float *st = o->state[c];
    if (o->cfg.optimizer == MC_OPT_ADAM)
        return (struct mc_opt_param_state){st + off, st + s->n_elements + off, NULL};
    return (struct mc_opt_param_state){NULL, NULL, st + off};
}

int64_t mc_opt_step_count(const mc_optimizer *o) { return o->step; }

struct mc_grad_scaler *mc_opt_grad_scaler(mc_optimizer *o) { return &o->scaler; }
bool mc_opt_has_grad_scaler(const mc_optimizer *o) { return o->scaler.on; }
bool mc_opt_grad_scaler_dynamic(const mc_optimizer *o) { return o->scaler.on && o->scaler.dynamic; }
double mc_opt_loss_scale(const mc_optimizer *o) { return o->scaler.on ? o->scaler.scale : 1.0; }

void mc_opt_grad_scaler_state(const mc_optimizer *o, struct mc_grad_scaler_state *st)
{
    mc_grad_scaler_get_state(&o->scaler, st);
}

mc_status mc_opt_set_grad_scaler_state(mc_optimizer *o, const struct mc_grad_scaler_state *st)
{
    return mc_grad_scaler_set_state(&o->scaler, st);
}
void mc_opt_set_step_count(mc_optimizer *o, int64_t step) { o->step = step; }

bool mc_opt_param_is_embedding_or_output(const struct mc_param_view *v)
{
    return !strcmp(v->name, "embedding.word_embeddings.weight") ||
           !strcmp(v->name, "output_layer.weight");
}

void mc_opt_set_decoupled_lr(mc_optimizer *o, float lr)
{
    o->decoupled = true;
    o->decoupled_lr = lr;
}

static void update(mc_optimizer *o, float lr, float weight_decay)
{
    const struct mc_optimizer_config *c = &o->cfg;
    o->step++;
    int64_t first = 0; /* index of the chunk's first parameter in mc_opt_param_state */
    for (int ch = 0; ch < o->n_chunks; ch++) {
        const struct mc_param_set *set = o->set[ch];
        for (int64_t i = 0; i < set->n_params; i++) {
            const struct mc_param_view *v = &set->params[i].view;
            float wd = v->no_weight_decay ? 0.0f : weight_decay;
            float lr_i = o->decoupled && mc_opt_param_is_embedding_or_output(v) ? o->decoupled_lr : lr;
            struct mc_opt_param_state s = mc_opt_param_state(o, first + i);
            if (c->optimizer == MC_OPT_ADAM)
                set->be->ops->adamw(set->be, MC_DTYPE_F32, MC_DTYPE_F32, v->data, s.exp_avg,
                                    s.exp_avg_sq, v->grad, v->numel, lr_i, c->adam_beta1,
                                    c->adam_beta2, c->adam_eps, wd, o->step);
            else
                set->be->ops->sgd(set->be, MC_DTYPE_F32, MC_DTYPE_F32, v->data, s.momentum_buffer,
                                  v->grad, v->numel, lr_i, c->sgd_momentum, wd, o->step == 1);
        }
        first += set->n_params;
    }
}

/* MixedPrecisionOptimizer.prepare_grads with a grad scaler: every main grad of every chunk
 * (shared copies and tensor-parallel duplicates too) unscaled and checked, found_inf
 * MAX-reduced over the model-parallel group (Float16OptimizerWithFloat16Params'
 * grad_stats_parallel_group), then the scaler's update. *found: skip this step. */
static mc_status unscale_and_check(mc_optimizer *o, bool *found)
{
    *found = false;
    if (!o->scaler.on)
        return MC_OK;
    float inv = mc_grad_scaler_inv_scale(&o->scaler);
    bool any = false;
    for (int c = 0; c < o->n_chunks; c++)
        any |= mc_opt_check_and_unscale(o->set[c]->be, o->set[c]->grad_block,
                                        o->set[c]->n_elements, inv);
    float f = any ? 1.0f : 0.0f;
    mc_status st = mc_opt_mp_max(o->set[0], &f);
    if (st)
        return st;
    *found = f > 0.0f;
    mc_grad_scaler_update(&o->scaler, *found);
    return MC_OK;
}

mc_status mc_opt_step(mc_optimizer *o, float lr, float weight_decay,
                      struct mc_opt_step_result *res)
{
    if (!o)
        return mc_error(MC_ERR_CONFIG, "mc_opt_step: no optimizer");
    float norm = 0.0f;
    int64_t zeros = 0;
    bool found_inf;
    mc_status st = unscale_and_check(o, &found_inf);
    if (st != MC_OK)
        return st;
    if (found_inf) { /* Megatron's step returns False, None, None: nothing else happens */
        if (res)
            *res = (struct mc_opt_step_result){.skipped = true};
        return MC_OK;
    }
    /* ChainedOptimizer.step (core_v0.12.1 wraps every optimizer in one): the norm always, the
     * clip only with --clip-grad > 0, the zero count always, in every precision */
    if ((st = mc_opt_grad_norm(o->set, o->n_chunks, &norm)) != MC_OK)
        return st;
    mc_opt_clip_grads(o->set, o->n_chunks, o->cfg.clip_grad, norm);
    if ((st = mc_opt_count_zeros(o->set, o->n_chunks, &zeros)) != MC_OK)
        return st;
    update(o, lr, weight_decay);
    /* _copy_main_params_to_model_params: the 16-bit weights follow (no-op in fp32) */
    for (int c = 0; c < o->n_chunks; c++)
        mc_param_set_refresh_compute(o->set[c]);
    if (res)
        *res = (struct mc_opt_step_result){.grad_norm = norm, .num_zeros = zeros};
    return MC_OK;
}
