/* Point-to-point exchange between adjacent pipeline stages over MPI: mirrors
 * megatron/core/pipeline_parallel/p2p_communication.py (core_v0.12.1) with batch_p2p_comm
 * (sends and receives of one exchange posted together and awaited together) and fixed shapes
 * ([s, b, h] in the pipeline dtype p->dt, Megatron's pipeline_dtype = params_dtype; no shape
 * exchange: --variable-seq-lengths is not supported). Forward activations and backward grads travel with different tags so they can never be confused. */
#include "pipeline_parallel/pipeline_parallel.h"
#include "parallel_state/parallel_state.h"

#include <stdio.h>
#include <string.h>

enum { TAG_FORWARD = 1, TAG_BACKWARD = 2 };

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

mc_status mc_pp_post(const struct mc_pp_p2p *p, const void *send_next, const void *send_prev,
                     void *recv_prev, void *recv_next, struct mc_pp_posted *h)
{
    memset(h, 0, sizeof(*h));
    if (!mc_comm_available()) {
        trace_exchange(p, send_next, send_prev, recv_prev, recv_next);
        return need_mpi(p);
    }
    MC_ASSERT(p->comm && p->n <= 0x7fffffff);
    MC_ASSERT(p->ring || !(send_next || recv_next) || p->rank + 1 < p->size);
    MC_ASSERT(p->ring || !(send_prev || recv_prev) || p->rank > 0);
    trace_exchange(p, send_next, send_prev, recv_prev, recv_next);
    /* Megatron's order in _batched_p2p_ops: send prev, recv prev, send next, recv next */
    struct mc_comm_p2p_op ops[4];
    int n = 0;
    if (send_prev)
        ops[n++] = (struct mc_comm_p2p_op){true, (void *)send_prev, p->n, prev_rank(p),
                                           TAG_BACKWARD, &h->req[MC_PP_SEND_PREV]};
    if (recv_prev)
        ops[n++] = (struct mc_comm_p2p_op){false, recv_prev, p->n, prev_rank(p), TAG_FORWARD,
                                           &h->req[MC_PP_RECV_PREV]};
    if (send_next)
        ops[n++] = (struct mc_comm_p2p_op){true, (void *)send_next, p->n, next_rank(p),
                                           TAG_FORWARD, &h->req[MC_PP_SEND_NEXT]};
    if (recv_next)
        ops[n++] = (struct mc_comm_p2p_op){false, recv_next, p->n, next_rank(p), TAG_BACKWARD,
                                           &h->req[MC_PP_RECV_NEXT]};
    mc_status st = mc_comm_batch_isend_irecv(p->comm, p->dt, ops, n,
                                             "pipeline isend/irecv");
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

mc_status mc_pp_communicate(const struct mc_pp_p2p *p, const void *send_next,
                            const void *send_prev, void *recv_prev, void *recv_next)
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

mc_status mc_pp_recv_forward(const struct mc_pp_p2p *p, void *input)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, NULL, input, NULL);
}

mc_status mc_pp_send_forward(const struct mc_pp_p2p *p, const void *output)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, output, NULL, NULL, NULL);
}

mc_status mc_pp_recv_backward(const struct mc_pp_p2p *p, void *output_grad)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, NULL, NULL, NULL, output_grad);
}

mc_status mc_pp_send_backward(const struct mc_pp_p2p *p, const void *input_grad)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, input_grad, NULL, NULL);
}

mc_status mc_pp_send_forward_recv_backward(const struct mc_pp_p2p *p, const void *output,
                                           void *output_grad)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, output, NULL, NULL, output_grad);
}

mc_status mc_pp_send_backward_recv_forward(const struct mc_pp_p2p *p, const void *input_grad,
                                           void *input)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, input_grad, input, NULL);
}
