/* The checkpoint converter of tools/convert_checkpoint: a model held as full (unsharded),
 * TP/PP-independent tensors plus the metadata Megatron's tools/checkpoint loaders send their
 * savers (loader_base.py build_checkpoint_metadata, core_v0.12.1), filled by a loader
 * (Megatron torch checkpoints at any TP/PP/VP, HuggingFace GPT-2/Llama directories) and written
 * by a saver (Megatron torch checkpoints at any target TP/PP, HuggingFace directories).
 *
 * Tensor names follow the queue messages of Megatron's converter ("word embeddings",
 * "layer 3 qkv weight", ...). Logical layouts: `qkv weight` is the grouped layout
 * [ng, (np/ng + 2) * hn, h] (spec 3.3) at TP 1; `mlp l0 weight` with SwiGLU is [gate; up] at
 * TP 1 (spec 3.6); word embeddings / output layer keep the loaded (padded) vocabulary rows.
 * Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_CONVERT_H
#define MC_CHECKPOINTING_CONVERT_H

#include <stdio.h>

#include "megatron.h"
#include "checkpointing/torch_pickle.h"
#include "megatron/tensor.h"

struct mc_cv_tensor {
    char name[64];
    enum mc_dtype dtype; /* float32 / bfloat16 / float16 (kept as loaded, bit-exact) */
    int ndim;               /* 1 or 2 */
    int64_t shape[2];
    uint8_t *data;          /* owned */
};

/* What loader_base.build_checkpoint_metadata sends, plus the model options the savers need. */
struct mc_cv_meta {
    int64_t num_layers, hidden_size, num_attention_heads, num_query_groups, kv_channels;
    int64_t ffn_hidden_size, seq_length, max_position_embeddings;
    char position_embedding_type[24]; /* learned_absolute | rope | none */
    char normalization[16];           /* LayerNorm | RMSNorm */
    char tokenizer_type[48];
    double norm_epsilon;
    bool swiglu, linear_bias, qkv_bias, untied, gelu_tanh; /* gelu_tanh: fused bias-GELU path */
    double rotary_base, rotary_percent, rope_scaling_factor;
    bool use_rope_scaling, rotary_interleaved;
    int64_t true_vocab_size;          /* -1: unknown */
    int64_t make_vocab_size_divisible_by;
    int64_t iteration;
    bool release;                     /* the source was a release checkpoint: so is the output */
    enum mc_dtype params_dtype;
    int64_t previous_tp, previous_pp;
    int64_t consumed_train_samples, consumed_valid_samples;
    /* the source checkpoint's args Namespace (NULL for HF imports), owned by `doc` */
    mc_pk_doc *doc;
    struct mc_pk *checkpoint_args;
};

struct mc_cv_model {
    struct mc_cv_meta md;
    struct mc_cv_tensor *t;
    int64_t n, cap;
};

/* Options of convert.py and its loader/saver plugins that the library needs. */
struct mc_cv_options {
    const char *load_dir, *save_dir;
    int target_tp, target_pp;          /* 0: the loaded checkpoint's */
    int64_t true_vocab_size;           /* -1: none */
    const char *vocab_file;            /* vocab.json whose size is the true vocab size */
    int64_t make_vocab_size_divisible_by; /* -1: none (HF import: Megatron's default 128) */
    const char *tokenizer_model;       /* hf loader: its vocabulary size is the true one */
    enum mc_dtype hf_params_dtype;  /* hf loader --bf16 / --fp16 (else float32) */
    const char *loader_impl, *saver_impl; /* "local" | "transformer_engine" */
    bool legacy_saver;                 /* --saver legacy: legacy-model nested state dicts */
    bool dist_saver;                   /* --saver-ckpt-format torch_dist (a megatron.c option) */
    bool checking;                     /* convert.py's --no-checking clears it */
    FILE *log;
};

void mc_cv_model_init(struct mc_cv_model *m);
void mc_cv_model_free(struct mc_cv_model *m);
/* A new zeroed tensor named `name` (printf format), appended to the model. */
mc_status mc_cv_add(struct mc_cv_model *m, struct mc_cv_tensor **out, enum mc_dtype dtype,
                    int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* The tensor as a host view ([shape[0]] or [shape[0], shape[1]]; valid while the model is). */
struct mc_tensor mc_cv_view(const struct mc_cv_tensor *t);
struct mc_cv_tensor *mc_cv_get(const struct mc_cv_model *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The logical tensors the model must hold for its metadata: checks names and shapes
 * (Megatron's saver checks its messages the same way), MC_ERR_FORMAT naming the first problem. */
mc_status mc_cv_check(const struct mc_cv_model *m, const char *what);
/* Padded vocabulary size Megatron computes (_vocab_size_with_padding) for `tp`. */
int64_t mc_cv_padded_vocab(int64_t true_vocab, int64_t divisible_by, int tp);
/* The true vocabulary size from --true-vocab-size / --vocab-file (loader_base
 * compute_true_vocab_size + verify_vocabs_match); -1 when neither is given. */
mc_status mc_cv_true_vocab(const struct mc_cv_options *o, int64_t *out);

/* The model metadata from a Megatron checkpoint's args Namespace ck (loader_base
 * build_checkpoint_metadata; md->checkpoint_args = ck, md->previous_tp / previous_pp), shared by
 * the torch loader and generation's torch_dist loader. Refuses the features the converter's
 * tensor names cannot hold (MoE, q/k layernorm, MLA, ...): "<dir>: the checkpoint was trained
 * with ...; <refusal>". */
mc_status mc_cv_meta_from_args(struct mc_cv_meta *md, const struct mc_pk *ck, const char *dir,
                               const char *refusal);
/* Megatron torch-format checkpoints: loader_core/loader_legacy and saver_core/saver_legacy. */
mc_status mc_cv_load_megatron(struct mc_cv_model *m, const struct mc_cv_options *o);
mc_status mc_cv_save_megatron(const struct mc_cv_model *m, const struct mc_cv_options *o);
/* HuggingFace directories (config.json + model.safetensors / index): GPT2LMHeadModel and
 * LlamaForCausalLM. */
mc_status mc_cv_load_hf(struct mc_cv_model *m, const struct mc_cv_options *o);
mc_status mc_cv_save_hf(const struct mc_cv_model *m, const struct mc_cv_options *o);

/* How a tensor is sharded over tensor-parallel ranks (Megatron's schema_core / chunk_weight). */
enum mc_cv_split {
    MC_CV_SPLIT_REP,   /* replicated: norms, row-parallel biases, position embeddings */
    MC_CV_SPLIT_COL,   /* dim 0: qkv by whole query groups, fc1, vocabulary rows */
    MC_CV_SPLIT_ROW,   /* dim 1: linear_proj, fc2 weights */
    MC_CV_SPLIT_GATED, /* SwiGLU fc1 [gate; up]: each rank holds [gate_r; up_r] */
};
/* The split of the converter tensor `what` ("word embeddings", "layer 3 qkv weight", ...). */
enum mc_cv_split mc_cv_split_of(const struct mc_cv_meta *md, const char *what);
/* Rank k's block of the full tensor t split over tp ranks, in t's dtype, into dst; *rows and
 * *cols get the block's shape (1-D tensors: cols 1). The split dimension must divide by tp. */
void mc_cv_shard_copy(uint8_t *dst, const struct mc_cv_tensor *t, enum mc_cv_split split, int k,
                      int tp, int64_t *rows, int64_t *cols);

/* Directory helpers shared by the savers: `<save>.tmp.<pid>` is written and renamed to the
 * final name at the end; an existing save dir is refused unless empty. */
mc_status mc_cv_mkdirs(const char *path);
mc_status mc_cv_begin_output(const char *save_dir, char *tmp, size_t n);
mc_status mc_cv_finish_output(const char *save_dir, const char *tmp);
void mc_cv_abort_output(const char *tmp);

#endif
