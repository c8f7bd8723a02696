/* Byte-level BPE trainer writing GPT-2-format vocab.json/merges.txt and a HuggingFace
 * tokenizer.json (used by tools/train_tokenizer). Megatron has no trainer; the files it writes
 * are what Megatron's GPT2BPETokenizer (--vocab-file/--merge-file) and HuggingFaceTokenizer
 * read. Text is cut with the GPT-2 pre-tokenizer, identical pieces are counted once, and the
 * most frequent adjacent symbol pair is merged until the vocabulary is full. Deterministic:
 * ties go to the pair whose symbols were created first (lower ids), never to hash order. */
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/unicode.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct pair_info {
    uint64_t key;   /* (a << 32 | b) + 1; 0 = empty slot */
    int64_t count;  /* occurrences weighted by word counts */
    int32_t *words; /* words that contained the pair when it was counted (may be stale) */
    int32_t n_words, cap_words;
};

struct heap_item {
    int64_t count;
    uint64_t key;
};

struct mc_bpe_trainer {
    mc_bpe *words_set;   /* interns distinct pieces: symbol id -> word */
    int64_t *word_count; /* by words_set symbol id */
    int64_t word_count_cap;
    /* training state */
    mc_bpe *model;
    int32_t n_words;
    int64_t *wcount;
    int64_t *woff;
    int32_t *wlen;
    int32_t *syms; /* all words' symbols */
    struct pair_info *pairs;
    uint32_t pair_cap, n_pairs;
    struct heap_item *heap;
    int64_t heap_len, heap_cap;
    int32_t *stamp; /* per word: last merge that touched it */
    int32_t *merge_a, *merge_b; /* learned merges in order */
    int32_t n_merges;
    char **special;
    int n_special;
};

mc_status mc_bpe_trainer_init(mc_bpe_trainer **out)
{
    mc_bpe_trainer *tr = mc_calloc(1, sizeof(*tr));
    if (!tr)
        return MC_ERR_NOMEM;
    mc_status st = mc_bpe_init(&tr->words_set);
    if (st) {
        mc_free(tr);
        return st;
    }
    *out = tr;
    return MC_OK;
}

void mc_bpe_trainer_free(mc_bpe_trainer *tr)
{
    if (!tr)
        return;
    for (uint32_t i = 0; i < tr->pair_cap; i++)
        mc_free(tr->pairs ? tr->pairs[i].words : NULL);
    mc_free(tr->pairs);
    mc_free(tr->heap);
    mc_free(tr->stamp);
    mc_free(tr->syms);
    mc_free(tr->wcount);
    mc_free(tr->woff);
    mc_free(tr->wlen);
    mc_free(tr->merge_a);
    mc_free(tr->merge_b);
    for (int i = 0; i < tr->n_special; i++)
        mc_free(tr->special[i]);
    mc_free(tr->special);
    mc_bpe_free(tr->model);
    mc_bpe_free(tr->words_set);
    mc_free(tr->word_count);
    mc_free(tr);
}

/* ---- counting pieces ------------------------------------------------------------------------ */
static mc_status count_piece(void *ctx, const char *piece, size_t len)
{
    mc_bpe_trainer *tr = ctx;
    int32_t sym;
    mc_status st = mc_bpe_symbol(tr->words_set, piece, len, &sym);
    if (st)
        return st;
    if (sym >= tr->word_count_cap) {
        int64_t cap = tr->word_count_cap ? tr->word_count_cap * 2 : 4096;
        while (cap <= sym)
            cap *= 2;
        int64_t *n = mc_calloc((size_t)cap, sizeof(int64_t));
        if (!n)
            return MC_ERR_NOMEM;
        if (tr->word_count_cap)
            memcpy(n, tr->word_count, (size_t)tr->word_count_cap * sizeof(int64_t));
        mc_free(tr->word_count);
        tr->word_count = n;
        tr->word_count_cap = cap;
    }
    tr->word_count[sym]++;
    return MC_OK;
}

mc_status mc_bpe_trainer_feed(mc_bpe_trainer *tr, const char *text, size_t len)
{
    return mc_pretok_split(MC_PRETOK_GPT2, MC_UNI_TABLE_REGEX, text, len, count_piece, tr);
}

/* ---- pair table and heap ---------------------------------------------------------------- */
static uint64_t pkey(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

static uint32_t pair_slot(const mc_bpe_trainer *tr, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t mask = tr->pair_cap - 1, i = (uint32_t)(h >> 32) & mask;
    while (tr->pairs[i].key && tr->pairs[i].key != key)
        i = (i + 1) & mask;
    return i;
}

static mc_status pairs_grow(mc_bpe_trainer *tr)
{
    uint32_t ocap = tr->pair_cap, cap = ocap ? ocap * 2 : 1u << 16;
    struct pair_info *old = tr->pairs;
    tr->pairs = mc_calloc(cap, sizeof(struct pair_info));
    if (!tr->pairs) {
        tr->pairs = old;
        return MC_ERR_NOMEM;
    }
    tr->pair_cap = cap;
    for (uint32_t i = 0; i < ocap; i++)
        if (old[i].key)
            tr->pairs[pair_slot(tr, old[i].key)] = old[i];
    mc_free(old);
    return MC_OK;
}

static mc_status heap_push(mc_bpe_trainer *tr, int64_t count, uint64_t key)
{
    if (tr->heap_len == tr->heap_cap) {
        int64_t cap = tr->heap_cap ? tr->heap_cap * 2 : 1 << 16;
        struct heap_item *h = mc_alloc((size_t)cap * sizeof(*h));
        if (!h)
            return MC_ERR_NOMEM;
        if (tr->heap_len)
            memcpy(h, tr->heap, (size_t)tr->heap_len * sizeof(*h));
        mc_free(tr->heap);
        tr->heap = h;
        tr->heap_cap = cap;
    }
    /* max-heap on count; on ties the smaller key (older symbols) first */
    int64_t i = tr->heap_len++;
    struct heap_item it = {count, key};
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        struct heap_item *q = &tr->heap[p];
        if (q->count > it.count || (q->count == it.count && q->key < it.key))
            break;
        tr->heap[i] = *q;
        i = p;
    }
    tr->heap[i] = it;
    return MC_OK;
}

static struct heap_item heap_pop(mc_bpe_trainer *tr)
{
    struct heap_item top = tr->heap[0], last = tr->heap[--tr->heap_len];
    int64_t i = 0, n = tr->heap_len;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && (tr->heap[c + 1].count > tr->heap[c].count ||
                          (tr->heap[c + 1].count == tr->heap[c].count &&
                           tr->heap[c + 1].key < tr->heap[c].key)))
            c++;
        if (last.count > tr->heap[c].count ||
            (last.count == tr->heap[c].count && last.key < tr->heap[c].key))
            break;
        tr->heap[i] = tr->heap[c];
        i = c;
    }
    if (n)
        tr->heap[i] = last;
    return top;
}

/* Adds delta to pair (a, b); records word w as a holder when delta > 0. */
static mc_status pair_add(mc_bpe_trainer *tr, int32_t a, int32_t b, int64_t delta, int32_t w)
{
    if ((uint64_t)(tr->n_pairs + 1) * 2 > tr->pair_cap) {
        mc_status st = pairs_grow(tr);
        if (st)
            return st;
    }
    uint64_t key = pkey(a, b);
    struct pair_info *p = &tr->pairs[pair_slot(tr, key)];
    if (!p->key) {
        p->key = key;
        tr->n_pairs++;
    }
    p->count += delta;
    if (delta > 0 && (p->n_words == 0 || p->words[p->n_words - 1] != w)) {
        if (p->n_words == p->cap_words) {
            int32_t cap = p->cap_words ? p->cap_words * 2 : 4;
            int32_t *nw = mc_alloc((size_t)cap * sizeof(int32_t));
            if (!nw)
                return MC_ERR_NOMEM;
            if (p->n_words)
                memcpy(nw, p->words, (size_t)p->n_words * sizeof(int32_t));
            mc_free(p->words);
            p->words = nw;
            p->cap_words = cap;
        }
        p->words[p->n_words++] = w;
    }
    return MC_OK;
}

/* ---- training ------------------------------------------------------------------------------- */
static mc_status setup_words(mc_bpe_trainer *tr)
{
    int32_t nsym = mc_bpe_n_symbols(tr->words_set);
    int64_t total = 0;
    int32_t n = 0;
    for (int32_t s = 0; s < nsym && s < tr->word_count_cap; s++)
        if (tr->word_count[s]) {
            size_t l;
            mc_bpe_symbol_bytes(tr->words_set, s, &l);
            total += (int64_t)l;
            n++;
        }
    tr->wcount = mc_alloc((size_t)(n + 1) * sizeof(int64_t));
    tr->woff = mc_alloc((size_t)(n + 1) * sizeof(int64_t));
    tr->wlen = mc_alloc((size_t)(n + 1) * sizeof(int32_t));
    tr->stamp = mc_calloc((size_t)(n + 1), sizeof(int32_t));
    tr->syms = mc_alloc((size_t)(total + 1) * sizeof(int32_t));
    if (!tr->wcount || !tr->woff || !tr->wlen || !tr->stamp || !tr->syms)
        return MC_ERR_NOMEM;
    int64_t off = 0;
    for (int32_t s = 0; s < nsym && s < tr->word_count_cap; s++) {
        if (!tr->word_count[s])
            continue;
        size_t l;
        const char *b = mc_bpe_symbol_bytes(tr->words_set, s, &l);
        if (l > INT32_MAX)
            return mc_error(MC_ERR_UNSUPPORTED, "a pre-tokenized piece of %zu bytes is too long", l);
        int32_t w = tr->n_words++;
        tr->wcount[w] = tr->word_count[s];
        tr->woff[w] = off;
        tr->wlen[w] = (int32_t)l;
        for (size_t i = 0; i < l; i++)
            tr->syms[off + (int64_t)i] = (unsigned char)b[i];
        off += (int64_t)l;
    }
    return MC_OK;
}

static mc_status count_all_pairs(mc_bpe_trainer *tr)
{
    mc_status st;
    for (int32_t w = 0; w < tr->n_words; w++) {
        const int32_t *s = tr->syms + tr->woff[w];
        for (int32_t i = 0; i + 1 < tr->wlen[w]; i++)
            if ((st = pair_add(tr, s[i], s[i + 1], tr->wcount[w], w)))
                return st;
    }
    for (uint32_t i = 0; i < tr->pair_cap; i++)
        if (tr->pairs[i].key && tr->pairs[i].count > 0 &&
            (st = heap_push(tr, tr->pairs[i].count, tr->pairs[i].key)))
            return st;
    return MC_OK;
}

/* Rewrites word w with merge (a, b) -> m, moving its pair counts from old to new pairs. */
static mc_status merge_word(mc_bpe_trainer *tr, int32_t w, int32_t a, int32_t b, int32_t m)
{
    int32_t *s = tr->syms + tr->woff[w];
    int32_t n = tr->wlen[w];
    int64_t c = tr->wcount[w];
    bool has = false;
    for (int32_t i = 0; i + 1 < n && !has; i++)
        has = s[i] == a && s[i + 1] == b;
    if (!has)
        return MC_OK; /* stale holder entry */
    mc_status st;
    for (int32_t i = 0; i + 1 < n; i++)
        if ((st = pair_add(tr, s[i], s[i + 1], -c, w)))
            return st;
    int32_t k = 0;
    for (int32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            s[k++] = m;
            i += 2;
        } else {
            s[k++] = s[i++];
        }
    }
    tr->wlen[w] = k;
    for (int32_t i = 0; i + 1 < k; i++)
        if ((st = pair_add(tr, s[i], s[i + 1], c, w)))
            return st;
    /* re-announce the counts of this word's pairs (lazy heap: stale entries are skipped) */
    for (int32_t i = 0; i + 1 < k; i++) {
        const struct pair_info *p = &tr->pairs[pair_slot(tr, pkey(s[i], s[i + 1]))];
        if ((st = heap_push(tr, p->count, p->key)))
            return st;
    }
    return MC_OK;
}

mc_status mc_bpe_trainer_train(mc_bpe_trainer *tr, const struct mc_bpe_train_opts *o)
{
    if (tr->model)
        return mc_error(MC_ERR_CONFIG, "BPE trainer: train() was already called");
    int64_t n_merges_max = o->vocab_size - 256 - o->n_special;
    if (o->vocab_size <= 0 || n_merges_max < 0)
        return mc_error(MC_ERR_CONFIG, "--vocab-size %lld is too small: it must cover the 256 "
                        "byte tokens and %d special tokens", (long long)o->vocab_size, o->n_special);
    mc_status st;
    tr->special = mc_calloc((size_t)(o->n_special + 1), sizeof(char *));
    if (!tr->special)
        return MC_ERR_NOMEM;
    for (int i = 0; i < o->n_special; i++) {
        size_t l = strlen(o->special[i]);
        if (!(tr->special[i] = mc_alloc(l + 1)))
            return MC_ERR_NOMEM;
        memcpy(tr->special[i], o->special[i], l + 1);
        tr->n_special++;
    }
    if ((st = mc_bpe_init(&tr->model)) || (st = setup_words(tr)) || (st = count_all_pairs(tr)))
        return st;
    int64_t min_freq = o->min_frequency > 0 ? o->min_frequency : 1;
    int32_t merges_cap = 0;
    /* stop when the vocabulary is full: distinct symbols, since two merges can make one string */
    while (mc_bpe_n_symbols(tr->model) - 256 < n_merges_max && tr->heap_len > 0) {
        struct heap_item top = heap_pop(tr);
        struct pair_info *p = &tr->pairs[pair_slot(tr, top.key)];
        if (p->count != top.count || top.count <= 0)
            continue; /* stale */
        if (top.count < min_freq)
            break;
        int32_t a = (int32_t)((top.key - 1) >> 32), b = (int32_t)((top.key - 1) & 0xffffffffu);
        int32_t before = mc_bpe_n_symbols(tr->model);
        if ((st = mc_bpe_add_merge(tr->model, a, b, tr->n_merges)))
            return st;
        int32_t m = mc_bpe_n_symbols(tr->model) > before ? before : -1;
        if (m < 0) { /* a+b already exists as a symbol (made by another merge): reuse it */
            size_t la, lb;
            char buf[512];
            const char *pa = mc_bpe_symbol_bytes(tr->model, a, &la);
            const char *pb = mc_bpe_symbol_bytes(tr->model, b, &lb);
            if (la + lb > sizeof(buf))
                return mc_error(MC_ERR_UNSUPPORTED, "BPE trainer: token longer than %zu bytes",
                                sizeof(buf));
            memcpy(buf, pa, la);
            memcpy(buf + la, pb, lb);
            m = mc_bpe_find_symbol(tr->model, buf, la + lb);
        }
        if (tr->n_merges == merges_cap) {
            int32_t cap = merges_cap ? merges_cap * 2 : 1024;
            int32_t *na = mc_alloc((size_t)cap * sizeof(int32_t));
            int32_t *nb = mc_alloc((size_t)cap * sizeof(int32_t));
            if (!na || !nb) {
                mc_free(na);
                mc_free(nb);
                return MC_ERR_NOMEM;
            }
            if (tr->n_merges) {
                memcpy(na, tr->merge_a, (size_t)tr->n_merges * sizeof(int32_t));
                memcpy(nb, tr->merge_b, (size_t)tr->n_merges * sizeof(int32_t));
            }
            mc_free(tr->merge_a);
            mc_free(tr->merge_b);
            tr->merge_a = na;
            tr->merge_b = nb;
            merges_cap = cap;
        }
        tr->merge_a[tr->n_merges] = a;
        tr->merge_b[tr->n_merges] = b;
        tr->n_merges++;
        /* the holder list may grow while we merge (new pairs of m): walk a snapshot length */
        int32_t nw = p->n_words;
        for (int32_t i = 0; i < nw; i++) {
            int32_t w = tr->pairs[pair_slot(tr, top.key)].words[i];
            if (tr->stamp[w] == tr->n_merges)
                continue;
            tr->stamp[w] = tr->n_merges;
            if ((st = merge_word(tr, w, a, b, m)))
                return st;
        }
        p = &tr->pairs[pair_slot(tr, top.key)];
        mc_free(p->words); /* the pair is gone from every word */
        p->words = NULL;
        p->n_words = p->cap_words = 0;
    }
    return MC_OK;
}

int32_t mc_bpe_trainer_n_merges(const mc_bpe_trainer *tr) { return tr->n_merges; }

int64_t mc_bpe_trainer_vocab_size(const mc_bpe_trainer *tr)
{
    return tr->model ? mc_bpe_n_symbols(tr->model) + tr->n_special : 0;
}

/* ---- saving --------------------------------------------------------------------------------- */
/* Vocab ids: 0..255 are the bytes in GPT-2's alphabet order (printable bytes first, as in
 * OpenAI's encoder.json), then merge results in creation order, then the special tokens. */
static int byte_rank(int b)
{
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int r = 0;
    for (int c = 0; c < 256; c++) {
        int pc = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
        if (printable ? (pc && c < b) : (pc || c < b))
            r++;
    }
    return r;
}

static mc_status append_mapped(struct mc_json_buf *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char u[4];
        int l = mc_utf8_encode(u, mc_bpe_byte_to_cp((uint8_t)s[i]));
        mc_status st = mc_json_buf_append(o, u, (size_t)l);
        if (st)
            return st;
    }
    return MC_OK;
}

static mc_status write_atomic(const char *dir, const char *name, const struct mc_json_buf *b)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    size_t w = b->len ? fwrite(b->data, 1, b->len, f) : 0;
    int bad = w != b->len;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        mc_status st = mc_error(MC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        remove(tmp);
        return st;
    }
    return MC_OK;
}

/* Symbol s as a JSON string in the byte alphabet. */
static mc_status write_token(struct mc_json_buf *o, const mc_bpe *m, int32_t s, bool ascii,
                             struct mc_json_buf *tmp)
{
    size_t l;
    const char *p = mc_bpe_symbol_bytes(m, s, &l);
    tmp->len = 0;
    mc_status st = append_mapped(tmp, p, l);
    return st ? st : mc_json_write_string(o, tmp->data, tmp->len, ascii);
}

/* vocab.json (OpenAI's encoder.json layout, ASCII) and the tokenizer.json vocab object (UTF-8). */
static mc_status build_vocabs(const mc_bpe_trainer *tr, const int32_t *order, struct mc_json_buf *vocab,
                              struct mc_json_buf *hvocab, struct mc_json_buf *tmp)
{
    int32_t nsym = mc_bpe_n_symbols(tr->model);
    mc_status st = mc_json_buf_append(vocab, "{", 1);
    if (st == MC_OK)
        st = mc_json_buf_append(hvocab, "{", 1);
    for (int32_t i = 0; st == MC_OK && i < nsym + tr->n_special; i++) {
        if (i && ((st = mc_json_buf_append(vocab, ", ", 2)) || (st = mc_json_buf_append(hvocab, ",", 1))))
            break;
        if (i < nsym) {
            if ((st = write_token(vocab, tr->model, order[i], true, tmp)) == MC_OK)
                st = write_token(hvocab, tr->model, order[i], false, tmp);
        } else {
            const char *sp = tr->special[i - nsym];
            if ((st = mc_json_write_string(vocab, sp, strlen(sp), true)) == MC_OK)
                st = mc_json_write_string(hvocab, sp, strlen(sp), false);
        }
        if (st == MC_OK && (st = mc_json_buf_printf(vocab, ": %d", i)) == MC_OK)
            st = mc_json_buf_printf(hvocab, ":%d", i);
    }
    if (st == MC_OK && (st = mc_json_buf_append(vocab, "}", 1)) == MC_OK)
        st = mc_json_buf_append(hvocab, "}", 1);
    return st;
}

/* merges.txt ("#version: 0.2", then "A B" lines) and the tokenizer.json merges array. */
static mc_status build_merges(const mc_bpe_trainer *tr, struct mc_json_buf *merges,
                              struct mc_json_buf *hmerges, struct mc_json_buf *tmp)
{
    mc_status st = mc_json_buf_append(merges, "#version: 0.2\n", 14);
    if (st == MC_OK)
        st = mc_json_buf_append(hmerges, "[", 1);
    for (int32_t r = 0; st == MC_OK && r < tr->n_merges; r++) {
        size_t la, lb;
        const char *pa = mc_bpe_symbol_bytes(tr->model, tr->merge_a[r], &la);
        const char *pb = mc_bpe_symbol_bytes(tr->model, tr->merge_b[r], &lb);
        if ((st = append_mapped(merges, pa, la)) || (st = mc_json_buf_append(merges, " ", 1)) ||
            (st = append_mapped(merges, pb, lb)) || (st = mc_json_buf_append(merges, "\n", 1)) ||
            (st = mc_json_buf_append(hmerges, r ? ",[" : "[", r ? 2 : 1)) ||
            (st = write_token(hmerges, tr->model, tr->merge_a[r], false, tmp)) ||
            (st = mc_json_buf_append(hmerges, ",", 1)) ||
            (st = write_token(hmerges, tr->model, tr->merge_b[r], false, tmp)))
            break;
        st = mc_json_buf_append(hmerges, "]", 1);
    }
    return st == MC_OK ? mc_json_buf_append(hmerges, "]", 1) : st;
}

/* tokenizer.json: the HuggingFace layout of a GPT-2-style byte-level BPE. */
static mc_status build_hf_json(const mc_bpe_trainer *tr, const struct mc_json_buf *hvocab,
                               const struct mc_json_buf *hmerges, struct mc_json_buf *hf)
{
    int32_t nsym = mc_bpe_n_symbols(tr->model);
    mc_status st = mc_json_buf_printf(hf, "{\"version\":\"1.0\",\"truncation\":null,"
                                      "\"padding\":null,\"added_tokens\":[");
    for (int i = 0; st == MC_OK && i < tr->n_special; i++) {
        if ((st = mc_json_buf_printf(hf, "%s{\"id\":%d,\"content\":", i ? "," : "", nsym + i)) ||
            (st = mc_json_write_string(hf, tr->special[i], strlen(tr->special[i]), false)))
            break;
        st = mc_json_buf_printf(hf, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                                "\"normalized\":false,\"special\":true}");
    }
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                     "\"use_regex\":true}";
    if (st == MC_OK)
        st = mc_json_buf_printf(hf, "],\"normalizer\":null,\"pre_tokenizer\":%s,"
                                "\"post_processor\":%s,\"decoder\":%s,\"model\":{\"type\":\"BPE\","
                                "\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
                                "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,"
                                "\"ignore_merges\":false,\"vocab\":", bl, bl, bl);
    if (st == MC_OK && !(st = mc_json_buf_append(hf, hvocab->data, hvocab->len)) &&
        !(st = mc_json_buf_append(hf, ",\"merges\":", 10)) &&
        !(st = mc_json_buf_append(hf, hmerges->data, hmerges->len)))
        st = mc_json_buf_append(hf, "}}\n", 3);
    return st;
}

/* tokenizer_config.json: the eos token (the first special) for HuggingFaceTokenizer's eod. */
static mc_status build_config(const mc_bpe_trainer *tr, struct mc_json_buf *cfg)
{
    mc_status st = mc_json_buf_printf(cfg, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\"");
    if (st == MC_OK && tr->n_special && !(st = mc_json_buf_printf(cfg, ",\n  \"eos_token\": ")))
        st = mc_json_write_string(cfg, tr->special[0], strlen(tr->special[0]), false);
    return st == MC_OK ? mc_json_buf_printf(cfg, "\n}\n") : st;
}

mc_status mc_bpe_trainer_save(const mc_bpe_trainer *tr, const char *dir)
{
    if (!tr->model)
        return mc_error(MC_ERR_CONFIG, "BPE trainer: save() before train()");
    struct mc_json_buf vocab = {0}, merges = {0}, hf = {0}, hvocab = {0}, hmerges = {0}, cfg = {0},
                       tmp = {0};
    int32_t nsym = mc_bpe_n_symbols(tr->model);
    int32_t *order = mc_alloc((size_t)nsym * sizeof(int32_t)); /* vocab id -> symbol */
    mc_status st = order ? MC_OK : MC_ERR_NOMEM;
    for (int32_t s = 0; st == MC_OK && s < nsym; s++) /* only merge results follow the bytes */
        order[s < 256 ? byte_rank(s) : s] = s;
    if (st == MC_OK && !(st = build_vocabs(tr, order, &vocab, &hvocab, &tmp)) &&
        !(st = build_merges(tr, &merges, &hmerges, &tmp)) && !(st = build_hf_json(tr, &hvocab, &hmerges, &hf)) &&
        !(st = build_config(tr, &cfg)) && !(st = write_atomic(dir, "vocab.json", &vocab)) &&
        !(st = write_atomic(dir, "merges.txt", &merges)) && !(st = write_atomic(dir, "tokenizer.json", &hf)))
        st = write_atomic(dir, "tokenizer_config.json", &cfg);
    mc_free(order);
    mc_free(vocab.data);
    mc_free(merges.data);
    mc_free(hf.data);
    mc_free(hvocab.data);
    mc_free(hmerges.data);
    mc_free(cfg.data);
    mc_free(tmp.data);
    return st;
}
