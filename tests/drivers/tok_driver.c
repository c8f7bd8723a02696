/* Test driver for the tokenizer tests (tests/tokenizer/test_*.py).
 *   tok_driver encode TYPE VOCAB MERGES MODEL VOCAB_SIZE IN OUT
 *       IN: records of u32 little-endian length + UTF-8 bytes. OUT: one line per record, the ids
 *       separated by spaces, or "ERR <message>".
 *   tok_driver decode TYPE VOCAB MERGES MODEL VOCAB_SIZE IN OUT
 *       IN: lines of space-separated ids. OUT: records of u32 length + decoded bytes (length
 *       0xFFFFFFFF + message on error).
 *   tok_driver info TYPE VOCAB MERGES MODEL VOCAB_SIZE
 *       prints "vocab_size eod pad class".
 *   tok_driver bench TYPE VOCAB MERGES MODEL VOCAB_SIZE FILE REPEAT
 *       encodes FILE's lines REPEAT times on one thread, prints MB/s and tokens.
 *   tok_driver pretok KIND TABLE IN OUT
 *       KIND gpt2|llama3|qwen2|tiktoken_v1|tiktoken_v2, TABLE regex|onig: pre-tokenizer pieces of each record of IN, written as records
 *       of u32 count + u32 piece lengths (or count 0xFFFFFFFF on error).
 * Use "-" for an unused path. TikTokenizer options come from the environment:
 * MC_TIKTOKEN_PATTERN, MC_TIKTOKEN_NUM_SPECIAL, MC_TIKTOKEN_SPECIAL (space-separated). */
#include "megatron/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *opt(const char *s) { return strcmp(s, "-") == 0 ? NULL : s; }

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static int do_encode(mc_tokenizer *t, const char *in, const char *outp)
{
    size_t n;
    char *buf = slurp(in, &n);
    FILE *out = fopen(outp, "wb");
    struct mc_tokens toks = {0};
    for (size_t pos = 0; pos + 4 <= n;) {
        uint32_t len;
        memcpy(&len, buf + pos, 4);
        pos += 4;
        toks.len = 0;
        mc_status st = mc_tok_encode(t, buf + pos, len, &toks);
        pos += len;
        if (st) {
            fprintf(out, "ERR %s %s\n", mc_status_str(st), mc_last_error());
            continue;
        }
        for (int64_t i = 0; i < toks.len; i++)
            fprintf(out, i ? " %lld" : "%lld", (long long)toks.data[i]);
        fputc('\n', out);
    }
    mc_free(toks.data);
    fclose(out);
    free(buf);
    return 0;
}

static int do_decode(mc_tokenizer *t, const char *in, const char *outp)
{
    size_t n;
    char *buf = slurp(in, &n);
    FILE *out = fopen(outp, "wb");
    int64_t *ids = malloc(sizeof(int64_t) * (n + 1));
    for (char *line = buf; line < buf + n;) {
        char *nl = strchr(line, '\n');
        if (!nl)
            nl = buf + n;
        *nl = '\0';
        int64_t k = 0;
        for (char *p = line; *p;) {
            char *e;
            ids[k++] = strtoll(p, &e, 10);
            if (e == p)
                break;
            p = e;
        }
        char *text;
        size_t len;
        mc_status st = mc_tok_decode(t, ids, k, &text, &len);
        if (st) {
            uint32_t bad = 0xFFFFFFFFu;
            const char *msg = mc_last_error();
            uint32_t ml = (uint32_t)strlen(msg);
            fwrite(&bad, 4, 1, out);
            fwrite(&ml, 4, 1, out);
            fwrite(msg, 1, ml, out);
        } else {
            uint32_t l32 = (uint32_t)len;
            fwrite(&l32, 4, 1, out);
            fwrite(text, 1, len, out);
            mc_free(text);
        }
        line = nl + 1;
    }
    free(ids);
    fclose(out);
    free(buf);
    return 0;
}

static int do_bench(mc_tokenizer *t, const char *path, int repeat)
{
    size_t n;
    char *buf = slurp(path, &n);
    struct mc_tokens toks = {0};
    int64_t total = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < repeat; r++) {
        for (char *line = buf; line < buf + n;) {
            char *nl = memchr(line, '\n', (size_t)(buf + n - line));
            size_t len = nl ? (size_t)(nl - line) : (size_t)(buf + n - line);
            toks.len = 0;
            if (mc_tok_encode(t, line, len, &toks)) {
                fprintf(stderr, "%s\n", mc_last_error());
                return 1;
            }
            total += toks.len;
            line += len + 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%.3f MB/s %lld tokens %.3f s\n", (double)n * repeat / s / 1e6, (long long)total, s);
    mc_free(toks.data);
    free(buf);
    return 0;
}

struct pieces {
    uint32_t n, len[1 << 16];
};

static mc_status collect(void *ctx, const char *piece, size_t len)
{
    struct pieces *p = ctx;
    if (p->n == (1u << 16))
        return MC_ERR_INTERNAL;
    p->len[p->n++] = (uint32_t)len;
    (void)piece;
    return MC_OK;
}

static int do_pretok(const char *kind, const char *table, const char *in, const char *outp)
{
    enum mc_pretok k = strcmp(kind, "gpt2") == 0     ? MC_PRETOK_GPT2
                       : strcmp(kind, "llama3") == 0 ? MC_PRETOK_LLAMA3
                       : strcmp(kind, "qwen2") == 0  ? MC_PRETOK_QWEN2
                       : strcmp(kind, "tiktoken_v1") == 0 ? MC_PRETOK_TIKTOKEN_V1
                                                          : MC_PRETOK_TIKTOKEN_V2;
    size_t n;
    char *buf = slurp(in, &n);
    FILE *out = fopen(outp, "wb");
    static struct pieces p;
    for (size_t pos = 0; pos + 4 <= n;) {
        uint32_t len;
        memcpy(&len, buf + pos, 4);
        pos += 4;
        p.n = 0;
        if (mc_pretok_split(k, strcmp(table, "onig") == 0 ? MC_UNI_TABLE_ONIG : MC_UNI_TABLE_REGEX,
                            buf + pos, len, collect, &p) != MC_OK) {
            uint32_t bad = 0xFFFFFFFFu;
            fwrite(&bad, 4, 1, out);
        } else {
            fwrite(&p.n, 4, 1, out);
            fwrite(p.len, 4, p.n, out);
        }
        pos += len;
    }
    fclose(out);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "pretok") == 0)
        return do_pretok(argv[2], argv[3], argv[4], argv[5]);
    if (argc < 7) {
        fprintf(stderr, "usage: see tests/drivers/tok_driver.c\n");
        return 2;
    }
    struct mc_tokenizer_args a = {
        .tokenizer_type = argv[2], .vocab_file = opt(argv[3]), .merge_file = opt(argv[4]),
        .tokenizer_model = opt(argv[5]), .vocab_size = atoll(argv[6]),
    };
    const char *specials[64];
    char spec_buf[1024];
    a.tiktoken_pattern = getenv("MC_TIKTOKEN_PATTERN");
    a.tiktoken_num_special_tokens = getenv("MC_TIKTOKEN_NUM_SPECIAL") ? atoll(getenv("MC_TIKTOKEN_NUM_SPECIAL")) : 0;
    if (getenv("MC_TIKTOKEN_SPECIAL")) {
        snprintf(spec_buf, sizeof(spec_buf), "%s", getenv("MC_TIKTOKEN_SPECIAL"));
        for (char *tok = strtok(spec_buf, " "); tok && a.n_tiktoken_special_tokens < 64; tok = strtok(NULL, " "))
            specials[a.n_tiktoken_special_tokens++] = tok;
        a.tiktoken_special_tokens = specials;
    }
    mc_tokenizer *t;
    mc_status st = mc_tok_init(&a, &t);
    if (st) {
        printf("INITERR %s %s\n", mc_status_str(st), mc_last_error());
        return 3;
    }
    int rc = 0;
    if (strcmp(argv[1], "info") == 0)
        printf("%lld %lld %lld %s\n", (long long)mc_tok_vocab_size(t), (long long)mc_tok_eod(t),
               (long long)mc_tok_pad(t), mc_tok_class_name(t));
    else if (strcmp(argv[1], "encode") == 0 && argc >= 9)
        rc = do_encode(t, argv[7], argv[8]);
    else if (strcmp(argv[1], "decode") == 0 && argc >= 9)
        rc = do_decode(t, argv[7], argv[8]);
    else if (strcmp(argv[1], "bench") == 0 && argc >= 9)
        rc = do_bench(t, argv[7], atoi(argv[8]));
    else
        rc = 2;
    mc_tok_free(t);
    return rc;
}
