/* Text generation: the counterpart of megatron/core/inference (core_v0.12.1) for the GPT models
 * megatron.c trains. Private header of src/inference/.
 *
 *   gpt_inference_model.c  the model with a KV cache (GPTInferenceWrapper + StaticInferenceContext):
 *                          prefill and incremental decode, fp32, on the backend's ops
 *   sampling.c             TextGenerationController.sample_from_logits: greedy, temperature,
 *                          top-k, top-p, seeded
 *   text_generation.c      generate_all_output_tokens_static_batch: a batch of prompts to their
 *                          generated tokens and log probs, stopping at the end-of-document token
 *   load.c                 the weights, as the checkpoint converter reads them: Megatron torch
 *                          checkpoints (ours or Megatron's, any TP/PP layout) and HuggingFace
 *                          GPT-2 / Llama directories
 *   load_dist.c            the weights through the training checkpoint loader: torch_dist, and
 *                          under tensor parallelism this rank's shard only
 *   setup.c                the shared command line, the tensor-parallel group under mpirun
 *
 * Tensor parallel (mpirun -np N, --tensor-model-parallel-size N): every rank holds its shard
 * and runs every step (collective); rank 0 samples and broadcasts (text_generation.c).
 *
 * Batches are ragged, never padded: the tokens of every row are packed into one [T, h] matrix
 * (each token knows its row and position), so the linear layers run once for the whole batch
 * and each token attends to its own row's cache only. Rows of different prompt lengths need no
 * padding token and no attention mask, and give exactly the tokens each row gives alone. */
#ifndef MC_INFERENCE_H
#define MC_INFERENCE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "megatron.h"
#include "megatron/transformer_config.h"

struct mc_backend;
struct mc_cv_model;

/* ---- gpt_inference_model.c --------------------------------------------------------------- */
typedef struct mc_inf_model mc_inf_model;

/* The model of a converter's in-memory checkpoint (full, unsharded tensors; bf16 / fp16 are
 * widened to fp32). max_seq: the longest row (prompt + generated tokens) the KV cache holds; with
 * learned absolute positions at most max_position_embeddings. Borrows be (freed after the
 * model). */
mc_status mc_inf_model_init(const struct mc_cv_model *cv, struct mc_backend *be, int64_t max_seq,
                            mc_inf_model **out);
/* The same model as one rank of a tensor-parallel group (tp_comm: a comm.c handle, NULL for one
 * process): it keeps only its shard of cv's full tensors (Megatron's split) and every step is
 * collective over the group (all ranks call mc_inf_forward with the same tokens). Heads, query
 * groups and ffn columns must divide by the group size (MC_ERR_CONFIG naming them). */
mc_status mc_inf_model_init_tp(const struct mc_cv_model *cv, struct mc_backend *be,
                               int64_t max_seq, void *tp_comm, mc_inf_model **out);
/* The same when cv holds this rank's shards already (shard: a torch_dist checkpoint read shard
 * by shard, mc_inf_load_options.shard); else as mc_inf_model_init_tp. */
mc_status mc_inf_model_init_shard(const struct mc_cv_model *cv, bool shard, struct mc_backend *be,
                                  int64_t max_seq, void *tp_comm, mc_inf_model **out);
void mc_inf_model_free(mc_inf_model *m);
int mc_inf_model_tp_rank(const mc_inf_model *m);
int mc_inf_model_tp_size(const mc_inf_model *m);
/* Rank 0's n elements of buf on every rank of the model's tp group (integer / byte types). */
mc_status mc_inf_broadcast(const mc_inf_model *m, void *buf, int64_t n, enum mc_dtype type);
/* The configuration the weights were read with (Megatron's field names). */
const struct mc_gpt_config *mc_inf_model_config(const mc_inf_model *m);
int64_t mc_inf_model_max_seq(const mc_inf_model *m);

/* A KV cache for up to max_batch rows of max_len <= mc_inf_model_max_seq tokens (Megatron's
 * StaticInferenceContext). Rows start empty. */
typedef struct mc_inf_cache mc_inf_cache;
mc_status mc_inf_cache_init(const mc_inf_model *m, int64_t max_batch, int64_t max_len,
                            mc_inf_cache **out);
void mc_inf_cache_free(mc_inf_cache *c);
void mc_inf_cache_reset(mc_inf_cache *c, int64_t row); /* the row holds no tokens again */
int64_t mc_inf_cache_len(const mc_inf_cache *c, int64_t row);

/* One forward step: n tokens, token i appended to row rows[i] of the cache at that row's next
 * position (several tokens of one row go in order). Writes the fp32 logits [n_out, V] of the
 * tokens whose want[i] is set (want NULL: every token), V = the padded vocabulary. */
mc_status mc_inf_forward(mc_inf_model *m, mc_inf_cache *c, int64_t n, const int64_t *tokens,
                         const int64_t *rows, const bool *want, float *logits);

/* ---- sampling.c --------------------------------------------------------------------------- */
struct mc_inf_sampling {
    bool greedy;        /* argmax (Megatron: top_k == 1); ignores the rest */
    float temperature;  /* > 0; logits are divided by it */
    int64_t top_k;      /* 0 = off */
    float top_p;        /* 0 = off; not with top_k */
    uint64_t seed;      /* the sampling stream */
};
/* The next token of one row from its logits [V] (only the first vocab_size entries are
 * candidates: the padding rows of the embedding are never sampled). The uniform draw is Philox
 * element (row, step) of the seed's sampling stream: the same seed, row and step give the same
 * token whatever the batch holds. work: vocab_size floats and vocab_size int64 of scratch. */
int64_t mc_inf_sample(const struct mc_inf_sampling *s, const float *logits, int64_t vocab_size,
                      int64_t row, int64_t step, float *work, int64_t *iwork);
/* Checks the parameters as Megatron's sampler asserts them; MC_ERR_CONFIG naming the option. */
mc_status mc_inf_sampling_check(const struct mc_inf_sampling *s, int64_t vocab_size);

/* ---- text_generation.c ------------------------------------------------------------------- */
struct mc_inf_request {
    const int64_t *prompt;  /* [n_prompt] */
    int64_t n_prompt;       /* >= 1 */
    /* results (mc_alloc'ed, freed by mc_inf_requests_free) */
    int64_t *generated;     /* [n_generated]: without the end-of-document token that stopped it */
    int64_t n_generated;
    float *prompt_logprobs;    /* [n_prompt - 1] when logprobs were asked for, else NULL */
    float *generated_logprobs; /* [n_generated] likewise */
    bool stopped_at_eod;
};
struct mc_inf_generate_options {
    struct mc_inf_sampling sampling;
    int64_t tokens_to_generate;
    int64_t eod;             /* stop token; -1: none */
    int64_t vocab_size;      /* the tokenizer's (unpadded) */
    bool logprobs;           /* log_softmax of the raw logits at each next token */
    bool no_kv_cache;        /* recompute every row from its first token at each step (a check) */
    /* Called after each generated token (NULL: never): true stops the row there, the token
     * kept (the server's stop_on_eol). */
    bool (*stop)(void *ctx, int64_t row, const int64_t *generated, int64_t n_generated);
    void *stop_ctx;
    /* seconds spent in prefill (every prompt token) and decode (the rest), and their tokens */
    double prefill_s, decode_s;
    int64_t prefill_tokens, decode_tokens;
};
/* Generates for the n requests together (one ragged batch). Tensor parallel: every rank of the
 * group calls it with the same requests and options; rank 0 samples each step's tokens and
 * decides which rows stop (sampling, eod, o->stop), and broadcasts them, so every rank feeds
 * the same tokens (the others' results hold the same tokens; log probs only on rank 0). */
mc_status mc_inf_generate(mc_inf_model *m, struct mc_inf_generate_options *o,
                          struct mc_inf_request *req, int64_t n);
/* The server under mpirun (Megatron's run_text_generation_server.py: rank 0 serves, the others
 * wait for broadcast requests). Rank 0: mc_inf_generate_lead checks the request, broadcasts it
 * (prompts, tokens_to_generate, logprobs) to the other ranks, then generates with them;
 * mc_inf_follow_stop tells them to return. The other ranks: mc_inf_follow loops generating what
 * rank 0 broadcasts until it says stop. One rank: lead is mc_inf_generate, stop a no-op. */
mc_status mc_inf_generate_lead(mc_inf_model *m, struct mc_inf_generate_options *o,
                               struct mc_inf_request *req, int64_t n);
mc_status mc_inf_follow_stop(mc_inf_model *m);
mc_status mc_inf_follow(mc_inf_model *m);
void mc_inf_requests_free(struct mc_inf_request *req, int64_t n);

/* ---- load.c ----------------------------------------------------------------------------- */
struct mc_inf_load_options {
    const char *load;         /* --load: a Megatron checkpoint directory or a HuggingFace one */
    FILE *log;                /* the loader's lines, or NULL */
    int tp, tp_rank;          /* the tensor-parallel group the model is loaded for (0: one) */
    bool shard;               /* out: cv holds only rank tp_rank's shards (torch_dist) */
};
/* Reads the checkpoint into a new converter model (freed with mc_inf_cv_free). A directory with
 * config.json is read as HuggingFace GPT2LMHeadModel / LlamaForCausalLM; one with
 * latest_checkpointed_iteration.txt as a Megatron torch checkpoint (any TP/PP), or torch_dist
 * when the iteration directory has metadata.json. */
mc_status mc_inf_load_checkpoint(struct mc_inf_load_options *o, struct mc_cv_model **out);
/* load_dist.c: a torch_dist iteration directory into cv (an initialized, empty model): only
 * rank tp_rank of tp's shards when tp > 1 and the layout allows it (the padded vocabulary,
 * heads, query groups and ffn divide by tp; *shard says whether it did), else the whole model. */
mc_status mc_inf_load_dist_shard(const char *dir, const char *iter_dir, struct mc_cv_model *cv,
                                 FILE *log, int tp, int tp_rank, bool *shard);
/* A torch iteration directory saved at tensor-parallel size tp > 1 without pipeline
 * parallelism (mp_rank_00 .. mp_rank_<tp-1>): rank tp_rank reads only its own file through the
 * training loader (mc_inf_load_torch_shard; *shard as above). */
bool mc_inf_torch_shard_layout(const char *iter_dir, int tp);
mc_status mc_inf_load_torch_shard(const char *dir, const char *iter_dir, struct mc_cv_model *cv,
                                  FILE *log, int tp, int tp_rank, bool *shard);
void mc_inf_cv_free(struct mc_cv_model *cv);
/* The checkpoint's saved tokenizer_type ("" when it has none, e.g. HuggingFace). */
const char *mc_inf_cv_tokenizer_type(const struct mc_cv_model *cv);

/* ---- setup.c: the command line both programs share ------------------------------------- */
#include "megatron/tokenizer.h"

enum { MC_INF_N_CHECKS = 7 };
struct mc_inf_cli {
    const char *load;
    struct mc_tokenizer_args tok;   /* NULL fields: the checkpoint's */
    int64_t vocab_size;             /* --vocab-size, -1: not given */
    int64_t tp, pp;                 /* tp: the mpirun world size; pp only 1 */
    int tp_rank;                    /* this rank's (mc_inf_start_ranks) */
    int64_t check[MC_INF_N_CHECKS]; /* model sizes given on the command line, -1: not given */
    const char *normalization, *position_embedding_type;
    bool swiglu, untie, disable_bias_linear, group_query_attention;
    int64_t seed;
    int64_t inference_max_seq_length;
};
void mc_inf_cli_init(struct mc_inf_cli *c);
/* Takes argv[i] (and its value) when it is one of the shared options: returns how many
 * arguments it used (1 or 2), 0 when the option is not one of them, -1 on a bad value (*st). */
int mc_inf_cli_parse(struct mc_inf_cli *c, int argc, char **argv, int i, mc_status *st);
const char *mc_inf_cli_help(void);
/* The checkpoint (its arguments checked against the command line's) and the tokenizer. */
mc_status mc_inf_setup(const struct mc_inf_cli *c, FILE *log, struct mc_cv_model **cv,
                       mc_tokenizer **tok, bool *shard);
/* Starts MPI under mpirun (*comm: the world, one tensor-parallel group; NULL for one process)
 * and checks the world size against --tensor-model-parallel-size. */
mc_status mc_inf_start_ranks(struct mc_inf_cli *c, int *argc, char ***argv, void **comm,
                             int *rank);
/* Collective over comm: st where this rank failed, an error where another did, else MC_OK. */
mc_status mc_inf_agree(void *comm, mc_status st);

#endif /* MC_INFERENCE_H */
