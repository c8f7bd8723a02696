/* GPT model configuration: Megatron's defaults and the checks of
 * megatron/training/arguments.py:validate_args and
 * megatron/core/transformer/transformer_config.py:TransformerConfig.__post_init__ that concern
 * the model. Messages name options in their command-line spelling. */
#include "megatron/transformer_config.h"

#include <math.h>

void mc_gpt_config_default(struct mc_gpt_config *cfg)
{
    *cfg = (struct mc_gpt_config){
        .num_layers = 0, /* required, as in Megatron (no default) */
        .hidden_size = 0,
        .num_attention_heads = 0,
        .num_query_groups = 0,
        .kv_channels = 0,
        .ffn_hidden_size = 0,
        .vocab_size = 0,
        .padded_vocab_size = 0,
        .make_vocab_size_divisible_by = 128,
        .max_position_embeddings = 0,
        .seq_length = 0,
        .micro_batch_size = 0,
        .normalization = MC_NORM_LAYERNORM,
        .norm_epsilon = 1e-5f,
        .position_embedding_type = MC_POS_LEARNED_ABSOLUTE,
        .rotary_percent = 1.0f,
        .rotary_base = 10000.0f,
        .rotary_interleaved = false,
        .use_rope_scaling = false,
        .rope_scaling_factor = 8.0f,
        .activation = MC_ACT_GELU_TANH,
        .add_bias_linear = true,
        .add_qkv_bias = false,
        .apply_query_key_layer_scaling = false,
        .attention_softmax_in_fp32 = false,
        .untie_embeddings_and_output_weights = false,
        .fp32_residual_connection = false,
        .hidden_dropout = 0.1f,
        .attention_dropout = 0.1f,
        .recompute_core_attention = true, /* recompute_modules defaults to ["core_attn"] */
        .init_method_std = 0.02f,
        .seed = 1234,
        .params_dtype = MC_DTYPE_F32,
        .tensor_model_parallel_size = 1,
        .tensor_model_parallel_rank = 0,
        .sequence_parallel = false,
        .pipeline_model_parallel_size = 1,
        .pipeline_model_parallel_rank = 0,
    };
}

static mc_status positive(int64_t v, const char *opt)
{
    if (v <= 0)
        return mc_error(MC_ERR_CONFIG, "%s must be given and positive (got %lld)", opt,
                        (long long)v);
    return MC_OK;
}

/* TransformerConfig.__post_init__'s checks of an uneven split (its ValueError texts). */
static mc_status check_uneven_pipeline(const struct mc_gpt_config *c, int pp)
{
    int64_t first = c->num_layers_in_first_pipeline_stage, last = c->num_layers_in_last_pipeline_stage;
    int vp = c->virtual_pipeline_model_parallel_size;
    int64_t layers = c->num_layers, stages = pp;
    if (first < 0 || last < 0)
        return mc_error(MC_ERR_CONFIG, "num_layers_in_%s_pipeline_stage must be larger than 0",
                        first < 0 ? "first" : "last");
    if (first) {
        if (vp && first % vp != 0)
            return mc_error(MC_ERR_CONFIG, "number of layers at first stage: %lldmust be divisible "
                            "by virtual pipelineparallel degree %d", (long long)first, vp);
        layers -= first;
        stages--;
    }
    if (last) {
        if (vp && last % vp != 0)
            return mc_error(MC_ERR_CONFIG, "number of layers at last stage: %lldmust be divisible "
                            "by virtual pipelineparallel degree %d", (long long)last, vp);
        layers -= last;
        stages--;
    }
    if (stages <= 0) /* Megatron divides by the middle stages: ZeroDivisionError */
        return mc_error(MC_ERR_CONFIG, "--decoder-first-pipeline-num-layers / --decoder-last-"
                        "pipeline-num-layers with --pipeline-model-parallel-size %d leave no "
                        "middle pipeline stage (Megatron: ZeroDivisionError: integer division or "
                        "modulo by zero)", pp);
    if (layers < 0 || layers % stages != 0)
        return mc_error(MC_ERR_CONFIG, "number of layers at middle stage: %lld must be divisible "
                        "bythe middle pipeline model parallel size %lld", (long long)layers,
                        (long long)stages);
    if (vp && (layers / stages) % vp != 0)
        return mc_error(MC_ERR_CONFIG, "number of layers on each middle pipeline rank:%lld must "
                        "be divisible by virtualpipeline parallel degree %d",
                        (long long)(layers / stages), vp);
    /* Megatron builds such stages empty; ours need parameters on every stage (grad buffers) */
    if (!layers)
        return mc_error(MC_ERR_UNSUPPORTED, "--decoder-first-pipeline-num-layers %lld and "
                        "--decoder-last-pipeline-num-layers %lld take all %lld layers, leaving the "
                        "middle pipeline stages empty: megatron.c does not build a pipeline stage "
                        "without parameters yet (give each middle stage at least one layer)",
                        (long long)first, (long long)last, (long long)c->num_layers);
    return MC_OK;
}

static bool uneven(const struct mc_gpt_config *c)
{
    return c->num_layers_in_first_pipeline_stage || c->num_layers_in_last_pipeline_stage ||
           c->n_num_layer_list;
}

/* MindSpeed-LLM's --num-layer-list rules (NumLayerListFeature.validate_args and
 * core_transformer_config_from_args_wrapper, their ValueError texts). */
static mc_status check_num_layer_list(const struct mc_gpt_config *c, int pp)
{
    int64_t sum = 0;
    if (c->n_num_layer_list != pp)
        return mc_error(MC_ERR_CONFIG, "len(args.num_layer_list) != args.pipeline_model_parallel_size");
    if (pp <= 1)
        return mc_error(MC_ERR_CONFIG, "Dynamic pipeline model should work with pipeline parallel.");
    if (c->virtual_pipeline_model_parallel_size)
        return mc_error(MC_ERR_UNSUPPORTED, "--num-layer-list with virtual pipeline stages is not "
                        "supported (MindSpeed-LLM builds each stage's whole count in every chunk)");
    if (c->num_layers_in_first_pipeline_stage || c->num_layers_in_last_pipeline_stage)
        return mc_error(MC_ERR_CONFIG, "--num-layer-list with --decoder-first-pipeline-num-layers "
                        "/ --decoder-last-pipeline-num-layers: give one of them (MindSpeed-LLM "
                        "ignores the latter)");
    for (int r = 0; r < pp; r++) {
        if (c->num_layer_list[r] < 0)
            return mc_error(MC_ERR_CONFIG, "--num-layer-list: %lld layers for stage %d",
                            (long long)c->num_layer_list[r], r);
        /* MindSpeed builds such a stage empty; ours need its layers (buffers, schedules) */
        if (!c->num_layer_list[r])
            return mc_error(MC_ERR_UNSUPPORTED, "--num-layer-list: no layers for pipeline stage "
                            "%d: megatron.c does not build a pipeline stage without transformer "
                            "layers yet (give each stage at least one layer)", r);
        sum += c->num_layer_list[r];
    }
    if (sum != c->num_layers)
        return mc_error(MC_ERR_CONFIG, "Incorrect num_layer_list config since its sum(%lld is "
                        "unequal to total num layers(%lld).", (long long)sum,
                        (long long)c->num_layers);
    return MC_OK;
}

/* Interleaved pipelining: V chunks per stage, each with an equal share of the stage's layers
 * (get_num_layers_to_build divides a stage's layers by V). */
static mc_status check_virtual_pipeline(const struct mc_gpt_config *c, int pp)
{
    int vp = c->virtual_pipeline_model_parallel_size ? c->virtual_pipeline_model_parallel_size : 1;
    if (c->virtual_pipeline_model_parallel_size < 0 || c->virtual_pipeline_model_parallel_rank < 0 ||
        c->virtual_pipeline_model_parallel_rank >= vp)
        return mc_error(MC_ERR_CONFIG, "virtual pipeline rank %d of %d (--num-virtual-stages-per-"
                        "pipeline-rank): expected 0 <= rank < size",
                        c->virtual_pipeline_model_parallel_rank,
                        c->virtual_pipeline_model_parallel_size);
    if (c->n_num_layer_list)
        return check_num_layer_list(c, pp);
    if (uneven(c))
        return check_uneven_pipeline(c, pp);
    if (c->num_layers % ((int64_t)pp * vp) != 0)
        return mc_error(MC_ERR_CONFIG, "--num-layers %lld is not divisible by "
                        "--pipeline-model-parallel-size %d x %d virtual stages per pipeline rank: "
                        "every model chunk needs the same number of layers",
                        (long long)c->num_layers, pp, vp);
    return MC_OK;
}

mc_status mc_gpt_pipeline_split_check(const struct mc_gpt_config *c)
{
    int pp = c->pipeline_model_parallel_size > 1 ? c->pipeline_model_parallel_size : 1;
    if (!uneven(c) && c->num_layers % pp != 0)
        return mc_error(MC_ERR_CONFIG, "Number of layers should be divisible by the "
                        "pipeline-model-parallel size: --num-layers %lld, "
                        "--pipeline-model-parallel-size %d", (long long)c->num_layers, pp);
    return check_virtual_pipeline(c, pp);
}

void mc_gpt_stage_layers(const struct mc_gpt_config *c, int pp_rank, int vp_rank,
                         int64_t *n_layers, int64_t *offset)
{
    int64_t pp = c->pipeline_model_parallel_size > 1 ? c->pipeline_model_parallel_size : 1;
    int64_t vp = c->virtual_pipeline_model_parallel_size > 1 ? c->virtual_pipeline_model_parallel_size : 1;
    int64_t first = c->num_layers_in_first_pipeline_stage, last = c->num_layers_in_last_pipeline_stage;
    if (c->n_num_layer_list) { /* MindSpeed-LLM: the stage's entry, after the sum before it */
        *n_layers = c->num_layer_list[pp_rank];
        *offset = 0;
        for (int r = 0; r < pp_rank; r++)
            *offset += c->num_layer_list[r];
        return;
    }
    if (!uneven(c) || pp == 1) { /* chunk v * pp + r of pp * vp equal chunks */
        *n_layers = c->num_layers / (pp * vp);
        *offset = ((int64_t)vp_rank * pp + pp_rank) * *n_layers;
        return;
    }
    int64_t middle_stages = pp - (first > 0) - (last > 0);
    int64_t middle = c->num_layers - first - last;
    int64_t per_rank = middle / middle_stages; /* get_num_layers_to_build */
    if (pp_rank == 0 && first)
        per_rank = first;
    if (pp_rank == pp - 1 && last)
        per_rank = last;
    *n_layers = per_rank / vp;
    /* get_transformer_layer_offset: with interleaving each virtual rank v starts after v
     * "rounds" of (first + middle + last) / vp layers */
    int64_t f = first / vp, m = middle / vp, total = f + m + (last / vp);
    if (vp > 1)
        *offset = pp_rank == 0 ? vp_rank * total
                               : vp_rank * total + f + (pp_rank - 1) * (m / middle_stages);
    else
        *offset = pp_rank == 0 ? 0 : (first ? pp_rank - 1 : pp_rank) * (middle / middle_stages) + first;
}

static mc_status check_sizes(const struct mc_gpt_config *c)
{
    mc_status st;
    if ((st = positive(c->num_layers, "--num-layers")) != MC_OK ||
        (st = positive(c->hidden_size, "--hidden-size")) != MC_OK ||
        (st = positive(c->num_attention_heads, "--num-attention-heads")) != MC_OK ||
        (st = positive(c->vocab_size, "vocab size (from the tokenizer)")) != MC_OK ||
        (st = positive(c->seq_length, "--seq-length")) != MC_OK ||
        (st = positive(c->micro_batch_size, "--micro-batch-size")) != MC_OK ||
        (st = positive(c->make_vocab_size_divisible_by, "--make-vocab-size-divisible-by")) != MC_OK)
        return st;
    if (c->num_query_groups < 0 || c->kv_channels < 0 || c->ffn_hidden_size < 0 ||
        c->padded_vocab_size < 0 || c->max_position_embeddings < 0)
        return mc_error(MC_ERR_CONFIG,
                        "negative size: --num-query-groups %lld, --kv-channels %lld, "
                        "--ffn-hidden-size %lld, padded vocab %lld, --max-position-embeddings %lld",
                        (long long)c->num_query_groups, (long long)c->kv_channels,
                        (long long)c->ffn_hidden_size, (long long)c->padded_vocab_size,
                        (long long)c->max_position_embeddings);
    if (c->tensor_model_parallel_size < 1)
        return mc_error(MC_ERR_CONFIG, "--tensor-model-parallel-size must be >= 1 (got %d)",
                        c->tensor_model_parallel_size);
    if (c->tensor_model_parallel_rank < 0 ||
        c->tensor_model_parallel_rank >= c->tensor_model_parallel_size)
        return mc_error(MC_ERR_CONFIG,
                        "tensor-model-parallel rank %d is outside [0, %d) "
                        "(--tensor-model-parallel-size %d)",
                        c->tensor_model_parallel_rank, c->tensor_model_parallel_size,
                        c->tensor_model_parallel_size);
    if (c->pipeline_model_parallel_size < 0)
        return mc_error(MC_ERR_CONFIG, "--pipeline-model-parallel-size must be >= 1 (got %d)",
                        c->pipeline_model_parallel_size);
    int pp = c->pipeline_model_parallel_size ? c->pipeline_model_parallel_size : 1;
    if (c->pipeline_model_parallel_rank < 0 || c->pipeline_model_parallel_rank >= pp)
        return mc_error(MC_ERR_CONFIG,
                        "pipeline-model-parallel rank %d is outside [0, %d) "
                        "(--pipeline-model-parallel-size %d)",
                        c->pipeline_model_parallel_rank, pp, pp);
    if (c->sequence_parallel && c->tensor_model_parallel_size <= 1)
        return mc_error(MC_ERR_CONFIG, "--sequence-parallel needs --tensor-model-parallel-size > 1 "
                        "(got %d): can not use sequence parallelism without tensor parallelism",
                        c->tensor_model_parallel_size);
    if (c->sequence_parallel && c->seq_length % c->tensor_model_parallel_size != 0)
        return mc_error(MC_ERR_CONFIG, "--sequence-parallel: --seq-length %lld is not divisible "
                        "by --tensor-model-parallel-size %d (the first dimension of the tensor "
                        "should be divisible by tensor parallel size)",
                        (long long)c->seq_length, c->tensor_model_parallel_size);
    if (!uneven(c) && c->num_layers % pp != 0)
        return mc_error(MC_ERR_CONFIG, "Number of layers should be divisible by the "
                        "pipeline-model-parallel size: --num-layers %lld, "
                        "--pipeline-model-parallel-size %d", (long long)c->num_layers, pp);
    return check_virtual_pipeline(c, pp);
}

static mc_status check_enums(const struct mc_gpt_config *c)
{
    if ((unsigned)c->normalization > MC_NORM_RMSNORM)
        return mc_error(MC_ERR_CONFIG, "--normalization: invalid value %d (expected LayerNorm "
                        "or RMSNorm)", (int)c->normalization);
    if ((unsigned)c->position_embedding_type > MC_POS_NONE)
        return mc_error(MC_ERR_CONFIG, "--position-embedding-type: invalid value %d (expected "
                        "learned_absolute, rope or none)", (int)c->position_embedding_type);
    if ((unsigned)c->activation > MC_ACT_SQUARED_RELU)
        return mc_error(MC_ERR_CONFIG, "activation: invalid value %d (expected gelu, swiglu "
                        "or squared-relu)", (int)c->activation);
    if (c->params_dtype != MC_DTYPE_F32 && c->params_dtype != MC_DTYPE_BF16 &&
        c->params_dtype != MC_DTYPE_F16)
        return mc_error(MC_ERR_CONFIG, "params dtype %s: expected float32, bfloat16 (--bf16) or "
                        "float16 (--fp16)", mc_dtype_name(c->params_dtype));
    if (c->params_dtype != MC_DTYPE_F32 && c->fp32_residual_connection) {
        /* the layouts whose residual-stream messages and buffers are still params-dtype only */
        const char *with = c->sequence_parallel                ? "--sequence-parallel"
                           : c->distribute_saved_activations ? "--distribute-saved-activations"
                           : c->num_moe_experts > 0          ? "--num-experts"
                                                             : NULL;
        if (with)
            return mc_error(MC_ERR_UNSUPPORTED, "--fp32-residual-connection with %s params and "
                            "%s is not implemented in megatron.c yet (the fp32 residual stream "
                            "runs without sequence parallelism, "
                            "--distribute-saved-activations and MoE layers)",
                            mc_dtype_name(c->params_dtype), with);
    }
    if (c->grad_dtype != MC_DTYPE_F32 && c->grad_dtype != c->params_dtype)
        return mc_error(MC_ERR_CONFIG, "grad dtype %s with %s params: expected float32, or the "
                        "16-bit params dtype (--fp16 without "
                        "--accumulate-allreduce-grads-in-fp32, --bf16 --grad-reduce-in-bf16)",
                        mc_dtype_name(c->grad_dtype), mc_dtype_name(c->params_dtype));
    return MC_OK;
}

/* TransformerConfig.__post_init__ and validate_args rules on heads, groups and widths. */
static mc_status derive_widths(struct mc_gpt_config *c)
{
    int64_t tp = c->tensor_model_parallel_size;
    if (c->kv_channels == 0) {
        if (c->hidden_size % c->num_attention_heads != 0)
            return mc_error(MC_ERR_CONFIG, "--num-attention-heads (%lld) must divide "
                            "--hidden-size (%lld) when --kv-channels is not given",
                            (long long)c->num_attention_heads, (long long)c->hidden_size);
        c->kv_channels = c->hidden_size / c->num_attention_heads;
    }
    if (c->num_attention_heads % tp != 0)
        return mc_error(MC_ERR_CONFIG, "--num-attention-heads (%lld) must be a multiple of "
                        "--tensor-model-parallel-size (%lld)",
                        (long long)c->num_attention_heads, (long long)tp);
    if (c->num_query_groups == 0)
        c->num_query_groups = c->num_attention_heads;
    if (c->num_attention_heads % c->num_query_groups != 0)
        return mc_error(MC_ERR_CONFIG, "--num-query-groups (%lld) must divide "
                        "--num-attention-heads (%lld)", (long long)c->num_query_groups,
                        (long long)c->num_attention_heads);
    if (c->num_query_groups % tp != 0)
        return mc_error(MC_ERR_CONFIG, "--num-query-groups (%lld) must be a multiple of "
                        "--tensor-model-parallel-size (%lld)", (long long)c->num_query_groups,
                        (long long)tp);
    if (c->ffn_hidden_size == 0) {
        /* validate_args: SwiGLU keeps the parameter count of a 4h MLP, rounded down to 64 */
        if (c->activation == MC_ACT_SWIGLU)
            c->ffn_hidden_size = (int64_t)((4.0 * (double)c->hidden_size * 2.0 / 3.0) / 64.0) * 64;
        else
            c->ffn_hidden_size = 4 * c->hidden_size;
        if (c->ffn_hidden_size <= 0)
            return mc_error(MC_ERR_CONFIG, "derived --ffn-hidden-size is %lld for --hidden-size "
                            "%lld; give --ffn-hidden-size", (long long)c->ffn_hidden_size,
                            (long long)c->hidden_size);
    }
    if (c->ffn_hidden_size % tp != 0)
        return mc_error(MC_ERR_CONFIG, "--ffn-hidden-size (%lld) must be a multiple of "
                        "--tensor-model-parallel-size (%lld)", (long long)c->ffn_hidden_size,
                        (long long)tp);
    return MC_OK;
}

/* tokenizer.py:_vocab_size_with_padding */
static mc_status derive_vocab(struct mc_gpt_config *c)
{
    int64_t tp = c->tensor_model_parallel_size;
    int64_t mult = c->make_vocab_size_divisible_by * tp;
    if (c->padded_vocab_size == 0) {
        c->padded_vocab_size = (c->vocab_size + mult - 1) / mult * mult;
        return MC_OK;
    }
    if (c->padded_vocab_size < c->vocab_size)
        return mc_error(MC_ERR_CONFIG, "padded vocab size (%lld) is smaller than the vocab size "
                        "(%lld)", (long long)c->padded_vocab_size, (long long)c->vocab_size);
    if (c->padded_vocab_size % tp != 0)
        return mc_error(MC_ERR_CONFIG, "padded vocab size (%lld) must be a multiple of "
                        "--tensor-model-parallel-size (%lld)", (long long)c->padded_vocab_size,
                        (long long)tp);
    return MC_OK;
}

static mc_status check_positions(struct mc_gpt_config *c)
{
    if (c->max_position_embeddings == 0) {
        if (c->position_embedding_type == MC_POS_LEARNED_ABSOLUTE)
            return mc_error(MC_ERR_CONFIG, "--max-position-embeddings must be given for "
                            "--position-embedding-type learned_absolute");
        c->max_position_embeddings = c->seq_length;
    }
    if (c->max_position_embeddings < c->seq_length)
        return mc_error(MC_ERR_CONFIG, "--max-position-embeddings (%lld) must be greater than or "
                        "equal to --seq-length (%lld)", (long long)c->max_position_embeddings,
                        (long long)c->seq_length);
    if ((unsigned)c->alibi > MC_ALIBI_SQUARE)
        return mc_error(MC_ERR_CONFIG, "alibi: invalid value %d (expected 0 none, 1 row form, "
                        "2 square form)", c->alibi);
    if (c->alibi && c->position_embedding_type != MC_POS_NONE)
        return mc_error(MC_ERR_CONFIG, "ALiBi attention adds no position embedding: expected "
                        "position_embedding_type none with it, got %d",
                        (int)c->position_embedding_type);
    if (c->alibi && c->sliding_window)
        return mc_error(MC_ERR_UNSUPPORTED, "--sliding-window with --position-embedding-type "
                        "alibi is not supported by megatron.c (MindSpeed-LLM drops the window "
                        "under ALiBi: give one of them)");
    if (c->position_embedding_type != MC_POS_ROPE)
        return MC_OK;
    if (!(c->rotary_percent > 0.0f && c->rotary_percent <= 1.0f))
        return mc_error(MC_ERR_CONFIG, "--rotary-percent (%g) must be in (0, 1]",
                        (double)c->rotary_percent);
    int64_t dim = c->kv_channels;
    if (c->rotary_percent < 1.0f)
        dim = (int64_t)((double)dim * (double)c->rotary_percent);
    if (dim < 2 || dim % 2 != 0)
        return mc_error(MC_ERR_CONFIG, "rotary dimension %lld (kv channels %lld x --rotary-percent "
                        "%g) must be even and >= 2", (long long)dim, (long long)c->kv_channels,
                        (double)c->rotary_percent);
    if (!(c->rotary_base > 0.0f) || !isfinite(c->rotary_base))
        return mc_error(MC_ERR_CONFIG, "--rotary-base (%g) must be positive",
                        (double)c->rotary_base);
    if (c->use_rope_scaling && !(c->rope_scaling_factor > 0.0f))
        return mc_error(MC_ERR_CONFIG, "--rope-scaling-factor (%g) must be positive",
                        (double)c->rope_scaling_factor);
    return MC_OK;
}

static mc_status check_probabilities(const struct mc_gpt_config *c)
{
    if (!(c->hidden_dropout >= 0.0f && c->hidden_dropout < 1.0f))
        return mc_error(MC_ERR_CONFIG, "--hidden-dropout (%g) must be in [0, 1)",
                        (double)c->hidden_dropout);
    if (!(c->attention_dropout >= 0.0f && c->attention_dropout < 1.0f))
        return mc_error(MC_ERR_CONFIG, "--attention-dropout (%g) must be in [0, 1)",
                        (double)c->attention_dropout);
    if (!(c->init_method_std >= 0.0f) || !isfinite(c->init_method_std))
        return mc_error(MC_ERR_CONFIG, "--init-method-std (%g) must be >= 0",
                        (double)c->init_method_std);
    if (!(c->norm_epsilon > 0.0f) || !isfinite(c->norm_epsilon))
        return mc_error(MC_ERR_CONFIG, "--norm-epsilon (%g) must be positive",
                        (double)c->norm_epsilon);
    return MC_OK;
}

/* validate_args items 35, 41, 48 and the bias-activation-fusion rule of TransformerConfig. */
static mc_status apply_megatron_rules(struct mc_gpt_config *c)
{
    if (c->fp32_residual_connection && c->params_dtype == MC_DTYPE_F32)
        return mc_error(MC_ERR_CONFIG, "--fp32-residual-connection: residual connection in fp32 "
                        "only supported when using fp16 or bf16.");
    if (c->apply_query_key_layer_scaling)
        c->attention_softmax_in_fp32 = true;
    if (c->add_bias_linear)
        c->add_qkv_bias = true;
    /* TransformerConfig: the fused bias-GELU needs a bias. (pretrain_gpt's validate_args turns
     * --bias-gelu-fusion off under --disable-bias-linear, i.e. MC_ACT_GELU_ERF; the CLI does
     * that mapping before building this config.) */
    if (!c->add_bias_linear && c->activation == MC_ACT_GELU_TANH)
        return mc_error(MC_ERR_CONFIG, "--bias-gelu-fusion (tanh GELU) needs a linear bias, but "
                        "--disable-bias-linear is set: when bias_activation_fusion is True and "
                        "the activation is gelu, add_bias_linear must also be True (use "
                        "--no-bias-gelu-fusion for exact GELU)");
    return MC_OK;
}

/* TransformerConfig.__post_init__'s recompute rules (the option spellings of the CLI). */
static mc_status check_recompute(const struct mc_gpt_config *c)
{
    if (c->recompute_granularity == MC_RECOMPUTE_FULL && c->recompute_num_layers < 1)
        return mc_error(MC_ERR_CONFIG, "When using recompute_granularity: full "
                        "recompute_num_layers must be between 1 and "
                        "num_layers_per_pipeline_rank: %lld (--recompute-num-layers)",
                        (long long)(c->num_layers / c->pipeline_model_parallel_size));
    if (c->recompute_granularity != MC_RECOMPUTE_FULL && c->recompute_num_layers != 0)
        return mc_error(MC_ERR_CONFIG, "--recompute-num-layers %lld: only with "
                        "--recompute-granularity full", (long long)c->recompute_num_layers);
    if (c->distribute_saved_activations && c->sequence_parallel)
        return mc_error(MC_ERR_CONFIG, "distribute_saved_activations: True must be false when "
                        "sequence parallel is enabled: True");
    if (c->distribute_saved_activations &&
        (c->recompute_granularity != MC_RECOMPUTE_FULL || c->tensor_model_parallel_size < 2))
        return mc_error(MC_ERR_CONFIG, "--distribute-saved-activations needs "
                        "--recompute-granularity full and --tensor-model-parallel-size > 1");
    return MC_OK;
}

/* Sizes are int64 products of config values: refuse configs whose buffers could not be
 * indexed (or would overflow while being sized) instead of wrapping around. */
static mc_status check_extents(const struct mc_gpt_config *c)
{
    const double limit = 0x1p48; /* elements of one buffer */
    double T = (double)c->micro_batch_size * (double)c->seq_length;
    double qkv = (double)(c->num_attention_heads + 2 * c->num_query_groups) * (double)c->kv_channels;
    double widths[] = {(double)c->hidden_size, qkv, 2.0 * (double)c->ffn_hidden_size,
                       (double)c->padded_vocab_size};
    for (int i = 0; i < 4; i++)
        if (T * widths[i] > limit || widths[i] * (double)c->hidden_size > limit)
            return mc_error(MC_ERR_CONFIG, "model too large to index: --micro-batch-size %lld x "
                            "--seq-length %lld x width %.0f (or width x --hidden-size) exceeds "
                            "2^48 elements", (long long)c->micro_batch_size,
                            (long long)c->seq_length, widths[i]);
    if (T * (double)c->seq_length * (double)c->num_attention_heads > limit)
        return mc_error(MC_ERR_CONFIG, "attention scores too large: --micro-batch-size %lld x "
                        "--num-attention-heads %lld x --seq-length^2 (%lld^2) exceeds 2^48",
                        (long long)c->micro_batch_size, (long long)c->num_attention_heads,
                        (long long)c->seq_length);
    if ((double)c->num_layers > 0x1p24 / 3.0)
        return mc_error(MC_ERR_CONFIG, "--num-layers %lld: at most %d layers (dropout streams)",
                        (long long)c->num_layers, (int)(0x1p24 / 3.0));
    return MC_OK;
}

mc_status mc_gpt_config_validate(struct mc_gpt_config *cfg)
{
    if (!cfg)
        return mc_error(MC_ERR_CONFIG, "no GPT config given");
    mc_status st;
    if (cfg->pipeline_model_parallel_size == 0)
        cfg->pipeline_model_parallel_size = 1;
    if ((st = check_sizes(cfg)) != MC_OK || (st = check_enums(cfg)) != MC_OK ||
        (st = derive_widths(cfg)) != MC_OK || (st = derive_vocab(cfg)) != MC_OK ||
        (st = check_positions(cfg)) != MC_OK || (st = check_probabilities(cfg)) != MC_OK ||
        (st = apply_megatron_rules(cfg)) != MC_OK || (st = check_recompute(cfg)) != MC_OK ||
        (st = check_extents(cfg)) != MC_OK || (st = mc_moe_config_check(cfg)) != MC_OK)
        return st;
    return MC_OK;
}
