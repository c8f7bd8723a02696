/* Pipeline parallelism: point-to-point exchange of [s, b, h] activations and their grads
 * between adjacent stages (p2p.c, the counterpart of
 * megatron/core/pipeline_parallel/p2p_communication.py) and the schedules that order the
 * micro-batches' forward and backward steps (schedules.c, the counterpart of
 * forward_backward_no_pipelining and forward_backward_pipelining_without_interleaving in
 * megatron/core/pipeline_parallel/schedules.py, core_v0.12.1). Private header.
 *
 * The schedules drive the model through two callbacks, so they know nothing of GPT: the
 * training loop supplies forward/backward steps of one micro-batch (spec
 * megatron-model-parallel-ckpt.md section 5). */
#ifndef MC_PIPELINE_PARALLEL_H
#define MC_PIPELINE_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#include "megatron.h"
#include "megatron/tensor.h"

#include "parallel_state/parallel_state.h"

typedef mc_comm_request mc_pp_request;

/* ---- p2p.c ------------------------------------------------------------------------------ */
/* This rank's place in its pipeline-parallel group and the type of its messages. */
struct mc_pp_p2p {
    void *comm;   /* comm.c handle of the pp group (NULL when size == 1) */
    int size;     /* pipeline-parallel size */
    int rank;     /* this stage */
    /* Every message's dtype and shape (data NULL): the model's stage tensor [s, b, h] (or
     * [s/tp, b, h]) in Megatron's pipeline_dtype. Messages travel in host memory. */
    struct mc_tensor msg;
    /* Optional: told each exchange as it happens ("Sn+Rn" = send to the next stage and
     * receive from it, see tests/golden/pipeline/schedules_golden.txt), for the tests. */
    void (*trace)(void *ctx, const char *event);
    void *trace_ctx;
    /* Interleaved schedule: the stages form a ring (the last stage's next is the first, whose
     * previous is the last), as Megatron's get_pipeline_model_parallel_next/prev_rank wrap. */
    bool ring;
};

/* Elements and bytes of one message. */
int64_t mc_pp_msg_numel(const struct mc_pp_p2p *p);
size_t mc_pp_msg_bytes(const struct mc_pp_p2p *p);
/* A host view of `data` as one message (p->msg with data set). */
struct mc_tensor mc_pp_msg_view(const struct mc_pp_p2p *p, void *data);
/* Whether t is a message of this pipeline: p->msg's dtype and shape, else MC_ERR_SHAPE naming
 * `what`, what was given and what was expected. */
mc_status mc_pp_check_msg(const struct mc_pp_p2p *p, const struct mc_tensor *t,
                          const char *what);
/* A tensor to send as a host message: t itself when it is in host memory; else (a backend's
 * memory) copied into host_buf (mc_pp_msg_bytes) through its backend's copy_to_host, and
 * *out views host_buf. Checked by mc_pp_check_msg first. */
mc_status mc_pp_stage_msg(const struct mc_pp_p2p *p, const struct mc_tensor *t, void *host_buf,
                          const char *what, struct mc_tensor *out);

/* One exchange with the neighbours, as Megatron's _communicate with batched isend/irecv:
 * send_next / send_prev are sent to the next / previous stage (NULL: nothing), recv_prev /
 * recv_next receive from them (NULL: nothing); each is a message (mc_pp_check_msg) in host
 * memory, else MC_ERR_SHAPE before anything is posted. Sends and receives are posted
 * together, then all awaited, so opposite exchanges of two neighbours cannot deadlock.
 * Exchanges off the ends of the pipeline must not be asked for (the callers below skip them as
 * Megatron does). */
mc_status mc_pp_communicate(const struct mc_pp_p2p *p, const struct mc_tensor *send_next,
                            const struct mc_tensor *send_prev, struct mc_tensor *recv_prev,
                            struct mc_tensor *recv_next);

/* The same exchange posted without waiting (Megatron's _communicate with wait_on_reqs=False,
 * the overlap_p2p_comm path): h->req[MC_PP_*] are the requests of the parts asked for
 * (MC_PP_NO_REQUEST for the others), each completed by mc_pp_wait. The buffers must stay
 * untouched until then. An exchange with nothing to do is traced as "-". */
enum { MC_PP_SEND_NEXT = 0, MC_PP_SEND_PREV, MC_PP_RECV_PREV, MC_PP_RECV_NEXT };
struct mc_pp_posted {
    mc_pp_request req[4];
    bool active[4];
};
mc_status mc_pp_post(const struct mc_pp_p2p *p, const struct mc_tensor *send_next,
                     const struct mc_tensor *send_prev, struct mc_tensor *recv_prev,
                     struct mc_tensor *recv_next, struct mc_pp_posted *h);
/* Completes one posted request (a no-op for one that is not active); *active is cleared. */
mc_status mc_pp_wait(const struct mc_pp_p2p *p, mc_pp_request *r, bool *active);

/* The named operations of p2p_communication.py; each is a no-op where Megatron's is (e.g.
 * recv_forward on the first stage). */
mc_status mc_pp_recv_forward(const struct mc_pp_p2p *p, struct mc_tensor *input);
mc_status mc_pp_send_forward(const struct mc_pp_p2p *p, const struct mc_tensor *output);
mc_status mc_pp_recv_backward(const struct mc_pp_p2p *p, struct mc_tensor *output_grad);
mc_status mc_pp_send_backward(const struct mc_pp_p2p *p, const struct mc_tensor *input_grad);
mc_status mc_pp_send_forward_recv_backward(const struct mc_pp_p2p *p,
                                           const struct mc_tensor *output,
                                           struct mc_tensor *output_grad);
mc_status mc_pp_send_backward_recv_forward(const struct mc_pp_p2p *p,
                                           const struct mc_tensor *input_grad,
                                           struct mc_tensor *input);

/* The embedding group of initialize_model_parallel (first and last stage of each pipeline),
 * split from the pp group: *out is a comm.c handle to free with mc_pp_group_free, or NULL on
 * the middle stages and when pp == 1. Collective over the pp group. */
mc_status mc_pp_embedding_group_init(const struct mc_pp_p2p *p, void **out);
void mc_pp_group_free(void *comm);

/* ---- schedules.c ------------------------------------------------------------------------ */
/* One micro-batch on this stage; every tensor is a message of p2p.msg's dtype and shape.
 * forward: input is the previous stage's output (a host message the schedule received; NULL on
 * the first stage); the callback sets *output to what goes to the next stage (read on every
 * stage but the last, valid until the next call, in host or a backend's memory: the schedule
 * stages it to the host through the backend's copy op). backward: micro-batch k's forward
 * input again (the schedule keeps it; NULL on the first stage) and the grad of its output
 * (NULL on the last stage, where the loss starts backward); *input_grad goes to the previous
 * stage (read on every stage but the first), as *output. A returned tensor of another dtype or
 * shape is MC_ERR_SHAPE. Backward of k may follow forwards of later micro-batches.
 * set_grad_sync (optional,
 * NULL: none) is Megatron's no_sync_func / enable_grad_sync: the schedule says false before
 * the steps of every micro-batch but the last (grads accumulate locally) and true before the
 * last one's, whose backward starts the data-parallel grad reduction. */
struct mc_pp_step_ops {
    void *ctx;
    mc_status (*forward)(void *ctx, int64_t k, const struct mc_tensor *input,
                         struct mc_tensor *output);
    mc_status (*backward)(void *ctx, int64_t k, const struct mc_tensor *input,
                          const struct mc_tensor *output_grad, struct mc_tensor *input_grad);
    void (*set_grad_sync)(void *ctx, bool sync);
};

/* Buffers of a pipelined schedule, allocated once so the step loop allocates nothing. */
struct mc_pp_schedule {
    struct mc_pp_p2p p2p;
    int slots;        /* inputs kept for backward: at most warmup + 1 = pp - rank */
    void *inputs;     /* [slots] messages received, micro-batch k in slot k % slots */
    void *grad;       /* a message: the received output grad */
    void *send;       /* a message: an output or input grad in a backend's memory, staged to
                         the host (allocated when first needed) */
};

mc_status mc_pp_schedule_init(struct mc_pp_schedule *s, const struct mc_pp_p2p *p2p);
void mc_pp_schedule_free(struct mc_pp_schedule *s);

/* forward_backward_no_pipelining: F(k) then B(k) for each micro-batch (forward only: F), the
 * grad sync off (no_sync) for all but the last. The pp = 1 train step and evaluation. */
mc_status mc_pp_forward_backward_no_pipelining(struct mc_pp_schedule *s,
                                               const struct mc_pp_step_ops *ops,
                                               int64_t num_microbatches, bool forward_only);
/* forward_backward_pipelining_without_interleaving (1F1B): min(pp - rank - 1, M) warmup
 * forwards, M - warmup steady one-forward-one-backward steps, warmup cooldown backwards, in
 * Megatron's exact order with its exchanges. num_microbatches < 1 is MC_ERR_CONFIG. */
mc_status mc_pp_forward_backward_pipelining_without_interleaving(struct mc_pp_schedule *s,
                                                                 const struct mc_pp_step_ops *ops,
                                                                 int64_t num_microbatches,
                                                                 bool forward_only);

/* ---- schedules_interleaved.c ------------------------------------------------------------- */
/* One micro-batch on one model chunk (virtual stage chunk * pp + rank): as mc_pp_step_ops, with
 * the chunk. input is NULL on the first virtual stage (chunk 0 of stage 0), output_grad on the
 * last (chunk vp - 1 of the last stage). *output / *input_grad are copied to the host by the
 * schedule before the next call, so they need only live until then. */
struct mc_pp_chunk_ops {
    void *ctx;
    mc_status (*forward)(void *ctx, int chunk, int64_t k, const struct mc_tensor *input,
                         struct mc_tensor *output);
    mc_status (*backward)(void *ctx, int chunk, int64_t k, const struct mc_tensor *input,
                          const struct mc_tensor *output_grad, struct mc_tensor *input_grad);
};

struct mc_pp_vbuf;
/* The interleaved schedule's state: received activations and grads wait in per-chunk queues
 * of message buffers drawn from a pool that grows to the schedule's peak and is kept. */
struct mc_pp_interleaved {
    struct mc_pp_p2p p2p;   /* ring = true */
    int vp;                 /* model chunks on this rank (virtual pipeline size) */
    int64_t group;          /* microbatch_group_size_per_vp_stage (N); 0 = pp */
    bool overlap;           /* overlap_p2p_comm (Megatron's default) vs batched exchanges */
    struct mc_pp_vbuf **pool; /* every buffer made, and the free ones on top of the stack */
    int64_t n_pool, n_free, cap_pool;
};

mc_status mc_pp_interleaved_init(struct mc_pp_interleaved *s, const struct mc_pp_p2p *p2p,
                                 int vp, int64_t group, bool overlap);
void mc_pp_interleaved_free(struct mc_pp_interleaved *s);

/* forward_backward_pipelining_with_interleaving (core_v0.12.1, without
 * --overlap-p2p-communication-warmup-flush): Megatron's schedule table, warmup
 * (pp - rank - 1) * 2 + (vp - 1) * N forwards, steady 1F1B, cooldown, with its exchanges over
 * the pipeline ring (posted without waiting and awaited where Megatron waits with overlap,
 * one batched exchange per step without). Megatron's ValueError / RuntimeError for a
 * micro-batch count that does not fit N and pp are MC_ERR_CONFIG with its message. */
mc_status mc_pp_forward_backward_pipelining_with_interleaving(struct mc_pp_interleaved *s,
                                                              const struct mc_pp_chunk_ops *ops,
                                                              int64_t num_microbatches,
                                                              bool forward_only);

#endif /* MC_PIPELINE_PARALLEL_H */
