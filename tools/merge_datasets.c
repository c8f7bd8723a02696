/* merge_datasets: concatenates every .bin/.idx pair found in a directory into one dataset, in
 * sorted prefix order, with the first dataset's dtype. Mirrors Megatron-LM's
 * tools/merge_datasets.py (same options; --multimodal is refused: megatron.c has no
 * multimodal datasets). Exit status: 0 done, 1 failure, 2 bad command line. */
#include "megatron/indexed_dataset.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROG "merge_datasets"
#define USAGE "usage: " PROG " [-h] --input INPUT --output-prefix OUTPUT_PREFIX [--multimodal]\n"

static void usage_error(const char *fmt, const char *arg)
{
    fputs(USAGE, stderr);
    fprintf(stderr, PROG ": error: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(2);
}

struct args { const char *input, *output_prefix; int multimodal; };

/* argparse rules: --opt VALUE, --opt=VALUE, and unambiguous prefixes of option names. */
static void parse_args(int argc, char **argv, struct args *a)
{
    static const char *names[] = {"--input", "--output-prefix", "--multimodal", "--help"};
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i], *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        int hit = -1, hits = 0;
        for (int k = 0; k < 4; k++)
            if (len >= 3 && strncmp(names[k], arg, len) == 0) {
                if (strlen(names[k]) == len) { hit = k; hits = 1; break; }
                hit = k;
                hits++;
            }
        if (strcmp(arg, "-h") == 0)
            hit = 3, hits = 1;
        if (hits != 1)
            usage_error(hits ? "ambiguous option: %s" : "unrecognized arguments: %s", arg);
        if (hit == 3) {
            fputs(USAGE "\nMerges every PREFIX.bin/PREFIX.idx pair in --input into "
                  "OUTPUT_PREFIX.bin/.idx.\n", stdout);
            exit(0);
        }
        if (hit == 2) {
            if (eq)
                usage_error("argument --multimodal: ignored explicit argument '%s'", eq + 1);
            a->multimodal = 1;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val || (!eq && val[0] == '-' && val[1] == '-'))
            usage_error("argument %s: expected one argument", names[hit]);
        if (hit == 0) a->input = val; else a->output_prefix = val;
    }
    if (!a->input && !a->output_prefix)
        usage_error("the following arguments are required: %s", "--input, --output-prefix");
    if (!a->input)
        usage_error("the following arguments are required: %s", "--input");
    if (!a->output_prefix)
        usage_error("the following arguments are required: %s", "--output-prefix");
}

static int is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Python's os.path.splitext: the last dot that is not part of the leading dots. */
static size_t stem_len(const char *name)
{
    size_t n = strlen(name), lead = 0;
    while (name[lead] == '.')
        lead++;
    const char *dot = strrchr(name + lead, '.');
    return dot ? (size_t)(dot - name) : n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void fail(const char *what)
{
    fprintf(stderr, PROG ": error: %s\n", what);
    exit(1);
}

/* Lists the prefixes of `dir` as Megatron does: every regular file's stem needs its partner
 * (.bin for an .idx, .idx for anything else). Returns a sorted array of "dir/stem". */
static char **list_prefixes(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, PROG ": error: --input %s is not a directory or does not exist (%s)\n",
                dir, strerror(errno));
        exit(1);
    }
    char **out = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        size_t sl = stem_len(e->d_name), plen = strlen(dir) + 1 + sl;
        char *full = malloc(strlen(dir) + strlen(e->d_name) + 2), *pair = malloc(plen + 5);
        if (!full || !pair)
            fail("out of memory");
        sprintf(full, "%s/%s", dir, e->d_name);
        snprintf(pair, plen + 1, "%s/%s", dir, e->d_name);
        int dup = 0;
        for (int k = 0; k < n; k++)
            dup |= strcmp(out[k], pair) == 0;
        if (dup || !is_file(full)) {
            free(full);
            free(pair);
            continue;
        }
        int is_idx = strcmp(e->d_name + sl, ".idx") == 0;
        strcat(pair, is_idx ? ".bin" : ".idx");
        if (!is_file(pair)) {
            fprintf(stderr, PROG ": error: %s file not provided for %s (found %s)\n",
                    is_idx ? ".bin" : ".idx", full, e->d_name);
            exit(1);
        }
        pair[plen] = '\0';
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            out = realloc(out, (size_t)cap * sizeof(*out));
            if (!out)
                fail("out of memory");
        }
        out[n++] = pair;
        free(full);
    }
    closedir(d);
    if (n > 0)
        qsort(out, (size_t)n, sizeof(*out), cmp_str);
    *count = n;
    return out;
}

static void die_status(mc_status s)
{
    fprintf(stderr, PROG ": error: %s: %s\n", mc_status_str(s), mc_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    struct args a = {0};
    parse_args(argc, argv, &a);
    if (a.multimodal) {
        fprintf(stderr, PROG ": error: --multimodal: %s: multimodal indexed datasets "
                "(sequence_modes) are not supported by megatron.c\n",
                mc_status_str(MC_ERR_UNSUPPORTED));
        return 1;
    }
    int n = 0;
    char **prefixes = list_prefixes(a.input, &n);
    if (n == 0) {
        fprintf(stderr, PROG ": error: --input %s holds no .bin/.idx pairs to merge\n", a.input);
        return 1;
    }
    mc_indexed_dataset *first;
    mc_status s = mc_ds_open(prefixes[0], &first);
    if (s != MC_OK)
        die_status(s);
    int code = mc_ds_dtype_code(first);
    mc_ds_close(first);
    mc_ds_builder *b;
    if ((s = mc_ds_builder_init(a.output_prefix, code, &b)) != MC_OK)
        die_status(s);
    for (int i = 0; i < n; i++) {
        if ((s = mc_ds_builder_add_index(b, prefixes[i])) != MC_OK) {
            mc_ds_builder_abort(b);
            die_status(s);
        }
    }
    if ((s = mc_ds_builder_finalize(b)) != MC_OK)
        die_status(s);
    for (int i = 0; i < n; i++)
        free(prefixes[i]);
    free(prefixes);
    return 0;
}
