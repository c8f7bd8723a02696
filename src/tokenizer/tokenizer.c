/* Tokenizer factory and common interface: mirrors build_tokenizer() and
 * _vocab_size_with_padding() in megatron/training/tokenizer/tokenizer.py. Dispatches on
 * Megatron's --tokenizer-type names; types megatron.c does not implement fail with
 * MC_ERR_UNSUPPORTED naming the type. */
#include "tokenizer/tokenizer_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

mc_status mc_tok_reserve(struct mc_tokens *out, int64_t extra)
{
    if (out->len + extra <= out->cap)
        return MC_OK;
    int64_t cap = out->cap ? out->cap : 256;
    while (cap < out->len + extra)
        cap *= 2;
    int64_t *d = mc_alloc((size_t)cap * sizeof(int64_t));
    if (!d)
        return MC_ERR_NOMEM;
    if (out->len)
        memcpy(d, out->data, (size_t)out->len * sizeof(int64_t));
    mc_free(out->data);
    out->data = d;
    out->cap = cap;
    return MC_OK;
}

mc_status mc_tok_push(struct mc_tokens *out, int64_t id)
{
    if (out->len == out->cap) {
        mc_status st = mc_tok_reserve(out, 1);
        if (st)
            return st;
    }
    out->data[out->len++] = id;
    return MC_OK;
}

mc_status mc_tok_read_file(const char *path, const char *what, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot open %s %s: %s", what, path, strerror(errno));
    mc_status st = MC_OK;
    long size;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = mc_error(MC_ERR_IO, "cannot size %s %s: %s", what, path, strerror(errno));
        goto out_close;
    }
    if (!(*out = mc_alloc((size_t)size + 1))) {
        st = MC_ERR_NOMEM;
        goto out_close;
    }
    if (fread(*out, 1, (size_t)size, f) != (size_t)size) {
        st = mc_error(MC_ERR_IO, "short read of %s %s (%ld bytes expected)", what, path, size);
        mc_free(*out);
        *out = NULL;
        goto out_close;
    }
    (*out)[size] = '\0';
    *len = (size_t)size;
out_close:
    fclose(f);
    return st;
}

mc_status mc_tok_init(const struct mc_tokenizer_args *args, mc_tokenizer **out)
{
    *out = NULL;
    const char *type = args->tokenizer_type;
    if (!type)
        return mc_error(MC_ERR_CONFIG, "--tokenizer-type is required");
    mc_tokenizer *t = mc_calloc(1, sizeof(*t));
    if (!t)
        return MC_ERR_NOMEM;
    t->eod = -1;
    t->pad = -1;
    mc_status st;
    if (strcmp(type, "GPT2BPETokenizer") == 0)
        st = mc_tok_gpt2_init(args, t);
    else if (strcmp(type, "NullTokenizer") == 0)
        st = mc_tok_null_init(args, t);
    else if (strcmp(type, "HuggingFaceTokenizer") == 0)
        st = mc_tok_hf_init(args, t);
    else if (strcmp(type, "PretrainedFromHF") == 0)
        st = mc_tok_hf_auto_init(args, t);
    else if (strcmp(type, "SentencePieceTokenizer") == 0)
        st = mc_tok_spm_init(args, 0, t);
    else if (strcmp(type, "GPTSentencePieceTokenizer") == 0)
        st = mc_tok_spm_init(args, 1, t);
    else if (strcmp(type, "Llama2Tokenizer") == 0)
        st = mc_tok_spm_init(args, 2, t);
    else if (strcmp(type, "TikTokenizer") == 0)
        st = mc_tok_tiktoken_init(args, t);
    else if (strcmp(type, "BertWordPieceLowerCase") == 0 || strcmp(type, "BertWordPieceCase") == 0 ||
             strcmp(type, "MultimodalTokenizer") == 0 ||
             strcmp(type, "NullMultimodalTokenizer") == 0)
        st = mc_error(MC_ERR_UNSUPPORTED, "--tokenizer-type %s is a Megatron tokenizer that "
                      "megatron.c does not implement yet (supported: GPT2BPETokenizer, "
                      "HuggingFaceTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, "
                      "Llama2Tokenizer, TikTokenizer, NullTokenizer, and MindSpeed-LLM's "
                      "PretrainedFromHF)", type);
    else
        st = mc_error(MC_ERR_CONFIG, "--tokenizer-type %s: unknown tokenizer type (Megatron's "
                      "are BertWordPieceLowerCase, BertWordPieceCase, GPT2BPETokenizer, "
                      "SentencePieceTokenizer, GPTSentencePieceTokenizer, HuggingFaceTokenizer, "
                      "Llama2Tokenizer, TikTokenizer, MultimodalTokenizer, NullTokenizer, "
                      "NullMultimodalTokenizer)", type);
    if (st) {
        mc_free(t);
        return st;
    }
    *out = t;
    return MC_OK;
}

void mc_tok_free(mc_tokenizer *t)
{
    if (!t)
        return;
    if (t->ops && t->ops->free_impl)
        t->ops->free_impl(t->impl);
    mc_free(t);
}

mc_status mc_tok_encode(const mc_tokenizer *t, const char *text, size_t len, struct mc_tokens *out)
{
    return t->ops->encode(t, text, len, out);
}

mc_status mc_tok_decode(const mc_tokenizer *t, const int64_t *ids, int64_t n, char **out,
                        size_t *out_len)
{
    struct mc_json_buf b = {0};
    *out = NULL;
    *out_len = 0;
    mc_status st = t->ops->decode(t, ids, n, &b);
    if (st == MC_OK && !b.data)
        st = mc_json_buf_append(&b, "", 0);
    if (st) {
        mc_free(b.data);
        return st;
    }
    *out = b.data;
    *out_len = b.len;
    return MC_OK;
}

int64_t mc_tok_vocab_size(const mc_tokenizer *t) { return t->vocab_size; }
int64_t mc_tok_eod(const mc_tokenizer *t) { return t->eod; }
int64_t mc_tok_pad(const mc_tokenizer *t) { return t->pad; }
const char *mc_tok_class_name(const mc_tokenizer *t) { return t->ops->class_name; }

int64_t mc_tok_padded_vocab_size(int64_t orig, int64_t divisible_by, int64_t tp)
{
    MC_ASSERT(divisible_by > 0 && tp > 0 && orig >= 0);
    /* Megatron: int(math.ceil(orig / multiple) * multiple) on floats; integer arithmetic is
     * the same for every size below 2^53. */
    int64_t multiple = divisible_by * tp;
    return (orig + multiple - 1) / multiple * multiple;
}
