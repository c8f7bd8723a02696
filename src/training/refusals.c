/* The options and values megatron.c refuses, collected in one pass (see refusals.h). A real
 * run stops on them before any work is done; --dry-run lists them and exits 1. Messages name
 * the option as the user wrote it, and what to do instead where there is something. */
#include "training/refusals.h"

#include <stdarg.h>
#include <string.h>

#define A(x) MC_A_##x

static void refuse(struct mc_refusals *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void refuse(struct mc_refusals *r, const char *fmt, ...)
{
    if (r->kept < MC_MAX_REFUSALS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->msg[r->kept++], MC_REFUSAL_LEN, fmt, ap);
        va_end(ap);
    }
    r->n++;
}

static bool str_is(const char *s, const char *want) { return s && !strcmp(s, want); }

/* Mixture of experts (transformer/moe/, docs/moe.md): expert- and tensor-parallel size 1. */
static void moe(const struct mc_args *a, struct mc_refusals *r)
{
    int64_t ep = mc_args_int(a, A(expert_model_parallel_size));
    int64_t pp = mc_args_int(a, A(pipeline_model_parallel_size));
    int64_t etp = mc_args_is_none(a, A(expert_tensor_parallel_size))
                      ? mc_args_int(a, A(tensor_model_parallel_size))
                      : mc_args_int(a, A(expert_tensor_parallel_size));
    int64_t world = mc_args_int(a, A(world_size)), etpp = etp * ep * pp;
    /* Megatron's initialize_model_parallel raises this before any expert group is built */
    if (ep > 1 && etpp > 0 && world % etpp != 0)
        refuse(r, "decoder world_size (%lld) is not divisible by "
               "expert_tensor_model_pipeline_parallel size (%lld) (Megatron's RuntimeError in "
               "initialize_model_parallel: --expert-model-parallel-size %lld x "
               "--expert-tensor-parallel-size %lld x --pipeline-model-parallel-size %lld)",
               (long long)world, (long long)etpp, (long long)ep, (long long)etp, (long long)pp);
    else if (ep > 1)
        refuse(r, "--expert-model-parallel-size %lld is not supported by megatron.c yet (mixture "
               "of experts runs at expert-parallel size 1)", (long long)ep);
    if (mc_args_is_none(a, A(num_experts)))
        return;
    if (!mc_args_is_none(a, A(expert_tensor_parallel_size)) &&
        mc_args_int(a, A(expert_tensor_parallel_size)) > 1)
        refuse(r, "--expert-tensor-parallel-size %lld is not supported by megatron.c yet (mixture "
               "of experts runs at tensor-parallel size 1)",
               (long long)mc_args_int(a, A(expert_tensor_parallel_size)));
    if (mc_args_int(a, A(tensor_model_parallel_size)) > 1)
        refuse(r, "--num-experts with --tensor-model-parallel-size %lld is not supported by "
               "megatron.c yet (mixture of experts runs at tensor-parallel size 1)",
               (long long)mc_args_int(a, A(tensor_model_parallel_size)));
    const char *lb = mc_args_str(a, A(moe_router_load_balancing_type));
    if (str_is(lb, "sinkhorn"))
        refuse(r, "--moe-router-load-balancing-type sinkhorn is not supported by megatron.c yet "
               "(aux_loss, seq_aux_loss and none are)");
    const char *disp = mc_args_str(a, A(moe_token_dispatcher_type));
    if (str_is(disp, "flex") || str_is(disp, "alltoall_seq"))
        refuse(r, "--moe-token-dispatcher-type %s is not supported by megatron.c yet (allgather "
               "and alltoall are)", disp);
    if (str_is(mc_args_str(a, A(recompute_granularity)), "full"))
        refuse(r, "--recompute-granularity full with --num-experts is not supported by "
               "megatron.c yet");
    if (mc_args_bool(a, A(moe_grouped_gemm)))
        refuse(r, "--moe-grouped-gemm is not supported by megatron.c yet (its checkpoints name the "
               "experts as GroupedMLP / TEGroupedMLP do; megatron.c has SequentialMLP's "
               "local_experts.E.linear_fc1.weight: drop the option, the numbers are the same)");
    if (mc_args_bool(a, A(use_legacy_models)))
        refuse(r, "--num-experts with --use-legacy-models is not supported by megatron.c");
    /* checkpoints: SequentialMLP's names in the torch format of the local spec so far */
    const char *opt = !mc_args_is_none(a, A(save)) ? "--save" : !mc_args_is_none(a, A(load)) ? "--load" : NULL;
    const char *fmt = mc_args_str(a, A(ckpt_format)), *impl = mc_args_str(a, A(transformer_impl));
    if (opt && !str_is(fmt, "torch"))
        refuse(r, "%s with --num-experts and --ckpt-format %s%s is not supported by megatron.c yet "
               "(MoE checkpoints are written and read in the torch format: add --ckpt-format "
               "torch)", opt, fmt, a->given[A(ckpt_format)] ? "" : " (the default)");
    if (opt && !str_is(impl, "local"))
        refuse(r, "%s with --num-experts and --transformer-impl %s is not supported by megatron.c "
               "yet (MoE layers are named as the local spec names them: add --transformer-impl "
               "local)", opt, impl);
    if (opt && mc_args_bool(a, A(use_distributed_optimizer)))
        refuse(r, "%s with --num-experts and --use-distributed-optimizer is not supported by "
               "megatron.c yet (Megatron keeps the experts' grads in a buffer of their own, which "
               "distrib_optim.pt follows)", opt);
}

/* 1. Whole features, named as the feature rather than by one of its tuning options. */
static void features(const struct mc_args *a, struct mc_refusals *r)
{
    const char *pe = mc_args_str(a, A(position_embedding_type));
    if (str_is(pe, "mrope") || str_is(pe, "relative"))
        refuse(r, "--position-embedding-type %s is not supported by megatron.c yet "
               "(learned_absolute, rope and none are)", pe);
    if (mc_args_int(a, A(context_parallel_size)) > 1)
        refuse(r, "--context-parallel-size %lld is not supported by megatron.c yet (context "
               "parallelism)", (long long)mc_args_int(a, A(context_parallel_size)));
    moe(a, r);
    if (mc_args_int(a, A(encoder_pipeline_model_parallel_size)) > 0 ||
        mc_args_int(a, A(encoder_tensor_model_parallel_size)) > 0)
        refuse(r, "encoder model parallelism (--encoder-tensor-model-parallel-size, "
               "--encoder-pipeline-model-parallel-size) is not supported by megatron.c");
    const char *strat = mc_args_str(a, A(data_parallel_sharding_strategy));
    if (!str_is(strat, "no_shard") && !str_is(strat, "optim"))
        refuse(r, "--data-parallel-sharding-strategy %s is not supported by megatron.c yet "
               "(FSDP)", strat);
    if (mc_args_int(a, A(num_distributed_optimizer_instances)) != 1)
        refuse(r, "--num-distributed-optimizer-instances is not supported by megatron.c yet");
    /* Megatron takes iteration % N: 0 dies with ZeroDivisionError after the first step. */
    if (!mc_args_is_none(a, A(check_weight_hash_across_dp_replicas_interval)) &&
        mc_args_int(a, A(check_weight_hash_across_dp_replicas_interval)) <= 0)
        refuse(r, "--check-weight-hash-across-dp-replicas-interval %lld: expected a positive "
               "number of iterations",
               (long long)mc_args_int(a, A(check_weight_hash_across_dp_replicas_interval)));
    /* the torch_dist optimizer groups are written / read for the two weight-decay groups only */
    bool dist_ckpt = (!mc_args_is_none(a, A(save)) && str_is(mc_args_str(a, A(ckpt_format)), "torch_dist")) ||
                     (!mc_args_is_none(a, A(load)) && (str_is(mc_args_str(a, A(ckpt_format)), "torch_dist") ||
                                                       mc_args_bool(a, A(auto_detect_ckpt_format))));
    if (!mc_args_is_none(a, A(decoupled_lr)) && dist_ckpt)
        refuse(r, "--decoupled-lr with --ckpt-format torch_dist (or --auto-detect-ckpt-format) is "
               "not supported by megatron.c yet (torch format checkpoints carry its param groups)");
    /* MindSpeed-LLM's RoPE variants: llama3 is implemented (model_config.c), not the others */
    if (!mc_args_is_none(a, A(sliding_window)) && mc_args_int(a, A(sliding_window)) <= 0)
        refuse(r, "--sliding-window %lld: expected a positive number of keys",
               (long long)mc_args_int(a, A(sliding_window)));
    if (!mc_args_is_none(a, A(sliding_window)) &&
        str_is(mc_args_str(a, A(position_embedding_type)), "alibi"))
        refuse(r, "--sliding-window with --position-embedding-type alibi is not supported by "
               "megatron.c (MindSpeed-LLM drops the window under ALiBi: give one of them)");
    const char *rope = mc_args_str(a, A(rope_scaling_type));
    if (rope && !str_is(rope, "llama3"))
        refuse(r, "--rope-scaling-type %s is not supported by megatron.c yet (only llama3)", rope);
}

/* 2. The support class of the option table. */
static void table(const struct mc_args *a, struct mc_refusals *r)
{
    for (int id = 0; id < MC_A_NUM_OPTIONS; id++) {
        const struct mc_arg_def *d = &mc_arg_defs[id];
        if (d->support == MC_ARG_UNSUPPORTED && a->given[id] &&
            !mc_args_is_default(a, (enum mc_arg_id)id) &&
            id != A(ckpt_convert_update_legacy_dist_opt_format)) /* convert_format says why */
            refuse(r, "%s is not supported by megatron.c yet", d->opt);
    }
}

static void pipeline(const struct mc_args *a, struct mc_refusals *r)
{
    if (mc_args_is_none(a, A(virtual_pipeline_model_parallel_size)))
        return;
    int64_t vp = mc_args_int(a, A(virtual_pipeline_model_parallel_size));
    if (vp > MC_MAX_VP_CHUNKS)
        refuse(r, "--num-virtual-stages-per-pipeline-rank %lld: at most %d model chunks per "
               "pipeline rank", (long long)vp, MC_MAX_VP_CHUNKS);
    if (vp == 1)
        refuse(r, "--num-virtual-stages-per-pipeline-rank / --num-layers-per-virtual-pipeline-stage "
               "giving 1 model chunk per pipeline rank: Megatron's interleaved schedule fails on "
               "it (UnboundLocalError in forward_backward_pipelining_with_interleaving); drop the "
               "option to train with the 1F1B schedule");
}

/* The checkpoint formats this build writes and reads: torch, and torch_dist (Megatron's default;
 * the loader reads what the directory holds, as Megatron does with torch_dist or
 * --auto-detect-ckpt-format). torch_dist saves are written with the ordinary and the
 * distributed optimizer (fp32, --bf16 and --fp16: dist_checkpoint_save.c); the rest is refused
 * by name below. */
static bool ckpt_format_writable(const char *fmt) { return str_is(fmt, "torch") || str_is(fmt, "torch_dist"); }
static bool ckpt_format_readable(const char *fmt) { return str_is(fmt, "torch") || str_is(fmt, "torch_dist"); }

/* What a torch_dist save does not write yet. */
static void dist_save(const struct mc_args *a, struct mc_refusals *r)
{
    const char *how = a->given[A(ckpt_format)] ? "" : " (the default --ckpt-format)";
    if (mc_args_bool(a, A(use_legacy_models)))
        refuse(r, "--save with --ckpt-format torch_dist%s and --use-legacy-models: Megatron's legacy "
               "models have no sharded state dict; use --ckpt-format torch", how);
}

/* --ckpt-convert-format: the save after loading writes what an ordinary save of that format
 * would, so the same formats and the same limits apply. */
static void convert_format(const struct mc_args *a, struct mc_refusals *r)
{
    if (mc_args_bool(a, A(ckpt_convert_update_legacy_dist_opt_format)))
        refuse(r, "--ckpt-convert-update-legacy-dist-opt-format is not supported by megatron.c: it "
               "reads a --ckpt-format torch distrib_optim.pt in the layout Megatron wrote before "
               "February 2024 (DistributedOptimizer.load_parameter_state_from_dp_zero_legacy: "
               "unpadded per-buffer tensors), which Megatron core_v0.12.1 no longer writes; "
               "megatron.c reads the current layout without the option (convert older checkpoints "
               "with that Megatron version)");
    if (mc_args_is_none(a, A(ckpt_convert_format)))
        return;
    const char *to = mc_args_str(a, A(ckpt_convert_format));
    if (!ckpt_format_writable(to))
        refuse(r, "--ckpt-convert-format %s is not supported by megatron.c yet: use torch or "
               "torch_dist", to);
    else if (str_is(to, "torch_dist") && mc_args_bool(a, A(use_legacy_models)))
        refuse(r, "--ckpt-convert-format torch_dist and --use-legacy-models: Megatron's legacy "
               "models have no sharded state dict");
    else if (str_is(to, "torch") && mc_args_bool(a, A(async_save)))
        refuse(r, "Async checkpoint save not implemented for legacy checkpoints");
}

static void checkpoint_format(const struct mc_args *a, struct mc_refusals *r)
{
    bool save = !mc_args_is_none(a, A(save)) && !ckpt_format_writable(mc_args_str(a, A(ckpt_format)));
    bool load = !mc_args_is_none(a, A(load)) && !mc_args_bool(a, A(auto_detect_ckpt_format)) &&
                !ckpt_format_readable(mc_args_str(a, A(ckpt_format)));
    const char *fmt = mc_args_str(a, A(ckpt_format));
    /* save_checkpoint's NotImplementedError, raised by Megatron at the first save, here at start */
    if (!mc_args_is_none(a, A(save)) && mc_args_bool(a, A(async_save)) && str_is(fmt, "torch"))
        refuse(r, "Async checkpoint save not implemented for legacy checkpoints");
    else if (!mc_args_is_none(a, A(save)) && mc_args_bool(a, A(async_save)) && !str_is(fmt, "torch_dist"))
        refuse(r, "Async checkpoint save not implemented for %s distributed checkpoint format", fmt);
    if (!mc_args_is_none(a, A(save)) && str_is(fmt, "torch_dist"))
        dist_save(a, r);
    convert_format(a, r);
    if (!save && !load)
        return;
    const char *which = save && load ? "--save/--load" : save ? "--save" : "--load";
    refuse(r, "--ckpt-format %s is not supported by megatron.c yet (%s): use --ckpt-format torch "
           "or torch_dist", fmt, which);
}

/* --bf16 / --fp16 train (Megatron's Float16OptimizerWithFloat16Params, docs/loss-scaling.md);
 * what Megatron offers around them and megatron.c does not do yet is refused by name. */
static void precision(const struct mc_args *a, struct mc_refusals *r)
{
    bool bf16 = mc_args_bool(a, A(bf16)), fp16 = mc_args_bool(a, A(fp16));
    /* --grad-reduce-in-bf16 trains: a bf16 grad buffer (mc_param_set.grad_dtype). A non-fp32
     * --main-grads-dtype etc. act only with --use-precision-aware-optimizer, as in Megatron
     * (validate.c's OptimizerConfig rules stop them otherwise). That optimizer trains as
     * Transformer Engine's FusedAdam (optimizer/te_fused_adam.h, docs/loss-scaling.md); what
     * it cannot do on a CPU is refused here. */
    if (mc_args_bool(a, A(use_precision_aware_optimizer))) {
        const char *opt[2] = {"--exp-avg-dtype", "--exp-avg-sq-dtype"};
        const char *val[2] = {mc_args_str(a, A(exp_avg_dtype)), mc_args_str(a, A(exp_avg_sq_dtype))};
        for (int i = 0; i < 2; i++)
            if (str_is(val[i], "fp8") || str_is(val[i], "torch.uint8"))
                refuse(r, "--use-precision-aware-optimizer with %s fp8 is not supported by "
                       "megatron.c: FusedAdam keeps fp8 states as Transformer Engine Float8Tensors "
                       "(E4M3 with a per-tensor scale, quantized by TE's CUDA kernels), which have "
                       "no CPU implementation here; use fp16 or fp32", opt[i]);
    }
    /* the fp32 residual stream (upstream's fixed semantics, COMPATIBILITY.md) runs where its
     * buffers never leave the rank in the params dtype */
    if ((bf16 || fp16) && mc_args_bool(a, A(fp32_residual_connection))) {
        const char *with =
            mc_args_bool(a, A(sequence_parallel))              ? "--sequence-parallel"
            : mc_args_bool(a, A(distribute_saved_activations))  ? "--distribute-saved-activations"
            : !mc_args_is_none(a, A(num_experts)) && mc_args_int(a, A(num_experts)) > 0
                ? "--num-experts"
                : NULL;
        if (with)
            refuse(r, "--fp32-residual-connection with %s is not implemented in megatron.c yet "
                   "(the fp32 residual stream runs without sequence parallelism, "
                   "--distribute-saved-activations and MoE layers)", with);
    }
    /* --fp16 without --accumulate-allreduce-grads-in-fp32 trains: fp16 grad buffer values
     * (mc_param_set.grad_dtype, COMPATIBILITY.md) */
}

/* Megatron tokenizers megatron.c has no implementation of (tokenizer/tokenizer.c). */
static void tokenizer(const struct mc_args *a, struct mc_refusals *r)
{
    static const char *const missing[] = {"BertWordPieceLowerCase", "BertWordPieceCase",
                                          "MultimodalTokenizer", "NullMultimodalTokenizer"};
    const char *t = mc_args_str(a, A(tokenizer_type));
    for (size_t k = 0; k < sizeof(missing) / sizeof(missing[0]); k++)
        if (str_is(t, missing[k]))
            refuse(r, "--tokenizer-type %s is a Megatron tokenizer that megatron.c does not "
                   "implement yet", t);
}

/* --spec MODULE NAME (pretrain_gpt imports it instead of the local / TE spec). megatron.c
 * builds its own layers, so it takes only MindSpeed-LLM's qwen3 spec, which builds the local
 * spec's layers: PTNorm (torch LayerNorm, or legacy RMSNorm) for the input, pre-MLP and (with
 * --qk-layernorm) per-head q/k norms, column/row-parallel linears, the dense MLP. */
#define QWEN3_SPEC "mindspeed_llm.tasks.models.spec.qwen3_spec layer_spec"
static void layer_spec(const struct mc_args *a, struct mc_refusals *r)
{
    const struct mc_val *v = &a->v[A(spec)];
    if (v->kind != MC_V_LIST)
        return;
    char got[256] = "";
    for (int k = 0; k < v->n; k++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", k ? " " : "",
                 v->items[k].kind == MC_V_STR ? v->items[k].s : "?");
    if (!str_is(got, QWEN3_SPEC)) {
        refuse(r, "--spec %s is not supported by megatron.c (it builds its own layers; the only "
               "spec it takes is MindSpeed-LLM's " QWEN3_SPEC ")", got);
        return;
    }
    /* the spec keeps its norms outside TE's fused linears: local checkpoint names */
    if (!str_is(mc_args_str(a, A(transformer_impl)), "local"))
        refuse(r, "--spec " QWEN3_SPEC " with --transformer-impl %s is not supported by "
               "megatron.c yet (separate norms beside Transformer-Engine linears); add "
               "--transformer-impl local", mc_args_str(a, A(transformer_impl)));
    if (mc_args_bool(a, A(apply_layernorm_1p)))
        refuse(r, "--spec " QWEN3_SPEC " with --apply-layernorm-1p is not supported by megatron.c "
               "(the spec's PTNorm, torch's LayerNorm or the legacy RMSNorm, has no zero-centered "
               "gamma)");
    if (!mc_args_is_none(a, A(num_experts)) && mc_args_int(a, A(num_experts)) > 0)
        refuse(r, "--spec " QWEN3_SPEC " with --num-experts is not supported by megatron.c yet "
               "(only its dense MLP is checked)");
}

void mc_args_refusals(const struct mc_args *a, struct mc_refusals *out)
{
    out->n = out->kept = 0;
    features(a, out);
    layer_spec(a, out);
    table(a, out);
    pipeline(a, out);
    checkpoint_format(a, out);
    precision(a, out);
    tokenizer(a, out);
}

void mc_refusals_print(FILE *f, const struct mc_refusals *r)
{
    for (int k = 0; k < r->kept; k++)
        fprintf(f, "NotImplementedError: %s\n", r->msg[k]);
    if (r->n > r->kept)
        fprintf(f, "NotImplementedError: ... and %d more options megatron.c does not support\n",
                r->n - r->kept);
}

mc_status mc_args_check_support(struct mc_args *a)
{
    static struct mc_refusals r; /* 18 KB: not on the stack; start-up is single-threaded */
    mc_args_refusals(a, &r);
    if (!r.n)
        return MC_OK;
    snprintf(a->err, sizeof(a->err), "%s", r.msg[0]);
    a->exit_code = 1;
    a->err_kind = "NotImplementedError";
    return mc_error(MC_ERR_UNSUPPORTED, "%s", a->err);
}
