/* SentencePiece tokenizers: mirrors _SentencePieceTokenizer, _GPTSentencePieceTokenizer and
 * _Llama2Tokenizer in megatron/training/tokenizer/tokenizer.py, and re-implements the parts of
 * the sentencepiece library they call (SentencePieceProcessor encode_as_ids / decode_ids):
 *   - the .model file (a ModelProto protobuf), read with a small wire-format reader;
 *   - the normalizer: precompiled charsmap (a darts-clone double-array trie + replacement
 *     strings, e.g. nmt_nfkc), user-defined symbols kept whole, remove_extra_whitespaces,
 *     add_dummy_prefix, escape_whitespaces (' ' -> U+2581), treat_whitespace_as_suffix;
 *   - unigram models: the optimized Viterbi of unigram_model.cc (float scores, user-defined
 *     bonus, unknown penalty min_score - 10);
 *   - BPE models: bpe_model.cc's agenda of adjacent pairs by piece score, unused-piece
 *     resegmentation;
 *   - unknown runs merged into one <unk>, or byte fallback to <0xXX> pieces.
 * WORD and CHAR models are refused. */
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <float.h>
#include <stdio.h>
#include <string.h>

enum { PT_NORMAL = 1, PT_UNKNOWN = 2, PT_CONTROL = 3, PT_USER = 4, PT_UNUSED = 5, PT_BYTE = 6 };
enum { MODEL_UNIGRAM = 1, MODEL_BPE = 2, MODEL_WORD = 3, MODEL_CHAR = 4 };

/* ---- byte trie ------------------------------------------------------------------------------ */
struct trie {
    uint64_t *keys; /* (node << 8 | byte) + 1, 0 empty */
    int32_t *child;
    uint32_t cap, n;
    int32_t *value; /* per node: piece id or -1 */
    int32_t n_nodes, cap_nodes;
};

static uint32_t trie_slot(const struct trie *t, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t mask = t->cap - 1, i = (uint32_t)(h >> 32) & mask;
    while (t->keys[i] && t->keys[i] != key)
        i = (i + 1) & mask;
    return i;
}

static inline int32_t trie_step(const struct trie *t, int32_t node, unsigned char b)
{
    if (!t->cap)
        return -1;
    uint32_t i = trie_slot(t, (((uint64_t)node << 8) | b) + 1);
    return t->keys[i] ? t->child[i] : -1;
}

static mc_status trie_new_node(struct trie *t, int32_t *out)
{
    if (t->n_nodes == t->cap_nodes) {
        int32_t cap = t->cap_nodes ? t->cap_nodes * 2 : 256;
        int32_t *v = mc_alloc((size_t)cap * sizeof(int32_t));
        if (!v)
            return MC_ERR_NOMEM;
        if (t->n_nodes)
            memcpy(v, t->value, (size_t)t->n_nodes * sizeof(int32_t));
        mc_free(t->value);
        t->value = v;
        t->cap_nodes = cap;
    }
    t->value[t->n_nodes] = -1;
    *out = t->n_nodes++;
    return MC_OK;
}

static mc_status trie_grow(struct trie *t)
{
    uint32_t ocap = t->cap, cap = ocap ? ocap * 2 : 1024;
    uint64_t *ok = t->keys;
    int32_t *oc = t->child;
    t->keys = mc_calloc(cap, sizeof(uint64_t));
    t->child = mc_alloc(cap * sizeof(int32_t));
    if (!t->keys || !t->child) {
        mc_free(t->keys);
        mc_free(t->child);
        t->keys = ok;
        t->child = oc;
        return MC_ERR_NOMEM;
    }
    t->cap = cap;
    for (uint32_t i = 0; i < ocap; i++)
        if (ok[i]) {
            uint32_t j = trie_slot(t, ok[i]);
            t->keys[j] = ok[i];
            t->child[j] = oc[i];
        }
    mc_free(ok);
    mc_free(oc);
    return MC_OK;
}

/* Inserts s -> id; an existing entry keeps its first id (sentencepiece rejects duplicates). */
static mc_status trie_insert(struct trie *t, const char *s, size_t len, int32_t id)
{
    mc_status st;
    int32_t node = 0;
    if (!t->n_nodes && (st = trie_new_node(t, &node)))
        return st;
    node = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t c = trie_step(t, node, (unsigned char)s[i]);
        if (c < 0) {
            if ((t->n + 1) * 2 > t->cap && (st = trie_grow(t)))
                return st;
            if ((st = trie_new_node(t, &c)))
                return st;
            uint32_t j = trie_slot(t, (((uint64_t)node << 8) | (unsigned char)s[i]) + 1);
            t->keys[j] = (((uint64_t)node << 8) | (unsigned char)s[i]) + 1;
            t->child[j] = c;
            t->n++;
        }
        node = c;
    }
    if (t->value[node] < 0)
        t->value[node] = id;
    return MC_OK;
}

static int32_t trie_find(const struct trie *t, const char *s, size_t len)
{
    if (!t->n_nodes)
        return -1;
    int32_t node = 0;
    for (size_t i = 0; i < len && node >= 0; i++)
        node = trie_step(t, node, (unsigned char)s[i]);
    return node >= 0 ? t->value[node] : -1;
}

/* Length of the longest entry that prefixes s[0..len), 0 if none. */
static size_t trie_longest_prefix(const struct trie *t, const char *s, size_t len)
{
    size_t best = 0;
    int32_t node = 0;
    if (!t->n_nodes)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if ((node = trie_step(t, node, (unsigned char)s[i])) < 0)
            break;
        if (t->value[node] >= 0)
            best = i + 1;
    }
    return best;
}

static void trie_free(struct trie *t)
{
    mc_free(t->keys);
    mc_free(t->child);
    mc_free(t->value);
}

/* ---- the model ---------------------------------------------------------------------------- */
struct spm {
    int kind; /* 0 SentencePieceTokenizer, 1 GPTSentencePieceTokenizer, 2 Llama2Tokenizer */
    /* pieces */
    int32_t n_pieces;
    char *piece_bytes;
    uint32_t *piece_off, *piece_len;
    float *score;
    uint8_t *type;
    struct trie normal, reserved, user;
    int32_t unk_id, bos_id, eos_id, pad_id; /* as SentencePieceProcessor reports them */
    int32_t byte_id[256];
    float min_score, max_score;
    /* trainer/normalizer spec */
    int model_type;
    bool byte_fallback, treat_ws_suffix, add_dummy_prefix, remove_extra_ws, escape_ws;
    bool has_denormalizer;
    char unk_surface[64];
    uint32_t *darts; /* precompiled charsmap */
    size_t n_darts;
    const char *charsmap_strings;
    size_t charsmap_strings_len;
    char *charsmap_copy;
    /* Megatron's SentencePieceTokenizer special tokens, in insertion order */
    int n_special;
    char special[7][64];
    int64_t special_id[7];
};

/* ---- protobuf wire format -------------------------------------------------------------------- */
struct pb {
    const unsigned char *p, *end;
};

static bool pb_varint(struct pb *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
        unsigned char c = *b->p++;
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            return true;
    }
    return false;
}

/* Next field: number, wire type, and for LEN fields the payload; for varints *v. */
static bool pb_field(struct pb *b, uint32_t *field, int *wt, uint64_t *v, struct pb *sub)
{
    uint64_t key;
    if (!pb_varint(b, &key))
        return false;
    *field = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return pb_varint(b, v);
    case 1:
        if (b->end - b->p < 8)
            return false;
        memcpy(v, b->p, 8);
        b->p += 8;
        return true;
    case 5: {
        uint32_t x;
        if (b->end - b->p < 4)
            return false;
        memcpy(&x, b->p, 4);
        *v = x;
        b->p += 4;
        return true;
    }
    case 2:
        if (!pb_varint(b, v) || *v > (uint64_t)(b->end - b->p))
            return false;
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return true;
    default:
        return false; /* groups are not used by sentencepiece */
    }
}

static void spm_free(void *impl)
{
    struct spm *m = impl;
    if (!m)
        return;
    mc_free(m->piece_bytes);
    mc_free(m->piece_off);
    mc_free(m->piece_len);
    mc_free(m->score);
    mc_free(m->type);
    trie_free(&m->normal);
    trie_free(&m->reserved);
    trie_free(&m->user);
    mc_free(m->darts);
    mc_free(m->charsmap_copy);
    mc_free(m);
}

#define BAD(path) mc_error(MC_ERR_FORMAT, "%s: not a valid SentencePiece model (protobuf ModelProto)", path)

static void copy_str(char *dst, size_t cap, const struct pb *s)
{
    size_t n = (size_t)(s->end - s->p);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s->p, n);
    dst[n] = '\0';
}

struct spec_strings {
    char unk[64], bos[64], eos[64], pad[64];
};

static mc_status read_trainer_spec(struct spm *m, struct pb b, struct spec_strings *ss, const char *path)
{
    uint32_t f;
    int wt;
    uint64_t v;
    struct pb sub;
    while (b.p < b.end) {
        if (!pb_field(&b, &f, &wt, &v, &sub))
            return BAD(path);
        if (f == 3 && wt == 0) m->model_type = (int)v;
        else if (f == 24 && wt == 0) m->treat_ws_suffix = v != 0;
        else if (f == 35 && wt == 0) m->byte_fallback = v != 0;
        else if (f == 44 && wt == 2) copy_str(m->unk_surface, sizeof(m->unk_surface), &sub);
        else if (f == 45 && wt == 2) copy_str(ss->unk, sizeof(ss->unk), &sub);
        else if (f == 46 && wt == 2) copy_str(ss->bos, sizeof(ss->bos), &sub);
        else if (f == 47 && wt == 2) copy_str(ss->eos, sizeof(ss->eos), &sub);
        else if (f == 48 && wt == 2) copy_str(ss->pad, sizeof(ss->pad), &sub);
    }
    return MC_OK;
}

static mc_status read_normalizer_spec(struct spm *m, struct pb b, const char *path)
{
    uint32_t f;
    int wt;
    uint64_t v;
    struct pb sub;
    while (b.p < b.end) {
        if (!pb_field(&b, &f, &wt, &v, &sub))
            return BAD(path);
        if (f == 2 && wt == 2 && sub.end > sub.p) {
            size_t n = (size_t)(sub.end - sub.p);
            uint32_t trie_size;
            if (n <= 4)
                return mc_error(MC_ERR_FORMAT, "%s: precompiled_charsmap is broken", path);
            memcpy(&trie_size, sub.p, 4); /* little-endian; this code assumes an LE host */
            if (trie_size >= n - 4 + 1 || trie_size % 4)
                return mc_error(MC_ERR_FORMAT, "%s: precompiled_charsmap trie size %u exceeds "
                                "the blob (%zu bytes)", path, trie_size, n);
            m->n_darts = trie_size / 4;
            m->darts = mc_alloc(trie_size ? trie_size : 4);
            m->charsmap_copy = mc_alloc(n - 4 - trie_size + 1);
            if (!m->darts || !m->charsmap_copy)
                return MC_ERR_NOMEM;
            memcpy(m->darts, sub.p + 4, trie_size);
            memcpy(m->charsmap_copy, sub.p + 4 + trie_size, n - 4 - trie_size);
            m->charsmap_copy[n - 4 - trie_size] = '\0';
            m->charsmap_strings = m->charsmap_copy;
            m->charsmap_strings_len = n - 4 - trie_size;
        } else if (f == 3 && wt == 0) m->add_dummy_prefix = v != 0;
        else if (f == 4 && wt == 0) m->remove_extra_ws = v != 0;
        else if (f == 5 && wt == 0) m->escape_ws = v != 0;
    }
    return MC_OK;
}

static mc_status add_piece(struct spm *m, struct pb b, size_t *used, const char *path)
{
    uint32_t f;
    int wt;
    uint64_t v;
    struct pb sub, piece = {NULL, NULL};
    float score = 0;
    int type = PT_NORMAL;
    while (b.p < b.end) {
        if (!pb_field(&b, &f, &wt, &v, &sub))
            return BAD(path);
        if (f == 1 && wt == 2) piece = sub;
        else if (f == 2 && wt == 5) { uint32_t x = (uint32_t)v; memcpy(&score, &x, 4); }
        else if (f == 3 && wt == 0) type = (int)v;
    }
    int32_t id = m->n_pieces++;
    size_t n = piece.p ? (size_t)(piece.end - piece.p) : 0;
    if (n == 0)
        return mc_error(MC_ERR_FORMAT, "%s: piece %d is empty", path, id);
    if (type < PT_NORMAL || type > PT_BYTE)
        return mc_error(MC_ERR_FORMAT, "%s: piece %d has unknown type %d", path, id, type);
    memcpy(m->piece_bytes + *used, piece.p, n);
    m->piece_off[id] = (uint32_t)*used;
    m->piece_len[id] = (uint32_t)n;
    m->score[id] = score;
    m->type[id] = (uint8_t)type;
    *used += n;
    return MC_OK;
}

static const char *piece_str(const struct spm *m, int32_t id) { return m->piece_bytes + m->piece_off[id]; }

/* PieceToId: reserved (control/unknown/byte) first, then normal pieces, else unk. */
static int32_t piece_to_id(const struct spm *m, const char *s, size_t n)
{
    int32_t id = trie_find(&m->reserved, s, n);
    if (id < 0)
        id = trie_find(&m->normal, s, n);
    return id < 0 ? m->unk_id : id;
}

/* Checks and indexes the pieces as ModelInterface::InitializePieces does. */
static mc_status index_pieces(struct spm *m, const char *path)
{
    mc_status st;
    bool byte_found[256] = {false};
    m->unk_id = -1;
    m->min_score = FLT_MAX;
    m->max_score = FLT_MIN; /* sic: sentencepiece starts the max at FLT_MIN, not -FLT_MAX */
    for (int32_t i = 0; i < m->n_pieces; i++) {
        int t = m->type[i];
        const char *s = piece_str(m, i);
        size_t n = m->piece_len[i];
        bool normal = t == PT_NORMAL || t == PT_USER || t == PT_UNUSED;
        struct trie *tr = normal ? &m->normal : &m->reserved;
        if (trie_find(tr, s, n) >= 0)
            return mc_error(MC_ERR_FORMAT, "%s: piece %.*s is already defined", path, (int)n, s);
        if ((st = trie_insert(tr, s, n, i)))
            return st;
        if (t == PT_USER && (st = trie_insert(&m->user, s, n, i)))
            return st;
        if (t == PT_UNKNOWN) {
            if (m->unk_id >= 0)
                return mc_error(MC_ERR_FORMAT, "%s: unk is already defined", path);
            m->unk_id = i;
        }
        if (t == PT_BYTE) {
            unsigned x;
            if (!m->byte_fallback)
                return mc_error(MC_ERR_FORMAT, "%s: byte piece %.*s is found although "
                                "byte_fallback is false", path, (int)n, s);
            if (n != 6 || sscanf(s, "<0x%2X>", &x) != 1 || x > 255)
                return mc_error(MC_ERR_FORMAT, "%s: byte piece %.*s is invalid", path, (int)n, s);
            byte_found[x] = true;
            m->byte_id[x] = i;
        }
        if (t == PT_NORMAL) {
            if (m->score[i] < m->min_score) m->min_score = m->score[i];
            if (m->score[i] > m->max_score) m->max_score = m->score[i];
        }
    }
    if (m->unk_id < 0)
        return mc_error(MC_ERR_FORMAT, "%s: unk is not defined", path);
    for (int b = 0; m->byte_fallback && b < 256; b++)
        if (!byte_found[b])
            return mc_error(MC_ERR_FORMAT, "%s: there are not 256 byte pieces although "
                            "byte_fallback is true", path);
    return MC_OK;
}

static mc_status load_model(struct spm *m, const char *data, size_t n, const char *path)
{
    struct pb b = {(const unsigned char *)data, (const unsigned char *)data + n}, sub;
    uint32_t f;
    int wt;
    uint64_t v;
    int32_t count = 0;
    while (b.p < b.end) { /* first pass: count pieces */
        if (!pb_field(&b, &f, &wt, &v, &sub))
            return BAD(path);
        count += f == 1 && wt == 2;
    }
    if (count == 0)
        return mc_error(MC_ERR_FORMAT, "%s: the model has no pieces", path);
    m->piece_bytes = mc_alloc(n);
    m->piece_off = mc_alloc((size_t)count * sizeof(uint32_t));
    m->piece_len = mc_alloc((size_t)count * sizeof(uint32_t));
    m->score = mc_alloc((size_t)count * sizeof(float));
    m->type = mc_alloc((size_t)count);
    if (!m->piece_bytes || !m->piece_off || !m->piece_len || !m->score || !m->type)
        return MC_ERR_NOMEM;
    struct spec_strings ss = {"<unk>", "<s>", "</s>", "<pad>"};
    m->model_type = MODEL_UNIGRAM;
    m->add_dummy_prefix = m->remove_extra_ws = m->escape_ws = true;
    snprintf(m->unk_surface, sizeof(m->unk_surface), " \xE2\x81\x87 ");
    struct pb trainer = {NULL, NULL}, norm = {NULL, NULL};
    size_t used = 0;
    mc_status st;
    b.p = (const unsigned char *)data;
    while (b.p < b.end) {
        pb_field(&b, &f, &wt, &v, &sub);
        if (f == 1 && wt == 2 && (st = add_piece(m, sub, &used, path)))
            return st;
        if (f == 2 && wt == 2) trainer = sub;
        if (f == 3 && wt == 2) norm = sub;
        if (f == 5 && wt == 2) m->has_denormalizer = sub.end > sub.p;
    }
    /* the trainer spec first: byte_fallback is needed to check the pieces */
    if ((trainer.p && (st = read_trainer_spec(m, trainer, &ss, path))) ||
        (norm.p && (st = read_normalizer_spec(m, norm, path))) || (st = index_pieces(m, path)))
        return st;
    if (ss.unk[0] == '\0') snprintf(ss.unk, sizeof(ss.unk), "<unk>");
    if (ss.bos[0] == '\0') snprintf(ss.bos, sizeof(ss.bos), "<s>");
    if (ss.eos[0] == '\0') snprintf(ss.eos, sizeof(ss.eos), "</s>");
    if (ss.pad[0] == '\0') snprintf(ss.pad, sizeof(ss.pad), "<pad>");
    int32_t id;
    id = piece_to_id(m, ss.bos, strlen(ss.bos));
    m->bos_id = m->type[id] == PT_CONTROL ? id : -1;
    id = piece_to_id(m, ss.eos, strlen(ss.eos));
    m->eos_id = m->type[id] == PT_CONTROL ? id : -1;
    id = piece_to_id(m, ss.pad, strlen(ss.pad));
    m->pad_id = m->type[id] == PT_CONTROL ? id : -1;
    if (m->model_type != MODEL_UNIGRAM && m->model_type != MODEL_BPE)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: SentencePiece model_type %s is not supported "
                        "(UNIGRAM and BPE are)", path, m->model_type == MODEL_WORD ? "WORD" :
                        m->model_type == MODEL_CHAR ? "CHAR" : "unknown");
    return MC_OK;
}

/* ---- normalizer ------------------------------------------------------------------------------ */
struct sbuf {
    char *d;
    size_t n, cap;
};

static mc_status sb_put(struct sbuf *b, const char *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n)
            cap *= 2;
        char *d = mc_alloc(cap);
        if (!d)
            return MC_ERR_NOMEM;
        if (b->n)
            memcpy(d, b->d, b->n);
        mc_free(b->d);
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, s, n);
    b->n += n;
    return MC_OK;
}

/* darts-clone commonPrefixSearch over the charsmap, keeping the longest match. */
static mc_status charsmap_longest(const struct spm *m, const unsigned char *s, size_t n,
                                  size_t *len, uint32_t *value)
{
    *len = 0;
    if (!m->n_darts)
        return MC_OK;
    size_t pos = 0;
#define UNIT_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
#define UNIT_LABEL(u) ((u) & ((1u << 31) | 0xFFu))
    uint32_t unit = m->darts[0];
    pos ^= UNIT_OFFSET(unit);
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= m->n_darts)
            return MC_OK;
        unit = m->darts[pos];
        if (UNIT_LABEL(unit) != s[i])
            return MC_OK;
        pos ^= UNIT_OFFSET(unit);
        if ((unit >> 8) & 1) {
            if (pos >= m->n_darts)
                return mc_error(MC_ERR_FORMAT, "precompiled_charsmap trie is corrupt");
            uint32_t v = m->darts[pos] & ((1u << 31) - 1);
            if (v >= m->charsmap_strings_len)
                return mc_error(MC_ERR_FORMAT, "precompiled_charsmap value %u out of range", v);
            *len = i + 1;
            *value = v;
        }
    }
    return MC_OK;
#undef UNIT_OFFSET
#undef UNIT_LABEL
}

/* NormalizePrefix: (replacement, consumed bytes) at s. */
static mc_status normalize_prefix(const struct spm *m, const char *s, size_t n, const char **rep,
                                  size_t *rep_len, size_t *consumed)
{
    size_t ul = trie_longest_prefix(&m->user, s, n);
    if (ul) {
        *rep = s;
        *rep_len = *consumed = ul;
        return MC_OK;
    }
    size_t len;
    uint32_t value = 0;
    mc_status st = charsmap_longest(m, (const unsigned char *)s, n, &len, &value);
    if (st)
        return st;
    if (len) {
        *rep = m->charsmap_strings + value;
        *rep_len = strlen(*rep); /* entries are NUL-terminated */
        *consumed = len;
        return MC_OK;
    }
    uint32_t cp;
    int l = mc_utf8_decode((const unsigned char *)s, (const unsigned char *)s + n, &cp);
    if (!l)
        return mc_error(MC_ERR_FORMAT, "text is not valid UTF-8 (byte 0x%02x)", (unsigned char)*s);
    *rep = s;
    *rep_len = *consumed = (size_t)l;
    return MC_OK;
}

static const char SPACE_SYM[] = "\xe2\x96\x81";

static mc_status normalize(const struct spm *m, const char *in, size_t n, struct sbuf *out)
{
    out->n = 0;
    mc_status st;
    const char *rep;
    size_t rl, used;
    if (m->remove_extra_ws) /* drop leading spaces */
        while (n) {
            if ((st = normalize_prefix(m, in, n, &rep, &rl, &used)))
                return st;
            if (!(rl == 1 && rep[0] == ' '))
                break;
            in += used;
            n -= used;
        }
    if (!n)
        return MC_OK;
    const char *ws = m->escape_ws ? SPACE_SYM : " ";
    size_t wsl = m->escape_ws ? 3 : 1;
    if (!m->treat_ws_suffix && m->add_dummy_prefix && (st = sb_put(out, ws, wsl)))
        return st;
    bool prev_space = m->remove_extra_ws;
    while (n) {
        if ((st = normalize_prefix(m, in, n, &rep, &rl, &used)))
            return st;
        while (prev_space && rl && rep[0] == ' ') {
            rep++;
            rl--;
        }
        if (rl) {
            for (size_t k = 0; k < rl; k++)
                if ((st = m->escape_ws && rep[k] == ' ' ? sb_put(out, SPACE_SYM, 3) : sb_put(out, rep + k, 1)))
                    return st;
            prev_space = rep[rl - 1] == ' ';
        }
        in += used;
        n -= used;
        if (!m->remove_extra_ws)
            prev_space = false;
    }
    if (m->remove_extra_ws)
        while (out->n >= wsl && memcmp(out->d + out->n - wsl, ws, wsl) == 0)
            out->n -= wsl;
    if (m->treat_ws_suffix && m->add_dummy_prefix && (st = sb_put(out, ws, wsl)))
        return st;
    return MC_OK;
}

static inline size_t one_char_len(unsigned char c)
{
    static const unsigned char t[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return t[c >> 4];
}

/* ---- unigram ------------------------------------------------------------------------------- */
struct piece_out { /* one encoded piece: bytes [off, off+len) of the normalized text, its id */
    size_t off, len;
    int32_t id;
};

struct pieces {
    struct piece_out *p;
    size_t n, cap;
};

static mc_status pieces_push(struct pieces *ps, size_t off, size_t len, int32_t id)
{
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 64;
        struct piece_out *np = mc_alloc(cap * sizeof(*np));
        if (!np)
            return MC_ERR_NOMEM;
        if (ps->n)
            memcpy(np, ps->p, ps->n * sizeof(*np));
        mc_free(ps->p);
        ps->p = np;
        ps->cap = cap;
    }
    ps->p[ps->n++] = (struct piece_out){off, len, id};
    return MC_OK;
}

static mc_status unigram_encode(const struct spm *m, const char *s, size_t size, struct pieces *out)
{
    struct node {
        float score;
        int32_t id;
        int64_t starts_at;
    } *best = mc_alloc((size + 1) * sizeof(struct node));
    if (!best)
        return MC_ERR_NOMEM;
    for (size_t i = 0; i <= size; i++)
        best[i] = (struct node){0.0f, -1, -1};
    const float unk_score = m->min_score - 10.0f;
    for (size_t start = 0; start < size;) {
        const float till_here = best[start].score;
        bool has_single = false;
        size_t mblen = one_char_len((unsigned char)s[start]);
        if (mblen > size - start)
            mblen = size - start;
        int32_t node = 0;
        for (size_t k = start; k < size && m->normal.n_nodes;) {
            if ((node = trie_step(&m->normal, node, (unsigned char)s[k])) < 0)
                break;
            k++;
            int32_t id = m->normal.value[node];
            if (id < 0 || m->type[id] == PT_UNUSED)
                continue;
            size_t length = k - start;
            /* float/double mix as in unigram_model.cc: the ternary is double */
            double score = m->type[id] == PT_USER ? (double)((float)length * m->max_score) - 0.1
                                                  : (double)m->score[id];
            double cand = score + (double)till_here;
            struct node *t = &best[k];
            if (t->starts_at == -1 || cand > (double)t->score) {
                t->score = (float)cand;
                t->starts_at = (int64_t)start;
                t->id = id;
            }
            if (!has_single && length == mblen)
                has_single = true;
        }
        if (!has_single) {
            struct node *t = &best[start + mblen];
            float cand = unk_score + till_here;
            if (t->starts_at == -1 || cand > t->score) {
                t->score = cand;
                t->starts_at = (int64_t)start;
                t->id = m->unk_id;
            }
        }
        start += mblen;
    }
    /* backtrack, then reverse */
    size_t first = out->n;
    mc_status st = MC_OK;
    for (size_t end = size; end > 0 && st == MC_OK;) {
        const struct node *nd = &best[end];
        st = pieces_push(out, (size_t)nd->starts_at, end - (size_t)nd->starts_at, nd->id);
        end = (size_t)nd->starts_at;
    }
    for (size_t i = first, j = out->n ? out->n - 1 : 0; st == MC_OK && i < j; i++, j--) {
        struct piece_out t = out->p[i];
        out->p[i] = out->p[j];
        out->p[j] = t;
    }
    mc_free(best);
    return st;
}

/* ---- BPE --------------------------------------------------------------------------------- */
struct sym {
    int64_t prev, next;
    size_t off, len; /* len 0: merged away */
    bool freeze;
};

struct pair {
    int64_t left, right;
    float score;
    size_t size;
};

struct agenda {
    struct pair *h;
    size_t n, cap;
};

static bool pair_before(const struct pair *a, const struct pair *b) /* a pops first */
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static mc_status agenda_push(struct agenda *a, struct pair p)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        struct pair *h = mc_alloc(cap * sizeof(*h));
        if (!h)
            return MC_ERR_NOMEM;
        if (a->n)
            memcpy(h, a->h, a->n * sizeof(*h));
        mc_free(a->h);
        a->h = h;
        a->cap = cap;
    }
    size_t i = a->n++;
    while (i > 0 && pair_before(&p, &a->h[(i - 1) / 2])) {
        a->h[i] = a->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    a->h[i] = p;
    return MC_OK;
}

static struct pair agenda_pop(struct agenda *a)
{
    struct pair top = a->h[0], last = a->h[--a->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= a->n)
            break;
        if (c + 1 < a->n && pair_before(&a->h[c + 1], &a->h[c]))
            c++;
        if (!pair_before(&a->h[c], &last))
            break;
        a->h[i] = a->h[c];
        i = c;
    }
    if (a->n)
        a->h[i] = last;
    return top;
}

struct revmerge { /* unused merged piece -> its two halves (offsets in the normalized text) */
    size_t off, len, left_len;
};

struct bpe_state {
    const struct spm *m;
    const char *s;
    struct sym *sy;
    struct agenda ag;
    struct revmerge *rev;
    size_t n_rev, cap_rev;
};

static mc_status maybe_add_pair(struct bpe_state *b, int64_t l, int64_t r)
{
    if (l < 0 || r < 0 || b->sy[l].freeze || b->sy[r].freeze)
        return MC_OK;
    size_t size = b->sy[l].len + b->sy[r].len;
    int32_t id = trie_find(&b->m->normal, b->s + b->sy[l].off, size);
    if (id < 0)
        return MC_OK;
    mc_status st = agenda_push(&b->ag, (struct pair){l, r, b->m->score[id], size});
    if (st || b->m->type[id] != PT_UNUSED)
        return st;
    if (b->n_rev == b->cap_rev) {
        size_t cap = b->cap_rev ? b->cap_rev * 2 : 16;
        struct revmerge *nr = mc_alloc(cap * sizeof(*nr));
        if (!nr)
            return MC_ERR_NOMEM;
        if (b->n_rev)
            memcpy(nr, b->rev, b->n_rev * sizeof(*nr));
        mc_free(b->rev);
        b->rev = nr;
        b->cap_rev = cap;
    }
    b->rev[b->n_rev++] = (struct revmerge){b->sy[l].off, size, b->sy[l].len};
    return MC_OK;
}

static mc_status resegment(struct bpe_state *b, size_t off, size_t len, struct pieces *out, int depth)
{
    const struct spm *m = b->m;
    int32_t id = piece_to_id(m, b->s + off, len);
    if (id < 0 || m->type[id] != PT_UNUSED || depth > 64)
        return pieces_push(out, off, len, id);
    /* the latest rev_merge entry with this string wins (a hash map assignment) */
    for (size_t i = b->n_rev; i-- > 0;) {
        const struct revmerge *r = &b->rev[i];
        if (r->len == len && memcmp(b->s + r->off, b->s + off, len) == 0) {
            mc_status st = resegment(b, off, r->left_len, out, depth + 1);
            return st ? st : resegment(b, off + r->left_len, len - r->left_len, out, depth + 1);
        }
    }
    return pieces_push(out, off, len, id);
}

static mc_status bpe_encode(const struct spm *m, const char *s, size_t size, struct pieces *out)
{
    struct bpe_state b = {m, s, NULL, {0}, NULL, 0, 0};
    mc_status st = MC_OK;
    if (!(b.sy = mc_alloc((size + 1) * sizeof(struct sym))))
        return MC_ERR_NOMEM;
    int64_t n = 0;
    for (size_t pos = 0; pos < size; n++) {
        size_t ul = trie_longest_prefix(&m->user, s + pos, size - pos);
        size_t l = ul ? ul : one_char_len((unsigned char)s[pos]);
        if (l > size - pos)
            l = size - pos;
        b.sy[n] = (struct sym){n - 1, -1, pos, l, ul != 0};
        pos += l;
        if (pos < size)
            b.sy[n].next = n + 1;
    }
    for (int64_t i = 1; i < n && st == MC_OK; i++)
        st = maybe_add_pair(&b, i - 1, i);
    while (st == MC_OK && b.ag.n) {
        struct pair top = agenda_pop(&b.ag);
        struct sym *L = &b.sy[top.left], *R = &b.sy[top.right];
        if (!L->len || !R->len || L->len + R->len != top.size)
            continue; /* stale */
        L->len += R->len;
        L->next = R->next;
        if (R->next >= 0)
            b.sy[R->next].prev = top.left;
        R->len = 0;
        if ((st = maybe_add_pair(&b, L->prev, top.left)) == MC_OK)
            st = maybe_add_pair(&b, top.left, L->next);
    }
    for (int64_t i = 0; st == MC_OK && i >= 0 && n > 0; i = b.sy[i].next)
        st = resegment(&b, b.sy[i].off, b.sy[i].len, out, 0);
    mc_free(b.sy);
    mc_free(b.ag.h);
    mc_free(b.rev);
    return st;
}

/* ---- SentencePieceProcessor::Encode -> ids ---------------------------------------------------- */
static mc_status sp_encode(const struct spm *m, const char *text, size_t len, struct mc_tokens *out)
{
    struct sbuf norm = {0};
    struct pieces ps = {0};
    mc_status st = normalize(m, text, len, &norm);
    if (st == MC_OK && norm.n)
        st = m->model_type == MODEL_BPE ? bpe_encode(m, norm.d, norm.n, &ps)
                                        : unigram_encode(m, norm.d, norm.n, &ps);
    bool prev_unk = false;
    for (size_t i = 0; st == MC_OK && i < ps.n; i++) {
        int32_t id = ps.p[i].id;
        bool unk = m->type[id] == PT_UNKNOWN;
        if (unk && m->byte_fallback) {
            for (size_t k = 0; k < ps.p[i].len && st == MC_OK; k++)
                st = mc_tok_push(out, m->byte_id[(unsigned char)norm.d[ps.p[i].off + k]]);
        } else if (!(unk && prev_unk)) { /* a run of unknowns becomes one <unk> */
            st = mc_tok_push(out, id);
        }
        prev_unk = unk;
    }
    mc_free(norm.d);
    mc_free(ps.p);
    return st;
}

/* ---- SentencePieceProcessor::Decode ---------------------------------------------------------- */
static mc_status flush_bytes(struct mc_json_buf *text, const unsigned char *bytes, size_t n)
{
    /* each invalid byte becomes U+FFFD; valid characters are copied */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = mc_utf8_decode(bytes + i, bytes + n, &cp);
        mc_status st = l ? mc_json_buf_append(text, (const char *)bytes + i, (size_t)l)
                         : mc_json_buf_append(text, "\xEF\xBF\xBD", 3);
        if (st)
            return st;
        i += l ? (size_t)l : 1;
    }
    return MC_OK;
}

static mc_status sp_decode(const struct spm *m, const int64_t *ids, int64_t n, struct mc_json_buf *text)
{
    if (m->has_denormalizer)
        return mc_error(MC_ERR_UNSUPPORTED, "decoding with a SentencePiece denormalizer is not supported");
    unsigned char *bytes = mc_alloc((size_t)n + 1);
    if (!bytes)
        return MC_ERR_NOMEM;
    size_t nb = 0, start_len = text->len;
    bool is_bos_ws = true, bos_ws_seen = false;
    mc_status st = MC_OK;
    for (int64_t i = 0; i < n && st == MC_OK; i++) {
        if (ids[i] < 0 || ids[i] >= m->n_pieces) {
            st = mc_error(MC_ERR_CONFIG, "cannot decode token id %lld (position %lld): the model "
                          "has %d pieces", (long long)ids[i], (long long)i, m->n_pieces);
            break;
        }
        int32_t id = piece_to_id(m, piece_str(m, (int32_t)ids[i]), m->piece_len[ids[i]]);
        if (m->type[id] == PT_BYTE) {
            unsigned x = 0;
            sscanf(piece_str(m, id), "<0x%2X>", &x);
            bytes[nb++] = (unsigned char)x;
            continue;
        }
        if ((st = flush_bytes(text, bytes, nb)))
            break;
        nb = 0;
        if (bos_ws_seen || text->len > start_len)
            is_bos_ws = false;
        const char *p = piece_str(m, id);
        size_t l = m->piece_len[id];
        bos_ws_seen = false;
        if (m->type[id] == PT_CONTROL)
            continue;
        if (m->type[id] == PT_UNKNOWN) {
            st = mc_json_buf_append(text, m->unk_surface, strlen(m->unk_surface));
            continue;
        }
        if (is_bos_ws && (m->add_dummy_prefix || m->remove_extra_ws) && l >= 3 &&
            memcmp(p, SPACE_SYM, 3) == 0) {
            p += 3;
            l -= 3;
            bos_ws_seen = !m->remove_extra_ws;
        }
        for (size_t k = 0; k < l && st == MC_OK;) {
            if (l - k >= 3 && memcmp(p + k, SPACE_SYM, 3) == 0) {
                st = mc_json_buf_append(text, " ", 1);
                k += 3;
            } else {
                st = mc_json_buf_append(text, p + k, 1);
                k++;
            }
        }
    }
    if (st == MC_OK)
        st = flush_bytes(text, bytes, nb);
    mc_free(bytes);
    return st;
}

/* ---- Megatron's wrappers ------------------------------------------------------------------- */
static mc_status spm_encode(const mc_tokenizer *t, const char *text, size_t len, struct mc_tokens *out)
{
    const struct spm *m = t->impl;
    mc_status st;
    if (m->kind == 2) { /* Llama2Tokenizer: [bos] + encode(text) */
        if (m->bos_id < 0)
            return mc_error(MC_ERR_CONFIG, "Llama2Tokenizer: the model has no bos piece (Megatron "
                            "would prepend id -1)");
        if ((st = mc_tok_push(out, m->bos_id)))
            return st;
    }
    if (m->kind != 0)
        return sp_encode(m, text, len, out);
    /* SentencePieceTokenizer: cut at the earliest special token (ties: insertion order) */
    size_t pos = 0;
    for (;;) {
        const char *best = NULL;
        int bi = -1;
        for (int i = 0; i < m->n_special; i++) {
            const char *hit = memmem(text + pos, len - pos, m->special[i], strlen(m->special[i]));
            if (hit && (!best || hit < best)) {
                best = hit;
                bi = i;
            }
        }
        if (!best)
            break;
        if ((st = sp_encode(m, text + pos, (size_t)(best - (text + pos)), out)) ||
            (st = mc_tok_push(out, m->special_id[bi])))
            return st;
        pos = (size_t)(best - text) + strlen(m->special[bi]);
    }
    return sp_encode(m, text + pos, len - pos, out);
}

static mc_status spm_decode(const mc_tokenizer *t, const int64_t *ids, int64_t n, struct mc_json_buf *out)
{
    const struct spm *m = t->impl;
    if (m->kind != 0)
        return sp_decode(m, ids, n, out);
    /* SentencePieceTokenizer.detokenize: special ids become "<text> <SPECIAL> " */
    int64_t last = 0;
    mc_status st = MC_OK;
    for (int64_t i = 0; i < n && st == MC_OK; i++) {
        int si = -1;
        for (int k = 0; k < m->n_special; k++)
            if (m->special_id[k] == ids[i])
                si = k;
        if (si < 0)
            continue;
        if ((st = sp_decode(m, ids + last, i - last, out)) || (st = mc_json_buf_append(out, " ", 1)) ||
            (st = mc_json_buf_append(out, m->special[si], strlen(m->special[si]))) ||
            (st = mc_json_buf_append(out, " ", 1)))
            break;
        last = i + 1;
    }
    return st ? st : sp_decode(m, n ? ids + last : ids, n - last, out); /* ids may be NULL when n is 0 */
}

/* _SentencePieceTokenizer._initalize: <CLS> <SEP> <EOD> <MASK> pad bos eos, each added with the
 * next id when not already a piece. */
static void add_specials(struct spm *m, int64_t *vocab_size, int64_t *pad)
{
    char names[7][64];
    snprintf(names[0], 64, "<CLS>");
    snprintf(names[1], 64, "<SEP>");
    snprintf(names[2], 64, "<EOD>");
    snprintf(names[3], 64, "<MASK>");
    int32_t ids[3] = {m->pad_id, m->bos_id, m->eos_id};
    const char *dflt[3] = {"<PAD>", "<BOS>", "<EOS>"};
    for (int k = 0; k < 3; k++) {
        if (ids[k] >= 0)
            snprintf(names[4 + k], 64, "%.*s", (int)m->piece_len[ids[k]], piece_str(m, ids[k]));
        else
            snprintf(names[4 + k], 64, "%s", dflt[k]);
    }
    *vocab_size = m->n_pieces;
    for (int k = 0; k < 7; k++) {
        int dup = -1;
        for (int j = 0; j < m->n_special; j++)
            if (strcmp(m->special[j], names[k]) == 0)
                dup = j;
        if (dup >= 0) {
            if (k == 4)
                *pad = m->special_id[dup];
            continue; /* already a special token: same id */
        }
        /* _vocab maps piece strings to ids; the last id wins for a repeated string */
        int64_t id = -1;
        for (int32_t i = 0; i < m->n_pieces; i++)
            if (m->piece_len[i] == strlen(names[k]) && memcmp(piece_str(m, i), names[k], m->piece_len[i]) == 0)
                id = i;
        if (id < 0)
            id = (*vocab_size)++;
        snprintf(m->special[m->n_special], 64, "%s", names[k]);
        m->special_id[m->n_special++] = id;
        if (k == 4)
            *pad = id;
    }
}

static const struct mc_tok_ops spm_ops[3] = {
    {"_SentencePieceTokenizer", spm_encode, spm_decode, spm_free},
    {"_GPTSentencePieceTokenizer", spm_encode, spm_decode, spm_free},
    {"_Llama2Tokenizer", spm_encode, spm_decode, spm_free},
};

mc_status mc_tok_spm_init(const struct mc_tokenizer_args *args, int kind, mc_tokenizer *t)
{
    static const char *names[3] = {"SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"};
    if (!args->tokenizer_model)
        return mc_error(MC_ERR_CONFIG, "%s needs --tokenizer-model (a SentencePiece .model file)", names[kind]);
    char *data = NULL;
    size_t n = 0;
    struct spm *m = mc_calloc(1, sizeof(*m));
    if (!m)
        return MC_ERR_NOMEM;
    m->kind = kind;
    mc_status st = mc_tok_read_file(args->tokenizer_model, "SentencePiece model", &data, &n);
    if (st == MC_OK)
        st = load_model(m, data, n, args->tokenizer_model);
    mc_free(data);
    if (st) {
        spm_free(m);
        return st;
    }
    t->ops = &spm_ops[kind];
    t->impl = m;
    if (kind == 0) {
        add_specials(m, &t->vocab_size, &t->pad);
        t->eod = m->special_id[2];
    } else {
        t->vocab_size = m->n_pieces;
        t->eod = m->eos_id;
        t->pad = kind == 1 ? m->pad_id : -1; /* Llama2Tokenizer's .pad raises: datasets see -1 */
    }
    return MC_OK;
}
