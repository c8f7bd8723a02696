/* prepare_cache: builds Megatron's GPT dataset index caches offline (the work
 * BlendedMegatronDatasetBuilder does on rank 0 at the start of training), as Megatron's
 * tools/prepare_cache.py does. It takes pretrain_gpt's whole command line: the same parser and
 * validate_args (training/args.c, training/validate.c) read it, so a user runs it with the
 * training script's arguments unchanged. The files (description.txt,
 * document/sample/shuffle_index.npy, dataset_index.npy, dataset_sample_index.npy) are
 * byte-identical to Megatron's, so Megatron and megatron.c both start without rebuilding.
 * Documented in docs/formats/gpt_dataset_cache.md.
 *
 *   prepare_cache PRETRAIN_GPT_ARGS... --data-cache-path DIR [--prepare-cache-world-size N]
 *
 * As in Megatron, --data-cache-path is required and --mock-data is refused (ValueError, exit 1).
 * megatron.c additions, for tests against Megatron's GPTDatasetConfig fields that have no
 * command-line option: --dump-samples N --dump-path P (write the first N samples of each split),
 * --eod-id N, --pad-id N, --no-add-extra-token-to-sequence, --keep-partial-validation-sequence.
 */
#include "core/json.h"
#include "megatron/gpt_dataset.h"
#include "training/args.h"
#include "training/train_data.h"
#include "training/validate.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATHS 4096
#define PROG "prepare_cache.py"

/* What prepare_cache adds to pretrain_gpt's arguments. */
struct extras {
    int64_t world_size;   /* --prepare-cache-world-size, 0 = not given */
    int64_t dump_samples, eod, pad;
    const char *dump_path;
    bool no_extra_token, keep_partial_valid;
};

/* Blend lists read from --data-args-path / --per-split-data-args-path. */
struct files {
    const char *data[MAX_PATHS];
    int n_data;
    const char *per_split[3][MAX_PATHS];
    int n_per_split[3];
    char *args_text;              /* --data-args-path contents, tokens point into it */
    mc_json_doc *per_split_doc;   /* --per-split-data-args-path, tokens point into it */
};

static int parse_int(const char *opt, const char *v, int64_t *out)
{
    char *e;
    if (!v) {
        fprintf(stderr, "%s: error: argument %s: expected one argument\n", PROG, opt);
        return 2;
    }
    long long x = strtoll(v, &e, 10);
    if (*e || e == v) {
        fprintf(stderr, "%s: error: argument %s: invalid int value: '%s'\n", PROG, opt, v);
        return 2;
    }
    *out = x;
    return 0;
}

/* Takes prepare_cache's own options out of argv (compacted in place); the rest is
 * pretrain_gpt's command line. */
static int take_extras(int *argc, char **argv, struct extras *x)
{
    memset(x, 0, sizeof(*x));
    x->eod = -1;
    x->pad = -1;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *o = argv[i], *v = i + 1 < *argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(o, "--prepare-cache-world-size")) {
            rc = parse_int(o, v, &x->world_size);
            i++;
            if (!rc && x->world_size <= 0) {
                fprintf(stderr, "ValueError: --prepare-cache-world-size must be positive\n");
                return 1;
            }
        } else if (!strcmp(o, "--dump-samples")) {
            rc = parse_int(o, v, &x->dump_samples);
            i++;
        } else if (!strcmp(o, "--eod-id")) {
            rc = parse_int(o, v, &x->eod);
            i++;
        } else if (!strcmp(o, "--pad-id")) {
            rc = parse_int(o, v, &x->pad);
            i++;
        } else if (!strcmp(o, "--dump-path")) {
            if (!v)
                return parse_int(o, NULL, NULL);
            x->dump_path = v;
            i++;
        } else if (!strcmp(o, "--no-add-extra-token-to-sequence")) {
            x->no_extra_token = true;
        } else if (!strcmp(o, "--keep-partial-validation-sequence")) {
            x->keep_partial_valid = true;
        } else {
            argv[out++] = argv[i];
        }
        if (rc)
            return rc;
    }
    *argc = out;
    argv[out] = NULL;
    if (x->dump_samples > 0 && !x->dump_path) {
        fprintf(stderr, "%s: error: --dump-samples needs --dump-path\n", PROG);
        return 2;
    }
    return 0;
}

/* Python prints "Kind: message", or just "Kind" for a bare assertion; argparse its usage. */
static void print_failure(const struct mc_args *a)
{
    if (!a->err_kind) {
        mc_args_print_usage(stderr, PROG);
        for (const char *h = a->hint; *h;) {
            size_t n = strcspn(h, "\n");
            fprintf(stderr, "%s: hint: %.*s\n", PROG, (int)n, h);
            h += n + (h[n] == '\n');
        }
        fprintf(stderr, "%s: error: %s\n", PROG, a->err);
    } else if (a->err[0]) {
        fprintf(stderr, "%s: %s\n", a->err_kind, a->err);
    } else {
        fprintf(stderr, "%s\n", a->err_kind);
    }
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
static mc_status load_data_args(struct files *a, const char *path)
{
    mc_status st = read_text_file(path, &a->args_text);
    return st ? st : split_words(a->args_text, a->data, &a->n_data, path);
}

/* --per-split-data-args-path: {"train": [...] | "w p ...", "valid": ..., "test": ...}. */
static mc_status load_per_split_args(struct files *a, const char *path)
{
    static const char *keys[3] = {"train", "valid", "test"};
    mc_status st = mc_json_parse_file(path, &a->per_split_doc);
    if (st)
        return st;
    const struct mc_json *root = mc_json_doc_root(a->per_split_doc);
    for (int i = 0; i < 3; i++) {
        const struct mc_json *v = mc_json_get(root, keys[i]);
        if (!v)
            return mc_error(MC_ERR_CONFIG, "%s: no \"%s\" key (Megatron needs train, valid and test)",
                            path, keys[i]);
        if (v->type == MC_JSON_NULL)
            continue;
        if (v->type == MC_JSON_STRING) {
            if ((st = split_words((char *)v->str, a->per_split[i], &a->n_per_split[i],
                                  path)))
                return st;
            continue;
        }
        if (v->type != MC_JSON_ARRAY || v->len == 0 || v->len > MAX_PATHS)
            return mc_error(MC_ERR_CONFIG, "%s: \"%s\" must be a non-empty list of strings or a "
                            "string", path, keys[i]);
        for (int64_t k = 0; k < v->len; k++) {
            if (v->items[k].type != MC_JSON_STRING)
                return mc_error(MC_ERR_CONFIG, "%s: \"%s\"[%lld] is a %s, expected a string",
                                path, keys[i], (long long)k,
                                mc_json_type_name(v->items[k].type));
            a->per_split[i][a->n_per_split[i]++] = v->items[k].str;
        }
    }
    return MC_OK;
}

/* eod / pad as the datasets see them (spec 3.7); only the samples use them, not the caches. */
static void tokenizer_ids(const struct mc_args *a, const struct extras *x, int64_t *eod,
                          int64_t *pad)
{
    *pad = x->pad;
    *eod = x->eod;
    if (*eod >= 0)
        return;
    const char *t = mc_args_str(a, MC_A_tokenizer_type);
    if (t && !strcmp(t, "NullTokenizer") && !mc_args_is_none(a, MC_A_vocab_size))
        *eod = mc_args_int(a, MC_A_vocab_size);
    else
        *eod = 50256; /* GPT2BPETokenizer's <|endoftext|> */
}

static int dump(const struct extras *a, const struct mc_gpt_dataset_config *c,
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

/* _validate_prepare_cache_args of Megatron's tools/prepare_cache.py. */
static int check_prepare_cache_args(const struct mc_args *a)
{
    if (mc_args_is_none(a, MC_A_data_cache_path)) {
        fprintf(stderr, "ValueError: --data-cache-path must be provided for cache preparation\n");
        return 1;
    }
    if (mc_args_bool(a, MC_A_mock_data)) {
        fprintf(stderr, "ValueError: --mock-data is not supported by tools/prepare_cache.py\n");
        return 1;
    }
    return 0;
}

/* parse_args + _normalize_prepare_cache_args + validate_args, as Megatron's main() runs them;
 * validate_args' report (the arguments dump) goes to stdout as in Megatron. */
static int parse_and_validate(int argc, char **argv, const struct extras *x, struct mc_args **out)
{
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    struct mc_args *a = NULL;
    if (mc_args_init(&a) != MC_OK) {
        fprintf(stderr, "prepare_cache: %s\n", mc_last_error());
        return 1;
    }
    *out = a;
    if (mc_args_parse(a, argc, argv) != MC_OK) {
        print_failure(a);
        return a->exit_code ? a->exit_code : 1;
    }
    if (a->help) {
        mc_args_print_help(stdout, PROG);
        printf("\nprepare cache:\n  --prepare-cache-world-size PREPARE_CACHE_WORLD_SIZE\n"
               "                        world size that sets the data-parallel size and the "
               "sample counts (default: None)\n");
        exit(0);
    }
    mc_args_set_int(a, MC_A_rank, 0);
    if (x->world_size > 0)
        mc_args_set_int(a, MC_A_world_size, x->world_size);
    if (mc_args_validate(a, defaults, stdout, stderr) != MC_OK) {
        fflush(stdout);
        if (a->exit_code)
            print_failure(a);
        return a->exit_code ? a->exit_code : 1;
    }
    fflush(stdout);
    return check_prepare_cache_args(a);
}

int main(int argc, char **argv)
{
    struct extras x;
    struct files f;
    struct mc_args *a = NULL;
    struct mc_train_data_config dc;
    mc_megatron_dataset *ds[3] = {NULL, NULL, NULL};
    mc_status st = MC_OK;
    memset(&f, 0, sizeof(f));
    memset(&dc, 0, sizeof(dc));
    int rc = take_extras(&argc, argv, &x);
    if (rc)
        return rc;
    if ((rc = parse_and_validate(argc, argv, &x, &a)))
        goto out;
    mc_log_set_level(MC_LOG_WARN);
    const char *args_path = mc_args_str(a, MC_A_data_args_path);
    const char *split_path = mc_args_str(a, MC_A_per_split_data_args_path);
    if ((args_path && (st = load_data_args(&f, args_path))) ||
        (split_path && (st = load_per_split_args(&f, split_path))))
        goto fail;
    struct mc_data_lists lists = {f.data, f.n_data, {f.per_split[0], f.per_split[1], f.per_split[2]},
                                  {f.n_per_split[0], f.n_per_split[1], f.n_per_split[2]}};
    int64_t eod, pad;
    tokenizer_ids(a, &x, &eod, &pad);
    if ((st = mc_train_data_config_init(&dc, a, eod, args_path || split_path ? &lists : NULL)))
        goto fail;
    /* GPTDatasetConfig fields with no option of their own (megatron.c test additions). */
    dc.cfg.pad = pad;
    dc.cfg.drop_last_partial_validation_sequence = !x.keep_partial_valid;
    dc.cfg.add_extra_token_to_sequence = !x.no_extra_token;
    int64_t sizes[3];
    mc_train_data_num_samples(a, sizes);
    if ((st = mc_gpt_build_datasets(&dc.cfg, sizes, ds)))
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
    if (x.dump_samples > 0)
        rc = dump(&x, &dc.cfg, ds);
    goto out;
fail:
    fprintf(stderr, "prepare_cache: %s: %s\n", mc_status_str(st), mc_last_error());
    rc = 1;
out:
    for (int i = 0; i < 3; i++)
        mc_megatron_dataset_free(ds[i]);
    mc_train_data_config_free(&dc);
    free(f.args_text);
    mc_json_doc_free(f.per_split_doc);
    mc_args_free(a);
    return rc;
}
