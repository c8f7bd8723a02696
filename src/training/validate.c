/* validate_args: every rule, derived value and rank-0 message of validate_args() in
 * megatron/training/arguments.py (Megatron-LM core_v0.12.1), in Megatron's order (the first
 * failure wins). Rules that only concern CUDA hardware or optional packages do not apply on a
 * CPU; docs/cli-differences.md lists them with every other deliberate difference. */
#include "training/validate.h"

#include <stdarg.h>
#include <string.h>

#include "training/recompute_budget.h"

#define V(x) MC_A_##x

struct vctx {
    struct mc_args *a;
    FILE *out;  /* rank 0's stdout, or NULL */
    FILE *warn;
};

static mc_status fail(struct mc_args *a, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static mc_status fail(struct mc_args *a, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof(a->err), fmt, ap);
    va_end(ap);
    a->err_kind = kind;
    a->exit_code = 1;
    return mc_error(MC_ERR_CONFIG, "%s: %s", kind ? kind : "exit", a->err);
}

/* Megatron's `assert cond, msg`; msg "" is a bare assert. */
#define REQUIRE(cond, ...)                                                  \
    do {                                                                    \
        if (!(cond))                                                        \
            return fail(c->a, "AssertionError", __VA_ARGS__);               \
    } while (0)
#define BARE "%s", ""

static void say(struct vctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct vctx *c, const char *fmt, ...)
{
    if (!c->out || mc_args_int(c->a, V(rank)) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(c->out, fmt, ap);
    va_end(ap);
    fputc('\n', c->out);
}

#define I(x) mc_args_int(c->a, V(x))
#define F(x) mc_args_float(c->a, V(x))
#define B(x) mc_args_bool(c->a, V(x))
#define S(x) mc_args_str(c->a, V(x))
#define NONE(x) mc_args_is_none(c->a, V(x))
#define TRUTHY(x) mc_args_truthy(c->a, V(x))

static bool str_is(const char *s, const char *want) { return s && !strcmp(s, want); }

/* Steps 1-13 of the spec: checkpoint type, layout and world size. */
static mc_status check_layout(struct vctx *c)
{
    struct mc_args *a = c->a;
    const char *npc = S(non_persistent_ckpt_type);
    REQUIRE(!npc || str_is(npc, "global") || str_is(npc, "local"),
            "Currently only global and local checkpoints are supported");
    if (str_is(npc, "local"))
        return fail(a, "RuntimeError", "nvidia_resiliency_ext is required for local checkpointing");
    if (!NONE(heterogeneous_layers_config_path) || !NONE(heterogeneous_layers_config_encoded_json))
        return fail(a, "NotImplementedError", "--heterogeneous-layers-config-path/-encoded-json "
                    "is not supported by megatron.c yet");
    if (!NONE(retro_project_dir))
        return fail(a, "NotImplementedError", "--retro-project-dir is not supported by megatron.c "
                    "yet");
    if (B(use_legacy_models))
        REQUIRE(str_is(S(ckpt_format), "torch"),
                "legacy model format only supports the 'torch' checkpoint format.");
    mc_args_set_bool(a, V(use_dist_ckpt), !str_is(S(ckpt_format), "torch"));

    int64_t tp = I(tensor_model_parallel_size), pp = I(pipeline_model_parallel_size);
    int64_t cp = I(context_parallel_size), ws = I(world_size);
    if (I(encoder_pipeline_model_parallel_size) == 0 && !NONE(num_experts) && I(num_experts) == 0)
        REQUIRE(I(encoder_tensor_model_parallel_size) == tp,
                "If non-MOE encoder shares first decoder pipeline rank it must have the same TP "
                "as the decoder.");
    if (I(encoder_tensor_model_parallel_size) > 0) {
        if (NONE(num_attention_heads))
            return fail(a, "TypeError", "unsupported operand type(s) for %%: 'NoneType' and 'int'");
        REQUIRE(I(num_attention_heads) % I(encoder_tensor_model_parallel_size) == 0, BARE);
        REQUIRE(I(encoder_tensor_model_parallel_size) <= tp,
                "We do not support encoders with more TP than the decoder.");
    }
    if (I(encoder_pipeline_model_parallel_size) > 0 && I(encoder_tensor_model_parallel_size) == 0)
        mc_args_set_int(a, V(encoder_tensor_model_parallel_size), tp);
    int64_t enc = I(encoder_tensor_model_parallel_size) * I(encoder_pipeline_model_parallel_size) * cp;
    int64_t dec = tp * pp * cp;
    REQUIRE(enc + dec > 0 && ws % (enc + dec) == 0,
            "world size (%lld) is not divisible by total_model_size (encoder_model_size=%lld + "
            "decoder_model_size=%lld)", (long long)ws, (long long)enc, (long long)dec);
    if (str_is(S(attention_backend), "AttnBackend.local")) {
        const struct mc_val *spec = &a->v[V(spec)];
        REQUIRE(spec->kind == MC_V_LIST && spec->n > 0 && str_is(spec->items[0].s, "local"),
                "--attention-backend local is only supported with --spec local");
    }
    mc_args_set_int(a, V(transformer_pipeline_model_parallel_size), pp);
    mc_args_set_int(a, V(data_parallel_size), ws / (enc + dec));
    char hcp[256];
    mc_py_str(hcp, sizeof(hcp), &a->v[V(hierarchical_context_parallel_sizes)]);
    /* validate_yaml's own line (--yaml-cfg); Megatron's lacks the ", " before
     * "tensor-model-parallel" (a typo, fixed here as in the line below). */
    if (!NONE(yaml_cfg)) {
        say(c, "using world size: %lld, data-parallel size: %lld, context-parallel size: %lld, "
               "tensor-model-parallel size: %lld, pipeline-model-parallel size: %lld",
            (long long)ws, (long long)I(data_parallel_size), (long long)cp, (long long)tp,
            (long long)pp);
    } else {
        /* Megatron's line lacks the ", " after the hierarchical sizes (a typo, fixed here). */
        say(c, "using world size: %lld, data-parallel size: %lld, context-parallel size: %lld, "
               "hierarchical context-parallel sizes: %s, tensor-model-parallel size: %lld, "
               "encoder-tensor-model-parallel size: %lld, pipeline-model-parallel size: %lld, "
               "encoder-pipeline-model-parallel size: %lld",
            (long long)ws, (long long)I(data_parallel_size), (long long)cp, hcp, (long long)tp,
            (long long)I(encoder_tensor_model_parallel_size), (long long)pp,
            (long long)I(encoder_pipeline_model_parallel_size));
    }
    if (!NONE(pipeline_model_parallel_split_rank)) {
        mc_args_set_int(a, V(encoder_pipeline_model_parallel_size), I(pipeline_model_parallel_split_rank));
        mc_args_set_int(a, V(pipeline_model_parallel_size), pp - I(encoder_pipeline_model_parallel_size));
        REQUIRE(I(pipeline_model_parallel_size) > 0, BARE);
    }
    const struct mc_val *h = &a->v[V(hierarchical_context_parallel_sizes)];
    if (h->kind == MC_V_LIST && h->n > 0) {
        int64_t prod = 1;
        for (int k = 0; k < h->n; k++)
            prod *= h->items[k].i;
        REQUIRE(cp == prod, BARE);
    }
    const struct mc_val *cct = &a->v[V(cp_comm_type)];
    for (int k = 0; cct->kind == MC_V_LIST && k < cct->n; k++)
        if (str_is(cct->items[k].s, "a2a+p2p"))
            REQUIRE(h->kind != MC_V_NONE, "--hierarchical-context-parallel-sizes must be set when "
                    "a2a+p2p is used in cp comm");
    if (NONE(expert_tensor_parallel_size))
        mc_args_set_int(a, V(expert_tensor_parallel_size), tp);
    return MC_OK;
}

/* Removed options, program defaults, data paths, batch sizes. */
static mc_status check_deprecated_and_batch(struct vctx *c, const char *const *defaults)
{
    struct mc_args *a = c->a;
    REQUIRE(NONE(batch_size), "--batch-size argument is no longer valid, use --micro-batch-size "
            "instead");
    a->deleted[V(batch_size)] = true;
    REQUIRE(NONE(warmup), "--warmup argument is no longer valid, use --lr-warmup-fraction instead");
    a->deleted[V(warmup)] = true;
    REQUIRE(NONE(model_parallel_size), "--model-parallel-size is no longer valid, use "
            "--tensor-model-parallel-size instead");
    a->deleted[V(model_parallel_size)] = true;
    if (B(checkpoint_activations)) {
        say(c, "--checkpoint-activations is no longer valid, use --recompute-activations, or, "
               "for more control, --recompute-granularity and --recompute-method.");
        a->exit_code = 0;
        a->err_kind = NULL;
        a->err[0] = '\0';
        return mc_error(MC_ERR_CONFIG, "--checkpoint-activations: Megatron exits here");
    }
    a->deleted[V(checkpoint_activations)] = true;
    if (B(recompute_activations))
        mc_args_set_str(a, V(recompute_granularity), "selective");
    a->deleted[V(recompute_activations)] = true;

    for (int k = 0; defaults && defaults[k]; k += 2) {
        int id = -1;
        for (int j = 0; j < MC_A_COUNT; j++)
            if (!strcmp(mc_arg_defs[j].dest, defaults[k]))
                id = j;
        MC_ASSERT(id >= 0);
        if (!mc_args_is_none(a, (enum mc_arg_id)id)) {
            char v2[512];
            mc_py_str(v2, sizeof(v2), &a->v[id]);
            /* Megatron's source line continuation puts 24 spaces before "with". */
            say(c, "WARNING: overriding default arguments for %s:%s                        "
                   "with %s:%s", defaults[k], defaults[k + 1], defaults[k], v2);
        } else if (mc_args_set_str(a, (enum mc_arg_id)id, defaults[k + 1]) != MC_OK) {
            return MC_ERR_NOMEM;
        }
    }
    if (!NONE(data_path) && NONE(split)) {
        say(c, "WARNING: Please specify --split when using --data-path. Using legacy default "
               "value of \"969, 30, 1\"");
        mc_args_set_str(a, V(split), "969, 30, 1");
    }
    if (!NONE(data_path) || !NONE(data_args_path))
        REQUIRE(NONE(data_path) || NONE(data_args_path), BARE);
    bool per_split = !NONE(train_data_path) || !NONE(valid_data_path) || !NONE(test_data_path);
    if (per_split || !NONE(per_split_data_args_path))
        REQUIRE(!per_split || NONE(per_split_data_args_path), BARE);

    REQUIRE(!NONE(micro_batch_size), BARE);
    REQUIRE(I(micro_batch_size) > 0, BARE);
    if (NONE(global_batch_size)) {
        mc_args_set_int(a, V(global_batch_size), I(micro_batch_size) * I(data_parallel_size));
        say(c, "setting global batch size to %lld", (long long)I(global_batch_size));
    }
    REQUIRE(I(global_batch_size) > 0, BARE);
    return MC_OK;
}

static mc_status check_virtual_pipeline(struct vctx *c)
{
    struct mc_args *a = c->a;
    int64_t pp = I(pipeline_model_parallel_size);
    bool per_stage = !NONE(num_layers_per_virtual_pipeline_stage);
    bool per_rank = !NONE(num_virtual_stages_per_pipeline_rank);
    bool uneven = !NONE(decoder_first_pipeline_num_layers) || !NONE(decoder_last_pipeline_num_layers);
    /* MindSpeed-LLM's --num-layer-list: its pre_validate_args sets num_layers to the list's
     * length for Megatron's checks (so they pass), its own rules follow (model config) */
    bool layer_list = !NONE(num_layer_list) && *mc_args_str(a, V(num_layer_list));
    if (layer_list && per_stage)
        REQUIRE(false, "Dynamic pipeline model and virtual pipeline cannot be enabled at the same time.");
    REQUIRE(!per_stage || !per_rank, "--num-layers-per-virtual-pipeline-stage and "
            "--num-virtual-stages-per-pipeline-rank cannot be set at the same time");
    int64_t extra = (B(account_for_embedding_in_pipeline_split) ? 1 : 0) +
                    (B(account_for_loss_in_pipeline_split) ? 1 : 0);
    if (per_stage || per_rank) {
        if (B(overlap_p2p_comm))
            REQUIRE(pp > 1, "When interleaved schedule is used, pipeline-model-parallel size "
                    "should be greater than 1");
        else
            REQUIRE(pp > 2, "When interleaved schedule is used and p2p communication overlap is "
                    "disabled, pipeline-model-parallel size should be greater than 2 to avoid "
                    "having multiple p2p sends and recvs between same 2 ranks per communication "
                    "batch");
        if (!per_rank) {
            REQUIRE(!uneven, "please use --num-virtual-stages-per-pipeline-rank to specify "
                    "virtual pipeline parallel degree when enable uneven pipeline parallelism");
            REQUIRE(!NONE(num_layers) || !NONE(decoder_num_layers),
                    "--num-layers is required with --num-layers-per-virtual-pipeline-stage");
            int64_t L = (NONE(num_layers) ? I(decoder_num_layers) : I(num_layers)) + extra;
            int64_t tpp = I(transformer_pipeline_model_parallel_size);
            if (I(num_layers_per_virtual_pipeline_stage) == 0)
                return fail(a, "ZeroDivisionError", "integer division or modulo by zero");
            REQUIRE(L % tpp == 0, "number of layers of the model must be divisible pipeline "
                    "model parallel size");
            REQUIRE((L / tpp) % I(num_layers_per_virtual_pipeline_stage) == 0,
                    "number of layers per pipeline stage must be divisible number of layers per "
                    "virtual pipeline stage");
            mc_args_set_int(a, V(virtual_pipeline_model_parallel_size),
                            (L / tpp) / I(num_layers_per_virtual_pipeline_stage));
        } else {
            mc_args_set_int(a, V(virtual_pipeline_model_parallel_size),
                            I(num_virtual_stages_per_pipeline_rank));
        }
    } else {
        mc_args_set_none(a, V(virtual_pipeline_model_parallel_size));
        mc_args_set_bool(a, V(overlap_p2p_comm), false);
        mc_args_set_bool(a, V(align_param_gather), false);
        if (pp > 1)
            say(c, "WARNING: Setting args.overlap_p2p_comm and args.align_param_gather to False "
                   "since non-interleaved schedule does not support overlapping p2p "
                   "communication and aligned param AG");
        if (!uneven && !layer_list && !NONE(num_layers))
            REQUIRE((I(num_layers) + extra) % I(transformer_pipeline_model_parallel_size) == 0,
                    "Number of layers should be divisible by the pipeline-model-parallel size");
    }
    char vpp[32];
    mc_py_str(vpp, sizeof(vpp), &a->v[V(virtual_pipeline_model_parallel_size)]);
    say(c, "Number of virtual stages per pipeline stage: %s", vpp);
    return MC_OK;
}

static mc_status map_dtype(struct mc_args *a, enum mc_arg_id id)
{
    const char *s = mc_args_str(a, id);
    const char *t = !strcmp(s, "bf16") ? "torch.bfloat16" : !strcmp(s, "fp16") ? "torch.float16"
                    : !strcmp(s, "fp8") ? "torch.uint8" : "torch.float32";
    return mc_args_set_sym(a, id, t);
}

/* Data-parallel sharding, overlap options, optimizer dtypes, precision. */
static mc_status check_precision(struct vctx *c)
{
    struct mc_args *a = c->a;
    const char *strat = S(data_parallel_sharding_strategy);
    if (str_is(strat, "optim_grads_params"))
        mc_args_set_bool(a, V(overlap_param_gather), true);
    if (str_is(strat, "optim_grads_params") || str_is(strat, "optim_grads"))
        mc_args_set_bool(a, V(overlap_grad_reduce), true);
    if (B(overlap_param_gather)) {
        REQUIRE(B(use_distributed_optimizer), "--overlap-param-gather only supported with "
                "distributed optimizer");
        REQUIRE(B(overlap_grad_reduce), "Must use --overlap-param-gather with "
                "--overlap-grad-reduce");
        REQUIRE(!B(use_legacy_models), "--overlap-param-gather only supported with MCore models");
    }
    if (B(use_torch_fsdp2))
        return fail(a, "NotImplementedError", "--use-torch-fsdp2 is not supported by megatron.c");
    if (B(overlap_param_gather_with_optimizer_step)) {
        REQUIRE(B(use_distributed_optimizer), "--overlap-param-gather-with-optimizer-step only "
                "supported with distributed optimizer");
        REQUIRE(B(overlap_param_gather), "Must use --overlap-param-gather-with-optimizer-step "
                "with --overlap-param-gather");
        REQUIRE(!NONE(virtual_pipeline_model_parallel_size), "--overlap-param-gather-with-"
                "optimizer-step only supported with interleaved pipeline parallelism");
        REQUIRE(!B(use_dist_ckpt), "--overlap-param-gather-with-optimizer-step not supported "
                "with distributed checkpointing yet");
    }
    if (map_dtype(a, V(main_grads_dtype)) || map_dtype(a, V(main_params_dtype)) ||
        map_dtype(a, V(exp_avg_dtype)) || map_dtype(a, V(exp_avg_sq_dtype)))
        return MC_ERR_NOMEM;
    if (B(fp8_param_gather))
        REQUIRE(B(use_distributed_optimizer) || B(use_torch_fsdp2), "--fp8-param-gather only "
                "supported with distributed optimizer or torch fsdp2");
    if (B(use_custom_fsdp)) {
        REQUIRE(B(use_distributed_optimizer), "--use-custom-fsdp only supported with distributed "
                "optimizer");
        if (str_is(strat, "optim_grads_params") || str_is(strat, "optim_grads"))
            REQUIRE(!B(gradient_accumulation_fusion), "optim_grads_params optim_grads are not "
                    "supported with gradient accumulation fusion");
        if (str_is(strat, "optim_grads_params"))
            REQUIRE(NONE(check_weight_hash_across_dp_replicas_interval),
                    "check_weight_hash_across_dp_replicas_interval is not supported with "
                    "optim_grads_params");
    }
    mc_args_set_sym(a, V(params_dtype), "torch.float32");
    if (B(fp16)) {
        REQUIRE(!B(bf16), BARE);
        mc_args_set_sym(a, V(params_dtype), "torch.float16");
        if (!TRUTHY(loss_scale)) {
            mc_args_set_bool(a, V(check_for_nan_in_loss_and_grad), false);
            say(c, "WARNING: Setting args.check_for_nan_in_loss_and_grad to False since dynamic "
                   "loss scaling is being used");
        }
    }
    if (B(bf16)) {
        REQUIRE(!B(fp16), BARE);
        mc_args_set_sym(a, V(params_dtype), "torch.bfloat16");
        bool fp32_grads = str_is(S(main_grads_dtype), "torch.float32");
        if (B(accumulate_allreduce_grads_in_fp32))
            REQUIRE(fp32_grads, "--main-grads-dtype can only be fp32 when "
                    "--accumulate-allreduce-grads-in-fp32 is set");
        if (B(grad_reduce_in_bf16)) {
            mc_args_set_bool(a, V(accumulate_allreduce_grads_in_fp32), false);
        } else if (!B(accumulate_allreduce_grads_in_fp32) && fp32_grads) {
            mc_args_set_bool(a, V(accumulate_allreduce_grads_in_fp32), true);
            say(c, "accumulate and all-reduce gradients in fp32 for bfloat16 data type.");
        }
    }
    say(c, "using %s for parameters ...", S(params_dtype));
    if (NONE(dataloader_type))
        mc_args_set_str(a, V(dataloader_type), "single");
    REQUIRE(I(num_dataset_builder_threads) > 0, BARE);
    mc_args_set_int(a, V(consumed_train_samples), 0);
    mc_args_set_int(a, V(skipped_train_samples), 0);
    mc_args_set_int(a, V(consumed_valid_samples), 0);
    mc_args_set_bool(a, V(variable_seq_lengths), false);
    return MC_OK;
}

/* Iteration- vs sample-based training, model sizes, sequence lengths. */
static mc_status check_training_and_model(struct vctx *c)
{
    struct mc_args *a = c->a;
    if (TRUTHY(train_iters)) {
        REQUIRE(NONE(train_samples), "expected iteration-based training");
        REQUIRE(NONE(lr_decay_samples), "expected iteration-based learning rate decay");
        REQUIRE(I(lr_warmup_samples) == 0, "expected iteration-based learning rate warmup");
        REQUIRE(NONE(rampup_batch_size), "expected no batch-size rampup for iteration-based "
                "training");
        if (!NONE(lr_warmup_fraction))
            REQUIRE(I(lr_warmup_iters) == 0, "can only specify one of lr-warmup-fraction and "
                    "lr-warmup-iters");
    }
    if (TRUTHY(train_samples)) {
        REQUIRE(NONE(train_iters), "expected sample-based training");
        REQUIRE(NONE(lr_decay_iters), "expected sample-based learning rate decay");
        /* Megatron spells it "learnig"; fixed here (docs/cli-differences.md). */
        REQUIRE(I(lr_warmup_iters) == 0, "expected sample-based learning rate warmup");
        if (!NONE(lr_warmup_fraction))
            REQUIRE(I(lr_warmup_samples) == 0, "can only specify one of lr-warmup-fraction and "
                    "lr-warmup-samples");
    }
    if (!NONE(num_layers)) {
        REQUIRE(NONE(encoder_num_layers), "cannot have both num-layers and encoder-num-layers "
                "specified");
        mc_args_set_int(a, V(encoder_num_layers), I(num_layers));
    } else {
        REQUIRE(!NONE(encoder_num_layers), "either num-layers or encoder-num-layers should be "
                "specified");
        mc_args_set_int(a, V(num_layers), I(encoder_num_layers));
    }
    static const enum mc_arg_id required[] = {V(num_layers), V(hidden_size),
                                              V(num_attention_heads), V(max_position_embeddings)};
    for (size_t k = 0; k < sizeof(required) / sizeof(required[0]); k++)
        REQUIRE(!mc_args_is_none(a, required[k]), "%s argument is None",
                mc_arg_defs[required[k]].dest);
    int64_t h = I(hidden_size);
    if (NONE(ffn_hidden_size)) {
        if (B(swiglu)) /* float arithmetic then truncation, as Python's int() */
            mc_args_set_int(a, V(ffn_hidden_size), (int64_t)((4.0 * (double)h * 2.0 / 3.0) / 64.0) * 64);
        else
            mc_args_set_int(a, V(ffn_hidden_size), 4 * h);
    }
    if (NONE(kv_channels)) {
        REQUIRE(I(num_attention_heads) != 0 && h % I(num_attention_heads) == 0, BARE);
        mc_args_set_int(a, V(kv_channels), h / I(num_attention_heads));
    }
    int64_t cp = I(context_parallel_size);
    if (!NONE(seq_length) && cp > 1)
        REQUIRE(I(seq_length) % (cp * 2) == 0, "seq-length should be a multiple of 2 * "
                "context-parallel-size if context-parallel-size > 1.");
    if (!NONE(seq_length)) {
        REQUIRE(NONE(encoder_seq_length), BARE);
        mc_args_set_int(a, V(encoder_seq_length), I(seq_length));
    } else {
        REQUIRE(!NONE(encoder_seq_length), BARE);
        mc_args_set_int(a, V(seq_length), I(encoder_seq_length));
    }
    REQUIRE(I(max_position_embeddings) >= I(seq_length), "max_position_embeddings (%lld) must be "
            "greater than or equal to seq_length (%lld).", (long long)I(max_position_embeddings),
            (long long)I(seq_length));
    if (!NONE(decoder_seq_length))
        REQUIRE(I(max_position_embeddings) >= I(decoder_seq_length), BARE);
    if (!NONE(lr))
        REQUIRE(F(min_lr) <= F(lr), BARE);
    if (!NONE(save))
        REQUIRE(!NONE(save_interval), BARE);
    if (B(fp16_lm_cross_entropy))
        REQUIRE(B(fp16), "lm cross entropy in fp16 only support in fp16 mode.");
    if (B(fp32_residual_connection))
        REQUIRE(B(fp16) || B(bf16), "residual connection in fp32 only supported when using fp16 "
                "or bf16.");
    if (B(moe_grouped_gemm))
        REQUIRE(B(bf16), "Currently GroupedGEMM for MoE only supports bf16 dtype.");
    if (str_is(S(weight_decay_incr_style), "constant")) {
        REQUIRE(NONE(start_weight_decay), BARE);
        REQUIRE(NONE(end_weight_decay), BARE);
        mc_args_set_float(a, V(start_weight_decay), F(weight_decay));
        mc_args_set_float(a, V(end_weight_decay), F(weight_decay));
        /* keep Python's int-vs-float: weight_decay is float-typed, so F() is exact */
    } else {
        REQUIRE(!NONE(start_weight_decay), BARE);
        REQUIRE(!NONE(end_weight_decay), BARE);
    }
    return MC_OK;
}

/* Recompute, sequence parallel, biases, RoPE, MoE, checkpoints, data sources, the rest. */
static mc_status check_features(struct vctx *c)
{
    struct mc_args *a = c->a;
    int64_t tp = I(tensor_model_parallel_size);
    if (B(distribute_saved_activations)) {
        REQUIRE(tp > 1, "can distribute recomputed activations only across tensor model parallel "
                "groups");
        REQUIRE(str_is(S(recompute_granularity), "full"), "distributed recompute activations is "
                "only application to full recompute granularity");
        REQUIRE(!NONE(recompute_method), "for distributed recompute activations to work you need "
                "to use a recompute method ");
    }
    if (str_is(S(recompute_granularity), "selective"))
        REQUIRE(NONE(recompute_method), "recompute method is not yet supported for selective "
                "recomputing granularity");
    if (tp == 1) {
        if (B(sequence_parallel) && c->warn)
            fprintf(c->warn, "UserWarning: Disabling sequence parallelism because tensor model "
                             "parallelism is disabled\n");
        mc_args_set_bool(a, V(sequence_parallel), false);
    }
    if (B(tp_comm_overlap))
        REQUIRE(B(sequence_parallel), "Tensor parallel communication/GEMM overlap can happen only "
                "when sequence parallelism is enabled");
    if (!B(add_bias_linear))
        mc_args_set_bool(a, V(bias_gelu_fusion), false);
    if (B(add_bias_linear))
        mc_args_set_bool(a, V(add_qkv_bias), true);
    if (B(retro_add_retriever)) {
        REQUIRE(!NONE(train_samples), "args.train_samples should be auto-loaded from the retro "
                "config.");
        REQUIRE(!B(sequence_parallel), "retro currently does not support sequence parallelism.");
        REQUIRE(I(pipeline_model_parallel_size) == 1, "retro currently does not support pipeline "
                "parallelism.");
    }
    if (!NONE(decoupled_lr) || !NONE(decoupled_min_lr))
        REQUIRE(!B(use_legacy_models), "--decoupled-lr and --decoupled-min-lr is not supported in "
                "legacy models.");
    if (B(use_rotary_position_embeddings))
        mc_args_set_str(a, V(position_embedding_type), "rope");
    if (B(rotary_interleaved) && B(apply_rope_fusion))
        return fail(a, "RuntimeError", "--rotary-interleaved does not work with rope_fusion.");
    if (B(rotary_interleaved) && B(use_legacy_models))
        return fail(a, "RuntimeError", "--rotary-interleaved is not supported in legacy models.");
    const char *pe = S(position_embedding_type);
    if (!str_is(pe, "rope"))
        mc_args_set_bool(a, V(apply_rope_fusion), false);
    if (!B(add_position_embedding) && !str_is(pe, "rope"))
        return fail(a, "RuntimeError", "--no-position-embedding is deprecated, use "
                    "--position-embedding-type");
    if (str_is(pe, "relative"))
        REQUIRE(str_is(S(transformer_impl), "transformer_engine"), "Local transformer "
                "implementation currently does not support attention bias-based position "
                "embeddings.");
    if (str_is(pe, "mrope"))
        REQUIRE(!NONE(mrope_section), "--mrope-section should be set when using "
                "--position-embedding-type mrope.");
    if (!NONE(num_experts) && I(num_experts) == 0)
        mc_args_set_none(a, V(num_experts));
    if (!NONE(num_experts))
        REQUIRE(NONE(spec), "Model Spec must be None when using MoEs");
    if (NONE(moe_ffn_hidden_size))
        mc_args_set_int(a, V(moe_ffn_hidden_size), I(ffn_hidden_size));
    if (I(context_parallel_size) > 1)
        REQUIRE(!B(use_legacy_models), "Context parallelism is not supported in legacy models.");
    if (I(expert_model_parallel_size) > 1) {
        REQUIRE(!NONE(num_experts), "num_experts must be non None to use expert model parallelism");
        REQUIRE(I(num_experts) % I(expert_model_parallel_size) == 0, "Number of experts should be "
                "a multiple of expert model parallel_size.");
        REQUIRE(!B(fp16), "Expert parallelism is not supported with fp16 training.");
    }
    if (B(use_dist_ckpt) && B(use_legacy_models))
        return fail(a, "RuntimeError", "--use-dist-ckpt is not supported in legacy models.");
    if (str_is(S(ckpt_format), "torch_dcp")) {
        REQUIRE(B(use_torch_fsdp2), "--ckpt-format torch_dcp is only tested with FSDP.");
        REQUIRE(tp <= 1 && I(encoder_tensor_model_parallel_size) <= 1, "--ckpt-format torch_dcp "
                "is not tested with megatron tensor parallelism.");
        REQUIRE(I(pipeline_model_parallel_size) <= 1 &&
                I(encoder_pipeline_model_parallel_size) <= 1, "--ckpt-format torch_dcp is not "
                "tested with megatron pipeline parallelism.");
    }
    int sources = (B(mock_data) ? 1 : 0) + (TRUTHY(data_path) ? 1 : 0) +
                  ((TRUTHY(train_data_path) || TRUTHY(valid_data_path) || TRUTHY(test_data_path)) ? 1 : 0);
    REQUIRE(sources <= 1, "A single data source must be provided in training mode, else None");
    if (B(deterministic_mode)) {
        REQUIRE(!B(use_flash_attn), "Flash attention can not be used in deterministic mode.");
        REQUIRE(!B(cross_entropy_loss_fusion), "Cross Entropy Fusion is currently not "
                "deterministic.");
    }
    if (B(apply_query_key_layer_scaling))
        mc_args_set_bool(a, V(attention_softmax_in_fp32), true);
    if (!NONE(result_rejected_tracker_filename))
        return fail(a, "NotImplementedError", "--result-rejected-tracker-filename is not "
                    "supported by megatron.c yet");
    if (!B(enable_gloo_process_groups) && B(use_distributed_optimizer))
        REQUIRE(B(use_dist_ckpt), BARE);
    return MC_OK;
}

/* OptimizerConfig.__post_init__ (megatron/core/optimizer/optimizer_config.py), which Megatron
 * runs when get_megatron_optimizer builds the config, after validate_args and the arguments
 * dump: the storage dtypes other than fp32 need the precision-aware optimizer, which needs adam
 * and the distributed optimizer. */
static mc_status optimizer_config_rules(struct vctx *c)
{
    if (B(use_precision_aware_optimizer)) {
        REQUIRE(str_is(S(optimizer), "adam"), "--use-precision-aware-optimizer only supported "
                "with adam");
        REQUIRE(B(use_distributed_optimizer), "--use-precision-aware-optimizer only supported "
                "with distributed optimizer");
        return MC_OK;
    }
    REQUIRE(str_is(S(main_grads_dtype), "torch.float32"), "main_grads_dtype can only be fp32 "
            "when not using precision-aware optimizer");
    REQUIRE(str_is(S(main_params_dtype), "torch.float32"), "main_params_dtype can only be fp32 "
            "when not using precision-aware optimizer");
    REQUIRE(str_is(S(exp_avg_dtype), "torch.float32"), "exp_avg_dtype can only be fp32 when not "
            "using precision-aware optimizer");
    REQUIRE(str_is(S(exp_avg_sq_dtype), "torch.float32"), "exp_avg_sq_dtype can only be fp32 "
            "when not using precision-aware optimizer");
    return MC_OK;
}

static mc_status check_tail(struct vctx *c)
{
    struct mc_args *a = c->a;
    if (B(ckpt_fully_parallel_save_deprecated))
        say(c, "--ckpt-fully-parallel-save flag is deprecated and has no effect. Use "
               "--no-ckpt-fully-parallel-save to disable parallel save.");
    if (B(use_dist_ckpt) && !B(ckpt_fully_parallel_save) && B(use_distributed_optimizer))
        say(c, "Warning: With non-parallel ckpt save and DistributedOptimizer, it will be "
               "impossible to resume training with different parallelism. Consider removing flag "
               "--no-ckpt-fully-parallel-save.");
    if (B(use_dist_ckpt_deprecated))
        say(c, "--use-dist-ckpt is deprecated and has no effect. Use --ckpt-format to select the "
               "checkpoint format.");
    if (TRUTHY(dist_ckpt_format_deprecated))
        say(c, "--dist-ckpt-format is deprecated and has no effect. Use --ckpt-format to select "
               "the checkpoint format.");
    if (I(inference_batch_times_seqlen_threshold) > -1)
        REQUIRE(I(pipeline_model_parallel_size) > 1, "--inference-batch-times-seqlen-threshold "
                "requires setting --pipeline-model-parallel-size > 1.");
    if (B(moe_use_upcycling)) {
        REQUIRE(!NONE(save), "When using upcycling, the --save option must be specified.");
        if (!B(no_load_optim)) {
            mc_args_set_bool(a, V(no_load_optim), true);
            say(c, "Warning: disabling --no-load-optim for upcycling.");
        }
        if (!B(no_load_rng)) {
            mc_args_set_bool(a, V(no_load_rng), true);
            say(c, "Warning: disabling --no-load-rng for upcycling.");
        }
    }
    if (B(optimizer_cpu_offload))
        REQUIRE(B(use_precision_aware_optimizer), "The optimizer cpu offload must be used in "
                "conjunction with `--use-precision-aware-optimizer`, as the hybrid device "
                "optimizer reuses the code path of this flag.");
    if (B(replication)) {
        REQUIRE(!NONE(replication_jump), "--replication requires the value of "
                "--replication-jump!");
        char t[64];
        mc_py_str(t, sizeof(t), &a->v[V(non_persistent_ckpt_type)]);
        REQUIRE(str_is(S(non_persistent_ckpt_type), "local"), "--replication requires "
                "args.non_persistent_ckpt_type == 'local', but got: %s", t);
    } else if (TRUTHY(replication_jump)) {
        say(c, "Warning: --replication-jump was specified despite not using replication. "
               "Ignoring.");
        mc_args_set_none(a, V(replication_jump));
    }
    if (TRUTHY(mtp_num_layers)) {
        REQUIRE(!B(use_legacy_models), "The legacy Megatron models does not support Multi-Token "
                "Prediction (MTP).");
        REQUIRE(I(context_parallel_size) == 1, "Multi-Token Prediction (MTP) is not supported "
                "with Context Parallelism.");
        const char *pe = S(position_embedding_type);
        REQUIRE(str_is(pe, "rope") || str_is(pe, "none"), "Multi-Token Prediction (MTP) is not "
                "supported with %s position embedding type. The supported position embedding "
                "types are rope and none.", pe);
    }
    return MC_OK;
}

/* initialize_megatron's prep for --ckpt-convert-format, before validate_args: bare asserts,
 * and a conversion never starts from random weights. */
static mc_status check_convert(struct vctx *c)
{
    if (NONE(ckpt_convert_format))
        return MC_OK;
    REQUIRE(!NONE(ckpt_convert_save), BARE);
    REQUIRE(!NONE(load), BARE);
    mc_args_set_bool(c->a, V(exit_on_missing_checkpoint), true);
    return MC_OK;
}

mc_status mc_args_validate(struct mc_args *a, const char *const *defaults, FILE *out, FILE *warn)
{
    struct vctx ctx = {a, out, warn}, *c = &ctx;
    mc_status st;
    if ((st = mc_recompute_budget_check(a)) != MC_OK) /* ours: a command-line error */
        return st;
    if ((st = check_convert(c)) != MC_OK || (st = check_layout(c)) != MC_OK || (st = check_deprecated_and_batch(c, defaults)) != MC_OK ||
        (st = check_virtual_pipeline(c)) != MC_OK || (st = check_precision(c)) != MC_OK ||
        (st = check_training_and_model(c)) != MC_OK || (st = check_features(c)) != MC_OK ||
        (st = check_tail(c)) != MC_OK)
        return st;
    if (out && mc_args_int(a, MC_A_rank) == 0 && (st = mc_args_print_dump(out, a)) != MC_OK)
        return st;
    /* MindSpeed's validate_args_wrapper, after Megatron's (so after the dump) */
    REQUIRE(!mc_args_bool(a, MC_A_reuse_fp32_param) || mc_args_bool(a, MC_A_bf16),
            "--reuse-fp32-param only support for `bf16`");
    REQUIRE(mc_args_is_none(a, MC_A_sliding_window) || mc_args_int(a, MC_A_context_parallel_size) == 1,
            "sliding window is not supported in context parallel.");
    return optimizer_config_rules(c); /* after the dump, as Megatron checks it later */
}
