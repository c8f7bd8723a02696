/* The command line both generation programs share (tools/generate.c,
 * tools/run_text_generation_server.c): --load, Megatron's tokenizer options and Megatron's
 * model options, as run_text_generation_server.py takes them through initialize_megatron. The
 * model is built from the checkpoint's saved arguments; model options given on the command
 * line are checked against them with check_checkpoint_args's message, options that do not
 * change the weights are accepted and have no effect; --tensor-model-parallel-size is the
 * mpirun world size (mc_inf_start_ranks), pipeline-parallel sizes above 1 are refused. */
#include "inference/inference.h"

#include <stdlib.h>
#include <string.h>

#include "checkpointing/torch_pickle.h"
#include "parallel_state/parallel_state.h"
#include "tools/checkpoint/convert.h"

/* Megatron options that do not change what is generated here (precision and kernel choices:
 * the forward is fp32; loading choices the loader makes itself), accepted for launch-script
 * compatibility. Value-taking ones, then flags. */
static const char *const ignored_values[] = {
    "--transformer-impl", "--micro-batch-size", "--global-batch-size", "--seq-length",
    "--distributed-backend", "--attention-dropout", "--hidden-dropout", "--init-method-std",
    "--make-vocab-size-divisible-by", "--rotary-base", "--rotary-percent", "--norm-epsilon",
    "--ckpt-format", "--max-tokens-to-oom", "--attention-backend", "--inference-batch-times-seqlen-threshold",
    "--max-batch-size", "--num-tokens-to-generate", NULL};
static const char *const ignored_flags[] = {
    "--use-mcore-models", "--no-load-optim", "--no-load-rng", "--bf16", "--fp16",
    "--exit-on-missing-checkpoint", "--use-checkpoint-args", "--attention-softmax-in-fp32",
    "--use-flash-attn", "--no-masked-softmax-fusion", "--no-bias-gelu-fusion",
    "--use-rotary-position-embeddings", "--use-rope-scaling", "--no-gradient-accumulation-fusion",
    "--use-legacy-models", "--no-async-tensor-model-parallel-allreduce", "--return-log-probs",
    NULL};

static bool in(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (!strcmp(*list, s))
            return true;
    return false;
}

static mc_status need_value(int argc, char **argv, int i)
{
    if (i + 1 >= argc)
        return mc_error(MC_ERR_CONFIG, "argument %s: expected one argument", argv[i]);
    return MC_OK;
}

static mc_status int_value(const char *opt, const char *s, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end)
        return mc_error(MC_ERR_CONFIG, "argument %s: invalid int value: '%s'", opt, s);
    *out = v;
    return MC_OK;
}

void mc_inf_cli_init(struct mc_inf_cli *c)
{
    memset(c, 0, sizeof(*c));
    c->tp = c->pp = 1;
    for (int k = 0; k < MC_INF_N_CHECKS; k++)
        c->check[k] = -1;
    c->vocab_size = -1;
    c->seed = 1234;
    c->inference_max_seq_length = 2560; /* Megatron's --inference-max-seq-length default */
}

static const char *const check_opts[MC_INF_N_CHECKS] = {
    "--num-layers", "--hidden-size", "--num-attention-heads", "--ffn-hidden-size",
    "--num-query-groups", "--kv-channels", "--max-position-embeddings"};
static const char *const check_names[MC_INF_N_CHECKS] = {
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "num_query_groups",
    "kv_channels", "max_position_embeddings"};

int mc_inf_cli_parse(struct mc_inf_cli *c, int argc, char **argv, int i, mc_status *st)
{
    const char *o = argv[i];
    const char **str = !strcmp(o, "--load") ? &c->load
                       : !strcmp(o, "--tokenizer-type") ? &c->tok.tokenizer_type
                       : !strcmp(o, "--vocab-file") ? &c->tok.vocab_file
                       : !strcmp(o, "--merge-file") ? &c->tok.merge_file
                       : !strcmp(o, "--tokenizer-model") ? &c->tok.tokenizer_model
                       : !strcmp(o, "--normalization") ? &c->normalization
                       : !strcmp(o, "--position-embedding-type") ? &c->position_embedding_type
                                                                 : NULL;
    *st = MC_OK;
    if (str || in(ignored_values, o)) {
        if ((*st = need_value(argc, argv, i)))
            return -1;
        if (str)
            *str = argv[i + 1];
        return 2;
    }
    int64_t *num = !strcmp(o, "--vocab-size") ? &c->vocab_size
                   : !strcmp(o, "--seed") ? &c->seed
                   : !strcmp(o, "--tensor-model-parallel-size") ? &c->tp
                   : !strcmp(o, "--pipeline-model-parallel-size") ? &c->pp
                   : !strcmp(o, "--inference-max-seq-length") ? &c->inference_max_seq_length
                                                              : NULL;
    for (int k = 0; !num && k < MC_INF_N_CHECKS; k++)
        if (!strcmp(o, check_opts[k]))
            num = &c->check[k];
    if (num) {
        if ((*st = need_value(argc, argv, i)) || (*st = int_value(o, argv[i + 1], num)))
            return -1;
        return 2;
    }
    bool *flag = !strcmp(o, "--swiglu") ? &c->swiglu
                 : !strcmp(o, "--untie-embeddings-and-output-weights") ? &c->untie
                 : !strcmp(o, "--disable-bias-linear") ? &c->disable_bias_linear
                 : !strcmp(o, "--group-query-attention") ? &c->group_query_attention
                                                         : NULL;
    if (flag) {
        *flag = true;
        return 1;
    }
    return in(ignored_flags, o) ? 1 : 0;
}

const char *mc_inf_cli_help(void)
{
    return
"checkpoint and model (Megatron's options; the model is built from the checkpoint's arguments):\n"
"  --load DIR            a Megatron checkpoint, --ckpt-format torch or torch_dist (megatron.c's\n"
"                        or Megatron's, any TP/PP layout), or a HuggingFace GPT-2 / Llama\n"
"                        directory\n"
"  --num-layers, --hidden-size, --num-attention-heads, --ffn-hidden-size, --num-query-groups,\n"
"  --kv-channels, --max-position-embeddings N, --normalization, --position-embedding-type X,\n"
"  --swiglu, --untie-embeddings-and-output-weights, --disable-bias-linear\n"
"                        checked against the checkpoint's arguments (an error when they differ)\n"
"  --tensor-model-parallel-size N\n"
"                        split the model over N ranks (mpirun -np N; Megatron's tensor\n"
"                        parallelism: each rank holds its shard); a checkpoint of any TP/PP\n"
"                        layout loads at any N that divides the heads, query groups and ffn\n"
"  --pipeline-model-parallel-size N\n"
"                        only 1 (pipeline-parallel generation is not implemented)\n"
"  --inference-max-seq-length N\n"
"                        longest prompt + generation (default 2560; with learned positions at\n"
"                        most --max-position-embeddings)\n"
"  --seed N              sampling seed (default 1234)\n"
"  Accepted without effect: --group-query-attention (--num-query-groups is checked)\n"
"  --use-mcore-models --transformer-impl --micro-batch-size --bf16\n"
"  --fp16 --no-load-optim --no-load-rng --use-checkpoint-args --exit-on-missing-checkpoint and\n"
"  other precision / kernel options (the forward is fp32; 16-bit weights are widened)\n"
"tokenizer (Megatron's options; default: the checkpoint's saved tokenizer arguments, or a\n"
"HuggingFace directory's tokenizer.json):\n"
"  --tokenizer-type {GPT2BPETokenizer,HuggingFaceTokenizer,SentencePieceTokenizer,\n"
"                    GPTSentencePieceTokenizer,Llama2Tokenizer,TikTokenizer,NullTokenizer}\n"
"  --vocab-file FILE --merge-file FILE --tokenizer-model PATH --vocab-size N\n";
}

/* check_checkpoint_args: a model option given on the command line must equal the saved one. */
static mc_status check_one(const char *name, int64_t given, int64_t saved)
{
    if (given < 0 || given == saved)
        return MC_OK;
    return mc_error(MC_ERR_CONFIG, "%s value from checkpoint (%lld) is not equal to the input "
                    "argument value (%lld).", name, (long long)saved, (long long)given);
}

static mc_status check_model(const struct mc_inf_cli *c, const struct mc_cv_meta *md)
{
    int64_t saved[MC_INF_N_CHECKS] = {md->num_layers, md->hidden_size, md->num_attention_heads,
                                      md->ffn_hidden_size, md->num_query_groups, md->kv_channels,
                                      md->max_position_embeddings};
    mc_status st = MC_OK;
    for (int k = 0; k < MC_INF_N_CHECKS && !st; k++)
        st = check_one(check_names[k], c->check[k], saved[k]);
    struct { bool given, saved; const char *name; } flags[] = {
        {c->swiglu, md->swiglu, "swiglu"},
        {c->untie, md->untied, "untie_embeddings_and_output_weights"},
        {c->disable_bias_linear, !md->linear_bias, "disable_bias_linear"},
    };
    for (size_t k = 0; k < sizeof(flags) / sizeof(flags[0]) && !st; k++)
        if (flags[k].given && !flags[k].saved)
            st = mc_error(MC_ERR_CONFIG, "--%s was given but the checkpoint was trained without "
                          "it (args.%s)", flags[k].name, flags[k].name);
    if (!st && c->normalization && strcmp(c->normalization, md->normalization))
        st = mc_error(MC_ERR_CONFIG, "normalization value from checkpoint (%s) is not equal to "
                      "the input argument value (%s).", md->normalization, c->normalization);
    if (!st && c->position_embedding_type &&
        strcmp(c->position_embedding_type, md->position_embedding_type))
        st = mc_error(MC_ERR_CONFIG, "position_embedding_type value from checkpoint (%s) is not "
                      "equal to the input argument value (%s).", md->position_embedding_type,
                      c->position_embedding_type);
    return st;
}

static const char *saved_str(const struct mc_cv_meta *md, const char *key)
{
    const struct mc_pk *v = md->checkpoint_args ? mc_pk_get(md->checkpoint_args, key) : NULL;
    return v && v->kind == MC_PK_STR ? v->s : NULL;
}

/* The tokenizer: the command line's, else the one the checkpoint names (its saved
 * tokenizer_type, vocab_file, merge_file, tokenizer_model, vocab_size), else a HuggingFace
 * directory's own tokenizer.json. */
static mc_status build_tokenizer(const struct mc_inf_cli *c, const struct mc_cv_model *cv,
                                 mc_tokenizer **out)
{
    struct mc_tokenizer_args a = c->tok;
    const struct mc_cv_meta *md = &cv->md;
    char hf_tok[4200];
    if (!a.tokenizer_type) {
        a.tokenizer_type = md->tokenizer_type[0] ? md->tokenizer_type : NULL;
        a.vocab_file = a.vocab_file ? a.vocab_file : saved_str(md, "vocab_file");
        a.merge_file = a.merge_file ? a.merge_file : saved_str(md, "merge_file");
        a.tokenizer_model = a.tokenizer_model ? a.tokenizer_model : saved_str(md, "tokenizer_model");
        if (a.tokenizer_type && !strcmp(a.tokenizer_type, "HuggingFaceTokenizer") &&
            !a.tokenizer_model) {
            snprintf(hf_tok, sizeof(hf_tok), "%s/tokenizer.json", c->load);
            a.tokenizer_model = hf_tok;
        }
        const struct mc_pk *vs = md->checkpoint_args ? mc_pk_get(md->checkpoint_args, "vocab_size") : NULL;
        if (c->vocab_size < 0 && vs && vs->kind == MC_PK_INT)
            a.vocab_size = vs->i;
    }
    if (c->vocab_size >= 0)
        a.vocab_size = c->vocab_size;
    if (!a.tokenizer_type)
        return mc_error(MC_ERR_CONFIG, "--load %s names no tokenizer: give --tokenizer-type (and "
                        "its files)", c->load);
    mc_status st = mc_tok_init(&a, out);
    if (st)
        return mc_error(st, "tokenizer %s: %s", a.tokenizer_type, mc_last_error());
    return MC_OK;
}

mc_status mc_inf_setup(const struct mc_inf_cli *c, FILE *log, struct mc_cv_model **cv,
                       mc_tokenizer **tok, bool *shard)
{
    *cv = NULL, *tok = NULL, *shard = false;
    if (c->pp > 1)
        return mc_error(MC_ERR_UNSUPPORTED, "--pipeline-model-parallel-size %lld: "
                        "pipeline-parallel generation is not implemented; run without it (a "
                        "checkpoint of any TP/PP layout loads, and --tensor-model-parallel-size N "
                        "under mpirun -np N splits the model over N ranks)", (long long)c->pp);
    if (!c->load)
        return mc_error(MC_ERR_CONFIG, "the following arguments are required: --load");
    struct mc_inf_load_options lo = {.load = c->load, .log = log, .tp = (int)c->tp,
                                      .tp_rank = c->tp_rank};
    mc_status st = mc_inf_load_checkpoint(&lo, cv);
    *shard = lo.shard;
    int64_t rows = !st ? mc_cv_get(*cv, "word embeddings")->shape[0] * (lo.shard ? c->tp : 1) : 0;
    if (!st && !(st = check_model(c, &(*cv)->md)))
        st = build_tokenizer(c, *cv, tok);
    if (!st && mc_tok_vocab_size(*tok) > rows)
        st = mc_error(MC_ERR_CONFIG, "the tokenizer has %lld tokens, the checkpoint's embedding "
                      "only %lld rows: not the tokenizer this model was trained with",
                      (long long)mc_tok_vocab_size(*tok), (long long)rows);
    if (st) {
        mc_tok_free(*tok);
        mc_inf_cv_free(*cv);
        *cv = NULL, *tok = NULL;
    }
    return st;
}

/* Under mpirun: the world is one tensor-parallel group of --tensor-model-parallel-size ranks
 * (generation has no data or pipeline parallelism), MPI started by comm.c. */
mc_status mc_inf_start_ranks(struct mc_inf_cli *c, int *argc, char ***argv, void **comm,
                             int *rank)
{
    *comm = NULL, *rank = 0;
    const char *ws = mc_launch_env(MC_LAUNCH_WORLD_SIZE, NULL);
    int64_t world = ws ? strtoll(ws, NULL, 10) : 1;
    if (world > 1 || c->tp > 1) {
        mc_status st = mc_comm_init(argc, argv, world > 1 ? world : 1, comm);
        int size = 1;
        if (st || (st = mc_comm_size_rank(*comm, &size, rank)))
            return st;
        world = size;
        c->tp_rank = *rank;
    }
    if (c->tp < 1)
        return mc_error(MC_ERR_CONFIG, "--tensor-model-parallel-size %lld: must be at least 1",
                        (long long)c->tp);
    if (world != c->tp)
        return mc_error(MC_ERR_CONFIG, "--tensor-model-parallel-size %lld with %lld processes: "
                        "generation runs one tensor-parallel group, start it with mpirun -np %lld "
                        "(data- and pipeline-parallel generation are not implemented)",
                        (long long)c->tp, (long long)world, (long long)c->tp);
    return MC_OK;
}

/* Whether every rank got this far (collective): each rank's own status, or MC_ERR_CONFIG
 * "another rank failed" where only others failed, so all stop together instead of waiting in
 * the first collective of the generation. */
mc_status mc_inf_agree(void *comm, mc_status st)
{
    int32_t bad = st != MC_OK;
    if (!comm)
        return st;
    mc_status cs = mc_comm_all_reduce(comm, &bad, 1, MC_DTYPE_I32, MC_COMM_MAX, "setup check");
    if (cs)
        return cs;
    if (!st && bad)
        return mc_error(MC_ERR_CONFIG, "another rank failed to set up (its message above)");
    return st;
}
