/* The activation memory of a rank, counted from the arguments, and --recompute-auto-budget-gb
 * (megatron.c's, beyond Megatron): the full activation recompute with the fewest recomputed
 * layers whose count fits a budget. The count is the one the model allocates
 * (mc_gpt_config_activation_bytes: the same carve as the model's activation block) times the
 * micro-batches a pipeline stage keeps in flight, so --dry-run, --log-memory-estimate and the
 * allocator's activations category agree with the choice (docs/recompute.md). */
#include "training/recompute_budget.h"

#include <math.h>
#include <string.h>

#include "megatron/gpt.h"
#include "pipeline_parallel/in_flight.h"
#include "training/model_config.h"
#include "training/trainer.h"

#define MB (1024.0 * 1024.0) /* as Megatron's memory reports count MB */
#define GB (1024.0 * MB)

/* The model config of every chunk before its ranks are set: the arguments' layout, and the
 * candidate recompute setting instead of the arguments' own where rc is given. */
static mc_status base_config(const struct mc_args *a, int64_t vocab, int64_t padded,
                             const struct mc_recompute_setting *rc, struct mc_gpt_config *c)
{
    mc_status st = mc_gpt_config_from_args(a, vocab, padded, 0, c);
    if (st)
        return st;
    c->pipeline_model_parallel_size = (int)mc_args_int(a, MC_A_pipeline_model_parallel_size);
    bool vpp = !mc_args_is_none(a, MC_A_virtual_pipeline_model_parallel_size);
    c->virtual_pipeline_model_parallel_size =
        vpp ? (int)mc_args_int(a, MC_A_virtual_pipeline_model_parallel_size) : 0;
    if (rc) {
        c->recompute_granularity = rc->granularity;
        c->recompute_method = rc->method;
        c->recompute_num_layers = rc->num_layers;
    }
    return MC_OK;
}

/* The activation slots each chunk of `stage` keeps: the in-flight micro-batches of the
 * schedule (at the final global batch size), as the trainer's pp_activation_slots. */
static mc_status stage_slots(const struct mc_args *a, int pp, int vp, int stage, int64_t *slots)
{
    int64_t mbs = mc_args_int(a, MC_A_micro_batch_size);
    int64_t dp = mc_args_int(a, MC_A_data_parallel_size);
    int64_t micro = mc_args_int(a, MC_A_global_batch_size) / (mbs * (dp > 0 ? dp : 1));
    int64_t group = vp > 1 && !mc_args_is_none(a, MC_A_microbatch_group_size_per_vp_stage)
                        ? mc_args_int(a, MC_A_microbatch_group_size_per_vp_stage) : 0;
    mc_status st = mc_pp_in_flight(pp, stage, vp, micro > 0 ? micro : 1, group, slots);
    for (int v = 0; v < vp && !st; v++)
        slots[v] = slots[v] < 1 ? 1 : slots[v] > MC_PP_MAX_SLOTS ? MC_PP_MAX_SLOTS : slots[v];
    return st;
}

mc_status mc_activation_estimate(const struct mc_args *a, int64_t vocab, int64_t padded,
                                 const struct mc_recompute_setting *rc, int stage, double *bytes)
{
    struct mc_gpt_config c;
    mc_status st = base_config(a, vocab, padded, rc, &c);
    if (st)
        return st;
    int pp = c.pipeline_model_parallel_size > 0 ? c.pipeline_model_parallel_size : 1;
    int vp = c.virtual_pipeline_model_parallel_size > 0 ? c.virtual_pipeline_model_parallel_size
                                                        : 1;
    int64_t slots[MC_MAX_VP];
    if (vp > MC_MAX_VP)
        return mc_error(MC_ERR_CONFIG, "%d model chunks per pipeline rank: at most %d", vp,
                        MC_MAX_VP);
    if ((st = stage_slots(a, pp, vp, stage, slots)))
        return st;
    /* training.c's loss, loss-grad and loss-mask buffers of one micro-batch */
    double total = 3.0 * (double)(c.micro_batch_size * c.seq_length) * sizeof(float);
    c.pipeline_model_parallel_rank = stage;
    for (int v = 0; v < vp; v++) {
        size_t shared = 0, per = 0;
        c.virtual_pipeline_model_parallel_rank = v;
        if ((st = mc_gpt_config_activation_bytes(&c, &shared, &per)))
            return st;
        total += (double)shared + (double)slots[v] * (double)per;
    }
    *bytes = total;
    return MC_OK;
}

mc_status mc_activation_estimate_max(const struct mc_args *a, int64_t vocab, int64_t padded,
                                     const struct mc_recompute_setting *rc, double *bytes,
                                     int *stage)
{
    int pp = (int)mc_args_int(a, MC_A_pipeline_model_parallel_size);
    *bytes = -1;
    for (int r = 0; r < (pp > 0 ? pp : 1); r++) {
        double b;
        mc_status st = mc_activation_estimate(a, vocab, padded, rc, r, &b);
        if (st)
            return st;
        if (b > *bytes) {
            *bytes = b;
            *stage = r;
        }
    }
    return MC_OK;
}

/* The options the budget sets itself, and what a user may have spelled them as. */
static const enum mc_arg_id budget_sets[] = {
    MC_A_recompute_granularity, MC_A_recompute_method, MC_A_recompute_num_layers,
    MC_A_recompute_activations, MC_A_checkpoint_activations, MC_A_distribute_saved_activations};

static mc_status usage_error(struct mc_args *a, const char *fmt, const char *what)
{
    snprintf(a->err, sizeof(a->err), fmt, what);
    a->err_kind = NULL; /* argparse's "usage: ... error: ..." */
    a->exit_code = 2;
    return mc_error(MC_ERR_CONFIG, "%s", a->err);
}

mc_status mc_recompute_budget_check(struct mc_args *a)
{
    if (mc_args_is_none(a, MC_A_recompute_auto_budget_gb))
        return MC_OK;
    double gb = mc_args_float(a, MC_A_recompute_auto_budget_gb);
    char v[64];
    snprintf(v, sizeof(v), "%g", gb);
    if (!(gb > 0) || !isfinite(gb))
        return usage_error(a, "argument --recompute-auto-budget-gb: expected a positive number "
                              "of GB (2^30 bytes) of activation memory, got %s", v);
    for (size_t i = 0; i < sizeof(budget_sets) / sizeof(budget_sets[0]); i++)
        if (a->given[budget_sets[i]])
            return usage_error(a, "argument --recompute-auto-budget-gb: not allowed with "
                                  "argument %s (the budget chooses the activation recompute "
                                  "itself; give one or the other)",
                               mc_arg_defs[budget_sets[i]].opt);
    return MC_OK;
}

/* Candidate k of 0 .. most (the most layers of a model chunk): no recompute, then block k
 * (the first k layers of each chunk rerun), and at k = most every layer rerun, which is
 * uniform 1 (the same memory as block `most`, in Megatron's usual spelling). */
static struct mc_recompute_setting candidate(int64_t k, int64_t most)
{
    if (k == 0)
        return (struct mc_recompute_setting){MC_RECOMPUTE_NONE, MC_RECOMPUTE_UNIFORM, 0};
    if (k >= most)
        return (struct mc_recompute_setting){MC_RECOMPUTE_FULL, MC_RECOMPUTE_UNIFORM, 1};
    return (struct mc_recompute_setting){MC_RECOMPUTE_FULL, MC_RECOMPUTE_BLOCK, k};
}

static void describe(const struct mc_recompute_setting *s, char *buf, size_t n)
{
    if (s->granularity == MC_RECOMPUTE_NONE)
        snprintf(buf, n, "no recompute");
    else
        snprintf(buf, n, "--recompute-granularity full --recompute-method %s "
                 "--recompute-num-layers %lld", s->method == MC_RECOMPUTE_BLOCK ? "block"
                 : "uniform", (long long)s->num_layers);
}

/* The most layers any model chunk of any pipeline stage holds. */
static int64_t most_chunk_layers(const struct mc_gpt_config *c)
{
    int pp = c->pipeline_model_parallel_size > 0 ? c->pipeline_model_parallel_size : 1;
    int vp = c->virtual_pipeline_model_parallel_size > 0 ? c->virtual_pipeline_model_parallel_size
                                                         : 1;
    int64_t most = 0, layers, offset;
    for (int r = 0; r < pp; r++)
        for (int v = 0; v < vp; v++) {
            mc_gpt_stage_layers(c, r, v, &layers, &offset);
            most = layers > most ? layers : most;
        }
    return most;
}

static mc_status apply(struct mc_args *a, const struct mc_recompute_setting *s)
{
    if (s->granularity == MC_RECOMPUTE_NONE)
        return MC_OK;
    mc_status st = mc_args_set_str(a, MC_A_recompute_granularity, "full");
    if (!st)
        st = mc_args_set_str(a, MC_A_recompute_method, s->method == MC_RECOMPUTE_BLOCK ? "block"
                                                                                      : "uniform");
    if (!st)
        mc_args_set_int(a, MC_A_recompute_num_layers, s->num_layers);
    return st;
}

mc_status mc_recompute_auto_budget(struct mc_args *a, int64_t vocab, int64_t padded, FILE *out)
{
    if (mc_args_is_none(a, MC_A_recompute_auto_budget_gb))
        return MC_OK;
    double budget = mc_args_float(a, MC_A_recompute_auto_budget_gb) * GB;
    struct mc_gpt_config c;
    mc_status st = base_config(a, vocab, padded, NULL, &c);
    if (st)
        return st;
    int64_t most = most_chunk_layers(&c);
    double need = 0, before = -1;
    int stage = 0;
    char what[160];
    for (int64_t k = 0; k <= most; k++) {
        struct mc_recompute_setting s = candidate(k, most);
        if (k > 0 && c.num_moe_experts > 0)
            return mc_error(MC_ERR_CONFIG, "--recompute-auto-budget-gb %g: without recompute "
                            "the activations need an estimated %.2f GB, and full recompute with "
                            "--num-experts is not supported", budget / GB, before / GB);
        if ((st = mc_activation_estimate_max(a, vocab, padded, &s, &need, &stage)))
            return st;
        if (need > budget) {
            before = need;
            continue;
        }
        describe(&s, what, sizeof(what));
        if (out) {
            fprintf(out, " > --recompute-auto-budget-gb %g: %s (%lld of the up to %lld layers "
                    "of each model chunk recomputed): estimated activation memory %.3f GB "
                    "(%.2f MB) on pipeline stage %d, the most loaded", budget / GB, what,
                    (long long)k, (long long)most, need / GB, need / MB, stage);
            if (k > 0)
                fprintf(out, "; one layer fewer: %.3f GB (%.2f MB)", before / GB, before / MB);
            fprintf(out, "\n");
            fflush(out);
        }
        return apply(a, &s);
    }
    describe(&(struct mc_recompute_setting){MC_RECOMPUTE_FULL, MC_RECOMPUTE_UNIFORM, 1}, what,
             sizeof(what));
    return mc_error(MC_ERR_CONFIG, "--recompute-auto-budget-gb %g: even full recompute of every "
                    "layer (%s) needs an estimated %.3f GB of activation memory on pipeline "
                    "stage %d (each layer's input, one layer's work area, the attention scratch "
                    "and the logits stay); raise the budget or lower --micro-batch-size / "
                    "--seq-length, or split the model over more tensor or pipeline ranks",
                    budget / GB, what, need / GB, stage);
}
