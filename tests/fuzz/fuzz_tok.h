/* Shared by the tokenizer targets: once a fuzzed vocabulary loads, it is used as
 * preprocess_data and the dataset code use it: a few texts are encoded, the ids decoded, every
 * id below the vocabulary size decoded alone, and the eod/pad/size accessors read. */
#ifndef MC_TESTS_FUZZ_TOK_H
#define MC_TESTS_FUZZ_TOK_H

#include "fuzz_common.h"
#include "megatron/tokenizer.h"

static void mc_fuzz_use_tokenizer(const struct mc_tokenizer_args *args)
{
    static const char *texts[] = {
        "Hello world! The quick brown fox's 123 jumps.\n\n  over\tthe lazy dog",
        "\xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 <s></s><|endoftext|> \xe2\x96\x81x",
        "", " ", "a"};
    mc_tokenizer *t;
    if (mc_fuzz_report("tokenizer", mc_tok_init(args, &t)) != MC_OK)
        return;
    mc_fuzz_sink += (unsigned)(mc_tok_vocab_size(t) + mc_tok_eod(t) + mc_tok_pad(t));
    mc_fuzz_touch(mc_tok_class_name(t), strlen(mc_tok_class_name(t)));
    for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
        struct mc_tokens ids = {0};
        char *s = NULL;
        size_t n = 0;
        if (mc_tok_encode(t, texts[k], strlen(texts[k]), &ids) == MC_OK &&
            mc_tok_decode(t, ids.data, ids.len, &s, &n) == MC_OK)
            mc_fuzz_touch(s, n);
        mc_free(s);
        mc_free(ids.data);
    }
    int64_t v = mc_tok_vocab_size(t);
    for (int64_t id = 0; id < v && id < 4096; id++) {
        char *s = NULL;
        size_t n = 0;
        if (mc_tok_decode(t, &id, 1, &s, &n) == MC_OK)
            mc_fuzz_touch(s, n);
        mc_free(s);
    }
    mc_tok_free(t);
}

#endif
