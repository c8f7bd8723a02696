/* A small strict JSON reader and writer, for vocab.json, tokenizer.json, JSONL input lines and
 * the dataset-cache descriptions. It accepts what Python's json.loads accepts (Megatron reads
 * all of these with it): NaN/Infinity/-Infinity, duplicate keys (mc_json_get returns the last,
 * as a Python dict keeps the last value), surrogate-pair escapes combined into one code point.
 * It refuses what json.loads refuses (trailing commas, comments, control characters inside
 * strings, leading zeros, a BOM, trailing garbage) and, unlike Python, a lone surrogate escape
 * (Python accepts it, then Megatron's worker dies when it UTF-8-encodes the string). Errors
 * say name:line:column (1-based; column counts bytes) and what was expected.
 *
 * Writing follows Python's json.dumps defaults: ensure_ascii escapes (\uXXXX, surrogate pairs
 * above U+FFFF) and float repr, so that text hashed by Megatron (cache descriptions) matches. */
#ifndef MC_CORE_JSON_H
#define MC_CORE_JSON_H

#include "megatron.h"

enum mc_json_type {
    MC_JSON_NULL = 0,
    MC_JSON_FALSE,
    MC_JSON_TRUE,
    MC_JSON_NUMBER,
    MC_JSON_STRING,
    MC_JSON_ARRAY,
    MC_JSON_OBJECT,
};

/* One value. Every pointer in it lives until the document is reparsed or freed. */
struct mc_json {
    enum mc_json_type type;
    bool is_int;           /* NUMBER written as an integer literal that fits in int64 */
    const char *key;       /* member name (decoded UTF-8, NUL-terminated) if inside an object */
    size_t key_len;
    const char *str;       /* STRING: decoded UTF-8 (NUL-terminated, may contain NUL bytes);
                              NUMBER: the literal as written */
    struct mc_json *items; /* ARRAY elements / OBJECT members, in file order */
    int64_t len;           /* STRING/NUMBER: bytes of str; ARRAY/OBJECT: item count */
    double num;            /* NUMBER as double (Python float(literal)) */
    int64_t inum;          /* NUMBER when is_int */
};

typedef struct mc_json_doc mc_json_doc;

/* A reusable document: parse one text after another (e.g. JSONL lines) without reallocating. */
mc_status mc_json_doc_init(mc_json_doc **out);
void mc_json_doc_free(mc_json_doc *doc);
/* Parses text[0..len) into doc, replacing what it held. name (a file name) and first_line (the
 * line number of text[0], 1 for a whole file) go into error messages. */
mc_status mc_json_doc_parse(mc_json_doc *doc, const char *text, size_t len, const char *name,
                            int64_t first_line);
/* Root of the last successful parse; NULL if none. */
const struct mc_json *mc_json_doc_root(const mc_json_doc *doc);

/* Reads and parses a whole file. *out is freed with mc_json_doc_free. */
mc_status mc_json_parse_file(const char *path, mc_json_doc **out);

/* Object member by name, the last one if the key repeats; NULL if absent or obj isn't an object. */
const struct mc_json *mc_json_get(const struct mc_json *obj, const char *key);
const char *mc_json_type_name(enum mc_json_type t); /* "string", "object", ... */

/* ---- writing -------------------------------------------------------------------------------- */
/* Growable text buffer; free data with mc_free. Appends NUL-terminate it. */
struct mc_json_buf {
    char *data;
    size_t len, cap;
};
mc_status mc_json_buf_append(struct mc_json_buf *b, const char *s, size_t len);
mc_status mc_json_buf_printf(struct mc_json_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends s[0..len) (UTF-8) as a quoted JSON string. ensure_ascii: escape every non-ASCII code
 * point as \uXXXX (Python's default) instead of copying it. MC_ERR_FORMAT on invalid UTF-8. */
mc_status mc_json_write_string(struct mc_json_buf *b, const char *s, size_t len, bool ensure_ascii);
/* Appends a double as Python's repr(float) writes it (json.dumps uses repr): shortest
 * round-trip digits, "1.0", "1e-05", "1e+16", "NaN", "Infinity", "-Infinity". */
mc_status mc_json_write_double(struct mc_json_buf *b, double v);

#endif
