/* The micro-batch schedules of megatron/core/pipeline_parallel/schedules.py (core_v0.12.1):
 * forward_backward_no_pipelining and forward_backward_pipelining_without_interleaving (1F1B),
 * with the same per-rank order of forward steps, backward steps and exchanges (checked against
 * Megatron's own functions by tests/parallel/test_pipeline_schedule.py). Megatron keeps each
 * in-flight micro-batch's (input, output) pair for backward; here the schedule keeps the input
 * activations it received, and the step callbacks own everything else. Grad reduction and the
 * embedding all-reduce (finalize_model_grads) are left to the caller, after the schedule. */
#include "pipeline_parallel/pipeline_parallel.h"

#include <stdio.h>
#include <string.h>

static void trace_step(const struct mc_pp_p2p *p, char kind, int64_t k)
{
    if (!p->trace)
        return;
    char ev[32];
    snprintf(ev, sizeof(ev), "%c%lld", kind, (long long)k);
    p->trace(p->trace_ctx, ev);
}

mc_status mc_pp_schedule_init(struct mc_pp_schedule *s, const struct mc_pp_p2p *p2p)
{
    memset(s, 0, sizeof(*s));
    s->p2p = *p2p;
    int64_t n = mc_pp_msg_numel(p2p);
    if (p2p->size < 1 || p2p->rank < 0 || p2p->rank >= p2p->size || p2p->msg.ndim < 1 || n < 1)
        return mc_error(MC_ERR_CONFIG, "pipeline stage %d of %d with %lld-element messages: "
                        "expected 0 <= stage < pipeline-model-parallel size and messages of "
                        "seq-length * micro-batch-size * hidden-size elements", p2p->rank,
                        p2p->size, (long long)n);
    if (p2p->size > 1 && !p2p->comm)
        return mc_error(MC_ERR_CONFIG, "pipeline-model-parallel size %d without a pipeline "
                        "communicator", p2p->size);
    /* at most warmup + 1 = size - rank inputs are waiting for their backward */
    s->slots = p2p->rank == 0 ? 0 : p2p->size - p2p->rank;
    if (s->slots) {
        s->inputs = MC_MEM_AS(MC_MEM_COMM, mc_alloc(mc_pp_msg_bytes(p2p) * (size_t)s->slots));
        if (!s->inputs)
            return MC_ERR_NOMEM;
    }
    if (p2p->rank < p2p->size - 1) {
        s->grad = MC_MEM_AS(MC_MEM_COMM, mc_alloc(mc_pp_msg_bytes(p2p)));
        if (!s->grad) {
            mc_pp_schedule_free(s);
            return MC_ERR_NOMEM;
        }
    }
    return MC_OK;
}

void mc_pp_schedule_free(struct mc_pp_schedule *s)
{
    mc_free(s->send);
    mc_free(s->grad);
    mc_free(s->inputs);
    s->send = s->grad = s->inputs = NULL;
}

/* no_sync for every micro-batch but the last: its backward starts the grad reduction */
static void grad_sync(const struct mc_pp_step_ops *ops, int64_t k, int64_t num_microbatches)
{
    if (ops->set_grad_sync)
        ops->set_grad_sync(ops->ctx, k == num_microbatches - 1);
}

static mc_status check_microbatches(int64_t m)
{
    if (m < 1)
        return mc_error(MC_ERR_CONFIG, "number of micro-batches %lld: a schedule needs at least "
                        "one (global-batch-size >= micro-batch-size * data-parallel size)",
                        (long long)m);
    return MC_OK;
}

mc_status mc_pp_forward_backward_no_pipelining(struct mc_pp_schedule *s,
                                               const struct mc_pp_step_ops *ops,
                                               int64_t num_microbatches, bool forward_only)
{
    mc_status st = check_microbatches(num_microbatches);
    for (int64_t k = 0; !st && k < num_microbatches; k++) {
        struct mc_tensor out = {0}, dx = {0};
        if (!forward_only) /* Megatron's no_sync context spans forward and backward */
            grad_sync(ops, k, num_microbatches);
        trace_step(&s->p2p, 'F', k);
        if ((st = ops->forward(ops->ctx, k, NULL, &out)) || forward_only)
            continue;
        trace_step(&s->p2p, 'B', k);
        st = ops->backward(ops->ctx, k, NULL, NULL, &dx);
    }
    return st;
}

/* Micro-batch k's input on this stage: its receive slot as a message (no data on the first
 * stage, which has none). */
static struct mc_tensor input_of(const struct mc_pp_schedule *s, int64_t k)
{
    size_t bytes = mc_pp_msg_bytes(&s->p2p);
    return mc_pp_msg_view(&s->p2p, s->slots ? (char *)s->inputs + (size_t)(k % s->slots) * bytes
                                            : NULL);
}

static const struct mc_tensor *or_null(const struct mc_tensor *t) { return t->data ? t : NULL; }

/* What a callback returned, as a host message to send (staged through s->send when it is in
 * a backend's memory); nothing to do on the stage that sends nothing that way. */
static mc_status to_send(struct mc_pp_schedule *s, const struct mc_tensor *t, bool sends,
                         const char *what, struct mc_tensor *out)
{
    *out = (struct mc_tensor){0};
    if (!sends)
        return MC_OK;
    if (!s->send && !mc_tensor_on_host(t) &&
        !(s->send = MC_MEM_AS(MC_MEM_COMM, mc_alloc(mc_pp_msg_bytes(&s->p2p)))))
        return MC_ERR_NOMEM;
    return mc_pp_stage_msg(&s->p2p, t, s->send, what, out);
}

/* forward of k; *y is its output as a message to send (none on the last stage) */
static mc_status fwd(struct mc_pp_schedule *s, const struct mc_pp_step_ops *ops, int64_t k,
                     struct mc_tensor *y)
{
    trace_step(&s->p2p, 'F', k);
    struct mc_tensor in = input_of(s, k), out = {0};
    mc_status st = ops->forward(ops->ctx, k, or_null(&in), &out);
    return st ? st : to_send(s, &out, s->p2p.rank < s->p2p.size - 1,
                             "the forward step's output", y);
}

/* backward of k with the output grad received into s->grad (none on the last stage); *dx is
 * its input grad as a message to send (none on the first stage) */
static mc_status bwd(struct mc_pp_schedule *s, const struct mc_pp_step_ops *ops, int64_t k,
                     int64_t num_microbatches, struct mc_tensor *dx)
{
    bool last = s->p2p.rank == s->p2p.size - 1;
    grad_sync(ops, k, num_microbatches); /* backwards run in order: k = M - 1 is the last */
    trace_step(&s->p2p, 'B', k);
    struct mc_tensor in = input_of(s, k), g = mc_pp_msg_view(&s->p2p, s->grad), out = {0};
    mc_status st = ops->backward(ops->ctx, k, or_null(&in), last ? NULL : &g, &out);
    return st ? st : to_send(s, &out, s->p2p.rank > 0, "the backward step's input grad", dx);
}

/* The 1F1B steady phase: forward k = i + warmup, then backward i (FIFO). */
static mc_status steady(struct mc_pp_schedule *s, const struct mc_pp_step_ops *ops,
                        int64_t warmup, int64_t remaining, bool forward_only)
{
    int64_t m = warmup + remaining;
    const struct mc_pp_p2p *p = &s->p2p;
    struct mc_tensor grad = mc_pp_msg_view(p, s->grad);
    mc_status st = MC_OK;
    for (int64_t i = 0; !st && i < remaining; i++) {
        int64_t k = i + warmup;
        bool last_iteration = i == remaining - 1;
        struct mc_tensor y, dx, next = input_of(s, k + 1);
        if ((st = fwd(s, ops, k, &y)))
            break;
        if (forward_only) {
            st = mc_pp_send_forward(p, &y);
            if (!st && !last_iteration)
                st = mc_pp_recv_forward(p, &next);
            continue;
        }
        if ((st = mc_pp_send_forward_recv_backward(p, &y, &grad)) ||
            (st = bwd(s, ops, i, m, &dx)))
            break;
        /* micro-batch i's slot is free now: k + 1 may arrive into it */
        st = last_iteration ? mc_pp_send_backward(p, &dx)
                            : mc_pp_send_backward_recv_forward(p, &dx, &next);
    }
    return st;
}

mc_status mc_pp_forward_backward_pipelining_without_interleaving(struct mc_pp_schedule *s,
                                                                 const struct mc_pp_step_ops *ops,
                                                                 int64_t num_microbatches,
                                                                 bool forward_only)
{
    const struct mc_pp_p2p *p = &s->p2p;
    mc_status st = check_microbatches(num_microbatches);
    if (st)
        return st;
    int64_t warmup = p->size - p->rank - 1;
    if (warmup > num_microbatches)
        warmup = num_microbatches;
    int64_t remaining = num_microbatches - warmup;
    for (int64_t k = 0; k < warmup; k++) {
        struct mc_tensor y, in = input_of(s, k);
        if ((st = mc_pp_recv_forward(p, &in)) || (st = fwd(s, ops, k, &y)) ||
            (st = mc_pp_send_forward(p, &y)))
            return st;
    }
    struct mc_tensor in = input_of(s, warmup), grad = mc_pp_msg_view(p, s->grad);
    if (remaining > 0 && (st = mc_pp_recv_forward(p, &in)))
        return st;
    if ((st = steady(s, ops, warmup, remaining, forward_only)) || forward_only)
        return st;
    for (int64_t i = 0; i < warmup; i++) { /* cooldown */
        struct mc_tensor dx;
        if ((st = mc_pp_recv_backward(p, &grad)) ||
            (st = bwd(s, ops, remaining + i, num_microbatches, &dx)) ||
            (st = mc_pp_send_backward(p, &dx)))
            return st;
    }
    return MC_OK;
}
