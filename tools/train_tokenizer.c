/* train_tokenizer: trains a byte-level BPE tokenizer (GPT-2 pre-tokenizer and byte alphabet)
 * on text files and writes vocab.json + merges.txt (for --tokenizer-type GPT2BPETokenizer
 * --vocab-file/--merge-file) and tokenizer.json + tokenizer_config.json (HuggingFace format, for
 * --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR; eos = the first special token). Megatron ships no
 * trainer; this is megatron.c's own tool. Deterministic: same inputs, same files.
 *
 *   train_tokenizer --input FILE [FILE...] --vocab-size N --output-dir DIR
 *                   [--min-frequency F] [--special-tokens TOK...] [--json-keys KEY]
 *
 *   --input          text files; each file is one document (whole file, pre-tokenized as is),
 *                    or with --json-keys, JSONL files whose KEY string of each line is one
 *   --vocab-size     total vocabulary: 256 byte tokens + merges + special tokens
 *   --output-dir     created if missing
 *   --min-frequency  stop merging when the best pair occurs fewer times (default 2)
 *   --special-tokens added at the end of the vocab (default: <|endoftext|>)
 */
#include "core/json.h"
#include "tokenizer/bpe_trainer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: train_tokenizer --input FILE [FILE...] --vocab-size N --output-dir DIR "
               "[--min-frequency F] [--special-tokens TOK...] [--json-keys KEY]\n");
}

static void help(void)
{
    usage(stdout);
    printf("\nTrains a byte-level BPE tokenizer (GPT-2 style) and writes vocab.json, merges.txt,\n"
           "tokenizer.json and tokenizer_config.json, usable as --tokenizer-type GPT2BPETokenizer\n"
           "(--vocab-file/--merge-file) or HuggingFaceTokenizer (--tokenizer-model DIR).\n\n"
           "options:\n"
           "  -h, --help              show this help and exit\n"
           "  --input FILE [FILE...]  text files, or JSONL files with --json-keys\n"
           "  --vocab-size N          size of the vocabulary, special tokens included\n"
           "  --output-dir DIR        where the files are written (created if missing)\n"
           "  --min-frequency F       minimum count of a pair to be merged (default 2)\n"
           "  --special-tokens TOK... special tokens (default <|endoftext|>)\n"
           "  --json-keys KEY         read KEY of each JSON line instead of plain text\n");
}

static int fail(mc_status st)
{
    fprintf(stderr, "train_tokenizer: error: %s: %s\n", mc_status_str(st), mc_last_error());
    return 1;
}

static mc_status feed_jsonl(mc_bpe_trainer *tr, const char *path, const char *buf, size_t n,
                            const char *key)
{
    mc_json_doc *doc;
    mc_status st = mc_json_doc_init(&doc);
    int64_t line = 1;
    for (size_t pos = 0; st == MC_OK && pos < n; line++) {
        const char *nl = memchr(buf + pos, '\n', n - pos);
        size_t end = nl ? (size_t)(nl - buf) : n;
        size_t len = end - pos;
        if (len && buf[pos + len - 1] == '\r')
            len--;
        if ((st = mc_json_doc_parse(doc, buf + pos, len, path, line)))
            break;
        const struct mc_json *v = mc_json_get(mc_json_doc_root(doc), key);
        if (!v || v->type != MC_JSON_STRING) {
            st = mc_error(MC_ERR_FORMAT, "%s:%lld: key \"%s\" %s", path, (long long)line, key,
                          v ? "is not a string" : "is missing");
            break;
        }
        st = mc_bpe_trainer_feed(tr, v->str, (size_t)v->len);
        pos = end + 1;
    }
    mc_json_doc_free(doc);
    return st;
}

int main(int argc, char **argv)
{
    const char **inputs = calloc((size_t)argc, sizeof(char *));
    const char **special = calloc((size_t)argc + 1, sizeof(char *));
    int n_in = 0, n_special = -1, rc = 0;
    mc_bpe_trainer *tr = NULL;
    long long vocab_size = 0, min_freq = 2;
    const char *outdir = NULL, *json_key = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *end = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help();
            goto out;
        } else if (strcmp(a, "--input") == 0) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                inputs[n_in++] = argv[++i];
        } else if (strcmp(a, "--special-tokens") == 0) {
            n_special = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                special[n_special++] = argv[++i];
        } else if (strcmp(a, "--vocab-size") == 0 && i + 1 < argc) {
            vocab_size = strtoll(argv[++i], &end, 10);
            if (*end || vocab_size <= 0) {
                fprintf(stderr, "train_tokenizer: --vocab-size %s: expected a positive integer\n", argv[i]);
                rc = 2;
                goto out;
            }
        } else if (strcmp(a, "--min-frequency") == 0 && i + 1 < argc) {
            min_freq = strtoll(argv[++i], &end, 10);
            if (*end || min_freq < 1) {
                fprintf(stderr, "train_tokenizer: --min-frequency %s: expected an integer >= 1\n", argv[i]);
                rc = 2;
                goto out;
            }
        } else if (strcmp(a, "--output-dir") == 0 && i + 1 < argc) {
            outdir = argv[++i];
        } else if (strcmp(a, "--json-keys") == 0 && i + 1 < argc) {
            json_key = argv[++i];
        } else {
            fprintf(stderr, "train_tokenizer: unknown or incomplete option %s\n", a);
            usage(stderr);
            rc = 2;
            goto out;
        }
    }
    if (!n_in || !vocab_size || !outdir) {
        fprintf(stderr, "train_tokenizer: --input, --vocab-size and --output-dir are required\n");
        usage(stderr);
        rc = 2;
        goto out;
    }
    if (n_special < 0) {
        special[0] = "<|endoftext|>";
        n_special = 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mc_status st = mc_bpe_trainer_init(&tr);
    size_t total = 0;
    for (int i = 0; i < n_in && st == MC_OK; i++) {
        char *buf;
        size_t n;
        if ((st = mc_tok_read_file(inputs[i], "input", &buf, &n)))
            break;
        total += n;
        st = json_key ? feed_jsonl(tr, inputs[i], buf, n, json_key) : mc_bpe_trainer_feed(tr, buf, n);
        if (st && !json_key) { /* name the file: copy the message before reformatting it */
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", mc_last_error());
            st = mc_error(st, "%s: %s", inputs[i], msg);
        }
        mc_free(buf);
    }
    struct mc_bpe_train_opts o = {.vocab_size = vocab_size, .min_frequency = min_freq,
                                  .special = special, .n_special = n_special};
    if (st == MC_OK)
        st = mc_bpe_trainer_train(tr, &o);
    if (st == MC_OK && mkdir(outdir, 0777) != 0 && errno != EEXIST)
        st = mc_error(MC_ERR_IO, "cannot create --output-dir %s: %s", outdir, strerror(errno));
    if (st == MC_OK)
        st = mc_bpe_trainer_save(tr, outdir);
    if (st) {
        rc = fail(st);
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("train_tokenizer: %zu bytes from %d file(s), %d merges, vocab size %lld (%d special), "
           "%.2f s -> %s/{vocab.json,merges.txt,tokenizer.json,tokenizer_config.json}\n",
           total, n_in, mc_bpe_trainer_n_merges(tr),
           (long long)mc_bpe_trainer_vocab_size(tr), n_special, secs, outdir);
out:
    mc_bpe_trainer_free(tr);
    free(inputs);
    free(special);
    return rc;
}
