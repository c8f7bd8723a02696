/* Byte-level BPE engine: the symbol table, merge ranks and the merge loop of GPT-2's bpe()
 * (megatron/training/tokenizer/gpt2_tokenization.py, GPT2Tokenizer.bpe), shared by
 * GPT2BPETokenizer, HuggingFaceTokenizer (byte-level BPE models) and tools/train_tokenizer.
 *
 * Symbols are raw byte strings (the vocab's printable byte alphabet is undone at load time);
 * symbol s < 256 is the single byte s. Merges map the pair of symbol ids (a, b) to a rank and
 * the symbol a+b. encode_word runs GPT-2's loop exactly: find the adjacent pair of lowest rank,
 * merge all its non-overlapping occurrences left to right, repeat. Short pieces are cached in a
 * sharded table guarded by mutexes, so concurrent encoders rarely contend and the cache stays
 * owned by (and freed with) the model, unlike thread-local caches. */
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SHARDS 32
#define CACHE_SLOTS 8192          /* per shard, power of two; reset when half full */
#define CACHE_KEY_BYTES (256 * 1024)
#define CACHE_ID_COUNT (64 * 1024)
#define CACHE_MAX_WORD 128        /* longer pieces are not cached */
#define NO_RANK INT32_MAX

struct cache_slot {
    uint64_t hash; /* 0 = empty */
    uint32_t key_off, ids_off;
    uint16_t key_len, n_ids;
};

struct cache_shard {
    pthread_mutex_t mu;
    struct cache_slot *slots; /* NULL until first insert */
    char *keys;
    int32_t *ids;
    uint32_t n_used, key_used, ids_used;
};

struct mc_bpe {
    /* symbols */
    char *bytes;             /* all symbol bytes */
    int64_t bytes_len, bytes_cap;
    int64_t *sym_off;
    uint32_t *sym_len;
    int64_t *sym_id;         /* vocab id, -1 if the symbol is not in the vocab */
    int32_t n_sym, sym_cap;
    int32_t *sym_table;      /* open addressing over symbol ids, -1 empty */
    uint32_t sym_table_cap;
    /* merges */
    uint64_t *mkeys;         /* (a << 32 | b) + 1, 0 empty */
    int32_t *mrank, *mres;
    uint32_t mcap, mcount;
    struct cache_shard shards[CACHE_SHARDS];
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h ? h : 1;
}

static uint64_t hash_pair(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return key;
}

/* ---- growth helpers ----------------------------------------------------------------------- */
static mc_status grow(void **p, size_t elem, int64_t used, int64_t *cap, int64_t need)
{
    if (need <= *cap)
        return MC_OK;
    int64_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *np = mc_alloc((size_t)nc * elem);
    if (!np)
        return MC_ERR_NOMEM;
    if (used)
        memcpy(np, *p, (size_t)used * elem);
    mc_free(*p);
    *p = np;
    *cap = nc;
    return MC_OK;
}

static void sym_table_insert(mc_bpe *b, int32_t sym)
{
    uint64_t h = hash_bytes(b->bytes + b->sym_off[sym], b->sym_len[sym]);
    uint32_t mask = b->sym_table_cap - 1, i = (uint32_t)h & mask;
    while (b->sym_table[i] >= 0)
        i = (i + 1) & mask;
    b->sym_table[i] = sym;
}

static mc_status sym_table_rehash(mc_bpe *b, uint32_t cap)
{
    int32_t *t = mc_alloc(cap * sizeof(int32_t));
    if (!t)
        return MC_ERR_NOMEM;
    memset(t, 0xff, cap * sizeof(int32_t));
    mc_free(b->sym_table);
    b->sym_table = t;
    b->sym_table_cap = cap;
    for (int32_t s = 0; s < b->n_sym; s++)
        sym_table_insert(b, s);
    return MC_OK;
}

int32_t mc_bpe_find_symbol(const mc_bpe *b, const char *s, size_t len)
{
    uint64_t h = hash_bytes(s, len);
    uint32_t mask = b->sym_table_cap - 1, i = (uint32_t)h & mask;
    for (;;) {
        int32_t sym = b->sym_table[i];
        if (sym < 0)
            return -1;
        if (b->sym_len[sym] == len && memcmp(b->bytes + b->sym_off[sym], s, len) == 0)
            return sym;
        i = (i + 1) & mask;
    }
}

mc_status mc_bpe_symbol(mc_bpe *b, const char *s, size_t len, int32_t *sym)
{
    int32_t found = b->sym_table ? mc_bpe_find_symbol(b, s, len) : -1;
    if (found >= 0) {
        *sym = found;
        return MC_OK;
    }
    if (len > UINT32_MAX || b->n_sym == INT32_MAX - 1)
        return mc_error(MC_ERR_FORMAT, "BPE symbol table overflow (%d symbols)", b->n_sym);
    int64_t cap = b->sym_cap;
    mc_status st;
    if ((st = grow((void **)&b->sym_off, sizeof(int64_t), b->n_sym, &cap, b->n_sym + 1)) ||
        (cap = b->sym_cap, st = grow((void **)&b->sym_len, sizeof(uint32_t), b->n_sym, &cap, b->n_sym + 1)) ||
        (cap = b->sym_cap, st = grow((void **)&b->sym_id, sizeof(int64_t), b->n_sym, &cap, b->n_sym + 1)))
        return st;
    b->sym_cap = (int32_t)cap;
    if ((st = grow((void **)&b->bytes, 1, b->bytes_len, &b->bytes_cap, b->bytes_len + (int64_t)len)))
        return st;
    int32_t id = b->n_sym++;
    memcpy(b->bytes + b->bytes_len, s, len);
    b->sym_off[id] = b->bytes_len;
    b->sym_len[id] = (uint32_t)len;
    b->sym_id[id] = -1;
    b->bytes_len += (int64_t)len;
    if ((uint64_t)b->n_sym * 2 > b->sym_table_cap) {
        if ((st = sym_table_rehash(b, b->sym_table_cap ? b->sym_table_cap * 2 : 1024)))
            return st;
    } else {
        sym_table_insert(b, id);
    }
    *sym = id;
    return MC_OK;
}

void mc_bpe_set_id(mc_bpe *b, int32_t sym, int64_t id) { b->sym_id[sym] = id; }
int64_t mc_bpe_get_id(const mc_bpe *b, int32_t sym) { return b->sym_id[sym]; }
int32_t mc_bpe_n_symbols(const mc_bpe *b) { return b->n_sym; }

const char *mc_bpe_symbol_bytes(const mc_bpe *b, int32_t sym, size_t *len)
{
    *len = b->sym_len[sym];
    return b->bytes + b->sym_off[sym];
}

/* ---- merges ------------------------------------------------------------------------------- */
static uint32_t merge_slot(const mc_bpe *b, uint64_t key)
{
    uint32_t mask = b->mcap - 1, i = (uint32_t)hash_pair(key) & mask;
    while (b->mkeys[i] && b->mkeys[i] != key)
        i = (i + 1) & mask;
    return i;
}

static mc_status merges_rehash(mc_bpe *b, uint32_t cap)
{
    uint64_t *ok = b->mkeys;
    int32_t *orank = b->mrank, *ores = b->mres;
    uint32_t ocap = b->mcap;
    b->mkeys = mc_calloc(cap, sizeof(uint64_t));
    b->mrank = mc_alloc(cap * sizeof(int32_t));
    b->mres = mc_alloc(cap * sizeof(int32_t));
    if (!b->mkeys || !b->mrank || !b->mres) {
        mc_free(b->mkeys);
        mc_free(b->mrank);
        mc_free(b->mres);
        b->mkeys = ok;
        b->mrank = orank;
        b->mres = ores;
        return MC_ERR_NOMEM;
    }
    b->mcap = cap;
    for (uint32_t i = 0; i < ocap; i++) {
        if (!ok[i])
            continue;
        uint32_t j = merge_slot(b, ok[i]);
        b->mkeys[j] = ok[i];
        b->mrank[j] = orank[i];
        b->mres[j] = ores[i];
    }
    mc_free(ok);
    mc_free(orank);
    mc_free(ores);
    return MC_OK;
}

mc_status mc_bpe_add_merge(mc_bpe *b, int32_t a, int32_t bb, int32_t rank)
{
    mc_status st;
    if ((uint64_t)(b->mcount + 1) * 2 > b->mcap &&
        (st = merges_rehash(b, b->mcap ? b->mcap * 2 : 1024)))
        return st;
    size_t la, lb;
    const char *pa = mc_bpe_symbol_bytes(b, a, &la);
    const char *pb = mc_bpe_symbol_bytes(b, bb, &lb);
    char stackbuf[256];
    char *cat = la + lb <= sizeof(stackbuf) ? stackbuf : mc_alloc(la + lb);
    if (!cat)
        return MC_ERR_NOMEM;
    memcpy(cat, pa, la); /* pa/pb may move when the symbol is added: copy first */
    memcpy(cat + la, pb, lb);
    int32_t res;
    st = mc_bpe_symbol(b, cat, la + lb, &res);
    if (cat != stackbuf)
        mc_free(cat);
    if (st)
        return st;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)bb) + 1;
    uint32_t i = merge_slot(b, key);
    if (!b->mkeys[i])
        b->mcount++;
    b->mkeys[i] = key;
    b->mrank[i] = rank;
    b->mres[i] = res;
    return MC_OK;
}

static inline int32_t merge_rank(const mc_bpe *b, int32_t a, int32_t bb, int32_t *res)
{
    if (!b->mcap || a < 0 || bb < 0) /* negative symbols (unknown) never merge */
        return NO_RANK;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)bb) + 1;
    uint32_t i = merge_slot(b, key);
    if (!b->mkeys[i])
        return NO_RANK;
    *res = b->mres[i];
    return b->mrank[i];
}

/* ---- init/free ---------------------------------------------------------------------------- */
mc_status mc_bpe_init(mc_bpe **out)
{
    mc_bpe *b = mc_calloc(1, sizeof(*b));
    if (!b)
        return MC_ERR_NOMEM;
    for (int i = 0; i < CACHE_SHARDS; i++)
        pthread_mutex_init(&b->shards[i].mu, NULL);
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        int32_t sym;
        mc_status st = mc_bpe_symbol(b, &ch, 1, &sym);
        if (st) {
            mc_bpe_free(b);
            return st;
        }
    }
    *out = b;
    return MC_OK;
}

void mc_bpe_free(mc_bpe *b)
{
    if (!b)
        return;
    for (int i = 0; i < CACHE_SHARDS; i++) {
        struct cache_shard *sh = &b->shards[i];
        mc_free(sh->slots);
        mc_free(sh->keys);
        mc_free(sh->ids);
        pthread_mutex_destroy(&sh->mu);
    }
    mc_free(b->mkeys);
    mc_free(b->mrank);
    mc_free(b->mres);
    mc_free(b->sym_table);
    mc_free(b->sym_off);
    mc_free(b->sym_len);
    mc_free(b->sym_id);
    mc_free(b->bytes);
    mc_free(b);
}

/* ---- cache -------------------------------------------------------------------------------- */
/* Appends the cached ids of s to out; false on a miss. out has room reserved by the caller. */
static bool cache_get(const mc_bpe *b, uint64_t h, const char *s, size_t len, struct mc_tokens *out)
{
    struct cache_shard *sh = (struct cache_shard *)&b->shards[h % CACHE_SHARDS];
    bool hit = false;
    pthread_mutex_lock(&sh->mu);
    if (sh->slots) {
        uint32_t i = (uint32_t)(h >> 8) & (CACHE_SLOTS - 1);
        for (; sh->slots[i].hash; i = (i + 1) & (CACHE_SLOTS - 1)) {
            const struct cache_slot *e = &sh->slots[i];
            if (e->hash == h && e->key_len == len && memcmp(sh->keys + e->key_off, s, len) == 0) {
                if (mc_tok_reserve(out, e->n_ids) == MC_OK) {
                    for (int k = 0; k < e->n_ids; k++)
                        out->data[out->len++] = sh->ids[e->ids_off + (uint32_t)k];
                    hit = true;
                }
                break;
            }
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return hit;
}

static void cache_put(const mc_bpe *b, uint64_t h, const char *s, size_t len, const int64_t *ids,
                      int64_t n)
{
    struct cache_shard *sh = (struct cache_shard *)&b->shards[h % CACHE_SHARDS];
    pthread_mutex_lock(&sh->mu);
    if (!sh->slots) {
        sh->slots = mc_calloc(CACHE_SLOTS, sizeof(struct cache_slot));
        sh->keys = mc_alloc(CACHE_KEY_BYTES);
        sh->ids = mc_alloc(CACHE_ID_COUNT * sizeof(int32_t));
        if (!sh->slots || !sh->keys || !sh->ids) { /* no cache is still correct */
            mc_free(sh->slots);
            mc_free(sh->keys);
            mc_free(sh->ids);
            sh->slots = NULL;
            sh->keys = NULL;
            sh->ids = NULL;
            goto out_unlock;
        }
    }
    if (sh->n_used + 1 > CACHE_SLOTS / 2 || sh->key_used + len > CACHE_KEY_BYTES ||
        sh->ids_used + (uint64_t)n > CACHE_ID_COUNT) {
        memset(sh->slots, 0, CACHE_SLOTS * sizeof(struct cache_slot)); /* full: start over */
        sh->n_used = sh->key_used = sh->ids_used = 0;
    }
    uint32_t i = (uint32_t)(h >> 8) & (CACHE_SLOTS - 1);
    while (sh->slots[i].hash) {
        if (sh->slots[i].hash == h && sh->slots[i].key_len == len &&
            memcmp(sh->keys + sh->slots[i].key_off, s, len) == 0)
            goto out_unlock; /* another thread added it */
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
    struct cache_slot *e = &sh->slots[i];
    e->hash = h;
    e->key_off = sh->key_used;
    e->key_len = (uint16_t)len;
    e->ids_off = sh->ids_used;
    e->n_ids = (uint16_t)n;
    memcpy(sh->keys + sh->key_used, s, len);
    sh->key_used += (uint32_t)len;
    for (int64_t k = 0; k < n; k++)
        sh->ids[sh->ids_used++] = (int32_t)ids[k];
    sh->n_used++;
out_unlock:
    pthread_mutex_unlock(&sh->mu);
}

/* ---- the merge loop ----------------------------------------------------------------------- */
static mc_status emit_symbols(const mc_bpe *b, const int32_t *sym, int64_t n, int64_t unknown_id,
                              struct mc_tokens *out)
{
    mc_status st = mc_tok_reserve(out, n);
    if (st)
        return st;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = b->sym_id[sym[i]];
        if (id < 0) {
            if (unknown_id < 0)
                return mc_error(MC_ERR_FORMAT, "BPE produced the symbol \"%.*s\" (%u bytes), "
                                "which is not in the vocabulary and there is no unknown token",
                                (int)b->sym_len[sym[i]], b->bytes + b->sym_off[sym[i]],
                                b->sym_len[sym[i]]);
            id = unknown_id;
        }
        out->data[out->len++] = id;
    }
    return MC_OK;
}

/* GPT-2's loop on sym[0..n); rank[i]/res[i] describe pair (i, i+1). Returns the new length. */
static int64_t merge_loop(const mc_bpe *b, int32_t *sym, int32_t *rank, int32_t *res, int64_t n)
{
    for (int64_t i = 0; i + 1 < n; i++)
        rank[i] = merge_rank(b, sym[i], sym[i + 1], &res[i]);
    while (n > 1) {
        int64_t best = -1;
        int32_t br = NO_RANK;
        for (int64_t i = 0; i + 1 < n; i++)
            if (rank[i] < br) {
                br = rank[i];
                best = i;
            }
        if (best < 0)
            break;
        int32_t A = sym[best], B = sym[best + 1], M = res[best];
        /* the first occurrence is at best (min picks the leftmost); merge the rest in one pass */
        int64_t w = best, k = best;
        while (k < n) {
            if (k + 1 < n && sym[k] == A && sym[k + 1] == B) {
                sym[w++] = M;
                k += 2;
            } else {
                sym[w++] = sym[k++];
            }
        }
        n = w;
        for (int64_t i = best > 0 ? best - 1 : 0; i + 1 < n; i++)
            rank[i] = merge_rank(b, sym[i], sym[i + 1], &res[i]);
    }
    return n;
}

/* The same loop for long pieces in O(n log n): a linked list of symbols and a min-heap of
 * (rank, position). Each round pops *all* entries of the lowest rank first (ranks are unique
 * per pair, so they are the occurrences of one pair, in position order) and merges the ones
 * still valid left to right; the pairs this creates go on the heap only afterwards. That is
 * GPT-2's round exactly: all occurrences of the best pair, before any newly formed pair.
 *
 * Memory is what bounds preprocess_data on a giant word (a 50 MB run of letters is one piece),
 * so the working set is kept small: no link arrays (a merged-away symbol is marked -1 and the
 * neighbours are found by stepping over the marks, at most the length of one vocab token), a
 * heap that starts at one entry per pair and drops its stale entries when it fills up (instead
 * of room for every push), and a round buffer that grows only as far as the largest round.
 * About 12 bytes per input symbol. */
struct heap64 {
    uint64_t *h;
    int64_t n, cap;
};

static void h64_sift_down(struct heap64 *q, int64_t i)
{
    uint64_t v = q->h[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && q->h[c + 1] < q->h[c])
            c++;
        if (q->h[c] >= v)
            break;
        q->h[i] = q->h[c];
        i = c;
    }
    q->h[i] = v;
}

static void h64_push(struct heap64 *q, uint64_t v)
{
    int64_t i = q->n++;
    while (i > 0 && q->h[(i - 1) / 2] > v) {
        q->h[i] = q->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->h[i] = v;
}

static uint64_t h64_pop(struct heap64 *q)
{
    uint64_t top = q->h[0];
    q->h[0] = q->h[--q->n];
    if (q->n)
        h64_sift_down(q, 0);
    return top;
}

struct long_word {
    const mc_bpe *b;
    int32_t *sym; /* -1: merged into the symbol on its left */
    int32_t n;
    struct heap64 q;
};

/* The live symbols right and left of position p; -1 at either end. */
static int32_t next_live(const struct long_word *w, int32_t p)
{
    do
        p++;
    while (p < w->n && w->sym[p] == -1);
    return p < w->n ? p : -1;
}

static int32_t prev_live(const struct long_word *w, int32_t p)
{
    do
        p--;
    while (p >= 0 && w->sym[p] == -1);
    return p;
}

/* Is heap entry v = (rank, pos) still the pair at pos? */
static bool entry_live(const struct long_word *w, uint64_t v)
{
    int32_t p = (int32_t)(v & 0xffffffffu), res, nx;
    return w->sym[p] >= 0 && (nx = next_live(w, p)) >= 0 &&
           merge_rank(w->b, w->sym[p], w->sym[nx], &res) == (int32_t)(v >> 32);
}

/* Room for one more entry: first drop the stale ones (re-heapify), grow only if that is not
 * enough to leave a quarter free, so the cost stays amortized O(1) per push. */
static mc_status heap_room(struct long_word *w)
{
    struct heap64 *q = &w->q;
    if (q->n < q->cap)
        return MC_OK;
    int64_t k = 0;
    for (int64_t i = 0; i < q->n; i++)
        if (entry_live(w, q->h[i]))
            q->h[k++] = q->h[i];
    q->n = k;
    for (int64_t i = k / 2 - 1; i >= 0; i--)
        h64_sift_down(q, i);
    if (q->n <= q->cap - q->cap / 4)
        return MC_OK;
    int64_t cap = q->cap + q->cap / 2 + 16;
    uint64_t *h = mc_alloc((size_t)cap * sizeof(uint64_t));
    if (!h)
        return MC_ERR_NOMEM;
    memcpy(h, q->h, (size_t)q->n * sizeof(uint64_t));
    mc_free(q->h);
    q->h = h;
    q->cap = cap;
    return MC_OK;
}

static mc_status push_pair(struct long_word *w, int32_t p, int32_t nx)
{
    int32_t res, r = merge_rank(w->b, w->sym[p], w->sym[nx], &res);
    if (r == NO_RANK)
        return MC_OK;
    mc_status st = heap_room(w);
    if (st == MC_OK)
        h64_push(&w->q, (uint64_t)r << 32 | (uint64_t)(uint32_t)p);
    return st;
}

static mc_status round_put(int32_t **round, int64_t *cap, int64_t nr, int32_t p)
{
    if (nr == *cap) {
        int64_t nc = *cap * 2;
        int32_t *r = mc_alloc((size_t)nc * sizeof(int32_t));
        if (!r)
            return MC_ERR_NOMEM;
        memcpy(r, *round, (size_t)nr * sizeof(int32_t));
        mc_free(*round);
        *round = r;
        *cap = nc;
    }
    (*round)[nr] = p;
    return MC_OK;
}

static mc_status merge_loop_long(const mc_bpe *b, int32_t *sym, int64_t n, int64_t *n_out)
{
    if (n >= INT32_MAX)
        return mc_error(MC_ERR_UNSUPPORTED, "a single pre-tokenized piece of %lld symbols is longer "
                        "than the BPE supports (2^31 - 1)", (long long)n);
    struct long_word w = {b, sym, (int32_t)n, {NULL, 0, n + 16}};
    int64_t round_cap = 1024;
    int32_t *round = mc_alloc((size_t)round_cap * sizeof(int32_t));
    w.q.h = mc_alloc((size_t)w.q.cap * sizeof(uint64_t));
    mc_status st = MC_OK;
    if (!round || !w.q.h) {
        st = MC_ERR_NOMEM;
        goto out_free;
    }
    for (int64_t i = 0; i + 1 < n && st == MC_OK; i++)
        st = push_pair(&w, (int32_t)i, (int32_t)(i + 1));
    int32_t res = -1;
    while (st == MC_OK && w.q.n) {
        uint32_t r0 = (uint32_t)(w.q.h[0] >> 32);
        int64_t nr = 0;
        while (st == MC_OK && w.q.n && (uint32_t)(w.q.h[0] >> 32) == r0) {
            int32_t pos = (int32_t)(h64_pop(&w.q) & 0xffffffffu);
            if (nr == 0 || round[nr - 1] != pos)
                st = round_put(&round, &round_cap, nr++, pos);
        }
        int64_t nt = 0;
        for (int64_t k = 0; st == MC_OK && k < nr; k++) {
            int32_t p = round[k], nx = sym[p] >= 0 ? next_live(&w, p) : -1;
            if (nx < 0 || merge_rank(b, sym[p], sym[nx], &res) != (int32_t)r0)
                continue; /* stale: this occurrence was consumed by an overlapping one */
            sym[p] = res;
            sym[nx] = -1;
            round[nt++] = p; /* reuse the array: merged positions, in order */
        }
        for (int64_t k = 0; st == MC_OK && k < nt; k++) {
            int32_t p = round[k];
            if (sym[p] < 0)
                continue;
            int32_t pv = prev_live(&w, p), nx = next_live(&w, p);
            if (pv >= 0 && sym[pv] >= 0)
                st = push_pair(&w, pv, p);
            if (st == MC_OK && nx >= 0)
                st = push_pair(&w, p, nx);
        }
    }
    if (st == MC_OK) {
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++)
            if (sym[i] != -1)
                sym[k++] = sym[i];
        *n_out = k;
    }
out_free:
    mc_free(round);
    mc_free(w.q.h);
    return st;
}

#define LONG_WORD 64

mc_status mc_bpe_encode_word(const mc_bpe *b, const char *s, size_t len, int64_t unknown_id,
                             struct mc_tokens *out)
{
    if (len == 0)
        return MC_OK;
    if (len == 1) {
        int32_t sym = (unsigned char)s[0];
        return emit_symbols(b, &sym, 1, unknown_id, out);
    }
    uint64_t h = 0;
    if (len <= CACHE_MAX_WORD) {
        h = hash_bytes(s, len);
        if (cache_get(b, h, s, len, out))
            return MC_OK;
    }
    int32_t stack_buf[3 * LONG_WORD], *buf = stack_buf;
    if (len > LONG_WORD && !(buf = mc_alloc(len * sizeof(int32_t))))
        return MC_ERR_NOMEM;
    int32_t *sym = buf;
    for (size_t i = 0; i < len; i++)
        sym[i] = (unsigned char)s[i];
    int64_t n = 0;
    mc_status st = MC_OK;
    if (len > LONG_WORD)
        st = merge_loop_long(b, sym, (int64_t)len, &n);
    else
        n = merge_loop(b, sym, buf + len, buf + 2 * len, (int64_t)len);
    int64_t start = out->len;
    if (st == MC_OK)
        st = emit_symbols(b, sym, n, unknown_id, out);
    if (st == MC_OK && h && n <= UINT16_MAX)
        cache_put(b, h, s, len, out->data + start, n);
    if (buf != stack_buf)
        mc_free(buf);
    return st;
}

/* ---- GPT-2's byte alphabet ---------------------------------------------------------------- */
static bool byte_is_printable(int c)
{
    return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255);
}

uint32_t mc_bpe_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b))
        return b;
    /* the non-printable bytes, in increasing order, take 256, 257, ... */
    uint32_t k = 0;
    for (int c = 0; c < b; c++)
        if (!byte_is_printable(c))
            k++;
    return 256 + k;
}

int mc_bpe_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t k = 0;
    for (int c = 0; c < 256; c++)
        if (!byte_is_printable(c) && k++ == cp - 256)
            return c;
    return -1;
}

/* code point -> byte, so that loading 100k+ vocab strings stays fast */
static int16_t unmap_table[324];
static pthread_once_t unmap_once = PTHREAD_ONCE_INIT;

static void fill_unmap_table(void)
{
    for (uint32_t cp = 0; cp < 324; cp++)
        unmap_table[cp] = (int16_t)mc_bpe_cp_to_byte(cp);
}

int64_t mc_bpe_unmap(char *o, const char *s, size_t len)
{
    pthread_once(&unmap_once, fill_unmap_table);
    int64_t n = 0;
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        uint32_t cp;
        int l = mc_utf8_decode(p, end, &cp);
        if (!l || cp >= 324 || unmap_table[cp] < 0)
            return -1;
        o[n++] = (char)unmap_table[cp];
        p += l;
    }
    return n;
}

/* ---- character-level BPE (HuggingFace models without ByteLevel, e.g. Llama-2/Mistral) ------- */
#define UNK_SYM (-2)

/* Initial symbols of HF's BPE::merge_word: each character if the vocab has it, else its bytes
 * as <0xXX> tokens (byte_fallback, all of them must exist), else one unknown (a run of unknown
 * characters is one unknown when fuse_unk). Returns the count, or -1 for a character that has
 * no token at all (HF would drop it silently). */
static int64_t char_symbols(const mc_bpe *b, const char *s, size_t len, bool byte_fallback,
                            bool has_unk, bool fuse_unk, int32_t *sym, size_t *bad_at)
{
    int64_t n = 0;
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    while (p < end) {
        uint32_t cp;
        int l = mc_utf8_decode(p, end, &cp);
        if (!l)
            l = 1; /* the caller validated UTF-8 */
        int32_t c = mc_bpe_find_symbol(b, (const char *)p, (size_t)l);
        if (c >= 0 && b->sym_id[c] >= 0) {
            sym[n++] = c;
        } else {
            int64_t k = 0;
            bool all = byte_fallback;
            for (int i = 0; all && i < l; i++) {
                char name[8];
                snprintf(name, sizeof(name), "<0x%02X>", p[i]);
                int32_t bs = mc_bpe_find_symbol(b, name, 6);
                all = bs >= 0 && b->sym_id[bs] >= 0;
                sym[n + k++] = bs;
            }
            if (all) {
                n += k;
            } else if (has_unk) {
                if (!(fuse_unk && n > 0 && sym[n - 1] == UNK_SYM))
                    sym[n++] = UNK_SYM;
            } else {
                *bad_at = (size_t)(p - (const unsigned char *)s);
                return -1;
            }
        }
        p += l;
    }
    return n;
}

mc_status mc_bpe_encode_chars(const mc_bpe *b, const char *s, size_t len, bool byte_fallback,
                              int64_t unk_id, bool fuse_unk, struct mc_tokens *out)
{
    if (len == 0)
        return MC_OK;
    uint64_t h = 0;
    if (len <= CACHE_MAX_WORD) {
        h = hash_bytes(s, len);
        if (cache_get(b, h, s, len, out))
            return MC_OK;
    }
    /* a character gives at most 4 byte symbols, and never more than its bytes */
    int32_t stack_buf[3 * LONG_WORD], *buf = stack_buf;
    if (len > LONG_WORD && !(buf = mc_alloc(3 * len * sizeof(int32_t))))
        return MC_ERR_NOMEM;
    size_t bad_at = 0;
    int64_t n = char_symbols(b, s, len, byte_fallback, unk_id >= 0, fuse_unk, buf, &bad_at);
    mc_status st = MC_OK;
    if (n < 0)
        st = mc_error(MC_ERR_FORMAT, "the character at byte %zu of \"%.*s\" has no token: the "
                      "model has neither it, byte_fallback, nor an unk_token (HuggingFace drops "
                      "such characters silently)", bad_at, (int)(len > 40 ? 40 : len), s);
    else if (n > LONG_WORD)
        st = merge_loop_long(b, buf, n, &n);
    else
        n = merge_loop(b, buf, buf + n, buf + 2 * n, n);
    int64_t start = out->len;
    if (st == MC_OK && (st = mc_tok_reserve(out, n)) == MC_OK)
        for (int64_t i = 0; i < n; i++)
            out->data[out->len++] = buf[i] == UNK_SYM ? unk_id : b->sym_id[buf[i]];
    if (st == MC_OK && h && n <= UINT16_MAX)
        cache_put(b, h, s, len, out->data + start, n);
    if (buf != stack_buf)
        mc_free(buf);
    return st;
}
