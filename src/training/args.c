/* pretrain_gpt's command-line parser with Python argparse semantics, the support check, the
 * help text and the arguments dump. Mirrors parse_args() and _print_args() of
 * megatron/training/arguments.py (Megatron-LM core_v0.12.1), whose parser is
 * argparse.ArgumentParser(allow_abbrev=False). The option table is args_table.c (generated). */
#include "training/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_state/parallel_state.h"

/* ---- values --------------------------------------------------------------------------------- */

static void val_clear(struct mc_val *v)
{
    if (v->kind == MC_V_LIST) {
        for (int k = 0; k < v->n; k++)
            val_clear(&v->items[k]);
        mc_free(v->items);
    }
    mc_free(v->s);
    memset(v, 0, sizeof(*v));
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = mc_alloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static mc_status val_set_text(struct mc_val *v, enum mc_val_kind kind, const char *s)
{
    char *d = dup_str(s);
    if (!d)
        return MC_ERR_NOMEM;
    val_clear(v);
    v->kind = kind;
    v->s = d;
    return MC_OK;
}

bool mc_args_is_none(const struct mc_args *a, enum mc_arg_id id) { return a->v[id].kind == MC_V_NONE; }

int64_t mc_args_int(const struct mc_args *a, enum mc_arg_id id)
{
    const struct mc_val *v = &a->v[id];
    MC_ASSERT(v->kind == MC_V_INT || v->kind == MC_V_BOOL);
    return v->kind == MC_V_INT ? v->i : (int64_t)v->b;
}

double mc_args_float(const struct mc_args *a, enum mc_arg_id id)
{
    const struct mc_val *v = &a->v[id];
    MC_ASSERT(v->kind == MC_V_FLOAT || v->kind == MC_V_INT);
    return v->kind == MC_V_FLOAT ? v->f : (double)v->i;
}

bool mc_args_bool(const struct mc_args *a, enum mc_arg_id id)
{
    const struct mc_val *v = &a->v[id];
    MC_ASSERT(v->kind == MC_V_BOOL || v->kind == MC_V_NONE);
    return v->kind == MC_V_BOOL && v->b;
}

const char *mc_args_str(const struct mc_args *a, enum mc_arg_id id)
{
    const struct mc_val *v = &a->v[id];
    MC_ASSERT(v->kind == MC_V_STR || v->kind == MC_V_SYM || v->kind == MC_V_NONE);
    return v->kind == MC_V_NONE ? NULL : v->s;
}

bool mc_args_truthy(const struct mc_args *a, enum mc_arg_id id)
{
    const struct mc_val *v = &a->v[id];
    switch (v->kind) {
    case MC_V_NONE: return false;
    case MC_V_BOOL: return v->b;
    case MC_V_INT: return v->i != 0;
    case MC_V_FLOAT: return v->f != 0.0;
    case MC_V_STR: return v->s[0] != '\0';
    case MC_V_SYM: return true;
    case MC_V_LIST: return v->n > 0;
    }
    return false;
}

void mc_args_set_none(struct mc_args *a, enum mc_arg_id id) { val_clear(&a->v[id]); a->deleted[id] = false; }

void mc_args_set_int(struct mc_args *a, enum mc_arg_id id, int64_t x)
{
    val_clear(&a->v[id]);
    a->v[id].kind = MC_V_INT;
    a->v[id].i = x;
    a->deleted[id] = false;
}

void mc_args_set_float(struct mc_args *a, enum mc_arg_id id, double x)
{
    val_clear(&a->v[id]);
    a->v[id].kind = MC_V_FLOAT;
    a->v[id].f = x;
    a->deleted[id] = false;
}

void mc_args_set_bool(struct mc_args *a, enum mc_arg_id id, bool x)
{
    val_clear(&a->v[id]);
    a->v[id].kind = MC_V_BOOL;
    a->v[id].b = x;
    a->deleted[id] = false;
}

mc_status mc_args_set_str(struct mc_args *a, enum mc_arg_id id, const char *s)
{
    a->deleted[id] = false;
    return val_set_text(&a->v[id], MC_V_STR, s);
}

mc_status mc_args_set_sym(struct mc_args *a, enum mc_arg_id id, const char *s)
{
    a->deleted[id] = false;
    return val_set_text(&a->v[id], MC_V_SYM, s);
}

/* ---- Python formatting ---------------------------------------------------------------------- */

/* Appends to buf (bounded), always returning the length that would be needed. */
static size_t put(char *buf, size_t n, size_t at, const char *s)
{
    size_t len = strlen(s);
    if (at < n) {
        size_t room = n - at - 1;
        memcpy(buf + at, s, len < room ? len : room);
        buf[at + (len < room ? len : room)] = '\0';
    }
    return at + len;
}

/* repr() of a str: single quotes unless the text has ' and no ". */
static size_t py_str_repr(char *buf, size_t n, size_t at, const char *s)
{
    char q = (strchr(s, '\'') && !strchr(s, '"')) ? '"' : '\'';
    char one[8] = {q, 0};
    at = put(buf, n, at, one);
    for (const char *c = s; *c; c++) {
        if (*c == q || *c == '\\') {
            one[0] = '\\'; one[1] = *c; one[2] = 0;
        } else if (*c == '\n') {
            strcpy(one, "\\n");
        } else if (*c == '\t') {
            strcpy(one, "\\t");
        } else {
            one[0] = *c; one[1] = 0;
        }
        at = put(buf, n, at, one);
    }
    one[0] = q; one[1] = 0;
    return put(buf, n, at, one);
}

static size_t py_format(char *buf, size_t n, size_t at, const struct mc_val *v, bool repr)
{
    char tmp[64];
    switch (v->kind) {
    case MC_V_NONE: return put(buf, n, at, "None");
    case MC_V_BOOL: return put(buf, n, at, v->b ? "True" : "False");
    case MC_V_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v->i);
        return put(buf, n, at, tmp);
    case MC_V_FLOAT:
        mc_py_float_repr(tmp, sizeof(tmp), v->f);
        return put(buf, n, at, tmp);
    case MC_V_STR: return repr ? py_str_repr(buf, n, at, v->s) : put(buf, n, at, v->s);
    case MC_V_SYM: return put(buf, n, at, v->s);
    case MC_V_LIST:
        at = put(buf, n, at, "[");
        for (int k = 0; k < v->n; k++) {
            if (k)
                at = put(buf, n, at, ", ");
            at = py_format(buf, n, at, &v->items[k], true);
        }
        return put(buf, n, at, "]");
    }
    return at;
}

size_t mc_py_str(char *buf, size_t n, const struct mc_val *v)
{
    if (n)
        buf[0] = '\0';
    return py_format(buf, n, 0, v, false);
}

/* ---- defaults ------------------------------------------------------------------------------- */

static mc_status set_default(struct mc_val *v, const struct mc_arg_def *d)
{
    val_clear(v);
    v->kind = d->def.kind;
    switch (d->def.kind) {
    case MC_V_BOOL: v->b = d->def.i != 0; break;
    case MC_V_INT: v->i = d->def.i; break;
    case MC_V_FLOAT: v->f = d->def.f; break;
    case MC_V_STR:
    case MC_V_SYM:
        v->s = dup_str(d->def.s);
        if (!v->s)
            return MC_ERR_NOMEM;
        break;
    case MC_V_LIST:
        v->n = d->def.n;
        v->items = mc_calloc((size_t)(d->def.n ? d->def.n : 1), sizeof(*v->items));
        if (!v->items)
            return MC_ERR_NOMEM;
        for (int k = 0; k < d->def.n; k++) {
            struct mc_val *it = &v->items[k];
            if (d->type == MC_ARGT_INT) {
                it->kind = MC_V_INT;
                it->i = strtoll(d->def.list[k], NULL, 10);
            } else {
                it->kind = MC_V_STR;
                it->s = dup_str(d->def.list[k]);
                if (!it->s)
                    return MC_ERR_NOMEM;
            }
        }
        break;
    case MC_V_NONE: break;
    }
    return MC_OK;
}

mc_status mc_args_init(struct mc_args **out)
{
    *out = NULL;
    struct mc_args *a = mc_calloc(1, sizeof(*a));
    if (!a)
        return mc_error(MC_ERR_NOMEM, "out of memory for the argument namespace");
    for (int id = 0; id < MC_A_COUNT; id++) {
        if (set_default(&a->v[id], &mc_arg_defs[id]) != MC_OK) {
            mc_args_free(a);
            return mc_error(MC_ERR_NOMEM, "out of memory for the argument defaults");
        }
        /* Derived attributes appear once validate_args sets them; extensions never do. */
        a->deleted[id] = id >= MC_A_FIRST_DERIVED;
    }
    /* Megatron reads LOCAL_RANK when it builds the parser; under mpirun or srun, their
     * equivalents (parallel_state/launcher.c) stand in. */
    const char *lr = mc_launch_env(MC_LAUNCH_LOCAL_RANK, NULL);
    if (lr && *lr)
        mc_args_set_int(a, MC_A_local_rank, strtoll(lr, NULL, 10));
    *out = a;
    return MC_OK;
}

void mc_args_free(struct mc_args *a)
{
    if (!a)
        return;
    for (int id = 0; id < MC_A_COUNT; id++)
        val_clear(&a->v[id]);
    mc_free(a);
}

/* ---- Python int() / float() ----------------------------------------------------------------- */

/* Copies s without surrounding whitespace and with '_' removed, if every '_' sits between two
 * digits (Python's rule for numeric strings); false otherwise. */
static bool py_num_clean(const char *s, char *out, size_t n)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    if (len == 0 || len >= n)
        return false;
    size_t o = 0;
    for (size_t k = 0; k < len; k++) {
        if (s[k] == '_') {
            if (k == 0 || k + 1 >= len || !isdigit((unsigned char)s[k - 1]) ||
                !isdigit((unsigned char)s[k + 1]))
                return false;
            continue;
        }
        out[o++] = s[k];
    }
    out[o] = '\0';
    return true;
}

static bool py_int(const char *s, int64_t *out)
{
    char t[128];
    if (!py_num_clean(s, t, sizeof(t)))
        return false;
    const char *p = t;
    if (*p == '+' || *p == '-')
        p++;
    if (!*p)
        return false;
    for (const char *c = p; *c; c++)
        if (!isdigit((unsigned char)*c))
            return false;
    errno = 0;
    long long v = strtoll(t, NULL, 10);
    if (errno == ERANGE)
        return false;
    *out = v;
    return true;
}

static bool py_float(const char *s, double *out)
{
    char t[128];
    if (!py_num_clean(s, t, sizeof(t)))
        return false;
    const char *p = t;
    if (*p == '+' || *p == '-')
        p++;
    /* strtod also reads hex floats and "nan(...)", which Python's float() refuses. */
    if (strchr(p, 'x') || strchr(p, 'X') || strchr(p, '('))
        return false;
    if (!strcasecmp(p, "inf") || !strcasecmp(p, "infinity") || !strcasecmp(p, "nan")) {
        double v = tolower((unsigned char)p[0]) == 'n' ? NAN : INFINITY;
        *out = t[0] == '-' ? -v : v;
        return true;
    }
    if (!isdigit((unsigned char)*p) && *p != '.')
        return false;
    char *end;
    double v = strtod(t, &end);
    if (*end)
        return false;
    *out = v;
    return true;
}

/* ---- moe_freq_type: int, or a list expression of ints with + * and parentheses ----------- */

struct expr {
    const char *p;
    bool ok;
};

struct eval {
    bool is_list;
    int64_t i;
    int64_t *items;
    int n;
};

static void ev_free(struct eval *e) { mc_free(e->items); e->items = NULL; e->n = 0; }

static void skip_ws(struct expr *x) { while (isspace((unsigned char)*x->p)) x->p++; }

static struct eval ex_sum(struct expr *x);

static bool ev_push(struct eval *e, int64_t v)
{
    int64_t *n = mc_alloc(sizeof(int64_t) * (size_t)(e->n + 1));
    if (!n)
        return false;
    if (e->n)
        memcpy(n, e->items, sizeof(int64_t) * (size_t)e->n);
    mc_free(e->items);
    e->items = n;
    e->items[e->n++] = v;
    return true;
}

static struct eval ex_atom(struct expr *x)
{
    struct eval r = {0};
    skip_ws(x);
    if (*x->p == '(') {
        x->p++;
        r = ex_sum(x);
        skip_ws(x);
        if (*x->p != ')')
            x->ok = false;
        else
            x->p++;
    } else if (*x->p == '[') {
        x->p++;
        r.is_list = true;
        skip_ws(x);
        while (x->ok && *x->p != ']') {
            struct eval it = ex_sum(x);
            if (it.is_list || !ev_push(&r, it.i))
                x->ok = false;
            ev_free(&it);
            skip_ws(x);
            if (*x->p == ',')
                x->p++;
            else if (*x->p != ']')
                x->ok = false;
            skip_ws(x);
        }
        if (x->ok)
            x->p++;
    } else if (isdigit((unsigned char)*x->p) || *x->p == '-') {
        char *end;
        r.i = strtoll(x->p, &end, 10);
        if (end == x->p)
            x->ok = false;
        x->p = end;
    } else {
        x->ok = false;
    }
    return r;
}

static struct eval ex_product(struct expr *x)
{
    struct eval l = ex_atom(x);
    for (skip_ws(x); x->ok && *x->p == '*'; skip_ws(x)) {
        x->p++;
        struct eval r = ex_atom(x);
        if (l.is_list && r.is_list) {
            x->ok = false;
        } else if (l.is_list || r.is_list) {
            struct eval *lst = l.is_list ? &l : &r;
            int64_t times = l.is_list ? r.i : l.i;
            struct eval o = {.is_list = true};
            for (int64_t t = 0; t < times && x->ok; t++)
                for (int k = 0; k < lst->n && x->ok; k++)
                    x->ok = ev_push(&o, lst->items[k]);
            ev_free(&l);
            ev_free(&r);
            l = o;
            continue;
        } else {
            l.i *= r.i;
        }
        ev_free(&r);
    }
    return l;
}

static struct eval ex_sum(struct expr *x)
{
    struct eval l = ex_product(x);
    for (skip_ws(x); x->ok && *x->p == '+'; skip_ws(x)) {
        x->p++;
        struct eval r = ex_product(x);
        if (l.is_list != r.is_list)
            x->ok = false;
        else if (l.is_list)
            for (int k = 0; k < r.n && x->ok; k++)
                x->ok = ev_push(&l, r.items[k]);
        else
            l.i += r.i;
        ev_free(&r);
    }
    return l;
}

/* ---- the parser ----------------------------------------------------------------------------- */

static mc_status parse_fail(struct mc_args *a, int code, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static mc_status parse_fail(struct mc_args *a, int code, const char *kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof(a->err), fmt, ap);
    va_end(ap);
    a->exit_code = code;
    a->err_kind = kind;
    return mc_error(MC_ERR_CONFIG, "%s", a->err);
}

/* argparse names an argument by all its option strings joined with '/'. */
static const char *arg_name(const struct mc_arg_def *d, char *buf, size_t n)
{
    if (d->opt2)
        snprintf(buf, n, "%s/%s", d->opt, d->opt2);
    else
        snprintf(buf, n, "%s", d->opt);
    return buf;
}

static int find_option(const char *name, size_t len)
{
    for (int id = 0; id < MC_A_COUNT; id++) {
        const struct mc_arg_def *d = &mc_arg_defs[id];
        if (d->opt && strlen(d->opt) == len && !strncmp(d->opt, name, len))
            return id;
        if (d->opt2 && strlen(d->opt2) == len && !strncmp(d->opt2, name, len))
            return id;
    }
    return -1;
}

/* argparse's test for a token that is a negative number rather than an option. */
static bool negative_number(const char *s)
{
    if (s[0] != '-')
        return false;
    const char *p = s + 1;
    int digits = 0;
    while (isdigit((unsigned char)*p)) { p++; digits++; }
    if (*p == '\0')
        return digits > 0;
    if (*p != '.')
        return false;
    p++;
    int frac = 0;
    while (isdigit((unsigned char)*p)) { p++; frac++; }
    return *p == '\0' && frac > 0;
}

/* True when argparse would treat the token as an option string ('O'), not a value ('A'). */
static bool looks_like_option(const char *s)
{
    if (s[0] != '-' || s[1] == '\0')
        return false;
    if (negative_number(s))
        return false;
    if (!strcmp(s, "--"))
        return true;
    const char *eq = strchr(s, '=');
    if (find_option(s, eq ? (size_t)(eq - s) : strlen(s)) >= 0)
        return true;
    return strchr(s, ' ') == NULL;
}

static bool check_choice(const struct mc_arg_def *d, const struct mc_val *v)
{
    if (!d->choices)
        return true;
    char s[512];
    mc_py_str(s, sizeof(s), v);
    for (const char *const *c = d->choices; *c; c++)
        if (strcmp(*c, "None") && !strcmp(*c, s)) /* a None choice never matches a string */
            return true;
    return false;
}

static void choices_text(const struct mc_arg_def *d, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (const char *const *c = d->choices; *c; c++) {
        if (c != d->choices)
            at = put(buf, n, at, ", ");
        if (d->type == MC_ARGT_STR && strcmp(*c, "None"))
            at = py_str_repr(buf, n, at, *c);
        else
            at = put(buf, n, at, *c);
    }
}

/* Converts one value string as the option's type= would; choices are checked by the caller. */
static mc_status convert(struct mc_args *a, const struct mc_arg_def *d, const char *s,
                         struct mc_val *out)
{
    char name[160];
    memset(out, 0, sizeof(*out));
    switch (d->type) {
    case MC_ARGT_INT:
        out->kind = MC_V_INT;
        if (!py_int(s, &out->i))
            return parse_fail(a, 2, NULL, "argument %s: invalid int value: '%s'",
                              arg_name(d, name, sizeof(name)), s);
        return MC_OK;
    case MC_ARGT_FLOAT:
        out->kind = MC_V_FLOAT;
        if (!py_float(s, &out->f))
            return parse_fail(a, 2, NULL, "argument %s: invalid float value: '%s'",
                              arg_name(d, name, sizeof(name)), s);
        return MC_OK;
    case MC_ARGT_BOOL:
        out->kind = MC_V_BOOL;
        out->b = s[0] != '\0';
        return MC_OK;
    case MC_ARGT_ATTN_BACKEND: {
        static const char *const names[] = {"flash", "fused", "unfused", "local", "auto"};
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
            if (!strcmp(s, names[k])) {
                char sym[48];
                snprintf(sym, sizeof(sym), "AttnBackend.%s", s);
                out->kind = MC_V_SYM;
                out->s = dup_str(sym);
                return out->s ? MC_OK : MC_ERR_NOMEM;
            }
        /* Megatron's lambda raises KeyError, which argparse does not catch: exit status 1. */
        return parse_fail(a, 1, "KeyError", "'%s'", s);
    }
    case MC_ARGT_MOE_FREQ:
        if (strchr(s, '[')) {
            struct expr x = {s, true};
            struct eval e = ex_sum(&x);
            skip_ws(&x);
            if (!x.ok || *x.p || !e.is_list) {
                ev_free(&e);
                return parse_fail(a, 2, NULL, "argument %s: invalid moe_freq_type value: '%s'",
                                  arg_name(d, name, sizeof(name)), s);
            }
            out->kind = MC_V_LIST;
            out->n = e.n;
            out->items = mc_calloc((size_t)(e.n ? e.n : 1), sizeof(*out->items));
            if (!out->items) {
                ev_free(&e);
                return MC_ERR_NOMEM;
            }
            for (int k = 0; k < e.n; k++) {
                out->items[k].kind = MC_V_INT;
                out->items[k].i = e.items[k];
            }
            ev_free(&e);
            return MC_OK;
        }
        out->kind = MC_V_INT;
        if (!py_int(s, &out->i))
            return parse_fail(a, 2, NULL, "argument %s: invalid moe_freq_type value: '%s'",
                              arg_name(d, name, sizeof(name)), s);
        return MC_OK;
    default:
        out->kind = MC_V_STR;
        out->s = dup_str(s);
        return out->s ? MC_OK : MC_ERR_NOMEM;
    }
}

static bool is_mindspeed_value(const struct mc_arg_def *d, const char *value)
{
    for (int k = 0; k < MC_NUM_MINDSPEED_REFUSED_VALUES; k++)
        if (!strcmp(mc_mindspeed_refused_values[k][0], d->opt) &&
            !strcmp(mc_mindspeed_refused_values[k][1], value))
            return true;
    return false;
}

static mc_status convert_checked(struct mc_args *a, const struct mc_arg_def *d, const char *s,
                                 struct mc_val *out)
{
    mc_status st = convert(a, d, s, out);
    if (st != MC_OK)
        return st;
    if (!check_choice(d, out)) {
        char name[160], ch[1024], got[512];
        if (out->kind == MC_V_STR && is_mindspeed_value(d, out->s)) {
            /* MindSpeed-LLM's launch scripts are a dialect we name, not an argparse typo. */
            mc_status st = parse_fail(a, 2, NULL, "%s %s is a MindSpeed option value that "
                                      "megatron.c does not support yet", d->opt, out->s);
            val_clear(out);
            return st;
        }
        if (out->kind == MC_V_STR)
            py_str_repr(got, sizeof(got), 0, out->s);
        else
            mc_py_str(got, sizeof(got), out);
        choices_text(d, ch, sizeof(ch));
        val_clear(out);
        return parse_fail(a, 2, NULL, "argument %s: invalid choice: %s (choose from %s)",
                          arg_name(d, name, sizeof(name)), got, ch);
    }
    return MC_OK;
}

/* Consumes the values of option `id` starting at argv[*i + 1]; `explicit_arg` is the text after
 * '=' or NULL. */
static mc_status take_option(struct mc_args *a, int id, const char *explicit_arg, int argc,
                             char **argv, int *i)
{
    const struct mc_arg_def *d = &mc_arg_defs[id];
    char name[160];
    struct mc_val *v = &a->v[id];
    if (d->type == MC_ARGT_STORE_TRUE || d->type == MC_ARGT_STORE_FALSE) {
        if (explicit_arg)
            return parse_fail(a, 2, NULL, "argument %s: ignored explicit argument '%s'",
                              arg_name(d, name, sizeof(name)), explicit_arg);
        mc_args_set_bool(a, (enum mc_arg_id)id, d->type == MC_ARGT_STORE_TRUE);
        a->given[id] = true;
        return MC_OK;
    }
    if (!d->nargs) {
        const char *s = explicit_arg;
        if (!s) {
            if (*i + 1 >= argc || looks_like_option(argv[*i + 1]))
                return parse_fail(a, 2, NULL, "argument %s: expected one argument",
                                  arg_name(d, name, sizeof(name)));
            s = argv[++*i];
        }
        struct mc_val nv;
        mc_status st = convert_checked(a, d, s, &nv);
        if (st != MC_OK)
            return st;
        val_clear(v);
        *v = nv;
        a->given[id] = true;
        return MC_OK;
    }
    /* nargs '*' / '+': the explicit value alone, or every following value token. */
    int first = *i + 1, count = 0;
    if (explicit_arg)
        count = 1;
    else
        while (first + count < argc && !looks_like_option(argv[first + count]))
            count++;
    if (d->nargs == '+' && count == 0)
        return parse_fail(a, 2, NULL, "argument %s: expected at least one argument",
                          arg_name(d, name, sizeof(name)));
    struct mc_val nv = {.kind = MC_V_LIST, .n = count};
    nv.items = mc_calloc((size_t)(count ? count : 1), sizeof(*nv.items));
    if (!nv.items)
        return MC_ERR_NOMEM;
    for (int k = 0; k < count; k++) {
        mc_status st = convert_checked(a, d, explicit_arg ? explicit_arg : argv[first + k],
                                       &nv.items[k]);
        if (st != MC_OK) {
            val_clear(&nv);
            return st;
        }
    }
    if (!explicit_arg)
        *i += count;
    val_clear(v);
    *v = nv;
    a->given[id] = true;
    return MC_OK;
}

static bool is_mindspeed_refused(const char *tok)
{
    size_t len = strcspn(tok, "=");
    for (int k = 0; k < MC_NUM_MINDSPEED_REFUSED; k++)
        if (strlen(mc_mindspeed_refused[k]) == len && !strncmp(mc_mindspeed_refused[k], tok, len))
            return true;
    return false;
}

/* Megatron reads RANK / WORLD_SIZE (torchrun sets them). Under mpirun or srun they are
 * absent, so the launcher's own variables stand in (parallel_state/launcher.c); once MPI runs,
 * pretrain_gpt replaces both with MPI's values. */
static mc_status env_int(struct mc_args *a, const char *var, const char *dflt, enum mc_arg_id id)
{
    bool rank = !strcmp(var, "RANK");
    const char *s = mc_launch_env(rank ? MC_LAUNCH_RANK : MC_LAUNCH_WORLD_SIZE, NULL);
    if (!s)
        s = dflt;
    int64_t v;
    if (!py_int(s, &v))
        return parse_fail(a, 1, "ValueError", "invalid literal for int() with base 10: '%s'", s);
    mc_args_set_int(a, id, v);
    return MC_OK;
}

/* Similarity of two option names as 2 * (longest common subsequence) / (total length), case
 * folded: 1 for equal names; a misremembered option of Megatron's scores well above 0.6. */
static double similarity(const char *x, size_t nx, const char *y)
{
    size_t ny = strlen(y);
    if (nx > 96 || ny > 96)
        return 0.0;
    int prev[97] = {0}, cur[97] = {0};
    for (size_t i = 1; i <= nx; i++) {
        for (size_t j = 1; j <= ny; j++) {
            int up = prev[j], left = cur[j - 1];
            cur[j] = tolower((unsigned char)x[i - 1]) == tolower((unsigned char)y[j - 1])
                         ? prev[j - 1] + 1 : (up > left ? up : left);
        }
        memcpy(prev, cur, sizeof(prev));
    }
    return 2.0 * prev[ny] / (double)(nx + ny);
}

/* "did you mean" for each unknown token that looks like an option: the closest real one. */
static void suggest(struct mc_args *a, char **extras, int n_extras)
{
    size_t at = 0;
    a->hint[0] = '\0';
    for (int k = 0; k < n_extras; k++) {
        const char *tok = extras[k];
        size_t len = strcspn(tok, "=");
        if (!looks_like_option(tok) || len < 3)
            continue;
        double best = 0.6;
        const char *pick = NULL;
        for (int id = 0; id < MC_A_COUNT; id++) {
            const char *names[2] = {mc_arg_defs[id].opt, mc_arg_defs[id].opt2};
            for (int n = 0; n < 2; n++) {
                double s = names[n] ? similarity(tok, len, names[n]) : 0.0;
                if (s > best) {
                    best = s;
                    pick = names[n];
                }
            }
        }
        if (pick) {
            char line[400];
            snprintf(line, sizeof(line), "%.*s: did you mean %s?\n", (int)(len < 200 ? len : 200),
                     tok, pick);
            at = put(a->hint, sizeof(a->hint), at, line);
        }
    }
}

static mc_status finish_extras(struct mc_args *a, char **extras, int n_extras)
{
    for (int k = 0; k < n_extras; k++)
        if (is_mindspeed_refused(extras[k]))
            return parse_fail(a, 2, NULL, "%.*s is a MindSpeed option that megatron.c does not "
                              "support yet", (int)strcspn(extras[k], "="), extras[k]);
    suggest(a, extras, n_extras);
    size_t at = put(a->err, sizeof(a->err), 0, "unrecognized arguments:");
    for (int k = 0; k < n_extras; k++) {
        at = put(a->err, sizeof(a->err), at, " ");
        at = put(a->err, sizeof(a->err), at, extras[k]);
    }
    a->exit_code = 2;
    a->err_kind = NULL;
    return mc_error(MC_ERR_CONFIG, "%s", a->err);
}

static void add_note(struct mc_args *a, const struct mc_arg_def *d)
{
    size_t at = strlen(a->notes);
    snprintf(a->notes + at, sizeof(a->notes) - at, "note: %s accepted: %s\n", d->opt, d->note);
}

mc_status mc_args_parse(struct mc_args *a, int argc, char **argv)
{
    char **extras = mc_calloc((size_t)(argc ? argc : 1), sizeof(char *));
    int n_extras = 0;
    mc_status st = MC_OK;
    bool positional_only = false;
    if (!extras)
        return mc_error(MC_ERR_NOMEM, "out of memory parsing the command line");
    for (int i = 1; i < argc; i++) {
        const char *tok = argv[i];
        if (positional_only || !looks_like_option(tok)) {
            extras[n_extras++] = argv[i];
            continue;
        }
        if (!strcmp(tok, "--")) { /* argparse keeps "--" among the unrecognized arguments */
            positional_only = true;
            extras[n_extras++] = argv[i];
            continue;
        }
        if (!strcmp(tok, "-h") || !strcmp(tok, "--help")) {
            a->help = true;
            goto done; /* argparse prints the help and exits as soon as it meets the option */
        }
        const char *eq = strchr(tok, '=');
        int id = find_option(tok, eq ? (size_t)(eq - tok) : strlen(tok));
        if (id < 0) {
            extras[n_extras++] = argv[i];
            continue;
        }
        st = take_option(a, id, eq ? eq + 1 : NULL, argc, argv, &i);
        if (st != MC_OK)
            goto done;
        /* flags accepted for a fused kernel get a note; implemented value options (and the
         * implemented ALiBi flags) do not */
        if (mc_arg_defs[id].support == MC_ARG_EXTENSION && id != MC_A_dry_run &&
            id != MC_A_square_alibi_mask && id != MC_A_fill_neg_inf &&
            mc_arg_defs[id].type == MC_ARGT_STORE_TRUE)
            add_note(a, &mc_arg_defs[id]);
    }
    if (n_extras) {
        st = finish_extras(a, extras, n_extras);
        goto done;
    }
    st = env_int(a, "RANK", "0", MC_A_rank);
    if (st == MC_OK)
        st = env_int(a, "WORLD_SIZE", "1", MC_A_world_size);
done:
    mc_free(extras);
    return st;
}

/* ---- support check (the refusal list itself is in refusals.c) ------------------------------- */

bool mc_args_is_default(const struct mc_args *a, enum mc_arg_id id)
{
    struct mc_val dv = {0};
    if (set_default(&dv, &mc_arg_defs[id]) != MC_OK)
        return false;
    char x[1024], y[1024];
    mc_py_str(x, sizeof(x), &a->v[id]);
    mc_py_str(y, sizeof(y), &dv);
    val_clear(&dv);
    return !strcmp(x, y);
}

/* ---- usage, help, dump ---------------------------------------------------------------------- */

static void metavar(const struct mc_arg_def *d, char *buf, size_t n)
{
    char m[512];
    if (d->choices) {
        size_t at = put(m, sizeof(m), 0, "{");
        for (const char *const *c = d->choices; *c; c++) {
            if (c != d->choices)
                at = put(m, sizeof(m), at, ",");
            at = put(m, sizeof(m), at, *c);
        }
        put(m, sizeof(m), at, "}");
    } else {
        size_t k = 0;
        for (; d->dest[k] && k + 1 < sizeof(m); k++)
            m[k] = (char)toupper((unsigned char)d->dest[k]);
        m[k] = '\0';
    }
    if (d->type == MC_ARGT_STORE_TRUE || d->type == MC_ARGT_STORE_FALSE)
        snprintf(buf, n, "%s", d->opt);
    else if (d->nargs == '*')
        snprintf(buf, n, "%s [%s ...]", d->opt, m);
    else if (d->nargs == '+')
        snprintf(buf, n, "%s %s [%s ...]", d->opt, m, m);
    else
        snprintf(buf, n, "%s %s", d->opt, m);
}

void mc_args_print_usage(FILE *f, const char *prog)
{
    char head[256], item[1200];
    snprintf(head, sizeof(head), "usage: %s ", prog);
    size_t indent = strlen(head), col = indent;
    fputs(head, f);
    fputs("[-h]", f);
    col += 4;
    for (int id = 0; id < MC_A_COUNT; id++) {
        const struct mc_arg_def *d = &mc_arg_defs[id];
        if (!d->opt)
            continue;
        char mv[1100];
        metavar(d, mv, sizeof(mv));
        snprintf(item, sizeof(item), "[%s]", mv);
        if (col + 1 + strlen(item) > 78) {
            fprintf(f, "\n%*s", (int)indent, "");
            col = indent;
        } else {
            fputc(' ', f);
            col++;
        }
        fputs(item, f);
        col += strlen(item);
    }
    fputc('\n', f);
}

static const char *support_text(enum mc_arg_support s)
{
    switch (s) {
    case MC_ARG_SUPPORTED: return "";
    case MC_ARG_NOOP: return " [accepted, no effect in megatron.c: CUDA/performance option]";
    case MC_ARG_UNUSED: return " [accepted, not used by GPT pretraining]";
    case MC_ARG_UNSUPPORTED: return " [refused: not supported by megatron.c yet]";
    case MC_ARG_EXTENSION: return "";
    }
    return "";
}

/* argparse's layout: the option with its metavar, then the description indented to column 24
 * (on the same line when the option is short enough). */
static void print_option_help(FILE *f, const struct mc_arg_def *d)
{
    char mv[1100], dv[512], head[1200];
    metavar(d, mv, sizeof(mv));
    snprintf(head, sizeof(head), "  %s%s%s", mv, d->opt2 ? ", " : "", d->opt2 ? d->opt2 : "");
    if (strlen(head) <= 22)
        fprintf(f, "%-24s", head);
    else
        fprintf(f, "%s\n%24s", head, "");
    if (d->support == MC_ARG_EXTENSION) {
        fprintf(f, "%s\n", d->note);
        return;
    }
    struct mc_val tmp = {0};
    set_default(&tmp, d);
    mc_py_str(dv, sizeof(dv), &tmp);
    val_clear(&tmp);
    fprintf(f, "%s (default: %s)%s", d->help ? d->help : "", dv, support_text(d->support));
    if (d->limit)
        fprintf(f, " [megatron.c: %s]", d->limit);
    fputc('\n', f);
}

void mc_args_print_help(FILE *f, const char *prog)
{
    mc_args_print_usage(f, prog);
    fprintf(f, "\nMegatron-LM Arguments (megatron.c, compatible with Megatron-LM core_v0.12.1)\n"
               "\nThe options of Megatron's pretrain_gpt.py, in Megatron's groups. Options marked "
               "[refused] stop a real\nrun before training; --dry-run checks a whole command line "
               "and lists every refusal.\nMost runs need --num-layers, --hidden-size, "
               "--num-attention-heads, --seq-length,\n--max-position-embeddings, "
               "--micro-batch-size, --lr, --train-iters, data and tokenizer options.\n"
               "\noptions:\n  -h, --help            show this help message and exit\n");
    const char *group = NULL;
    for (int id = 0; id < MC_A_COUNT; id++) {
        const struct mc_arg_def *d = &mc_arg_defs[id];
        if (!d->opt)
            continue;
        if (!group || strcmp(group, d->group)) {
            group = d->group;
            fprintf(f, "\n%s:\n", group);
        }
        print_option_help(f, d);
    }
}

static int cmp_lower(const void *x, const void *y)
{
    const unsigned char *p = *(const unsigned char *const *)x, *q = *(const unsigned char *const *)y;
    for (;; p++, q++) {
        int a = tolower(*p), b = tolower(*q);
        if (a != b || !a)
            return a - b;
    }
}

mc_status mc_args_print_dump(FILE *f, const struct mc_args *a)
{
    char **lines = mc_calloc(MC_A_COUNT, sizeof(char *));
    int n = 0;
    mc_status st = MC_OK;
    if (!lines)
        return mc_error(MC_ERR_NOMEM, "out of memory for the arguments dump");
    for (int id = 0; id < MC_A_FIRST_EXTENSION; id++) {
        if (a->deleted[id])
            continue;
        const char *name = mc_arg_defs[id].dest;
        size_t need = mc_py_str(NULL, 0, &a->v[id]);
        size_t len = 2 + strlen(name) + 1 + 48 + 1 + need + 1;
        char *line = mc_alloc(len);
        if (!line) {
            st = mc_error(MC_ERR_NOMEM, "out of memory for the arguments dump");
            goto cleanup;
        }
        int dots = 48 - (int)strlen(name);
        size_t at = (size_t)snprintf(line, len, "  %s %.*s ", name, dots > 0 ? dots : 0,
                                     "................................................");
        mc_py_str(line + at, len - at, &a->v[id]);
        lines[n++] = line;
    }
    qsort(lines, (size_t)n, sizeof(char *), cmp_lower);
    fprintf(f, "------------------------ arguments ------------------------\n");
    for (int k = 0; k < n; k++)
        fprintf(f, "%s\n", lines[k]);
    fprintf(f, "-------------------- end of arguments ---------------------\n");
cleanup:
    for (int k = 0; k < n; k++)
        mc_free(lines[k]);
    mc_free(lines);
    return st;
}
