/* Test driver for tests/tokenizer/test_json_python.py: parses each record (u32 length + bytes)
 * with src/core/json.c and prints one line per record: the value re-serialized canonically
 * (Python dict semantics for repeated keys, ensure_ascii strings, Python float repr, integers
 * exactly as written), or "ERR <message>". */
#include "core/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mc_status dump(struct mc_json_buf *o, const struct mc_json *v)
{
    mc_status st = MC_OK;
    switch (v->type) {
    case MC_JSON_NULL: return mc_json_buf_append(o, "null", 4);
    case MC_JSON_TRUE: return mc_json_buf_append(o, "true", 4);
    case MC_JSON_FALSE: return mc_json_buf_append(o, "false", 5);
    case MC_JSON_STRING: return mc_json_write_string(o, v->str, (size_t)v->len, true);
    case MC_JSON_NUMBER:
        if (v->is_int)
            return mc_json_buf_printf(o, "%lld", (long long)v->inum);
        if (!strpbrk(v->str, ".eE") && strcmp(v->str, "NaN") && !strstr(v->str, "Infinity"))
            return mc_json_buf_append(o, v->str, (size_t)v->len); /* big integer: Python int */
        return mc_json_write_double(o, v->num);
    case MC_JSON_ARRAY:
        st = mc_json_buf_append(o, "[", 1);
        for (int64_t i = 0; st == MC_OK && i < v->len; i++)
            if (!(i && (st = mc_json_buf_append(o, ",", 1))))
                st = dump(o, &v->items[i]);
        return st ? st : mc_json_buf_append(o, "]", 1);
    case MC_JSON_OBJECT: {
        /* a dict: first position of each key, last value */
        bool first = true;
        st = mc_json_buf_append(o, "{", 1);
        for (int64_t i = 0; st == MC_OK && i < v->len; i++) {
            const struct mc_json *m = &v->items[i];
            bool seen = false;
            for (int64_t j = 0; j < i && !seen; j++)
                seen = v->items[j].key_len == m->key_len && memcmp(v->items[j].key, m->key, m->key_len) == 0;
            if (seen)
                continue;
            const struct mc_json *last = m;
            for (int64_t j = i + 1; j < v->len; j++)
                if (v->items[j].key_len == m->key_len && memcmp(v->items[j].key, m->key, m->key_len) == 0)
                    last = &v->items[j];
            if ((!first && (st = mc_json_buf_append(o, ",", 1))) ||
                (st = mc_json_write_string(o, m->key, m->key_len, true)) ||
                (st = mc_json_buf_append(o, ":", 1)) || (st = dump(o, last)))
                break;
            first = false;
        }
        return st ? st : mc_json_buf_append(o, "}", 1);
    }
    }
    return MC_ERR_INTERNAL;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f)
        return 2;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        return 2;
    fclose(f);
    FILE *out = fopen(argv[2], "wb");
    mc_json_doc *doc;
    if (mc_json_doc_init(&doc))
        return 2;
    struct mc_json_buf o = {0};
    for (long pos = 0; pos + 4 <= n;) {
        uint32_t len;
        memcpy(&len, buf + pos, 4);
        pos += 4;
        o.len = 0;
        mc_status st = mc_json_doc_parse(doc, buf + pos, len, "rec", 1);
        if (st == MC_OK)
            st = dump(&o, mc_json_doc_root(doc));
        if (st)
            fprintf(out, "ERR %s\n", mc_last_error());
        else
            fprintf(out, "%s\n", o.data);
        pos += len;
    }
    mc_free(o.data);
    mc_json_doc_free(doc);
    fclose(out);
    free(buf);
    return 0;
}
