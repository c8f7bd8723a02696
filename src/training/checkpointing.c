/* The argument-aware half of megatron/training/checkpointing.py (Megatron-LM core_v0.12.1):
 * which directory and which parts to save or load given the command line, the args Namespace
 * saved in every checkpoint (the parsed arguments plus what pretrain() adds while running), and
 * check_checkpoint_args with the sample counters restored on loading. The bytes are written
 * and read by src/checkpointing/ (checkpoint.c: torch format; dist_checkpoint.c: torch_dist),
 * which knows no arguments. */
#include "training/checkpointing.h"

#include <string.h>

#include "checkpointing/checkpoint_internal.h"
#include "checkpointing/torch_pickle.h"
#include "distributed/distrib_optimizer.h"

struct mc_pk *mc_ckpt_arg_value(mc_pk_doc *d, const struct mc_val *v)
{
    switch (v->kind) {
    case MC_V_NONE: return mc_pk_none(d);
    case MC_V_BOOL: return mc_pk_bool(d, v->b);
    case MC_V_INT: return mc_pk_int(d, v->i);
    case MC_V_FLOAT: return mc_pk_float(d, v->f);
    case MC_V_STR: return mc_pk_str(d, v->s);
    case MC_V_SYM:
        if (!strncmp(v->s, "torch.", 6))
            return mc_pk_global(d, "torch", v->s + 6);
        if (!strncmp(v->s, "AttnBackend.", 12))
            return mc_pk_enum_member(d, "megatron.core.transformer.enums", "AttnBackend", v->s + 12);
        return mc_pk_str(d, v->s);
    case MC_V_LIST: {
        struct mc_pk *l = mc_pk_new(d, MC_PK_LIST);
        for (int k = 0; l && k < v->n; k++)
            if (mc_pk_append(d, l, mc_ckpt_arg_value(d, &v->items[k])))
                return NULL;
        return l;
    }
    }
    return NULL;
}

void mc_train_ckpt_options(const struct mc_args *a, bool saving, struct mc_ckpt_options *o)
{
    memset(o, 0, sizeof(*o));
    if (saving) { /* only what saving reads: a load need not have --lr etc. set */
        o->dir = mc_args_str(a, MC_A_save);
        o->legacy_names = mc_args_bool(a, MC_A_use_legacy_models);
        o->local_names = !strcmp(mc_args_str(a, MC_A_transformer_impl), "local");
        o->save_optim = !mc_args_bool(a, MC_A_no_save_optim);
        o->adam = !strcmp(mc_args_str(a, MC_A_optimizer), "adam");
        o->adam_beta1 = mc_args_float(a, MC_A_adam_beta1);
        o->adam_beta2 = mc_args_float(a, MC_A_adam_beta2);
        o->adam_eps = mc_args_float(a, MC_A_adam_eps);
        o->sgd_momentum = mc_args_float(a, MC_A_sgd_momentum);
        o->max_lr = mc_args_float(a, MC_A_lr);
        o->min_lr = mc_args_float(a, MC_A_min_lr);
        o->decoupled = !mc_args_is_none(a, MC_A_decoupled_lr);
        o->decoupled_lr = o->decoupled ? mc_args_float(a, MC_A_decoupled_lr) : 0.0;
        o->decoupled_min_lr = mc_args_is_none(a, MC_A_decoupled_min_lr)
                                  ? o->min_lr : mc_args_float(a, MC_A_decoupled_min_lr);
        o->save_dist = !strcmp(mc_args_str(a, MC_A_ckpt_format), "torch_dist");
        o->fully_parallel_save = mc_args_bool(a, MC_A_ckpt_fully_parallel_save);
        o->save_rng = !mc_args_bool(a, MC_A_no_save_rng);
        o->seed = mc_args_int(a, MC_A_seed);
        o->dp_random_init = mc_args_bool(a, MC_A_data_parallel_random_init);
        o->expert_tp_size = mc_args_is_none(a, MC_A_expert_tensor_parallel_size)
                                ? 0 : (int)mc_args_int(a, MC_A_expert_tensor_parallel_size);
        return;
    }
    o->dir = mc_args_str(a, MC_A_load);
    o->decoupled = !mc_args_is_none(a, MC_A_decoupled_lr); /* the param groups to expect */
    o->finetune = mc_args_bool(a, MC_A_finetune);
    o->load_optim = !mc_args_bool(a, MC_A_no_load_optim);
    o->exit_on_missing = mc_args_bool(a, MC_A_exit_on_missing_checkpoint);
    o->ckpt_format = mc_args_str(a, MC_A_ckpt_format);
    o->read_dist = !strcmp(o->ckpt_format, "torch_dist") || mc_args_bool(a, MC_A_auto_detect_ckpt_format);
    o->ckpt_step = mc_args_is_none(a, MC_A_ckpt_step) ? 0 : mc_args_int(a, MC_A_ckpt_step);
    o->strictness = mc_args_str(a, MC_A_dist_ckpt_strictness);
    o->strict_log = stdout; /* Megatron's CustomHandler: sys.stdout of every rank */
    o->load_rng = !mc_args_bool(a, MC_A_no_load_rng);
}

/* What the two callbacks see: the arguments and the state being saved or loaded. */
struct args_ctx {
    struct mc_args *a;
    const struct mc_ckpt_state *s;
};

/* The attributes Megatron's pretrain() adds to args while running, in the order it adds them
 * (padded_vocab_size, model_type, iteration, ...); our option table has none of them. */
static mc_status runtime_args(mc_pk_doc *d, struct mc_pk *ns, const struct mc_ckpt_state *s)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(s->model);
    mc_status st = mc_pk_set(d, ns, "padded_vocab_size", mc_pk_int(d, c->padded_vocab_size));
    st = st ? st : mc_pk_set(d, ns, "model_type", mc_pk_enum_member(d, "megatron.core.enums",
                                                                    "ModelType", "encoder_or_decoder"));
    st = st ? st : mc_pk_set(d, ns, "iteration", mc_pk_int(d, s->args_iteration));
    st = st ? st : mc_pk_set(d, ns, "num_floating_point_operations_so_far",
                             s->args_flops ? mc_pk_float(d, s->args_flops) : mc_pk_int(d, 0));
    if (st || s->in_setup)
        return st;
    st = mc_pk_set(d, ns, "do_train", mc_pk_int(d, s->do_train));
    st = st ? st : mc_pk_set(d, ns, "do_valid", mc_pk_int(d, s->do_valid));
    st = st ? st : mc_pk_set(d, ns, "do_test", mc_pk_int(d, s->do_test));
    st = st ? st : mc_pk_set(d, ns, "curr_iteration", mc_pk_int(d, s->iteration > 0 ? s->iteration - 1 : 0));
    return st;
}

/* The args Namespace of the checkpoint: every parsed argument, then the run-time attributes. */
static mc_status save_args(void *ctx, mc_pk_doc *d, struct mc_pk **out)
{
    const struct args_ctx *c = ctx;
    const struct mc_args *a = c->a;
    struct mc_pk *ns = mc_pk_new(d, MC_PK_NAMESPACE);
    for (int i = 0; ns && i < MC_A_COUNT; i++) {
        struct mc_val v = a->v[i];
        /* training.py's FLOPs count sets num_query_groups = num_attention_heads without GQA
         * (in the training loop: a save during setup has validate_args' value) */
        if (i == MC_A_num_query_groups && !mc_args_bool(a, MC_A_group_query_attention) &&
            !c->s->in_setup)
            v = a->v[MC_A_num_attention_heads];
        if (!a->deleted[i] && mc_pk_set(d, ns, mc_arg_defs[i].dest, mc_ckpt_arg_value(d, &v)))
            return MC_ERR_NOMEM;
    }
    if (!ns || runtime_args(d, ns, c->s))
        return MC_ERR_NOMEM;
    *out = ns;
    return MC_OK;
}

/* check_checkpoint_args: the model-shape arguments must agree. */
static mc_status check_args(const struct args_ctx *c, const struct mc_pk *ck, const char *path)
{
    static const enum mc_arg_id ids[] = {MC_A_num_layers, MC_A_hidden_size, MC_A_num_attention_heads,
                                         MC_A_add_position_embedding, MC_A_tensor_model_parallel_size,
                                         MC_A_pipeline_model_parallel_size};
    const struct mc_args *a = c->a;
    for (size_t k = 0; k < sizeof(ids) / sizeof(*ids); k++) {
        const char *name = mc_arg_defs[ids[k]].dest;
        const struct mc_val *x = &a->v[ids[k]];
        double cv, av = x->kind == MC_V_BOOL ? x->b : x->kind == MC_V_INT ? (double)x->i : x->f;
        const struct mc_pk *v = mc_pk_get(ck, name);
        if (!v && ids[k] == MC_A_add_position_embedding)
            cv = 1; /* _compare's default=True */
        else if (!mc_pk_number(v, &cv))
            return mc_ckpt_missing(path, name, " in the saved args");
        if (cv != av && (ids[k] == MC_A_tensor_model_parallel_size ||
                         ids[k] == MC_A_pipeline_model_parallel_size))
            return mc_ckpt_layout_error(c->s, path, ck);
        if (cv != av)
            return mc_error(MC_ERR_CONFIG, "%s: %s value from checkpoint (%.17g) is not equal to the "
                            "input argument value (%.17g).", path, name, cv, av);
    }
    return MC_OK;
}

/* load_checkpoint's update of args from the checkpoint: the sample counters. */
static mc_status restore_counters(const struct args_ctx *c, const struct mc_pk *ck, const char *path)
{
    static const enum mc_arg_id ids[] = {MC_A_consumed_train_samples, MC_A_skipped_train_samples,
                                         MC_A_consumed_valid_samples};
    for (size_t k = 0; k < 3; k++) {
        double v = 0;
        const struct mc_pk *x = mc_pk_get(ck, mc_arg_defs[ids[k]].dest);
        if (x && !mc_pk_number(x, &v))
            return mc_error(MC_ERR_FORMAT, "%s: args.%s is not a number", path,
                            mc_arg_defs[ids[k]].dest);
        mc_args_set_int(c->a, ids[k], (int64_t)v);
    }
    return MC_OK;
}

static mc_status load_args(void *ctx, const struct mc_pk *saved, const char *path)
{
    mc_status st = check_args(ctx, saved, path);
    return st ? st : restore_counters(ctx, saved, path);
}

/* The optimizer's grad scaler (the distributed optimizer's: the first chunk's), or NULL. */
static struct mc_grad_scaler *scaler_of(const struct mc_ckpt_state *s)
{
    struct mc_grad_scaler *g = s->distopt ? mc_distopt_grad_scaler(s->distopt)
                               : s->opt ? mc_opt_grad_scaler(s->opt) : NULL;
    return g && g->on ? g : NULL;
}

static struct mc_distopt *chunk_distopt(const struct mc_ckpt_state *s, int c)
{
    return s->n_chunks > 1 ? s->distopts[c] : s->distopt;
}

/* The run's precision and grad scaler as the checkpoint code sees them: the scaler
 * get_megatron_optimizer chose (constant, dynamic or none) with its current state. */
static void precision(const struct mc_args *a, struct mc_ckpt_state *s)
{
    const struct mc_grad_scaler *g = scaler_of(s);
    /* the model's, or the arguments' when there is no model (the tracker alone is read) */
    s->params_dtype = s->model ? mc_gpt_model_config(s->model)->params_dtype
                      : mc_args_bool(a, MC_A_bf16) ? MC_DTYPE_BF16
                      : mc_args_bool(a, MC_A_fp16) ? MC_DTYPE_F16
                                                   : MC_DTYPE_F32;
    s->grad_dtype = mc_args_bool(a, MC_A_accumulate_allreduce_grads_in_fp32) ? MC_DTYPE_F32
                                                                             : s->params_dtype;
    memset(&s->scaler, 0, sizeof(s->scaler));
    if (!g)
        return;
    struct mc_grad_scaler_state gs;
    mc_grad_scaler_get_state(g, &gs);
    s->scaler.kind = g->dynamic ? MC_CKPT_SCALER_DYNAMIC : MC_CKPT_SCALER_CONSTANT;
    s->scaler.scale = gs.scale;
    s->scaler.growth_tracker = gs.growth_tracker;
    s->scaler.hysteresis_tracker = gs.hysteresis_tracker;
}

mc_status mc_train_ckpt_save(struct mc_args *a, struct mc_ckpt_state *s, FILE *log)
{
    struct args_ctx c = {.a = a, .s = s};
    precision(a, s);
    mc_train_ckpt_options(a, true, &s->opts);
    s->opts.save_args = save_args;
    s->opts.args_ctx = &c;
    int nd = !s->distopt ? 0 : s->n_chunks > 1 ? s->n_chunks : 1, un = 0;
    mc_status st = MC_OK;
    /* the precision-aware optimizer's fp16 states are saved unscaled (an async save copies
     * them before it returns), then put back as they were */
    while (un < nd && !(st = mc_distopt_ckpt_unscale(chunk_distopt(s, un))))
        un++;
    if (!st)
        st = mc_args_bool(a, MC_A_async_save) ? mc_ckpt_save_async(s, log, mc_train_async_queue())
                                              : mc_ckpt_save(s, log);
    while (un > 0)
        mc_distopt_ckpt_saved(chunk_distopt(s, --un));
    s->opts.args_ctx = NULL; /* c ends here */
    return st;
}

mc_status mc_train_ckpt_load(struct mc_args *a, struct mc_ckpt_state *s, FILE *log, bool *loaded)
{
    struct args_ctx c = {.a = a, .s = s};
    precision(a, s);
    mc_train_ckpt_options(a, false, &s->opts);
    s->opts.load_args = load_args;
    s->opts.args_ctx = &c;
    mc_status st = mc_ckpt_load(s, log, loaded);
    s->opts.args_ctx = NULL;
    struct mc_grad_scaler *g = scaler_of(s);
    if (!st && *loaded && s->scaler.loaded && g) {
        struct mc_grad_scaler_state gs = {s->scaler.scale, s->scaler.growth_tracker,
                                          s->scaler.hysteresis_tracker};
        if ((st = mc_grad_scaler_set_state(g, &gs)))
            return mc_error(st, "--load %s: optimizer grad_scaler: %s", s->opts.dir,
                            mc_last_error());
    }
    /* the 16-bit weights forward reads follow the loaded main params (a no-op in fp32), as
     * the optimizer rounds them */
    for (int c = 0; !st && *loaded && c < (s->n_chunks > 1 ? s->n_chunks : 1); c++) {
        if (s->distopt)
            mc_distopt_refresh_compute(chunk_distopt(s, c));
        else
            mc_param_set_refresh_compute(mc_gpt_param_set(s->n_chunks > 1 ? s->chunks[c] : s->model));
    }
    return st;
}
