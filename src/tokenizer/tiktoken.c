/* TikTokenizer: mirrors CustomTikTokenizer in megatron/training/tokenizer/tokenizer.py, which
 * wraps the tiktoken library. --tokenizer-model is a JSON list of {rank, token_bytes (base64),
 * token_str}; the first vocab_size - num_special_tokens ranks are kept and shifted up by
 * num_special_tokens; ids 0..num_special-1 are the special tokens (the given list, which must
 * contain <unk> <s> </s>, then fillers <SPECIAL_k>). tokenize = encode_ordinary (special
 * strings are plain text): the pattern's pieces, each one token if its bytes have a rank, else
 * tiktoken's byte-pair merge (repeatedly join the adjacent pair whose bytes have the lowest
 * rank, leftmost first). eod = eos = id of </s>. Patterns v1 and v2 (pretok.c). */
#include "tokenizer/tokenizer_impl.h"

#include <stdio.h>
#include <string.h>

struct tiktoken {
    enum mc_pretok pattern;
    mc_bpe *bpe; /* symbols = token bytes, id = rank + num_special */
    int64_t n_special;
    char **special; /* n_special strings (for decode) */
    int64_t vocab_size;
    /* decode: id - n_special -> bytes */
    int64_t n_ranks;
    int32_t *rank_sym;
};

static void tt_free(void *impl)
{
    struct tiktoken *k = impl;
    if (!k)
        return;
    mc_bpe_free(k->bpe);
    for (int64_t i = 0; k->special && i < k->n_special; i++)
        mc_free(k->special[i]);
    mc_free(k->special);
    mc_free(k->rank_sym);
    mc_free(k);
}

static int b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with '=' padding; returns the decoded length or -1. */
static int64_t b64decode(char *o, const char *s, size_t n)
{
    if (n % 4)
        return -1;
    int64_t w = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if ((v[k] = b64val((unsigned char)s[i + k])) < 0 || pad) {
                return -1;
            }
        }
        uint32_t x = (uint32_t)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        o[w++] = (char)(x >> 16);
        if (pad < 2)
            o[w++] = (char)(x >> 8);
        if (pad < 1)
            o[w++] = (char)x;
    }
    return w;
}

static mc_status load_ranks(struct tiktoken *k, const struct mc_json *root, int64_t inner, const char *path)
{
    if (!root || root->type != MC_JSON_ARRAY)
        return mc_error(MC_ERR_FORMAT, "%s: expected a JSON list of {rank, token_bytes, token_str}", path);
    if (root->len < inner)
        return mc_error(MC_ERR_CONFIG, "%s has %lld ranks but --vocab-size minus "
                        "--tiktoken-num-special-tokens needs %lld", path, (long long)root->len,
                        (long long)inner);
    k->n_ranks = inner;
    if (!(k->rank_sym = mc_alloc((size_t)(inner ? inner : 1) * sizeof(int32_t))))
        return MC_ERR_NOMEM;
    char buf[1024];
    for (int64_t i = 0; i < inner; i++) {
        const struct mc_json *e = &root->items[i], *rank = mc_json_get(e, "rank");
        const struct mc_json *tb = mc_json_get(e, "token_bytes");
        if (e->type != MC_JSON_OBJECT || e->len != 3 || !mc_json_get(e, "token_str") || !rank ||
            !rank->is_int || rank->inum != i || !tb || tb->type != MC_JSON_STRING)
            return mc_error(MC_ERR_FORMAT, "%s: entry %lld must be {\"rank\": %lld, \"token_bytes\": "
                            "base64, \"token_str\": ...}", path, (long long)i, (long long)i);
        int64_t n = (size_t)tb->len <= 4 * (sizeof(buf) / 3) ? b64decode(buf, tb->str, (size_t)tb->len) : -1;
        if (n <= 0)
            return mc_error(MC_ERR_FORMAT, "%s: entry %lld: token_bytes is not valid base64 of at "
                            "most %zu bytes", path, (long long)i, sizeof(buf));
        if (i < 256 && (n != 1 || (unsigned char)buf[0] != i))
            return mc_error(MC_ERR_FORMAT, "%s: rank %lld must be the single byte %lld", path,
                            (long long)i, (long long)i);
        int32_t sym;
        mc_status st = mc_bpe_symbol(k->bpe, buf, (size_t)n, &sym);
        if (st)
            return st;
        if (mc_bpe_get_id(k->bpe, sym) >= 0) /* Megatron's id-coverage assertion fails on it */
            return mc_error(MC_ERR_FORMAT, "%s: the token_bytes of rank %lld repeat rank %lld", path,
                            (long long)i, (long long)(mc_bpe_get_id(k->bpe, sym) - k->n_special));
        mc_bpe_set_id(k->bpe, sym, i + k->n_special);
        k->rank_sym[i] = sym;
    }
    return MC_OK;
}

static mc_status load_specials(struct tiktoken *k, const struct mc_tokenizer_args *a, int64_t *eod)
{
    static const char *dflt[] = {"<unk>", "<s>", "</s>"};
    const char *const *given = a->tiktoken_special_tokens ? a->tiktoken_special_tokens : dflt;
    int n_given = a->tiktoken_special_tokens ? a->n_tiktoken_special_tokens : 3;
    if (n_given > k->n_special)
        return mc_error(MC_ERR_CONFIG, "%d --tiktoken-special-tokens but "
                        "--tiktoken-num-special-tokens is %lld", n_given, (long long)k->n_special);
    if (!(k->special = mc_calloc((size_t)k->n_special, sizeof(char *))))
        return MC_ERR_NOMEM;
    bool have[3] = {false, false, false};
    *eod = -1;
    for (int64_t i = 0; i < k->n_special; i++) {
        char filler[40];
        snprintf(filler, sizeof(filler), "<SPECIAL_%lld>", (long long)i);
        const char *s = i < n_given ? given[i] : filler;
        for (int64_t j = 0; j < i; j++)
            if (strcmp(k->special[j], s) == 0)
                return mc_error(MC_ERR_CONFIG, "special tokens must be unique: %s repeats", s);
        size_t l = strlen(s);
        if (!(k->special[i] = mc_alloc(l + 1)))
            return MC_ERR_NOMEM;
        memcpy(k->special[i], s, l + 1);
        for (int d = 0; d < 3; d++)
            if (strcmp(s, dflt[d]) == 0)
                have[d] = true;
        if (strcmp(s, "</s>") == 0)
            *eod = i;
    }
    if (!have[0] || !have[1] || !have[2])
        return mc_error(MC_ERR_CONFIG, "--tiktoken-special-tokens must include <unk>, <s> and </s>");
    return MC_OK;
}

/* tiktoken's byte_pair_merge on one piece: parts start at pos[0..np), the pair (i, i+1) of
 * adjacent parts has rank rk[i]; join the leftmost lowest until no pair has a rank. */
static mc_status merge_piece(const struct tiktoken *k, const char *s, size_t n, struct mc_tokens *out)
{
    int32_t sym = mc_bpe_find_symbol(k->bpe, s, n);
    int64_t id = sym >= 0 ? mc_bpe_get_id(k->bpe, sym) : -1;
    if (id >= 0)
        return mc_tok_push(out, id);
    size_t *pos = mc_alloc((n + 1) * sizeof(size_t));
    int64_t *rk = mc_alloc((n + 1) * sizeof(int64_t));
    mc_status st = pos && rk ? MC_OK : MC_ERR_NOMEM;
    size_t np = n + 1; /* boundaries 0..n */
    for (size_t i = 0; st == MC_OK && i <= n; i++)
        pos[i] = i;
#define PAIR_RANK(i) ((i) + 2 < np ? ((sym = mc_bpe_find_symbol(k->bpe, s + pos[i], pos[(i) + 2] - pos[i])) >= 0 \
                                         ? mc_bpe_get_id(k->bpe, sym) : -1) : -1)
    for (size_t i = 0; st == MC_OK && i + 2 < np; i++)
        rk[i] = PAIR_RANK(i);
    while (st == MC_OK && np > 2) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i + 2 < np; i++)
            if (rk[i] >= 0 && (best == SIZE_MAX || rk[i] < rk[best]))
                best = i;
        if (best == SIZE_MAX)
            break;
        memmove(pos + best + 1, pos + best + 2, (np - best - 2) * sizeof(size_t));
        /* pairs after the merged one shift down by one (rk is valid for indices 0..np-3) */
        memmove(rk + best + 1, rk + best + 2, (np > best + 4 ? np - best - 4 : 0) * sizeof(int64_t));
        np--;
        if (best > 0)
            rk[best - 1] = PAIR_RANK(best - 1);
        rk[best] = PAIR_RANK(best);
    }
#undef PAIR_RANK
    for (size_t i = 0; st == MC_OK && i + 1 < np; i++) {
        sym = mc_bpe_find_symbol(k->bpe, s + pos[i], pos[i + 1] - pos[i]);
        st = mc_tok_push(out, mc_bpe_get_id(k->bpe, sym)); /* single bytes always have a rank */
    }
    mc_free(pos);
    mc_free(rk);
    return st;
}

struct tt_ctx {
    const struct tiktoken *k;
    struct mc_tokens *out;
};

static mc_status tt_piece(void *ctx, const char *piece, size_t len)
{
    struct tt_ctx *c = ctx;
    return merge_piece(c->k, piece, len, c->out);
}

static mc_status tt_encode(const mc_tokenizer *t, const char *text, size_t len, struct mc_tokens *out)
{
    struct tt_ctx c = {t->impl, out};
    return mc_pretok_split(c.k->pattern, MC_UNI_TABLE_ONIG, text, len, tt_piece, &c);
}

static mc_status tt_decode(const mc_tokenizer *t, const int64_t *ids, int64_t n, struct mc_json_buf *out)
{
    const struct tiktoken *k = t->impl;
    struct mc_json_buf raw = {0};
    mc_status st = MC_OK;
    for (int64_t i = 0; i < n && st == MC_OK; i++) {
        int64_t id = ids[i];
        if (id >= 0 && id < k->n_special) {
            st = mc_json_buf_append(&raw, k->special[id], strlen(k->special[id]));
        } else if (id >= k->n_special && id - k->n_special < k->n_ranks) {
            size_t l;
            const char *b = mc_bpe_symbol_bytes(k->bpe, k->rank_sym[id - k->n_special], &l);
            st = mc_json_buf_append(&raw, b, l);
        } else {
            st = mc_error(MC_ERR_CONFIG, "cannot decode token id %lld (position %lld): the vocab "
                          "has %lld ids", (long long)id, (long long)i, (long long)k->vocab_size);
        }
    }
    if (st == MC_OK && raw.len) { /* tiktoken decodes with errors="replace" */
        char *o = mc_alloc(3 * raw.len);
        st = o ? mc_json_buf_append(out, o, mc_utf8_replace_invalid(o, (const unsigned char *)raw.data, raw.len))
               : MC_ERR_NOMEM;
        mc_free(o);
    }
    mc_free(raw.data);
    return st;
}

static const struct mc_tok_ops tt_ops = {
    .class_name = "CustomTikTokenizer",
    .encode = tt_encode,
    .decode = tt_decode,
    .free_impl = tt_free,
};

mc_status mc_tok_tiktoken_init(const struct mc_tokenizer_args *args, mc_tokenizer *t)
{
    if (!args->tokenizer_model)
        return mc_error(MC_ERR_CONFIG, "TikTokenizer needs --tokenizer-model (a tiktoken JSON vocab)");
    const char *pat = args->tiktoken_pattern;
    if (!pat || (strcmp(pat, "v1") != 0 && strcmp(pat, "v2") != 0))
        return mc_error(MC_ERR_CONFIG, "TikTokenizer needs --tiktoken-pattern v1 or v2 (got %s)",
                        pat ? pat : "none");
    struct tiktoken *k = mc_calloc(1, sizeof(*k));
    if (!k)
        return MC_ERR_NOMEM;
    k->pattern = strcmp(pat, "v1") == 0 ? MC_PRETOK_TIKTOKEN_V1 : MC_PRETOK_TIKTOKEN_V2;
    k->vocab_size = args->vocab_size > 0 ? args->vocab_size : 131072;
    k->n_special = args->tiktoken_num_special_tokens > 0 ? args->tiktoken_num_special_tokens : 1000;
    mc_json_doc *doc = NULL;
    mc_status st = MC_OK;
    if (k->n_special >= k->vocab_size)
        st = mc_error(MC_ERR_CONFIG, "--tiktoken-num-special-tokens %lld must be below --vocab-size %lld",
                      (long long)k->n_special, (long long)k->vocab_size);
    if (st || (st = mc_bpe_init(&k->bpe)) || (st = load_specials(k, args, &t->eod)) ||
        (st = mc_json_parse_file(args->tokenizer_model, &doc)) ||
        (st = load_ranks(k, mc_json_doc_root(doc), k->vocab_size - k->n_special, args->tokenizer_model))) {
        mc_json_doc_free(doc);
        tt_free(k);
        return st;
    }
    mc_json_doc_free(doc);
    t->ops = &tt_ops;
    t->impl = k;
    t->vocab_size = k->vocab_size;
    t->pad = -1; /* MegatronTokenizer.pad raises for CustomTikTokenizer */
    return MC_OK;
}
