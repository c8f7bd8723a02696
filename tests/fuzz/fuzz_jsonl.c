/* preprocess_data's JSONL input (tools/preprocess_data.c: universal-newline line reader, strict
 * UTF-8 check, one JSON object per line, --json-keys text (a string or a list of strings),
 * tokenized with GPT-2's tokenizer.json and --append-eod). The tool's own static functions are
 * used by including its source, so the harness runs exactly the code preprocess_data runs. */
#define main preprocess_data_main
#include "../../tools/preprocess_data.c"
#undef main

#include "fuzz_common.h"

static mc_tokenizer *tokenizer(void)
{
    static mc_tokenizer *t;
    static char model[512];
    snprintf(model, sizeof(model), "%s/tests/golden/tokenizer/hf_gpt2/tokenizer.json",
             MC_FUZZ_SOURCE_DIR);
    struct mc_tokenizer_args ta = {.tokenizer_type = "HuggingFaceTokenizer", .tokenizer_model = model};
    if (!t && mc_tok_init(&ta, &t) != MC_OK)
        abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct args a;
    static const char *keys[2] = {"text", "title"};
    static mc_json_doc *json;
    if (!json && mc_json_doc_init(&json) != MC_OK)
        abort();
    a.given[O_APPEND_EOD] = size && (data[0] & 1);
    struct ctx c = {.a = &a, .keys = keys, .n_keys = size && (data[0] & 2) ? 2 : 1, .tok = tokenizer(),
                    .eod = mc_tok_eod(tokenizer()), .json = &json};
    char path[256];
    mc_fuzz_write("input.jsonl", data, size, path, sizeof(path));
    struct reader r;
    if (reader_open(&r, path) != 0)
        abort();
    char *text = NULL;
    size_t cap = 0, raw;
    struct doc_out docs[2];
    memset(docs, 0, sizeof(docs));
    for (;;) {
        size_t len = 0;
        if (!reader_line(&r, &text, &len, &cap, &raw))
            break;
        struct line ln = {.len = len - 1, .line_no = r.line_no, .file = path, .docs = docs};
        char *err = encode_line(&c, json, text, &ln);
        if (err)
            mc_fuzz_touch(err, strlen(err));
        free_msg(err);
        for (int k = 0; k < 2; k++)
            mc_fuzz_touch(docs[k].tokens.data, (size_t)docs[k].tokens.len * sizeof(int64_t));
    }
    for (int k = 0; k < 2; k++) {
        mc_free(docs[k].tokens.data);
        free(docs[k].lens);
    }
    free(text);
    reader_close(&r);
    return 0;
}
