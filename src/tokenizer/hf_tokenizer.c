/* HuggingFaceTokenizer for byte-level BPE tokenizer.json files (GPT-2, Llama-3, Qwen2 style):
 * mirrors _HuggingFaceTokenizer in megatron/training/tokenizer/tokenizer.py, which calls
 * transformers' AutoTokenizer: tokenize(text) = tokenizer(text).input_ids (special tokens of
 * the post-processor included), vocab_size = len(tokenizer), eod = eos_token_id.
 *
 * --tokenizer-model is a directory holding tokenizer.json (and tokenizer_config.json for the
 * eos token), or a tokenizer.json path. Supported pipeline pieces (anything else is refused
 * with MC_ERR_UNSUPPORTED naming it):
 *   normalizer     null; NFC only for text whose code points are all below U+0300 (already NFC)
 *   pre_tokenizer  ByteLevel (GPT-2 regex or none, add_prefix_space), or a Sequence of
 *                  Split(Regex GPT-2 | Llama-3 | Qwen2 pattern, Isolated) and ByteLevel
 *   model          BPE (vocab, merges as "a b" or [a, b], ignore_merges, unk_token), no dropout,
 *                  no subword prefix/suffix, no byte_fallback
 *   added_tokens   split out of the text first (leftmost-longest), lstrip/rstrip/single_word off
 *   post_processor null, ByteLevel, TemplateProcessing (single), or a Sequence of those
 *   decoder        ByteLevel */
#include "tokenizer/hf_decoders.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *const PAT_GPT2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *const PAT_LLAMA3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const PAT_QWEN2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct added {
    char *content;
    size_t len;
    int64_t id;
};

struct hf {
    mc_bpe *bpe;
    bool ignore_merges, nfc;
    bool byte_level;            /* a ByteLevel pre-tokenizer: BPE over bytes, else characters */
    bool byte_fallback, fuse_unk;
    /* normalizer Sequence of Prepend / Replace (a String pattern), as in Llama-2/Mistral files */
    int n_norm;
    struct norm_op {
        bool prepend;
        char pattern[16], content[16];
    } norm[4];
    /* pre-tokenizer stages applied in turn: a Split regex, ByteLevel (which may prepend a space
     * to each piece it receives and split it with the GPT-2 regex), or Metaspace */
    int n_stage;
    struct stage {
        bool byte_level, prefix_space, split, metaspace;
        enum mc_pretok pattern;
        int prepend_scheme; /* Metaspace: 0 never, 1 first, 2 always */
    } stage[4];
    struct mc_hf_decoder decoder;
    int64_t unk_id;             /* -1: none */
    struct added *added;        /* sorted by length, longest first */
    int n_added;
    uint8_t first_byte[256];    /* bytes that start some added token */
    int64_t *prefix, *suffix;   /* template ids around $A */
    int n_prefix, n_suffix;
    /* decode: id -> the token's string as tokenizer.json writes it */
    int64_t n_ids;
    int64_t *dec_off;
    uint32_t *dec_len;
    char *dec_bytes;
    size_t dec_used, dec_cap;
};

static void hf_free(void *impl)
{
    struct hf *h = impl;
    if (!h)
        return;
    mc_bpe_free(h->bpe);
    for (int i = 0; i < h->n_added; i++)
        mc_free(h->added[i].content);
    mc_free(h->added);
    mc_free(h->prefix);
    mc_free(h->suffix);
    mc_free(h->dec_off);
    mc_free(h->dec_len);
    mc_free(h->dec_bytes);
    mc_free(h);
}

static const char *str_field(const struct mc_json *o, const char *key)
{
    const struct mc_json *v = mc_json_get(o, key);
    return v && v->type == MC_JSON_STRING ? v->str : NULL;
}

static bool is_true(const struct mc_json *o, const char *key)
{
    const struct mc_json *v = mc_json_get(o, key);
    return v && v->type == MC_JSON_TRUE;
}

static bool empty_or_null(const struct mc_json *o, const char *key)
{
    const struct mc_json *v = mc_json_get(o, key);
    return !v || v->type == MC_JSON_NULL || (v->type == MC_JSON_STRING && v->len == 0);
}

/* ---- pipeline configuration ---------------------------------------------------------------- */
static mc_status add_stage(struct hf *h, struct stage s, const char *path)
{
    if (h->n_stage == 4)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: more than four pre-tokenizers", path);
    h->stage[h->n_stage++] = s;
    return MC_OK;
}

static mc_status add_split(struct hf *h, enum mc_pretok k, const char *path)
{
    return add_stage(h, (struct stage){.split = true, .pattern = k}, path);
}

static mc_status config_byte_level(struct hf *h, const struct mc_json *p, const char *path)
{
    const struct mc_json *re = mc_json_get(p, "use_regex");
    bool split = !re || re->type == MC_JSON_TRUE;
    h->byte_level = true;
    return add_stage(h, (struct stage){.byte_level = true, .prefix_space = is_true(p, "add_prefix_space"),
                                       .split = split, .pattern = MC_PRETOK_GPT2}, path);
}

static mc_status config_metaspace(struct hf *h, const struct mc_json *p, const char *path)
{
    const char *rp = str_field(p, "replacement"), *scheme = str_field(p, "prepend_scheme");
    if (!rp || strcmp(rp, "\xe2\x96\x81") != 0 || is_true(p, "split") || h->n_stage)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: Metaspace pre-tokenizer is supported only alone, "
                        "with replacement U+2581 and split false", path);
    int ps = !scheme || strcmp(scheme, "always") == 0 ? 2 : strcmp(scheme, "first") == 0 ? 1 : 0;
    if (!scheme && mc_json_get(p, "add_prefix_space") && !is_true(p, "add_prefix_space"))
        ps = 0; /* files written before prepend_scheme existed */
    return add_stage(h, (struct stage){.metaspace = true, .prepend_scheme = ps}, path);
}

static mc_status config_pretok_one(struct hf *h, const struct mc_json *p, const char *path)
{
    const char *type = str_field(p, "type");
    if (type && strcmp(type, "ByteLevel") == 0)
        return config_byte_level(h, p, path);
    if (type && strcmp(type, "Metaspace") == 0)
        return config_metaspace(h, p, path);
    if (type && strcmp(type, "Split") == 0) {
        const char *re = str_field(mc_json_get(p, "pattern"), "Regex");
        const char *beh = str_field(p, "behavior");
        if (!re)
            return mc_error(MC_ERR_UNSUPPORTED, "%s: Split pre-tokenizer with a String pattern is "
                            "not supported (only the GPT-2, Llama-3 and Qwen2 regexes)", path);
        if (!beh || strcmp(beh, "Isolated") != 0 || is_true(p, "invert"))
            return mc_error(MC_ERR_UNSUPPORTED, "%s: Split pre-tokenizer behavior %s%s is not "
                            "supported (only Isolated, invert false)", path, beh ? beh : "?",
                            is_true(p, "invert") ? " with invert" : "");
        if (strcmp(re, PAT_GPT2) == 0)
            return add_split(h, MC_PRETOK_GPT2, path);
        if (strcmp(re, PAT_LLAMA3) == 0)
            return add_split(h, MC_PRETOK_LLAMA3, path);
        if (strcmp(re, PAT_QWEN2) == 0)
            return add_split(h, MC_PRETOK_QWEN2, path);
        return mc_error(MC_ERR_UNSUPPORTED, "%s: Split pre-tokenizer regex %s is not supported "
                        "(megatron.c implements the GPT-2, Llama-3 and Qwen2 patterns)", path, re);
    }
    return mc_error(MC_ERR_UNSUPPORTED, "%s: pre_tokenizer type %s is not supported (ByteLevel, "
                    "Split, Metaspace, Sequence are)", path, type ? type : "(none)");
}

static mc_status config_pretok(struct hf *h, const struct mc_json *p, const char *path)
{
    if (!p || p->type == MC_JSON_NULL)
        return MC_OK; /* character-level BPE on the normalized text (Llama-2-style files) */
    const char *type = str_field(p, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const struct mc_json *list = mc_json_get(p, "pretokenizers");
        if (!list || list->type != MC_JSON_ARRAY)
            return mc_error(MC_ERR_FORMAT, "%s: Sequence pre_tokenizer without pretokenizers", path);
        for (int64_t i = 0; i < list->len; i++) {
            mc_status st = config_pretok_one(h, &list->items[i], path);
            if (st)
                return st;
        }
        return MC_OK;
    }
    return config_pretok_one(h, p, path);
}

static mc_status config_normalizer(struct hf *h, const struct mc_json *n, const char *path)
{
    if (!n || n->type == MC_JSON_NULL)
        return MC_OK;
    const char *type = str_field(n, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const struct mc_json *list = mc_json_get(n, "normalizers");
        for (int64_t i = 0; list && i < list->len; i++) {
            mc_status st = config_normalizer(h, &list->items[i], path);
            if (st)
                return st;
        }
        return MC_OK;
    }
    if (type && strcmp(type, "NFC") == 0) {
        h->nfc = true;
        return MC_OK;
    }
    bool prepend = type && strcmp(type, "Prepend") == 0;
    const char *a = prepend ? str_field(n, "prepend") : str_field(mc_json_get(n, "pattern"), "String");
    const char *b = prepend ? "" : str_field(n, "content");
    if ((prepend || (type && strcmp(type, "Replace") == 0)) && a && b && *a && strlen(a) < 16 &&
        strlen(b) < 16 && h->n_norm < 4) {
        struct norm_op *op = &h->norm[h->n_norm++];
        op->prepend = prepend;
        snprintf(op->pattern, sizeof(op->pattern), "%s", a);
        snprintf(op->content, sizeof(op->content), "%s", b);
        return MC_OK;
    }
    return mc_error(MC_ERR_UNSUPPORTED, "%s: normalizer %s is not supported (null, NFC on text below "
                    "U+0300, Prepend, Replace with a short String pattern, Sequence)", path,
                    type ? type : "?");
}

/* ---- vocab, merges, added tokens -------------------------------------------------------- */
static mc_status dec_put(struct hf *h, int64_t id, const char *s, size_t n)
{
    if (h->dec_used + n > h->dec_cap) {
        size_t cap = h->dec_cap ? h->dec_cap : 1 << 16;
        while (cap < h->dec_used + n)
            cap *= 2;
        char *nb = mc_alloc(cap);
        if (!nb)
            return MC_ERR_NOMEM;
        if (h->dec_used)
            memcpy(nb, h->dec_bytes, h->dec_used);
        mc_free(h->dec_bytes);
        h->dec_bytes = nb;
        h->dec_cap = cap;
    }
    memcpy(h->dec_bytes + h->dec_used, s, n);
    h->dec_off[id] = (int64_t)h->dec_used;
    h->dec_len[id] = (uint32_t)n;
    h->dec_used += n;
    return MC_OK;
}

static mc_status load_model(struct hf *h, const struct mc_json *m, const struct mc_json *added,
                            const char *path, int64_t *n_distinct)
{
    const char *type = str_field(m, "type");
    if (!type || strcmp(type, "BPE") != 0)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: model type %s is not supported (only BPE)", path,
                        type ? type : "?");
    if (!empty_or_null(m, "continuing_subword_prefix") || !empty_or_null(m, "end_of_word_suffix") ||
        !empty_or_null(m, "dropout") || (h->byte_level && is_true(m, "byte_fallback")))
        return mc_error(MC_ERR_UNSUPPORTED, "%s: BPE with continuing_subword_prefix, "
                        "end_of_word_suffix, dropout, or byte_fallback together with ByteLevel is "
                        "not supported", path);
    h->ignore_merges = is_true(m, "ignore_merges");
    h->byte_fallback = is_true(m, "byte_fallback");
    h->fuse_unk = is_true(m, "fuse_unk");
    const struct mc_json *vocab = mc_json_get(m, "vocab"), *merges = mc_json_get(m, "merges");
    if (!vocab || vocab->type != MC_JSON_OBJECT || !merges || merges->type != MC_JSON_ARRAY)
        return mc_error(MC_ERR_FORMAT, "%s: model needs a \"vocab\" object and a \"merges\" array", path);
    int64_t max_id = -1;
    for (int64_t i = 0; i < vocab->len; i++) {
        const struct mc_json *v = &vocab->items[i];
        if (v->type != MC_JSON_NUMBER || !v->is_int || v->inum < 0 || v->inum >= INT32_MAX)
            return mc_error(MC_ERR_FORMAT, "%s: vocab entry \"%s\" has a bad id", path, v->key);
        if (v->inum > max_id)
            max_id = v->inum;
    }
    for (int64_t i = 0; added && i < added->len; i++) {
        const struct mc_json *id = mc_json_get(&added->items[i], "id");
        if (!id || !id->is_int || id->inum < 0 || id->inum >= INT32_MAX || !str_field(&added->items[i], "content"))
            return mc_error(MC_ERR_FORMAT, "%s: added_tokens[%lld] needs an integer id and a content",
                            path, (long long)i);
        if (id->inum > max_id)
            max_id = id->inum;
    }
    h->n_ids = max_id + 1;
    h->dec_off = mc_alloc((size_t)(h->n_ids + 1) * sizeof(int64_t));
    h->dec_len = mc_calloc((size_t)(h->n_ids + 1), sizeof(uint32_t));
    if (!h->dec_off || !h->dec_len)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < h->n_ids; i++)
        h->dec_off[i] = -1;
    char stackbuf[1024];
    mc_status st;
    for (int64_t i = 0; i < vocab->len; i++) {
        const struct mc_json *v = &vocab->items[i];
        char *buf = v->key_len <= sizeof(stackbuf) ? stackbuf : mc_alloc(v->key_len);
        if (!buf)
            return MC_ERR_NOMEM;
        /* byte-level vocab strings are in GPT-2's byte alphabet: BPE runs on the raw bytes */
        int64_t n = h->byte_level ? mc_bpe_unmap(buf, v->key, v->key_len) : (int64_t)v->key_len;
        if (!h->byte_level)
            memcpy(buf, v->key, v->key_len);
        int32_t sym;
        if (n >= 0 && !(st = mc_bpe_symbol(h->bpe, buf, (size_t)n, &sym)))
            mc_bpe_set_id(h->bpe, sym, v->inum);
        else
            st = MC_OK; /* not byte-level text: reachable only by decode */
        if (st == MC_OK)
            st = dec_put(h, v->inum, v->key, v->key_len);
        if (buf != stackbuf)
            mc_free(buf);
        if (st)
            return st;
    }
    *n_distinct = vocab->len;
    for (int64_t r = 0; r < merges->len; r++) {
        const struct mc_json *e = &merges->items[r];
        const char *a, *b;
        size_t la, lb;
        if (e->type == MC_JSON_STRING) {
            const char *sp = memchr(e->str, ' ', (size_t)e->len);
            if (!sp)
                return mc_error(MC_ERR_FORMAT, "%s: merge %lld \"%s\" is not \"A B\"", path,
                                (long long)r, e->str);
            a = e->str;
            la = (size_t)(sp - e->str);
            b = sp + 1;
            lb = (size_t)e->len - la - 1;
        } else if (e->type == MC_JSON_ARRAY && e->len == 2 && e->items[0].type == MC_JSON_STRING &&
                   e->items[1].type == MC_JSON_STRING) {
            a = e->items[0].str;
            la = (size_t)e->items[0].len;
            b = e->items[1].str;
            lb = (size_t)e->items[1].len;
        } else {
            return mc_error(MC_ERR_FORMAT, "%s: merge %lld is neither \"A B\" nor [A, B]", path,
                            (long long)r);
        }
        char ba[512], bb[512];
        int64_t na = la > sizeof(ba) ? -1 : h->byte_level ? mc_bpe_unmap(ba, a, la) : (int64_t)la;
        int64_t nb = lb > sizeof(bb) ? -1 : h->byte_level ? mc_bpe_unmap(bb, b, lb) : (int64_t)lb;
        if (!h->byte_level && na > 0 && nb > 0) {
            memcpy(ba, a, la);
            memcpy(bb, b, lb);
        }
        int32_t sa, sb;
        if (na <= 0 || nb <= 0)
            return mc_error(MC_ERR_UNSUPPORTED, "%s: merge %lld (%.*s %.*s) is not over byte-level "
                            "tokens", path, (long long)r, (int)la, a, (int)lb, b);
        if ((st = mc_bpe_symbol(h->bpe, ba, (size_t)na, &sa)) ||
            (st = mc_bpe_symbol(h->bpe, bb, (size_t)nb, &sb)) ||
            (st = mc_bpe_add_merge(h->bpe, sa, sb, (int32_t)r)))
            return st;
        /* HF's BPE builder refuses a merge whose parts or product are not in the vocab
         * (MergeTokenOutOfVocabulary); without the check such a token would encode as unk */
        char cat[1024];
        memcpy(cat, ba, (size_t)na);
        memcpy(cat + na, bb, (size_t)nb);
        int32_t res = mc_bpe_find_symbol(h->bpe, cat, (size_t)(na + nb));
        const char *miss = mc_bpe_get_id(h->bpe, sa) < 0 ? "the first part"
                           : mc_bpe_get_id(h->bpe, sb) < 0 ? "the second part"
                           : res < 0 || mc_bpe_get_id(h->bpe, res) < 0 ? "the product" : NULL;
        if (miss)
            return mc_error(MC_ERR_FORMAT, "%s: merge %lld (%.*s %.*s): %s is not in the model's "
                            "vocab (HuggingFace tokenizers refuses this file too: Merge token out "
                            "of vocabulary)", path, (long long)r, (int)la, a, (int)lb, b, miss);
    }
    const char *unk = str_field(m, "unk_token");
    h->unk_id = -1;
    if (unk) {
        const struct mc_json *u = mc_json_get(vocab, unk);
        if (!u)
            return mc_error(MC_ERR_FORMAT, "%s: unk_token %s is not in the vocab", path, unk);
        h->unk_id = u->inum;
    }
    return MC_OK;
}

static mc_status load_added(struct hf *h, const struct mc_json *added, const struct mc_json *vocab,
                            const char *path, int64_t *n_distinct)
{
    if (!added || added->type == MC_JSON_NULL)
        return MC_OK;
    if (added->type != MC_JSON_ARRAY)
        return mc_error(MC_ERR_FORMAT, "%s: added_tokens must be an array", path);
    h->added = mc_calloc((size_t)(added->len + 1), sizeof(struct added));
    if (!h->added)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < added->len; i++) {
        const struct mc_json *a = &added->items[i];
        const struct mc_json *content = mc_json_get(a, "content");
        if (is_true(a, "lstrip") || is_true(a, "rstrip") || is_true(a, "single_word"))
            return mc_error(MC_ERR_UNSUPPORTED, "%s: added token %s uses lstrip/rstrip/single_word, "
                            "which megatron.c does not support", path, content->str);
        if (content->len == 0)
            continue;
        struct added *d = &h->added[h->n_added++];
        d->len = (size_t)content->len;
        d->id = mc_json_get(a, "id")->inum;
        if (!(d->content = mc_alloc(d->len + 1)))
            return MC_ERR_NOMEM;
        memcpy(d->content, content->str, d->len + 1);
        h->first_byte[(unsigned char)d->content[0]] = 1;
        mc_status st = dec_put(h, d->id, d->content, d->len); /* the decoder chain maps it */
        if (st)
            return st;
        if (!mc_json_get(vocab, d->content))
            (*n_distinct)++;
    }
    /* longest first, so the first match at a position is the longest (leftmost-longest) */
    for (int i = 1; i < h->n_added; i++)
        for (int j = i; j > 0 && h->added[j].len > h->added[j - 1].len; j--) {
            struct added t = h->added[j];
            h->added[j] = h->added[j - 1];
            h->added[j - 1] = t;
        }
    return MC_OK;
}

static mc_status config_post(struct hf *h, const struct mc_json *p, const char *path)
{
    if (!p || p->type == MC_JSON_NULL)
        return MC_OK;
    const char *type = str_field(p, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const struct mc_json *list = mc_json_get(p, "processors");
        for (int64_t i = 0; list && i < list->len; i++) {
            mc_status st = config_post(h, &list->items[i], path);
            if (st)
                return st;
        }
        return MC_OK;
    }
    if (type && strcmp(type, "ByteLevel") == 0)
        return MC_OK; /* only adjusts offsets */
    if (!type || strcmp(type, "TemplateProcessing") != 0)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: post_processor %s is not supported (ByteLevel, "
                        "TemplateProcessing, Sequence are)", path, type ? type : "?");
    const struct mc_json *single = mc_json_get(p, "single"), *specials = mc_json_get(p, "special_tokens");
    bool seen_a = false;
    for (int64_t i = 0; single && i < single->len; i++) {
        const struct mc_json *e = &single->items[i];
        const struct mc_json *sp = mc_json_get(e, "SpecialToken");
        if (mc_json_get(e, "Sequence")) {
            seen_a = true;
            continue;
        }
        const char *name = str_field(sp, "id");
        const struct mc_json *ids = mc_json_get(mc_json_get(specials, name ? name : ""), "ids");
        if (!name || !ids || ids->type != MC_JSON_ARRAY)
            return mc_error(MC_ERR_FORMAT, "%s: TemplateProcessing special token %s has no ids",
                            path, name ? name : "?");
        int64_t **arr = seen_a ? &h->suffix : &h->prefix;
        int *n = seen_a ? &h->n_suffix : &h->n_prefix;
        int64_t *na = mc_alloc((size_t)(*n + ids->len + 1) * sizeof(int64_t));
        if (!na)
            return MC_ERR_NOMEM;
        if (*n)
            memcpy(na, *arr, (size_t)*n * sizeof(int64_t));
        for (int64_t k = 0; k < ids->len; k++)
            na[*n + k] = ids->items[k].inum;
        mc_free(*arr);
        *arr = na;
        *n += (int)ids->len;
    }
    return MC_OK;
}

/* eos token from tokenizer_config.json ("eos_token": "..." or {"content": "..."}). */
/* The id of special token `tok` (a string, or an AddedToken object with "content") of a
 * tokenizer_config / special_tokens_map entry: an added token first, then the vocab; -1 if the
 * entry is absent or null. */
static mc_status special_id(const struct hf *h, const struct mc_json *vocab,
                            const struct mc_json *tok, const char *key, const char *path,
                            int64_t *id)
{
    *id = -1;
    const char *name = tok && tok->type == MC_JSON_STRING ? tok->str : str_field(tok, "content");
    if (!name)
        return MC_OK;
    for (int i = 0; i < h->n_added && *id < 0; i++)
        if (strcmp(h->added[i].content, name) == 0)
            *id = h->added[i].id;
    const struct mc_json *v = *id < 0 ? mc_json_get(vocab, name) : NULL;
    if (v)
        *id = v->inum;
    if (*id < 0)
        return mc_error(MC_ERR_FORMAT, "%s: %s %s is not a token of the tokenizer", path, key,
                        name);
    return MC_OK;
}

/* pad_token_id as transformers' AutoTokenizer reads it: tokenizer_config.json's pad_token,
 * else special_tokens_map.json's (next to it); -1 if neither names one. */
static mc_status load_pad(const struct hf *h, const struct mc_json *vocab,
                          const struct mc_json *config, const char *config_path, int64_t *pad)
{
    mc_status st = special_id(h, vocab, mc_json_get(config, "pad_token"), "pad_token",
                              config_path, pad);
    if (st || *pad >= 0)
        return st;
    char path[4096];
    const char *slash = strrchr(config_path, '/');
    snprintf(path, sizeof(path), "%.*sspecial_tokens_map.json",
             slash ? (int)(slash - config_path + 1) : 0, config_path);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return MC_OK;
    mc_json_doc *doc;
    if ((st = mc_json_parse_file(path, &doc)))
        return st;
    st = special_id(h, vocab, mc_json_get(mc_json_doc_root(doc), "pad_token"), "pad_token", path,
                    pad);
    mc_json_doc_free(doc);
    return st;
}

static mc_status load_eos(struct hf *h, const struct mc_json *vocab, const char *config_path,
                          int64_t *eod, int64_t *pad /* NULL: not wanted */)
{
    *eod = -1;
    if (pad)
        *pad = -1;
    struct stat sb;
    if (stat(config_path, &sb) != 0)
        return MC_OK; /* no config: Megatron's eod would be None */
    mc_json_doc *doc;
    mc_status st = mc_json_parse_file(config_path, &doc);
    if (st)
        return st;
    const struct mc_json *root = mc_json_doc_root(doc);
    st = special_id(h, vocab, mc_json_get(root, "eos_token"), "eos_token", config_path, eod);
    if (st == MC_OK && pad)
        st = load_pad(h, vocab, root, config_path, pad);
    /* transformers' Llama-family fast tokenizers rebuild the post-processor from add_bos_token /
     * add_eos_token (defaults true / false): only the default, matching tokenizer.json, is done */
    const char *cls = str_field(root, "tokenizer_class");
    const struct mc_json *add_bos = mc_json_get(root, "add_bos_token"), *add_eos = mc_json_get(root, "add_eos_token");
    if (st == MC_OK && cls && (strstr(cls, "Llama") || strstr(cls, "Gemma")) &&
        ((add_eos && add_eos->type == MC_JSON_TRUE) || (add_bos && add_bos->type == MC_JSON_FALSE)))
        st = mc_error(MC_ERR_UNSUPPORTED, "%s: %s with add_bos_token=%s add_eos_token=%s: "
                      "transformers rebuilds the template from these flags, megatron.c only "
                      "supports the defaults (bos added, eos not)", config_path, cls,
                      add_bos && add_bos->type == MC_JSON_FALSE ? "false" : "true",
                      add_eos && add_eos->type == MC_JSON_TRUE ? "true" : "false");
    mc_json_doc_free(doc);
    return st;
}

/* ---- encoding ------------------------------------------------------------------------------ */
static mc_status encode_piece(void *ctx, const char *piece, size_t len);

struct enc {
    const struct hf *h;
    struct mc_tokens *out;
    int level;     /* which stage runs next */
    bool at_start; /* the piece starts at offset 0 of the text (Metaspace prepend_scheme first) */
};

static const char SPACE_SYM[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's visible space */

/* Appends s[0..n) to b with every occurrence of pat replaced by rep. */
static mc_status replace_all(struct mc_json_buf *b, const char *s, size_t n, const char *pat,
                             const char *rep)
{
    size_t pl = strlen(pat), rl = strlen(rep);
    mc_status st = mc_json_buf_append(b, "", 0);
    for (size_t i = 0; i < n && st == MC_OK;) {
        if (pl && n - i >= pl && memcmp(s + i, pat, pl) == 0) {
            st = mc_json_buf_append(b, rep, rl);
            i += pl;
        } else {
            st = mc_json_buf_append(b, s + i, 1);
            i++;
        }
    }
    return st;
}

/* Metaspace: spaces become U+2581, and one is prepended (always, or only at the text start). */
static mc_status run_metaspace(struct enc *e, const struct stage *sg, const char *piece, size_t len)
{
    struct mc_json_buf b = {0};
    bool prepend = (sg->prepend_scheme == 2 || (sg->prepend_scheme == 1 && e->at_start)) &&
                   !(len >= 3 && memcmp(piece, SPACE_SYM, 3) == 0) && !(len && piece[0] == ' ');
    mc_status st = prepend ? mc_json_buf_append(&b, SPACE_SYM, 3) : MC_OK;
    if (st == MC_OK)
        st = replace_all(&b, piece, len, " ", SPACE_SYM);
    struct enc sub = {e->h, e->out, e->level + 1, false};
    if (st == MC_OK)
        st = encode_piece(&sub, b.data, b.len);
    mc_free(b.data);
    return st;
}

/* Runs stage e->level on one piece and hands its pieces to the next stage. */
static mc_status run_stage(struct enc *e, const char *piece, size_t len)
{
    const struct stage *sg = &e->h->stage[e->level];
    struct enc sub = {e->h, e->out, e->level + 1, false};
    if (sg->metaspace)
        return run_metaspace(e, sg, piece, len);
    if (!(sg->byte_level && sg->prefix_space && piece[0] != ' '))
        return sg->split ? mc_pretok_split(sg->pattern, MC_UNI_TABLE_ONIG, piece, len, encode_piece, &sub)
                         : encode_piece(&sub, piece, len);
    char *buf = mc_alloc(len + 1); /* ByteLevel's add_prefix_space */
    if (!buf)
        return MC_ERR_NOMEM;
    buf[0] = ' ';
    memcpy(buf + 1, piece, len);
    mc_status st = sg->split ? mc_pretok_split(sg->pattern, MC_UNI_TABLE_ONIG, buf, len + 1, encode_piece, &sub)
                             : encode_piece(&sub, buf, len + 1);
    mc_free(buf);
    return st;
}

static mc_status encode_piece(void *ctx, const char *piece, size_t len)
{
    struct enc *e = ctx;
    const struct hf *h = e->h;
    if (e->level < h->n_stage)
        return run_stage(e, piece, len);
    if (len == 0)
        return MC_OK;
    if (h->ignore_merges) {
        int32_t sym = mc_bpe_find_symbol(h->bpe, piece, len);
        int64_t id = sym >= 0 ? mc_bpe_get_id(h->bpe, sym) : -1;
        if (id >= 0)
            return mc_tok_push(e->out, id);
    }
    if (!h->byte_level)
        return mc_bpe_encode_chars(h->bpe, piece, len, h->byte_fallback, h->unk_id, h->fuse_unk, e->out);
    return mc_bpe_encode_word(h->bpe, piece, len, h->unk_id, e->out);
}

/* The normalizer's Prepend / Replace steps, in file order. */
static mc_status normalize_ops(const struct hf *h, const char *s, size_t n, struct mc_json_buf *out)
{
    struct mc_json_buf tmp = {0};
    mc_status st = mc_json_buf_append(out, s, n);
    for (int k = 0; k < h->n_norm && st == MC_OK; k++) {
        const struct norm_op *op = &h->norm[k];
        tmp.len = 0;
        if (op->prepend)
            st = out->len ? mc_json_buf_append(&tmp, op->pattern, strlen(op->pattern)) : MC_OK;
        else
            st = mc_json_buf_append(&tmp, "", 0);
        if (st == MC_OK)
            st = op->prepend ? mc_json_buf_append(&tmp, out->data, out->len)
                             : replace_all(&tmp, out->data, out->len, op->pattern, op->content);
        struct mc_json_buf sw = *out;
        *out = tmp;
        tmp = sw;
    }
    mc_free(tmp.data);
    return st;
}

static mc_status encode_segment(const struct hf *h, const char *s, size_t n, bool at_start,
                                struct mc_tokens *out)
{
    if (n == 0)
        return MC_OK;
    if (!h->byte_level) /* BPE over characters: the text must be valid UTF-8 */
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = mc_utf8_decode((const unsigned char *)s + i, (const unsigned char *)s + n, &cp);
            if (!l)
                return mc_error(MC_ERR_FORMAT, "text is not valid UTF-8 (byte 0x%02x at offset %zu)",
                                (unsigned char)s[i], i);
            i += (size_t)l;
        }
    if (h->nfc)
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = mc_utf8_decode((const unsigned char *)s + i, (const unsigned char *)s + n, &cp);
            if (!l)
                return mc_error(MC_ERR_FORMAT, "text is not valid UTF-8 at offset %zu", i);
            if (cp >= 0x300)
                return mc_error(MC_ERR_UNSUPPORTED, "this tokenizer.json has an NFC normalizer and "
                                "the text has U+%04X: megatron.c only handles NFC text below U+0300",
                                cp);
            i += (size_t)l;
        }
    struct enc e = {h, out, 0, at_start};
    if (!h->n_norm)
        return encode_piece(&e, s, n);
    struct mc_json_buf norm = {0};
    mc_status st = normalize_ops(h, s, n, &norm);
    if (st == MC_OK)
        st = encode_piece(&e, norm.data, norm.len);
    mc_free(norm.data);
    return st;
}

static mc_status hf_encode(const mc_tokenizer *t, const char *text, size_t len, struct mc_tokens *out)
{
    const struct hf *h = t->impl;
    mc_status st;
    for (int i = 0; i < h->n_prefix; i++)
        if ((st = mc_tok_push(out, h->prefix[i])))
            return st;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (!h->first_byte[(unsigned char)text[i]])
            continue;
        const struct added *hit = NULL;
        for (int k = 0; k < h->n_added && !hit; k++)
            if (h->added[k].len <= len - i && memcmp(text + i, h->added[k].content, h->added[k].len) == 0)
                hit = &h->added[k];
        if (!hit)
            continue;
        if ((st = encode_segment(h, text + start, i - start, start == 0, out)) ||
            (st = mc_tok_push(out, hit->id)))
            return st;
        i += hit->len - 1;
        start = i + 1;
    }
    if ((st = encode_segment(h, text + start, len - start, start == 0, out)))
        return st;
    for (int i = 0; i < h->n_suffix; i++)
        if ((st = mc_tok_push(out, h->suffix[i])))
            return st;
    return MC_OK;
}

static mc_status hf_decode(const mc_tokenizer *t, const int64_t *ids, int64_t n, struct mc_json_buf *out)
{
    const struct hf *h = t->impl;
    const char **tok = mc_alloc((size_t)(n ? n : 1) * sizeof(char *));
    size_t *len = mc_alloc((size_t)(n ? n : 1) * sizeof(size_t));
    mc_status st = tok && len ? MC_OK : MC_ERR_NOMEM;
    for (int64_t i = 0; i < n && st == MC_OK; i++) {
        if (ids[i] < 0 || ids[i] >= h->n_ids || h->dec_off[ids[i]] < 0) {
            st = mc_error(MC_ERR_CONFIG, "cannot decode token id %lld (position %lld): not in the "
                          "vocabulary", (long long)ids[i], (long long)i);
            break;
        }
        tok[i] = h->dec_bytes + h->dec_off[ids[i]];
        len[i] = h->dec_len[ids[i]];
    }
    if (st == MC_OK && h->decoder.n)
        st = mc_hf_decode_tokens(&h->decoder, tok, len, n, out);
    for (int64_t i = 0; st == MC_OK && !h->decoder.n && i < n; i++) /* no decoder: joined by spaces */
        if (!(i && (st = mc_json_buf_append(out, " ", 1))))
            st = mc_json_buf_append(out, tok[i], len[i]);
    mc_free(tok);
    mc_free(len);
    return st;
}

static const struct mc_tok_ops hf_ops = {
    .class_name = "_HuggingFaceTokenizer",
    .encode = hf_encode,
    .decode = hf_decode,
    .free_impl = hf_free,
};

/* MindSpeed-LLM's _AutoTokenizer (mindspeed_llm/training/tokenizer/tokenizer.py): the same
 * AutoTokenizer, encode(text) = tokenizer(text).input_ids, len(tokenizer) as vocab size. */
static const struct mc_tok_ops auto_ops = {
    .class_name = "_AutoTokenizer",
    .encode = hf_encode,
    .decode = hf_decode,
    .free_impl = hf_free,
};

static mc_status hf_init(const struct mc_tokenizer_args *args, bool auto_tok, mc_tokenizer *t)
{
    const char *model = args->tokenizer_model;
    if (!model && auto_tok) /* MindSpeed-LLM's words */
        return mc_error(MC_ERR_CONFIG, "Missing tokenizer_name_or_path while building "
                        "PretrainFromHF tokenizer (give --tokenizer-name-or-path DIR)");
    if (!model)
        return mc_error(MC_ERR_CONFIG, "HuggingFaceTokenizer needs --tokenizer-model (a directory "
                        "with tokenizer.json, or a tokenizer.json file)");
    char path[4096], config[4096];
    struct stat sb;
    if (stat(model, &sb) != 0)
        return mc_error(MC_ERR_IO, "%s %s does not exist (megatron.c reads local files only, "
                        "it does not download from the Hub)",
                        auto_tok ? "--tokenizer-name-or-path" : "--tokenizer-model", model);
    if (S_ISDIR(sb.st_mode)) {
        snprintf(path, sizeof(path), "%s/tokenizer.json", model);
        snprintf(config, sizeof(config), "%s/tokenizer_config.json", model);
    } else {
        snprintf(path, sizeof(path), "%s", model);
        const char *slash = strrchr(model, '/');
        snprintf(config, sizeof(config), "%.*stokenizer_config.json",
                 slash ? (int)(slash - model + 1) : 0, model);
    }
    struct hf *h = mc_calloc(1, sizeof(*h));
    if (!h)
        return MC_ERR_NOMEM;
    mc_json_doc *doc = NULL;
    mc_status st;
    if ((st = mc_bpe_init(&h->bpe)) || (st = mc_json_parse_file(path, &doc)))
        goto fail;
    const struct mc_json *root = mc_json_doc_root(doc), *m = mc_json_get(root, "model");
    const struct mc_json *added = mc_json_get(root, "added_tokens");
    int64_t n_distinct = 0, pad = -1;
    if (!m)
        st = mc_error(MC_ERR_FORMAT, "%s: no \"model\" (is this a tokenizer.json?)", path);
    if (st || (st = config_normalizer(h, mc_json_get(root, "normalizer"), path)) ||
        (st = config_pretok(h, mc_json_get(root, "pre_tokenizer"), path)) ||
        (st = load_model(h, m, added && added->type == MC_JSON_ARRAY ? added : NULL, path, &n_distinct)) ||
        (st = load_added(h, added, mc_json_get(m, "vocab"), path, &n_distinct)) ||
        (st = config_post(h, mc_json_get(root, "post_processor"), path)) ||
        (st = mc_hf_decoder_config(&h->decoder, mc_json_get(root, "decoder"), path)) ||
        (st = load_eos(h, mc_json_get(m, "vocab"), config, &t->eod, auto_tok ? &pad : NULL)))
        goto fail;
    mc_json_doc_free(doc);
    t->ops = auto_tok ? &auto_ops : &hf_ops;
    t->impl = h;
    t->vocab_size = n_distinct; /* len(tokenizer): vocab plus added tokens not in it */
    /* Megatron's _HuggingFaceTokenizer has no pad property (GPTDataset sees -1); MindSpeed's
     * _AutoTokenizer sets pad_token_id = eos_token_id when the tokenizer has no pad token, so
     * GPTDataset masks the loss of those labels (and maps them to id 0) */
    t->pad = auto_tok ? (pad >= 0 ? pad : t->eod) : -1;
    return MC_OK;
fail:
    mc_json_doc_free(doc);
    hf_free(h);
    return st;
}

mc_status mc_tok_hf_init(const struct mc_tokenizer_args *args, mc_tokenizer *t)
{
    return hf_init(args, false, t);
}

mc_status mc_tok_hf_auto_init(const struct mc_tokenizer_args *args, mc_tokenizer *t)
{
    return hf_init(args, true, t);
}
