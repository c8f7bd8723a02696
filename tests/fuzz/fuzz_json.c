/* JSON (src/core/json.c): the reader behind every JSON input (vocab.json, tokenizer.json,
 * config.json, the safetensors header and index, JSONL lines, --per-split-data-args-path),
 * parsed in memory, then every value is walked and every string is written back with the
 * json.dumps writer (ensure_ascii on and off), as the dataset descriptions do. */
#include <stdbool.h>

#include "core/json.h"
#include "fuzz_common.h"

static void walk(const struct mc_json *v, struct mc_json_buf *b, int depth)
{
    if (depth > 100000)
        return;
    if (v->key)
        mc_fuzz_touch(v->key, strlen(v->key));
    if (v->type == MC_JSON_STRING) {
        mc_fuzz_touch(v->str, (size_t)v->len);
        b->len = 0;
        mc_json_write_string(b, v->str, (size_t)v->len, true);
        b->len = 0;
        mc_json_write_string(b, v->str, (size_t)v->len, false);
    } else if (v->type == MC_JSON_NUMBER) {
        b->len = 0;
        mc_json_write_double(b, v->num);
    }
    if (v->type == MC_JSON_ARRAY || v->type == MC_JSON_OBJECT)
        for (int64_t i = 0; i < v->len; i++)
            walk(&v->items[i], b, depth + 1);
    if (v->type == MC_JSON_OBJECT && v->len > 0 && v->items[0].key)
        mc_fuzz_sink += mc_json_get(v, v->items[0].key) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mc_json_doc *doc;
    if (!doc && mc_json_doc_init(&doc))
        abort();
    /* the reader takes text with an explicit length and must not read past it */
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    if (mc_fuzz_report("json", mc_json_doc_parse(doc, text, size, "fuzz.json", 1)) == MC_OK) {
        struct mc_json_buf b = {0};
        walk(mc_json_doc_root(doc), &b, 0);
        mc_free(b.data);
    }
    free(text);
    return 0;
}
