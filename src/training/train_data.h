/* The data side of pretrain_gpt: train/validation/test datasets built from the command line
 * (pretrain_gpt.py's train_valid_test_datasets_provider + core_gpt_dataset_config_from_args) and
 * read in order from a consumed-samples position, as Megatron's MegatronPretrainingSampler
 * does. Kept apart from training.c because the dataset config and the model config are two
 * different "GPT configs" in Megatron too. */
#ifndef MC_TRAINING_TRAIN_DATA_H
#define MC_TRAINING_TRAIN_DATA_H

#include <stdio.h>

#include "megatron/gpt_dataset.h"
#include "training/args.h"

typedef struct mc_train_data mc_train_data;

/* The blend lists of the command line as words ("[w1] p1 [w2 p2 ...]"), for a caller that read
 * them from elsewhere (prepare_cache: --data-args-path / --per-split-data-args-path files).
 * n = 0 for a list that is absent. Borrowed. */
struct mc_data_lists {
    const char **data;
    int n_data;
    const char **per_split[3];
    int n_per_split[3];
};

/* core_gpt_dataset_config_from_args: the GPTDatasetConfig of a validated namespace, finalized,
 * with the blends it points to (owned here). lists replaces the --data-path /
 * --*-data-path values when non-NULL. eod is the tokenizer's. Free with
 * mc_train_data_config_free. */
struct mc_train_data_config {
    struct mc_gpt_dataset_config cfg;
    struct mc_blend blend, per_split[3];
    char vocab_buf[32];
};
mc_status mc_train_data_config_init(struct mc_train_data_config *c, const struct mc_args *a,
                                    int64_t eod, const struct mc_data_lists *lists);
void mc_train_data_config_free(struct mc_train_data_config *c);
/* get_train_valid_test_num_samples: the target sizes of the three splits. */
void mc_train_data_num_samples(const struct mc_args *a, int64_t sizes[3]);

/* The three splits, in Megatron's order (same values as the datasets' enum mc_split). */
enum { MC_TRAIN_SPLIT_TRAIN = 0, MC_TRAIN_SPLIT_VALID = 1, MC_TRAIN_SPLIT_TEST = 2 };

/* One micro-batch, batch-first [b, s] as get_batch returns it. attention_mask is [b, s, s]
 * (1 = masked) or NULL when the plain causal mask applies (no --reset-attention-mask). */
struct mc_micro_batch {
    int64_t b, s;
    int64_t *tokens, *labels, *position_ids;
    float *loss_mask;
    uint8_t *attention_mask;
};

/* Builds the three splits with Megatron's target sizes (printing its "> building train,
 * validation, and test datasets ..." lines to out, NULL = silent). eod and pad are the
 * tokenizer's (mc_tok_eod, mc_tok_pad: GPTDataset masks the loss of labels equal to pad). */
mc_status mc_train_data_init(const struct mc_args *a, int64_t eod, int64_t pad, FILE *out,
                             mc_train_data **ret);
void mc_train_data_free(mc_train_data *d);
bool mc_train_data_has(const mc_train_data *d, int split);

/* Micro-batch buffers for b x s; free with mc_micro_batch_free. */
mc_status mc_micro_batch_init(struct mc_micro_batch *mb, int64_t b, int64_t s, bool with_mask);
void mc_micro_batch_free(struct mc_micro_batch *mb);

/* Token ids at or above limit (the padded vocabulary) make mc_train_data_get fail naming the
 * data file they came from; 0, the default, checks nothing. */
void mc_train_data_set_token_limit(mc_train_data *d, int64_t limit);

/* Fills mb with samples [first, first + mb->b) of the split, wrapping around the split's
 * length (Megatron sizes the splits so that training never wraps). */
mc_status mc_train_data_get(const mc_train_data *d, int split, int64_t first,
                            struct mc_micro_batch *mb);

#endif
