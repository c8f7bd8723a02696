/* --dry-run: the start-up report of pretrain_gpt without MPI, data or model. Follows the order of
 * Megatron's initialize_megatron -> set_global_variables (micro-batch calculator, tokenizer
 * padding: megatron/training/global_vars.py, tokenizer/tokenizer.py) and adds what Megatron
 * prints only after the first logged iteration: report_theoretical_memory
 * (theoretical_memory_usage.py) and num_floating_point_operations (training.py). */
#include "training/dry_run.h"

#include <string.h>

#include "training/flops.h"
#include "training/microbatches.h"
#include "training/schedule_args.h"
#include "training/theoretical_memory.h"

int64_t mc_vocab_padded(int64_t orig, int64_t divisible_by, int64_t tp)
{
    int64_t m = divisible_by * tp;
    return m > 0 ? (orig + m - 1) / m * m : orig;
}

/* Entries of a GPT-2 vocab.json: top-level "key": value pairs. */
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
    if (!mc_args_is_none(a, MC_A_vocab_size))
        return mc_args_int(a, MC_A_vocab_size);
    return -1;
}

static mc_status fail(struct mc_args *a, const char *kind)
{
    snprintf(a->err, sizeof(a->err), "%s", strchr(mc_last_error(), ' ') ? strchr(mc_last_error(), ' ') + 1 : mc_last_error());
    a->err_kind = kind;
    a->exit_code = 1;
    return MC_ERR_CONFIG;
}

static void list_refused(struct mc_args *a, FILE *out)
{
    /* Re-use the start-up support check: report, not fail. */
    char saved_err[sizeof(a->err)];
    memcpy(saved_err, a->err, sizeof(saved_err));
    const char *kind = a->err_kind;
    int code = a->exit_code;
    if (mc_args_check_support(a) != MC_OK && out)
        fprintf(out, "megatron.c: a real run would stop here: %s\n", a->err);
    memcpy(a->err, saved_err, sizeof(saved_err));
    a->err_kind = kind;
    a->exit_code = code;
}

mc_status mc_dry_run_report(struct mc_args *a, FILE *out)
{
    struct mc_microbatches mb;
    if (mc_microbatches_init_from_args(a, out, &mb) != MC_OK)
        return fail(a, "AssertionError");
    if (mc_args_truthy(a, MC_A_train_samples) && out)
        fprintf(out, "setting training iterations to %lld\n",
                (long long)mc_microbatches_train_iters(&mb, mc_args_int(a, MC_A_train_samples)));
    bool assumed;
    int64_t vocab = mc_dry_run_vocab_size(a, &assumed);
    int64_t padded = -1;
    if (out && mc_args_str(a, MC_A_tokenizer_type))
        fprintf(out, "> building %s tokenizer ...\n", mc_args_str(a, MC_A_tokenizer_type));
    if (vocab > 0) {
        padded = mc_vocab_padded(vocab, mc_args_int(a, MC_A_make_vocab_size_divisible_by),
                                 mc_args_int(a, MC_A_tensor_model_parallel_size));
        if (out)
            fprintf(out, " > padded vocab (size: %lld) with %lld dummy tokens (new size: %lld)\n",
                    (long long)vocab, (long long)(padded - vocab), (long long)padded);
    }
    if (!out)
        return MC_OK;
    int64_t tp = mc_args_int(a, MC_A_tensor_model_parallel_size);
    int64_t pp = mc_args_int(a, MC_A_pipeline_model_parallel_size);
    int64_t cp = mc_args_int(a, MC_A_context_parallel_size);
    int64_t dp = mc_args_int(a, MC_A_data_parallel_size);
    fprintf(out, "megatron.c dry run: world size %lld = tensor %lld x context %lld x pipeline "
                 "%lld x data %lld (order tp-cp-ep-dp-pp)\n",
            (long long)mc_args_int(a, MC_A_world_size), (long long)tp, (long long)cp,
            (long long)pp, (long long)dp);
    fprintf(out, "megatron.c dry run: %lld layers, %lld per pipeline stage; micro-batches per "
                 "iteration %lld (global batch %lld, micro batch %lld)\n",
            (long long)mc_args_int(a, MC_A_num_layers),
            (long long)(mc_args_int(a, MC_A_num_layers) / (pp > 0 ? pp : 1)),
            (long long)mb.num_micro_batches, (long long)mb.running,
            (long long)mc_args_int(a, MC_A_micro_batch_size));
    if (assumed)
        fprintf(out, "megatron.c dry run: --vocab-file not readable, assuming GPT-2's 50257 "
                     "entries\n");
    list_refused(a, out);
    if (padded < 0) {
        fprintf(out, "megatron.c dry run: vocabulary size unknown (give --vocab-size or a "
                     "readable --vocab-file): no memory or FLOP estimate\n");
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
