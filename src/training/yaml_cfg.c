/* --yaml-cfg: reads the arguments namespace from a YAML file, as Megatron-LM core_v0.12.1's
 * megatron/training/yaml_arguments.py (with the yaml branch of parse_args) does.
 *
 * Megatron loads the file with PyYAML and replaces the whole namespace by it; the nested
 * language_model: / model_parallel: maps are Megatron-Core config objects that validate_yaml
 * finally flattens into the namespace. We read a strict YAML subset (one level of nesting, block
 * mappings by indentation, scalars, flow and block lists, comments) and set each key as the
 * command-line option of the same dest, converting its value with that option's type, so every
 * later step (validation, dump, training) is the one the command line uses. Core field names
 * that differ from the argparse dests are mapped; Core-only fields that are runtime hooks or
 * CUDA knobs are accepted and ignored; anything unknown is an error naming file:line. */
#include "training/yaml_cfg.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum y_kind { Y_NULL, Y_BOOL, Y_SCALAR, Y_LIST };

struct y_entry {
    char *key;
    int line;
    enum y_kind kind;
    bool b;
    char *text;   /* Y_SCALAR */
    int n;        /* Y_LIST */
    char **items;
};

struct y_doc {
    const char *path;
    struct y_entry *e;
    int n, cap;
};

static mc_status y_fail(struct mc_args *a, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static mc_status y_fail(struct mc_args *a, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof(a->err), fmt, ap);
    va_end(ap);
    a->exit_code = 1;
    a->err_kind = kind;
    return mc_error(MC_ERR_CONFIG, "%s", a->err);
}

static char *y_strndup(const char *s, size_t n)
{
    char *r = mc_alloc(n + 1);
    if (r) {
        memcpy(r, s, n);
        r[n] = '\0';
    }
    return r;
}

static void doc_free(struct y_doc *d)
{
    for (int k = 0; k < d->n; k++) {
        mc_free(d->e[k].key);
        mc_free(d->e[k].text);
        for (int j = 0; j < d->e[k].n; j++)
            mc_free(d->e[k].items[j]);
        mc_free(d->e[k].items);
    }
    mc_free(d->e);
    d->e = NULL;
    d->n = d->cap = 0;
}

static struct y_entry *doc_add(struct y_doc *d, const char *key, size_t klen, int line)
{
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 32;
        struct y_entry *e = mc_calloc((size_t)cap, sizeof(*e));
        if (!e)
            return NULL;
        if (d->n)
            memcpy(e, d->e, (size_t)d->n * sizeof(*e));
        mc_free(d->e);
        d->e = e;
        d->cap = cap;
    }
    struct y_entry *e = &d->e[d->n];
    memset(e, 0, sizeof(*e));
    e->key = y_strndup(key, klen);
    if (!e->key)
        return NULL;
    e->line = line;
    d->n++;
    return e;
}

static bool word_in(const char *s, const char *const *words)
{
    for (; *words; words++)
        if (!strcmp(s, *words))
            return true;
    return false;
}

/* YAML 1.1 (PyYAML) resolution of plain scalars. */
static const char *const null_words[] = {"null", "Null", "NULL", "~", "None", NULL};
static const char *const true_words[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                         "on", "On", "ON", NULL};
static const char *const false_words[] = {"false", "False", "FALSE", "no", "No", "NO",
                                          "off", "Off", "OFF", NULL};

/* Replaces every ${VAR} from the environment; a missing variable fails as Megatron's assert. */
static mc_status env_subst(struct mc_args *a, char **text)
{
    size_t from = 0; /* substituted text is not scanned again */
    for (;;) {
        char *s = *text, *open = strstr(s + from, "${"), *close = open ? strchr(open, '}') : NULL;
        if (!close)
            return MC_OK;
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(close - open - 2), open + 2);
        const char *val = getenv(name);
        if (!val)
            return y_fail(a, "AssertionError", "environment variable %s in yaml not found", name);
        size_t pre = (size_t)(open - s), vl = strlen(val), post = strlen(close + 1);
        char *r = mc_alloc(pre + vl + post + 1);
        if (!r)
            return MC_ERR_NOMEM;
        memcpy(r, s, pre);
        memcpy(r + pre, val, vl);
        memcpy(r + pre + vl, close + 1, post + 1);
        mc_free(s);
        *text = r;
        from = pre + vl;
    }
}

/* One scalar (plain, 'single' or "double" quoted) spanning s[0..n). *kind says how it resolved;
 * *out is the text (NULL for null/bool). */
static mc_status parse_scalar(struct mc_args *a, const struct y_doc *d, int line, const char *s,
                              size_t n, enum y_kind *kind, bool *b, char **out)
{
    *out = NULL;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    if (n && (s[0] == '"' || s[0] == '\'')) {
        char q = s[0], *r = mc_alloc(n + 1);
        size_t o = 0, i = 1;
        if (!r)
            return MC_ERR_NOMEM;
        for (; i < n; i++) {
            if (s[i] == q && q == '\'' && i + 1 < n && s[i + 1] == '\'') {
                r[o++] = '\'';
                i++;
            } else if (s[i] == q) {
                break;
            } else if (q == '"' && s[i] == '\\' && i + 1 < n) {
                char c = s[++i];
                r[o++] = c == 'n' ? '\n' : c == 't' ? '\t' : c;
            } else {
                r[o++] = s[i];
            }
        }
        r[o] = '\0';
        if (i != n - 1) {
            mc_free(r);
            return y_fail(a, "YAMLError", "%s:%d: unterminated quoted string or text after "
                          "the closing quote: %.*s", d->path, line, (int)n, s);
        }
        *kind = Y_SCALAR;
        *out = r;
        return env_subst(a, out);
    }
    if (n && strchr("[]{}|>&*!%@`,", s[0]))
        return y_fail(a, "YAMLError", "%s:%d: unsupported YAML syntax '%.*s' (megatron.c reads "
                      "scalars, [a, b] lists and '- item' lists)", d->path, line, (int)n, s);
    char *r = y_strndup(s, n);
    if (!r)
        return MC_ERR_NOMEM;
    if (strstr(r, ": ") || (n && r[n - 1] == ':')) {
        mc_free(r);
        return y_fail(a, "YAMLError", "%s:%d: mapping values are not allowed here: %.*s",
                      d->path, line, (int)n, s);
    }
    if (!n || word_in(r, null_words)) {
        *kind = Y_NULL;
        mc_free(r);
        return MC_OK;
    }
    if (word_in(r, true_words) || word_in(r, false_words)) {
        *kind = Y_BOOL;
        *b = word_in(r, true_words);
        mc_free(r);
        return MC_OK;
    }
    *kind = Y_SCALAR;
    *out = r;
    return env_subst(a, out);
}

static mc_status list_push(struct mc_args *a, const struct y_doc *d, struct y_entry *e,
                           const char *s, size_t n)
{
    enum y_kind k;
    bool b = false;
    char *t = NULL;
    mc_status st = parse_scalar(a, d, e->line, s, n, &k, &b, &t);
    if (st != MC_OK)
        return st;
    if (k != Y_SCALAR) {
        mc_free(t);
        return y_fail(a, "YAMLError", "%s:%d: list items must be numbers or strings", d->path,
                      e->line);
    }
    char **items = mc_calloc((size_t)e->n + 1, sizeof(*items));
    if (!items) {
        mc_free(t);
        return MC_ERR_NOMEM;
    }
    if (e->n)
        memcpy(items, e->items, (size_t)e->n * sizeof(*items));
    mc_free(e->items);
    e->items = items;
    e->items[e->n++] = t;
    return MC_OK;
}

/* `[a, b, "c"]` */
static mc_status parse_flow_list(struct mc_args *a, const struct y_doc *d, struct y_entry *e,
                                 const char *s)
{
    size_t n = strlen(s);
    e->kind = Y_LIST;
    if (n < 2 || s[n - 1] != ']')
        return y_fail(a, "YAMLError", "%s:%d: a flow list must end with ']' on the same line",
                      d->path, e->line);
    const char *p = s + 1, *end = s + n - 1;
    while (p < end && isspace((unsigned char)*p))
        p++;
    if (p == end)
        return MC_OK;
    while (p <= end) {
        const char *q = p;
        char quote = 0;
        for (; q < end; q++) {
            if (quote) {
                if (*q == quote)
                    quote = 0;
            } else if (*q == '"' || *q == '\'') {
                quote = *q;
            } else if (*q == ',') {
                break;
            } else if (*q == '[' || *q == '{') {
                return y_fail(a, "YAMLError", "%s:%d: nested lists and maps are not supported",
                              d->path, e->line);
            }
        }
        mc_status st = list_push(a, d, e, p, (size_t)(q - p));
        if (st != MC_OK)
            return st;
        p = q + 1;
    }
    return MC_OK;
}

/* Cuts a comment: '#' at the start or after whitespace, outside quotes. */
static void strip_comment(char *s)
{
    char quote = 0;
    for (char *p = s; *p; p++) {
        if (quote) {
            if (*p == quote)
                quote = 0;
        } else if (*p == '"' || *p == '\'') {
            quote = *p;
        } else if (*p == '#' && (p == s || p[-1] == ' ' || p[-1] == '\t')) {
            *p = '\0';
            break;
        }
    }
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

static bool is_section(const char *key)
{
    return !strcmp(key, "language_model") || !strcmp(key, "model_parallel");
}

/* Reads the file into a flat list of key/value entries (sections flattened). */
static mc_status y_read(struct mc_args *a, struct y_doc *d)
{
    FILE *f = fopen(d->path, "r");
    if (!f)
        return y_fail(a, "FileNotFoundError", "--yaml-cfg %s: cannot open: %s", d->path,
                      strerror(errno));
    char line[4096];
    int lineno = 0, sec_indent = -1; /* -1: not inside a section */
    struct y_entry *pending = NULL;  /* "key:" with nothing after it yet */
    bool in_section = false;
    mc_status st = MC_OK;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            st = y_fail(a, "YAMLError", "%s:%d: line longer than %zu characters", d->path,
                        lineno, sizeof(line) - 2);
            goto cleanup;
        }
        strip_comment(line);
        size_t ind = strspn(line, " ");
        if (!line[ind])
            continue;
        if (line[ind] == '\t') {
            st = y_fail(a, "YAMLError", "%s:%d: tabs are not allowed in indentation", d->path,
                        lineno);
            goto cleanup;
        }
        char *c = line + ind;
        if (ind == 0 && (!strcmp(c, "---") || !strcmp(c, "...")) && !d->n && !pending)
            continue; /* document marker before any content */
        if (c[0] == '-' && (c[1] == ' ' || !c[1])) {
            if (!pending || (pending->kind != Y_NULL && pending->kind != Y_LIST)) {
                st = y_fail(a, "YAMLError", "%s:%d: '- item' outside a list (a list item must "
                            "follow 'key:')", d->path, lineno);
                goto cleanup;
            }
            pending->kind = Y_LIST;
            pending->line = lineno;
            if ((st = list_push(a, d, pending, c + 1, strlen(c + 1))) != MC_OK)
                goto cleanup;
            continue;
        }
        size_t klen = strspn(c, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (!klen || c[klen] != ':' || (c[klen + 1] && c[klen + 1] != ' ')) {
            st = y_fail(a, "YAMLError", "%s:%d: expected 'key: value', got: %s", d->path,
                        lineno, c);
            goto cleanup;
        }
        const char *val = c + klen + 1;
        val += strspn(val, " ");
        if (pending && pending->kind == Y_NULL && ind > 0 && !in_section) {
            /* "key:" followed by an indented mapping: a section */
            if (!is_section(pending->key)) {
                st = y_fail(a, "YAMLError", "%s:%d: nested section '%s' is not supported (only "
                            "language_model: and model_parallel:)", d->path, pending->line,
                            pending->key);
                goto cleanup;
            }
            d->n--; /* the section header is not an entry */
            mc_free(d->e[d->n].key);
            in_section = true;
            sec_indent = (int)ind;
        }
        pending = NULL;
        if (ind == 0) {
            in_section = false;
        } else if (!in_section || (int)ind != sec_indent) {
            st = y_fail(a, "YAMLError", "%s:%d: unexpected indentation (only one level of "
                        "nesting, with the same indentation for every key of a section)",
                        d->path, lineno);
            goto cleanup;
        }
        struct y_entry *e = doc_add(d, c, klen, lineno);
        if (!e) {
            st = mc_error(MC_ERR_NOMEM, "out of memory reading %s", d->path);
            goto cleanup;
        }
        for (int k = 0; k < d->n - 1; k++)
            if (!strcmp(d->e[k].key, e->key)) {
                st = y_fail(a, "YAMLError", "%s:%d: key '%s' repeats line %d", d->path, lineno,
                            e->key, d->e[k].line);
                goto cleanup;
            }
        if (!*val) {
            e->kind = Y_NULL;
            if (!in_section)
                pending = e;
            else
                pending = e; /* a block list inside a section */
            continue;
        }
        if (val[0] == '[')
            st = parse_flow_list(a, d, e, val);
        else
            st = parse_scalar(a, d, lineno, val, strlen(val), &e->kind, &e->b, &e->text);
        if (st != MC_OK)
            goto cleanup;
    }
    if (pending && pending->kind == Y_NULL && is_section(pending->key)) {
        d->n--; /* an empty section */
        mc_free(d->e[d->n].key);
    }
cleanup:
    fclose(f);
    return st;
}

/* ---- mapping keys to options -------------------------------------------------------------- */

/* Megatron-Core config fields whose argparse dest has another name. */
static const char *const renamed[][2] = {
    {"layernorm_epsilon", "norm_epsilon"},
    {"num_moe_experts", "num_experts"},
    {"layernorm_zero_centered_gamma", "apply_layernorm_1p"},
};

/* Core-only fields that are runtime hooks, CUDA/communication knobs or debug switches: no
 * effect on a megatron.c run, accepted with any value. */
static const char *const ignored_any[] = {
    "timers", "finalize_model_grads_func", "grad_scale_func", "no_sync_func",
    "grad_sync_func", "param_sync_func", "_cpu_offloading_context", "tp_comm_atomic_ag",
    "tp_comm_atomic_rs", "batch_p2p_comm", "batch_p2p_sync", "deallocate_pipeline_outputs",
    "persist_layer_norm", "memory_efficient_layer_norm", "bias_activation_fusion",
    "cpu_offloading_weights", "cpu_offloading_activations", "standalone_embedding_stage",
    "params_dtype", /* derived from fp16/bf16 by validation */
    "gated_linear_unit", /* derived from activation_func (swiglu) */
    NULL};

/* Core-only features megatron.c does not have: accepted only when off (null, false, 0). */
static const char *const must_be_off[] = {
    "window_size", "init_method", "output_layer_init_method", "moe_token_dropping",
    "cpu_offloading", "cpu_offloading_num_layers", "enable_autocast", "autocast_dtype",
    "num_microbatches_with_partial_activation_checkpoints", "pipeline_dtype", NULL};

static bool entry_off(const struct y_entry *e)
{
    return e->kind == Y_NULL || (e->kind == Y_BOOL && !e->b) ||
           (e->kind == Y_SCALAR && !strcmp(e->text, "0"));
}

static int find_dest(const char *key)
{
    for (int id = 0; id < MC_A_COUNT; id++)
        if (mc_arg_defs[id].opt && !strcmp(mc_arg_defs[id].dest, key))
            return id;
    return -1;
}

/* Runs the command-line parser on one synthetic option so the value is converted and checked
 * exactly as the option's type does it. */
static mc_status set_by_parser(struct mc_args *a, const struct mc_arg_def *d,
                               const struct y_entry *e)
{
    int argc = 0;
    char **argv = mc_calloc((size_t)e->n + 3, sizeof(*argv));
    char *joined = NULL;
    mc_status st = MC_OK;
    if (!argv)
        return MC_ERR_NOMEM;
    argv[argc++] = "pretrain_gpt";
    if (e->kind == Y_LIST && d->nargs) {
        argv[argc++] = (char *)d->opt;
        for (int k = 0; k < e->n; k++)
            argv[argc++] = e->items[k];
    } else {
        size_t len = strlen(d->opt) + 4;
        if (e->kind == Y_LIST) /* moe_layer_freq: the list expression form */
            for (int k = 0; k < e->n; k++)
                len += strlen(e->items[k]) + 2;
        else
            len += strlen(e->text);
        joined = mc_alloc(len);
        if (!joined) {
            st = MC_ERR_NOMEM;
            goto cleanup;
        }
        if (e->kind == Y_LIST) {
            size_t at = (size_t)sprintf(joined, "%s=[", d->opt);
            for (int k = 0; k < e->n; k++)
                at += (size_t)sprintf(joined + at, "%s%s", k ? "," : "", e->items[k]);
            sprintf(joined + at, "]");
        } else {
            sprintf(joined, "%s=%s", d->opt, e->text);
        }
        argv[argc++] = joined;
    }
    st = mc_args_parse(a, argc, argv);
cleanup:
    mc_free(joined);
    mc_free(argv);
    return st;
}

static mc_status apply_entry(struct mc_args *a, const struct y_doc *doc, const struct y_entry *e)
{
    const char *key = e->key;
    if (word_in(key, ignored_any))
        return MC_OK;
    if (word_in(key, must_be_off)) {
        if (entry_off(e))
            return MC_OK;
        return y_fail(a, "YAMLError", "%s:%d: %s is not supported by megatron.c yet (only "
                      "null/false)", doc->path, e->line, key);
    }
    if (!strcmp(key, "activation_func")) {
        if (e->kind != Y_SCALAR || (strcmp(e->text, "swiglu") && strcmp(e->text, "squaredrelu") &&
                                    strcmp(e->text, "gelu")))
            return y_fail(a, "YAMLError", "%s:%d: activation_func must be swiglu, squaredrelu or "
                          "gelu", doc->path, e->line);
        mc_args_set_bool(a, MC_A_swiglu, !strcmp(e->text, "swiglu"));
        mc_args_set_bool(a, MC_A_squared_relu, !strcmp(e->text, "squaredrelu"));
        a->given[MC_A_swiglu] = a->given[MC_A_squared_relu] = true;
        return MC_OK;
    }
    for (size_t k = 0; k < sizeof(renamed) / sizeof(renamed[0]); k++)
        if (!strcmp(key, renamed[k][0]))
            key = renamed[k][1];
    int id = find_dest(key);
    for (int k = 0; id < 0 && k < MC_A_COUNT; k++)
        if (!strcmp(mc_arg_defs[k].dest, key)) { /* set by validation (Core fields do list them) */
            if (entry_off(e))
                return MC_OK;
            return y_fail(a, "YAMLError", "%s:%d: %s is derived by the argument validation; "
                          "only null/false is accepted", doc->path, e->line, e->key);
        }
    if (id < 0)
        return y_fail(a, "YAMLError", "%s:%d: unknown key '%s' (not an argument of "
                      "pretrain_gpt)", doc->path, e->line, e->key);
    const struct mc_arg_def *d = &mc_arg_defs[id];
    bool flag = d->type == MC_ARGT_STORE_TRUE || d->type == MC_ARGT_STORE_FALSE ||
                d->type == MC_ARGT_BOOL;
    a->given[id] = true;
    switch (e->kind) {
    case Y_NULL:
        if (flag)
            mc_args_set_bool(a, (enum mc_arg_id)id, false);
        else if (d->def.kind == MC_V_NONE)
            mc_args_set_none(a, (enum mc_arg_id)id);
        else /* Core fields such as num_query_groups: null means "derive it": the default */
            a->given[id] = false;
        return MC_OK;
    case Y_BOOL:
        if (!flag)
            return y_fail(a, "YAMLError", "%s:%d: %s: expected a value for %s, got a boolean",
                          doc->path, e->line, e->key, d->opt);
        mc_args_set_bool(a, (enum mc_arg_id)id, e->b);
        return MC_OK;
    case Y_LIST:
        if (!d->nargs && d->type != MC_ARGT_MOE_FREQ)
            return y_fail(a, "YAMLError", "%s:%d: %s: %s takes one value, not a list",
                          doc->path, e->line, e->key, d->opt);
        break;
    case Y_SCALAR:
        if (flag)
            return y_fail(a, "YAMLError", "%s:%d: %s: expected true or false, got '%s'",
                          doc->path, e->line, e->key, e->text);
        break;
    }
    mc_status st = set_by_parser(a, d, e);
    if (st != MC_OK && st != MC_ERR_NOMEM) {
        char msg[sizeof(a->err)];
        snprintf(msg, sizeof(msg), "%s", a->err);
        return y_fail(a, a->err_kind ? a->err_kind : "YAMLError", "%s:%d: %s: %s", doc->path,
                      e->line, e->key, msg);
    }
    return st;
}

/* validate_yaml's clamping: TP to the world size, PP to what is left of it. */
static void clamp_parallel(struct mc_args *a)
{
    int64_t world = mc_args_int(a, MC_A_world_size);
    int64_t tp = mc_args_int(a, MC_A_tensor_model_parallel_size);
    if (tp > world)
        mc_args_set_int(a, MC_A_tensor_model_parallel_size, tp = world);
    int64_t pp = mc_args_int(a, MC_A_pipeline_model_parallel_size);
    if (tp > 0 && pp > world / tp)
        mc_args_set_int(a, MC_A_pipeline_model_parallel_size, world / tp);
}

mc_status mc_yaml_cfg_apply(struct mc_args **ap, FILE *out)
{
    struct mc_args *a = *ap, *b = NULL;
    struct y_doc doc = {0};
    mc_status st;
    if (mc_args_is_none(a, MC_A_yaml_cfg))
        return MC_OK;
    if (mc_args_bool(a, MC_A_use_legacy_models))
        return y_fail(a, "AssertionError", "Yaml config is not supported with legacy models.");
    if (out) {
        fprintf(out, "warning using experimental yaml arguments feature, argparse arguments "
                     "will be ignored\n");
        fflush(out);
    }
    if ((st = mc_args_init(&b)) != MC_OK)
        return st;
    /* The file path and megatron.c's own options (--dry-run, ...) survive the replacement. */
    for (int id = 0; id < MC_A_COUNT; id++)
        if (a->given[id] && (id == MC_A_yaml_cfg || mc_arg_defs[id].support == MC_ARG_EXTENSION)) {
            struct mc_val t = b->v[id];
            b->v[id] = a->v[id];
            a->v[id] = t;
            b->given[id] = true;
        }
    char *argv0[] = {"pretrain_gpt", NULL};
    if ((st = mc_args_parse(b, 1, argv0)) != MC_OK) /* rank / world size from the environment */
        goto fail;
    doc.path = mc_args_str(b, MC_A_yaml_cfg);
    if ((st = y_read(b, &doc)) != MC_OK)
        goto fail;
    for (int k = 0; k < doc.n; k++)
        if ((st = apply_entry(b, &doc, &doc.e[k])) != MC_OK)
            goto fail;
    clamp_parallel(b);
    doc_free(&doc);
    mc_args_free(a);
    *ap = b;
    return MC_OK;
fail:
    /* report through the caller's namespace */
    snprintf(a->err, sizeof(a->err), "%s", b->err);
    a->err_kind = b->err_kind;
    a->exit_code = b->exit_code ? b->exit_code : 1;
    doc_free(&doc);
    mc_args_free(b);
    return st;
}
