/* Strict JSON reader/writer with Python json semantics (see json.h). Megatron has no C
 * counterpart: it uses Python's json module for vocab.json, JSONL lines and cache descriptions.
 * Values are parsed by recursive descent into an arena owned by the document; children of an
 * open container wait on a shared stack and are copied to the arena when it closes, so a parse
 * makes a handful of allocations, and reparsing reuses them. */
#include "core/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 1000 /* Python's json raises RecursionError near here */
#define CHUNK_MIN (64 * 1024)

struct chunk {
    struct chunk *next;
    size_t cap, used;
    /* data follows, 16-byte aligned because mc_alloc blocks are 64-byte aligned */
};

struct mc_json_doc {
    struct chunk *chunks;  /* newest first; the newest is the one being filled */
    struct mc_json *stack; /* children of the open containers */
    size_t stack_len, stack_cap;
    struct mc_json root;
    bool has_root;
    /* parse state */
    const char *text, *end, *p, *name, *line_start;
    int64_t line;
    int depth;
};

/* ---- arena ---------------------------------------------------------------------------------- */
static void *arena_alloc(mc_json_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        /* reuse a spare chunk kept from an earlier parse when it is big enough */
        size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
        if (c && c->cap < cap / 2)
            cap = c->cap * 2 > cap ? c->cap * 2 : cap;
        struct chunk *nc = mc_alloc(sizeof(struct chunk) + 16 + cap);
        if (!nc)
            return NULL;
        nc->cap = cap;
        nc->used = 0;
        nc->next = c;
        d->chunks = c = nc;
    }
    char *base = (char *)c + ((sizeof(struct chunk) + 15) & ~(size_t)15);
    void *p = base + c->used;
    c->used += n;
    return p;
}

/* Keeps only the largest chunk, emptied, so a stream of small documents allocates nothing. */
static void arena_reset(mc_json_doc *d)
{
    struct chunk *keep = NULL;
    for (struct chunk *c = d->chunks; c;) {
        struct chunk *next = c->next;
        if (!keep || c->cap > keep->cap) {
            mc_free(keep);
            keep = c;
        } else {
            mc_free(c);
        }
        c = next;
    }
    if (keep) {
        keep->used = 0;
        keep->next = NULL;
    }
    d->chunks = keep;
}

mc_status mc_json_doc_init(mc_json_doc **out)
{
    *out = mc_calloc(1, sizeof(**out));
    return *out ? MC_OK : MC_ERR_NOMEM;
}

void mc_json_doc_free(mc_json_doc *doc)
{
    if (!doc)
        return;
    for (struct chunk *c = doc->chunks; c;) {
        struct chunk *next = c->next;
        mc_free(c);
        c = next;
    }
    mc_free(doc->stack);
    mc_free(doc);
}

const struct mc_json *mc_json_doc_root(const mc_json_doc *doc)
{
    return doc && doc->has_root ? &doc->root : NULL;
}

/* ---- errors --------------------------------------------------------------------------------- */
static mc_status fail(mc_json_doc *d, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mc_status fail(mc_json_doc *d, const char *at, const char *fmt, ...)
{
    /* line/column of `at`: count newlines from the last known line start */
    int64_t line = d->line;
    const char *ls = d->line_start;
    for (const char *q = ls; q < at; q++)
        if (*q == '\n') {
            line++;
            ls = q + 1;
        }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return mc_error(MC_ERR_FORMAT, "%s:%lld:%lld: invalid JSON: %s", d->name, (long long)line,
                    (long long)(at - ls + 1), msg);
}

static const char *describe(const mc_json_doc *d, const char *at)
{
    static _Thread_local char buf[32];
    if (at >= d->end)
        return "end of input";
    unsigned char c = (unsigned char)*at;
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, sizeof(buf), "'%c'", c);
    else
        snprintf(buf, sizeof(buf), "byte 0x%02x", c);
    return buf;
}

/* ---- lexing helpers --------------------------------------------------------------------------- */
static void skip_ws(mc_json_doc *d)
{
    const char *p = d->p;
    while (p < d->end) {
        char c = *p;
        if (c == '\n') {
            d->line++;
            d->line_start = p + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            break;
        }
        p++;
    }
    d->p = p;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(const char *p, const char *end)
{
    if (end - p < 4)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid (overlong, surrogate, >10FFFF). */
static int utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int n;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) { n = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 4; cp = c & 0x07; min = 0x10000; }
    else return 0;
    if (end - p < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* Parses a string at d->p (the opening quote) into the arena. */
static mc_status parse_string(mc_json_doc *d, const char **out, size_t *out_len)
{
    const char *start = d->p + 1, *p = start;
    /* fast scan: find the closing quote; decoded length <= raw length */
    bool has_escape = false;
    while (p < d->end && *p != '"') {
        if (*p == '\\') {
            has_escape = true;
            p++;
        }
        p++;
    }
    if (p >= d->end)
        return fail(d, d->p, "unterminated string");
    size_t raw = (size_t)(p - start);
    char *o = arena_alloc(d, raw + 1);
    if (!o)
        return MC_ERR_NOMEM;
    size_t n = 0;
    for (const char *q = start; q < p;) {
        unsigned char c = (unsigned char)*q;
        if (c < 0x20)
            return fail(d, q, "control character 0x%02x inside a string (must be escaped)", c);
        if (c >= 0x80) {
            int l = utf8_len((const unsigned char *)q, (const unsigned char *)p);
            if (!l)
                return fail(d, q, "invalid UTF-8 byte 0x%02x inside a string", c);
            memcpy(o + n, q, (size_t)l);
            n += (size_t)l;
            q += l;
            continue;
        }
        if (c != '\\' || !has_escape) {
            o[n++] = (char)c;
            q++;
            continue;
        }
        char e = q[1];
        q += 2;
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            int u = read_hex4(q, p);
            if (u < 0)
                return fail(d, q - 2, "\\u must be followed by 4 hex digits");
            q += 4;
            uint32_t cp = (uint32_t)u;
            if (cp >= 0xD800 && cp <= 0xDBFF && p - q >= 6 && q[0] == '\\' && q[1] == 'u') {
                int lo = read_hex4(q + 2, p);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
                    q += 6;
                }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF)
                return fail(d, q - 6, "lone surrogate \\u%04X: Python's json accepts it but the "
                            "string cannot be encoded as UTF-8 (Megatron fails on it later)", cp);
            /* each escape is >= 6 raw bytes and decodes to <= 4 (a pair: 12 -> 4) */
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            return fail(d, q - 2, "invalid escape: backslash followed by %s", describe(d, q - 1));
        }
    }
    o[n] = '\0';
    *out = o;
    *out_len = n;
    d->p = p + 1;
    return MC_OK;
}

/* Number grammar of RFC 8259, plus Python's NaN, Infinity, -Infinity. */
static mc_status parse_number(mc_json_doc *d, struct mc_json *v)
{
    const char *s = d->p, *p = s;
    v->type = MC_JSON_NUMBER;
    if (p < d->end && *p == '-')
        p++;
    if (d->end - p >= 8 && memcmp(p, "Infinity", 8) == 0) {
        p += 8;
        v->num = s[0] == '-' ? -INFINITY : INFINITY;
        goto done;
    }
    if (p < d->end && *p == '0') {
        p++;
    } else if (p < d->end && *p >= '1' && *p <= '9') {
        while (p < d->end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return fail(d, p, "expected a digit, found %s", describe(d, p));
    }
    bool integral = true;
    if (p < d->end && *p == '.') {
        integral = false;
        p++;
        if (p >= d->end || *p < '0' || *p > '9')
            return fail(d, p, "expected a digit after '.', found %s", describe(d, p));
        while (p < d->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < d->end && (*p == 'e' || *p == 'E')) {
        integral = false;
        p++;
        if (p < d->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= d->end || *p < '0' || *p > '9')
            return fail(d, p, "expected a digit in the exponent, found %s", describe(d, p));
        while (p < d->end && *p >= '0' && *p <= '9')
            p++;
    }
    size_t n = (size_t)(p - s);
    char small[64], *buf = n < sizeof(small) ? small : arena_alloc(d, n + 1);
    if (!buf)
        return MC_ERR_NOMEM;
    memcpy(buf, s, n);
    buf[n] = '\0';
    v->num = strtod(buf, NULL);
    if (integral) {
        errno = 0;
        long long i = strtoll(buf, NULL, 10);
        if (errno == 0) {
            v->is_int = true;
            v->inum = i;
        }
    }
done:
    n = (size_t)(p - s);
    {
        char *lit = arena_alloc(d, n + 1);
        if (!lit)
            return MC_ERR_NOMEM;
        memcpy(lit, s, n);
        lit[n] = '\0';
        v->str = lit;
        v->len = (int64_t)n;
    }
    d->p = p;
    return MC_OK;
}

static mc_status push(mc_json_doc *d, const struct mc_json *v)
{
    if (d->stack_len == d->stack_cap) {
        size_t cap = d->stack_cap ? d->stack_cap * 2 : 256;
        struct mc_json *s = mc_alloc(cap * sizeof(*s));
        if (!s)
            return MC_ERR_NOMEM;
        if (d->stack_len)
            memcpy(s, d->stack, d->stack_len * sizeof(*s));
        mc_free(d->stack);
        d->stack = s;
        d->stack_cap = cap;
    }
    d->stack[d->stack_len++] = *v;
    return MC_OK;
}

/* Moves the children pushed since `base` into the arena as v's items. */
static mc_status close_container(mc_json_doc *d, struct mc_json *v, size_t base)
{
    size_t n = d->stack_len - base;
    v->len = (int64_t)n;
    v->items = NULL;
    if (n) {
        v->items = arena_alloc(d, n * sizeof(struct mc_json));
        if (!v->items)
            return MC_ERR_NOMEM;
        memcpy(v->items, d->stack + base, n * sizeof(struct mc_json));
    }
    d->stack_len = base;
    return MC_OK;
}

static mc_status parse_value(mc_json_doc *d, struct mc_json *v);

static mc_status parse_array(mc_json_doc *d, struct mc_json *v)
{
    size_t base = d->stack_len;
    v->type = MC_JSON_ARRAY;
    d->p++;
    skip_ws(d);
    if (d->p < d->end && *d->p == ']') {
        d->p++;
        return close_container(d, v, base);
    }
    for (;;) {
        struct mc_json item;
        mc_status st = parse_value(d, &item);
        if (st != MC_OK)
            return st;
        if ((st = push(d, &item)) != MC_OK)
            return st;
        skip_ws(d);
        if (d->p < d->end && *d->p == ',') {
            d->p++;
            skip_ws(d);
            if (d->p < d->end && *d->p == ']')
                return fail(d, d->p, "trailing comma before ']'");
            continue;
        }
        if (d->p < d->end && *d->p == ']') {
            d->p++;
            return close_container(d, v, base);
        }
        return fail(d, d->p, "expected ',' or ']' in array, found %s", describe(d, d->p));
    }
}

static mc_status parse_object(mc_json_doc *d, struct mc_json *v)
{
    size_t base = d->stack_len;
    v->type = MC_JSON_OBJECT;
    d->p++;
    skip_ws(d);
    if (d->p < d->end && *d->p == '}') {
        d->p++;
        return close_container(d, v, base);
    }
    for (;;) {
        if (d->p >= d->end || *d->p != '"')
            return fail(d, d->p, "expected a member name in double quotes, found %s",
                        describe(d, d->p));
        const char *key;
        size_t key_len;
        mc_status st = parse_string(d, &key, &key_len);
        if (st != MC_OK)
            return st;
        skip_ws(d);
        if (d->p >= d->end || *d->p != ':')
            return fail(d, d->p, "expected ':' after member name, found %s", describe(d, d->p));
        d->p++;
        struct mc_json item;
        if ((st = parse_value(d, &item)) != MC_OK)
            return st;
        item.key = key;
        item.key_len = key_len;
        if ((st = push(d, &item)) != MC_OK)
            return st;
        skip_ws(d);
        if (d->p < d->end && *d->p == ',') {
            d->p++;
            skip_ws(d);
            if (d->p < d->end && *d->p == '}')
                return fail(d, d->p, "trailing comma before '}'");
            continue;
        }
        if (d->p < d->end && *d->p == '}') {
            d->p++;
            return close_container(d, v, base);
        }
        return fail(d, d->p, "expected ',' or '}' in object, found %s", describe(d, d->p));
    }
}

static bool literal(mc_json_doc *d, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0)
        return false;
    d->p += n;
    return true;
}

static mc_status parse_value(mc_json_doc *d, struct mc_json *v)
{
    memset(v, 0, sizeof(*v));
    skip_ws(d);
    if (d->p >= d->end)
        return fail(d, d->p, "expected a value, found end of input");
    mc_status st;
    switch (*d->p) {
    case '{':
    case '[':
        if (++d->depth > MAX_DEPTH)
            return fail(d, d->p, "nesting deeper than %d levels", MAX_DEPTH);
        st = *d->p == '{' ? parse_object(d, v) : parse_array(d, v);
        d->depth--;
        return st;
    case '"': {
        size_t n = 0;
        v->type = MC_JSON_STRING;
        st = parse_string(d, &v->str, &n);
        v->len = (int64_t)n;
        return st;
    }
    case 't':
        if (literal(d, "true")) { v->type = MC_JSON_TRUE; return MC_OK; }
        break;
    case 'f':
        if (literal(d, "false")) { v->type = MC_JSON_FALSE; return MC_OK; }
        break;
    case 'n':
        if (literal(d, "null")) { v->type = MC_JSON_NULL; return MC_OK; }
        break;
    case 'N':
        if (literal(d, "NaN")) {
            v->type = MC_JSON_NUMBER;
            v->num = NAN;
            v->str = "NaN";
            v->len = 3;
            return MC_OK;
        }
        break;
    default:
        if (*d->p == '-' || *d->p == 'I' || (*d->p >= '0' && *d->p <= '9')) {
            if (*d->p == 'I' && !(d->end - d->p >= 8 && memcmp(d->p, "Infinity", 8) == 0))
                break;
            return parse_number(d, v);
        }
    }
    if ((unsigned char)*d->p == 0xEF && d->end - d->p >= 3 && memcmp(d->p, "\xEF\xBB\xBF", 3) == 0)
        return fail(d, d->p, "unexpected UTF-8 byte order mark");
    return fail(d, d->p, "expected a value, found %s", describe(d, d->p));
}

mc_status mc_json_doc_parse(mc_json_doc *doc, const char *text, size_t len, const char *name,
                            int64_t first_line)
{
    arena_reset(doc);
    doc->has_root = false;
    doc->stack_len = 0;
    doc->text = doc->p = doc->line_start = text;
    doc->end = text + len;
    doc->name = name ? name : "<json>";
    doc->line = first_line;
    doc->depth = 0;
    mc_status st = parse_value(doc, &doc->root);
    if (st != MC_OK)
        return st;
    skip_ws(doc);
    if (doc->p < doc->end)
        return fail(doc, doc->p, "extra data after the value: %s", describe(doc, doc->p));
    doc->has_root = true;
    return MC_OK;
}

mc_status mc_json_parse_file(const char *path, mc_json_doc **out)
{
    *out = NULL;
    mc_json_doc *doc = NULL;
    char *buf = NULL;
    mc_status st = MC_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot open JSON file %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        st = mc_error(MC_ERR_IO, "cannot seek in %s: %s", path, strerror(errno));
        goto out_close;
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = mc_error(MC_ERR_IO, "cannot size %s: %s", path, strerror(errno));
        goto out_close;
    }
    buf = mc_alloc((size_t)size + 1);
    if (!buf) {
        st = MC_ERR_NOMEM;
        goto out_close;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        st = mc_error(MC_ERR_IO, "short read of %s (%ld bytes expected)", path, size);
        goto out_close;
    }
    if ((st = mc_json_doc_init(&doc)) != MC_OK)
        goto out_close;
    st = mc_json_doc_parse(doc, buf, (size_t)size, path, 1);
    if (st == MC_OK) {
        *out = doc;
        doc = NULL;
    }
out_close:
    fclose(f);
    mc_json_doc_free(doc);
    mc_free(buf);
    return st;
}

const struct mc_json *mc_json_get(const struct mc_json *obj, const char *key)
{
    if (!obj || obj->type != MC_JSON_OBJECT)
        return NULL;
    size_t n = strlen(key);
    for (int64_t i = obj->len - 1; i >= 0; i--) {
        const struct mc_json *m = &obj->items[i];
        if (m->key_len == n && memcmp(m->key, key, n) == 0)
            return m;
    }
    return NULL;
}

const char *mc_json_type_name(enum mc_json_type t)
{
    static const char *names[] = {"null", "false", "true", "number", "string", "array", "object"};
    return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "?";
}

/* ---- writing -------------------------------------------------------------------------------- */
static mc_status buf_reserve(struct mc_json_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return MC_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *nd = mc_alloc(cap);
    if (!nd)
        return MC_ERR_NOMEM;
    if (b->len)
        memcpy(nd, b->data, b->len);
    mc_free(b->data);
    b->data = nd;
    b->cap = cap;
    return MC_OK;
}

mc_status mc_json_buf_append(struct mc_json_buf *b, const char *s, size_t len)
{
    mc_status st = buf_reserve(b, len);
    if (st != MC_OK)
        return st;
    memcpy(b->data + b->len, s, len);
    b->len += len;
    b->data[b->len] = '\0';
    return MC_OK;
}

mc_status mc_json_buf_printf(struct mc_json_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return mc_error(MC_ERR_INTERNAL, "bad format string %s", fmt);
    mc_status st = buf_reserve(b, (size_t)n);
    if (st != MC_OK)
        return st;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return MC_OK;
}

mc_status mc_json_write_string(struct mc_json_buf *b, const char *s, size_t len, bool ensure_ascii)
{
    /* worst case: every byte becomes \u00XX (6), or 4 bytes -> 12 */
    mc_status st = buf_reserve(b, 6 * len + 2);
    if (st != MC_OK)
        return st;
    char *o = b->data + b->len;
    *o++ = '"';
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        unsigned c = *p;
        if (c >= 0x80) {
            int l = utf8_len(p, end);
            if (!l)
                return mc_error(MC_ERR_FORMAT, "invalid UTF-8 byte 0x%02x at offset %zu of a "
                                "string being written as JSON", c, (size_t)(p - (const unsigned char *)s));
            if (!ensure_ascii) {
                memcpy(o, p, (size_t)l);
                o += l;
                p += l;
                continue;
            }
            uint32_t cp = l == 2 ? (c & 0x1Fu) : l == 3 ? (c & 0x0Fu) : (c & 0x07u);
            for (int i = 1; i < l; i++)
                cp = (cp << 6) | (p[i] & 0x3Fu);
            p += l;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                o += sprintf(o, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                o += sprintf(o, "\\u%04x", cp);
            }
            continue;
        }
        p++;
        switch (c) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        case '\b': *o++ = '\\'; *o++ = 'b'; break;
        case '\f': *o++ = '\\'; *o++ = 'f'; break;
        default:
            if (c < 0x20)
                o += sprintf(o, "\\u%04x", c);
            else
                *o++ = (char)c;
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    b->data[b->len] = '\0';
    return MC_OK;
}

mc_status mc_json_write_double(struct mc_json_buf *b, double v)
{
    if (isnan(v))
        return mc_json_buf_append(b, "NaN", 3);
    if (isinf(v))
        return v > 0 ? mc_json_buf_append(b, "Infinity", 8) : mc_json_buf_append(b, "-Infinity", 9);
    /* shortest digit string that reads back as v */
    char digits[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digits, sizeof(digits), "%.*e", prec - 1, v);
        if (strtod(digits, NULL) == v)
            break;
    }
    /* digits is "[-]d[.ddd]e[+-]XX": take the mantissa digits and the decimal exponent */
    char mant[24];
    int nm = 0;
    const char *q = digits;
    bool neg = *q == '-';
    if (neg)
        q++;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            mant[nm++] = *q;
    int exp = atoi(q + 1);
    while (nm > 1 && mant[nm - 1] == '0')
        nm--;
    mant[nm] = '\0';
    char out[64];
    int n = 0;
    if (neg)
        out[n++] = '-';
    if (exp < -4 || exp >= 16) /* Python repr: positional only when -4 <= exp10 < 16 */
        goto sci;
    {
        if (exp < 0) {
            n += sprintf(out + n, "0.");
            for (int i = 0; i < -exp - 1; i++)
                out[n++] = '0';
            n += sprintf(out + n, "%s", mant);
        } else {
            for (int i = 0; i <= exp; i++)
                out[n++] = i < nm ? mant[i] : '0';
            out[n++] = '.';
            if (nm > exp + 1)
                n += sprintf(out + n, "%s", mant + exp + 1);
            else
                out[n++] = '0';
        }
        return mc_json_buf_append(b, out, (size_t)n);
    }
sci:
    out[n++] = mant[0];
    if (nm > 1) {
        out[n++] = '.';
        n += sprintf(out + n, "%s", mant + 1);
    }
    n += sprintf(out + n, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return mc_json_buf_append(b, out, (size_t)n);
}
