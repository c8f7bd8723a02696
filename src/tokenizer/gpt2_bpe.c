/* GPT2BPETokenizer: mirrors _GPT2BPETokenizer in megatron/training/tokenizer/tokenizer.py and
 * GPT2Tokenizer in gpt2_tokenization.py. --vocab-file is the JSON map token -> id (tokens in
 * GPT-2's printable byte alphabet), --merge-file the ranked merges; eod is <|endoftext|>.
 * Loading follows Megatron's quirks: the merges file drops its first line (#version) and its
 * last \n-separated element, a line that does not split into exactly two tokens never
 * matches, a repeated pair keeps its last rank. Megatron gives id 0 for a symbol missing from the
 * vocab (encoder.get(token, 0)), which silently corrupts the data when the vocab and merges do
 * not belong together; we refuse such files at load time instead: every one of the 256 byte
 * symbols, and both parts and the product of every merge that can apply, must be in the vocab
 * (COMPATIBILITY.md). No special tokens: "<|endoftext|>" in text is ordinary text. */
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

struct gpt2 {
    mc_bpe *bpe;
    /* decode table: id -> raw bytes; off -1 for ids absent from the vocab or whose token has
     * characters outside the byte alphabet (Megatron raises KeyError on those) */
    int64_t n_ids;
    int64_t *dec_off;
    uint32_t *dec_len;
    char *dec_bytes;
};

/* Next whitespace-separated field of line[*i..n) per Python str.split(); false at the end. */
static bool next_field(const char *line, size_t n, size_t *i, size_t *start, size_t *len)
{
    const unsigned char *s = (const unsigned char *)line;
    size_t k = *i;
    bool in_field = false;
    while (k < n) {
        uint32_t cp;
        int l = mc_utf8_decode(s + k, s + n, &cp);
        if (!l) { /* cannot happen: the caller checked UTF-8 */
            l = 1;
            cp = 0xFFFD;
        }
        bool space = mc_uni_is_py_space(cp) != 0;
        if (!in_field && !space) {
            in_field = true;
            *start = k;
        } else if (in_field && space) {
            break;
        }
        k += (size_t)l;
    }
    *i = k;
    if (in_field)
        *len = k - *start;
    return in_field;
}

static mc_status check_utf8(const char *s, size_t n, const char *path)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    int64_t line = 1;
    while (p < end) {
        uint32_t cp;
        int l = mc_utf8_decode(p, end, &cp);
        if (!l)
            return mc_error(MC_ERR_FORMAT, "%s:%lld: not valid UTF-8 (byte 0x%02x at offset %zu)",
                            path, (long long)line, *p, (size_t)(p - (const unsigned char *)s));
        if (cp == '\n')
            line++;
        p += l;
    }
    return MC_OK;
}

/* Writes raw bytes s[0..n) as vocab.json spells them (GPT-2's printable byte alphabet), cut
 * with "..." after 64 bytes; o needs room for 2 * 64 + 4 bytes. For error messages. */
static void spell(char *o, const char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        w += (size_t)mc_utf8_encode(o + w, mc_bpe_byte_to_cp((uint8_t)s[i]));
    if (n > 64) {
        memcpy(o + w, "...", 3);
        w += 3;
    }
    o[w] = '\0';
}

/* A merge (line `line` of the merges file) whose part or product has no vocab id would make
 * Megatron emit id 0 for it: refuse the pair of files, naming the missing token. */
static mc_status check_merge(const mc_bpe *bpe, int32_t a, int32_t b, const char *path,
                             const char *vocab_path, int64_t line)
{
    size_t la, lb;
    const char *pa = mc_bpe_symbol_bytes(bpe, a, &la), *pb = mc_bpe_symbol_bytes(bpe, b, &lb);
    char cat[512];
    memcpy(cat, pa, la); /* both parts are at most 256 bytes (see the caller) */
    memcpy(cat + la, pb, lb);
    int32_t res = mc_bpe_find_symbol(bpe, cat, la + lb);
    const char *what = NULL, *s = NULL;
    size_t n = 0;
    if (mc_bpe_get_id(bpe, a) < 0)
        what = "the first part", s = pa, n = la;
    else if (mc_bpe_get_id(bpe, b) < 0)
        what = "the second part", s = pb, n = lb;
    else if (res < 0 || mc_bpe_get_id(bpe, res) < 0)
        what = "the product", s = cat, n = la + lb;
    if (!what)
        return MC_OK;
    char tok[2 * 64 + 4], sa[2 * 64 + 4], sb[2 * 64 + 4];
    spell(tok, s, n);
    spell(sa, pa, la);
    spell(sb, pb, lb);
    return mc_error(MC_ERR_FORMAT, "%s: the vocab has no token \"%s\", %s of the merge \"%s %s\" "
                    "(line %lld of %s): the vocab and merges files do not belong together "
                    "(Megatron would silently write id 0 for it)", vocab_path, tok, what, sa, sb,
                    (long long)line, path);
}

/* Merges file: Python's read().split('\n')[1:-1], then tuple(line.split()) ranked by position.
 * With vocab_path, every merge that can apply is checked against the vocab ids already set. */
mc_status mc_tok_load_merges(mc_bpe *bpe, const char *text, size_t n, const char *path,
                             const char *vocab_path)
{
    mc_status st = check_utf8(text, n, path);
    if (st)
        return st;
    const char *first_nl = memchr(text, '\n', n);
    if (!first_nl)
        return MC_OK; /* one element: [1:-1] is empty */
    size_t pos = (size_t)(first_nl - text) + 1;
    int32_t rank = 0;
    char stackbuf[2][256];
    while (pos < n) {
        const char *nl = memchr(text + pos, '\n', n - pos);
        if (!nl)
            break; /* the last element is dropped */
        size_t line_len = (size_t)(nl - (text + pos));
        const char *line = text + pos;
        size_t i = 0, s[3], l[3];
        int nf = 0;
        while (nf < 3 && next_field(line, line_len, &i, &s[nf], &l[nf]))
            nf++;
        if (nf == 2 && l[0] <= 256 && l[1] <= 256) {
            int64_t la = mc_bpe_unmap(stackbuf[0], line + s[0], l[0]);
            int64_t lb = mc_bpe_unmap(stackbuf[1], line + s[1], l[1]);
            int32_t a, b;
            if (la > 0 && lb > 0) { /* tokens outside the byte alphabet can never match */
                if ((st = mc_bpe_symbol(bpe, stackbuf[0], (size_t)la, &a)) ||
                    (st = mc_bpe_symbol(bpe, stackbuf[1], (size_t)lb, &b)) ||
                    (st = mc_bpe_add_merge(bpe, a, b, rank)) ||
                    (vocab_path && (st = check_merge(bpe, a, b, path, vocab_path, rank + 2))))
                    return st;
            }
        }
        if (rank == INT32_MAX - 1)
            return mc_error(MC_ERR_FORMAT, "%s: too many merges", path);
        rank++;
        pos = (size_t)(nl - text) + 1;
    }
    return MC_OK;
}

static void gpt2_free(void *impl)
{
    struct gpt2 *g = impl;
    if (!g)
        return;
    mc_bpe_free(g->bpe);
    mc_free(g->dec_off);
    mc_free(g->dec_len);
    mc_free(g->dec_bytes);
    mc_free(g);
}

/* vocab.json: a JSON object token -> integer id. Fills the BPE symbol ids and the decode table. */
static mc_status load_vocab(struct gpt2 *g, const struct mc_json *root, const char *path,
                            int64_t *vocab_size, int64_t *eod)
{
    if (root->type != MC_JSON_OBJECT)
        return mc_error(MC_ERR_FORMAT, "%s: vocab file must be a JSON object token -> id, found %s",
                        path, mc_json_type_name(root->type));
    int64_t max_id = -1;
    size_t total = 0;
    for (int64_t i = 0; i < root->len; i++) {
        const struct mc_json *m = &root->items[i];
        if (m->type != MC_JSON_NUMBER || !m->is_int || m->inum < 0 || m->inum >= INT32_MAX)
            return mc_error(MC_ERR_FORMAT, "%s: token \"%s\" has id %s; expected an integer in "
                            "[0, 2^31)", path, m->key, m->str ? m->str : mc_json_type_name(m->type));
        if (m->inum > max_id)
            max_id = m->inum;
        total += m->key_len;
    }
    /* The decode table is dense in the ids. A real vocab's ids are 0..n-1; ids far past the
     * entry count would make it huge (5 GB for one id near 2^29), and Megatron sizes the
     * embedding from len(vocab) (plus padding), so such ids could not train anyway. */
    if (max_id >= 4 * root->len + 1024)
        return mc_error(MC_ERR_FORMAT, "%s: the vocab's largest id is %" PRId64 " but it has only %"
                        PRId64 " entries: expected ids 0..n-1 (Megatron's GPT2BPETokenizer sizes "
                        "the vocabulary from the entry count)", path, max_id, (int64_t)root->len);
    g->n_ids = max_id + 1;
    g->dec_off = mc_alloc((size_t)(g->n_ids ? g->n_ids : 1) * sizeof(int64_t));
    g->dec_len = mc_calloc((size_t)(g->n_ids ? g->n_ids : 1), sizeof(uint32_t));
    g->dec_bytes = mc_alloc(total + 1);
    if (!g->dec_off || !g->dec_len || !g->dec_bytes)
        return MC_ERR_NOMEM;
    /* all-ones bytes are -1: a sparse vocab (one id near 2^31) is filled at memset speed */
    memset(g->dec_off, 0xff, (size_t)(g->n_ids ? g->n_ids : 1) * sizeof(int64_t));
    /* Python dict semantics: a repeated key keeps its first position and its last id; the
     * decoder {v: k} is built in key order, so the last key per id wins. A temporary string set
     * (a BPE symbol table) finds the repeats without quadratic lookups. */
    mc_bpe *set = NULL;
    int32_t *member_sym = mc_alloc((size_t)(root->len ? root->len : 1) * sizeof(int32_t));
    int64_t *last = mc_alloc((size_t)(root->len + 256) * sizeof(int64_t));
    mc_status st = member_sym && last ? mc_bpe_init(&set) : MC_ERR_NOMEM;
    for (int64_t i = 0; st == MC_OK && i < root->len + 256; i++)
        last[i] = -1;
    for (int64_t i = 0; st == MC_OK && i < root->len; i++) {
        const struct mc_json *m = &root->items[i];
        if ((st = mc_bpe_symbol(set, m->key, m->key_len, &member_sym[i])) == MC_OK)
            last[member_sym[i]] = i;
    }
    size_t used = 0;
    *eod = -1;
    *vocab_size = 0;
    for (int64_t i = 0; st == MC_OK && i < root->len; i++) {
        int64_t w = last[member_sym[i]];
        if (w < 0)
            continue; /* a repeat of a key already placed */
        last[member_sym[i]] = -1;
        const struct mc_json *m = &root->items[w];
        (*vocab_size)++;
        int64_t n = mc_bpe_unmap(g->dec_bytes + used, m->key, m->key_len);
        if (n >= 0) {
            g->dec_off[m->inum] = (int64_t)used;
            g->dec_len[m->inum] = (uint32_t)n;
            int32_t sym;
            if ((st = mc_bpe_symbol(g->bpe, g->dec_bytes + used, (size_t)n, &sym)))
                break;
            mc_bpe_set_id(g->bpe, sym, m->inum);
            used += (size_t)n;
        } else {
            g->dec_off[m->inum] = -1; /* not decodable through the byte alphabet */
        }
        if (m->key_len == 13 && memcmp(m->key, "<|endoftext|>", 13) == 0)
            *eod = m->inum;
    }
    mc_bpe_free(set);
    mc_free(member_sym);
    mc_free(last);
    if (st)
        return st;
    if (*eod < 0)
        return mc_error(MC_ERR_FORMAT, "%s: vocab has no \"<|endoftext|>\" token (Megatron's "
                        "GPT2BPETokenizer takes its eod from it)", path);
    /* every byte must have a symbol, or text holding it would become id 0 */
    for (int c = 0; c < 256; c++) {
        if (mc_bpe_get_id(g->bpe, c) < 0) {
            char ch = (char)c, tok[8];
            spell(tok, &ch, 1);
            return mc_error(MC_ERR_FORMAT, "%s: the vocab has no token \"%s\" for the byte 0x%02x: "
                            "a byte-level BPE vocab needs all 256 byte symbols (Megatron would "
                            "silently write id 0 for text holding that byte)", path, tok, c);
        }
    }
    return MC_OK;
}

struct encode_ctx {
    const mc_bpe *bpe;
    struct mc_tokens *out;
};

static mc_status encode_piece(void *ctx, const char *piece, size_t len)
{
    struct encode_ctx *c = ctx;
    return mc_bpe_encode_word(c->bpe, piece, len, 0, c->out);
}

static mc_status gpt2_encode(const mc_tokenizer *t, const char *text, size_t len,
                             struct mc_tokens *out)
{
    const struct gpt2 *g = t->impl;
    struct encode_ctx ctx = {g->bpe, out};
    return mc_pretok_split(MC_PRETOK_GPT2, MC_UNI_TABLE_REGEX, text, len, encode_piece, &ctx);
}

static mc_status gpt2_decode(const mc_tokenizer *t, const int64_t *ids, int64_t n,
                             struct mc_json_buf *out)
{
    const struct gpt2 *g = t->impl;
    struct mc_json_buf raw = {0};
    mc_status st = MC_OK;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= g->n_ids || g->dec_off[ids[i]] < 0) {
            st = mc_error(MC_ERR_CONFIG, "cannot decode token id %lld (position %lld): not in "
                          "the vocab or not a byte-level token", (long long)ids[i], (long long)i);
            goto out_free;
        }
        if ((st = mc_json_buf_append(&raw, g->dec_bytes + g->dec_off[ids[i]], g->dec_len[ids[i]])))
            goto out_free;
    }
    if (raw.len) {
        char *o = mc_alloc(3 * raw.len);
        if (!o) {
            st = MC_ERR_NOMEM;
            goto out_free;
        }
        size_t w = mc_utf8_replace_invalid(o, (const unsigned char *)raw.data, raw.len);
        st = mc_json_buf_append(out, o, w);
        mc_free(o);
    }
out_free:
    mc_free(raw.data);
    return st;
}

static const struct mc_tok_ops gpt2_ops = {
    .class_name = "_GPT2BPETokenizer",
    .encode = gpt2_encode,
    .decode = gpt2_decode,
    .free_impl = gpt2_free,
};

mc_status mc_tok_gpt2_init(const struct mc_tokenizer_args *args, mc_tokenizer *t)
{
    if (!args->vocab_file || !args->merge_file)
        return mc_error(MC_ERR_CONFIG, "GPT2BPETokenizer needs --vocab-file and --merge-file "
                        "(got %s and %s)", args->vocab_file ? args->vocab_file : "none",
                        args->merge_file ? args->merge_file : "none");
    struct gpt2 *g = mc_calloc(1, sizeof(*g));
    if (!g)
        return MC_ERR_NOMEM;
    mc_json_doc *doc = NULL;
    char *merges = NULL;
    size_t merges_len = 0;
    mc_status st;
    if ((st = mc_bpe_init(&g->bpe)) || (st = mc_json_parse_file(args->vocab_file, &doc)) ||
        (st = load_vocab(g, mc_json_doc_root(doc), args->vocab_file, &t->vocab_size, &t->eod)))
        goto fail;
    mc_json_doc_free(doc);
    doc = NULL;
    if ((st = mc_tok_read_file(args->merge_file, "merge file", &merges, &merges_len)) ||
        (st = mc_tok_load_merges(g->bpe, merges, merges_len, args->merge_file, args->vocab_file)))
        goto fail;
    mc_free(merges);
    t->ops = &gpt2_ops;
    t->impl = g;
    t->pad = -1;
    return MC_OK;
fail:
    mc_free(merges);
    mc_json_doc_free(doc);
    gpt2_free(g);
    return st;
}
