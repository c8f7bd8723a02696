/* --dry-run: the start-up report of pretrain_gpt without MPI, data or model. Follows the order of
 * Megatron's initialize_megatron -> set_global_variables (micro-batch calculator, tokenizer
 * padding: megatron/training/global_vars.py, tokenizer/tokenizer.py) and adds what Megatron
 * prints only after the first logged iteration: report_theoretical_memory
 * (theoretical_memory_usage.py) and num_floating_point_operations (training.py). */
#include "training/dry_run.h"

#include <stdlib.h>
#include <string.h>

#include "megatron/tokenizer.h"
#include "megatron/transformer_config.h"
#include "training/flops.h"
#include "training/log_format.h"
#include "training/microbatches.h"
#include "training/model_config.h"
#include "training/recompute_budget.h"
#include "training/refusals.h"
#include "optimizer/lr_scheduler.h"
#include "training/schedule_args.h"
#include "training/theoretical_memory.h"
#include "training/training.h"

int64_t mc_vocab_padded(int64_t orig, int64_t divisible_by, int64_t tp)
{
    return mc_tok_padded_vocab_size(orig, divisible_by, tp);
}

static mc_status fail(struct mc_args *a, const char *kind);

static bool is_pretrained_from_hf(const struct mc_args *a)
{
    const char *t = mc_args_str(a, MC_A_tokenizer_type);
    return t && !strcmp(t, "PretrainedFromHF");
}

void mc_tokenizer_args_from(const struct mc_args *a, struct mc_tokenizer_args *ta)
{
    *ta = (struct mc_tokenizer_args){
        .tokenizer_type = mc_args_str(a, MC_A_tokenizer_type),
        .vocab_file = mc_args_str(a, MC_A_vocab_file),
        .merge_file = mc_args_str(a, MC_A_merge_file),
        .tokenizer_model = mc_args_str(a, is_pretrained_from_hf(a) ? MC_A_tokenizer_name_or_path
                                                                   : MC_A_tokenizer_model),
        .vocab_size = mc_args_is_none(a, MC_A_vocab_size) ? 0 : mc_args_int(a, MC_A_vocab_size),
    };
}

void mc_tokenizer_print_building(FILE *f, const struct mc_args *a)
{
    if (!f || !mc_args_str(a, MC_A_tokenizer_type))
        return;
    if (is_pretrained_from_hf(a)) /* mindspeed_llm/training/tokenizer/tokenizer.py */
        fprintf(f, " > building PretrainFromHF tokenizer. Vocab file is un-used, loading "
                   "tokenizer from pre-trained model\n");
    else
        fprintf(f, "> building %s tokenizer ...\n", mc_args_str(a, MC_A_tokenizer_type));
}

mc_status mc_vocab_padded_from_args(const struct mc_args *a, int64_t orig, FILE *f,
                                    int64_t *out)
{
    int64_t tp = mc_args_int(a, MC_A_tensor_model_parallel_size);
    if (mc_args_is_none(a, MC_A_padded_vocab_size)) {
        *out = mc_vocab_padded(orig, mc_args_int(a, MC_A_make_vocab_size_divisible_by), tp);
        if (f)
            fprintf(f, " > padded vocab (size: %lld) with %lld dummy tokens (new size: %lld)\n",
                    (long long)orig, (long long)(*out - orig), (long long)*out);
        return MC_OK;
    }
    int64_t p = mc_args_int(a, MC_A_padded_vocab_size);
    /* MindSpeed-LLM checks neither; a smaller table fails at the first large token id and an
     * uneven split at VocabParallelEmbedding's divide(): both are reported here instead. */
    if (p < orig)
        return mc_error(MC_ERR_CONFIG, "--padded-vocab-size %lld is smaller than the "
                        "tokenizer's vocabulary (%lld tokens)", (long long)p, (long long)orig);
    if (p % tp)
        return mc_error(MC_ERR_CONFIG, "--padded-vocab-size %lld is not divisible by "
                        "--tensor-model-parallel-size %lld (each rank holds an equal slice of "
                        "the vocabulary)", (long long)p, (long long)tp);
    *out = p;
    return MC_OK;
}

/* Entries of a GPT-2 vocab.json (top-level "key": value pairs): the fallback when the
 * tokenizer cannot be built (e.g. no merges file). */
static int64_t count_json_entries(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    int64_t n = 0;
    int c, depth = 0;
    bool in_str = false, esc = false;
    while ((c = fgetc(f)) != EOF) {
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
        else if (c == ':' && depth == 1) n++;
    }
    fclose(f);
    return n;
}

int64_t mc_dry_run_vocab_size(const struct mc_args *a, bool *assumed)
{
    const char *t = mc_args_str(a, MC_A_tokenizer_type);
    *assumed = false;
    /* Build the real tokenizer when its files are there: its size is Megatron's. */
    struct mc_tokenizer_args ta;
    mc_tokenizer_args_from(a, &ta);
    mc_tokenizer *tok = NULL;
    if (t && mc_tok_init(&ta, &tok) == MC_OK) {
        int64_t n = mc_tok_vocab_size(tok);
        mc_tok_free(tok);
        return n;
    }
    mc_clear_error();
    if (t && !strcmp(t, "NullTokenizer"))
        return mc_args_is_none(a, MC_A_vocab_size) ? -1 : mc_args_int(a, MC_A_vocab_size) + 1;
    if (t && !strcmp(t, "GPT2BPETokenizer")) {
        const char *vf = mc_args_str(a, MC_A_vocab_file);
        int64_t n = vf ? count_json_entries(vf) : -1;
        if (n > 0)
            return n;
        *assumed = true;
        return 50257;
    }
    return -1;
}

static mc_status fail(struct mc_args *a, const char *kind)
{
    snprintf(a->err, sizeof(a->err), "%s", strchr(mc_last_error(), ' ') ? strchr(mc_last_error(), ' ') + 1 : mc_last_error());
    a->err_kind = kind;
    a->exit_code = 1;
    return MC_ERR_CONFIG;
}

/* The refusal list a real run stops on (refusals.c), every entry, in the run's report. */
static void list_refused(const struct mc_args *a, FILE *out)
{
    static struct mc_refusals r;
    mc_args_refusals(a, &r);
    for (int k = 0; k < r.kept; k++)
        fprintf(out, "megatron.c: a real run would stop here: %s\n", r.msg[k]);
    if (r.n > r.kept)
        fprintf(out, "megatron.c: a real run would stop here: ... and %d more\n", r.n - r.kept);
}

/* initialize_megatron after set_global_variables: logging level, distributed and model-parallel
 * initialization (announced only: the dry run starts no MPI), the seed. */
static mc_status initialize(struct mc_args *a, FILE *out, int *log_level)
{
    const char *env = getenv("MEGATRON_LOGGING_LEVEL");
    bool set = false;
    if (env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (end == env || *end) {
            snprintf(a->err, sizeof(a->err), "invalid literal for int() with base 10: '%s'", env);
            a->err_kind = "ValueError";
            a->exit_code = 1;
            return MC_ERR_CONFIG;
        }
        *log_level = (int)v;
        set = true;
    }
    if (!mc_args_is_none(a, MC_A_logging_level)) {
        *log_level = (int)mc_args_int(a, MC_A_logging_level);
        set = true;
    }
    if (out && set) /* logged before the new level takes effect */
        fprintf(out, "INFO:megatron.training.initialize:Setting logging level to %d\n", *log_level);
    if (out) {
        fprintf(out, "> initializing torch distributed ...\n");
        fprintf(out, "> initialized tensor model parallel with size %lld\n",
                (long long)mc_args_int(a, MC_A_tensor_model_parallel_size));
        fprintf(out, "> initialized pipeline model parallel with size %lld\n",
                (long long)mc_args_int(a, MC_A_pipeline_model_parallel_size));
        fprintf(out, "> setting random seeds to %lld ...\n", (long long)mc_args_int(a, MC_A_seed));
    }
    if (mc_args_int(a, MC_A_seed) <= 0) {
        snprintf(a->err, sizeof(a->err), "Seed (%lld) should be a positive integer.",
                 (long long)mc_args_int(a, MC_A_seed));
        a->err_kind = "ValueError";
        a->exit_code = 1;
        return MC_ERR_CONFIG;
    }
    return MC_OK;
}

/* get_optimizer_param_scheduler: Megatron builds it after the model (its messages come later
 * in a real run's log). Derives train_iters for sample-based runs. */
static mc_status scheduler(struct mc_args *a, struct mc_microbatches *mb, FILE *out)
{
    struct mc_opt_sched_config c;
    struct mc_opt_sched s;
    memset(&c, 0, sizeof(c));
    bool by_iters = mc_args_truthy(a, MC_A_train_iters);
    if (!by_iters && !mc_args_truthy(a, MC_A_train_samples)) {
        mc_opt_sched_config_from_args(a, mb, out, &c);
        return fail(a, "Exception");
    }
    if (mc_opt_sched_config_from_args(a, mb, out, &c) != MC_OK)
        return fail(a, "TypeError");
    if (mc_opt_sched_init(&s, &c, out) != MC_OK)
        return fail(a, "AssertionError");
    return MC_OK;
}

/* What activation recompute does and what the first pipeline stage keeps in megatron.c's
 * layout (the model's own count, mc_gpt_config_activation_bytes; ours, not Megatron's). */
static void dry_run_activations(const struct mc_args *a, int64_t vocab, int64_t padded,
                                FILE *out)
{
    struct mc_gpt_config c;
    size_t shared = 0, per = 0;
    int64_t pp = mc_args_int(a, MC_A_pipeline_model_parallel_size);
    bool vpp = !mc_args_is_none(a, MC_A_virtual_pipeline_model_parallel_size);
    int64_t vp = vpp ? mc_args_int(a, MC_A_virtual_pipeline_model_parallel_size) : 1;
    if (mc_gpt_config_from_args(a, vocab, padded, 0, &c) != MC_OK) {
        fprintf(out, "megatron.c dry run: %s\n", mc_last_error());
        return;
    }
    c.pipeline_model_parallel_size = (int)pp;
    c.virtual_pipeline_model_parallel_size = vpp ? (int)vp : 0;
    char what[512];
    int64_t layers, offset;
    mc_gpt_stage_layers(&c, 0, 0, &layers, &offset);
    const char *why;
    bool flash = mc_attention_from_args(a, &why);
    fprintf(out, "megatron.c dry run: attention: %s (%s)\n", flash ? "flash attention, no "
            "[b, heads, s, s] probabilities kept" : "unfused DotProductAttention, keeping the "
            "[b, heads, s, s] probabilities", why);
    mc_recompute_describe(&c, layers, what, sizeof(what));
    fprintf(out, "megatron.c dry run: activation recompute: %s\n", what);
    if (c.sliding_window)
        fprintf(out, "megatron.c dry run: sliding-window attention: each query sees itself and "
                     "the %lld keys before it%s\n", (long long)c.sliding_window,
                c.seq_length - 1 <= c.sliding_window ? " (all of a sequence's: plain causal "
                                                       "attention)" : "");
    if (c.alibi)
        fprintf(out, "megatron.c dry run: ALiBi attention (MindSpeed-LLM): no position embedding, "
                     "each of the %lld heads adds slope x %s to its scores (%s form)%s\n",
                (long long)c.num_attention_heads,
                c.alibi == MC_ALIBI_SQUARE ? "(key - query)" : "key position",
                c.alibi == MC_ALIBI_SQUARE ? "--square-alibi-mask [s, s]" : "[1, s] row",
                c.alibi_fill_neg_inf ? "; --fill-neg-inf: future keys -inf, the same "
                                       "probabilities as the causal mask" : "");
    if (mc_gpt_config_activation_bytes(&c, &shared, &per) != MC_OK) {
        fprintf(out, "megatron.c dry run: %s\n", mc_last_error());
        return;
    }
    fprintf(out, "megatron.c dry run: activations kept by one model chunk of pipeline stage 0: "
                 "%.2f MiB per micro-batch in flight + %.2f MiB shared (scratch%s)\n",
            (double)per / 1048576.0, (double)shared / 1048576.0,
            c.recompute_granularity == MC_RECOMPUTE_FULL ? " and the recompute work area" : "");
}

/* The layers of each pipeline stage as the model would build them ("4", or "1, 3" for an
 * uneven split; virtual stages of a rank summed), after TransformerConfig's split rules. */
static mc_status stage_layers(struct mc_args *a, char *buf, size_t n)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = mc_args_int(a, MC_A_num_layers);
    c.pipeline_model_parallel_size = (int)mc_args_int(a, MC_A_pipeline_model_parallel_size);
    bool vpp = !mc_args_is_none(a, MC_A_virtual_pipeline_model_parallel_size);
    c.virtual_pipeline_model_parallel_size = vpp ? (int)mc_args_int(a, MC_A_virtual_pipeline_model_parallel_size) : 0;
    if (!mc_args_is_none(a, MC_A_decoder_first_pipeline_num_layers))
        c.num_layers_in_first_pipeline_stage = mc_args_int(a, MC_A_decoder_first_pipeline_num_layers);
    if (!mc_args_is_none(a, MC_A_decoder_last_pipeline_num_layers))
        c.num_layers_in_last_pipeline_stage = mc_args_int(a, MC_A_decoder_last_pipeline_num_layers);
    if (mc_num_layer_list_from_args(a, &c) != MC_OK)
        return fail(a, "ValueError");
    for (int i = 0; i < 2; i++) { /* TransformerConfig's check of a given value */
        int64_t v = i ? c.num_layers_in_last_pipeline_stage : c.num_layers_in_first_pipeline_stage;
        enum mc_arg_id id = i ? MC_A_decoder_last_pipeline_num_layers : MC_A_decoder_first_pipeline_num_layers;
        if (!mc_args_is_none(a, id) && v <= 0) {
            mc_error(MC_ERR_CONFIG, "num_layers_in_%s_pipeline_stage must be larger than 0",
                     i ? "last" : "first");
            return fail(a, "ValueError");
        }
    }
    if (c.pipeline_model_parallel_size < 1 || mc_gpt_pipeline_split_check(&c) != MC_OK)
        return fail(a, "ValueError");
    bool uneven = c.num_layers_in_first_pipeline_stage || c.num_layers_in_last_pipeline_stage ||
                  c.n_num_layer_list;
    int pp = c.pipeline_model_parallel_size, vp = vpp ? c.virtual_pipeline_model_parallel_size : 1;
    size_t used = 0;
    buf[0] = 0;
    for (int r = 0; r < (uneven ? pp : 1) && used < n; r++) {
        int64_t total = 0, k, off;
        for (int v = 0; v < vp; v++, total += k)
            mc_gpt_stage_layers(&c, r, v, &k, &off);
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", r ? ", " : "", (long long)total);
    }
    return MC_OK;
}

mc_status mc_dry_run_report(struct mc_args *a, FILE *out, double start_time)
{
    struct mc_microbatches mb;
    mc_status st;
    if (mc_microbatches_init_from_args(a, out, &mb) != MC_OK)
        return fail(a, "AssertionError");
    bool assumed;
    int64_t vocab = mc_dry_run_vocab_size(a, &assumed);
    int64_t padded = -1;
    mc_tokenizer_print_building(out, a);
    if (vocab > 0 && mc_vocab_padded_from_args(a, vocab, out, &padded) != MC_OK)
        return fail(a, "ValueError");
    if (padded < 0 && !mc_args_is_none(a, MC_A_recompute_auto_budget_gb)) {
        mc_error(MC_ERR_CONFIG, "--recompute-auto-budget-gb needs the vocabulary size (the "
                 "logits' memory), and the tokenizer files are not readable");
        return fail(a, "ValueError");
    }
    if (padded > 0 && mc_recompute_auto_budget(a, vocab, padded, out) != MC_OK)
        return fail(a, "ValueError");
    int log_level = 20;
    st = initialize(a, out, &log_level);
    if (st == MC_OK && out) { /* pretrain(): then the model, optimizer and scheduler */
        fprintf(out, "time to initialize megatron (seconds): %.3f\n", mc_time_now() - start_time);
        char dt[96];
        mc_log_format_datetime(dt, sizeof(dt), "after megatron is initialized", 0);
        fprintf(out, "%s\n", dt);
    }
    if (st == MC_OK) /* Python logging drops INFO lines above level 20 */
        st = scheduler(a, &mb, log_level <= 20 ? out : NULL);
    if (st != MC_OK || !out)
        return st;
    int64_t tp = mc_args_int(a, MC_A_tensor_model_parallel_size);
    int64_t pp = mc_args_int(a, MC_A_pipeline_model_parallel_size);
    int64_t cp = mc_args_int(a, MC_A_context_parallel_size);
    int64_t dp = mc_args_int(a, MC_A_data_parallel_size);
    fprintf(out, "megatron.c dry run: world size %lld = tensor %lld x context %lld x pipeline "
                 "%lld x data %lld (order tp-cp-ep-dp-pp)\n",
            (long long)mc_args_int(a, MC_A_world_size), (long long)tp, (long long)cp,
            (long long)pp, (long long)dp);
    char per_stage[256];
    if ((st = stage_layers(a, per_stage, sizeof(per_stage))) != MC_OK)
        return st;
    fprintf(out, "megatron.c dry run: %lld layers, %s per pipeline stage; micro-batches per "
                 "iteration %lld (global batch %lld, micro batch %lld)\n",
            (long long)mc_args_int(a, MC_A_num_layers), per_stage,
            (long long)mb.num_micro_batches, (long long)mb.running,
            (long long)mc_args_int(a, MC_A_micro_batch_size));
    if (assumed)
        fprintf(out, "megatron.c dry run: GPT-2 tokenizer files not readable, assuming its "
                     "50257 entries\n");
    list_refused(a, out);
    if (padded < 0) {
        fprintf(out, "megatron.c dry run: vocabulary size unknown (the tokenizer files are not "
                     "readable): no memory or FLOP estimate\n");
        return MC_OK;
    }
    struct mc_memory_estimate e;
    if (mc_memory_estimate(a, padded, mb.num_micro_batches, &e) != MC_OK) {
        fprintf(out, "%s\n", mc_last_error());
    } else {
        fprintf(out, "megatron.c dry run: theoretical memory per rank "
                     "(report_theoretical_memory):\n");
        mc_memory_report(out, a, &e);
    }
    dry_run_activations(a, vocab, padded, out);
    double flops;
    char fl[64];
    if (mc_flops_per_iteration(a, padded, mb.running, &flops) == MC_OK) {
        mc_py_float_repr(fl, sizeof(fl), flops);
        fprintf(out, "megatron.c dry run: floating-point operations per iteration "
                     "(global batch %lld): %s\n", (long long)mb.running, fl);
    }
    else
        fprintf(out, "megatron.c dry run: %s\n", mc_last_error());
    return MC_OK;
}
