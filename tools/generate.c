/* generate: text from a checkpoint megatron.c can load, on the command line. The counterpart of
 * Megatron-LM's examples/inference/gpt/gpt_static_inference.py (the static engine of
 * megatron/core/inference, core_v0.12.1) with Megatron's checkpoint, model and tokenizer
 * options. Library: src/inference/.
 *
 *   generate --load CKPT --prompt "Once upon a time" --max-tokens 32 --greedy
 *   mpirun -np 2 generate --load CKPT --tensor-model-parallel-size 2 --prompt "Hello"
 *
 * Under mpirun every rank of the tensor-parallel group reads the same command line and prompts
 * and runs the same steps on its shard; rank 0 samples, broadcasts the tokens and prints.
 *
 * Exit statuses: 2 for command-line errors, 1 for failures (a message naming the file or option
 * on stderr), 0 otherwise. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/json.h"
#include "inference/inference.h"
#include "parallel_state/parallel_state.h"
#include "tools/checkpoint/convert.h"

struct opts {
    struct mc_inf_cli cli;
    void *comm; /* the tensor-parallel group (NULL: one process) */
    int rank;
    const char **prompts;
    int64_t n_prompts, cap_prompts;
    const char *prompts_file, *dump_logits, *output_format;
    int64_t max_tokens;
    bool greedy, no_kv_cache, add_bos, logprobs, warmup, help;
    float temperature, top_p;
    int64_t top_k;
};

static void usage(FILE *f)
{
    fprintf(f,
"usage: generate --load DIR (--prompt TEXT ... | --prompts-file FILE) [--max-tokens N]\n"
"                [--greedy | --temperature T --top-k K --top-p P] [--seed N] [--add-BOS]\n"
"                [--logprobs] [--no-kv-cache] [--output-format {text,json}] [--warmup]\n"
"                [--dump-logits FILE.npy] [Megatron's model and tokenizer options]\n");
}

static void help(void)
{
    usage(stdout);
    printf(
"\nGenerates text from a checkpoint (megatron.c's or Megatron's, --ckpt-format torch or\n"
"torch_dist at any TP/PP layout, or a HuggingFace GPT-2 / Llama directory), fp32, with a KV\n"
"cache; all prompts run as one batch. Generation stops at the tokenizer's end-of-document\n"
"token or after --max-tokens.\n"
"\ngeneration:\n"
"  --prompt TEXT         a prompt (repeat for a batch); --prompts TEXT... as Megatron's\n"
"  --prompts-file FILE   one prompt per line (a JSONL line {\"prompt\": ...} or {\"text\": ...}\n"
"                        is read as that string)\n"
"  --max-tokens N        tokens to generate per prompt (Megatron: tokens_to_generate;\n"
"                        --num-tokens-to-generate is the same option); default 30\n"
"  --greedy              argmax (Megatron: top_k 1); the default when no sampling option is\n"
"                        given\n"
"  --temperature T       divide the logits by T (> 0, default 1.0)\n"
"  --top-k K             sample among the K most likely tokens (0 = all; also --top_k)\n"
"  --top-p P             sample among the smallest set of tokens whose probability passes P\n"
"                        (not with --top-k; also --top_p)\n"
"  --seed N              the sampling stream (default 1234): same seed, same tokens\n"
"  --add-BOS             prepend the end-of-document token to every prompt (Megatron's add_BOS)\n"
"  --logprobs            print the log probability of every prompt and generated token\n"
"  --no-kv-cache         recompute every sequence from its start at each step (a check: the\n"
"                        tokens are the same)\n"
"  --output-format F     text (default: each prompt + its generation) or json (one object per\n"
"                        prompt: text, prompt and generated token ids, log probs)\n"
"  --dump-logits FILE    write the logits of every token of the first prompt, fp32 [n, vocab]\n"
"                        (.npy), for comparisons\n"
"  --warmup              run the whole generation once untimed first (for benchmarks: the\n"
"                        GEMM library picks its kernels on first use)\n"
"\nThe prefill and decode speed (tokens/s) goes to stderr.\n"
"\nTensor parallel: mpirun -np N generate --tensor-model-parallel-size N ... splits the model\n"
"over N ranks as Megatron does (each holds its shard); the tokens are the one-process ones.\n\n%s",
mc_inf_cli_help());
}

static int bad(const char *prog, const char *msg)
{
    usage(stderr);
    fprintf(stderr, "%s: error: %s\n", prog, msg);
    return 2;
}

static int add_prompt(struct opts *o, const char *p)
{
    if (o->n_prompts == o->cap_prompts) {
        int64_t cap = o->cap_prompts ? 2 * o->cap_prompts : 8;
        const char **n = realloc(o->prompts, sizeof(*n) * (size_t)cap);
        if (!n)
            return -1;
        o->prompts = n, o->cap_prompts = cap;
    }
    o->prompts[o->n_prompts++] = p;
    return 0;
}

static int parse(struct opts *o, int argc, char **argv)
{
    char msg[600];
    bool sampling = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* the spellings of Megatron's run_text_generation_server.py offline mode */
        a = !strcmp(a, "--num-tokens-to-generate") ? "--max-tokens"
            : !strcmp(a, "--top_k") ? "--top-k" : !strcmp(a, "--top_p") ? "--top-p" : a;
        if (!strcmp(a, "--prompts")) { /* nargs='+' */
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
                return bad("generate", "argument --prompts: expected at least one argument");
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
                if (add_prompt(o, argv[++i]))
                    return bad("generate", "out of memory");
            continue;
        }
        mc_status st;
        int used = a != argv[i] ? 0 : mc_inf_cli_parse(&o->cli, argc, argv, i, &st);
        if (used < 0)
            return bad("generate", mc_last_error());
        if (used > 0) {
            i += used - 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = true;
            return 0;
        }
        bool *flag = !strcmp(a, "--greedy") ? &o->greedy : !strcmp(a, "--no-kv-cache") ? &o->no_kv_cache
                     : !strcmp(a, "--add-BOS") ? &o->add_bos : !strcmp(a, "--logprobs") ? &o->logprobs
                     : !strcmp(a, "--warmup") ? &o->warmup : NULL;
        if (flag) {
            *flag = true;
            continue;
        }
        if (i + 1 >= argc) {
            snprintf(msg, sizeof(msg), "unrecognized arguments: %s", a);
            if (!strncmp(a, "--", 2) && (!strcmp(a, "--prompt") || !strcmp(a, "--max-tokens") ||
                                         !strcmp(a, "--temperature") || !strcmp(a, "--top-k") ||
                                         !strcmp(a, "--top-p") || !strcmp(a, "--prompts-file")))
                snprintf(msg, sizeof(msg), "argument %s: expected one argument", a);
            return bad("generate", msg);
        }
        const char *v = argv[++i];
        char *end;
        errno = 0;
        if (!strcmp(a, "--prompt")) {
            if (add_prompt(o, v))
                return bad("generate", "out of memory");
        } else if (!strcmp(a, "--prompts-file")) {
            o->prompts_file = v;
        } else if (!strcmp(a, "--dump-logits")) {
            o->dump_logits = v;
        } else if (!strcmp(a, "--output-format")) {
            if (strcmp(v, "text") && strcmp(v, "json")) {
                snprintf(msg, sizeof(msg), "argument --output-format: invalid choice: '%s' "
                         "(choose from 'text', 'json')", v);
                return bad("generate", msg);
            }
            o->output_format = v;
        } else if (!strcmp(a, "--max-tokens") || !strcmp(a, "--tokens-to-generate") ||
                   !strcmp(a, "--top-k")) {
            long long x = strtoll(v, &end, 10);
            if (!*v || *end || x < 0) {
                snprintf(msg, sizeof(msg), "argument %s: expected an integer >= 0, got '%s'", a, v);
                return bad("generate", msg);
            }
            if (!strcmp(a, "--top-k"))
                o->top_k = x, sampling = true;
            else
                o->max_tokens = x;
        } else if (!strcmp(a, "--temperature") || !strcmp(a, "--top-p")) {
            float x = strtof(v, &end);
            if (!*v || *end) {
                snprintf(msg, sizeof(msg), "argument %s: invalid float value: '%s'", a, v);
                return bad("generate", msg);
            }
            *(!strcmp(a, "--top-p") ? &o->top_p : &o->temperature) = x;
            sampling = true;
        } else {
            snprintf(msg, sizeof(msg), "unrecognized arguments: %s", a);
            return bad("generate", msg);
        }
    }
    if (o->greedy && sampling)
        return bad("generate", "--greedy with --temperature / --top-k / --top-p: choose one");
    if (!sampling || o->top_k == 1) /* Megatron: top_k == 1 is the argmax */
        o->greedy = true;
    if (!o->help && !o->cli.load)
        return bad("generate", "the following arguments are required: --load");
    if (!o->help && !o->n_prompts && !o->prompts_file)
        return bad("generate", "give --prompt TEXT or --prompts-file FILE");
    return 0;
}

#define MAX_JSON_LINES 4096

/* --prompts-file: one prompt a line; JSONL lines with "prompt" or "text" give that string. The
 * lines stay in *buf (and the parsed strings in *doc) until the end. */
static mc_status read_prompts(struct opts *o, char **buf, mc_json_doc **docs, int64_t *n_docs)
{
    FILE *f = fopen(o->prompts_file, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "--prompts-file %s: %s", o->prompts_file, strerror(errno));
    size_t cap = 0;
    char *line = NULL;
    ssize_t k;
    int64_t lineno = 0;
    mc_status st = MC_OK;
    *buf = NULL;
    while ((k = getline(&line, &cap, f)) >= 0 && !st) {
        lineno++;
        while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r'))
            line[--k] = 0;
        if (k == 0)
            continue;
        char *p = strdup(line);
        if (!p) {
            st = MC_ERR_NOMEM;
            break;
        }
        if (p[0] == '{' && *n_docs >= MAX_JSON_LINES) {
            free(p);
            st = mc_error(MC_ERR_CONFIG, "--prompts-file %s: at most %d JSON lines",
                          o->prompts_file, MAX_JSON_LINES);
            break;
        }
        if (p[0] == '{') {
            if ((st = mc_json_doc_init(&docs[*n_docs]))) {
                free(p);
                break;
            }
            mc_json_doc *d = docs[(*n_docs)++]; /* freed by main, parsed or not */
            st = mc_json_doc_parse(d, p, (size_t)k, o->prompts_file, lineno);
            free(p);
            if (st)
                break;
            const struct mc_json *r = mc_json_doc_root(d);
            const struct mc_json *t = mc_json_get(r, "prompt");
            t = t ? t : mc_json_get(r, "text");
            if (!t || t->type != MC_JSON_STRING) {
                st = mc_error(MC_ERR_FORMAT, "%s:%lld: a JSON line needs a \"prompt\" or \"text\" "
                              "string", o->prompts_file, (long long)lineno);
                break;
            }
            if (add_prompt(o, t->str))
                st = MC_ERR_NOMEM;
        } else if (add_prompt(o, p)) {
            st = MC_ERR_NOMEM;
        }
    }
    free(line);
    fclose(f);
    return st;
}

/* fp32 [n, v] as a .npy file (format 1.0), written through a temporary name. */
static mc_status write_npy(const char *path, const float *x, int64_t n, int64_t v)
{
    char tmp[4200], hdr[128];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int len = snprintf(hdr, sizeof(hdr), "{'descr': '<f4', 'fortran_order': False, 'shape': "
                       "(%lld, %lld), }", (long long)n, (long long)v);
    int total = (10 + len + 1 + 63) / 64 * 64;
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return mc_error(MC_ERR_IO, "--dump-logits %s: %s", path, strerror(errno));
    unsigned short hl = (unsigned short)(total - 10);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hl, 2, 1, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 10 + len; i < total - 1; i++)
        fputc(' ', f);
    fputc('\n', f);
    size_t w = fwrite(x, sizeof(float), (size_t)(n * v), f);
    if (fclose(f) || w != (size_t)(n * v) || rename(tmp, path)) {
        remove(tmp);
        return mc_error(MC_ERR_IO, "--dump-logits %s: write failed", path);
    }
    return MC_OK;
}

static mc_status dump_logits(mc_inf_model *m, const struct mc_inf_request *r, const char *path)
{
    int64_t V = mc_inf_model_config(m)->padded_vocab_size;
    mc_inf_cache *c = NULL;
    float *x = mc_alloc(sizeof(float) * (size_t)(r->n_prompt * V));
    int64_t *rows = mc_calloc((size_t)r->n_prompt, sizeof(int64_t));
    mc_status st = !x || !rows ? MC_ERR_NOMEM : mc_inf_cache_init(m, 1, r->n_prompt, &c);
    if (!st)
        st = mc_inf_forward(m, c, r->n_prompt, r->prompt, rows, NULL, x);
    if (!st && mc_inf_model_tp_rank(m) == 0)
        st = write_npy(path, x, r->n_prompt, V);
    mc_inf_cache_free(c);
    mc_free(rows);
    mc_free(x);
    return st;
}

static void print_ids(const int64_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        printf("%s%lld", i ? ", " : "", (long long)ids[i]);
}

static mc_status print_json(const struct mc_inf_request *r, const char *text, size_t len,
                            bool logprobs)
{
    struct mc_json_buf b = {0};
    mc_status st = mc_json_buf_append(&b, "{\"text\": ", 9);
    st = st ? st : mc_json_write_string(&b, text, len, true);
    if (st) {
        mc_free(b.data);
        return st;
    }
    printf("%s, \"prompt_tokens\": [", b.data);
    print_ids(r->prompt, r->n_prompt);
    printf("], \"generated_tokens\": [");
    print_ids(r->generated, r->n_generated);
    printf("], \"stopped_at_eod\": %s", r->stopped_at_eod ? "true" : "false");
    if (logprobs) {
        b.len = 0;
        for (int64_t i = 0; i + 1 < r->n_prompt + r->n_generated && !st; i++) {
            float v = i + 1 < r->n_prompt ? r->prompt_logprobs[i]
                                          : r->generated_logprobs[i + 1 - r->n_prompt];
            if (i)
                st = mc_json_buf_append(&b, ", ", 2);
            st = st ? st : mc_json_write_double(&b, (double)v);
        }
        printf(", \"logprobs\": [%s]", b.len ? b.data : "");
    }
    printf("}\n");
    mc_free(b.data);
    return st;
}

static mc_status run(struct opts *o, bool *setup_done)
{
    struct mc_cv_model *cv = NULL;
    mc_tokenizer *tok = NULL;
    struct mc_backend *be = NULL;
    mc_inf_model *m = NULL;
    int64_t n = o->n_prompts;
    struct mc_inf_request *req = mc_calloc((size_t)(n ? n : 1), sizeof(*req));
    struct mc_tokens *ids = mc_calloc((size_t)(n ? n : 1), sizeof(*ids));
    FILE *log = o->rank == 0 ? stderr : NULL; /* the loader's lines once */
    bool shard = false; /* cv holds this rank's shards only */
    mc_status st = !req || !ids ? MC_ERR_NOMEM : mc_inf_setup(&o->cli, log, &cv, &tok, &shard);
    const char *be_name = getenv("MC_BACKEND");
    if (!st)
        st = mc_backend_create(be_name && *be_name ? be_name : NULL, &be);
    int64_t eod = tok ? mc_tok_eod(tok) : -1, longest = 0;
    for (int64_t r = 0; r < n && !st; r++) {
        if (o->add_bos) {
            if (eod < 0) {
                st = mc_error(MC_ERR_CONFIG, "--add-BOS: the tokenizer has no end-of-document "
                              "token to use as BOS");
                break;
            }
            struct mc_tokens *t = &ids[r];
            t->data = mc_alloc(sizeof(int64_t) * 16);
            if (!t->data) {
                st = MC_ERR_NOMEM;
                break;
            }
            t->cap = 16, t->len = 1, t->data[0] = eod;
        }
        if (!o->prompts[r][0] && !o->add_bos) { /* Megatron's check, on the text */
            st = mc_error(MC_ERR_CONFIG, "prompt %lld is empty: Empty prompts require add_BOS "
                          "(--add-BOS)", (long long)r);
            break;
        }
        if (o->prompts[r][0])
            st = mc_tok_encode(tok, o->prompts[r], strlen(o->prompts[r]), &ids[r]);
        if (!st && ids[r].len == 0)
            st = mc_error(MC_ERR_CONFIG, "prompt %lld is empty: Empty prompts require add_BOS "
                          "(--add-BOS)", (long long)r);
        req[r].prompt = ids[r].data, req[r].n_prompt = ids[r].len;
        longest = ids[r].len > longest ? ids[r].len : longest;
    }
    if (!st)
        st = mc_inf_model_init_shard(cv, shard, be, longest + o->max_tokens, o->comm, &m);
    mc_inf_cv_free(cv); /* this rank's shard is in m */
    cv = NULL;
    st = mc_inf_agree(o->comm, st);
    *setup_done = !st;
    if (!st && o->dump_logits)
        st = dump_logits(m, &req[0], o->dump_logits);
    struct mc_inf_generate_options g = {
        .sampling = {.greedy = o->greedy, .temperature = o->temperature, .top_k = o->top_k,
                     .top_p = o->top_p, .seed = (uint64_t)o->cli.seed},
        .tokens_to_generate = o->max_tokens,
        .eod = eod,
        .vocab_size = tok ? mc_tok_vocab_size(tok) : 0,
        .logprobs = o->logprobs,
        .no_kv_cache = o->no_kv_cache,
    };
    if (!st && o->warmup && !(st = mc_inf_generate(m, &g, req, n)))
        mc_inf_requests_free(req, n);
    if (!st)
        st = mc_inf_generate(m, &g, req, n);
    bool json = o->output_format && !strcmp(o->output_format, "json");
    for (int64_t r = 0; r < n && !st && o->rank == 0; r++) {
        /* Megatron's server returns the prompt and its generation detokenized together */
        int64_t all_n = req[r].n_prompt + req[r].n_generated;
        int64_t *all = mc_alloc(sizeof(int64_t) * (size_t)all_n);
        char *text = NULL;
        size_t len = 0;
        if (!all) {
            st = MC_ERR_NOMEM;
            break;
        }
        memcpy(all, req[r].prompt, sizeof(int64_t) * (size_t)req[r].n_prompt);
        memcpy(all + req[r].n_prompt, req[r].generated, sizeof(int64_t) * (size_t)req[r].n_generated);
        st = mc_tok_decode(tok, all, all_n, &text, &len);
        if (!st && json)
            st = print_json(&req[r], text, len, o->logprobs);
        else if (!st) {
            fwrite(text, 1, len, stdout);
            fputs("\n", stdout);
            if (o->logprobs) {
                printf("logprobs:");
                for (int64_t i = 0; i + 1 < req[r].n_prompt; i++)
                    printf(" %.6g", req[r].prompt_logprobs[i]);
                for (int64_t i = 0; i < req[r].n_generated; i++)
                    printf(" %.6g", req[r].generated_logprobs[i]);
                printf("\n");
            }
            if (r + 1 < n)
                printf("\n");
        }
        mc_free(text);
        mc_free(all);
    }
    fflush(stdout);
    if (!st && o->rank == 0)
        fprintf(stderr, "generate: prefill %lld tokens in %.3f s (%.1f tokens/s), decode %lld "
                "tokens in %.3f s (%.1f tokens/s), %d threads%s\n", (long long)g.prefill_tokens,
                g.prefill_s, g.prefill_s > 0 ? (double)g.prefill_tokens / g.prefill_s : 0.0,
                (long long)g.decode_tokens, g.decode_s,
                g.decode_s > 0 ? (double)g.decode_tokens / g.decode_s : 0.0, be->n_threads,
                o->no_kv_cache ? ", no KV cache" : "");
    if (!st && o->rank == 0 && mc_inf_model_tp_size(m) > 1)
        fprintf(stderr, "generate: tensor-parallel size %d\n", mc_inf_model_tp_size(m));
    mc_inf_requests_free(req, n);
    for (int64_t r = 0; ids && r < n; r++)
        mc_free(ids[r].data);
    mc_free(ids);
    mc_free(req);
    mc_inf_model_free(m);
    mc_backend_free(be);
    mc_tok_free(tok);
    mc_inf_cv_free(cv);
    return st;
}

int main(int argc, char **argv)
{
    struct opts o = {.max_tokens = 30, .temperature = 1.0f};
    mc_inf_cli_init(&o.cli);
    int rc = parse(&o, argc, argv);
    if (rc || o.help) {
        if (o.help)
            help();
        free(o.prompts);
        return rc;
    }
    char *buf = NULL;
    static mc_json_doc *docs[MAX_JSON_LINES];
    int64_t n_docs = 0;
    mc_status st = mc_inf_start_ranks(&o.cli, &argc, &argv, &o.comm, &o.rank);
    bool setup_done = false; /* past the point where every rank agreed: a failure aborts all */
    bool started = !st;
    if (!st)
        st = o.prompts_file ? read_prompts(&o, &buf, docs, &n_docs) : MC_OK;
    if (!st)
        st = run(&o, &setup_done);
    else if (started) /* the other ranks wait for this one's setup check in run() */
        mc_inf_agree(o.comm, st);
    if (st && o.comm)
        fprintf(stderr, "generate: rank %d: %s\n", o.rank,
                mc_last_error()[0] ? mc_last_error() : mc_status_str(st));
    else if (st)
        fprintf(stderr, "generate: %s\n", mc_last_error()[0] ? mc_last_error() : mc_status_str(st));
    if (st && o.comm && setup_done) { /* the others may be waiting in a collective for this one */
        fflush(stderr);
        mc_comm_abort(1);
    }
    mc_comm_finalize();
    for (int64_t i = 0; i < n_docs; i++)
        mc_json_doc_free(docs[i]);
    /* plain-line prompts were strdup'ed: they live until exit (freed by the OS) */
    free(buf);
    free(o.prompts);
    return st ? 1 : 0;
}
