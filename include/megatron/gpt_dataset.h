/* Megatron's GPT datasets and their index caches: numpy's RandomState, the C++ index helpers,
 * GPTDataset, MockGPTDataset, BlendedDataset and BlendedMegatronDatasetBuilder. Counterparts:
 * megatron/core/datasets/{gpt_dataset.py, blended_dataset.py, blended_megatron_dataset_builder.py,
 * blended_megatron_dataset_config.py, megatron_dataset.py, helpers.cpp, utils.py}. The cache
 * files are byte-identical to Megatron's, so either system reuses the other's
 * (docs/formats/gpt_dataset_cache.md). */
#ifndef MEGATRON_GPT_DATASET_H
#define MEGATRON_GPT_DATASET_H

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- numpy.random.RandomState (legacy MT19937) ------------------------------------------- */
struct mc_np_rng {
    uint32_t key[624];
    int pos;
};
/* RandomState(seed): seed must be in [0, 2^32 - 1] (MC_ERR_CONFIG otherwise, as numpy raises). */
MC_API mc_status mc_np_rng_seed(struct mc_np_rng *r, int64_t seed);
MC_API uint32_t mc_np_rng_next32(struct mc_np_rng *r);
MC_API uint64_t mc_np_rng_next64(struct mc_np_rng *r);
MC_API uint64_t mc_np_rng_interval(struct mc_np_rng *r, uint64_t max); /* uniform in [0, max] */
/* RandomState.shuffle of a 1-D array of that element type (identical draws for every type). */
MC_API void mc_np_rng_shuffle_i16(struct mc_np_rng *r, int16_t *a, int64_t n);
MC_API void mc_np_rng_shuffle_i32(struct mc_np_rng *r, int32_t *a, int64_t n);
MC_API void mc_np_rng_shuffle_u32(struct mc_np_rng *r, uint32_t *a, int64_t n);
MC_API void mc_np_rng_shuffle_i64(struct mc_np_rng *r, int64_t *a, int64_t n);
MC_API void mc_np_rng_permutation(struct mc_np_rng *r, int64_t *out, int64_t n);
/* RandomState.randint(low, high, size=n) with the default int64 dtype. */
MC_API mc_status mc_np_rng_randint(struct mc_np_rng *r, int64_t low, int64_t high, int64_t *out,
                                   int64_t n);

/* ---- helpers.cpp ------------------------------------------------------------------------- */
/* build_sample_idx: out has 2 * (num_samples + 1) entries (pairs doc position, offset); the
 * sample count comes from mc_gpt_num_samples. Inputs are checked like Megatron's asserts. */
MC_API int64_t mc_gpt_num_samples(int64_t num_epochs, int64_t tokens_per_epoch, int64_t seq_length,
                                  bool drop_last, int add_extra_token);
MC_API mc_status mc_gpt_build_sample_idx(int64_t *out, const int32_t *sizes, const int32_t *doc_idx,
                                         int64_t n_doc_idx, int64_t seq_length, int64_t num_epochs,
                                         int64_t tokens_per_epoch, bool drop_last,
                                         int add_extra_token);
MC_API mc_status mc_blend_build_indices(int16_t *dataset_index, int64_t *dataset_sample_index,
                                        const double *weights, int n_datasets, int64_t size);
MC_API mc_status mc_blend_build_exhaustive_indices(int16_t *dataset_index,
                                                   int64_t *dataset_sample_index,
                                                   const int64_t *sizes, int n_datasets);
/* numpy's float64 sum (pairwise above 8 elements) and Megatron's utils.normalize. */
MC_API double mc_np_sum(const double *x, int64_t n);
MC_API void mc_blend_normalize(double *w, int64_t n);

/* ---- config ------------------------------------------------------------------------------ */
/* The tokenizer's unique_identifiers map as it appears in the cache description. */
#define MC_GPT_TOK_MAX_PATHS 4
#define MC_GPT_TOK_MAX_EXTRA 8
struct mc_gpt_tokenizer_desc {
    const char *class_name;                          /* "_GPT2BPETokenizer" */
    int n_paths;
    const char *paths[MC_GPT_TOK_MAX_PATHS];         /* NULL prints as null */
    int n_extra;
    const char *extra_keys[MC_GPT_TOK_MAX_EXTRA];    /* string values, in order */
    const char *extra_values[MC_GPT_TOK_MAX_EXTRA];
};
/* Fills d from --tokenizer-type and its file arguments (strings are borrowed from the
 * arguments; vocab_buf holds str(--vocab-size)). MC_ERR_UNSUPPORTED for other types. */
MC_API mc_status mc_gpt_tokenizer_desc_from_args(struct mc_gpt_tokenizer_desc *d,
                                                 const char *tokenizer_type,
                                                 const char *vocab_file, const char *merge_file,
                                                 const char *tokenizer_model, int64_t vocab_size,
                                                 char vocab_buf[32]);

enum mc_split { MC_SPLIT_TRAIN = 0, MC_SPLIT_VALID = 1, MC_SPLIT_TEST = 2 };
MC_API const char *mc_split_name(int split);

/* A blend: prefixes with optional weights (weights NULL = none). Borrowed strings. */
struct mc_blend {
    int n;
    const char **prefixes;
    const double *weights;
};

/* GPTDatasetConfig. Strings are borrowed for the lifetime of every dataset built from it. */
struct mc_gpt_dataset_config {
    int64_t random_seed;          /* --seed */
    int64_t sequence_length;      /* --seq-length */
    const char *split;            /* --split, e.g. "969, 30, 1"; NULL with blend_per_split */
    const struct mc_blend *blend; /* --data-path; NULL when per split or mock */
    const struct mc_blend *blend_per_split[3]; /* --train/valid/test-data-path */
    const char *path_to_cache;    /* --data-cache-path, NULL for the default */
    struct mc_gpt_tokenizer_desc tokenizer;
    int64_t eod, pad;             /* pad -1 when the tokenizer has none */
    bool reset_position_ids, reset_attention_mask, eod_mask_loss, create_attention_mask;
    bool drop_last_partial_validation_sequence; /* true from the CLI */
    bool add_extra_token_to_sequence;           /* true from the CLI */
    bool mmap_bin_files;
    /* derived by mc_gpt_dataset_config_finalize */
    bool mock;
    bool has_split_matrix;
    bool split_present[3];
    double split_lo[3], split_hi[3];
    bool split_lo_is_int0[3];     /* Megatron's first bound is the integer 0 (prints "0") */
};
/* BlendedMegatronDatasetConfig.__post_init__: validation, mock detection (then split = "1,1,1"),
 * split string -> split matrix. */
MC_API mc_status mc_gpt_dataset_config_finalize(struct mc_gpt_dataset_config *c);
/* split index range [beg, end) of a dataset with n elements (Python round half-even). */
MC_API void mc_gpt_split_range(const struct mc_gpt_dataset_config *c, int split, int64_t n, int64_t *beg,
                               int64_t *end);

/* ---- low-level dataset ------------------------------------------------------------------- */
/* What a GPTDataset reads from: the IndexedDataset (.bin/.idx) or the mock generator. */
struct mc_gpt_lowlevel {
    int64_t n_sequences;
    const int32_t *sequence_lengths;              /* [n_sequences], borrowed */
    const char *path_prefix;                      /* NULL for mock */
    /* copies tokens [offset, offset + length) of sequence idx as int64 */
    mc_status (*get)(void *ctx, int64_t idx, int64_t offset, int64_t length, int64_t *out);
    void *ctx;
    void (*close)(void *ctx);
    int32_t *owned_lengths;                       /* mock only */
};
/* Opens prefix.bin/.idx through the indexed-dataset reader. */
MC_API mc_status mc_gpt_lowlevel_open(const char *prefix, struct mc_gpt_lowlevel **out);
/* MockGPTLowLevelDataset: 100000 documents, lengths from numpy default_rng(0). */
MC_API mc_status mc_gpt_lowlevel_mock(int64_t eod, struct mc_gpt_lowlevel **out);
MC_API void mc_gpt_lowlevel_free(struct mc_gpt_lowlevel *ll);
/* The first n of numpy.random.default_rng(seed).integers(low, high, size=n, dtype=int32). */
MC_API void mc_np_pcg64_integers_i32(uint64_t seed, int32_t low, int32_t high, int32_t *out,
                                     int64_t n);

/* ---- GPTDataset -------------------------------------------------------------------------- */
typedef struct mc_gpt_dataset mc_gpt_dataset;
struct mc_gpt_sample {
    int64_t *tokens;          /* [seq] */
    int64_t *labels;          /* [seq] */
    float *loss_mask;         /* [seq] */
    int64_t *position_ids;    /* [seq] */
    uint8_t *attention_mask;  /* [seq * seq], 1 = masked out; may be NULL to skip */
};
/* Builds (or loads from the cache) the indices of one split: sequences [beg, end) of ll, at
 * least num_samples samples (< 0 means None: one epoch). ll and c are borrowed for the
 * dataset's life. A split with fewer than 2 tokens is MC_ERR_CONFIG (Megatron hangs). */
MC_API mc_status mc_gpt_dataset_init(const struct mc_gpt_dataset_config *c, struct mc_gpt_lowlevel *ll,
                                     int64_t beg, int64_t end, int64_t num_samples, int split,
                                     mc_gpt_dataset **out);
MC_API void mc_gpt_dataset_free(mc_gpt_dataset *d);
MC_API int64_t mc_gpt_dataset_len(const mc_gpt_dataset *d);
MC_API const char *mc_gpt_dataset_description(const mc_gpt_dataset *d);
MC_API const char *mc_gpt_dataset_hash(const mc_gpt_dataset *d);
MC_API bool mc_gpt_dataset_built_anew(const mc_gpt_dataset *d);
/* Item idx (0 <= idx < len), Megatron's GPTDataset.__getitem__: pad ids in tokens/labels become
 * 0 and their loss_mask 0. s->attention_mask is set to NULL when the config does not create
 * one (--no-create-attention-mask-in-dataloader). Reentrant: no state changes, no allocation
 * (Megatron's reuse of a cached loss mask across items is not reproduced, spec 4.6). */
MC_API mc_status mc_gpt_dataset_get(const mc_gpt_dataset *d, int64_t idx, struct mc_gpt_sample *s);
/* The raw seq + 1 (or seq) tokens of item idx, padded with pad: out has seq + 1 entries. */
MC_API mc_status mc_gpt_dataset_get_text(const mc_gpt_dataset *d, int64_t idx, int64_t *out);

/* ---- BlendedDataset and the builder ------------------------------------------------------ */
/* A top-level dataset: a GPTDataset or a BlendedDataset of GPTDatasets. */
typedef struct mc_megatron_dataset mc_megatron_dataset;
MC_API int64_t mc_megatron_dataset_len(const mc_megatron_dataset *d);
MC_API const char *mc_megatron_dataset_description(const mc_megatron_dataset *d);
MC_API const char *mc_megatron_dataset_hash(const mc_megatron_dataset *d);
MC_API bool mc_megatron_dataset_is_blended(const mc_megatron_dataset *d);
/* Item idx; *dataset_id gets the component (0 for a plain GPTDataset) when not NULL. */
MC_API mc_status mc_megatron_dataset_get(const mc_megatron_dataset *d, int64_t idx,
                                         struct mc_gpt_sample *s, int *dataset_id);
MC_API mc_status mc_megatron_dataset_get_text(const mc_megatron_dataset *d, int64_t idx,
                                              int64_t *out, int *dataset_id);
/* Writes items 0 .. min(n, len) - 1 to path, each as int32 dataset id, tokens and labels
 * (int64 x seq), loss mask (f32 x seq), position ids (int64 x seq), then the seq x seq
 * attention-mask bytes when the dataset makes one: prepare_cache's --dump-samples, which the
 * tests compare with the samples of Megatron's own datasets. */
MC_API mc_status mc_megatron_dataset_dump(const mc_megatron_dataset *d, int64_t seq, int64_t n,
                                          const char *path);
MC_API void mc_megatron_dataset_free(mc_megatron_dataset *d);

/* BlendedMegatronDatasetBuilder(GPTDataset or MockGPTDataset, sizes, config).build().
 * sizes[i] < 0 means None. out[i] is NULL for a split that is not built. Not MPI-aware: every
 * caller builds (or loads) on its own; cache files are written under temporary names and
 * renamed, so concurrent builders of one cache are safe. Megatron instead builds on rank 0,
 * then the other ranks load after a barrier; a caller wanting that calls this on rank 0 first. */
MC_API mc_status mc_gpt_build_datasets(const struct mc_gpt_dataset_config *c, const int64_t sizes[3],
                                       mc_megatron_dataset *out[3]);

/* get_blend_from_list: tokens -> blend (weights only when every other token parses as a
 * float). Allocates prefixes/weights arrays; free with mc_blend_free. */
MC_API mc_status mc_blend_from_list(const char **tokens, int n, struct mc_blend *out);
MC_API void mc_blend_free(struct mc_blend *b);

/* get_train_valid_test_num_samples for iteration-based runs. */
MC_API void mc_gpt_train_valid_test_num_samples(int64_t train_iters, int64_t train_samples,
                                                int64_t global_batch_size, int64_t eval_interval,
                                                int64_t eval_iters, int64_t out[3]);

/* ---- .npy ------------------------------------------------------------------------ */
struct mc_npy {
    char descr[8];       /* "<i4", "<i8", "<u4", "<i2" */
    int ndim;
    int64_t shape[2];
    void *data;          /* owned (mc_alloc), or inside map */
    void *map;           /* mc_npy_map: the read-only file mapping */
    size_t map_len;
};
MC_API size_t mc_npy_itemsize(const char *descr);
/* numpy.save bytes (format 1.0, numpy 1.24 header padding), written to path via a temporary
 * name and renamed into place. */
MC_API mc_status mc_npy_save(const char *path, const char *descr, int ndim, const int64_t *shape,
                             const void *data);
MC_API mc_status mc_npy_load(const char *path, struct mc_npy *out); /* read into memory */
MC_API mc_status mc_npy_map(const char *path, struct mc_npy *out);  /* mmap, read-only */
MC_API int64_t mc_npy_count(const struct mc_npy *a);                 /* number of elements */
MC_API int64_t mc_npy_get(const struct mc_npy *a, int64_t i);        /* element i as int64 */
MC_API void mc_npy_free(struct mc_npy *a);                           /* frees or unmaps */

#ifdef __cplusplus
}
#endif

#endif
