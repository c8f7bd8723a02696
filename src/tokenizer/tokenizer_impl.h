/* Internal interface behind include/megatron/tokenizer.h: each tokenizer type fills an ops
 * table (as Megatron's subclasses of MegatronTokenizer override tokenize/detokenize), and the
 * shared byte-level BPE engine used by GPT2BPETokenizer, HuggingFaceTokenizer and the trainer. */
#ifndef MC_TOKENIZER_IMPL_H
#define MC_TOKENIZER_IMPL_H

#include "core/json.h"
#include "megatron/tokenizer.h"
#include "tokenizer/unicode.h"

struct mc_tok_ops {
    const char *class_name; /* Megatron's class, e.g. "_GPT2BPETokenizer" */
    mc_status (*encode)(const mc_tokenizer *t, const char *text, size_t len, struct mc_tokens *out);
    /* appends the decoded text to out */
    mc_status (*decode)(const mc_tokenizer *t, const int64_t *ids, int64_t n, struct mc_json_buf *out);
    void (*free_impl)(void *impl);
};

struct mc_tokenizer {
    const struct mc_tok_ops *ops;
    void *impl;
    int64_t vocab_size; /* Megatron's tokenizer.vocab_size (unpadded) */
    int64_t eod;        /* -1: none */
    int64_t pad;        /* the pad id GPTDataset sees: -1 when Megatron's .pad raises or is -1 */
};

/* Appends to a token buffer (amortized growth). */
mc_status mc_tok_push(struct mc_tokens *out, int64_t id);
mc_status mc_tok_reserve(struct mc_tokens *out, int64_t extra);

/* Reads a whole file into an mc_alloc'ed NUL-terminated buffer; `what` names it in errors. */
mc_status mc_tok_read_file(const char *path, const char *what, char **out, size_t *len);

/* Constructors per type; they fill t->ops/impl/vocab_size/eod/pad. */
mc_status mc_tok_gpt2_init(const struct mc_tokenizer_args *args, mc_tokenizer *t);
mc_status mc_tok_null_init(const struct mc_tokenizer_args *args, mc_tokenizer *t);
mc_status mc_tok_hf_init(const struct mc_tokenizer_args *args, mc_tokenizer *t);
/* MindSpeed-LLM's PretrainedFromHF: the directory is args->tokenizer_model */
mc_status mc_tok_hf_auto_init(const struct mc_tokenizer_args *args, mc_tokenizer *t);
mc_status mc_tok_tiktoken_init(const struct mc_tokenizer_args *args, mc_tokenizer *t);
/* kind: 0 SentencePieceTokenizer, 1 GPTSentencePieceTokenizer, 2 Llama2Tokenizer */
mc_status mc_tok_spm_init(const struct mc_tokenizer_args *args, int kind, mc_tokenizer *t);

/* ---- byte-level BPE engine ---------------------------------------------------------------- */
/* GPT-2's byte <-> printable code point table (bytes_to_unicode). */
uint32_t mc_bpe_byte_to_cp(uint8_t b);
int mc_bpe_cp_to_byte(uint32_t cp); /* -1 if cp is not in the table */
/* Converts a string in the byte alphabet to raw bytes (o: room for len bytes); -1 if some code
 * point is outside the alphabet or the string is not UTF-8. */
int64_t mc_bpe_unmap(char *o, const char *s, size_t len);

typedef struct mc_bpe mc_bpe;
/* An empty model: symbols 0..255 are the single bytes. */
mc_status mc_bpe_init(mc_bpe **out);
void mc_bpe_free(mc_bpe *b);
/* Symbol id of the raw byte string s (created if absent). */
mc_status mc_bpe_symbol(mc_bpe *b, const char *s, size_t len, int32_t *sym);
/* -1 if absent */
int32_t mc_bpe_find_symbol(const mc_bpe *b, const char *s, size_t len);
/* Sets the vocab id emitted for a symbol (default: unknown_id given to mc_bpe_encode_word). */
void mc_bpe_set_id(mc_bpe *b, int32_t sym, int64_t id);
int64_t mc_bpe_get_id(const mc_bpe *b, int32_t sym); /* -1 if none */
/* Adds merge (a, b) -> a+b with this rank; an existing pair takes the new rank (Python dict). */
mc_status mc_bpe_add_merge(mc_bpe *b, int32_t a, int32_t bb, int32_t rank);
/* Loads a GPT-2 merges.txt text into b the way Megatron does (see gpt2_bpe.c). With vocab_path
 * (the file that set the symbol ids), a merge whose parts or product has no id is refused. */
mc_status mc_tok_load_merges(mc_bpe *b, const char *text, size_t n, const char *path,
                             const char *vocab_path);
/* Encodes one pre-tokenized piece (raw bytes) with GPT-2's merge loop; appends vocab ids.
 * A symbol without a vocab id gives unknown_id, or the error MC_ERR_FORMAT if unknown_id < 0.
 * Thread-safe; results for short pieces are cached. */
mc_status mc_bpe_encode_word(const mc_bpe *b, const char *s, size_t len, int64_t unknown_id,
                             struct mc_tokens *out);
/* HuggingFace BPE on Unicode characters (models without ByteLevel): a character missing from
 * the vocab becomes its <0xXX> byte tokens (byte_fallback) or unk_id (one per run if fuse_unk);
 * MC_ERR_FORMAT if it has none of these. Thread-safe, cached like mc_bpe_encode_word. */
mc_status mc_bpe_encode_chars(const mc_bpe *b, const char *s, size_t len, bool byte_fallback,
                              int64_t unk_id, bool fuse_unk, struct mc_tokens *out);
int32_t mc_bpe_n_symbols(const mc_bpe *b);
/* Raw bytes of a symbol. */
const char *mc_bpe_symbol_bytes(const mc_bpe *b, int32_t sym, size_t *len);

/* ---- pre-tokenizers ----------------------------------------------------------------------- */
enum mc_pretok { MC_PRETOK_GPT2 = 0, MC_PRETOK_LLAMA3, MC_PRETOK_QWEN2, MC_PRETOK_TIKTOKEN_V1,
                  MC_PRETOK_TIKTOKEN_V2 };
/* Calls emit(ctx, start, len) for each piece of text[0..len) in order, as regex findall with the
 * pattern would, with the character classes of the given engine's table. MC_ERR_FORMAT (with
 * the byte offset) on invalid UTF-8. */
typedef mc_status (*mc_pretok_emit)(void *ctx, const char *piece, size_t len);
mc_status mc_pretok_split(enum mc_pretok kind, enum mc_uni_table table, const char *text, size_t len,
                          mc_pretok_emit emit, void *ctx);

#endif
