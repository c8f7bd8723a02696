/* Decoders of HuggingFace tokenizers (tokenizers/src/decoders: ByteLevel, Replace, ByteFallback,
 * Fuse, Strip, Metaspace, Sequence), used by HuggingFaceTokenizer's detokenize (Megatron's
 * _HuggingFaceTokenizer.detokenize calls the tokenizer's decode). Each step maps a list of token
 * strings to a new list; the result is their concatenation. */
#include "tokenizer/hf_decoders.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <stdio.h>
#include <string.h>

static const char *str_field(const struct mc_json *o, const char *key)
{
    const struct mc_json *v = mc_json_get(o, key);
    return v && v->type == MC_JSON_STRING ? v->str : NULL;
}

static mc_status copy_small(char *dst, const char *src, const char *what, const char *path)
{
    if (!src || strlen(src) >= 16)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: decoder %s must be a short string", path, what);
    snprintf(dst, 16, "%s", src);
    return MC_OK;
}

static mc_status config_one(struct mc_hf_decoder *d, const struct mc_json *j, const char *path)
{
    const char *type = str_field(j, "type");
    if (d->n == 8)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: more than 8 decoders", path);
    struct mc_hf_decode_step *s = &d->step[d->n];
    memset(s, 0, sizeof(*s));
    if (type && strcmp(type, "ByteLevel") == 0) {
        s->type = HFD_BYTE_LEVEL;
    } else if (type && strcmp(type, "ByteFallback") == 0) {
        s->type = HFD_BYTE_FALLBACK;
    } else if (type && strcmp(type, "Fuse") == 0) {
        s->type = HFD_FUSE;
    } else if (type && strcmp(type, "Replace") == 0) {
        s->type = HFD_REPLACE;
        mc_status st = copy_small(s->pattern, str_field(mc_json_get(j, "pattern"), "String"),
                                  "Replace pattern (a String)", path);
        if (st || (st = copy_small(s->content, str_field(j, "content"), "Replace content", path)))
            return st;
    } else if (type && strcmp(type, "Strip") == 0) {
        const struct mc_json *a = mc_json_get(j, "start"), *b = mc_json_get(j, "stop");
        s->type = HFD_STRIP;
        s->start = a && a->is_int ? (int)a->inum : 0;
        s->stop = b && b->is_int ? (int)b->inum : 0;
        mc_status st = copy_small(s->content, str_field(j, "content"), "Strip content", path);
        if (st)
            return st;
    } else if (type && strcmp(type, "Metaspace") == 0) {
        const char *scheme = str_field(j, "prepend_scheme");
        s->type = HFD_METASPACE;
        s->prepend = !scheme || strcmp(scheme, "never") != 0;
        mc_status st = copy_small(s->content, str_field(j, "replacement"), "Metaspace replacement", path);
        if (st)
            return st;
    } else {
        return mc_error(MC_ERR_UNSUPPORTED, "%s: decoder %s is not supported (ByteLevel, Replace, "
                        "ByteFallback, Fuse, Strip, Metaspace, Sequence are)", path, type ? type : "?");
    }
    d->n++;
    return MC_OK;
}

mc_status mc_hf_decoder_config(struct mc_hf_decoder *d, const struct mc_json *j, const char *path)
{
    d->n = 0;
    if (!j || j->type == MC_JSON_NULL)
        return MC_OK;
    const char *type = str_field(j, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const struct mc_json *list = mc_json_get(j, "decoders");
        for (int64_t i = 0; list && i < list->len; i++) {
            mc_status st = config_one(d, &list->items[i], path);
            if (st)
                return st;
        }
        return MC_OK;
    }
    return config_one(d, j, path);
}

/* ---- token lists ----------------------------------------------------------------------------- */
struct toks {
    struct mc_json_buf *t;
    int64_t n;
};

static void toks_free(struct toks *l)
{
    for (int64_t i = 0; i < l->n; i++)
        mc_free(l->t[i].data);
    mc_free(l->t);
    l->t = NULL;
    l->n = 0;
}

static mc_status toks_new(struct toks *l, int64_t n)
{
    l->n = n;
    l->t = mc_calloc((size_t)(n ? n : 1), sizeof(struct mc_json_buf));
    return l->t ? MC_OK : MC_ERR_NOMEM;
}

static mc_status put(struct mc_json_buf *b, const char *s, size_t n)
{
    return mc_json_buf_append(b, n ? s : "", n);
}

static int byte_token(const struct mc_json_buf *t)
{
    unsigned x;
    char tail;
    if (t->len != 6 || memcmp(t->data, "<0x", 3) != 0 || t->data[5] != '>' ||
        sscanf(t->data + 3, "%2x%c", &x, &tail) != 2)
        return -1;
    return (int)x;
}

/* ByteLevel: all tokens through the byte alphabet (a token with a character outside it keeps
 * its UTF-8), then one lossy UTF-8 decode. */
static mc_status step_byte_level(struct toks *in, struct toks *out)
{
    struct mc_json_buf raw = {0};
    mc_status st = MC_OK;
    for (int64_t i = 0; i < in->n && st == MC_OK; i++) {
        char *tmp = mc_alloc(in->t[i].len + 1);
        if (!tmp)
            st = MC_ERR_NOMEM;
        int64_t k = tmp ? mc_bpe_unmap(tmp, in->t[i].data ? in->t[i].data : "", in->t[i].len) : 0;
        if (st == MC_OK)
            st = k >= 0 ? put(&raw, tmp, (size_t)k) : put(&raw, in->t[i].data, in->t[i].len);
        mc_free(tmp);
    }
    if (st == MC_OK && (st = toks_new(out, 1)) == MC_OK && raw.len) {
        char *o = mc_alloc(3 * raw.len);
        st = o ? put(&out->t[0], o, mc_utf8_replace_invalid(o, (const unsigned char *)raw.data, raw.len))
               : MC_ERR_NOMEM;
        mc_free(o);
    }
    mc_free(raw.data);
    return st;
}

static mc_status flush_bytes(struct toks *out, int64_t *w, const unsigned char *b, size_t nb)
{
    if (!nb)
        return MC_OK;
    bool valid = true;
    for (size_t i = 0; i < nb && valid;) {
        uint32_t cp;
        int l = mc_utf8_decode(b + i, b + nb, &cp);
        valid = l > 0;
        i += (size_t)l;
    }
    if (valid)
        return put(&out->t[(*w)++], (const char *)b, nb);
    for (size_t i = 0; i < nb; i++) { /* one U+FFFD per byte token */
        mc_status st = put(&out->t[(*w)++], "\xEF\xBF\xBD", 3);
        if (st)
            return st;
    }
    return MC_OK;
}

static mc_status step_byte_fallback(struct toks *in, struct toks *out)
{
    unsigned char *bytes = mc_alloc((size_t)in->n + 1);
    mc_status st = bytes ? toks_new(out, in->n) : MC_ERR_NOMEM;
    int64_t w = 0;
    size_t nb = 0;
    for (int64_t i = 0; i < in->n && st == MC_OK; i++) {
        int x = byte_token(&in->t[i]);
        if (x >= 0) {
            bytes[nb++] = (unsigned char)x;
            continue;
        }
        if ((st = flush_bytes(out, &w, bytes, nb)) == MC_OK)
            st = put(&out->t[w++], in->t[i].data, in->t[i].len);
        nb = 0;
    }
    if (st == MC_OK)
        st = flush_bytes(out, &w, bytes, nb);
    out->n = w > out->n ? out->n : w;
    mc_free(bytes);
    return st;
}

/* Per-token steps: Replace, Strip, Metaspace. */
static mc_status step_map(const struct mc_hf_decode_step *s, struct toks *in, struct toks *out)
{
    mc_status st = toks_new(out, in->n);
    for (int64_t i = 0; i < in->n && st == MC_OK; i++) {
        const char *p = in->t[i].data ? in->t[i].data : "";
        size_t n = in->t[i].len;
        if (s->type == HFD_STRIP) {
            size_t cl = strlen(s->content);
            for (int k = 0; k < s->start && n >= cl && memcmp(p, s->content, cl) == 0; k++) {
                p += cl;
                n -= cl;
            }
            for (int k = 0; k < s->stop && n >= cl && memcmp(p + n - cl, s->content, cl) == 0; k++)
                n -= cl;
            st = put(&out->t[i], p, n);
            continue;
        }
        const char *pat = s->type == HFD_REPLACE ? s->pattern : s->content;
        size_t pl = strlen(pat);
        for (size_t k = 0; k < n && st == MC_OK;) {
            if (pl && n - k >= pl && memcmp(p + k, pat, pl) == 0) {
                if (s->type == HFD_REPLACE)
                    st = put(&out->t[i], s->content, strlen(s->content));
                else if (!(i == 0 && s->prepend)) /* Metaspace drops them from the first token */
                    st = put(&out->t[i], " ", 1);
                k += pl;
            } else {
                st = put(&out->t[i], p + k, 1);
                k++;
            }
        }
    }
    return st;
}

mc_status mc_hf_decode_tokens(const struct mc_hf_decoder *d, const char *const *tok,
                              const size_t *len, int64_t n, struct mc_json_buf *out)
{
    struct toks cur, next = {0};
    mc_status st = toks_new(&cur, n);
    for (int64_t i = 0; i < n && st == MC_OK; i++)
        st = put(&cur.t[i], tok[i], len[i]);
    for (int k = 0; k < d->n && st == MC_OK; k++) {
        const struct mc_hf_decode_step *s = &d->step[k];
        if (s->type == HFD_BYTE_LEVEL)
            st = step_byte_level(&cur, &next);
        else if (s->type == HFD_BYTE_FALLBACK)
            st = step_byte_fallback(&cur, &next);
        else if (s->type == HFD_FUSE) {
            st = toks_new(&next, 1);
            for (int64_t i = 0; i < cur.n && st == MC_OK; i++)
                st = put(&next.t[0], cur.t[i].data, cur.t[i].len);
        } else
            st = step_map(s, &cur, &next);
        toks_free(&cur);
        cur = next;
        next = (struct toks){0};
    }
    for (int64_t i = 0; i < cur.n && st == MC_OK; i++)
        st = put(out, cur.t[i].data, cur.t[i].len);
    toks_free(&cur);
    toks_free(&next);
    return st;
}
