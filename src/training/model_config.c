/* Model and optimizer configs from the command line: mirrors model_provider() of
 * pretrain_gpt.py and core_transformer_config_from_args() of megatron/training/arguments.py
 * (core_v0.12.1) for the local layer spec: SwiGLU -> gated SiLU, squared ReLU, the default
 * fused bias-GELU (tanh approximation) unless --no-bias-gelu-fusion or no linear bias, GQA
 * groups only with --group-query-attention. */
#include "training/model_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define A(x) MC_A_##x

static mc_status position_type(const struct mc_args *a, enum mc_position_embedding *out)
{
    const char *pe = mc_args_str(a, A(position_embedding_type));
    if (!strcmp(pe, "learned_absolute"))
        *out = MC_POS_LEARNED_ABSOLUTE;
    else if (!strcmp(pe, "rope"))
        *out = MC_POS_ROPE;
    else if (!strcmp(pe, "none") || !strcmp(pe, "alibi")) /* alibi: no embedding-level positions */
        *out = MC_POS_NONE;
    else
        return mc_error(MC_ERR_UNSUPPORTED, "--position-embedding-type %s is not supported by "
                        "megatron.c yet", pe);
    return MC_OK;
}

/* MindSpeed-LLM's --rope-scaling-type llama3 (rotary_embedding_init_wrapper ->
 * apply_llama3_scaling): Megatron's Llama-3 bands with the script's own constants. The other
 * variants (yarn, longrope, plm) are refused; a missing constant (a TypeError in MindSpeed) and
 * --use-rope-scaling on top (MindSpeed would scale Megatron's already-scaled frequencies
 * again) are refused with the option named. */
static mc_status mindspeed_rope_scaling(const struct mc_args *a, struct mc_gpt_config *cfg)
{
    const char *type = mc_args_str(a, A(rope_scaling_type));
    if (!type)
        return MC_OK;
    if (strcmp(type, "llama3"))
        return mc_error(MC_ERR_UNSUPPORTED, "--rope-scaling-type %s: only llama3 is supported by "
                        "megatron.c yet (MindSpeed-LLM also has yarn, longrope, plm)", type);
    if (cfg->position_embedding_type != MC_POS_ROPE)
        return mc_error(MC_ERR_CONFIG, "--rope-scaling-type llama3 needs "
                        "--position-embedding-type rope");
    if (mc_args_bool(a, A(use_rope_scaling)))
        return mc_error(MC_ERR_CONFIG, "--rope-scaling-type llama3 with --use-rope-scaling: "
                        "MindSpeed-LLM would apply the Llama-3 scaling twice; give one of them");
    static const enum mc_arg_id need[3] = {A(low_freq_factor), A(high_freq_factor),
                                           A(original_max_position_embeddings)};
    for (int i = 0; i < 3; i++)
        if (mc_args_is_none(a, need[i]))
            return mc_error(MC_ERR_CONFIG, "--rope-scaling-type llama3 needs %s",
                            mc_arg_defs[need[i]].opt);
    double lo = mc_args_float(a, need[0]), hi = mc_args_float(a, need[1]);
    double old = mc_args_float(a, need[2]);
    if (!(lo > 0.0) || !(hi > lo) || !(old > 0.0))
        return mc_error(MC_ERR_CONFIG, "--low-freq-factor %g, --high-freq-factor %g, "
                        "--original-max-position-embeddings %g: need 0 < low < high and a "
                        "positive length", lo, hi, old);
    cfg->use_rope_scaling = true;
    cfg->rope_low_freq_factor = (float)lo;
    cfg->rope_high_freq_factor = (float)hi;
    cfg->rope_original_max_position = (float)old;
    return MC_OK;
}

mc_status mc_num_layer_list_from_args(const struct mc_args *a, struct mc_gpt_config *cfg)
{
    const char *s = mc_args_str(a, A(num_layer_list));
    cfg->n_num_layer_list = 0;
    if (!s || !*s) /* MindSpeed tests the string's truth: "" is off */
        return MC_OK;
    for (const char *p = s;; p++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64], *stop;
        snprintf(item, sizeof(item), "%.*s", (int)(len < sizeof(item) ? len : sizeof(item) - 1), p);
        long long v = strtoll(item, &stop, 10);
        while (*stop == ' ' || *stop == '\t')
            stop++;
        if (len == 0 || len >= sizeof(item) || stop == item || *stop)
            return mc_error(MC_ERR_CONFIG, "--num-layer-list %s: invalid literal for int() with "
                            "base 10: '%.*s'", s, (int)len, p);
        if (cfg->n_num_layer_list == MC_GPT_MAX_PIPELINE)
            return mc_error(MC_ERR_UNSUPPORTED, "--num-layer-list: more than %d stages",
                            MC_GPT_MAX_PIPELINE);
        cfg->num_layer_list[cfg->n_num_layer_list++] = v;
        if (!end)
            return MC_OK;
        p = end;
    }
}

static enum mc_activation activation(const struct mc_args *a)
{
    if (mc_args_bool(a, A(swiglu)))
        return MC_ACT_SWIGLU;
    if (mc_args_bool(a, A(squared_relu)))
        return MC_ACT_SQUARED_RELU;
    /* Megatron's MLP uses bias_gelu_impl (tanh approximation) when bias-activation fusion is on;
     * validate_args turns it off without linear bias. */
    return mc_args_bool(a, A(bias_gelu_fusion)) ? MC_ACT_GELU_TANH : MC_ACT_GELU_ERF;
}

/* --recompute-granularity/-method/-num-layers, --recompute-modules (default ["core_attn"];
 * "layernorm" is what megatron.c always does: the norm outputs are never kept), and
 * --distribute-saved-activations: TransformerConfig's recompute fields. */
static mc_status recompute_from_args(const struct mc_args *a, struct mc_gpt_config *cfg)
{
    const char *g = mc_args_str(a, A(recompute_granularity));
    cfg->recompute_granularity = !g ? MC_RECOMPUTE_NONE
                                 : !strcmp(g, "full") ? MC_RECOMPUTE_FULL : MC_RECOMPUTE_SELECTIVE;
    const char *meth = mc_args_str(a, A(recompute_method));
    cfg->recompute_method = meth && !strcmp(meth, "block") ? MC_RECOMPUTE_BLOCK
                                                           : MC_RECOMPUTE_UNIFORM;
    if (cfg->recompute_granularity == MC_RECOMPUTE_FULL && !meth)
        return mc_error(MC_ERR_CONFIG, "Using recompute_granularity: full so recompute_method "
                        "must be \"block\" or \"uniform\"");
    cfg->recompute_num_layers = mc_args_is_none(a, A(recompute_num_layers))
                                    ? 0 : mc_args_int(a, A(recompute_num_layers));
    if (cfg->recompute_granularity != MC_RECOMPUTE_FULL && cfg->recompute_num_layers)
        return mc_error(MC_ERR_CONFIG, "When using recompute_granularity: %s "
                        "recompute_num_layers must be None.", g ? g : "None");
    cfg->distribute_saved_activations = mc_args_bool(a, A(distribute_saved_activations));
    const struct mc_val *mods = &a->v[A(recompute_modules)];
    cfg->recompute_core_attention = mods->kind != MC_V_LIST;
    for (int k = 0; mods->kind == MC_V_LIST && k < mods->n; k++) {
        const char *mod = mods->items[k].s ? mods->items[k].s : "";
        if (!strcmp(mod, "core_attn"))
            cfg->recompute_core_attention = true;
        else if (strcmp(mod, "layernorm") != 0 && cfg->recompute_granularity ==
                                                       MC_RECOMPUTE_SELECTIVE)
            return mc_error(MC_ERR_UNSUPPORTED, "--recompute-modules %s: megatron.c recomputes "
                            "core_attn (and always the layernorms) selectively; %s is not "
                            "supported yet", mod, mod);
    }
    return MC_OK;
}

void mc_recompute_describe(const struct mc_gpt_config *c, int64_t layers, char *buf, size_t n)
{
    int64_t k = c->recompute_num_layers, kept = k < layers ? k : layers;
    if (c->recompute_granularity == MC_RECOMPUTE_SELECTIVE && c->flash_attention) {
        snprintf(buf, n, "selective: nothing (flash attention keeps no attention "
                 "probabilities; the layernorm outputs are never kept)");
        return;
    }
    if (c->recompute_granularity == MC_RECOMPUTE_SELECTIVE) {
        snprintf(buf, n, "selective: %s", c->recompute_core_attention
                 ? "core attention rerun in backward, no layer keeps its [b, np, s, s] "
                   "attention probabilities"
                 : "nothing (--recompute-modules without core_attn; the layernorm outputs are "
                   "never kept)");
        return;
    }
    if (c->recompute_granularity == MC_RECOMPUTE_NONE) {
        snprintf(buf, n, "none: every layer keeps its activations for backward");
        return;
    }
    int w;
    if (c->recompute_method == MC_RECOMPUTE_UNIFORM)
        w = snprintf(buf, n, "full, uniform: the %lld layers of each model chunk in groups of "
                     "%lld, each group's input kept and the group rerun before its backward "
                     "(%lld kept inputs, a shared work area of %lld layers)", (long long)layers,
                     (long long)k, (long long)((layers + k - 1) / k), (long long)kept);
    else
        w = snprintf(buf, n, "full, block: the first %lld of the %lld layers of each model chunk "
                     "rerun one by one before their backward from their kept inputs, the other "
                     "%lld keep their activations", (long long)kept, (long long)layers,
                     (long long)(layers - kept));
    if (c->distribute_saved_activations && w > 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, "; each tensor-parallel rank keeps 1/%d of every kept "
                 "input", c->tensor_model_parallel_size);
}


/* Mixture of experts (transformer/moe/, docs/moe.md): validate_args turns --num-experts 0 into
 * None; --moe-layer-freq N makes every N-th layer from 0 a MoE layer, a list names each. */
/* Which kernel core attention runs (docs/flash-attention.md has the table). Megatron's local
 * spec builds DotProductAttention whatever --attention-backend says, as does the legacy
 * ParallelAttention (CoreAttention) unless --use-flash-attn; the Transformer-Engine spec's
 * TEDotProductAttention picks by the NVTE_* switches that --attention-backend sets
 * (LanguageModule._set_attention_backend): auto lets TE take its first choice, flash attention;
 * fused is cuDNN's fused attention, the same tiled algorithm, which here is the flash op too;
 * unfused is TE's UnfusedDotProductAttention, the same formula as the local one. The legacy
 * model with --transformer-impl transformer_engine is TE's TransformerLayer, which never reads
 * --attention-backend (TE's own default: flash). --use-flash-attn (legacy FlashSelfAttention,
 * MindSpeed-LLM's fused attention under any spec) is flash everywhere. Unlike TE on a GPU, fp32
 * takes the flash op too (TE keeps fp32 on its unfused kernel: COMPATIBILITY.md). */
bool mc_attention_from_args(const struct mc_args *a, const char **why)
{
    const char *be = mc_args_str(a, A(attention_backend)), *w;
    bool te = !strcmp(mc_args_str(a, A(transformer_impl)), "transformer_engine"), flash;
    be = be && !strncmp(be, "AttnBackend.", 12) ? be + 12 : "auto";
    if (mc_args_bool(a, A(use_flash_attn)))
        flash = true, w = "--use-flash-attn";
    else if (!te)
        flash = false, w = mc_args_bool(a, A(use_legacy_models))
                               ? "--transformer-impl local, the legacy model's CoreAttention"
                               : "--transformer-impl local, the local spec's DotProductAttention";
    else if (mc_args_bool(a, A(use_legacy_models)))
        flash = true, w = "--transformer-impl transformer_engine with --use-legacy-models: TE's "
                          "TransformerLayer, which reads no --attention-backend";
    else if (!strcmp(be, "local")) /* validate_args: only with --spec local */
        flash = false, w = "--attention-backend local: the local spec's DotProductAttention";
    else if (!strcmp(be, "unfused"))
        flash = false, w = "--attention-backend unfused: TE's UnfusedDotProductAttention";
    else if (!strcmp(be, "fused"))
        flash = true, w = "--attention-backend fused: TE's fused attention, the same tiled "
                          "algorithm";
    else
        flash = true, w = !strcmp(be, "flash") ? "--attention-backend flash"
                                               : "--attention-backend auto: TE's first choice";
    if (why)
        *why = w;
    return flash;
}

static mc_status moe_from_args(const struct mc_args *a, struct mc_gpt_config *cfg)
{
    if (mc_args_is_none(a, A(num_experts)) || mc_args_int(a, A(num_experts)) == 0)
        return MC_OK;
    cfg->num_moe_experts = mc_args_int(a, A(num_experts));
    cfg->moe_router_topk = mc_args_int(a, A(moe_router_topk));
    cfg->moe_ffn_hidden_size = mc_args_is_none(a, A(moe_ffn_hidden_size))
                                   ? 0 : mc_args_int(a, A(moe_ffn_hidden_size));
    const char *lb = mc_args_str(a, A(moe_router_load_balancing_type));
    cfg->moe_router_load_balancing_type = !strcmp(lb, "seq_aux_loss") ? MC_MOE_SEQ_AUX_LOSS
                                          : !strcmp(lb, "none")       ? MC_MOE_BALANCE_NONE
                                                                      : MC_MOE_AUX_LOSS;
    cfg->moe_router_score_function = !strcmp(mc_args_str(a, A(moe_router_score_function)),
                                             "sigmoid") ? MC_MOE_SIGMOID : MC_MOE_SOFTMAX;
    cfg->moe_router_pre_softmax = mc_args_bool(a, A(moe_router_pre_softmax));
    cfg->moe_aux_loss_coeff = (float)mc_args_float(a, A(moe_aux_loss_coeff));
    cfg->moe_z_loss_coeff = mc_args_is_none(a, A(moe_z_loss_coeff))
                                ? 0.0f : (float)mc_args_float(a, A(moe_z_loss_coeff));
    cfg->calculate_per_token_loss = mc_args_bool(a, A(calculate_per_token_loss));
    int64_t L = cfg->num_layers;
    if (L > MC_MOE_MAX_LAYERS)
        return mc_error(MC_ERR_UNSUPPORTED, "--num-experts with --num-layers %lld: megatron.c "
                        "takes at most %d layers with mixture of experts", (long long)L,
                        MC_MOE_MAX_LAYERS);
    const struct mc_val *f = &a->v[A(moe_layer_freq)];
    if (f->kind == MC_V_LIST && f->n != L) { /* gpt_layer_specs.py's assertion, list as Python prints it */
        char pat[512];
        size_t len = 0;
        for (int k = 0; k < f->n && len + 24 < sizeof(pat); k++)
            len += (size_t)snprintf(pat + len, sizeof(pat) - len, "%s%lld", k ? ", " : "[",
                                    (long long)f->items[k].i);
        snprintf(pat + len, sizeof(pat) - len, "%s", f->n ? "]" : "[]");
        return mc_error(MC_ERR_CONFIG, "Invalid length of moe_layer_pattern: %d, expected %lld, "
                        "current moe layer pattern: %s", f->n, (long long)L, pat);
    }
    if (f->kind != MC_V_LIST && f->i < 1)
        return mc_error(MC_ERR_CONFIG, "--moe-layer-freq %lld: expected a positive integer "
                        "(Megatron divides by it)", (long long)f->i);
    for (int64_t l = 0; l < L; l++) {
        bool moe = f->kind == MC_V_LIST ? f->items[l].i != 0 : l % f->i == 0;
        if (moe)
            cfg->moe_layer_mask[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return MC_OK;
}

mc_status mc_gpt_config_from_args(const struct mc_args *a, int64_t vocab_size,
                                  int64_t padded_vocab_size, int tp_rank, struct mc_gpt_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    if (mc_args_bool(a, A(openai_gelu)))
        return mc_error(MC_ERR_UNSUPPORTED, "--openai-gelu is not supported by megatron.c yet");
    if (mc_args_bool(a, A(apply_residual_connection_post_layernorm)))
        return mc_error(MC_ERR_UNSUPPORTED, "--apply-residual-connection-post-layernorm is not "
                        "supported by megatron.c yet");
    mc_status st = position_type(a, &cfg->position_embedding_type);
    if (st != MC_OK)
        return st;
    cfg->num_layers = mc_args_int(a, A(num_layers));
    cfg->hidden_size = mc_args_int(a, A(hidden_size));
    cfg->num_attention_heads = mc_args_int(a, A(num_attention_heads));
    cfg->num_query_groups = mc_args_bool(a, A(group_query_attention))
                                ? mc_args_int(a, A(num_query_groups)) : 0;
    cfg->kv_channels = mc_args_int(a, A(kv_channels));
    cfg->ffn_hidden_size = mc_args_int(a, A(ffn_hidden_size));
    cfg->vocab_size = vocab_size;
    cfg->padded_vocab_size = padded_vocab_size;
    cfg->make_vocab_size_divisible_by = mc_args_int(a, A(make_vocab_size_divisible_by));
    cfg->max_position_embeddings = mc_args_int(a, A(max_position_embeddings));
    cfg->seq_length = mc_args_int(a, A(seq_length));
    cfg->micro_batch_size = mc_args_int(a, A(micro_batch_size));
    cfg->layernorm_zero_centered_gamma = mc_args_bool(a, A(apply_layernorm_1p));
    /* Megatron's legacy model (ParallelAttention) has no q/k layernorm and ignores the flag */
    cfg->qk_layernorm = mc_args_bool(a, A(qk_layernorm)) && !mc_args_bool(a, A(use_legacy_models));
    cfg->normalization = !strcmp(mc_args_str(a, A(normalization)), "RMSNorm") ? MC_NORM_RMSNORM
                                                                              : MC_NORM_LAYERNORM;
    cfg->norm_epsilon = (float)mc_args_float(a, A(norm_epsilon));
    cfg->rotary_percent = (float)mc_args_float(a, A(rotary_percent));
    cfg->rotary_base = (float)mc_args_int(a, A(rotary_base));
    cfg->rotary_interleaved = mc_args_bool(a, A(rotary_interleaved));
    cfg->use_rope_scaling = mc_args_bool(a, A(use_rope_scaling));
    cfg->rope_scaling_factor = (float)mc_args_float(a, A(rope_scaling_factor));
    if ((st = mindspeed_rope_scaling(a, cfg)) != MC_OK)
        return st;
    cfg->activation = activation(a);
    cfg->add_bias_linear = mc_args_bool(a, A(add_bias_linear));
    cfg->add_qkv_bias = mc_args_bool(a, A(add_qkv_bias));
    cfg->apply_query_key_layer_scaling = mc_args_bool(a, A(apply_query_key_layer_scaling));
    cfg->attention_softmax_in_fp32 = mc_args_bool(a, A(attention_softmax_in_fp32));
    cfg->flash_attention = mc_attention_from_args(a, NULL);
    /* get_batch's mask is only ever not causal with --reset-attention-mask (train_data.c) */
    cfg->causal_mask_only = !mc_args_bool(a, A(reset_attention_mask));
    cfg->sliding_window = mc_args_is_none(a, A(sliding_window)) ? 0 : mc_args_int(a, A(sliding_window));
    if (!mc_args_is_none(a, A(sliding_window)) && cfg->sliding_window <= 0)
        return mc_error(MC_ERR_CONFIG, "--sliding-window %lld: expected a positive number of keys",
                        (long long)cfg->sliding_window);
    /* MindSpeed-LLM's ALiBi; --square-alibi-mask / --fill-neg-inf mean nothing without it */
    if (!strcmp(mc_args_str(a, A(position_embedding_type)), "alibi")) {
        cfg->alibi = mc_args_bool(a, A(square_alibi_mask)) ? MC_ALIBI_SQUARE : MC_ALIBI_ROW;
        cfg->alibi_fill_neg_inf = mc_args_bool(a, A(fill_neg_inf));
    }
    cfg->untie_embeddings_and_output_weights = mc_args_bool(a, A(untie_embeddings_and_output_weights));
    cfg->fp32_residual_connection = mc_args_bool(a, A(fp32_residual_connection));
    cfg->hidden_dropout = (float)mc_args_float(a, A(hidden_dropout));
    cfg->attention_dropout = (float)mc_args_float(a, A(attention_dropout));
    cfg->init_method_std = (float)mc_args_float(a, A(init_method_std));
    cfg->seed = (uint64_t)mc_args_int(a, A(seed));
    const char *dt = mc_args_str(a, A(params_dtype));
    cfg->params_dtype = !strcmp(dt, "torch.bfloat16") ? MC_DTYPE_BF16
                        : !strcmp(dt, "torch.float16") ? MC_DTYPE_F16 : MC_DTYPE_F32;
    /* DDP's grad_reduce_in_fp32 = accumulate_allreduce_grads_in_fp32, else params' dtype
     * (fp16, or bf16 with --grad-reduce-in-bf16: validate_args turns the accumulation off) */
    cfg->grad_dtype = cfg->params_dtype != MC_DTYPE_F32 &&
                      !mc_args_bool(a, A(accumulate_allreduce_grads_in_fp32)) ? cfg->params_dtype
                                                                             : MC_DTYPE_F32;
    cfg->tensor_model_parallel_size = (int)mc_args_int(a, A(tensor_model_parallel_size));
    cfg->tensor_model_parallel_rank = tp_rank;
    cfg->sequence_parallel = mc_args_bool(a, A(sequence_parallel)); /* off with tp 1 (validate) */
    /* uneven pipeline stages (TransformerConfig's num_layers_in_first/last_pipeline_stage);
     * a given value <= 0 is TransformerConfig's ValueError */
    static const enum mc_arg_id edge[2] = {A(decoder_first_pipeline_num_layers),
                                           A(decoder_last_pipeline_num_layers)};
    for (int i = 0; i < 2; i++) {
        if (mc_args_is_none(a, edge[i]))
            continue;
        int64_t n = mc_args_int(a, edge[i]);
        if (n <= 0)
            return mc_error(MC_ERR_CONFIG, "num_layers_in_%s_pipeline_stage must be larger than 0",
                            i ? "last" : "first");
        *(i ? &cfg->num_layers_in_last_pipeline_stage : &cfg->num_layers_in_first_pipeline_stage) = n;
    }
    if ((st = mc_num_layer_list_from_args(a, cfg)) != MC_OK)
        return st;
    if ((st = moe_from_args(a, cfg)) != MC_OK)
        return st;
    return recompute_from_args(a, cfg);
}

void mc_opt_config_from_args(const struct mc_args *a, struct mc_optimizer_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->optimizer = !strcmp(mc_args_str(a, A(optimizer)), "sgd") ? MC_OPT_SGD : MC_OPT_ADAM;
    cfg->adam_beta1 = (float)mc_args_float(a, A(adam_beta1));
    cfg->adam_beta2 = (float)mc_args_float(a, A(adam_beta2));
    cfg->adam_eps = (float)mc_args_float(a, A(adam_eps));
    cfg->sgd_momentum = (float)mc_args_float(a, A(sgd_momentum));
    cfg->clip_grad = (float)mc_args_float(a, A(clip_grad));
    cfg->fp16 = mc_args_bool(a, A(fp16));
    cfg->bf16 = mc_args_bool(a, A(bf16));
    cfg->loss_scale = mc_args_is_none(a, A(loss_scale)) ? 0.0 : mc_args_float(a, A(loss_scale));
    cfg->initial_loss_scale = mc_args_float(a, A(initial_loss_scale));
    cfg->min_loss_scale = mc_args_float(a, A(min_loss_scale));
    cfg->loss_scale_window = mc_args_float(a, A(loss_scale_window));
    cfg->hysteresis = mc_args_int(a, A(hysteresis));
    /* validate.c maps the dtype options to torch dtype names; fp8 (torch.uint8) is refused
     * before this (refusals.c), mc_opt_config_check names it otherwise */
    cfg->precision_aware = mc_args_bool(a, A(use_precision_aware_optimizer));
    enum mc_dtype *dts[3] = {&cfg->main_params_dtype, &cfg->exp_avg_dtype,
                             &cfg->exp_avg_sq_dtype};
    const char *d[3] = {mc_args_str(a, A(main_params_dtype)), mc_args_str(a, A(exp_avg_dtype)),
                        mc_args_str(a, A(exp_avg_sq_dtype))};
    for (int i = 0; i < 3; i++)
        *dts[i] = !strcmp(d[i], "torch.float16") ? MC_DTYPE_F16
                  : !strcmp(d[i], "torch.bfloat16") ? MC_DTYPE_BF16
                  : !strcmp(d[i], "torch.uint8") ? MC_DTYPE_U8 : MC_DTYPE_F32;
}
