/* The model side of the schedules: pretrain_gpt.py's get_batch, forward_step and loss_func
 * (Megatron-LM core_v0.12.1) as the callbacks every schedule of
 * megatron/core/pipeline_parallel/schedules.py drives, and get_forward_backward_func's choice
 * of schedule. pp = 1 takes the same callbacks through forward_backward_no_pipelining, so the
 * batch, the masked loss and its gradient exist once for every layout. */
#include "training/trainer.h"

#include <math.h>

/* loss_func's --check-for-nan-in-loss-and-grad: the local sum of masked losses is finite. */
static mc_status check_loss(const struct trainer *t, double sum)
{
    if (isfinite(sum) || !mc_args_bool(t->a, MC_A_check_for_nan_in_loss_and_grad))
        return MC_OK;
    return mc_error(MC_ERR_INTERNAL, "found %s in local forward loss calculation (rank %d; "
                    "--no-check-for-nan-in-loss-and-grad skips this check)",
                    isnan(sum) ? "NaN" : "Inf", t->par.ps.rank);
}

/* MegatronPretrainingSampler: each step's samples are cut into micro-batches of mbs * dp
 * consecutive samples, and data-parallel rank d takes [d * mbs, (d + 1) * mbs) of each. */
static int64_t sample_index(const struct trainer *t, int64_t consumed, int64_t micro)
{
    return consumed + (micro * t->par.dp + t->par.dp_rank) * t->d.mbs;
}

/* The dropout stream of micro-batch k of an iteration: its index in the single-process order
 * (micro-batch k of data-parallel rank d holds the samples of micro-batch k * dp + d of the
 * global batch, see sample_index), so every data-parallel size draws the masks one process
 * draws for the same samples. */
static int64_t dropout_step(const struct trainer *t, int64_t iteration, int64_t num_micro,
                            int64_t k)
{
    return (iteration * num_micro + k) * t->par.dp + t->par.dp_rank;
}

/* loss_func's 'lm loss' report: [sum of masked losses, token count] summed over the
 * data-parallel group (float32, as Megatron all-reduces the reporting tensor), then added to
 * the iteration's totals. */
static mc_status add_loss_report(const struct trainer *t, double num, double den, float *numer,
                                 float *denom)
{
    float rep[2] = {(float)num, (float)den};
    mc_status st = mc_comm_all_reduce(t->par.ps.group[MC_PS_DP].comm, rep, 2, MC_DTYPE_F32,
                                      MC_COMM_SUM, "data-parallel loss all-reduce");
    *numer += rep[0];
    *denom += rep[1];
    return st;
}

/* ---- the step callbacks of the schedules --------------------------------------------------
 * pretrain_gpt's forward_step and loss_func on one model chunk: the first (virtual) stage embeds
 * the tokens, the others take the previous stage's activations, the last computes the loss and
 * reports it (with pp = 1 the one stage is first and last). Each chunk keeps each in-flight
 * micro-batch's activations in its own slot (pp_activation_slots sizes them as Megatron keeps
 * its in-flight autograd graphs). Where the slots were too many for the memory limit a chunk
 * has one, and a backward whose micro-batch is no longer in a slot runs that chunk's forward
 * again first (same input, same dropout masks, so the same numbers): the order of steps and
 * exchanges is Megatron's either way. */
struct pp_pass {
    struct trainer *t;
    int split;
    int64_t consumed, num_micro, iteration;
    bool training;
    bool fail_after_first; /* no pipelining: the failure tests' hook after micro-batch 0 */
    int64_t held[MC_MAX_VP][MC_PP_MAX_SLOTS]; /* micro-batch in each chunk's slots, -1 = none */
    int64_t in_batch;     /* micro-batch held in t->d.batch, -1 = none */
    float *numer, *denom; /* the lm loss report, summed on the last stage */
};

static void pp_pass_init(struct pp_pass *r, struct trainer *t, int split, int64_t consumed,
                         int64_t num_micro, int64_t iteration, bool training, float *numer,
                         float *denom)
{
    *r = (struct pp_pass){.t = t, .split = split, .consumed = consumed, .num_micro = num_micro,
                          .iteration = iteration, .training = training, .in_batch = -1,
                          .numer = numer, .denom = denom,
                          .fail_after_first = training && t->par.ps.pp == 1};
    for (int v = 0; v < MC_MAX_VP; v++)
        for (int i = 0; i < MC_PP_MAX_SLOTS; i++)
            r->held[v][i] = -1;
}

/* Virtual stages: chunk 0 of the first pipeline stage embeds, chunk vp - 1 of the last has the
 * loss (Megatron's is_pipeline_first/last_stage with the virtual rank set). */
static bool pp_first(const struct trainer *t, int chunk)
{
    return chunk == 0 && mc_ps_is_pipeline_first_stage(&t->par.ps);
}

static bool pp_last(const struct trainer *t, int chunk)
{
    return chunk == t->m.vp - 1 && mc_ps_is_pipeline_last_stage(&t->par.ps);
}

/* Micro-batch k in t->d.batch (chunks of one rank share it; every stage reads it: attention
 * masks are needed by all layers). */
static mc_status pp_get_batch(struct pp_pass *r, int64_t k)
{
    if (r->in_batch == k)
        return MC_OK;
    r->in_batch = -1;
    struct mc_timer *bg = timer(r->t, "batch-generator", 2);
    mc_timer_start(bg);
    mc_status st = mc_train_data_get(r->t->d.data, r->split, sample_index(r->t, r->consumed, k),
                                     &r->t->d.batch);
    mc_timer_stop(bg);
    if (!st && r->training)
        mc_train_dump_batch(k, &r->t->d.batch);
    if (!st)
        r->in_batch = k;
    return st;
}

/* The slot of `chunk` holding micro-batch k, or -1. */
static int pp_slot_of(const struct pp_pass *r, int chunk, int64_t k)
{
    int n = mc_gpt_activation_slots(r->t->m.chunks[chunk]);
    for (int i = 0; i < n; i++)
        if (r->held[chunk][i] == k)
            return i;
    return -1;
}

/* A slot for a forward of k: a free one, else (one slot: recomputation) k's own position. */
static int pp_slot_for(const struct pp_pass *r, int chunk, int64_t k)
{
    int n = mc_gpt_activation_slots(r->t->m.chunks[chunk]);
    for (int i = 0; i < n; i++)
        if (r->held[chunk][i] < 0)
            return i;
    return (int)(k % n);
}

/* The schedule's messages are the model's stage tensors: what it received (host memory) goes
 * in as batch.hidden_in and the output grad, checked by the model; the stage output and input
 * grad go out in the model's backend's memory, and the schedule stages them to the host through
 * the backend's copy op. */
static mc_status pp_run_forward(struct pp_pass *r, int chunk, int64_t k,
                                const struct mc_tensor *input)
{
    struct trainer *t = r->t;
    struct mc_micro_batch *mb = &t->d.batch;
    mc_gpt_model *m = t->m.chunks[chunk];
    bool first = pp_first(t, chunk), last = pp_last(t, chunk);
    int slot = pp_slot_for(r, chunk, k);
    r->held[chunk][slot] = -1;
    struct mc_timer *fwd = timer(t, "forward-compute", 2);
    mc_timer_start(fwd);
    mc_status st = pp_get_batch(r, k);
    if (st || (st = mc_gpt_use_slot(m, slot)))
        return st;
    if (r->training) {
        mc_gpt_set_step(m, dropout_step(t, r->iteration, r->num_micro, k));
        /* MoEAuxLossAutoScaler.set_loss_scale: the loss scale, over the micro-batches unless
         * the loss is per token (schedules.py forward_step) */
        double ls = mc_train_loss_scale(t);
        mc_gpt_set_moe_aux_loss_scale(m, (float)(mc_args_bool(t->a, MC_A_calculate_per_token_loss)
                                                 ? ls : ls / (double)r->num_micro));
    }
    struct mc_gpt_batch gb = {.b = mb->b, .s = mb->s, .tokens = first ? mb->tokens : NULL,
                              .labels = last ? mb->labels : NULL,
                              .position_ids = mb->position_ids,
                              .attention_mask = mb->attention_mask, .hidden_in = input};
    st = mc_gpt_forward(m, &gb, r->training, last ? t->d.loss : NULL);
    mc_timer_stop(fwd);
    /* forward-only passes (evaluation) take no backward: their slot is free again */
    r->held[chunk][slot] = st || !r->training ? -1 : k;
    return st;
}

/* loss_func: the sum of the masked per-token losses and the token count of the batch held.
 * The host loss (the model's output) and loss mask enter the backend through its copy op. */
static void pp_masked_loss(const struct trainer *t, double *num, double *den)
{
    const struct mc_micro_batch *mb = &t->d.batch;
    struct mc_backend *be = t->m.be;
    size_t bytes = (size_t)(mb->b * mb->s) * sizeof(float);
    be->ops->copy_to_backend(be, t->d.loss_be, t->d.loss, bytes);
    be->ops->copy_to_backend(be, t->d.mask_be, mb->loss_mask, bytes);
    be->ops->masked_loss(be, MC_DTYPE_F32, num, den, t->d.loss_be, t->d.mask_be, mb->b * mb->s);
}

static mc_status pp_chunk_forward(void *ctx, int chunk, int64_t k, const struct mc_tensor *input,
                                  struct mc_tensor *output)
{
    struct pp_pass *r = ctx;
    mc_status st = pp_run_forward(r, chunk, k, input);
    if (st)
        return st;
    *output = mc_gpt_stage_output(r->t->m.chunks[chunk]);
    if (!pp_last(r->t, chunk))
        return MC_OK;
    double num, den;
    pp_masked_loss(r->t, &num, &den);
    if ((st = check_loss(r->t, num)))
        return st;
    return add_loss_report(r->t, num, den, r->numer, r->denom);
}

static mc_status pp_chunk_backward(void *ctx, int chunk, int64_t k,
                                   const struct mc_tensor *input,
                                   const struct mc_tensor *output_grad,
                                   struct mc_tensor *input_grad)
{
    struct pp_pass *r = ctx;
    struct trainer *t = r->t;
    mc_gpt_model *m = t->m.chunks[chunk];
    mc_status st = pp_slot_of(r, chunk, k) >= 0 ? MC_OK : pp_run_forward(r, chunk, k, input);
    int slot = pp_slot_of(r, chunk, k);
    /* backward reads micro-batch k's loss mask on the last stage, and another chunk may have
     * read a later micro-batch since this chunk's forward */
    if (st || (st = pp_get_batch(r, k)) || (st = mc_gpt_use_slot(m, slot)))
        return st;
    r->held[chunk][slot] = -1; /* one backward per forward */
    struct mc_timer *bwd = timer(t, "backward-compute", 2);
    mc_timer_start(bwd);
    if (pp_last(t, chunk)) {
        double num, den;
        pp_masked_loss(t, &num, &den);
        bool per_token = mc_args_bool(t->a, MC_A_calculate_per_token_loss);
        /* the schedule's grad_scale_func: the loss (over tokens and micro-batches unless per
         * token) times the optimizer's loss scale, 1 without a grad scaler */
        double ls = mc_train_loss_scale(t);
        float scale = per_token ? (float)ls : (float)(ls / den / (double)r->num_micro);
        /* mask_be holds this micro-batch's mask (pp_masked_loss); dloss leaves for the host */
        int64_t n = t->d.batch.b * t->d.batch.s;
        t->m.be->ops->masked_loss_bwd(t->m.be, t->d.dloss_be, t->d.mask_be, scale, n);
        t->m.be->ops->copy_to_host(t->m.be, t->d.dloss, t->d.dloss_be,
                                   (size_t)n * sizeof(float));
        st = mc_gpt_backward(m, t->d.dloss);
    } else {
        st = mc_gpt_backward_stage(m, output_grad);
    }
    mc_timer_stop(bwd);
    *input_grad = mc_gpt_stage_input_grad(m);
    return st;
}

/* Megatron's no_sync: a chunk's grads sync from its last micro-batch's backward on (the
 * no-pipelining and 1F1B schedules say when; the interleaved one per chunk, below). */
static void pp_grad_sync(struct pp_pass *r, int chunk, bool sync)
{
    mc_ddp_set_last_microbatch(r->t->o.ddps[chunk], sync);
}

/* The one-chunk schedules' callbacks (no pipelining, 1F1B). */
static mc_status pp_forward(void *ctx, int64_t k, const struct mc_tensor *input,
                            struct mc_tensor *output)
{
    return pp_chunk_forward(ctx, 0, k, input, output);
}

static mc_status pp_backward(void *ctx, int64_t k, const struct mc_tensor *input,
                             const struct mc_tensor *output_grad, struct mc_tensor *input_grad)
{
    struct pp_pass *r = ctx;
    mc_status st = pp_chunk_backward(ctx, 0, k, input, output_grad, input_grad);
    /* the failure tests stop a rank in the middle of an iteration without pipelining */
    if (!st && r->fail_after_first && k == 0)
        st = mc_train_inject_test_failure(r->t, r->iteration);
    return st;
}

static void pp_set_grad_sync(void *ctx, bool sync)
{
    pp_grad_sync(ctx, 0, sync);
}

/* The interleaved schedule's backward: chunk by chunk, grads sync from the chunk's last
 * micro-batch on (Megatron's per-chunk grad_sync_func). */
static mc_status vp_chunk_backward(void *ctx, int chunk, int64_t k,
                                   const struct mc_tensor *input,
                                   const struct mc_tensor *output_grad,
                                   struct mc_tensor *input_grad)
{
    struct pp_pass *r = ctx;
    pp_grad_sync(r, chunk, k == r->num_micro - 1);
    return pp_chunk_backward(ctx, chunk, k, input, output_grad, input_grad);
}

/* get_forward_backward_func: the interleaved schedule with vp chunks, 1F1B with pp > 1, else
 * no pipelining. */
static mc_status pp_run_schedule(struct trainer *t, struct pp_pass *r, bool forward_only)
{
    if (t->m.vp > 1) {
        struct mc_pp_chunk_ops ops = {r, pp_chunk_forward, vp_chunk_backward};
        return mc_pp_forward_backward_pipelining_with_interleaving(&t->pp.vpipe, &ops,
                                                                   r->num_micro, forward_only);
    }
    struct mc_pp_step_ops ops = {r, pp_forward, pp_backward, pp_set_grad_sync};
    if (t->par.ps.pp == 1)
        return mc_pp_forward_backward_no_pipelining(&t->pp.pipe, &ops, r->num_micro,
                                                    forward_only);
    return mc_pp_forward_backward_pipelining_without_interleaving(&t->pp.pipe, &ops,
                                                                  r->num_micro, forward_only);
}

mc_status mc_train_forward_backward(struct trainer *t, int split, int64_t consumed,
                                    int64_t num_micro, int64_t iteration, bool forward_only,
                                    float *numer, float *denom)
{
    struct pp_pass r;
    pp_pass_init(&r, t, split, consumed, num_micro, iteration, !forward_only, numer, denom);
    return pp_run_schedule(t, &r, forward_only);
}
