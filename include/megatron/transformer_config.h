/* The model configuration: the counterpart of megatron/core/transformer/transformer_config.py
 * (TransformerConfig) plus the GPTModel arguments, in the transformer layer so that the layer
 * code reads it without reaching up into models/ (docs/layers.md). megatron/gpt.h includes it. */
#ifndef MEGATRON_TRANSFORMER_CONFIG_H
#define MEGATRON_TRANSFORMER_CONFIG_H

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { MC_GPT_MAX_PIPELINE = 256 }; /* --num-layer-list entries */
enum mc_normalization { MC_NORM_LAYERNORM = 0, MC_NORM_RMSNORM };
enum mc_position_embedding { MC_POS_LEARNED_ABSOLUTE = 0, MC_POS_ROPE, MC_POS_NONE };
/* MindSpeed-LLM's ALiBi bias forms (struct mc_gpt_config.alibi): the [1, s] row slope * j, or
 * the [s, s] slope * (j - i) of --square-alibi-mask. */
enum mc_alibi { MC_ALIBI_NONE = 0, MC_ALIBI_ROW, MC_ALIBI_SQUARE };
/* Non-gated MLP activation. MC_ACT_GELU_TANH is Megatron's default fused bias-GELU (tanh
 * approximation, constant 0.79788456); MC_ACT_GELU_ERF is --no-bias-gelu-fusion. SwiGLU is
 * MC_ACT_SWIGLU (gated: fc1 is [gate; up], output silu(gate) * up). */
enum mc_activation { MC_ACT_GELU_TANH = 0, MC_ACT_GELU_ERF, MC_ACT_SWIGLU, MC_ACT_SQUARED_RELU };
/* Activation recompute (TransformerConfig.recompute_granularity / recompute_method). */
enum mc_recompute { MC_RECOMPUTE_NONE = 0, MC_RECOMPUTE_FULL, MC_RECOMPUTE_SELECTIVE };
enum mc_recompute_method { MC_RECOMPUTE_UNIFORM = 0, MC_RECOMPUTE_BLOCK };
enum mc_moe_balancing { MC_MOE_AUX_LOSS = 0, MC_MOE_SEQ_AUX_LOSS, MC_MOE_BALANCE_NONE };
enum mc_moe_score { MC_MOE_SOFTMAX = 0, MC_MOE_SIGMOID };
#define MC_MOE_MAX_LAYERS 1024

/* TransformerConfig + the GPTModel arguments. Field names follow Megatron's config fields.
 * Zero in a "0 = derived" field takes Megatron's default. Fill with mc_gpt_config_default(). */
struct mc_gpt_config {
    int64_t num_layers;
    int64_t hidden_size;
    int64_t num_attention_heads;
    int64_t num_query_groups;        /* 0 = num_attention_heads (no GQA) */
    int64_t kv_channels;             /* 0 = hidden_size / num_attention_heads */
    int64_t ffn_hidden_size;         /* 0 = 4 * hidden_size; with SwiGLU int(8h/3 / 64) * 64
                                        (validate_args' rule, e.g. 768 -> 2048, 4096 -> 10880) */
    int64_t vocab_size;              /* the tokenizer's vocabulary (unpadded) */
    int64_t padded_vocab_size;       /* 0 = pad with make_vocab_size_divisible_by * tp */
    int64_t make_vocab_size_divisible_by; /* 128 */
    int64_t max_position_embeddings; /* learned_absolute table size; >= seq_length; 0 with
                                        RoPE/none = seq_length */
    int64_t seq_length;              /* the longest sequence forward() will see */
    int64_t micro_batch_size;        /* the largest micro-batch forward() will see */

    enum mc_normalization normalization;
    float norm_epsilon;              /* 1e-5 */
    bool layernorm_zero_centered_gamma; /* --apply-layernorm-1p: norms scale by (1 + weight), the
                                           weight initialized to 0 (TE / FusedLayerNorm) */
    bool qk_layernorm;               /* --qk-layernorm: the norm above (LayerNorm / RMSNorm, 1p
                                        alike) on every query and key head over its kv_channels
                                        after linear_qkv, before RoPE (SelfAttention's
                                        q_layernorm / k_layernorm) */
    enum mc_position_embedding position_embedding_type;
    float rotary_percent;            /* 1.0 */
    float rotary_base;               /* 10000 */
    bool rotary_interleaved;
    bool use_rope_scaling;           /* Llama 3.x: factor, low 1, high 4, old context 8192 */
    float rope_scaling_factor;       /* 8.0 */
    /* MindSpeed-LLM's --rope-scaling-type llama3 constants; 0 = Megatron's fixed 1 / 4 / 8192 */
    float rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position;
    enum mc_activation activation;
    bool add_bias_linear;            /* true */
    bool add_qkv_bias;               /* false; true re-adds only the QKV bias */
    bool apply_query_key_layer_scaling;
    bool attention_softmax_in_fp32;
    /* Core attention as flash attention (training/model_config.c's mc_attention_from_args:
     * --transformer-impl transformer_engine unless --attention-backend unfused, or
     * --use-flash-attn): the
     * backend's flash_attention op pair, which keeps ctx and the row log-sum-exp instead of the
     * [b, heads, s, s] probabilities; false: the unfused DotProductAttention op pair. */
    bool flash_attention;
    /* Every batch's attention mask is the plain causal one (mc_gpt_batch.attention_mask NULL;
     * no --reset-attention-mask): the slots carve no [b, s, s] byte copy of a mask (1 GiB at
     * s 32k), and forward refuses a batch that brings one. false: room for explicit masks. */
    bool causal_mask_only;
    /* MindSpeed-LLM's --sliding-window W (Mistral): query i sees keys i - W .. i (the band of
     * npu_fusion_attention's sparse_mode 4 with pre_tokens W, next_tokens 0); 0 = plain causal. */
    int64_t sliding_window;
    /* MindSpeed-LLM's ALiBi (--position-embedding-type alibi, here MC_POS_NONE plus this): head
     * h of the num_attention_heads (global; a tensor-parallel rank takes its heads' slopes) adds
     * slope_h times the key's distance to its attention scores before the softmax, with
     * MindSpeed's get_slopes (2^(-8 (k + 1) / n) for n a power of two, interleaved otherwise).
     * enum mc_alibi; alibi_fill_neg_inf (--fill-neg-inf) is MindSpeed's -inf fill of the
     * future keys, the same probabilities as the causal mask's -10000 (both exp to 0). */
    int alibi;
    bool alibi_fill_neg_inf;
    bool untie_embeddings_and_output_weights;
    bool fp32_residual_connection;
    float hidden_dropout;            /* 0.1 */
    float attention_dropout;         /* 0.1 */
    float init_method_std;           /* 0.02 */
    uint64_t seed;                   /* 1234: init and dropout streams */
    enum mc_dtype params_dtype;      /* MC_DTYPE_F32, or BF16 / F16 (--bf16 / --fp16): the dtype
                                        the model computes and keeps activations in (gpt.h) */
    enum mc_dtype grad_dtype;        /* MC_DTYPE_F32, or params_dtype (--fp16 without
                                        --accumulate-allreduce-grads-in-fp32, --bf16
                                        --grad-reduce-in-bf16): Megatron's DDP
                                        grad buffer dtype, which every weight-grad add rounds
                                        to (mc_param_set.grad_dtype) */

    int tensor_model_parallel_size;  /* 1 */
    int tensor_model_parallel_rank;  /* 0 */
    /* --sequence-parallel (needs tensor_model_parallel_size > 1 and seq_length divisible by
     * it): activations outside the tensor-parallel regions (norms, dropout, residuals, pipeline
     * messages) are this rank's [s/tp, b, h] shard of the sequence; the column-parallel linears
     * all-gather it, the row-parallel linears reduce-scatter back. The norm weights and the
     * row-parallel biases (mc_param_view.sequence_parallel) then need their grads summed over
     * the tensor-parallel group: mc_gpt_sequence_parallel_grad_sync. */
    bool sequence_parallel;
    /* Pipeline stage of this model: stage r holds layers [r L/pp, (r+1) L/pp) (named from 0 as
     * in Megatron's per-stage state dicts), the first stage the embeddings, the last the final
     * norm, output layer and loss. 0 = 1 (no pipeline). */
    int pipeline_model_parallel_size;
    int pipeline_model_parallel_rank;
    /* Interleaved pipelining (--num-virtual-stages-per-pipeline-rank V): this model is chunk
     * `virtual_pipeline_model_parallel_rank` of the V chunks of its stage, i.e. virtual stage
     * v * pp + r of pp * V, holding layers [(v pp + r) L/(pp V), ... + L/(pp V)) (named from 0,
     * as in Megatron's model<v> state dicts). Only the first virtual stage has the embeddings,
     * only the last the final norm, output layer and loss. 0 = no interleaving (one chunk). */
    int virtual_pipeline_model_parallel_size;
    int virtual_pipeline_model_parallel_rank;
    /* Activation recompute in training forwards, as TransformerBlock._checkpointed_forward and
     * checkpoint_core_attention (the results are bit-identical to none; only memory and time
     * change). FULL + UNIFORM: the layers of this model chunk in groups of
     * recompute_num_layers (the last group may be shorter), each group's input kept and the
     * group rerun before its backward; FULL + BLOCK: the first recompute_num_layers layers of
     * the chunk rerun one by one, the rest keep their activations. SELECTIVE: core attention's
     * [b, np, s, s] probabilities are not kept but recomputed in backward
     * (recompute_core_attention false: --recompute-modules without core_attn). With
     * distribute_saved_activations (FULL, tensor parallel without sequence parallel) each rank
     * keeps 1/tp of every group input, all-gathered before the rerun. */
    enum mc_recompute recompute_granularity;
    enum mc_recompute_method recompute_method;
    int64_t recompute_num_layers;
    bool recompute_core_attention;
    bool distribute_saved_activations;
    /* Uneven pipelines (--decoder-first/last-pipeline-num-layers; TransformerConfig's
     * num_layers_in_first/last_pipeline_stage): the layers of the first / last pipeline rank
     * (all its virtual stages together), the rest split evenly over the middle ranks.
     * 0 = None (even split). mc_gpt_stage_layers gives each chunk's count and offset. */
    int64_t num_layers_in_first_pipeline_stage;
    int64_t num_layers_in_last_pipeline_stage;
    /* MindSpeed-LLM's --num-layer-list: the layers of every pipeline stage (n_num_layer_list =
     * pipeline size entries; 0 entries = not given), stage r starting at the sum before it. */
    int n_num_layer_list;
    int64_t num_layer_list[MC_GPT_MAX_PIPELINE];
    /* Mixture of experts (--num-experts, transformer/moe/, docs/moe.md): num_moe_experts 0 =
     * dense. A layer is a MoE layer when bit l of moe_layer_mask is set (--moe-layer-freq:
     * every N-th from layer 0, or the given pattern). Each token goes to moe_router_topk
     * experts (SequentialMLP of width moe_ffn_hidden_size, 0 = ffn_hidden_size). The router
     * (TopKRouter) scores with softmax or sigmoid, before (pre_softmax) or after the top-k; the
     * aux loss (switch, seq) and z-loss enter backward through MoEAuxLossAutoScaler. */
    int64_t num_moe_experts;
    int64_t moe_router_topk;
    int64_t moe_ffn_hidden_size;
    uint64_t moe_layer_mask[MC_MOE_MAX_LAYERS / 64];
    enum mc_moe_balancing moe_router_load_balancing_type;
    enum mc_moe_score moe_router_score_function;
    bool moe_router_pre_softmax;
    float moe_aux_loss_coeff;        /* 0 */
    float moe_z_loss_coeff;          /* 0 = None */
    bool calculate_per_token_loss;   /* the aux losses' grads scaled by the tokens (router.py) */
};

/* Megatron's defaults (as pretrain_gpt would fill them for a bare GPT config). */
MC_API void mc_gpt_config_default(struct mc_gpt_config *cfg);
/* Fills derived fields (query groups, kv channels, ffn, padded vocab) and checks every rule
 * Megatron's validate_args / TransformerConfig.__post_init__ would; MC_ERR_CONFIG with a message
 * naming the option (as its command-line spelling) otherwise. Called by mc_gpt_model_init.
 * Like validate_args it also sets add_qkv_bias when add_bias_linear, and
 * attention_softmax_in_fp32 under apply_query_key_layer_scaling. MC_ACT_GELU_TANH (the fused
 * bias-GELU) without add_bias_linear is refused as TransformerConfig does (the CLI maps
 * --disable-bias-linear to MC_ACT_GELU_ERF first, as validate_args does). params_dtype other
 * than F32, BF16, F16 is MC_ERR_CONFIG; fp32_residual_connection with 16-bit params is
 * MC_ERR_UNSUPPORTED (not implemented). */
MC_API mc_status mc_gpt_config_validate(struct mc_gpt_config *cfg);
/* The layers of model chunk (pipeline rank pp_rank, virtual rank vp_rank) of a validated
 * config and the global index of its first one: Megatron's get_num_layers_to_build and
 * get_transformer_layer_offset (transformer_block.py, transformer_layer.py). */
/* The pipeline split rules alone (pipeline / virtual sizes, num_layers, first / last stage
 * layers): what mc_gpt_config_validate checks of them, for a dry run. */
MC_API mc_status mc_gpt_pipeline_split_check(const struct mc_gpt_config *cfg);
/* The MoE rules of TransformerConfig and validate_args, and what megatron.c does not do yet
 * (transformer/moe/moe_utils.c; called by mc_gpt_config_validate). Fills moe_ffn_hidden_size. */
mc_status mc_moe_config_check(struct mc_gpt_config *cfg);

/* Global layer l is a mixture-of-experts layer. */
static inline bool mc_gpt_moe_layer(const struct mc_gpt_config *cfg, int64_t l)
{
    return cfg->num_moe_experts > 0 && l >= 0 && l < MC_MOE_MAX_LAYERS &&
           ((cfg->moe_layer_mask[l / 64] >> (l % 64)) & 1u);
}

MC_API void mc_gpt_stage_layers(const struct mc_gpt_config *cfg, int pp_rank, int vp_rank,
                                int64_t *n_layers, int64_t *offset);

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_TRANSFORMER_CONFIG_H */
