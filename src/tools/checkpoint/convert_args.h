/* The args Namespace and top-level dict the converter's Megatron saver writes
 * (saver_base.py parse_megatron_args / _load_checkpoint_args, then save_checkpoint with no
 * optimizer and no RNG state). Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_CONVERT_ARGS_H
#define MC_CHECKPOINTING_CONVERT_ARGS_H

#include "tools/checkpoint/convert.h"

/* The args of a HuggingFace import, as Megatron's llama_mistral loader builds them (its command
 * line, the config's values, validate_args at tp 1, pp 1): the source args for the saver. */
mc_status mc_cv_hf_source_args(mc_pk_doc *doc, const struct mc_cv_meta *md, const char *load_dir,
                               int64_t hf_vocab, struct mc_pk **out);
/* The target's args: the source's Namespace (restricted to Megatron's parser attributes) with
 * the arguments the saver sets anew (target TP/PP, world size, --no-save-optim ...,
 * padded_vocab_size). */
mc_status mc_cv_target_args(mc_pk_doc *doc, const struct mc_cv_model *m,
                            const struct mc_cv_options *o, int tp, int pp, int64_t padded_vocab,
                            struct mc_pk **out);
/* {args, checkpoint_version 3.0, iteration, model, rerun_state_machine,
 * num_floating_point_operations_so_far 0} into the (empty) dict sd. */
mc_status mc_cv_state_dict(mc_pk_doc *doc, struct mc_pk *sd, struct mc_pk *args,
                           struct mc_pk *model, int64_t iteration);

#endif
