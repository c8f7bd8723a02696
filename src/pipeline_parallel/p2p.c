/* Point-to-point exchange between adjacent pipeline stages over MPI: mirrors
 * megatron/core/pipeline_parallel/p2p_communication.py (core_v0.12.1) with batch_p2p_comm
 * (sends and receives of one exchange posted together and awaited together) and fixed shapes
 * ([s, b, h] fp32, no shape exchange: --variable-seq-lengths is not supported). Forward
 * activations and backward grads travel with different tags so they can never be confused. */
#include "pipeline_parallel/pipeline_parallel.h"
#include "parallel_state/parallel_state.h"

#include <stdio.h>
#include <string.h>

#if defined(MC_HAVE_MPI)
#include <mpi.h>
#endif

enum { TAG_FORWARD = 1, TAG_BACKWARD = 2 };

static void trace_exchange(const struct mc_pp_p2p *p, const float *send_next,
                           const float *send_prev, const float *recv_prev, const float *recv_next)
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

#if defined(MC_HAVE_MPI)
static mc_status mpi_failed(int rc, const char *what, const struct mc_pp_p2p *p)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof(msg), "MPI error code %d", rc);
    return mc_error(MC_ERR_COMM, "pipeline %s on stage %d of %d failed: %s", what, p->rank,
                    p->size, msg);
}

static int next_rank(const struct mc_pp_p2p *p) { return (p->rank + 1) % p->size; }
static int prev_rank(const struct mc_pp_p2p *p) { return (p->rank + p->size - 1) % p->size; }

mc_status mc_pp_post(const struct mc_pp_p2p *p, const float *send_next, const float *send_prev,
                     float *recv_prev, float *recv_next, struct mc_pp_posted *h)
{
    MC_ASSERT(p->comm && p->n <= 0x7fffffff);
    MC_ASSERT(p->ring || !(send_next || recv_next) || p->rank + 1 < p->size);
    MC_ASSERT(p->ring || !(send_prev || recv_prev) || p->rank > 0);
    trace_exchange(p, send_next, send_prev, recv_prev, recv_next);
    MPI_Comm c = *(MPI_Comm *)p->comm;
    int rc = MPI_SUCCESS, n = (int)p->n;
    for (int i = 0; i < 4; i++) {
        h->req[i] = MPI_REQUEST_NULL;
        h->active[i] = false;
    }
    /* Megatron's order in _batched_p2p_ops: send prev, recv prev, send next, recv next */
    if (send_prev)
        rc = MPI_Isend(send_prev, n, MPI_FLOAT, prev_rank(p), TAG_BACKWARD, c,
                       &h->req[MC_PP_SEND_PREV]);
    if (rc == MPI_SUCCESS && recv_prev)
        rc = MPI_Irecv(recv_prev, n, MPI_FLOAT, prev_rank(p), TAG_FORWARD, c,
                       &h->req[MC_PP_RECV_PREV]);
    if (rc == MPI_SUCCESS && send_next)
        rc = MPI_Isend(send_next, n, MPI_FLOAT, next_rank(p), TAG_FORWARD, c,
                       &h->req[MC_PP_SEND_NEXT]);
    if (rc == MPI_SUCCESS && recv_next)
        rc = MPI_Irecv(recv_next, n, MPI_FLOAT, next_rank(p), TAG_BACKWARD, c,
                       &h->req[MC_PP_RECV_NEXT]);
    if (rc != MPI_SUCCESS)
        return mpi_failed(rc, "isend/irecv", p);
    h->active[MC_PP_SEND_NEXT] = send_next != NULL;
    h->active[MC_PP_SEND_PREV] = send_prev != NULL;
    h->active[MC_PP_RECV_PREV] = recv_prev != NULL;
    h->active[MC_PP_RECV_NEXT] = recv_next != NULL;
    double bytes = (double)n * sizeof(float);
    mc_comm_stats_add(MC_COMM_KIND_PP, MC_COMM_SEND, bytes * (!!send_prev + !!send_next), 2);
    mc_comm_stats_add(MC_COMM_KIND_PP, MC_COMM_RECV, bytes * (!!recv_prev + !!recv_next), 2);
    return MC_OK;
}

mc_status mc_pp_wait(const struct mc_pp_p2p *p, mc_pp_request *r, bool *active)
{
    if (!*active)
        return MC_OK;
    *active = false;
    int rc = mc_comm_wait_requests(1, r, p->comm, NULL, "pipeline send/recv");
    return rc == MPI_SUCCESS ? MC_OK : mpi_failed(rc, "send/recv wait", p);
}

mc_status mc_pp_communicate(const struct mc_pp_p2p *p, const float *send_next,
                            const float *send_prev, float *recv_prev, float *recv_next)
{
    struct mc_pp_posted h;
    mc_status st = mc_pp_post(p, send_next, send_prev, recv_prev, recv_next, &h);
    if (st)
        return st;
    int rc = mc_comm_wait_requests(4, h.req, p->comm, NULL, "pipeline send/recv");
    return rc == MPI_SUCCESS ? MC_OK : mpi_failed(rc, "send/recv wait", p);
}

mc_status mc_pp_embedding_group_init(const struct mc_pp_p2p *p, void **out)
{
    *out = NULL;
    if (p->size == 1)
        return MC_OK;
    bool member = p->rank == 0 || p->rank == p->size - 1;
    MPI_Comm *c = mc_alloc(sizeof(*c));
    if (!c)
        return MC_ERR_NOMEM;
    int rc = MPI_Comm_split(*(MPI_Comm *)p->comm, member ? 0 : MPI_UNDEFINED, p->rank, c);
    if (rc != MPI_SUCCESS) {
        mc_free(c);
        return mpi_failed(rc, "embedding group split", p);
    }
    if (!member) {
        mc_free(c);
        return MC_OK;
    }
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    mc_comm_stats_register(c, MC_COMM_KIND_EMBEDDING);
    *out = c;
    return MC_OK;
}

void mc_pp_group_free(void *comm)
{
    if (!comm)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Comm_free((MPI_Comm *)comm);
    mc_free(comm);
}

#else /* no MPI: one stage only */

mc_status mc_pp_communicate(const struct mc_pp_p2p *p, const float *send_next,
                            const float *send_prev, float *recv_prev, float *recv_next)
{
    trace_exchange(p, send_next, send_prev, recv_prev, recv_next);
    return mc_error(MC_ERR_UNSUPPORTED, "pipeline parallelism (%d stages) needs MPI: rebuild "
                    "megatron.c with an MPI installation", p->size);
}

mc_status mc_pp_embedding_group_init(const struct mc_pp_p2p *p, void **out)
{
    *out = NULL;
    if (p->size == 1)
        return MC_OK;
    return mc_error(MC_ERR_UNSUPPORTED, "pipeline parallelism (%d stages) needs MPI", p->size);
}

void mc_pp_group_free(void *comm) { (void)comm; }

mc_status mc_pp_post(const struct mc_pp_p2p *p, const float *send_next, const float *send_prev,
                     float *recv_prev, float *recv_next, struct mc_pp_posted *h)
{
    memset(h, 0, sizeof(*h));
    return mc_pp_communicate(p, send_next, send_prev, recv_prev, recv_next);
}

mc_status mc_pp_wait(const struct mc_pp_p2p *p, mc_pp_request *r, bool *active)
{
    (void)p;
    (void)r;
    *active = false;
    return MC_OK;
}

#endif

static bool first(const struct mc_pp_p2p *p) { return p->rank == 0; }
static bool last(const struct mc_pp_p2p *p) { return p->rank == p->size - 1; }

mc_status mc_pp_recv_forward(const struct mc_pp_p2p *p, float *input)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, NULL, input, NULL);
}

mc_status mc_pp_send_forward(const struct mc_pp_p2p *p, const float *output)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, output, NULL, NULL, NULL);
}

mc_status mc_pp_recv_backward(const struct mc_pp_p2p *p, float *output_grad)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, NULL, NULL, NULL, output_grad);
}

mc_status mc_pp_send_backward(const struct mc_pp_p2p *p, const float *input_grad)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, input_grad, NULL, NULL);
}

mc_status mc_pp_send_forward_recv_backward(const struct mc_pp_p2p *p, const float *output,
                                           float *output_grad)
{
    return last(p) ? MC_OK : mc_pp_communicate(p, output, NULL, NULL, output_grad);
}

mc_status mc_pp_send_backward_recv_forward(const struct mc_pp_p2p *p, const float *input_grad,
                                           float *input)
{
    return first(p) ? MC_OK : mc_pp_communicate(p, NULL, input_grad, input, NULL);
}
