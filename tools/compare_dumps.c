/* compare_dumps A B: two tensor dumps (docs/formats/dump.md) side by side, tensor by tensor in
 * the order the data flows, with a verdict against the tolerance of the precision they were
 * computed in, and one line saying where they first part (docs/alignment.md). A and B are dump
 * files or --dump-dir directories (DIR/iter_NNNNNNN/rank_NNNNN.dump: the ranks of an iteration
 * are merged by name, the lowest rank's copy kept). B is the reference. megatron.c's own tool:
 * Megatron has none. Exit status: 0 every tensor within tolerance, 1 a tensor beyond it or a
 * name on one side only, 2 bad command line or unreadable dump. */
#include "megatron/dump.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"

#define PROG "compare_dumps"
#define USAGE                                                                                     \
    "usage: " PROG " [-h] [--precision {fp32,bf16,fp16}] [--reduction-length K]\n"              \
    "                     [--adam-beta2 B2] [--quiet] A B\n"

static void usage_error(const char *msg, const char *arg)
{
    fputs(USAGE, stderr);
    fprintf(stderr, PROG ": error: %s%s\n", msg, arg ? arg : "");
    exit(2);
}

static const char *const HELP =
    "Compares two tensor dumps (files, or pretrain_gpt --dump-dir / megatron_dump_hooks.py\n"
    "directories; B is the reference) in data-flow order: parameters, then per micro-batch the\n"
    "batch, forward by layer and backward in reverse, the loss, the main grads (before and after\n"
    "the data-parallel reduction, after clipping), the optimizer state and the parameters after\n"
    "the step. Per tensor: max abs error, max relative error (to max|B|), cosine similarity and\n"
    "a verdict: within tolerance 8 * u * sqrt(K) (u the unit roundoff of the precision, K the\n"
    "reduction length), or beyond. The last line names the first divergence. Logits\n"
    "(forward.output_layer.output) whose vocabularies differ in size, Megatron's padded one\n"
    "against a HuggingFace model's, are compared over the columns both hold.\n\n"
    "  --precision P         fp32, bf16 or fp16 for every tensor (default: the coarser dtype\n"
    "                        of the two tensors)\n"
    "  --reduction-length K  the K of the tolerance (default: each tensor's last dimension)\n"
    "  --adam-beta2 B2       the run's Adam beta2 (default 0.999): exp_avg_sq also allows the\n"
    "                        rounding of beta2 to the precision, u * B2 / (1 - B2)\n"
    "  --quiet               print only tensors beyond tolerance and the last line\n";

struct opts {
    const char *a, *b;
    int precision; /* -1: from the dtypes; else an enum mc_dtype (F32, BF16, F16) */
    int64_t red;   /* 0: the last dimension */
    double beta2;
    bool quiet;
};

/* ---- loading: a file, or a dump directory's iterations merged over ranks ------------- */

struct side {
    int n_iters;
    int64_t *iter;   /* [n_iters], ascending (0 for a single file) */
    mc_dump **dumps; /* [n_iters]: the merged ranks of each iteration */
};

static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* Sorted entries of dir starting with prefix; NULL when it cannot be read. */
static char **list_dir(const char *dir, const char *prefix, int *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **out = NULL;
    int cap = 0;
    *n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            out = realloc(out, (size_t)cap * sizeof(*out));
        }
        out[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    if (*n)
        qsort(out, (size_t)*n, sizeof(*out), cmp_str);
    return out;
}

static void free_list(char **l, int n)
{
    for (int i = 0; i < n; i++)
        free(l[i]);
    free(l);
}

/* dir/name, malloc'd. */
static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(2);
    }
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static void die_dump(void)
{
    fprintf(stderr, PROG ": %s\n", mc_last_error());
    exit(2);
}

/* The rank files of one iteration directory, merged: a name the lowest rank holds wins (the
 * data-parallel replicas hold the same parameters). */
static mc_dump *load_iteration(const char *dir)
{
    int n = 0;
    char **ranks = list_dir(dir, "rank_", &n);
    if (!ranks || !n) {
        fprintf(stderr, PROG ": %s: no rank_NNNNN.dump files\n", dir);
        exit(2);
    }
    mc_dump *all = NULL;
    if (mc_dump_init(&all))
        die_dump();
    for (int r = 0; r < n; r++) {
        char *path = join(dir, ranks[r]);
        mc_dump *d = NULL;
        if (mc_dump_read(path, &d))
            die_dump();
        free(path);
        for (int64_t i = 0; i < mc_dump_count(d); i++) {
            const struct mc_dump_tensor *t = mc_dump_get(d, i);
            if (!mc_dump_find(all, t->name) &&
                mc_dump_add(all, t->name, t->dtype, t->ndim, t->shape, t->data))
                die_dump();
        }
        mc_dump_free(d);
    }
    free_list(ranks, n);
    return all;
}

static void load_side(const char *path, struct side *s)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, PROG ": cannot open %s\n", path);
        exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        s->n_iters = 1;
        s->iter = calloc(1, sizeof(int64_t));
        s->dumps = calloc(1, sizeof(mc_dump *));
        if (mc_dump_read(path, &s->dumps[0]))
            die_dump();
        return;
    }
    int n = 0;
    char **its = list_dir(path, "iter_", &n);
    if (!its || !n) {
        fprintf(stderr, PROG ": %s: no iter_NNNNNNN directories (not a --dump-dir)\n", path);
        exit(2);
    }
    s->n_iters = n;
    s->iter = calloc((size_t)n, sizeof(int64_t));
    s->dumps = calloc((size_t)n, sizeof(mc_dump *));
    for (int i = 0; i < n; i++) {
        char *dir = join(path, its[i]);
        s->iter[i] = strtoll(its[i] + 5, NULL, 10);
        s->dumps[i] = load_iteration(dir);
        free(dir);
    }
    free_list(its, n);
}

/* ---- data-flow order ----------------------------------------------------------------- */

/* Where a name sits in the flow: group (params, micro-batch work, loss, the three grad
 * moments, optimizer), micro-batch (the @k suffix), phase inside a micro-batch (batch,
 * forward, backward), position (layer order forward, reverse backward), file index. */
struct key {
    int group, micro, phase;
    double pos;
    int64_t index;
};

static int micro_of(const char *name)
{
    const char *at = strrchr(name, '@');
    return at ? atoi(at + 1) : 0;
}

/* Forward position of a module or parameter name: embedding, layers by number (input before
 * output), final norm, output layer. */
static double forward_pos(const char *name)
{
    const char *p = strstr(name, "decoder.layers.");
    if (p) {
        double l = (double)strtoll(p + 15, NULL, 10);
        return l + (strstr(p, ".output") ? 0.5 : 0.0);
    }
    if (strstr(name, "embedding"))
        return -1;
    if (strstr(name, "final_layernorm"))
        return 1e9;
    if (strstr(name, "output_layer"))
        return 1e9 + 1;
    return 2e9;
}

static struct key key_of(const char *name, int64_t index)
{
    struct key k = {.micro = 0, .phase = 0, .pos = 0, .index = index};
    static const char *const grads[] = {"grad.", "grad_reduced.", "grad_clipped."};
    if (strncmp(name, "param.", 6) == 0) {
        k.group = 0;
        return k;
    }
    if (strncmp(name, "batch.", 6) == 0 || strncmp(name, "forward.", 8) == 0 ||
        strncmp(name, "backward.", 9) == 0) {
        k.group = 1;
        k.micro = micro_of(name);
        k.phase = name[0] == 'b' && name[1] == 'a' && name[2] == 't' ? 0 : name[0] == 'f' ? 1 : 2;
        /* backward: last layer first, a layer's output grad before its input grad */
        k.pos = k.phase == 2 ? -forward_pos(name) : forward_pos(name);
        return k;
    }
    if (strcmp(name, "loss") == 0 || strncmp(name, "loss@", 5) == 0) {
        k.group = 2;
        return k;
    }
    for (int g = 0; g < 3; g++)
        if (strncmp(name, grads[g], strlen(grads[g])) == 0) {
            k.group = 3 + g;
            k.pos = -forward_pos(name); /* backward makes them last layer first */
            return k;
        }
    k.group = strncmp(name, "optimizer.", 10) == 0 ? 6 : 7;
    return k;
}

static int cmp_key(const struct key *x, const struct key *y)
{
#define CMP(f)                                                                                    \
    if (x->f != y->f)                                                                             \
        return x->f < y->f ? -1 : 1;
    CMP(group) CMP(micro) CMP(phase) CMP(pos) CMP(index)
#undef CMP
    return 0;
}

struct entry {
    struct key key;
    const struct mc_dump_tensor *a, *b;
};

static int cmp_entry(const void *x, const void *y)
{
    return cmp_key(&((const struct entry *)x)->key, &((const struct entry *)y)->key);
}

/* ---- one tensor ---------------------------------------------------------------------- */

static bool is_float(enum mc_dtype t)
{
    return t == MC_DTYPE_F32 || t == MC_DTYPE_BF16 || t == MC_DTYPE_F16 || t == MC_DTYPE_F64;
}

/* Unit roundoff of a float dtype. */
static double roundoff(enum mc_dtype t)
{
    switch (t) {
    case MC_DTYPE_BF16: return 0x1p-8;
    case MC_DTYPE_F16: return 0x1p-11;
    case MC_DTYPE_F64: return 0x1p-53;
    default: return 0x1p-24;
    }
}

static const char *precision_name(enum mc_dtype t)
{
    return t == MC_DTYPE_BF16 ? "bf16" : t == MC_DTYPE_F16 ? "fp16" : t == MC_DTYPE_F64 ? "fp64"
                                                                                      : "fp32";
}

struct result {
    bool beyond, exact;
    double max_abs, max_rel, cos, tol;
    int64_t at, left_out, adam_beyond;
    int64_t cols, padded; /* logits of a padded vocabulary: the first cols of padded compared */
    enum mc_dtype prec;
    const char *why; /* a shape or dtype mismatch */
};

/* optimizer.param.<p> after an Adam step: Adam divides each element's grad by its own size,
 * so each element's update carries its grad's relative error, tol * max|exp_avg| / |exp_avg_i|
 * (a grad that is zero in exact arithmetic, such as the key bias's, is pure rounding noise and
 * its update arbitrary on both sides). With param.<p> and optimizer.exp_avg.<p> in the
 * reference, each element may differ by tol * max|p| plus the larger of its two updates |u_i|
 * times that relative error (at most 2: two arbitrary updates). Returns false (the plain rule) without them. */
static bool adam_sources(const mc_dump *ref, const struct mc_dump_tensor *b,
                         const struct mc_dump_tensor **before, const struct mc_dump_tensor **m)
{
    if (strncmp(b->name, "optimizer.param.", 16) != 0)
        return false;
    char n[MC_DUMP_MAX_NAME + 32];
    snprintf(n, sizeof n, "optimizer.exp_avg.%s", b->name + 16);
    *m = mc_dump_find(ref, n);
    snprintf(n, sizeof n, "param.%s", b->name + 16);
    *before = mc_dump_find(ref, n);
    return *m && *before && (*m)->numel == b->numel && (*before)->numel == b->numel;
}

/* forward.output_layer.output[@k]: logits, whose last dimension Megatron pads (the padded
 * vocabulary of --make-vocab-size-divisible-by) and a HuggingFace model does not. */
static bool is_logits(const char *name)
{
    const char *p = "forward.output_layer.output";
    size_t n = strlen(p);
    return strncmp(name, p, n) == 0 && (name[n] == 0 || name[n] == '@');
}

/* Index into t of element i of the compared part: the first cols columns when cols > 0. */
static int64_t at_of(const struct mc_dump_tensor *t, int64_t cols, int64_t i)
{
    if (!cols)
        return i;
    return i / cols * t->shape[t->ndim - 1] + i % cols;
}

static struct result compare(const struct opts *o, const mc_dump *ref,
                             const struct mc_dump_tensor *a, const struct mc_dump_tensor *b)
{
    struct result r = {.cos = 1};
    bool same_shape = a->ndim == b->ndim;
    for (int i = 0; same_shape && i < a->ndim - 1; i++)
        same_shape = a->shape[i] == b->shape[i];
    int64_t ca = a->ndim ? a->shape[a->ndim - 1] : 1, cb = b->ndim ? b->shape[b->ndim - 1] : 1;
    if (same_shape && ca != cb) { /* only the logits, over the vocabulary both sides hold */
        same_shape = is_logits(b->name) && ca > 0 && cb > 0;
        r.cols = ca < cb ? ca : cb;
        r.padded = ca < cb ? cb : ca;
    }
    if (!same_shape || is_float(a->dtype) != is_float(b->dtype)) {
        r.beyond = true;
        r.why = !same_shape ? "shapes differ" : "one side is integer, the other float";
        return r;
    }
    bool flt = is_float(a->dtype);
    r.prec = o->precision >= 0 ? (enum mc_dtype)o->precision
             : roundoff(a->dtype) > roundoff(b->dtype) ? a->dtype : b->dtype;
    int64_t K = o->red ? o->red : (a->ndim ? a->shape[a->ndim - 1] : 1);
    double u = roundoff(r.prec);
    r.tol = flt ? 8.0 * u * sqrt((double)(K > 0 ? K : 1)) : 0.0;
    if (strncmp(b->name, "optimizer.exp_avg_sq.", 21) == 0) /* 1 - beta2 amplifies beta2's rounding */
        r.tol += u * o->beta2 / (1.0 - o->beta2);
    const struct mc_dump_tensor *before = NULL, *m = NULL;
    bool adam = flt && adam_sources(ref, b, &before, &m);
    double mmax = 0, bmax = 0, dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; adam && i < m->numel; i++)
        mmax = fmax(mmax, fabs(mc_dtype_get_f64(m->data, m->dtype, i)));
    int64_t numel = r.cols ? b->numel / cb * r.cols : b->numel;
    for (int64_t i = 0; i < numel; i++)
        bmax = fmax(bmax, fabs(mc_dtype_get_f64(b->data, b->dtype, at_of(b, r.cols, i))));
    r.exact = true;
    for (int64_t i = 0; i < numel; i++) {
        double x = mc_dtype_get_f64(a->data, a->dtype, at_of(a, r.cols, i));
        double y = mc_dtype_get_f64(b->data, b->dtype, at_of(b, r.cols, i));
        if (x != y && !(isnan(x) && isnan(y)))
            r.exact = false;
        double d = fabs(x - y);
        if (isnan(d))
            d = INFINITY;
        if (adam) { /* the element's own allowance (see adam_sources) */
            double mi = fabs(mc_dtype_get_f64(m->data, m->dtype, i));
            double p0 = mc_dtype_get_f64(before->data, before->dtype, i);
            double ui = fmax(fabs(y - p0), fabs(x - p0)); /* the larger of the two updates */
            double rel = mi > 0 ? fmin(2.0, 2.0 * r.tol * mmax / mi) : 2.0;
            if (rel > 2.0 * r.tol)
                r.left_out++; /* judged by its update rather than the tensor's scale */
            if (!(d <= r.tol * bmax + ui * rel))
                r.adam_beyond++;
        }
        if (d > r.max_abs) {
            r.max_abs = d;
            r.at = i;
        }
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    r.max_rel = r.max_abs == 0 ? 0 : bmax > 0 ? r.max_abs / bmax : INFINITY;
    r.cos = na > 0 && nb > 0 ? dot / sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
    if (adam)
        r.beyond = r.adam_beyond > 0;
    else
        r.beyond = flt ? !(r.max_rel <= r.tol && r.cos >= 1.0 - r.tol) : !r.exact;
    return r;
}

static void print_shape(const struct mc_dump_tensor *t, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    snprintf(buf + (at < n ? at : n - 1), n - (at < n ? at : n - 1), "]");
}

/* ---- the run --------------------------------------------------------------------------- */

struct first {
    bool found;
    char name[MC_DUMP_MAX_NAME];
    int64_t iter;
    struct result r;
};

static void note(struct first *f, const char *name, int64_t iter, const struct result *r)
{
    if (f->found)
        return;
    f->found = true;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->iter = iter;
    f->r = *r;
}

/* Compares one iteration; counts what is beyond tolerance and what one side lacks. */
static void compare_iteration(const struct opts *o, int64_t iter, bool dirs, const mc_dump *A,
                              const mc_dump *B, struct first *diverged, struct first *differs,
                              int64_t *n_beyond, int64_t *n_missing, int64_t *n_compared)
{
    int64_t n = mc_dump_count(B);
    struct entry *e = calloc((size_t)(n > 0 ? n : 1), sizeof(*e));
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct mc_dump_tensor *b = mc_dump_get(B, i), *a = mc_dump_find(A, b->name);
        if (!a) {
            printf("only in %s: %s\n", o->b, b->name);
            (*n_missing)++;
            continue;
        }
        e[m++] = (struct entry){key_of(b->name, i), a, b};
    }
    for (int64_t i = 0; i < mc_dump_count(A); i++)
        if (!mc_dump_find(B, mc_dump_get(A, i)->name)) {
            printf("only in %s: %s\n", o->a, mc_dump_get(A, i)->name);
            (*n_missing)++;
        }
    qsort(e, (size_t)m, sizeof(*e), cmp_entry);
    if (dirs && !o->quiet)
        printf("== iteration %lld\n", (long long)iter);
    for (int64_t i = 0; i < m; i++) {
        struct result r = compare(o, B, e[i].a, e[i].b);
        (*n_compared)++;
        if (r.beyond) {
            (*n_beyond)++;
            note(diverged, e[i].b->name, iter, &r);
        }
        if (!r.exact)
            note(differs, e[i].b->name, iter, &r);
        if (o->quiet && !r.beyond)
            continue;
        char shape[128];
        print_shape(e[i].b, shape, sizeof shape);
        if (r.why) {
            printf("BEYOND %-64s %s vs %s: %s\n", e[i].b->name, mc_dtype_name(e[i].a->dtype),
                   mc_dtype_name(e[i].b->dtype), r.why);
            continue;
        }
        printf("%-6s %-64s %-12s %s/%s max abs %.3e max rel %.3e cos %.9f tol %.2e",
               r.exact ? "exact" : r.beyond ? "BEYOND" : "ok", e[i].b->name, shape,
               mc_dtype_name(e[i].a->dtype), mc_dtype_name(e[i].b->dtype), r.max_abs, r.max_rel,
               r.cos, r.tol);
        if (r.left_out)
            printf(" (Adam rule: %lld elements judged by their update, %lld beyond)",
                   (long long)r.left_out, (long long)r.adam_beyond);
        if (r.cols)
            printf(" (the first %lld of %lld vocabulary columns: the other side's are padding)",
                   (long long)r.cols, (long long)r.padded);
        if (r.beyond)
            printf(" worst at %lld: %.9g vs %.9g", (long long)r.at,
                   mc_dtype_get_f64(e[i].a->data, e[i].a->dtype, at_of(e[i].a, r.cols, r.at)),
                   mc_dtype_get_f64(e[i].b->data, e[i].b->dtype, at_of(e[i].b, r.cols, r.at)));
        printf("\n");
    }
    free(e);
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.precision = -1, .beta2 = 0.999};
    const char *pos[2];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(USAGE, stdout);
            fputs(HELP, stdout);
            exit(0);
        }
        if (strcmp(s, "--quiet") == 0) {
            o->quiet = true;
            continue;
        }
        bool valued = strcmp(s, "--precision") == 0 || strcmp(s, "--reduction-length") == 0 ||
                      strcmp(s, "--adam-beta2") == 0;
        if (valued && i + 1 >= argc)
            usage_error("expected one argument after ", s);
        if (strcmp(s, "--precision") == 0) {
            const char *v = argv[++i];
            o->precision = strcmp(v, "fp32") == 0   ? MC_DTYPE_F32
                           : strcmp(v, "bf16") == 0 ? MC_DTYPE_BF16
                           : strcmp(v, "fp16") == 0 ? MC_DTYPE_F16
                                                    : -2;
            if (o->precision == -2)
                usage_error("--precision: expected fp32, bf16 or fp16, got ", v);
        } else if (strcmp(s, "--reduction-length") == 0) {
            char *end;
            o->red = strtoll(argv[++i], &end, 10);
            if (*end || o->red < 1)
                usage_error("--reduction-length: expected a positive integer, got ", argv[i]);
        } else if (strcmp(s, "--adam-beta2") == 0) {
            char *end;
            o->beta2 = strtod(argv[++i], &end);
            if (*end || !(o->beta2 >= 0 && o->beta2 < 1))
                usage_error("--adam-beta2: expected a number in [0, 1), got ", argv[i]);
        } else if (s[0] == '-' && s[1]) {
            usage_error("unrecognized argument: ", s);
        } else if (npos == 2) {
            usage_error("unrecognized argument: ", s);
        } else {
            pos[npos++] = s;
        }
    }
    if (npos != 2)
        usage_error("the following arguments are required: A B", NULL);
    o->a = pos[0];
    o->b = pos[1];
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    struct side A = {0}, B = {0};
    load_side(o.a, &A);
    load_side(o.b, &B);
    bool dirs = A.n_iters > 1 || B.n_iters > 1 || A.iter[0] || B.iter[0];
    struct first diverged = {0}, differs = {0};
    int64_t n_beyond = 0, n_missing = 0, n_compared = 0;
    for (int i = 0; i < B.n_iters; i++) {
        int j = 0;
        while (j < A.n_iters && A.iter[j] != B.iter[i])
            j++;
        if (j == A.n_iters) {
            printf("only in %s: iteration %lld\n", o.b, (long long)B.iter[i]);
            n_missing++;
            continue;
        }
        compare_iteration(&o, B.iter[i], dirs, A.dumps[j], B.dumps[i], &diverged, &differs,
                          &n_beyond, &n_missing, &n_compared);
    }
    for (int j = 0; j < A.n_iters; j++) {
        bool found = false;
        for (int i = 0; i < B.n_iters; i++)
            found |= A.iter[j] == B.iter[i];
        if (!found) {
            printf("only in %s: iteration %lld\n", o.a, (long long)A.iter[j]);
            n_missing++;
        }
    }
    char where[64] = "";
    const struct first *f = diverged.found ? &diverged : &differs;
    if (dirs && f->found)
        snprintf(where, sizeof where, " (iteration %lld)", (long long)f->iter);
    if (diverged.found && diverged.r.why)
        printf("first divergence at %s%s: %s\n", f->name, where, f->r.why);
    else if (f->found)
        printf("first divergence at %s%s: %s what %s explains (max rel %.3e %s tol %.2e); "
               "%lld of %lld tensors beyond tolerance\n", f->name, where,
               diverged.found ? "beyond" : "within", precision_name(f->r.prec), f->r.max_rel,
               diverged.found ? ">" : "<=", f->r.tol, (long long)n_beyond, (long long)n_compared);
    else
        printf("no divergence: all %lld tensors identical\n", (long long)n_compared);
    if (n_missing)
        printf("%lld names or iterations on one side only\n", (long long)n_missing);
    for (int i = 0; i < A.n_iters; i++)
        mc_dump_free(A.dumps[i]);
    for (int i = 0; i < B.n_iters; i++)
        mc_dump_free(B.dumps[i]);
    free(A.dumps);
    free(B.dumps);
    free(A.iter);
    free(B.iter);
    return n_beyond || n_missing ? 1 : 0;
}
