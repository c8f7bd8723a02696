/* preprocess_data: tokenizes a JSONL corpus into Megatron .bin/.idx indexed datasets, one per
 * --json-keys key, named {prefix}_{key}_{document|sentence}. Mirrors Megatron-LM's
 * tools/preprocess_data.py (same options and output bytes), with these differences:
 *  - every key gets its .idx (Megatron 0.12.1 finalizes only the last key);
 *  - any error (bad JSON, missing key, invalid UTF-8, tokenizer failure) stops the run with
 *    the file and line, exit status 1, and leaves no output (Megatron's worker dies and the
 *    tool exits 0 with truncated files);
 *  - --split-sentences is refused (it needs NLTK's punkt model);
 *  - with --partitions > 1 the documents come out in Megatron's order (round-robin or
 *    sequential), but no partition files or per-partition datasets are left on disk.
 * Workers are OpenMP threads over batches of lines; output order is input order, so any
 * --workers count writes the same bytes. Memory is bounded by the batch, not the corpus.
 * Exit status: 0 done, 1 failure, 2 bad command line (as argparse). */
#include "megatron/indexed_dataset.h"
#include "megatron/tokenizer.h"
#include "core/json.h"

#include <errno.h>
#include <glob.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>

#define PROG "preprocess_data"

/* ---- command line (argparse rules: prefixes, --opt=value, exit 2 on errors) -------------- */

enum kind { FLAG, STR, INT, LIST };
struct opt {
    const char *name, *metavar;
    enum kind kind;
    int required;
    int hidden; /* a MindSpeed-LLM option: parsed, absent from Megatron's usage line */
};

static const struct opt OPTS[] = {
    {"--vocab-size", "VOCAB_SIZE", INT, 0, 0},
    {"--vocab-file", "VOCAB_FILE", STR, 0, 0},
    {"--merge-file", "MERGE_FILE", STR, 0, 0},
    {"--vocab-extra-ids", "VOCAB_EXTRA_IDS", INT, 0, 0},
    {"--tokenizer-type", "{BertWordPieceLowerCase,BertWordPieceCase,GPT2BPETokenizer,"
     "SentencePieceTokenizer,GPTSentencePieceTokenizer,HuggingFaceTokenizer,Llama2Tokenizer,"
     "TikTokenizer,MultimodalTokenizer,NullTokenizer,NullMultimodalTokenizer}", STR, 0, 0},
    {"--tokenizer-model", "TOKENIZER_MODEL", STR, 0, 0},
    {"--tiktoken-pattern", "TIKTOKEN_PATTERN", STR, 0, 0},
    {"--tiktoken-num-special-tokens", "TIKTOKEN_NUM_SPECIAL_TOKENS", INT, 0, 0},
    {"--tiktoken-special-tokens", "TIKTOKEN_SPECIAL_TOKENS", LIST, 0, 0},
    {"--input", "INPUT", STR, 1, 0},
    {"--json-keys", "JSON_KEYS", LIST, 0, 0},
    {"--split-sentences", NULL, FLAG, 0, 0},
    {"--keep-newlines", NULL, FLAG, 0, 0},
    {"--append-eod", NULL, FLAG, 0, 0},
    {"--lang", "LANG", STR, 0, 0},
    {"--output-prefix", "OUTPUT_PREFIX", STR, 1, 0},
    {"--workers", "WORKERS", INT, 1, 0},
    {"--partitions", "PARTITIONS", INT, 0, 0},
    {"--log-interval", "LOG_INTERVAL", INT, 0, 0},
    {"--keep-sequential-samples", NULL, FLAG, 0, 0},
    {"--tokenizer-name-or-path", "TOKENIZER_NAME_OR_PATH", STR, 0, 1},
};
#define N_OPTS ((int)(sizeof(OPTS) / sizeof(OPTS[0])))
enum { O_VOCAB_SIZE, O_VOCAB_FILE, O_MERGE_FILE, O_EXTRA_IDS, O_TOK_TYPE, O_TOK_MODEL,
       O_TT_PATTERN, O_TT_NUM, O_TT_SPECIAL, O_INPUT, O_JSON_KEYS, O_SPLIT, O_KEEP_NL,
       O_APPEND_EOD, O_LANG, O_OUTPUT, O_WORKERS, O_PARTITIONS, O_LOG_INTERVAL, O_KEEP_SEQ,
       O_TOK_NAME };

static const char *TOKENIZER_TYPES[] = {
    "BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer", "SentencePieceTokenizer",
    "GPTSentencePieceTokenizer", "HuggingFaceTokenizer", "Llama2Tokenizer", "TikTokenizer",
    "MultimodalTokenizer", "NullTokenizer", "NullMultimodalTokenizer"};

struct args {
    int given[N_OPTS];
    const char *str[N_OPTS];
    int64_t num[N_OPTS];
    const char **list[N_OPTS];
    int list_len[N_OPTS];
};

static void print_usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [-h]");
    for (int k = 0; k < N_OPTS; k++) {
        const struct opt *o = &OPTS[k];
        const char *mv = k == O_TOK_TYPE ? "TOKENIZER_TYPE" : o->metavar;
        if (o->hidden)
            continue;
        if (o->kind == FLAG)
            fprintf(f, " [%s]", o->name);
        else if (o->kind == LIST)
            fprintf(f, " [%s %s [%s ...]]", o->name, mv, mv);
        else
            fprintf(f, o->required ? " %s %s" : " [%s %s]", o->name, mv);
    }
    fputc('\n', f);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    print_usage(stderr);
    fprintf(stderr, PROG ": error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

/* Index of the option named (or uniquely abbreviated) by arg[0..len); -1 if none. */
static int find_opt(const char *arg, size_t len)
{
    int hit = -1, hits = 0;
    for (int k = 0; k < N_OPTS; k++) {
        if (strncmp(OPTS[k].name, arg, len) != 0)
            continue;
        if (strlen(OPTS[k].name) == len)
            return k;
        hit = k;
        hits++;
    }
    if (hits > 1)
        usage_error("ambiguous option: %.*s could match several options", (int)len, arg);
    return hits == 1 ? hit : -1;
}

static int64_t parse_int(const char *name, const char *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (errno || end == v || *end)
        usage_error("argument %s: invalid int value: '%s'", name, v);
    return x;
}

static int looks_like_option(const char *s) { return s[0] == '-' && s[1] && !(s[1] >= '0' && s[1] <= '9'); }

static void parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof(*a));
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            print_usage(stdout);
            printf("\nTokenizes a JSONL file into Megatron .bin/.idx datasets "
                   "(see Megatron-LM tools/preprocess_data.py).\n");
            exit(0);
        }
        if (!looks_like_option(arg) || arg[1] != '-')
            usage_error("unrecognized arguments: %s", arg);
        const char *eq = strchr(arg, '=');
        int k = find_opt(arg, eq ? (size_t)(eq - arg) : strlen(arg));
        if (k < 0)
            usage_error("unrecognized arguments: %s", arg);
        const struct opt *o = &OPTS[k];
        a->given[k] = 1;
        if (o->kind == FLAG) {
            if (eq)
                usage_error("argument %s: ignored explicit argument '%s'", o->name, eq + 1);
            continue;
        }
        if (o->kind == LIST) {
            a->list[k] = calloc((size_t)argc, sizeof(char *));
            a->list_len[k] = 0;
            if (eq)
                a->list[k][a->list_len[k]++] = eq + 1;
            while (!eq && i + 1 < argc && !looks_like_option(argv[i + 1]))
                a->list[k][a->list_len[k]++] = argv[++i];
            if (a->list_len[k] == 0)
                usage_error("argument %s: expected at least one argument", o->name);
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc && !looks_like_option(argv[i + 1])
                                           ? argv[++i] : NULL);
        if (!v)
            usage_error("argument %s: expected one argument", o->name);
        a->str[k] = v;
        if (o->kind == INT)
            a->num[k] = parse_int(o->name, v);
    }
    char missing[256] = "";
    for (int k = 0; k < N_OPTS; k++)
        if (OPTS[k].required && !a->given[k])
            snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%s",
                     missing[0] ? ", " : "", OPTS[k].name);
    if (missing[0])
        usage_error("the following arguments are required: %s", missing);
    if (a->given[O_TOK_TYPE]) {
        int ok = 0;
        for (size_t t = 0; t < sizeof(TOKENIZER_TYPES) / sizeof(*TOKENIZER_TYPES); t++)
            ok |= strcmp(a->str[O_TOK_TYPE], TOKENIZER_TYPES[t]) == 0;
        /* MindSpeed-LLM's preprocess_data: a local HF directory in --tokenizer-name-or-path */
        ok |= strcmp(a->str[O_TOK_TYPE], "PretrainedFromHF") == 0;
        if (!ok)
            usage_error("argument --tokenizer-type: invalid choice: '%s' (choose from "
                        "'BertWordPieceLowerCase', 'BertWordPieceCase', 'GPT2BPETokenizer', "
                        "'SentencePieceTokenizer', 'GPTSentencePieceTokenizer', "
                        "'HuggingFaceTokenizer', 'Llama2Tokenizer', 'TikTokenizer', "
                        "'MultimodalTokenizer', 'NullTokenizer', 'NullMultimodalTokenizer')",
                        a->str[O_TOK_TYPE]);
    } else {
        usage_error("argument --tokenizer-type is required (Megatron's tool fails without it)");
    }
    if (!a->given[O_PARTITIONS])
        a->num[O_PARTITIONS] = 1;
    if (!a->given[O_LOG_INTERVAL])
        a->num[O_LOG_INTERVAL] = 1000;
    if (a->num[O_WORKERS] < 1)
        usage_error("argument --workers: must be at least 1, got %lld",
                    (long long)a->num[O_WORKERS]);
    if (a->num[O_PARTITIONS] < 1)
        usage_error("argument --partitions: must be at least 1, got %lld",
                    (long long)a->num[O_PARTITIONS]);
    if (a->num[O_LOG_INTERVAL] < 1)
        usage_error("argument --log-interval: must be at least 1, got %lld",
                    (long long)a->num[O_LOG_INTERVAL]);
    if (a->num[O_WORKERS] % a->num[O_PARTITIONS] != 0)
        usage_error("argument --workers: %lld is not divisible by --partitions %lld",
                    (long long)a->num[O_WORKERS], (long long)a->num[O_PARTITIONS]);
    if (!a->given[O_JSON_KEYS]) {
        static const char *text[] = {"text"};
        a->list[O_JSON_KEYS] = text;
        a->list_len[O_JSON_KEYS] = 1;
    }
}

/* The builders being written, so that every exit path (error or signal) removes their
 * temporary files: a failed run leaves nothing behind. */
static mc_ds_builder **active_builders;
static int active_n;

static void abort_active(void)
{
    for (int k = 0; k < active_n; k++)
        if (active_builders && active_builders[k]) {
            mc_ds_builder_abort(active_builders[k]);
            active_builders[k] = NULL;
        }
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    abort_active();
    fflush(stdout);
    fprintf(stderr, PROG ": error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* SIGINT/SIGTERM only raise a flag; the writer checks it between batches (and a read it
 * interrupted checks it at once) and removes the temporary files itself. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static void install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: a blocked read returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void check_stop(void)
{
    if (!stop_signal)
        return;
    abort_active();
    fprintf(stderr, PROG ": interrupted by signal %d; temporary outputs removed\n",
            (int)stop_signal);
    exit(128 + stop_signal);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- input: lines with Python's universal newlines (\n, \r\n, lone \r) --------------------- */

#define READ_CAP ((size_t)1 << 20)
#define BATCH_LINES 1024
#define BATCH_BYTES ((size_t)16 << 20)

struct reader {
    FILE *f;
    const char *name;
    unsigned char *buf;
    size_t pos, end, cap;
    int eof;
    int64_t line_no; /* of the last line returned */
};

static int reader_open(struct reader *r, const char *name)
{
    memset(r, 0, sizeof(*r));
    r->f = fopen(name, "rb");
    if (!r->f)
        return -1;
    r->name = name;
    r->cap = READ_CAP;
    r->buf = malloc(r->cap);
    if (!r->buf)
        die("out of memory");
    return 0;
}

static void reader_close(struct reader *r)
{
    if (r->f)
        fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof(*r));
}

static int reader_fill(struct reader *r)
{
    if (r->eof)
        return 0;
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->end - r->pos);
        r->end -= r->pos;
        r->pos = 0;
    }
    if (r->end == r->cap) {
        r->cap *= 2;
        r->buf = realloc(r->buf, r->cap);
        if (!r->buf)
            die("out of memory reading %s (a line longer than %zu bytes)", r->name, r->cap / 2);
    }
    size_t got = fread(r->buf + r->end, 1, r->cap - r->end, r->f);
    if (got == 0) {
        if (ferror(r->f)) {
            int e = errno;
            check_stop();
            die("%s: read failed: %s", r->name, strerror(e));
        }
        r->eof = 1;
        return 0;
    }
    r->end += got;
    return 1;
}

/* Next line without its terminator, appended to *text (NUL-terminated); *raw = bytes it
 * took in the file, terminator included. Returns 0 at end of file. */
static int reader_line(struct reader *r, char **text, size_t *len, size_t *cap, size_t *raw)
{
    size_t scan = r->pos;
    for (;;) {
        while (scan < r->end && r->buf[scan] != '\n' && r->buf[scan] != '\r')
            scan++;
        /* a \r at the end of the buffer needs its next byte to tell \r\n from a lone \r */
        if (scan < r->end && (r->buf[scan] == '\n' || scan + 1 < r->end || r->eof))
            break;
        size_t rel = scan - r->pos;
        int more = reader_fill(r); /* moves the unread bytes to the start of buf */
        scan = r->pos + rel;
        if (!more) {
            if (r->pos == r->end)
                return 0;
            if (scan >= r->end)
                break; /* last line without a terminator */
        }
    }
    size_t n = scan - r->pos, term = 0;
    if (scan < r->end)
        term = (r->buf[scan] == '\r' && scan + 1 < r->end && r->buf[scan + 1] == '\n') ? 2 : 1;
    if (*len + n + 1 > *cap) {
        while (*len + n + 1 > *cap)
            *cap = *cap ? 2 * *cap : (size_t)1 << 20;
        *text = realloc(*text, *cap);
        if (!*text)
            die("out of memory");
    }
    memcpy(*text + *len, r->buf + r->pos, n);
    (*text)[*len + n] = '\0';
    *len += n + 1;
    *raw = n + term;
    r->pos = scan + term;
    r->line_no++;
    /* a giant line grew the buffer: give the room back now that the line is copied out, so
     * the tokenizer does not run beside two copies of it */
    if (r->cap > READ_CAP * 4 && r->end - r->pos <= READ_CAP) {
        memmove(r->buf, r->buf + r->pos, r->end - r->pos);
        r->end -= r->pos;
        r->pos = 0;
        unsigned char *b = realloc(r->buf, READ_CAP);
        if (b) {
            r->buf = b;
            r->cap = READ_CAP;
        }
    }
    return 1;
}

/* ---- one batch of lines, tokenized in parallel ---------------------------------------------- */

struct doc_out {             /* one key of one line */
    struct mc_tokens tokens; /* all sentences, eod included */
    int32_t *lens;           /* sentence lengths */
    int64_t n_lens, cap_lens;
};

struct line {
    size_t off, len;   /* text in batch.text */
    int64_t line_no;
    const char *file;
    char *err;         /* malloc'ed message on failure */
    struct doc_out *docs; /* [n_keys] */
};

struct batch {
    char *text;
    size_t text_len, text_cap;
    struct line *lines;
    int64_t n, cap;
};

struct ctx {
    const struct args *a;
    const char **keys;
    int n_keys;
    mc_tokenizer *tok;
    int64_t eod;
    mc_json_doc **json; /* per thread */
};

/* Python's strict UTF-8 decoder: no overlongs, no surrogates, nothing above U+10FFFF. */
static int64_t utf8_invalid_at(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c == 0xE0) { k = 2; lo = 0xA0; }
        else if (c == 0xED) { k = 2; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) k = 2;
        else if (c == 0xF0) { k = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) k = 3;
        else if (c == 0xF4) { k = 3; hi = 0x8F; }
        else return (int64_t)i;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n) return (int64_t)i;
            unsigned b = s[i + j];
            if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) return (int64_t)i;
        }
        i += k + 1;
    }
    return -1;
}

/* Error messages of worker threads; OOM is returned as a shared constant, never freed. */
static char OOM_MSG[] = "out of memory";

static void free_msg(char *m)
{
    if (m != OOM_MSG)
        free(m);
}

static char *msgf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *msgf(const char *fmt, ...)
{
    char *m = malloc(1024);
    if (!m)
        return OOM_MSG;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, 1024, fmt, ap);
    va_end(ap);
    return m;
}

static int push_len(struct doc_out *d, int64_t n)
{
    if (d->n_lens == d->cap_lens) {
        int64_t cap = d->cap_lens ? 2 * d->cap_lens : 16;
        int32_t *p = realloc(d->lens, (size_t)cap * sizeof(int32_t));
        if (!p)
            return -1;
        d->lens = p;
        d->cap_lens = cap;
    }
    if (n >= INT32_MAX) /* room for the eod that may join it */
        return -1;
    d->lens[d->n_lens++] = (int32_t)n;
    return 0;
}

/* Tokenizes one value (a string, or a list of strings = pre-split sentences) as
 * Megatron's Encoder.encode: empty sentences vanish; eod joins the last sentence. */
static char *encode_value(const struct ctx *c, const struct line *ln, const char *key,
                          const struct mc_json *v, struct doc_out *d)
{
    d->tokens.len = 0;
    d->n_lens = 0;
    int64_t n_sent = v->type == MC_JSON_ARRAY ? v->len : 1;
    if (v->type != MC_JSON_STRING && v->type != MC_JSON_ARRAY)
        return msgf("%s:%lld: key \"%s\" is a JSON %s; expected a string or a list of strings",
                    ln->file, (long long)ln->line_no, key, mc_json_type_name(v->type));
    for (int64_t s = 0; s < n_sent; s++) {
        const struct mc_json *sv = v->type == MC_JSON_ARRAY ? &v->items[s] : v;
        if (sv->type != MC_JSON_STRING)
            return msgf("%s:%lld: key \"%s\" item %lld is a JSON %s; expected a string",
                        ln->file, (long long)ln->line_no, key, (long long)s,
                        mc_json_type_name(sv->type));
        int64_t before = d->tokens.len;
        mc_status st = mc_tok_encode(c->tok, sv->str, (size_t)sv->len, &d->tokens);
        if (st != MC_OK)
            return msgf("%s:%lld: key \"%s\": tokenizer failed: %s: %s", ln->file,
                        (long long)ln->line_no, key, mc_status_str(st), mc_last_error());
        if (d->tokens.len > before && push_len(d, d->tokens.len - before) != 0)
            return msgf("%s:%lld: key \"%s\": out of memory or sentence over 2^31 tokens",
                        ln->file, (long long)ln->line_no, key);
    }
    if (c->a->given[O_APPEND_EOD] && d->tokens.len > 0) {
        int64_t eod = c->eod;
        if (d->tokens.len == d->tokens.cap) {
            /* struct mc_tokens has no push: grow it by hand for the one extra id */
            int64_t cap = d->tokens.cap * 2 + 16;
            int64_t *p = mc_alloc((size_t)cap * sizeof(int64_t));
            if (!p)
                return OOM_MSG;
            memcpy(p, d->tokens.data, (size_t)d->tokens.len * sizeof(int64_t));
            mc_free(d->tokens.data);
            d->tokens.data = p;
            d->tokens.cap = cap;
        }
        d->tokens.data[d->tokens.len++] = eod;
        d->lens[d->n_lens - 1]++;
    }
    return NULL;
}

static char *encode_line(const struct ctx *c, mc_json_doc *json, const char *text,
                         struct line *ln)
{
    int64_t bad = utf8_invalid_at((const unsigned char *)text, ln->len);
    if (bad >= 0)
        return msgf("%s:%lld: invalid UTF-8 at byte %lld of the line (byte 0x%02x)", ln->file,
                    (long long)ln->line_no, (long long)bad + 1,
                    (unsigned)(unsigned char)text[bad]);
    mc_status st = mc_json_doc_parse(json, text, ln->len, ln->file, ln->line_no);
    if (st != MC_OK)
        return msgf("%s", mc_last_error());
    const struct mc_json *root = mc_json_doc_root(json);
    if (root->type != MC_JSON_OBJECT)
        return msgf("%s:%lld: the line is a JSON %s; expected an object", ln->file,
                    (long long)ln->line_no, mc_json_type_name(root->type));
    for (int k = 0; k < c->n_keys; k++) {
        const struct mc_json *v = mc_json_get(root, c->keys[k]);
        if (!v)
            return msgf("%s:%lld: key \"%s\" (from --json-keys) is missing", ln->file,
                        (long long)ln->line_no, c->keys[k]);
        char *err = encode_value(c, ln, c->keys[k], v, &ln->docs[k]);
        if (err)
            return err;
    }
    return NULL;
}

static void encode_batch(const struct ctx *c, struct batch *b, int workers)
{
    #pragma omp parallel for schedule(dynamic, 4) num_threads(workers)
    for (int64_t i = 0; i < b->n; i++) {
        struct line *ln = &b->lines[i];
        ln->err = encode_line(c, c->json[omp_get_thread_num()], b->text + ln->off, ln);
    }
}

/* ---- the run ------------------------------------------------------------------------------ */

struct run {
    struct ctx c;
    struct batch b;
    mc_ds_builder **builders;
    int64_t docs;
    double bytes, start;
};


/* A line slot keeps its buffers for the next batch, except big ones: otherwise every slot
 * would hold on to the largest document it ever saw and memory would grow with the corpus. */
static void release_big(struct line *ln, int n_keys)
{
    for (int k = 0; k < n_keys; k++) {
        struct doc_out *d = &ln->docs[k];
        if (d->tokens.cap > 1024) {
            mc_free(d->tokens.data);
            d->tokens.data = NULL;
            d->tokens.len = d->tokens.cap = 0;
        }
        if (d->cap_lens > 64) {
            free(d->lens);
            d->lens = NULL;
            d->n_lens = d->cap_lens = 0;
        }
    }
}

static void write_batch(struct run *r)
{
    for (int64_t i = 0; i < r->b.n; i++) {
        struct line *ln = &r->b.lines[i];
        if (ln->err)
            die("%s", ln->err);
        for (int k = 0; k < r->c.n_keys; k++) {
            struct doc_out *d = &ln->docs[k];
            const int64_t *t = d->tokens.data;
            mc_status s = MC_OK;
            for (int64_t j = 0; j < d->n_lens && s == MC_OK; t += d->lens[j], j++)
                s = mc_ds_builder_add_item(r->builders[k], t, d->lens[j]);
            if (s == MC_OK)
                s = mc_ds_builder_end_document(r->builders[k]);
            if (s != MC_OK)
                die("%s:%lld: %s: %s", ln->file, (long long)ln->line_no, mc_status_str(s),
                    mc_last_error());
        }
        release_big(ln, r->c.n_keys);
        r->docs++;
        if (r->docs % r->c.a->num[O_LOG_INTERVAL] == 0) {
            double el = now_s() - r->start;
            if (el <= 0)
                el = 1e-9;
            fprintf(stderr, "Processed %lld documents (%.6f docs/s, %.6f MB/s).\n",
                    (long long)r->docs, (double)r->docs / el, r->bytes / el / 1024 / 1024);
        }
    }
    r->b.n = 0;
    r->b.text_len = 0;
    if (r->b.text_cap > 2 * BATCH_BYTES) { /* as release_big: no slot keeps a giant line's room */
        free(r->b.text);
        r->b.text = NULL;
        r->b.text_cap = 0;
    }
    check_stop();
}

static struct line *batch_add(struct run *r)
{
    struct batch *b = &r->b;
    if (b->n == b->cap) {
        int64_t cap = b->cap ? 2 * b->cap : 256;
        b->lines = realloc(b->lines, (size_t)cap * sizeof(*b->lines));
        if (!b->lines)
            die("out of memory");
        memset(b->lines + b->cap, 0, (size_t)(cap - b->cap) * sizeof(*b->lines));
        for (int64_t i = b->cap; i < cap; i++) {
            b->lines[i].docs = calloc((size_t)r->c.n_keys, sizeof(struct doc_out));
            if (!b->lines[i].docs)
                die("out of memory");
        }
        b->cap = cap;
    }
    struct line *ln = &b->lines[b->n++];
    free_msg(ln->err);
    ln->err = NULL;
    return ln;
}


/* Streams one input file; keeps line i (0-based over all files) when i % every == pick. */
static void run_file(struct run *r, const char *name, int64_t *global, int64_t every,
                     int64_t pick)
{
    struct reader rd;
    if (reader_open(&rd, name) != 0)
        die("--input %s: cannot open: %s", name, strerror(errno));
    int workers = (int)(r->c.a->num[O_WORKERS] / r->c.a->num[O_PARTITIONS]);
    size_t raw;
    for (;;) {
        size_t before = r->b.text_len;
        if (!reader_line(&rd, &r->b.text, &r->b.text_len, &r->b.text_cap, &raw))
            break;
        if ((*global)++ % every != pick) {
            r->b.text_len = before;
            continue;
        }
        struct line *ln = batch_add(r);
        ln->off = before;
        ln->len = r->b.text_len - before - 1;
        ln->line_no = rd.line_no;
        ln->file = name;
        r->bytes += (double)raw;
        if (r->b.n >= BATCH_LINES || r->b.text_len >= BATCH_BYTES) {
            encode_batch(&r->c, &r->b, workers);
            write_batch(r);
        }
    }
    encode_batch(&r->c, &r->b, workers);
    write_batch(r);
    reader_close(&rd);
}

static char **expand_inputs(const struct args *a, size_t *n, glob_t *g)
{
    static const char *one[1];
    if (a->num[O_PARTITIONS] == 1) {
        one[0] = a->str[O_INPUT];
        *n = 1;
        return (char **)one;
    }
    /* Megatron globs --input when partitioning; GLOB_NOSORT keeps the directory order, as
     * Python's glob does */
    int rc = glob(a->str[O_INPUT], GLOB_NOSORT, NULL, g);
    if (rc != 0 || g->gl_pathc == 0)
        die("--input %s: no file matches the pattern", a->str[O_INPUT]);
    for (size_t i = 0; i < g->gl_pathc; i++) {
        size_t l = strlen(g->gl_pathv[i]);
        if (l >= 3 && strcmp(g->gl_pathv[i] + l - 3, ".gz") == 0)
            die("--input %s: %s: gzip-compressed inputs are not supported by megatron.c; "
                "decompress them first", a->str[O_INPUT], mc_status_str(MC_ERR_UNSUPPORTED));
    }
    *n = g->gl_pathc;
    return g->gl_pathv;
}

static void open_outputs(struct run *r)
{
    const struct args *a = r->c.a;
    int code = mc_ds_optimal_dtype_code(mc_tok_vocab_size(r->c.tok));
    r->builders = calloc((size_t)r->c.n_keys, sizeof(*r->builders));
    if (!r->builders)
        die("out of memory");
    active_builders = r->builders;
    active_n = r->c.n_keys;
    for (int k = 0; k < r->c.n_keys; k++) {
        size_t l = strlen(a->str[O_OUTPUT]) + strlen(r->c.keys[k]) + 32;
        char *prefix = malloc(l);
        if (!prefix)
            die("out of memory");
        snprintf(prefix, l, "%s_%s_%s", a->str[O_OUTPUT], r->c.keys[k], "document");
        mc_status s = mc_ds_builder_init(prefix, code, &r->builders[k]);
        free(prefix);
        if (s != MC_OK) {
                        die("--output-prefix %s: %s: %s", a->str[O_OUTPUT], mc_status_str(s),
                mc_last_error());
        }
    }
}

static void run_free(struct run *r, int workers)
{
    for (int64_t i = 0; i < r->b.cap; i++) {
        struct line *ln = &r->b.lines[i];
        for (int k = 0; k < r->c.n_keys; k++) {
            mc_free(ln->docs[k].tokens.data);
            free(ln->docs[k].lens);
        }
        free(ln->docs);
        free_msg(ln->err);
    }
    free(r->b.lines);
    free(r->b.text);
    for (int w = 0; w < workers; w++)
        mc_json_doc_free(r->c.json[w]);
    free(r->c.json);
    free(r->c.keys);
    free(r->builders);
    mc_tok_free(r->c.tok);
}

static void init_tokenizer(struct run *r)
{
    const struct args *a = r->c.a;
    struct mc_tokenizer_args ta = {
        .tokenizer_type = a->str[O_TOK_TYPE],
        .vocab_file = a->str[O_VOCAB_FILE],
        .merge_file = a->str[O_MERGE_FILE],
        .tokenizer_model = strcmp(a->str[O_TOK_TYPE], "PretrainedFromHF") ? a->str[O_TOK_MODEL]
                                                                          : a->str[O_TOK_NAME],
        .vocab_size = a->given[O_VOCAB_SIZE] ? a->num[O_VOCAB_SIZE] : 0,
    };
    ta.tiktoken_pattern = a->str[O_TT_PATTERN];
    ta.tiktoken_num_special_tokens = a->given[O_TT_NUM] ? a->num[O_TT_NUM] : 0;
    ta.tiktoken_special_tokens = a->given[O_TT_SPECIAL] ? a->list[O_TT_SPECIAL] : NULL;
    ta.n_tiktoken_special_tokens = a->given[O_TT_SPECIAL] ? a->list_len[O_TT_SPECIAL] : 0;
    mc_status s = mc_tok_init(&ta, &r->c.tok);
    if (s != MC_OK)
        die("--tokenizer-type %s: %s: %s", a->str[O_TOK_TYPE], mc_status_str(s),
            mc_last_error());
    r->c.eod = mc_tok_eod(r->c.tok);
    if (a->given[O_APPEND_EOD] && r->c.eod < 0)
        die("--append-eod: tokenizer %s has no end-of-document token", a->str[O_TOK_TYPE]);
}

/* --json-keys with a repeated key: Megatron's dicts keep one entry per key. */
static void dedupe_keys(struct run *r, const struct args *a)
{
    r->c.keys = calloc((size_t)a->list_len[O_JSON_KEYS], sizeof(char *));
    if (!r->c.keys)
        die("out of memory");
    for (int i = 0; i < a->list_len[O_JSON_KEYS]; i++) {
        int dup = 0;
        for (int k = 0; k < r->c.n_keys; k++)
            dup |= strcmp(r->c.keys[k], a->list[O_JSON_KEYS][i]) == 0;
        if (!dup)
            r->c.keys[r->c.n_keys++] = a->list[O_JSON_KEYS][i];
    }
}

int main(int argc, char **argv)
{
    struct args a;
    parse_args(argc, argv, &a);
    if (a.given[O_SPLIT])
        die("--split-sentences: %s: sentence splitting needs NLTK's punkt model, which "
            "megatron.c does not implement; split sentences beforehand and give each key a "
            "JSON list of sentences (each becomes one sequence)",
            mc_status_str(MC_ERR_UNSUPPORTED));
    if (a.given[O_KEEP_NL])
        fprintf(stderr, PROG ": warning: --keep-newlines only matters with --split-sentences; "
                "ignored\n");
    struct run r;
    memset(&r, 0, sizeof(r));
    r.c.a = &a;
    printf("Opening %s\n", a.str[O_INPUT]);
    fflush(stdout);
    double t0 = now_s();
    dedupe_keys(&r, &a);
    init_tokenizer(&r);
    int workers = (int)(a.num[O_WORKERS] / a.num[O_PARTITIONS]);
    r.c.json = calloc((size_t)workers, sizeof(*r.c.json));
    for (int w = 0; w < workers; w++)
        if (!r.c.json || mc_json_doc_init(&r.c.json[w]) != MC_OK)
            die("out of memory");
    glob_t g = {0};
    size_t n_in;
    char **inputs = expand_inputs(&a, &n_in, &g);
    install_signal_handlers();
    open_outputs(&r);
    printf("Time to startup: %f\n", now_s() - t0);
    fflush(stdout);
    r.start = now_s();
    /* round-robin partitions: partition p holds lines p, p+P, ...; partitions are then
     * concatenated. --keep-sequential-samples (or one partition) keeps the input order. */
    int64_t parts = a.given[O_KEEP_SEQ] ? 1 : a.num[O_PARTITIONS];
    for (int64_t p = 0; p < parts; p++) {
        int64_t global = 0;
        for (size_t i = 0; i < n_in; i++)
            run_file(&r, inputs[i], &global, parts, p);
    }
    for (int k = 0; k < r.c.n_keys; k++) {
        mc_status s = mc_ds_builder_finalize(r.builders[k]);
        r.builders[k] = NULL;
        if (s != MC_OK)
            die("%s: %s", mc_status_str(s), mc_last_error());
    }
    if (a.num[O_PARTITIONS] > 1)
        globfree(&g);
    run_free(&r, workers);
    for (int k = 0; k < N_OPTS; k++)
        if (OPTS[k].kind == LIST && a.given[k])
            free(a.list[k]);
    return 0;
}
