/* Point-to-point exchange between adjacent pipeline stages over MPI: mirrors
 * megatron/core/pipeline_parallel/p2p_communication.py (core_v0.12.1) with batch_p2p_comm
 * (sends and receives of one exchange posted together and awaited together) and fixed shapes
 * (p->msg: [s, b, h] in Megatron's pipeline_dtype = params_dtype; no shape exchange:
 * --variable-seq-lengths is not supported). Every message is a tensor checked against p->msg,
 * in host memory (a backend's tensor is staged first, mc_pp_stage_msg). Forward activations
 * and backward grads travel with different tags so they can never be confused. */
#include "pipeline_parallel/pipeline_parallel.h"
#include "backend/backend.h"
#include "parallel_state/parallel_state.h"

#include <stdio.h>
#include <string.h>

enum { TAG_FORWARD = 1, TAG_BACKWARD = 2 };

int64_t mc_pp_msg_numel(const struct mc_pp_p2p *p) { return mc_tensor_numel(&p->msg); }

size_t mc_pp_msg_bytes(const struct mc_pp_p2p *p) { return mc_tensor_nbytes(&p->msg); }

struct mc_tensor mc_pp_msg_view(const struct mc_pp_p2p *p, void *data)
{
    struct mc_tensor t = p->msg;
    t.data = data;
    t.backend = NULL;
    return t;
}

mc_status mc_pp_check_msg(const struct mc_pp_p2p *p, const struct mc_tensor *t,
                          const char *what)
{
    char got[96], want[96];
    if (!t->data)
        return mc_error(MC_ERR_SHAPE, "pipeline stage %d: %s has no data", p->rank, what);
    if (t->dtype != p->msg.dtype || !mc_tensor_same_shape(t, &p->msg))
        return mc_error(MC_ERR_SHAPE, "pipeline stage %d: %s is %s; the pipeline's messages are "
                        "%s (the stage tensor: [s, b, h] in the pipeline dtype)", p->rank, what,
                        mc_tensor_str(t, got, sizeof(got)), mc_tensor_str(&p->msg, want,
                                                                         sizeof(want)));
    return MC_OK;
}

mc_status mc_pp_stage_msg(const struct mc_pp_p2p *p, const struct mc_tensor *t, void *host_buf,
                          const char *what, struct mc_tensor *out)
{
    mc_status st = mc_pp_check_msg(p, t, what);
    if (st)
        return st;
    if (mc_tensor_on_host(t)) {
        *out = *t;
        return MC_OK;
    }
    struct mc_backend *be = (struct mc_backend *)t->backend;
    be->ops->copy_to_host(be, host_buf, t->data, mc_pp_msg_bytes(p));
    *out = mc_pp_msg_view(p, host_buf);
    return MC_OK;
}

/* The parts of one exchange, each NULL or a host message; the first bad one is refused. */
static mc_status check_parts(const struct mc_pp_p2p *p, const struct mc_tensor *const part[4])
{
    static const char *const what[4] = {"the message to the next stage",
                                        "the message to the previous stage",
                                        "the buffer for the previous stage's message",
                                        "the buffer for the next stage's message"};
    for (int i = 0; i < 4; i++) {
        if (!part[i])
            continue;
        mc_status st = mc_pp_check_msg(p, part[i], what[i]);
        if (st)
            return st;
        if (!mc_tensor_on_host(part[i]))
            return mc_error(MC_ERR_SHAPE, "pipeline stage %d: %s is in a backend's memory; "
                            "messages travel in host memory (stage it with mc_pp_stage_msg)",
                            p->rank, what[i]);
    }
    return MC_OK;
}

static void trace_exchange(const struct mc_pp_p2p *p, const void *send_next,
                           const void *send_prev, const void *recv_prev, const void *recv_next)
{
    char ev[16] = "";
    if (!p->trace)
        return;
    if (send_next)
        strcat(ev, "+Sn");
    if (send_prev)
        strcat(ev, "+Sp");
    if (recv_prev)
        strcat(ev, "+Rp");
    if (recv_next)
        strcat(ev, "+Rn");
    p->trace(p->trace_ctx, ev[0] ? ev + 1 : "-");
}

static mc_status need_mpi(const struct mc_pp_p2p *p)
{
    return mc_error(MC_ERR_UNSUPPORTED, "pipeline parallelism (%d stages) needs MPI: rebuild "
                    "megatron.c with an MPI installation", p->size);
}

static int next_rank(const struct mc_pp_p2p *p) { return (p->rank + 1) % p->size; }
static int prev_rank(const struct mc_pp_p2p *p) { return (p->rank + p->size - 1) % p->size; }

mc_status mc_pp_post(const struct mc_pp_p2p *p, const struct mc_tensor *send_next,
                     const struct mc_tensor *send_prev, struct mc_tensor *recv_prev,
                     struct mc_tensor *recv_next, struct mc_pp_posted *h)
{
    memset(h, 0, sizeof(*h));
    const struct mc_tensor *const part[4] = {send_next, send_prev, recv_prev, recv_next};
    mc_status st = check_parts(p, part);
    if (st)
        return st;
    if (!mc_comm_available()) {
        trace_exchange(p, send_next, send_prev, recv_prev, recv_next);
        return need_mpi(p);
    }
    int64_t n = mc_pp_msg_numel(p);
    MC_ASSERT(p->comm && n <= 0x7fffffff);
    MC_ASSERT(p->ring || !(send_next || recv_next) || p->rank + 1 < p->size);
    MC_ASSERT(p->ring || !(send_prev || recv_prev) || p->rank > 0);
    trace_exchange(p, send_next, send_prev, recv_prev, recv_next);
    /* Megatron's order in _batched_p2p_ops: send prev, recv prev, send next, recv next */
    struct mc_comm_p2p_op ops[4];
    int k = 0;
    if (send_prev)
        ops[k++] = (struct mc_comm_p2p_op){true, send_prev->data, n, prev_rank(p),
                                           TAG_BACKWARD, &h->req[MC_PP_SEND_PREV]};
    if (recv_prev)
        ops[k++] = (struct mc_comm_p2p_op){false, recv_prev->data, n, prev_rank(p), TAG_FORWARD,
                                           &h->req[MC_PP_RECV_PREV]};
    if (send_next)
        ops[k++] = (struct mc_comm_p2p_op){true, send_next->data, n, next_rank(p), TAG_FORWARD,
                                           &h->req[MC_PP_SEND_NEXT]};
    if (recv_next)
        ops[k++] = (struct mc_comm_p2p_op){false, recv_next->data, n, next_rank(p),
                                           TAG_BACKWARD, &h->req[MC_PP_RECV_NEXT]};
    st = mc_comm_batch_isend_irecv(p->comm, p->msg.dtype, ops, k, "pipeline isend/irecv");
    if (st)
        return st;
    h->active[MC_PP_SEND_NEXT] = send_next != NULL;
    h->active[MC_PP_SEND_PREV] = send_prev != NULL;
    h->active[MC_PP_RECV_PREV] = recv_prev != NULL;
    h->active[MC_PP_RECV_NEXT] = recv_next != NULL;
    return MC_OK;
}

mc_status mc_pp_wait(const struct mc_pp_p2p *p, mc_pp_request *r, bool *active)
{
    if (!*active)
        return MC_OK;
    *active = false;
    return mc_comm_wait(1, r, p->comm, NULL, "pipeline send/recv");
}

mc_status mc_pp_communicate(const struct mc_pp_p2p *p, const struct mc_tensor *send_next,
                            const struct mc_tensor *send_prev, struct mc_tensor *recv_prev,
                            struct mc_tensor *recv_next)
{
    struct mc_pp_posted h;
    mc_status st = mc_pp_post(p, send_next, send_prev, recv_prev, recv_next, &h);
    if (st)
        return st;
    return mc_comm_wait(4, h.req, p->comm, NULL, "pipeline send/recv");
}

mc_status mc_pp_embedding_group_init(const struct mc_pp_p2p *p, void **out)
{
    *out = NULL;
    if (p->size == 1)
        return MC_OK;
    if (!mc_comm_available())
        return need_mpi(p);
    bool member = p->rank == 0 || p->rank == p->size - 1;
    mc_status st = mc_comm_split(p->comm, member ? 0 : -1, p->rank, out,
                                 "pipeline embedding group split");
    if (st)
        return st;
    if (*out)
        mc_comm_stats_register(*out, MC_COMM_KIND_EMBEDDING);
    return MC_OK;
}

void mc_pp_group_free(void *comm) { mc_comm_free(comm); }

static bool first(const struct mc_pp_p2p *p) { return p->rank == 0; }
static bool last(const struct mc_pp_p2p *p) { return p->rank == p->size - 1; }

mc_status mc_pp_recv_forward(const struct mc_pp_p2p *p, struct mc_tensor *input)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, NULL, input, NULL);
}

mc_status mc_pp_send_forward(const struct mc_pp_p2p *p, const struct mc_tensor *output)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, output, NULL, NULL, NULL);
}

mc_status mc_pp_recv_backward(const struct mc_pp_p2p *p, struct mc_tensor *output_grad)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, NULL, NULL, NULL, output_grad);
}

mc_status mc_pp_send_backward(const struct mc_pp_p2p *p, const struct mc_tensor *input_grad)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, input_grad, NULL, NULL);
}

mc_status mc_pp_send_forward_recv_backward(const struct mc_pp_p2p *p,
                                           const struct mc_tensor *output,
                                           struct mc_tensor *output_grad)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, output, NULL, NULL, output_grad);
}

mc_status mc_pp_send_backward_recv_forward(const struct mc_pp_p2p *p,
                                           const struct mc_tensor *input_grad,
                                           struct mc_tensor *input)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, input_grad, input, NULL);
}
