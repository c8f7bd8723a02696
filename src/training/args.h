/* pretrain_gpt's command line: the argument namespace, argparse-compatible parsing, the support
 * check, help/usage text and the arguments dump. Mirrors megatron/training/arguments.py
 * (parse_args, _print_args) of Megatron-LM core_v0.12.1; the option table itself is generated
 * into args_table.c by scripts/gen_args_table.py.
 *
 * Values are kept as Python would hold them (None, bool, int, float, str, list, or a symbol such
 * as torch.float32) so that the arguments dump prints exactly what Megatron prints. */
#ifndef MC_TRAINING_ARGS_H
#define MC_TRAINING_ARGS_H

#include <stdio.h>

#include "megatron.h"
#include "core/pyformat.h"
#include "training/args_table.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mc_val_kind { MC_V_NONE = 0, MC_V_BOOL, MC_V_INT, MC_V_FLOAT, MC_V_STR, MC_V_SYM, MC_V_LIST };

/* One Python value. STR and SYM print the same with str(); inside a list a STR prints quoted.
 * Owned by the mc_args that holds it. */
struct mc_val {
    enum mc_val_kind kind;
    bool b;
    int64_t i;
    double f;
    char *s;              /* STR, SYM */
    int n;                /* LIST: number of items */
    struct mc_val *items; /* LIST: [n], each INT, FLOAT or STR */
};

enum mc_arg_type {
    MC_ARGT_INT, MC_ARGT_FLOAT, MC_ARGT_STR, MC_ARGT_STORE_TRUE, MC_ARGT_STORE_FALSE,
    MC_ARGT_BOOL,          /* type=bool: any non-empty string is True */
    MC_ARGT_ATTN_BACKEND,  /* enum name lookup, stored as AttnBackend.<name> */
    MC_ARGT_MOE_FREQ,      /* int, or a list expression such as ([0]+[1]*3) */
    MC_ARGT_DERIVED,       /* not an option: set by validate_args */
};

enum mc_arg_support {
    MC_ARG_SUPPORTED,   /* implemented by megatron.c */
    MC_ARG_NOOP,        /* CUDA/performance knob that does not change results: accepted, no effect */
    MC_ARG_UNUSED,      /* Megatron's GPT pretraining does not read it either */
    MC_ARG_UNSUPPORTED, /* refused at start-up when given a non-default value */
    MC_ARG_EXTENSION,   /* megatron.c / MindSpeed option absent from Megatron's parser */
};

struct mc_arg_default {
    enum mc_val_kind kind;
    int64_t i;
    double f;
    const char *s;
    const char *const *list;
    int n;
};

struct mc_arg_def {
    const char *opt;               /* "--num-layers"; NULL for derived attributes */
    const char *opt2;              /* second spelling or NULL */
    const char *dest;
    const char *group;             /* argparse group title */
    enum mc_arg_type type;
    char nargs;                    /* 0 (one value, or none for flags), '*' or '+' */
    const char *const *choices;    /* NULL-terminated, as str() of each choice; or NULL */
    struct mc_arg_default def;
    enum mc_arg_support support;
    const char *note;              /* extensions: what the option does in megatron.c */
    const char *help;              /* one line for --help (scripts/args_help.txt) */
    const char *limit;             /* values of a supported option that are refused, or NULL */
};

extern const struct mc_arg_def mc_arg_defs[MC_A_COUNT];
extern const char *const mc_mindspeed_refused[MC_NUM_MINDSPEED_REFUSED];
extern const char *const mc_mindspeed_refused_values[MC_NUM_MINDSPEED_REFUSED_VALUES][2];

/* The namespace. deleted[] marks attributes absent from the dump (validate_args deletes the
 * removed options; derived attributes are absent until validate_args sets them). */
struct mc_args {
    struct mc_val v[MC_A_COUNT];
    bool given[MC_A_COUNT];   /* appeared on the command line */
    bool deleted[MC_A_COUNT];
    bool help;                /* -h/--help seen: print mc_args_print_help and exit 0 */
    int exit_code;            /* after a failure: 2 argparse error, 1 other error, 0 clean exit */
    const char *err_kind;     /* "AssertionError", "RuntimeError", ...; NULL for argparse errors */
    char err[2048];           /* the message after "error: " / "<Kind>: "; "" for a bare assert */
    char notes[2048];         /* one line per accepted MindSpeed option, printed by rank 0 */
    char hint[1024];          /* after an unknown option: "did you mean ..." lines, or "" */
};

/* Namespace holding every default (Megatron's parser before reading argv). LOCAL_RANK sets the
 * default of --local-rank, as in Megatron. */
MC_API mc_status mc_args_init(struct mc_args **out);
MC_API void mc_args_free(struct mc_args *a);

/* argparse semantics (allow_abbrev=False): last occurrence wins, --opt=value, nargs lists,
 * flags, choices, Python int()/float() syntax; all unknown options are collected and reported
 * together. Then rank/world_size from RANK/WORLD_SIZE. On failure returns MC_ERR_CONFIG with
 * a->exit_code / a->err / a->err_kind set (2 for argparse errors). */
MC_API mc_status mc_args_parse(struct mc_args *a, int argc, char **argv);

/* The first entry of the refusal list (training/refusals.h: every option or value this build
 * refuses) as the namespace's error: MC_ERR_UNSUPPORTED with a->err / a->err_kind set. */
MC_API mc_status mc_args_check_support(struct mc_args *a);
/* The option holds its default value (compared as str(), as the arguments dump prints it). */
MC_API bool mc_args_is_default(const struct mc_args *a, enum mc_arg_id id);

/* argparse-style "usage: prog [-h] [--num-layers NUM_LAYERS] ..." wrapped at 78 columns. */
MC_API void mc_args_print_usage(FILE *f, const char *prog);
/* Usage, then every option by group with its default and support class. */
MC_API void mc_args_print_help(FILE *f, const char *prog);

/* The block printed by _print_args("arguments", args): sorted by the lowercased line. */
MC_API mc_status mc_args_print_dump(FILE *f, const struct mc_args *a);

/* ---- typed access (MC_ASSERT on a kind mismatch: a programmer error) ---------------------- */
MC_API bool mc_args_is_none(const struct mc_args *a, enum mc_arg_id id);
MC_API int64_t mc_args_int(const struct mc_args *a, enum mc_arg_id id);
MC_API double mc_args_float(const struct mc_args *a, enum mc_arg_id id); /* INT or FLOAT */
MC_API bool mc_args_bool(const struct mc_args *a, enum mc_arg_id id);
MC_API const char *mc_args_str(const struct mc_args *a, enum mc_arg_id id); /* STR/SYM; NULL if None */
/* Python truthiness: None, False, 0, 0.0, "" and [] are false. */
MC_API bool mc_args_truthy(const struct mc_args *a, enum mc_arg_id id);
MC_API void mc_args_set_none(struct mc_args *a, enum mc_arg_id id);
MC_API void mc_args_set_int(struct mc_args *a, enum mc_arg_id id, int64_t x);
MC_API void mc_args_set_float(struct mc_args *a, enum mc_arg_id id, double x);
MC_API void mc_args_set_bool(struct mc_args *a, enum mc_arg_id id, bool x);
MC_API mc_status mc_args_set_str(struct mc_args *a, enum mc_arg_id id, const char *s);
MC_API mc_status mc_args_set_sym(struct mc_args *a, enum mc_arg_id id, const char *s);

/* ---- Python formatting -------------------------------------------------------------------- */
/* str(value) (lists hold repr() of their items). Returns the length that was needed. */
MC_API size_t mc_py_str(char *buf, size_t n, const struct mc_val *v);

#ifdef __cplusplus
}
#endif

#endif /* MC_TRAINING_ARGS_H */
