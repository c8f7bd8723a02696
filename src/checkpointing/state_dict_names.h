/* State-dict key names of Megatron-LM core_v0.12.1's three GPT model flavours, and the mapping
 * between them (one table, src/checkpointing/state_dict_names.c):
 *   MC_SD_LOCAL   mcore GPTModel, local spec (--transformer-impl local): what megatron.c computes
 *                 with; flat keys "decoder.layers.0.input_layernorm.weight"
 *   MC_SD_TE      mcore GPTModel, Transformer Engine spec (--transformer-impl transformer_engine,
 *                 Megatron's default): the input / pre-MLP norms are fused into linear_qkv /
 *                 linear_fc1 ("...linear_qkv.layer_norm_weight"), core_attention has _extra_state
 *   MC_SD_LEGACY  megatron/legacy/model GPTModel (--use-legacy-models): nested dicts, written here
 *                 as dotted paths "language_model.encoder.layers.0.input_norm.weight"; which
 *                 leading components are dict levels is mc_sd_legacy_depth's answer
 * Layer numbers are those of the state dict (local to the pipeline stage) and pass through
 * unchanged. Keys are parameters or `<module>._extra_state` entries (None in our files; TE's
 * serialized fp8 metadata is ignored on reading). Counterpart in Megatron: the module attribute
 * names in megatron/core/models/gpt (gpt_layer_specs.py), megatron/legacy/model (gpt_model, language_model, transformer), and the
 * local->TE map of TransformerLayer.sharded_state_dict_keys_map. */
#ifndef MC_CHECKPOINTING_STATE_DICT_NAMES_H
#define MC_CHECKPOINTING_STATE_DICT_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "megatron.h"

enum mc_sd_scheme { MC_SD_LOCAL, MC_SD_TE, MC_SD_LEGACY, MC_SD_SCHEMES };

/* "local", "transformer_engine", "legacy" */
const char *mc_sd_scheme_name(enum mc_sd_scheme s);

/* Maps `key` of scheme `from` to scheme `to` into out[n]. `tied_head` says the output layer shares the
 * word embeddings (no --untie-embeddings-and-output-weights): the legacy model then names the last
 * pipeline stage's copy (pp > 1) word_embeddings_for_head.weight and has no output-layer
 * _extra_state. *absent is set (and out is "")
 * when the key has no counterpart in `to` (TE's core_attention._extra_state in the local spec,
 * the tied head's _extra_state in legacy). Errors: MC_ERR_FORMAT for a key the scheme does not
 * have (the message names key and scheme), MC_ERR_UNSUPPORTED for a tensor `to` cannot hold
 * (q/k layernorm in the legacy model). Legacy aliases of older checkpoints are read too
 * ("transformer." for "encoder.", input_layernorm / post_attention_layernorm / final_layernorm). */
mc_status mc_sd_name_map(enum mc_sd_scheme from, enum mc_sd_scheme to, const char *key,
                         bool tied_head, char *out, size_t n, bool *absent);

/* Sort key giving the scheme's state_dict() order: entries sorted (stably) by this value appear
 * as Megatron's model would list them (embeddings, then layer by layer in the scheme's module
 * registration order, then final norm, then output layer). -1 for a key of no known place. */
long mc_sd_name_order(enum mc_sd_scheme s, const char *key);

/* How many leading dotted components of a legacy key are nested dict levels; the rest is one
 * flat key of the innermost dict: "language_model.encoder.layers.0.mlp.dense_4h_to_h.bias" -> 2,
 * "language_model.embedding.word_embeddings.weight" -> 3, "word_embeddings_for_head.weight" -> 1. */
int mc_sd_legacy_depth(const char *legacy_key);

/* The extra keys a scheme's model holds for one transformer layer beyond those mapped from the
 * local spec (TE: "self_attention.core_attention._extra_state"); NULL-terminated, layer-relative. */
const char *const *mc_sd_layer_extras(enum mc_sd_scheme s);

#endif /* MC_CHECKPOINTING_STATE_DICT_NAMES_H */
