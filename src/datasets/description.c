/* Python json.dumps(obj, indent=4) for the dataset descriptions Megatron hashes into its cache
 * file names (megatron_dataset.py, blended_dataset.py). Reproduces: ordered keys, ", " -> ",\n"
 * separators with 4-space indentation, "[]"/"{}" for empty containers, ensure_ascii escaping
 * (\uXXXX, surrogate pairs above U+FFFF), and float repr (shortest round-trip digits). */
#include "datasets/description.h"
#include "core/pyformat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct mc_desc *jnew(enum mc_desc_kind k)
{
    struct mc_desc *v = mc_calloc(1, sizeof(*v));
    if (v)
        v->kind = k;
    return v;
}

struct mc_desc *mc_desc_null(void) { return jnew(MC_DESC_NULL); }
struct mc_desc *mc_desc_list(void) { return jnew(MC_DESC_LIST); }
struct mc_desc *mc_desc_obj(void) { return jnew(MC_DESC_OBJ); }

struct mc_desc *mc_desc_int(int64_t x)
{
    struct mc_desc *v = jnew(MC_DESC_INT);
    if (v)
        v->i = x;
    return v;
}

struct mc_desc *mc_desc_float(double x)
{
    struct mc_desc *v = jnew(MC_DESC_FLOAT);
    if (v)
        v->f = x;
    return v;
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = mc_alloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

struct mc_desc *mc_desc_str(const char *s)
{
    if (!s)
        return mc_desc_null();
    struct mc_desc *v = jnew(MC_DESC_STR);
    if (v && !(v->s = dupstr(s))) {
        mc_free(v);
        return NULL;
    }
    return v;
}

void mc_desc_free(struct mc_desc *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->n; i++) {
        mc_desc_free(v->items[i]);
        if (v->keys)
            mc_free(v->keys[i]);
    }
    mc_free(v->items);
    mc_free(v->keys);
    mc_free(v->s);
    mc_free(v);
}

mc_status mc_desc_add(struct mc_desc *p, const char *key, struct mc_desc *v)
{
    if (!p || !v) {
        mc_desc_free(v);
        return mc_error(MC_ERR_NOMEM, "out of memory building a dataset description");
    }
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        struct mc_desc **items = mc_calloc((size_t)cap, sizeof(*items));
        char **keys = mc_calloc((size_t)cap, sizeof(*keys));
        if (!items || !keys) {
            mc_free(items);
            mc_free(keys);
            mc_desc_free(v);
            return mc_error(MC_ERR_NOMEM, "out of memory building a dataset description");
        }
        if (p->n) {
            memcpy(items, p->items, sizeof(*items) * (size_t)p->n);
            if (p->keys)
                memcpy(keys, p->keys, sizeof(*keys) * (size_t)p->n);
        }
        mc_free(p->items);
        mc_free(p->keys);
        p->items = items;
        p->keys = keys;
        p->cap = cap;
    }
    char *k = NULL;
    if (key && !(k = dupstr(key))) {
        mc_desc_free(v);
        return mc_error(MC_ERR_NOMEM, "out of memory building a dataset description");
    }
    p->keys[p->n] = k;
    p->items[p->n++] = v;
    return MC_OK;
}

struct mc_desc *mc_desc_clone(const struct mc_desc *v)
{
    struct mc_desc *c;
    switch (v->kind) {
    case MC_DESC_STR: return mc_desc_str(v->s);
    case MC_DESC_LIST:
    case MC_DESC_OBJ:
        c = jnew(v->kind);
        for (int i = 0; c && i < v->n; i++) {
            if (mc_desc_add(c, v->kind == MC_DESC_OBJ ? v->keys[i] : NULL,
                            mc_desc_clone(v->items[i]))) {
                mc_desc_free(c);
                return NULL;
            }
        }
        return c;
    default:
        c = jnew(v->kind);
        if (c) {
            c->i = v->i;
            c->f = v->f;
        }
        return c;
    }
}

/* json.dumps of a float: Python's repr digits, NaN/Infinity spelled as json writes them. */
static void json_float(double x, char *buf, size_t n)
{
    if (isnan(x))
        snprintf(buf, n, "NaN");
    else if (isinf(x))
        snprintf(buf, n, x > 0 ? "Infinity" : "-Infinity");
    else
        mc_py_float_repr(buf, n, x);
}

struct sbuf {
    char *p;
    size_t n, cap;
    int err;
};

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *p = mc_alloc(cap);
        if (!p) {
            b->err = 1;
            return;
        }
        if (b->n)
            memcpy(p, b->p, b->n);
        mc_free(b->p);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u(struct sbuf *b, unsigned cp)
{
    char t[16];
    snprintf(t, sizeof(t), "\\u%04x", cp & 0xffffu);
    sb_puts(b, t);
}

/* Decodes one UTF-8 sequence; invalid bytes come back as U+DC80..U+DCFF, which is what
 * Python's surrogateescape makes of undecodable bytes in command-line paths. */
static unsigned utf8_next(const unsigned char **ps)
{
    const unsigned char *s = *ps;
    unsigned c = s[0], cp, need;
    if (c < 0x80) { *ps = s + 1; return c; }
    if ((c & 0xe0) == 0xc0) { cp = c & 0x1f; need = 1; }
    else if ((c & 0xf0) == 0xe0) { cp = c & 0x0f; need = 2; }
    else if ((c & 0xf8) == 0xf0) { cp = c & 0x07; need = 3; }
    else { *ps = s + 1; return 0xdc00 + c; }
    for (unsigned i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80) { *ps = s + 1; return 0xdc00 + c; }
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    *ps = s + need + 1;
    return cp;
}

static void dump_str(struct sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned cp = utf8_next(&p);
        switch (cp) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (cp >= 0x20 && cp < 0x7f) {
                char ch = (char)cp;
                sb_put(b, &ch, 1);
            } else if (cp >= 0x10000) {
                cp -= 0x10000;
                sb_u(b, 0xd800 + (cp >> 10));
                sb_u(b, 0xdc00 + (cp & 0x3ff));
            } else {
                sb_u(b, cp);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static void indent(struct sbuf *b, int level)
{
    sb_put(b, "\n", 1);
    for (int i = 0; i < level * 4; i++)
        sb_put(b, " ", 1);
}

static void dump(struct sbuf *b, const struct mc_desc *v, int level)
{
    char t[48];
    switch (v->kind) {
    case MC_DESC_NULL: sb_puts(b, "null"); break;
    case MC_DESC_BOOL: sb_puts(b, v->i ? "true" : "false"); break;
    case MC_DESC_INT: snprintf(t, sizeof(t), "%lld", (long long)v->i); sb_puts(b, t); break;
    case MC_DESC_FLOAT: json_float(v->f, t, sizeof(t)); sb_puts(b, t); break;
    case MC_DESC_STR: dump_str(b, v->s); break;
    case MC_DESC_LIST:
    case MC_DESC_OBJ: {
        int obj = v->kind == MC_DESC_OBJ;
        if (v->n == 0) {
            sb_puts(b, obj ? "{}" : "[]");
            break;
        }
        sb_puts(b, obj ? "{" : "[");
        for (int i = 0; i < v->n; i++) {
            if (i)
                sb_put(b, ",", 1);
            indent(b, level + 1);
            if (obj) {
                dump_str(b, v->keys[i]);
                sb_puts(b, ": ");
            }
            dump(b, v->items[i], level + 1);
        }
        indent(b, level);
        sb_puts(b, obj ? "}" : "]");
        break;
    }
    }
}

mc_status mc_desc_dump(const struct mc_desc *v, char **out)
{
    struct sbuf b = {0};
    dump(&b, v, 0);
    if (b.err) {
        mc_free(b.p);
        return mc_error(MC_ERR_NOMEM, "out of memory printing a dataset description");
    }
    *out = b.p;
    return MC_OK;
}
