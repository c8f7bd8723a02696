/* Pre-tokenizers: the regexes that cut text into pieces before byte-level BPE, implemented as
 * hand-written matchers that give exactly regex findall's partition.
 *
 *  GPT2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *         (GPT2Tokenizer.pat in megatron/training/tokenizer/gpt2_tokenization.py; also HF
 *         ByteLevel's use_regex=true pattern)
 *  LLAMA3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *  QWEN2  the same with \p{N} instead of \p{N}{1,3}
 *  TIKTOKEN_V1 (Megatron's PATTERN_TIKTOKEN) [^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|
 *         \s*[\r\n]|\s+(?!\S)|\s+: Qwen2's without contractions; the possessive quantifiers and
 *         the single [\r\n] change nothing (the classes are disjoint; \s* backtracks to the last
 *         newline of the run either way)
 *  TIKTOKEN_V2 (Megatron's PATTERN_TIKTOKEN_V2, o200k-like)
 *         [^\r\n\p{L}\p{N}]?U*W+|[^\r\n\p{L}\p{N}]?U+W*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|
 *         \s+(?!\S)|\s+ with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]
 *
 * Every code point falls into one of the classes L, N, S (\s) or O (other), from the tables of
 * unicode_classes.c. At each position the alternatives are tried in pattern order; each match
 * below is written as the piece the regex engine would return (greedy runs, and the one-step
 * backtrack of \s+(?!\S) that leaves the last space of a run for the next word). */
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

#include <string.h>

struct cur {
    const unsigned char *s, *end;
    enum mc_uni_table table;
};

/* Decodes the code point at p; class and byte length out. Returns false on invalid UTF-8. */
static inline bool at(const struct cur *c, const unsigned char *p, uint32_t *cp, int *len, int *cls)
{
    if (*p < 0x80) {
        static const uint8_t ascii[128] = {
            /* 0x09..0x0D are \s; 0x20 is \s; digits N; letters L; everything else O */
            ['\t'] = MC_UNI_S, ['\n'] = MC_UNI_S, ['\v'] = MC_UNI_S, ['\f'] = MC_UNI_S,
            ['\r'] = MC_UNI_S, [' '] = MC_UNI_S,
            ['0'] = MC_UNI_N, ['1'] = MC_UNI_N, ['2'] = MC_UNI_N, ['3'] = MC_UNI_N,
            ['4'] = MC_UNI_N, ['5'] = MC_UNI_N, ['6'] = MC_UNI_N, ['7'] = MC_UNI_N,
            ['8'] = MC_UNI_N, ['9'] = MC_UNI_N,
            ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1,
            ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1,
            ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1,
            ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
            ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1,
            ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1,
            ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1,
            ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
        };
        *cp = *p;
        *len = 1;
        *cls = ascii[*p];
        return true;
    }
    *len = mc_utf8_decode(p, c->end, cp);
    if (!*len)
        return false;
    *cls = (int)mc_uni_class_in(c->table, *cp);
    return true;
}

static mc_status bad_utf8(const struct cur *c, const unsigned char *p)
{
    return mc_error(MC_ERR_FORMAT, "text is not valid UTF-8: byte 0x%02x at offset %zu", *p,
                    (size_t)(p - c->s));
}

/* End of the maximal run of class k starting at p (p itself is of class k). */
static mc_status run_end(const struct cur *c, const unsigned char *p, int k, const unsigned char **e)
{
    while (p < c->end) {
        uint32_t cp;
        int l, cls;
        if (!at(c, p, &cp, &l, &cls))
            return bad_utf8(c, p);
        if (cls != k)
            break;
        p += l;
    }
    *e = p;
    return MC_OK;
}

/* Byte length of a contraction suffix at p ("s", "t", "re", "ve", "m", "ll", "d", in that order),
 * 0 if none. icase: the (?i:...) group of the Llama-3 pattern, where both engines also let
 * U+017F LATIN SMALL LETTER LONG S match "s" (its case folding) and nothing else non-ASCII. */
static int contraction(const unsigned char *p, const unsigned char *end, bool icase)
{
    static const char *suf[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    for (int i = 0; i < 7; i++) {
        const unsigned char *q = p;
        const char *w = suf[i];
        for (; *w; w++) {
            if (q >= end)
                break;
            unsigned char ch = *q;
            if (icase && ch >= 'A' && ch <= 'Z')
                ch = (unsigned char)(ch - 'A' + 'a');
            if (ch == (unsigned char)*w) {
                q++;
            } else if (icase && *w == 's' && end - q >= 2 && q[0] == 0xC5 && q[1] == 0xBF) {
                q += 2;
            } else {
                break;
            }
        }
        if (!*w)
            return (int)(q - p);
    }
    return 0;
}

/* \s+(?!\S) | \s+ at p (p is whitespace): the run, minus its last code point when the run has
 * more than one and text follows it. */
static mc_status space_piece(const struct cur *c, const unsigned char *p, const unsigned char **e)
{
    const unsigned char *q = p, *last = p;
    int count = 0;
    while (q < c->end) {
        uint32_t cp;
        int l, cls;
        if (!at(c, q, &cp, &l, &cls))
            return bad_utf8(c, q);
        if (cls != MC_UNI_S)
            break;
        last = q;
        q += l;
        count++;
    }
    *e = (q == c->end || count == 1) ? q : last;
    return MC_OK;
}

static mc_status split_gpt2(const struct cur *c, mc_pretok_emit emit, void *ctx)
{
    const unsigned char *p = c->s;
    mc_status st;
    while (p < c->end) {
        uint32_t cp;
        int l, cls;
        if (!at(c, p, &cp, &l, &cls))
            return bad_utf8(c, p);
        const unsigned char *e;
        int n;
        if (cp == '\'' && (n = contraction(p + 1, c->end, false))) {
            e = p + 1 + n;
        } else {
            const unsigned char *j = p;
            int k = cls;
            if (cp == ' ' && p + 1 < c->end) {
                uint32_t cp2;
                int l2, cls2;
                if (!at(c, p + 1, &cp2, &l2, &cls2))
                    return bad_utf8(c, p + 1);
                if (cls2 != MC_UNI_S) {
                    j = p + 1;
                    k = cls2;
                }
            }
            if (k != MC_UNI_S)
                st = run_end(c, j, k, &e);
            else
                st = space_piece(c, p, &e);
            if (st)
                return st;
        }
        if ((st = emit(ctx, (const char *)p, (size_t)(e - p))))
            return st;
        p = e;
    }
    return MC_OK;
}

static mc_status split_llama3(const struct cur *c, int max_digits, bool contractions,
                              mc_pretok_emit emit, void *ctx)
{
    const unsigned char *p = c->s;
    mc_status st;
    while (p < c->end) {
        uint32_t cp, cp2 = 0;
        int l, cls, l2 = 0, cls2 = -1;
        if (!at(c, p, &cp, &l, &cls))
            return bad_utf8(c, p);
        if (p + l < c->end && !at(c, p + l, &cp2, &l2, &cls2))
            return bad_utf8(c, p + l);
        const unsigned char *e = NULL;
        int n;
        bool nl = cp == '\r' || cp == '\n';
        if (contractions && cp == '\'' && (n = contraction(p + 1, c->end, true))) {
            e = p + 1 + n;                                  /* (?i:'s|'t|...) */
        } else if (cls == MC_UNI_L) {
            if ((st = run_end(c, p, MC_UNI_L, &e)))         /* \p{L}+ */
                return st;
        } else if (cls != MC_UNI_N && !nl && cls2 == MC_UNI_L) {
            if ((st = run_end(c, p + l, MC_UNI_L, &e)))     /* [^\r\n\p{L}\p{N}]\p{L}+ */
                return st;
        } else if (cls == MC_UNI_N) {
            e = p;                                          /* \p{N}{1,max} */
            for (int d = 0; d < max_digits && e < c->end; d++) {
                int ld, cd;
                uint32_t cpd;
                if (!at(c, e, &cpd, &ld, &cd))
                    return bad_utf8(c, e);
                if (cd != MC_UNI_N)
                    break;
                e += ld;
            }
        } else if (cls == MC_UNI_O || (cp == ' ' && cls2 == MC_UNI_O)) {
            const unsigned char *j = cls == MC_UNI_O ? p : p + 1; /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
            if ((st = run_end(c, j, MC_UNI_O, &e)))
                return st;
            while (e < c->end && (*e == '\r' || *e == '\n'))
                e++;
        } else {
            /* whitespace: \s*[\r\n]+ if the run holds a newline, else \s+(?!\S) | \s+ */
            const unsigned char *q = p, *after_nl = NULL;
            while (q < c->end) {
                uint32_t cq;
                int lq, kq;
                if (!at(c, q, &cq, &lq, &kq))
                    return bad_utf8(c, q);
                if (kq != MC_UNI_S)
                    break;
                q += lq;
                if (cq == '\r' || cq == '\n')
                    after_nl = q;
            }
            if (after_nl)
                e = after_nl;
            else if ((st = space_piece(c, p, &e)))
                return st;
        }
        if ((st = emit(ctx, (const char *)p, (size_t)(e - p))))
            return st;
        p = e;
    }
    return MC_OK;
}

/* End of the maximal run of code points with case flag f from p. */
static mc_status case_run(const struct cur *c, const unsigned char *p, int f, const unsigned char **e)
{
    while (p < c->end) {
        uint32_t cp;
        int l, cls;
        if (!at(c, p, &cp, &l, &cls))
            return bad_utf8(c, p);
        if (!(mc_uni_case_flags(cp) & f))
            break;
        p += l;
    }
    *e = p;
    return MC_OK;
}

/* U*W+ (alt 1) or U+W* (alt 2) from j, as a backtracking engine would take them: U* greedy,
 * then W+ needs one W: either right after the U run, or the run's last W character gives
 * itself back. Sets *e, or leaves it NULL when the alternative fails. */
static mc_status letters_at(const struct cur *c, const unsigned char *j, bool alt2, const unsigned char **e)
{
    const unsigned char *q = j, *last_w = NULL, *last_w_end = NULL;
    *e = NULL;
    while (q < c->end) { /* the U run, remembering its last W character */
        uint32_t cp;
        int l, cls;
        if (!at(c, q, &cp, &l, &cls))
            return bad_utf8(c, q);
        int f = mc_uni_case_flags(cp);
        if (!(f & MC_UNI_UPPERISH))
            break;
        if (f & MC_UNI_LOWERISH) {
            last_w = q;
            last_w_end = q + l;
        }
        q += l;
    }
    const unsigned char *after = q;
    mc_status st = case_run(c, q, MC_UNI_LOWERISH, &after); /* W run right after the U run */
    if (st)
        return st;
    if (alt2)
        *e = q > j ? after : NULL;
    else if (after > q)
        *e = after;
    else if (last_w)
        *e = last_w_end;
    return MC_OK;
}

static mc_status split_tiktoken_v2(const struct cur *c, mc_pretok_emit emit, void *ctx)
{
    const unsigned char *p = c->s;
    mc_status st;
    while (p < c->end) {
        uint32_t cp, cp2 = 0;
        int l, cls, l2 = 0, cls2 = -1;
        if (!at(c, p, &cp, &l, &cls))
            return bad_utf8(c, p);
        if (p + l < c->end && !at(c, p + l, &cp2, &l2, &cls2))
            return bad_utf8(c, p + l);
        const unsigned char *e = NULL;
        bool prefix_ok = cp != '\r' && cp != '\n' && cls != MC_UNI_L && cls != MC_UNI_N;
        for (int alt = 0; alt < 2 && !e; alt++) /* alt 1 then alt 2, each with the prefix first */
            for (int take = prefix_ok ? 1 : 0; take >= 0 && !e; take--)
                if ((st = letters_at(c, take ? p + l : p, alt == 1, &e)))
                    return st;
        if (e == p)
            e = NULL;
        if (e) {
            /* letters (alternatives 1 and 2) */
        } else if (cls == MC_UNI_N) {
            e = p + l;                                      /* \p{N} */
        } else if (cls == MC_UNI_O || (cp == ' ' && cls2 == MC_UNI_O)) {
            if ((st = run_end(c, cls == MC_UNI_O ? p : p + 1, MC_UNI_O, &e)))
                return st;                                  /*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
            while (e < c->end && (*e == '\r' || *e == '\n' || *e == '/'))
                e++;
        } else {
            const unsigned char *q = p, *after_nl = NULL;  /* \s*[\r\n]+ | \s+(?!\S) | \s+ */
            while (q < c->end) {
                uint32_t cq;
                int lq, kq;
                if (!at(c, q, &cq, &lq, &kq))
                    return bad_utf8(c, q);
                if (kq != MC_UNI_S)
                    break;
                q += lq;
                if (cq == '\r' || cq == '\n')
                    after_nl = q;
            }
            if (after_nl)
                e = after_nl;
            else if ((st = space_piece(c, p, &e)))
                return st;
        }
        if ((st = emit(ctx, (const char *)p, (size_t)(e - p))))
            return st;
        p = e;
    }
    return MC_OK;
}

mc_status mc_pretok_split(enum mc_pretok kind, enum mc_uni_table table, const char *text, size_t len,
                          mc_pretok_emit emit, void *ctx)
{
    struct cur c = {(const unsigned char *)text, (const unsigned char *)text + len, table};
    switch (kind) {
    case MC_PRETOK_GPT2: return split_gpt2(&c, emit, ctx);
    case MC_PRETOK_LLAMA3: return split_llama3(&c, 3, true, emit, ctx);
    case MC_PRETOK_QWEN2: return split_llama3(&c, 1, true, emit, ctx);
    case MC_PRETOK_TIKTOKEN_V1: return split_llama3(&c, 1, false, emit, ctx);
    case MC_PRETOK_TIKTOKEN_V2: return split_tiktoken_v2(&c, emit, ctx);
    }
    return mc_error(MC_ERR_INTERNAL, "unknown pre-tokenizer %d", (int)kind);
}
