/* From validated arguments to the configs of the model and optimizer APIs
 * (include/megatron/gpt.h, optimizer.h): the part of pretrain_gpt.py's model_provider and of
 * core_transformer_config_from_args / get_megatron_optimizer_config that megatron.c needs. */
#ifndef MC_TRAINING_MODEL_CONFIG_H
#define MC_TRAINING_MODEL_CONFIG_H

#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills every field of `cfg` (it does not need mc_gpt_config_default). vocab_size is the
 * tokenizer's unpadded size, padded_vocab_size Megatron's padded one; tp_rank is this rank's
 * tensor-parallel rank. MC_ERR_UNSUPPORTED naming the option for model features the config
 * cannot express (e.g. --position-embedding-type mrope, --openai-gelu). */
MC_API mc_status mc_gpt_config_from_args(const struct mc_args *a, int64_t vocab_size,
                                         int64_t padded_vocab_size, int tp_rank,
                                         struct mc_gpt_config *cfg);
/* Whether core attention runs as flash attention (else the unfused DotProductAttention op
 * pair), from --transformer-impl, --attention-backend, --use-flash-attn and
 * --use-legacy-models as Megatron picks its kernel; why (may be NULL): the reason, in words. */
MC_API bool mc_attention_from_args(const struct mc_args *a, const char **why);
/* What the config's activation recompute does, in words, for the log and --dry-run (one
 * line, no newline); layers = the layers of one model chunk. */
MC_API void mc_recompute_describe(const struct mc_gpt_config *cfg, int64_t layers, char *buf,
                                  size_t n);
/* MindSpeed-LLM's --num-layer-list into cfg->num_layer_list (int() of each comma-separated
 * item, as core_transformer_config_from_args_wrapper parses it); nothing without it. */
MC_API mc_status mc_num_layer_list_from_args(const struct mc_args *a, struct mc_gpt_config *cfg);
MC_API void mc_opt_config_from_args(const struct mc_args *a, struct mc_optimizer_config *cfg);

#ifdef __cplusplus
}
#endif

#endif
