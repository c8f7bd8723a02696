/* Code point classification and UTF-8 helpers for the tokenizers (see unicode.h). Megatron
 * counterpart: what Python's `regex` module and bytes.decode(errors="replace") do for
 * megatron/training/tokenizer/gpt2_tokenization.py. */
#include "tokenizer/unicode.h"

#include <pthread.h>

/* A byte per BMP code point and table, filled once from the ranges; higher planes bsearch. */
static uint8_t bmp_class[2][0x10000];
static uint8_t bmp_case[0x10000];
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;

static void fill_bmp(void)
{
    const struct mc_uni_range *tabs[2] = {mc_uni_ranges_regex, mc_uni_ranges_onig};
    int ns[2] = {mc_uni_n_ranges_regex, mc_uni_n_ranges_onig};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < ns[t]; i++) {
            const struct mc_uni_range *r = &tabs[t][i];
            for (uint32_t c = r->first; c <= r->last && c < 0x10000; c++)
                bmp_class[t][c] = r->cls;
        }
    for (int i = 0; i < mc_uni_n_case_ranges_onig; i++) {
        const struct mc_uni_range *r = &mc_uni_case_ranges_onig[i];
        for (uint32_t c = r->first; c <= r->last && c < 0x10000; c++)
            bmp_case[c] = r->cls;
    }
}

static int range_lookup(const struct mc_uni_range *r, int n, uint32_t cp)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].first)
            hi = mid - 1;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return r[mid].cls;
    }
    return 0;
}

int mc_uni_case_flags(uint32_t cp)
{
    if (cp < 0x10000) {
        pthread_once(&bmp_once, fill_bmp);
        return bmp_case[cp];
    }
    return range_lookup(mc_uni_case_ranges_onig, mc_uni_n_case_ranges_onig, cp);
}

enum mc_uni_class mc_uni_class_in(enum mc_uni_table t, uint32_t cp)
{
    if (cp < 0x10000) {
        pthread_once(&bmp_once, fill_bmp);
        return (enum mc_uni_class)bmp_class[t][cp];
    }
    return t == MC_UNI_TABLE_ONIG ? (enum mc_uni_class)range_lookup(mc_uni_ranges_onig, mc_uni_n_ranges_onig, cp)
                                  : (enum mc_uni_class)range_lookup(mc_uni_ranges_regex, mc_uni_n_ranges_regex, cp);
}

int mc_utf8_encode(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Number of bytes of s[0..n) that form a valid prefix of a UTF-8 sequence starting at s[0]
 * (Unicode's "maximal subpart"), and whether the sequence is complete. */
static int valid_prefix(const unsigned char *s, size_t n, int *complete)
{
    unsigned c = s[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *complete = 0;
        return 1;
    }
    int k = 1;
    for (; k < need && (size_t)k < n; k++) {
        unsigned b = s[k];
        unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (b < l || b > h)
            break;
    }
    *complete = k == need;
    return k;
}

size_t mc_utf8_replace_invalid(char *o, const unsigned char *s, size_t n)
{
    size_t w = 0, i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            o[w++] = (char)s[i++];
            continue;
        }
        int complete;
        int k = valid_prefix(s + i, n - i, &complete);
        if (complete) {
            for (int j = 0; j < k; j++)
                o[w++] = (char)s[i + j];
        } else {
            o[w++] = (char)0xEF; /* U+FFFD */
            o[w++] = (char)0xBF;
            o[w++] = (char)0xBD;
        }
        i += (size_t)k;
    }
    return w;
}

int mc_uni_is_py_space(uint32_t cp)
{
    if (cp <= 0x20)
        return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
