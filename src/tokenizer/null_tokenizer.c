/* NullTokenizer: mirrors _NullTokenizer in megatron/training/tokenizer/tokenizer.py. The text
 * is the ids themselves: tokenize(text) = [int(x) for x in text.split(' ')], eod = V and
 * vocab_size = V + 1 for --vocab-size V; detokenize joins the ids with single spaces. */
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <stdio.h>
#include <string.h>

/* Python int(field): surrounding whitespace (str.strip), a sign, decimal digits with single
 * underscores between them. */
static mc_status parse_int(const char *s, size_t n, int64_t field, int64_t *out)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    uint32_t cp;
    int l;
    while (p < end && (l = mc_utf8_decode(p, end, &cp)) && mc_uni_is_py_space(cp))
        p += l;
    while (end > p) { /* strip trailing whitespace: step back over one code point */
        const unsigned char *q = end - 1;
        while (q > p && (*q & 0xC0) == 0x80)
            q--;
        if (!(l = mc_utf8_decode(q, end, &cp)) || q + l != end || !mc_uni_is_py_space(cp))
            break;
        end = q;
    }
    bool neg = false;
    if (p < end && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    uint64_t v = 0;
    bool digit_before = false, ok = p < end;
    for (; ok && p < end; p++) {
        if (*p == '_' && digit_before && p + 1 < end && p[1] >= '0' && p[1] <= '9') {
            digit_before = false;
            continue;
        }
        if (*p < '0' || *p > '9') {
            ok = false;
            break;
        }
        digit_before = true;
        if (v > (UINT64_MAX - 9) / 10) {
            ok = false;
            break;
        }
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (!ok || v > (uint64_t)INT64_MAX)
        return mc_error(MC_ERR_FORMAT, "NullTokenizer: field %lld \"%.*s\" is not an integer "
                        "(the text must be ids separated by single spaces; Python int() fails "
                        "on it)", (long long)field, (int)(n > 64 ? 64 : n), s);
    *out = neg ? -(int64_t)v : (int64_t)v;
    return MC_OK;
}

static mc_status null_encode(const mc_tokenizer *t, const char *text, size_t len,
                             struct mc_tokens *out)
{
    size_t start = 0;
    int64_t field = 0;
    for (;;) {
        const char *sp = memchr(text + start, ' ', len - start);
        size_t stop = sp ? (size_t)(sp - text) : len;
        int64_t id = 0;
        mc_status st = parse_int(text + start, stop - start, field++, &id);
        if (st || (st = mc_tok_push(out, id)))
            return st;
        if (!sp)
            return MC_OK;
        start = stop + 1;
    }
}

static mc_status null_decode(const mc_tokenizer *t, const int64_t *ids, int64_t n,
                             struct mc_json_buf *out)
{
    for (int64_t i = 0; i < n; i++) {
        mc_status st = mc_json_buf_printf(out, i ? " %lld" : "%lld", (long long)ids[i]);
        if (st)
            return st;
    }
    return MC_OK;
}

static const struct mc_tok_ops null_ops = {
    .class_name = "_NullTokenizer",
    .encode = null_encode,
    .decode = null_decode,
    .free_impl = NULL,
};

mc_status mc_tok_null_init(const struct mc_tokenizer_args *args, mc_tokenizer *t)
{
    if (args->vocab_size <= 0)
        return mc_error(MC_ERR_CONFIG, "NullTokenizer needs --vocab-size > 0 (got %lld)",
                        (long long)args->vocab_size);
    t->ops = &null_ops;
    t->eod = args->vocab_size;
    t->vocab_size = args->vocab_size + 1;
    t->pad = -1;
    return MC_OK;
}
