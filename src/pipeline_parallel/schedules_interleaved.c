/* The interleaved 1F1B schedule, the counterpart of forward_backward_pipelining_with_interleaving
 * in megatron/core/pipeline_parallel/schedules.py (core_v0.12.1) with its helpers
 * get_schedule_table, get_pp_rank_microbatches and recv_tensor_from_previous_stage. Each rank
 * holds vp model chunks; chunk c is virtual stage c * pp + rank, so activations travel around
 * the pipeline ring (the last stage's chunk c feeds the first stage's chunk c + 1). The order of
 * forward steps, backward steps and posted exchanges is Megatron's (checked against its own
 * function by tests/parallel/test_interleaved_schedule_golden.py and tests/mpi/test_schedules.c).
 *
 * Megatron keeps every in-flight micro-batch's (input, output) tensors; here the schedule keeps
 * the received inputs and output grads in per-chunk FIFO queues of pool buffers, and copies each
 * output / input grad it sends (the model chunk may run again before the send completes). With
 * overlap_p2p_comm the steady phase posts its exchanges without waiting and waits where Megatron
 * waits (before the forward / backward that needs the data, and for the previous send when the
 * next is posted); a buffer about to be used is also completed first, so a use can never race
 * its receive. */
#include "pipeline_parallel/pipeline_parallel.h"
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

struct mc_pp_vbuf {
    void *x; /* one message of p2p.msg's dtype and shape */
    mc_pp_request req;
    bool pending; /* a posted send/recv not yet completed */
};

mc_status mc_pp_interleaved_init(struct mc_pp_interleaved *s, const struct mc_pp_p2p *p2p,
                                 int vp, int64_t group, bool overlap)
{
    memset(s, 0, sizeof(*s));
    s->p2p = *p2p;
    s->p2p.ring = true;
    s->vp = vp;
    s->group = group ? group : p2p->size;
    s->overlap = overlap;
    int64_t n = mc_pp_msg_numel(p2p);
    if (p2p->size < 2 || p2p->rank < 0 || p2p->rank >= p2p->size || p2p->msg.ndim < 1 || n < 1 ||
        !p2p->comm)
        return mc_error(MC_ERR_CONFIG, "interleaved schedule on stage %d of %d (%lld-element "
                        "messages): needs a pipeline of at least 2 stages and its communicator",
                        p2p->rank, p2p->size, (long long)n);
    if (vp < 1)
        return mc_error(MC_ERR_CONFIG, "interleaved schedule with %d model chunks per pipeline "
                        "stage: expected at least one", vp);
    return MC_OK;
}

void mc_pp_interleaved_free(struct mc_pp_interleaved *s)
{
    for (int64_t i = 0; i < s->n_pool; i++) {
        mc_free(s->pool[i]->x);
        mc_free(s->pool[i]);
    }
    mc_free(s->pool);
    s->pool = NULL;
    s->n_pool = s->n_free = s->cap_pool = 0;
}

/* ---- buffer pool: pool[0, n_free) are free, pool[n_free, n_pool) in use ------------------ */

static mc_status get_buf(struct mc_pp_interleaved *s, struct mc_pp_vbuf **out)
{
    if (s->n_free > 0) {
        *out = s->pool[--s->n_free];
        return MC_OK;
    }
    if (s->n_pool == s->cap_pool) {
        int64_t cap = s->cap_pool ? 2 * s->cap_pool : 8;
        struct mc_pp_vbuf **np = mc_alloc(sizeof(*np) * (size_t)cap);
        if (!np)
            return MC_ERR_NOMEM;
        if (s->n_pool)
            memcpy(np, s->pool, sizeof(*np) * (size_t)s->n_pool);
        mc_free(s->pool);
        s->pool = np;
        s->cap_pool = cap;
    }
    struct mc_pp_vbuf *b = mc_calloc(1, sizeof(*b));
    if (!b || !(b->x = MC_MEM_AS(MC_MEM_COMM, mc_alloc(mc_pp_msg_bytes(&s->p2p))))) {
        mc_free(b);
        return MC_ERR_NOMEM;
    }
    s->pool[s->n_pool++] = b; /* in use: above the free ones */
    *out = b;
    return MC_OK;
}

static void put_buf(struct mc_pp_interleaved *s, struct mc_pp_vbuf *b)
{
    if (!b)
        return;
    MC_ASSERT(!b->pending);
    for (int64_t i = s->n_free; i < s->n_pool; i++)
        if (s->pool[i] == b) {
            s->pool[i] = s->pool[s->n_free];
            s->pool[s->n_free++] = b;
            return;
        }
    MC_ASSERT(!"buffer not from this pool");
}

/* ---- FIFO queues of buffers (NULL = Megatron's None placeholder) ------------------------- */

struct queue {
    struct mc_pp_vbuf **item;
    int64_t head, len, cap;
};

static void q_push(struct queue *q, struct mc_pp_vbuf *b)
{
    MC_ASSERT(q->len < q->cap);
    q->item[(q->head + q->len++) % q->cap] = b;
}

static struct mc_pp_vbuf *q_pop(struct queue *q)
{
    MC_ASSERT(q->len > 0);
    struct mc_pp_vbuf *b = q->item[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return b;
}

static struct mc_pp_vbuf *q_at(const struct queue *q, int64_t i)
{
    MC_ASSERT(i >= 0 && i < q->len);
    return q->item[(q->head + i) % q->cap];
}

/* ---- one call ----------------------------------------------------------------------------- */

struct run {
    struct mc_pp_interleaved *s;
    const struct mc_pp_chunk_ops *ops;
    int V, size, rank;
    int64_t M, total, warmup, remaining;
    bool forward_only, all_warmup;
    int64_t *mb;          /* [total] schedule table: micro-batch of virtual micro-batch id */
    int *ch;              /* [total] and its model chunk */
    struct queue *in, *og; /* [V] received inputs / output grads */
    int64_t *n_out, *n_bwd; /* [V] outputs kept for backward, backwards done */
    struct queue recv_prev_waits, recv_next_waits; /* posted receives, oldest first */
    struct mc_pp_vbuf *send_next_pending, *send_prev_pending;
};

static int fwd_chunk(const struct run *r, int64_t vk) { return r->ch[vk % r->total]; }
static int bwd_chunk(const struct run *r, int64_t vk) { return r->V - 1 - r->ch[vk % r->total]; }
static bool first_v(const struct run *r, int c) { return r->rank == 0 && c == 0; }
static bool last_v(const struct run *r, int c) { return r->rank == r->size - 1 && c == r->V - 1; }

static void trace_step(const struct run *r, char kind, int c, int64_t k)
{
    const struct mc_pp_p2p *p = &r->s->p2p;
    if (!p->trace)
        return;
    char ev[48];
    snprintf(ev, sizeof(ev), "%c%d.%lld", kind, c, (long long)k);
    p->trace(p->trace_ctx, ev);
}

/* get_schedule_table: groups of N micro-batches, each run on chunk 0, 1, ... in turn. */
static void build_table(struct run *r, int64_t N)
{
    int64_t v = 0;
    for (int64_t m0 = 0; m0 < r->M; m0 += N) {
        int64_t m1 = m0 + N >= r->M ? r->M : m0 + N;
        for (int c = 0; c < r->V; c++)
            for (int64_t m = m0; m < m1; m++) {
                r->mb[v] = m;
                r->ch[v++] = c;
            }
    }
}

/* recv_tensor_from_previous_stage: whether the exchange after virtual micro-batch vk receives,
 * and for which chunk (*next). The leading stage (first in forward, last in backward) is
 * pp - 1 steps ahead of the stage that feeds it around the ring. */
static bool recv_from_previous(const struct run *r, int64_t vk, bool forward, int *next)
{
    int (*chunk)(const struct run *, int64_t) = forward ? fwd_chunk : bwd_chunk;
    bool leading = forward ? r->rank == 0 : r->rank == r->size - 1;
    if (!leading) {
        *next = chunk(r, vk + 1);
        return true;
    }
    bool recv = true;
    int c;
    if (vk < r->size - 1) {
        recv = false;
        c = chunk(r, vk + 1);
    } else {
        c = chunk(r, vk - (r->size - 1));
    }
    if (c == (forward ? r->V - 1 : 0))
        recv = false;
    *next = forward ? c + 1 : c - 1;
    return recv;
}

/* num_released_microbatches: inputs of chunk c already popped when virtual id vk runs. */
static int64_t num_released(const struct run *r, int64_t vk, int c)
{
    int64_t upto = vk, n = 0;
    int want = c;
    if (!r->forward_only) {
        if (vk < r->warmup)
            return 0;
        upto = vk - r->warmup;
        want = r->V - 1 - c;
    }
    for (int64_t i = 0; i < upto; i++)
        n += r->ch[i] == want;
    return n;
}

static mc_status wait_buf(struct run *r, struct mc_pp_vbuf *b)
{
    return mc_pp_wait(&r->s->p2p, &b->req, &b->pending);
}

/* Waits for the oldest posted receive of a queue (Megatron's wait_handles.pop(0).wait()). */
static mc_status wait_oldest(struct run *r, struct queue *waits)
{
    return waits->len ? wait_buf(r, q_pop(waits)) : MC_OK;
}

/* Completes b's receive before it is read: the posted receives before it first, in order. */
static mc_status ensure_ready(struct run *r, struct mc_pp_vbuf *b, struct queue *waits)
{
    mc_status st = MC_OK;
    while (!st && b && b->pending && waits->len)
        st = wait_oldest(r, waits);
    return st ? st : (b && b->pending ? wait_buf(r, b) : MC_OK);
}

/* A message view of a pool buffer; NULL for none (Megatron's None). */
static struct mc_tensor *view(const struct run *r, const struct mc_pp_vbuf *b,
                              struct mc_tensor *t)
{
    if (!b)
        return NULL;
    *t = mc_pp_msg_view(&r->s->p2p, b->x);
    return t;
}

/* A host copy in a pool buffer of what the chunk returned (t), to send: copied from the host
 * or through its backend's copy op. */
static mc_status stash(struct run *r, const struct mc_tensor *t, const char *what,
                       struct mc_pp_vbuf **out)
{
    const struct mc_pp_p2p *p = &r->s->p2p;
    *out = NULL;
    mc_status st = mc_pp_check_msg(p, t, what);
    if (st || (st = get_buf(r->s, out)))
        return st;
    if (mc_tensor_on_host(t)) {
        memcpy((*out)->x, t->data, mc_pp_msg_bytes(p));
    } else {
        struct mc_backend *be = (struct mc_backend *)t->backend;
        be->ops->copy_to_host(be, (*out)->x, t->data, mc_pp_msg_bytes(p));
    }
    return MC_OK;
}

static mc_status forward_helper(struct run *r, int64_t vk, struct mc_pp_vbuf **y)
{
    int c = fwd_chunk(r, vk);
    int64_t m = r->mb[vk];
    *y = NULL;
    if (first_v(r, c) && r->in[c].len == r->n_out[c])
        q_push(&r->in[c], NULL);
    struct mc_pp_vbuf *b = q_at(&r->in[c], m - num_released(r, vk, c));
    mc_status st = ensure_ready(r, b, &r->recv_prev_waits);
    if (st)
        return st;
    trace_step(r, 'F', c, m);
    struct mc_tensor in, out = {0};
    if ((st = r->ops->forward(r->ops->ctx, c, m, view(r, b, &in), &out)))
        return st;
    r->n_out[c]++;
    if (r->forward_only) {
        put_buf(r->s, q_pop(&r->in[c]));
        r->n_out[c]--;
    }
    return last_v(r, c) ? MC_OK : stash(r, &out, "the forward step's output", y);
}

static mc_status backward_helper(struct run *r, int64_t vk, struct mc_pp_vbuf **dx)
{
    int c = bwd_chunk(r, vk);
    *dx = NULL;
    if (last_v(r, c) && r->og[c].len == 0)
        q_push(&r->og[c], NULL);
    struct mc_pp_vbuf *in = q_pop(&r->in[c]), *g = q_pop(&r->og[c]);
    r->n_out[c]--;
    mc_status st = ensure_ready(r, g, &r->recv_next_waits);
    if (st)
        return st;
    /* a chunk's backwards take its micro-batches in forward (increasing) order */
    int64_t m = r->n_bwd[c]++;
    MC_ASSERT(m == r->mb[vk]);
    trace_step(r, 'B', c, m);
    struct mc_tensor tin, tg, out = {0};
    st = r->ops->backward(r->ops->ctx, c, m, view(r, in, &tin), view(r, g, &tg), &out);
    put_buf(r->s, in);
    put_buf(r->s, g);
    if (st)
        return st;
    return first_v(r, c) ? MC_OK : stash(r, &out, "the backward step's input grad", dx);
}

/* A blocking exchange (Megatron's _communicate with wait_on_reqs): the sent buffers go back to
 * the pool, the received ones are returned. */
static mc_status exchange(struct run *r, struct mc_pp_vbuf *send_next, struct mc_pp_vbuf *send_prev,
                          bool recv_prev, bool recv_next, struct mc_pp_vbuf **got_prev,
                          struct mc_pp_vbuf **got_next)
{
    struct mc_pp_vbuf *rp = NULL, *rn = NULL;
    mc_status st = MC_OK;
    if (recv_prev)
        st = get_buf(r->s, &rp);
    if (!st && recv_next)
        st = get_buf(r->s, &rn);
    struct mc_tensor t[4];
    if (!st)
        st = mc_pp_communicate(&r->s->p2p, view(r, send_next, &t[0]), view(r, send_prev, &t[1]),
                               view(r, rp, &t[2]), view(r, rn, &t[3]));
    put_buf(r->s, send_next);
    put_buf(r->s, send_prev);
    if (got_prev)
        *got_prev = rp;
    if (got_next)
        *got_next = rn;
    return st;
}

/* An exchange posted without waiting (overlap_p2p_comm): the send's buffer replaces the
 * pending one of its direction, which is awaited and released (Megatron waits for the previous
 * send handle after posting the next); the receive joins its wait queue. */
static mc_status post(struct run *r, struct mc_pp_vbuf *send, bool forward, bool recv,
                      struct mc_pp_vbuf **got)
{
    struct mc_pp_vbuf *rb = NULL;
    struct mc_pp_posted h;
    mc_status st = recv ? get_buf(r->s, &rb) : MC_OK;
    struct mc_tensor ts, tr, *sx = view(r, send, &ts), *rx = view(r, rb, &tr);
    if (!st)
        st = forward ? mc_pp_post(&r->s->p2p, sx, NULL, rx, NULL, &h)
                     : mc_pp_post(&r->s->p2p, NULL, sx, NULL, rx, &h);
    if (st) {
        put_buf(r->s, rb);
        put_buf(r->s, send);
        return st;
    }
    int sk = forward ? MC_PP_SEND_NEXT : MC_PP_SEND_PREV;
    int rk = forward ? MC_PP_RECV_PREV : MC_PP_RECV_NEXT;
    if (send) {
        send->req = h.req[sk];
        send->pending = h.active[sk];
    }
    if (rb) {
        rb->req = h.req[rk];
        rb->pending = h.active[rk];
        q_push(forward ? &r->recv_prev_waits : &r->recv_next_waits, rb);
    }
    struct mc_pp_vbuf **pending = forward ? &r->send_next_pending : &r->send_prev_pending;
    if (*pending) {
        st = wait_buf(r, *pending);
        put_buf(r->s, *pending);
    }
    *pending = send;
    *got = rb;
    return st;
}

static mc_status warmup(struct run *r)
{
    mc_status st = MC_OK;
    bool flush_grads = !r->forward_only && !r->all_warmup;
    for (int64_t k = 0; k < r->warmup && !st; k++) {
        int next;
        bool recv_prev = recv_from_previous(r, k, true, &next) && k != r->total - 1;
        struct mc_pp_vbuf *y, *rp = NULL, *rn = NULL;
        if ((st = forward_helper(r, k, &y)))
            return st;
        bool last_warmup = k == r->warmup - 1 && flush_grads;
        if (last_warmup && !r->s->overlap) {
            bool recv_next = r->rank != r->size - 1;
            st = exchange(r, y, NULL, recv_prev, recv_next, &rp, &rn);
            q_push(&r->og[r->V - 1], rn); /* Megatron appends even None */
        } else {
            st = exchange(r, y, NULL, recv_prev, false, &rp, NULL);
        }
        if (recv_prev)
            q_push(&r->in[next], rp);
        if (!st && last_warmup && r->s->overlap) {
            bool recv_next = r->rank != r->size - 1;
            st = post(r, NULL, false, recv_next, &rn);
            if (recv_next)
                q_push(&r->og[r->V - 1], rn);
        }
    }
    return st;
}

static mc_status steady_overlap(struct run *r, int64_t k)
{
    int64_t fk = k + r->warmup;
    int nf, nb;
    struct mc_pp_vbuf *y, *dx, *rp = NULL, *rn = NULL;
    mc_status st = MC_OK;
    if (!first_v(r, fwd_chunk(r, fk)))
        st = wait_oldest(r, &r->recv_prev_waits);
    if (st || (st = forward_helper(r, fk, &y)))
        return st;
    bool recv_prev = recv_from_previous(r, fk, true, &nf) && k != r->remaining - 1;
    if ((st = post(r, y, true, recv_prev, &rp)))
        return st;
    if (!last_v(r, bwd_chunk(r, k)) && (st = wait_oldest(r, &r->recv_next_waits)))
        return st;
    if ((st = backward_helper(r, k, &dx)))
        return st;
    bool recv_next = recv_from_previous(r, k, false, &nb);
    st = post(r, dx, false, recv_next, &rn);
    if (recv_prev)
        q_push(&r->in[nf], rp);
    if (recv_next && rn)
        q_push(&r->og[nb], rn);
    return st;
}

static mc_status steady_batched(struct run *r, int64_t k)
{
    int64_t fk = k + r->warmup;
    int nf, nb;
    struct mc_pp_vbuf *y, *dx = NULL, *rp = NULL, *rn = NULL;
    mc_status st = forward_helper(r, fk, &y);
    if (st || (st = backward_helper(r, k, &dx))) {
        put_buf(r->s, y);
        return st;
    }
    bool recv_prev = recv_from_previous(r, fk, true, &nf) && k != r->remaining - 1;
    bool recv_next = recv_from_previous(r, k, false, &nb);
    st = exchange(r, y, dx, recv_prev, recv_next, &rp, &rn);
    if (recv_prev)
        q_push(&r->in[nf], rp);
    if (recv_next)
        q_push(&r->og[nb], rn);
    return st;
}

static mc_status cooldown(struct run *r)
{
    mc_status st = MC_OK;
    if (r->all_warmup) {
        /* recv_backward with the virtual rank of the last forward (always chunk vp - 1) */
        struct mc_pp_vbuf *rn = NULL;
        if (!last_v(r, fwd_chunk(r, r->warmup - 1)))
            st = exchange(r, NULL, NULL, false, true, NULL, &rn);
        q_push(&r->og[r->V - 1], rn);
    }
    for (int64_t k = r->remaining; k < r->total && !st; k++) {
        int nb;
        struct mc_pp_vbuf *dx, *rn = NULL;
        if (!last_v(r, bwd_chunk(r, k)) && k != 0 && (st = wait_oldest(r, &r->recv_next_waits)))
            return st;
        bool recv_next = recv_from_previous(r, k, false, &nb) && k != r->total - 1;
        if ((st = backward_helper(r, k, &dx)) ||
            (st = exchange(r, NULL, dx, false, recv_next, NULL, &rn)))
            return st;
        if (recv_next)
            q_push(&r->og[nb], rn);
    }
    return st;
}

/* Megatron's checks of the micro-batch count against N and pp, with its messages. */
static mc_status check_counts(int pp, int64_t N, int64_t M)
{
    if (N > M || N < pp)
        return mc_error(MC_ERR_CONFIG, "The number of contiguous micro-batches in a virtual "
                        "pipeline stageshould range in [PP=%d , M=%lld]", pp, (long long)M);
    int64_t final_group = M % N;
    if (final_group > 0 && final_group < pp)
        return mc_error(MC_ERR_CONFIG, "The remainder of M (the total micro-batches) divided by "
                        "N (number of contiguous micro-batches in a virtual pipeline stage) "
                        "should be 0, or larger than or equal to the pipeline-parallel size, but "
                        "it is %lld. Otherwise, it introduces dependency bubbles in the pipeline "
                        "and reduces throughput.", (long long)final_group);
    return MC_OK;
}

/* Every queue of a call in one allocation. */
static mc_status run_init(struct run *r, void **block)
{
    int64_t cap = r->total + 2, nq = 2 * (int64_t)r->V + 2;
    size_t bytes = sizeof(int64_t) * (size_t)r->total + sizeof(int) * (size_t)r->total +
                   sizeof(struct queue) * 2 * (size_t)r->V + sizeof(int64_t) * 2 * (size_t)r->V +
                   sizeof(struct mc_pp_vbuf *) * (size_t)(nq * cap) + 16;
    char *p = *block = mc_calloc(1, bytes);
    if (!p)
        return MC_ERR_NOMEM;
    r->mb = (int64_t *)p;
    r->n_out = r->mb + r->total;
    r->n_bwd = r->n_out + r->V;
    r->in = (struct queue *)(r->n_bwd + r->V);
    r->og = r->in + r->V;
    struct mc_pp_vbuf **items = (struct mc_pp_vbuf **)(r->og + r->V);
    struct queue *all[2] = {r->in, r->og};
    for (int w = 0; w < 2; w++)
        for (int c = 0; c < r->V; c++) {
            all[w][c].item = items;
            all[w][c].cap = cap;
            items += cap;
        }
    r->recv_prev_waits = (struct queue){items, 0, 0, cap};
    r->recv_next_waits = (struct queue){items + cap, 0, 0, cap};
    r->ch = (int *)(items + 2 * cap);
    return MC_OK;
}

/* Returns every buffer still held by the call to the pool (after an error too). */
static mc_status run_finish(struct run *r, mc_status st)
{
    struct mc_pp_vbuf *pend[2] = {r->send_next_pending, r->send_prev_pending};
    for (int i = 0; i < 2; i++)
        if (pend[i]) {
            mc_status w = wait_buf(r, pend[i]);
            st = st ? st : w;
            put_buf(r->s, pend[i]);
        }
    struct queue *waits[2] = {&r->recv_prev_waits, &r->recv_next_waits};
    for (int i = 0; i < 2; i++)
        while (waits[i]->len) {
            mc_status w = wait_oldest(r, waits[i]);
            st = st ? st : w;
        }
    for (int c = 0; c < r->V; c++)
        for (struct queue *q = &r->in[c]; q; q = q == &r->in[c] ? &r->og[c] : NULL)
            while (q->len) {
                struct mc_pp_vbuf *b = q_pop(q);
                if (b && b->pending)
                    wait_buf(r, b);
                put_buf(r->s, b);
            }
    return st;
}

mc_status mc_pp_forward_backward_pipelining_with_interleaving(struct mc_pp_interleaved *s,
                                                              const struct mc_pp_chunk_ops *ops,
                                                              int64_t num_microbatches,
                                                              bool forward_only)
{
    const struct mc_pp_p2p *p = &s->p2p;
    mc_status st = check_counts(p->size, s->group, num_microbatches);
    if (st)
        return st;
    struct run r = {.s = s, .ops = ops, .V = s->vp, .size = p->size, .rank = p->rank,
                    .M = num_microbatches, .forward_only = forward_only};
    /* get_pp_rank_microbatches */
    r.total = r.M * r.V;
    r.warmup = forward_only ? r.total : (int64_t)(p->size - p->rank - 1) * 2 +
                                            (int64_t)(r.V - 1) * s->group;
    if (r.warmup >= r.total) {
        r.warmup = r.total;
        r.all_warmup = true;
    }
    r.remaining = r.total - r.warmup;
    void *block;
    if ((st = run_init(&r, &block)))
        return st;
    build_table(&r, s->group);
    /* input_tensors[0].append(recv_forward()) with virtual rank 0 */
    struct mc_pp_vbuf *x0 = NULL;
    if (p->rank != 0)
        st = exchange(&r, NULL, NULL, true, false, &x0, NULL);
    q_push(&r.in[0], x0);
    if (!st)
        st = warmup(&r);
    for (int64_t k = 0; k < r.remaining && !st; k++)
        st = s->overlap ? steady_overlap(&r, k) : steady_batched(&r, k);
    if (!st && !forward_only)
        st = cooldown(&r);
    st = run_finish(&r, st);
    mc_free(block);
    return st;
}
