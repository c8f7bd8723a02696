/* Pieces shared by the GPT dataset files (gpt_dataset.c, blended_dataset.c,
 * blended_megatron_dataset_builder.c): descriptions and cache-file helpers. Private. */
#ifndef MC_DATASETS_GPTDS_INTERNAL_H
#define MC_DATASETS_GPTDS_INTERNAL_H

#include "megatron/gpt_dataset.h"
#include "datasets/description.h"

struct mc_desc *mc_gptds_tokenizer_json(const struct mc_gpt_tokenizer_desc *t);
mc_status mc_gptds_describe(const struct mc_desc *ids, char **text, char hash[33]);
mc_status mc_gptds_cache_path(char *out, size_t cap, const char *dir, const char *hash,
                              const char *cls, int split, const char *affix);
bool mc_gptds_file_exists(const char *path);
mc_status mc_gptds_write_text(const char *path, const char *text);
mc_status mc_gptds_mkdirs(const char *path);
const struct mc_desc *mc_gptds_identifiers(const mc_gpt_dataset *d);
int mc_gptds_split(const mc_gpt_dataset *d);

/* BlendedDataset over GPTDatasets (blended_dataset.c). Takes ownership of datasets[] (the
 * array and the datasets), freed on failure too. weights may be NULL with size < 0
 * (exhaustive: each component's length). */
typedef struct mc_blended_dataset mc_blended_dataset;
mc_status mc_blended_dataset_init(const struct mc_gpt_dataset_config *c, mc_gpt_dataset **datasets, int n,
                                  const double *weights, int64_t size, mc_blended_dataset **out);
void mc_blended_dataset_free(mc_blended_dataset *b);
int64_t mc_blended_dataset_len(const mc_blended_dataset *b);
const char *mc_blended_dataset_description(const mc_blended_dataset *b);
const char *mc_blended_dataset_hash(const mc_blended_dataset *b);
mc_status mc_blended_dataset_locate(const mc_blended_dataset *b, int64_t idx, int *ds,
                                    int64_t *sample, const mc_gpt_dataset **comp);

#endif
