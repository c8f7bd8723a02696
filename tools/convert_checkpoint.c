/* convert_checkpoint: Megatron-LM's tools/checkpoint/convert.py (core_v0.12.1) in C: reshards a
 * --ckpt-format torch checkpoint to any tensor/pipeline parallel layout, and imports/exports
 * HuggingFace GPT-2 (GPT2LMHeadModel) and Llama (LlamaForCausalLM) safetensors directories.
 *
 *   convert_checkpoint --model-type GPT --loader core --saver core --load-dir IN --save-dir OUT \
 *       --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2
 *
 * The loader and saver run one after the other in one process (Megatron runs them as two
 * processes joined by a queue; --max-queue-size is accepted for that reason and has no effect).
 * Library: src/tools/checkpoint/convert*.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/checkpoint/convert.h"

struct cli {
    const char *model_type, *loader, *saver;
    struct mc_cv_options o;
    bool help;
    const char *hf_only; /* an option only the hf (llama_mistral) loader has, if given */
    const char *saver_format; /* --saver-ckpt-format, if given */
};

static void usage(FILE *f)
{
    fprintf(f,
"usage: convert_checkpoint [-h] --model-type {GPT} [--loader LOADER] [--saver SAVER]\n"
"                          --load-dir LOAD_DIR --save-dir SAVE_DIR [--max-queue-size N]\n"
"                          [--no-checking] [--true-vocab-size N] [--vocab-file FILE]\n"
"                          [--make-vocab-size-divisible-by N] [--megatron-path PATH]\n"
"                          [--loader-transformer-impl {local,transformer_engine}]\n"
"                          [--saver-transformer-impl {local,transformer_engine}]\n"
"                          [--target-tensor-parallel-size N] [--target-pipeline-parallel-size N]\n"
"                          [--target-expert-parallel-size 1] [--tokenizer-model PATH]\n"
"                          [--bf16 | --fp16] [--checkpoint-type {hf,meta}] [--model-size SIZE]\n"
"                          [--saver-ckpt-format {torch,torch_dist}]\n"
"\n"
"Megatron Checkpoint Converter Arguments (Megatron-LM tools/checkpoint/convert.py)\n"
"\n"
"options:\n"
"  -h, --help            show this help message and exit\n"
"  --model-type {GPT}    Type of the model (BERT is not supported by megatron.c)\n"
"  --loader LOADER       core (alias mcore), legacy (alias megatron), hf (HuggingFace\n"
"                        GPT2LMHeadModel / LlamaForCausalLM directory; alias llama_mistral with\n"
"                        an HF checkpoint). Default: megatron, i.e. legacy, as in Megatron; the\n"
"                        Megatron loaders read local, transformer_engine and legacy parameter\n"
"                        names alike.\n"
"  --saver SAVER         core (alias mcore), legacy (alias megatron), hf. Default: megatron.\n"
"  --load-dir LOAD_DIR   Directory to load model checkpoint from (the Megatron loaders detect\n"
"                        its format, torch or torch_dist, as Megatron's load_checkpoint does)\n"
"  --save-dir SAVE_DIR   Directory to save model checkpoint to (written as SAVE_DIR.tmp.<pid>\n"
"                        and renamed when complete; must not exist or be empty)\n"
"  --max-queue-size N    Accepted for compatibility; no effect (no queue between processes)\n"
"  --no-checking         Accepted; names and shapes are always checked (a missing tensor\n"
"                        cannot be saved)\n"
"\n"
"loader options:\n"
"  --true-vocab-size N   Original size of vocab; if specified, trims padding from the embedding\n"
"                        table (and the saver re-pads it for the target TP)\n"
"  --vocab-file FILE     A vocab.json; its size is the true vocab size\n"
"  --make-vocab-size-divisible-by N\n"
"                        HF loader: pad the vocabulary to a multiple of N x target TP\n"
"                        (default 128, Megatron's)\n"
"  --megatron-path PATH  Accepted and ignored (no Python Megatron is needed)\n"
"  --loader-transformer-impl {local,transformer_engine}\n"
"                        Accepted; the parameter names are detected from the checkpoint\n"
"  --tokenizer-model PATH\n"
"                        hf loader: a HuggingFace tokenizer (tokenizer.json or its directory)\n"
"                        whose size (with added tokens) is the true vocab size\n"
"  --bf16, --fp16        hf loader: store the Megatron weights in bfloat16 / float16\n"
"  --checkpoint-type {hf,meta}\n"
"                        hf loader (llama_mistral): only hf; Meta-format checkpoints are refused\n"
"  --model-size SIZE     hf loader (llama_mistral): accepted and ignored; config.json says it\n"
"  --position-embedding-type {learned_absolute,rope}\n"
"                        Accepted and ignored: taken from the checkpoint's args\n"
"\n"
"saver options:\n"
"  --target-tensor-parallel-size N   default: the source's (1 for HF)\n"
"  --target-pipeline-parallel-size N default: the source's (1 for HF)\n"
"  --target-expert-parallel-size N   only 1\n"
"  --saver-transformer-impl {local,transformer_engine}\n"
"                        Parameter names the core saver writes (default transformer_engine, as\n"
"                        Megatron; pretrain_gpt of megatron.c loads local)\n"
"  --saver-ckpt-format {torch,torch_dist}\n"
"                        core saver: the format written (default torch, the only one Megatron's\n"
"                        saver writes; torch_dist is megatron.c's addition: Megatron's default\n"
"                        --ckpt-format, loadable at any layout)\n");
}

static int die(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "convert_checkpoint: error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 2;
}

static int parse_int(const char *opt, const char *v, int64_t *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end)
        return die("argument %s: invalid int value: '%s'", opt, v);
    *out = x;
    return 0;
}

static const char *canonical(const char *name)
{
    if (!strcmp(name, "megatron"))
        return "legacy";
    if (!strcmp(name, "mcore"))
        return "core";
    if (!strcmp(name, "llama_mistral"))
        return "hf";
    return name;
}

static int choice(const char *opt, const char *v, const char *const *choices)
{
    for (int k = 0; choices[k]; k++)
        if (!strcmp(v, choices[k]))
            return 0;
    return die("argument %s: invalid choice: '%s'", opt, v);
}

static int parse(struct cli *c, int argc, char **argv)
{
    static const char *const impls[] = {"local", "transformer_engine", NULL};
    static const char *const posemb[] = {"learned_absolute", "rope", NULL};
    static const char *const models[] = {"GPT", "BERT", NULL};
    static const char *const ckpt_types[] = {"meta", "hf", NULL};
    static const char *const sizes[] = {"llama2-7B", "llama2-13B", "llama2-70B", "llama2-7Bf",
                                        "llama2-13Bf", "llama2-70Bf", "llama3", "mistral", "yi-34B",
                                        "qwen2.5", NULL};
    c->loader = c->saver = "megatron";
    c->o.true_vocab_size = -1;
    c->o.make_vocab_size_divisible_by = -1;
    c->o.checking = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char opt[128];
        const char *val = NULL, *eq = strchr(a, '=');
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            c->help = true;
            continue;
        }
        if (!strcmp(a, "--no-checking")) {
            c->o.checking = false;
            continue;
        }
        if (!strcmp(a, "--bf16") || !strcmp(a, "--fp16")) {
            c->o.hf_params_dtype = a[2] == 'b' ? MC_DTYPE_BF16 : MC_DTYPE_F16;
            c->hf_only = a;
            continue;
        }
        if (strncmp(a, "--", 2))
            return die("unrecognized arguments: %s%s", a, "");
        snprintf(opt, sizeof(opt), "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
        val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val)
            return die("argument %s: expected one argument%s", opt, "");
        int64_t n = 0;
        int rc = 0;
        if (!strcmp(opt, "--model-type"))
            rc = choice(opt, val, models), c->model_type = val;
        else if (!strcmp(opt, "--loader"))
            c->loader = val;
        else if (!strcmp(opt, "--saver"))
            c->saver = val;
        else if (!strcmp(opt, "--load-dir"))
            c->o.load_dir = val;
        else if (!strcmp(opt, "--save-dir"))
            c->o.save_dir = val;
        else if (!strcmp(opt, "--max-queue-size") || !strcmp(opt, "--target-expert-parallel-size")) {
            rc = parse_int(opt, val, &n);
            if (!rc && n != 1 && opt[2] == 't')
                return die("%s %s: expert parallelism is not supported", opt, val);
        } else if (!strcmp(opt, "--true-vocab-size"))
            rc = parse_int(opt, val, &c->o.true_vocab_size);
        else if (!strcmp(opt, "--vocab-file"))
            c->o.vocab_file = val;
        else if (!strcmp(opt, "--make-vocab-size-divisible-by"))
            rc = parse_int(opt, val, &c->o.make_vocab_size_divisible_by);
        else if (!strcmp(opt, "--megatron-path"))
            ; /* no Python Megatron is imported */
        else if (!strcmp(opt, "--tokenizer-model"))
            c->o.tokenizer_model = val, c->hf_only = "--tokenizer-model";
        else if (!strcmp(opt, "--model-size"))
            rc = choice(opt, val, sizes), c->hf_only = "--model-size";
        else if (!strcmp(opt, "--checkpoint-type")) {
            rc = choice(opt, val, ckpt_types), c->hf_only = "--checkpoint-type";
            if (!rc && !strcmp(val, "meta"))
                return die("--checkpoint-type meta: Meta-format Llama checkpoints are not supported; "
                           "convert them to HuggingFace format first (transformers' "
                           "convert_llama_weights_to_hf.py)%s%s", "", "");
        }
        else if (!strcmp(opt, "--position-embedding-type"))
            rc = choice(opt, val, posemb);
        else if (!strcmp(opt, "--loader-transformer-impl"))
            rc = choice(opt, val, impls), c->o.loader_impl = val;
        else if (!strcmp(opt, "--saver-transformer-impl"))
            rc = choice(opt, val, impls), c->o.saver_impl = val;
        else if (!strcmp(opt, "--saver-ckpt-format")) {
            static const char *const formats[] = {"torch", "torch_dist", NULL};
            rc = choice(opt, val, formats);
            c->o.dist_saver = !strcmp(val, "torch_dist");
            c->saver_format = val;
        }
        else if (!strcmp(opt, "--target-tensor-parallel-size") ||
                 !strcmp(opt, "--target-pipeline-parallel-size")) {
            rc = parse_int(opt, val, &n);
            if (!rc && (n < 1 || n > 4096))
                return die("argument %s: must be a positive size, got %s", opt, val);
            *(strstr(opt, "tensor") ? &c->o.target_tp : &c->o.target_pp) = (int)n;
        } else
            return die("unrecognized arguments: %s%s", opt, "");
        if (rc)
            return rc;
    }
    return 0;
}

static int check_cli(struct cli *c)
{
    if (c->help)
        return 0;
    if (!c->model_type || !c->o.load_dir || !c->o.save_dir)
        return die("the following arguments are required: %s%s",
                   !c->model_type ? "--model-type" : !c->o.load_dir ? "--load-dir" : "--save-dir", "");
    if (strcmp(c->model_type, "GPT"))
        return die("--model-type %s: only GPT models are supported by megatron.c%s", c->model_type, "");
    c->loader = canonical(c->loader);
    c->saver = canonical(c->saver);
    if (strcmp(c->loader, "core") && strcmp(c->loader, "legacy") && strcmp(c->loader, "hf"))
        return die("Unable to load loader plugin %s (known: core/mcore, legacy/megatron, "
                   "hf/llama_mistral). Exiting.%s", c->loader, "");
    if (strcmp(c->saver, "core") && strcmp(c->saver, "legacy") && strcmp(c->saver, "hf"))
        return die("Unable to load saver plugin %s (known: core/mcore, legacy/megatron, hf). "
                   "Exiting.%s", c->saver, "");
    if (strcmp(c->loader, "hf") && c->hf_only)
        return die("unrecognized arguments: %s (an option of the hf / llama_mistral loader, not "
                   "of the %s loader)", c->hf_only, c->loader);
    if (strcmp(c->loader, "hf") && c->o.make_vocab_size_divisible_by >= 0)
        return die("unrecognized arguments: --make-vocab-size-divisible-by (an option of the hf / "
                   "llama_mistral loader; the %s loader takes it from the checkpoint's args)%s",
                   c->loader, "");
    c->o.legacy_saver = !strcmp(c->saver, "legacy");
    if (c->saver_format && !strcmp(c->saver, "hf"))
        return die("unrecognized arguments: --saver-ckpt-format (an option of the core and legacy "
                   "savers, not of the %s saver)%s", c->saver, "");
    if (c->o.dist_saver && c->o.legacy_saver) /* Megatron: use_dist_ckpt with use_legacy_models */
        return die("--saver-ckpt-format torch_dist with --saver %s: Megatron refuses distributed "
                   "checkpoints of legacy models ('--use-dist-ckpt is not supported in legacy "
                   "models.'); use --saver core%s", c->saver, "");
    if (!c->o.saver_impl) /* the defaults of saver_core.py / saver_legacy.py */
        c->o.saver_impl = c->o.legacy_saver ? "local" : "transformer_engine";
    return 0;
}

int main(int argc, char **argv)
{
    struct cli c;
    memset(&c, 0, sizeof(c));
    int rc = parse(&c, argc, argv);
    rc = rc ? rc : check_cli(&c);
    if (rc) {
        fprintf(stderr, "(convert_checkpoint --help lists the options)\n");
        return rc;
    }
    if (c.help) {
        usage(stdout);
        return 0;
    }
    c.o.log = stdout;
    struct mc_cv_model m;
    mc_cv_model_init(&m);
    mc_status st = !strcmp(c.loader, "hf") ? mc_cv_load_hf(&m, &c.o) : mc_cv_load_megatron(&m, &c.o);
    if (!st)
        st = !strcmp(c.saver, "hf") ? mc_cv_save_hf(&m, &c.o) : mc_cv_save_megatron(&m, &c.o);
    mc_cv_model_free(&m);
    if (st) {
        fprintf(stderr, "convert_checkpoint: %s: %s\n", mc_status_str(st), mc_last_error());
        return 1;
    }
    printf("Done!\n");
    return 0;
}
