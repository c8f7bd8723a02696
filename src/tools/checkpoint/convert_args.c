/* The args Namespace of converted checkpoints: Megatron's saver (tools/checkpoint/saver_base.py,
 * core_v0.12.1) parses a fresh command line (target TP/PP, --no-save-optim, --no-save-rng,
 * --use-cpu-initialization, --ckpt-format torch, ...), copies every other argument from the
 * loaded checkpoint's args (_load_checkpoint_args: all but `args_to_keep`), validates, and saves.
 * We start from the source's Namespace and set the kept arguments to the values the fresh parse
 * gives; a HuggingFace source's Namespace is what Megatron's llama_mistral loader parses, made by
 * our own parser (src/training/args.c) from the same command line. */
#include "tools/checkpoint/convert_args.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpointing/checkpoint_internal.h"
#include "training/checkpointing.h"
#include "training/validate.h"

/* Sets an existing attribute in place (keeping the Namespace order) or appends it. */
static mc_status set(mc_pk_doc *d, struct mc_pk *ns, const char *key, struct mc_pk *v)
{
    if (!v)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i + 1 < ns->n; i += 2)
        if (ns->items[i]->kind == MC_PK_STR && !strcmp(ns->items[i]->s, key)) {
            ns->items[i + 1] = v;
            return MC_OK;
        }
    return mc_pk_set(d, ns, key, v);
}

static mc_status set_if_present(mc_pk_doc *d, struct mc_pk *ns, const char *key, struct mc_pk *v)
{
    return mc_pk_get(ns, key) ? set(d, ns, key, v) : MC_OK;
}

/* What the fresh parse + validate_args of the saver give for the arguments it keeps
 * (saver_base.py args_to_keep). Deliberate difference: the fusion flags (masked_softmax_fusion,
 * bias_gelu_fusion, bias_dropout_fusion) keep the source's values, because bias_gelu_fusion
 * decides tanh- vs erf-GELU and a converted checkpoint must keep saying which one it was trained
 * with (Megatron's saver writes False for all three). */
static mc_status kept_args(mc_pk_doc *d, struct mc_pk *ns, const struct mc_cv_model *m,
                           const struct mc_cv_options *o, int tp, int pp)
{
    const struct mc_pk *ck = m->md.checkpoint_args;
    double wd = 0.01;
    const struct mc_pk *w = mc_pk_get(ck, "weight_decay");
    if (w && w->kind == MC_PK_FLOAT)
        wd = w->f;
    mc_status st = set(d, ns, "tensor_model_parallel_size", mc_pk_int(d, tp));
    st = st ? st : set(d, ns, "pipeline_model_parallel_size", mc_pk_int(d, pp));
    st = st ? st : set_if_present(d, ns, "expert_model_parallel_size", mc_pk_int(d, 1));
    /* validate_args needs world_size divisible by tp * pp: one data-parallel replica */
    st = st ? st : set(d, ns, "world_size", mc_pk_int(d, (int64_t)tp * pp));
    st = st ? st : set_if_present(d, ns, "data_parallel_size", mc_pk_int(d, 1));
    st = st ? st : set_if_present(d, ns, "transformer_pipeline_model_parallel_size", mc_pk_int(d, pp));
    static const char *const nones[] = {"num_layers_per_virtual_pipeline_stage",
                                        "virtual_pipeline_model_parallel_size", "vocab_file",
                                        "tokenizer_model", "recompute_granularity",
                                        "recompute_num_layers", "recompute_method", "train_iters",
                                        "lr_decay_iters", "lr_warmup_fraction",
                                        "tensorboard_dir", NULL};
    for (int k = 0; !st && nones[k]; k++)
        st = set_if_present(d, ns, nones[k], mc_pk_none(d));
    static const char *const trues[] = {"no_load_optim", "no_load_rng", "no_save_optim",
                                        "no_save_rng", "use_cpu_initialization", NULL};
    for (int k = 0; !st && trues[k]; k++)
        st = set(d, ns, trues[k], mc_pk_bool(d, true));
    st = st ? st : set_if_present(d, ns, "perform_initialization", mc_pk_bool(d, false));
    st = st ? st : set_if_present(d, ns, "async_tensor_model_parallel_allreduce", mc_pk_bool(d, false));
    st = st ? st : set_if_present(d, ns, "distribute_saved_activations", mc_pk_bool(d, false));
    st = st ? st : set_if_present(d, ns, "lr_warmup_iters", mc_pk_int(d, 0));
    st = st ? st : set_if_present(d, ns, "start_weight_decay", mc_pk_float(d, wd));
    st = st ? st : set_if_present(d, ns, "end_weight_decay", mc_pk_float(d, wd));
    st = st ? st : set_if_present(d, ns, "encoder_num_layers", mc_pk_int(d, m->md.num_layers));
    st = st ? st : set_if_present(d, ns, "encoder_seq_length", mc_pk_int(d, m->md.seq_length));
    st = st ? st : set(d, ns, "save_interval", mc_pk_int(d, 1));
    st = st ? st : set(d, ns, "save", mc_pk_str(d, o->save_dir));
    st = st ? st : set(d, ns, "ckpt_format", mc_pk_str(d, o->dist_saver ? "torch_dist" : "torch"));
    /* validate_args: use_dist_ckpt = ckpt_format != 'torch' */
    st = st ? st : set_if_present(d, ns, "use_dist_ckpt", mc_pk_bool(d, o->dist_saver));
    /* validate_args on the copied args: --data-path without --split gets the legacy split */
    const struct mc_pk *dp = mc_pk_get(ck, "data_path"), *split = mc_pk_get(ck, "split");
    if (!st && dp && dp->kind != MC_PK_NONE && (!split || split->kind == MC_PK_NONE))
        st = set(d, ns, "split", mc_pk_str(d, "969, 30, 1"));
    return st;
}

/* What parse_megatron_args sets after validating, and the attributes save time adds. */
static mc_status saver_args(mc_pk_doc *d, struct mc_pk *ns, const struct mc_cv_model *m,
                            const struct mc_cv_options *o, int64_t padded_vocab)
{
    const char *impl = o->saver_impl ? o->saver_impl : o->legacy_saver ? "local" : "transformer_engine";
    mc_status st = set(d, ns, "use_legacy_models", mc_pk_bool(d, o->legacy_saver));
    st = st ? st : set(d, ns, "transformer_impl", mc_pk_str(d, impl));
    st = st ? st : set(d, ns, "inference_batch_times_seqlen_threshold", mc_pk_int(d, -1));
    if (o->legacy_saver) { /* saver_legacy.py: sequence_parallel stays the fresh parse's False */
        st = st ? st : set_if_present(d, ns, "sequence_parallel", mc_pk_bool(d, false));
    } else { /* saver_base.parse_megatron_args (core saver) after validate_args */
        if (!st && !strcmp(impl, "local") && !strcmp(m->md.normalization, "RMSNorm"))
            st = set(d, ns, "no_persist_layer_norm", mc_pk_bool(d, true));
        st = st ? st : set(d, ns, "blendable_index_path", mc_pk_none(d));
        st = st ? st : set_if_present(d, ns, "data_path", mc_pk_new(d, MC_PK_LIST));
        st = st ? st : set_if_present(d, ns, "load", mc_pk_none(d));
    }
    st = st ? st : set(d, ns, "padded_vocab_size", mc_pk_int(d, padded_vocab));
    st = st ? st : set(d, ns, "consumed_train_samples", mc_pk_int(d, m->md.consumed_train_samples));
    st = st ? st : set(d, ns, "consumed_valid_samples", mc_pk_int(d, m->md.consumed_valid_samples));
    st = st ? st : set(d, ns, "model_type", mc_pk_enum_member(d, "megatron.core.enums", "ModelType",
                                                              "encoder_or_decoder"));
    return st;
}

/* ---- a HuggingFace source: the saver's command line through our parser ----------------------- */
struct argv {
    char *v[96];
    char buf[96][48];
    int n;
};

static void add(struct argv *a, const char *opt, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(struct argv *a, const char *opt, const char *fmt, ...)
{
    if (a->n + 2 > 96)
        return;
    a->v[a->n++] = (char *)opt;
    if (!fmt)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->buf[a->n], sizeof(a->buf[a->n]), fmt, ap);
    va_end(ap);
    a->v[a->n] = a->buf[a->n];
    a->n++;
}

static void model_argv(struct argv *a, const struct mc_cv_meta *md, int tp, int pp)
{
    add(a, "--num-layers", "%lld", (long long)md->num_layers);
    add(a, "--hidden-size", "%lld", (long long)md->hidden_size);
    add(a, "--ffn-hidden-size", "%lld", (long long)md->ffn_hidden_size);
    add(a, "--num-attention-heads", "%lld", (long long)md->num_attention_heads);
    if (md->kv_channels != md->hidden_size / md->num_attention_heads)
        add(a, "--kv-channels", "%lld", (long long)md->kv_channels);
    if (md->num_query_groups != md->num_attention_heads) {
        add(a, "--group-query-attention", NULL);
        add(a, "--num-query-groups", "%lld", (long long)md->num_query_groups);
    }
    add(a, "--seq-length", "%lld", (long long)md->seq_length);
    add(a, "--max-position-embeddings", "%lld", (long long)md->max_position_embeddings);
    add(a, "--position-embedding-type", "%s", md->position_embedding_type);
    add(a, "--normalization", "%s", md->normalization);
    add(a, "--norm-epsilon", "%.17g", md->norm_epsilon);
    add(a, "--tokenizer-type", "%s", md->tokenizer_type);
    add(a, "--tensor-model-parallel-size", "%d", tp);
    add(a, "--pipeline-model-parallel-size", "%d", pp);
    add(a, "--make-vocab-size-divisible-by", "%lld", (long long)md->make_vocab_size_divisible_by);
    if (md->swiglu)
        add(a, "--swiglu", NULL);
    if (!md->linear_bias)
        add(a, "--disable-bias-linear", NULL);
    if (md->qkv_bias && !md->linear_bias)
        add(a, "--add-qkv-bias", NULL);
    if (md->untied)
        add(a, "--untie-embeddings-and-output-weights", NULL);
    if (!md->gelu_tanh && !md->swiglu && md->linear_bias)
        add(a, "--no-bias-gelu-fusion", NULL);
    if (!strcmp(md->position_embedding_type, "rope")) {
        add(a, "--rotary-base", "%.17g", md->rotary_base);
        add(a, "--rotary-percent", "%.17g", md->rotary_percent);
        if (md->use_rope_scaling) {
            add(a, "--use-rope-scaling", NULL);
            add(a, "--rope-scaling-factor", "%.17g", md->rope_scaling_factor);
        }
    }
    if (md->params_dtype == MC_DTYPE_BF16)
        add(a, "--bf16", NULL);
    else if (md->params_dtype == MC_DTYPE_F16)
        add(a, "--fp16", NULL);
}

/* The args Megatron's llama_mistral loader builds (its command line, load_args_from_checkpoint's
 * values, validate_args at tp 1, pp 1); they play the source checkpoint's args for the saver. */
mc_status mc_cv_hf_source_args(mc_pk_doc *d, const struct mc_cv_meta *md, const char *load_dir,
                               int64_t hf_vocab, struct mc_pk **out)
{
    struct argv a = {.n = 0};
    a.v[a.n++] = (char *)"convert_checkpoint";
    model_argv(&a, md, 1, 1);
    static const char *const flags[] = {"--no-masked-softmax-fusion", "--no-bias-dropout-fusion",
                                        "--no-async-tensor-model-parallel-allreduce",
                                        "--use-cpu-initialization", "--no-load-optim",
                                        "--no-load-rng", "--no-save-optim", "--no-save-rng",
                                        "--mock-data", "--no-initialization", "--no-one-logger", NULL};
    for (int k = 0; flags[k]; k++)
        add(&a, flags[k], NULL);
    if (md->swiglu) /* the llama_mistral loader's command line (GPT-2: only for erf-GELU) */
        add(&a, "--no-bias-gelu-fusion", NULL);
    add(&a, "--micro-batch-size", "1");
    add(&a, "--global-batch-size", "1024");
    a.v[a.n++] = (char *)"--load";
    a.v[a.n++] = (char *)load_dir;
    struct mc_args *args;
    mc_status st = mc_args_init(&args);
    if (st)
        return st;
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    st = mc_args_parse(args, a.n, a.v);
    if (!st) {
        mc_args_set_int(args, MC_A_world_size, 1);
        mc_args_set_int(args, MC_A_vocab_size, hf_vocab);
        st = mc_args_validate(args, defaults, NULL, NULL);
    }
    if (st) {
        st = mc_error(MC_ERR_CONFIG, "--load-dir %s: the model's Megatron arguments do not validate: "
                      "%s%s%s", load_dir, args->err_kind ? args->err_kind : "",
                      args->err_kind ? ": " : "", args->err);
        goto out;
    }
    struct mc_pk *ns = mc_pk_new(d, MC_PK_NAMESPACE);
    for (int i = 0; ns && !st && i < MC_A_COUNT; i++) {
        struct mc_val v = args->v[i];
        if (i == MC_A_num_query_groups && !mc_args_bool(args, MC_A_group_query_attention))
            v = args->v[MC_A_num_attention_heads];
        if (!args->deleted[i])
            st = mc_pk_set(d, ns, mc_arg_defs[i].dest, mc_ckpt_arg_value(d, &v));
    }
    *out = ns;
    st = st ? st : ns ? MC_OK : MC_ERR_NOMEM;
out:
    mc_args_free(args);
    return st;
}

/* ---- both ------------------------------------------------------------------------------------- */
/* An attribute of Megatron's parser (or one validate_args sets): _load_checkpoint_args copies only
 * those ("Checkpoint had argument X but new arguments does not have this"), so the run-time
 * attributes a training run adds (iteration, do_train, ...) and megatron.c's own options are
 * dropped. */
static bool megatron_arg(const char *dest)
{
    for (int i = 0; i < MC_A_COUNT; i++)
        if (!strcmp(mc_arg_defs[i].dest, dest))
            return mc_arg_defs[i].support != MC_ARG_EXTENSION;
    return false;
}

static mc_status copy_namespace(mc_pk_doc *d, const struct mc_pk *src, struct mc_pk **out)
{
    struct mc_pk *ns = mc_pk_new(d, MC_PK_NAMESPACE);
    for (int64_t i = 0; ns && i + 1 < src->n; i += 2)
        if (src->items[i]->kind == MC_PK_STR && megatron_arg(src->items[i]->s) &&
            mc_pk_set(d, ns, src->items[i]->s, src->items[i + 1]))
            return MC_ERR_NOMEM;
    *out = ns;
    return ns ? MC_OK : MC_ERR_NOMEM;
}

mc_status mc_cv_target_args(mc_pk_doc *doc, const struct mc_cv_model *m,
                            const struct mc_cv_options *o, int tp, int pp, int64_t padded_vocab,
                            struct mc_pk **out)
{
    if (!m->md.checkpoint_args)
        return mc_error(MC_ERR_INTERNAL, "mc_cv_target_args: the loader left no source args");
    mc_status st = copy_namespace(doc, m->md.checkpoint_args, out);
    st = st ? st : kept_args(doc, *out, m, o, tp, pp);
    return st ? st : saver_args(doc, *out, m, o, padded_vocab);
}

mc_status mc_cv_state_dict(mc_pk_doc *doc, struct mc_pk *sd, struct mc_pk *args,
                           struct mc_pk *model, int64_t iteration)
{
    mc_status st = mc_pk_set(doc, sd, "args", args);
    st = st ? st : mc_pk_set(doc, sd, "checkpoint_version", mc_pk_float(doc, 3.0));
    st = st ? st : mc_pk_set(doc, sd, "iteration", mc_pk_int(doc, iteration));
    st = st ? st : mc_pk_set(doc, sd, "model", model);
    /* the converter's rerun state machine never ran an iteration */
    struct mc_pk *rerun = st ? NULL : mc_ckpt_rerun_state(doc, -1);
    st = st ? st : rerun ? mc_pk_set(doc, sd, "rerun_state_machine", rerun) : MC_ERR_NOMEM;
    st = st ? st : mc_pk_set(doc, sd, "num_floating_point_operations_so_far", mc_pk_int(doc, 0));
    return st;
}
