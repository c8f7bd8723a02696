/* Tokenizers behind one interface, with Megatron's --tokenizer-type names: the counterpart of
 * megatron/training/tokenizer/tokenizer.py (build_tokenizer, _vocab_size_with_padding). */
#ifndef MEGATRON_TOKENIZER_H
#define MEGATRON_TOKENIZER_H

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_tokenizer_args {
    const char *tokenizer_type;  /* "GPT2BPETokenizer", "HuggingFaceTokenizer",
                                    "SentencePieceTokenizer", "GPTSentencePieceTokenizer",
                                    "Llama2Tokenizer", "TikTokenizer", "NullTokenizer" */
    const char *vocab_file;      /* --vocab-file */
    const char *merge_file;      /* --merge-file */
    const char *tokenizer_model; /* --tokenizer-model (tokenizer.json, .model) */
    int64_t vocab_size;          /* --vocab-size (NullTokenizer; TikTokenizer, 0: 131072) */
    const char *tiktoken_pattern; /* --tiktoken-pattern "v1" | "v2" (TikTokenizer) */
    int64_t tiktoken_num_special_tokens;        /* --tiktoken-num-special-tokens (0: 1000) */
    const char *const *tiktoken_special_tokens; /* --tiktoken-special-tokens (NULL: <unk> <s> </s>) */
    int n_tiktoken_special_tokens;
};

typedef struct mc_tokenizer mc_tokenizer;

MC_API mc_status mc_tok_init(const struct mc_tokenizer_args *args, mc_tokenizer **out);
MC_API void mc_tok_free(mc_tokenizer *t);

/* Growable token buffer filled by mc_tok_encode (appends). Free data with mc_free. */
struct mc_tokens {
    int64_t *data;
    int64_t len, cap;
};
/* Appends the ids of text[0..len) to out, exactly as Megatron's tokenizer.tokenize(text).
 * Thread-safe for concurrent calls on one tokenizer (workers share it). */
MC_API mc_status mc_tok_encode(const mc_tokenizer *t, const char *text, size_t len,
                               struct mc_tokens *out);
/* Decodes ids into a NUL-terminated string allocated with mc_alloc (*out, *out_len). */
MC_API mc_status mc_tok_decode(const mc_tokenizer *t, const int64_t *ids, int64_t n,
                               char **out, size_t *out_len);
MC_API int64_t mc_tok_vocab_size(const mc_tokenizer *t); /* unpadded */
MC_API int64_t mc_tok_eod(const mc_tokenizer *t);        /* -1 if the tokenizer has none */
/* The pad id GPTDataset uses: the tokenizer's pad if reading Megatron's .pad does not raise,
 * else -1 (only SentencePiece-based tokenizers have one; see spec megatron-data.md 3.7). */
MC_API int64_t mc_tok_pad(const mc_tokenizer *t);
/* Megatron's class name for unique_identifiers/descriptions, e.g. "_GPT2BPETokenizer". */
MC_API const char *mc_tok_class_name(const mc_tokenizer *t);
/* Megatron's _vocab_size_with_padding: round up to make_vocab_size_divisible_by * tp. */
MC_API int64_t mc_tok_padded_vocab_size(int64_t orig, int64_t divisible_by, int64_t tp);

#ifdef __cplusplus
}
#endif

#endif
