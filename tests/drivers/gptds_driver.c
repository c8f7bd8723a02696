/* gptds_driver: builds GPT datasets from a small set of data options (the option set
 * prepare_cache had before it took pretrain_gpt's whole command line) and dumps samples.
 * tests/gptds/test_gptds_megatron.py uses it for the case prepare_cache refuses as Megatron's
 * tools/prepare_cache.py does: --mock-data (MockGPTDataset samples against Megatron's).
 *
 *   gptds_driver --data-path [W1] P1 ... | --mock-data  --split S --seq-length N
 *                --train-iters N | --train-samples N --global-batch-size B
 *                [--eval-iters N] [--eval-interval N] [--seed N] [--data-cache-path DIR]
 *                [--tokenizer-type T --vocab-file V --merge-file M | --tokenizer-model F |
 *                 --vocab-size N] [--dump-samples N --dump-path P] (and the flags below)
 */
#include "core/json.h"
#include "megatron/gpt_dataset.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATHS 4096

struct args {
    const char *data[MAX_PATHS];
    int n_data;
    const char *per_split[3][MAX_PATHS];
    int n_per_split[3];
    const char *data_args_path, *per_split_args_path;
    char *args_text;              /* --data-args-path contents, tokens point into it */
    mc_json_doc *per_split_doc;   /* --per-split-data-args-path, tokens point into it */
    const char *split, *cache, *tok_type, *vocab_file, *merge_file, *tok_model, *dump_path;
    int64_t seq, seed, train_iters, train_samples, gbs, eval_iters, eval_interval, vocab_size;
    int64_t world_size, dump_samples, eod, pad;
    bool no_extra_token, keep_partial_valid;
    bool mock, reset_pos, reset_attn, eod_mask, no_attn_mask;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: prepare_cache --data-path [W] PREFIX ... | --train-data-path ... "
            "--valid-data-path ... --test-data-path ... | --mock-data\n"
            "       --seq-length N (--train-iters N | --train-samples N) --global-batch-size N\n"
            "       [--split S] [--seed N] [--eval-iters N] [--eval-interval N] "
            "[--data-cache-path DIR]\n"
            "       [--tokenizer-type T] [--vocab-file F] [--merge-file F] [--tokenizer-model F] "
            "[--vocab-size N]\n"
            "       [--data-args-path F] [--per-split-data-args-path F]\n"
            "       [--prepare-cache-world-size N] [--dump-samples N --dump-path P]\n");
}

static int die(const char *msg, const char *opt, const char *val)
{
    fprintf(stderr, "prepare_cache: %s %s%s%s\n", opt, msg, val ? ": " : "", val ? val : "");
    return 2;
}

static int parse_int(const char *opt, const char *v, int64_t *out)
{
    char *e;
    if (!v)
        return die("needs a value", opt, NULL);
    long long x = strtoll(v, &e, 10);
    if (*e || e == v)
        return die("expects an integer", opt, v);
    *out = x;
    return 0;
}

/* Collects the values of a list option up to the next "--" flag. */
static int take_list(int argc, char **argv, int *i, const char **dst, int *n, const char *opt)
{
    while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
        if (*n == MAX_PATHS)
            return die("has too many values", opt, NULL);
        dst[(*n)++] = argv[++*i];
    }
    return *n ? 0 : die("needs at least one value", opt, NULL);
}

static int parse(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof(*a));
    a->seed = 1234;
    a->eval_iters = 100;
    a->eval_interval = 1000;
    a->world_size = 1;
    a->eod = -1;
    a->pad = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
#define INT_OPT(name, field) else if (!strcmp(o, name)) { rc = parse_int(o, v, &a->field); i++; }
#define STR_OPT(name, field) else if (!strcmp(o, name)) { if (!v) return die("needs a value", o, NULL); a->field = v; i++; }
        if (!strcmp(o, "--data-path")) rc = take_list(argc, argv, &i, a->data, &a->n_data, o);
        else if (!strcmp(o, "--train-data-path")) rc = take_list(argc, argv, &i, a->per_split[0], &a->n_per_split[0], o);
        else if (!strcmp(o, "--valid-data-path")) rc = take_list(argc, argv, &i, a->per_split[1], &a->n_per_split[1], o);
        else if (!strcmp(o, "--test-data-path")) rc = take_list(argc, argv, &i, a->per_split[2], &a->n_per_split[2], o);
        INT_OPT("--seq-length", seq)
        INT_OPT("--seed", seed)
        INT_OPT("--train-iters", train_iters)
        INT_OPT("--train-samples", train_samples)
        INT_OPT("--global-batch-size", gbs)
        INT_OPT("--eval-iters", eval_iters)
        INT_OPT("--eval-interval", eval_interval)
        INT_OPT("--vocab-size", vocab_size)
        INT_OPT("--prepare-cache-world-size", world_size)
        INT_OPT("--dump-samples", dump_samples)
        INT_OPT("--eod-id", eod)
        INT_OPT("--pad-id", pad)
        else if (!strcmp(o, "--no-add-extra-token-to-sequence")) a->no_extra_token = true;
        else if (!strcmp(o, "--keep-partial-validation-sequence")) a->keep_partial_valid = true;
        STR_OPT("--split", split)
        STR_OPT("--data-args-path", data_args_path)
        STR_OPT("--per-split-data-args-path", per_split_args_path)
        STR_OPT("--data-cache-path", cache)
        STR_OPT("--tokenizer-type", tok_type)
        STR_OPT("--vocab-file", vocab_file)
        STR_OPT("--merge-file", merge_file)
        STR_OPT("--tokenizer-model", tok_model)
        STR_OPT("--dump-path", dump_path)
        else if (!strcmp(o, "--mock-data")) a->mock = true;
        else if (!strcmp(o, "--reset-position-ids")) a->reset_pos = true;
        else if (!strcmp(o, "--reset-attention-mask")) a->reset_attn = true;
        else if (!strcmp(o, "--eod-mask-loss")) a->eod_mask = true;
        else if (!strcmp(o, "--no-create-attention-mask-in-dataloader")) a->no_attn_mask = true;
        else if (!strcmp(o, "-h") || !strcmp(o, "--help")) { usage(); exit(0); }
        else { usage(); return die("is not an option prepare_cache knows", o, NULL); }
#undef INT_OPT
#undef STR_OPT
        if (rc)
            return rc;
    }
    if (a->data_args_path && a->n_data)
        return die("cannot be combined with --data-path", "--data-args-path", NULL);
    if (a->per_split_args_path && (a->n_per_split[0] || a->n_per_split[1] || a->n_per_split[2]))
        return die("cannot be combined with --train/valid/test-data-path",
                   "--per-split-data-args-path", NULL);
    bool per = a->n_per_split[0] || a->n_per_split[1] || a->n_per_split[2] || a->per_split_args_path;
    if ((a->n_data > 0 || a->data_args_path) + per + a->mock != 1)
        return die("exactly one of them is required", "--data-path / --*-data-path / --mock-data", NULL);
    if (a->seq < 2)
        return die("is required and must be at least 2", "--seq-length", NULL);
    if (a->gbs <= 0)
        return die("is required and must be positive", "--global-batch-size", NULL);
    if ((a->train_iters > 0) == (a->train_samples > 0))
        return die("exactly one of them is required", "--train-iters / --train-samples", NULL);
    if (a->eval_interval <= 0 || a->eval_iters < 0 || a->world_size <= 0)
        return die("must be positive", "--eval-interval / --eval-iters / --prepare-cache-world-size", NULL);
    if (a->dump_samples > 0 && !a->dump_path)
        return die("is required with --dump-samples", "--dump-path", NULL);
    if (a->n_data && !a->split) /* not with --data-args-path: Megatron then requires --split */
        a->split = "969, 30, 1"; /* Megatron's default string, spaces included (it is hashed) */
    return 0;
}

/* Python str.split() of a whole file into dst (pointers into *text, which the caller frees). */
static mc_status split_words(char *text, const char **dst, int *n, const char *what)
{
    char *p = text;
    *n = 0;
    while (*p) {
        while (*p && (isspace((unsigned char)*p) || (*p >= 0x1c && *p <= 0x1f)))
            *p++ = '\0';
        if (!*p)
            break;
        if (*n == MAX_PATHS)
            return mc_error(MC_ERR_CONFIG, "%s: more than %d entries", what, MAX_PATHS);
        dst[(*n)++] = p;
        while (*p && !(isspace((unsigned char)*p) || (*p >= 0x1c && *p <= 0x1f)))
            p++;
    }
    return *n ? MC_OK : mc_error(MC_ERR_CONFIG, "%s: no data paths in it", what);
}

static mc_status read_text_file(const char *path, char **out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot open %s", path);
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            buf = nb;
        }
    }
    fclose(f);
    if (!buf)
        return MC_ERR_NOMEM;
    buf[n] = '\0';
    *out = buf;
    return MC_OK;
}

/* --data-args-path: the blend list is the file's whitespace-separated words. */
static mc_status load_data_args(struct args *a)
{
    mc_status st = read_text_file(a->data_args_path, &a->args_text);
    return st ? st : split_words(a->args_text, a->data, &a->n_data, a->data_args_path);
}

/* --per-split-data-args-path: {"train": [...] | "w p ...", "valid": ..., "test": ...}. */
static mc_status load_per_split_args(struct args *a)
{
    static const char *keys[3] = {"train", "valid", "test"};
    mc_status st = mc_json_parse_file(a->per_split_args_path, &a->per_split_doc);
    if (st)
        return st;
    const struct mc_json *root = mc_json_doc_root(a->per_split_doc);
    for (int i = 0; i < 3; i++) {
        const struct mc_json *v = mc_json_get(root, keys[i]);
        if (!v)
            return mc_error(MC_ERR_CONFIG, "%s: no \"%s\" key (Megatron needs train, valid and test)",
                            a->per_split_args_path, keys[i]);
        if (v->type == MC_JSON_NULL)
            continue;
        if (v->type == MC_JSON_STRING) {
            if ((st = split_words((char *)v->str, a->per_split[i], &a->n_per_split[i],
                                  a->per_split_args_path)))
                return st;
            continue;
        }
        if (v->type != MC_JSON_ARRAY || v->len == 0 || v->len > MAX_PATHS)
            return mc_error(MC_ERR_CONFIG, "%s: \"%s\" must be a non-empty list of strings or a "
                            "string", a->per_split_args_path, keys[i]);
        for (int64_t k = 0; k < v->len; k++) {
            if (v->items[k].type != MC_JSON_STRING)
                return mc_error(MC_ERR_CONFIG, "%s: \"%s\"[%lld] is a %s, expected a string",
                                a->per_split_args_path, keys[i], (long long)k,
                                mc_json_type_name(v->items[k].type));
            a->per_split[i][a->n_per_split[i]++] = v->items[k].str;
        }
    }
    return MC_OK;
}

/* eod / pad as the datasets see them (spec 3.7); only the samples use them, not the caches. */
static void tokenizer_ids(const struct args *a, int64_t *eod, int64_t *pad)
{
    *pad = a->pad;
    *eod = a->eod;
    if (*eod >= 0)
        return;
    if (a->tok_type && !strcmp(a->tok_type, "NullTokenizer"))
        *eod = a->vocab_size;
    else
        *eod = 50256; /* GPT2BPETokenizer's <|endoftext|> */
}

static int dump(const struct args *a, const struct mc_gpt_dataset_config *c,
                mc_megatron_dataset *ds[3])
{
    for (int i = 0; i < 3; i++) {
        if (!ds[i])
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s.%s.bin", a->dump_path, mc_split_name(i));
        mc_status st = mc_megatron_dataset_dump(ds[i], c->sequence_length, a->dump_samples, path);
        if (st) {
            fprintf(stderr, "prepare_cache: %s: %s\n", mc_status_str(st), mc_last_error());
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc;
    mc_log_set_level(MC_LOG_WARN);
    struct mc_blend blend = {0}, per[3] = {{0}};
    struct mc_gpt_dataset_config c = {0};
    mc_megatron_dataset *ds[3] = {NULL, NULL, NULL};
    char vocab_buf[32];
    mc_status st;
    c.random_seed = a.seed;
    c.sequence_length = a.seq;
    c.split = a.mock ? NULL : a.split;
    c.path_to_cache = a.cache;
    c.reset_position_ids = a.reset_pos;
    c.reset_attention_mask = a.reset_attn;
    c.eod_mask_loss = a.eod_mask;
    c.create_attention_mask = !a.no_attn_mask;
    c.drop_last_partial_validation_sequence = !a.keep_partial_valid;
    c.add_extra_token_to_sequence = !a.no_extra_token;
    c.mmap_bin_files = true;
    tokenizer_ids(&a, &c.eod, &c.pad);
    if ((a.data_args_path && (st = load_data_args(&a))) ||
        (a.per_split_args_path && (st = load_per_split_args(&a))))
        goto fail;
    if ((st = mc_gpt_tokenizer_desc_from_args(&c.tokenizer, a.tok_type, a.vocab_file, a.merge_file,
                                              a.tok_model, a.vocab_size, vocab_buf)))
        goto fail;
    if (a.n_data) {
        if ((st = mc_blend_from_list(a.data, a.n_data, &blend)))
            goto fail;
        c.blend = &blend;
    }
    for (int i = 0; i < 3; i++) {
        if (!a.n_per_split[i])
            continue;
        if ((st = mc_blend_from_list(a.per_split[i], a.n_per_split[i], &per[i])))
            goto fail;
        c.blend_per_split[i] = &per[i];
    }
    if ((st = mc_gpt_dataset_config_finalize(&c)))
        goto fail;
    int64_t train_iters = a.train_iters > 0 ? a.train_iters : a.train_samples / a.gbs;
    int64_t sizes[3];
    mc_gpt_train_valid_test_num_samples(train_iters, a.train_samples, a.gbs, a.eval_interval,
                                        a.eval_iters, sizes);
    if ((st = mc_gpt_build_datasets(&c, sizes, ds)))
        goto fail;
    for (int i = 0; i < 3; i++) {
        if (!ds[i]) {
            printf("%s: not built\n", mc_split_name(i));
            continue;
        }
        printf("%s: %lld samples (requested %lld), %s %s\n", mc_split_name(i),
               (long long)mc_megatron_dataset_len(ds[i]), (long long)sizes[i],
               mc_megatron_dataset_is_blended(ds[i]) ? "BlendedDataset" : "GPTDataset",
               mc_megatron_dataset_hash(ds[i]));
    }
    if (a.dump_samples > 0)
        rc = dump(&a, &c, ds);
    goto out;
fail:
    fprintf(stderr, "prepare_cache: %s: %s\n", mc_status_str(st), mc_last_error());
    rc = 1;
out:
    for (int i = 0; i < 3; i++) {
        mc_megatron_dataset_free(ds[i]);
        mc_blend_free(&per[i]);
    }
    mc_blend_free(&blend);
    free(a.args_text);
    mc_json_doc_free(a.per_split_doc);
    return rc;
}
