/* The parameter set: what the optimizer, DistributedDataParallel and the distributed optimizer
 * know of a model. Megatron's optimizer and DDP take the model's parameters (with the
 * attributes the model set on them: tensor_model_parallel, shared, shared_embedding, and the
 * no-weight-decay rule of get_param_groups) rather than the model itself; this is that list
 * for one model chunk, plus the contiguous blocks the parameters and grads live in (Megatron's
 * _ParamAndGradBuffer), the kernels to run on them and the communicators of the grad norm.
 * A model builds its set once and keeps it (mc_gpt_param_set for GPTModel), so the optimizer
 * and DDP need no model header: src/optimizer and src/distributed depend on this file only. */
#ifndef MEGATRON_PARAM_SET_H
#define MEGATRON_PARAM_SET_H

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One parameter as a named view into its model's single parameter block (and grad block).
 * Pointers are valid as long as the model. Order is Megatron's state_dict order. */
struct mc_param_view {
    const char *name;     /* "decoder.layers.0.self_attention.linear_qkv.weight" */
    int ndim;
    int64_t shape[2];     /* this rank's shard */
    int64_t numel;
    float *data;          /* [shape] */
    float *grad;          /* [shape], accumulated by backward */
    bool no_weight_decay; /* Megatron's rule: name ends in .bias or the tensor is 1-D */
    bool tensor_parallel; /* sharded across tp (counted by every rank in the grad norm) */
    int partition_dim;    /* -1 when not sharded */
    bool shared;          /* the last stage's copy of tied word embeddings (pp > 1): initialized
                             equal to the first stage's, its grad must be all-reduced with the
                             embedding grad (Megatron's embedding group); not in the grad norm */
    bool sequence_parallel; /* replicated across tp but its grad comes from this rank's
                               sequence shard only (norm weights/biases, row-parallel biases
                               under --sequence-parallel): summed over tp before the grad norm */
};

/* One entry of the set: the view and where it sits in the blocks. */
struct mc_param {
    struct mc_param_view view;
    int64_t offset;        /* view.data = param_block + offset, view.grad = grad_block + offset */
    bool shared_embedding; /* Megatron's shared_embedding attribute: a tied word embedding split
                              across pipeline stages (the first stage's and the last stage's
                              copy); the distributed optimizer gives it a bucket of its own */
};

/* DDP's callbacks into a model's forward and backward (Megatron's grad-accumulator
 * post-hooks and module forward pre-hooks), which the model calls at layer granularity
 * through mc_param_set_grad_ready / mc_param_set_param_use. ctx is the installer's. */
struct mc_param_hooks {
    /* the grads of params [first_ready, n_params) are final for this backward */
    mc_status (*grad_ready)(void *ctx, int64_t first_ready);
    /* forward is about to read params [0, end) */
    mc_status (*param_use)(void *ctx, int64_t end);
    void *ctx;
};

struct mc_backend; /* the backend the parameters' memory belongs to (src/backend/backend.h) */

struct mc_param_set {
    int64_t n_params;
    const struct mc_param *params; /* [n_params], state_dict (forward) order */
    /* the views are packed in order: the blocks hold exactly the parameters (n_elements =
     * the sum of numel), so one pass over a block touches every param or grad */
    int64_t n_elements;
    float *param_block, *grad_block; /* [n_elements] each, fp32: with a 16-bit model these are
                                        the main params and main grads (Megatron's
                                        fp32_from_float16 copies and main_grad buffer) */
    /* The dtype of Megatron's DDP grad buffer (main_grad): F32, or the 16-bit params dtype
     * (F16 for --fp16 without --accumulate-allreduce-grads-in-fp32, BF16 for --bf16
     * --grad-reduce-in-bf16). Then grad_block stays fp32 memory but holds exactly the 16-bit
     * buffer's values: every add, scaling and reduce into it is rounded to that dtype
     * (tensor_parallel's wgrad commit, ddp.c, distrib_optimizer.c). */
    enum mc_dtype grad_dtype;
    /* The weights forward and backward read: param_block itself (compute_dtype F32,
     * compute_block NULL), or a 16-bit copy in compute_dtype (BF16, F16) with param_block's
     * offsets, Megatron's bf16/fp16 model params: round(param_block) after every update
     * (mc_param_set_refresh_compute, megatron/optimizer.h). */
    enum mc_dtype compute_dtype;
    void *compute_block;
    struct mc_backend *be; /* the backend optimizer and DDP run their ops on */
    /* The grad norm and zero count (clip_grads.py) sum each element once over the
     * model-parallel (tp x pp) group: a parameter that is not tensor_parallel is a duplicate
     * on every tp rank but 0, and a shared one is the other stage's. */
    int tp_size, tp_rank, pp_size;
    void *tp_comm;              /* MPI_Comm * of the tp group (the group when pp_size == 1) */
    void *mp_comm;              /* MPI_Comm * of the tp x pp group, needed when pp_size > 1 */
    const char *mp_comm_setter; /* the call that attaches mp_comm, named when it is missing */
    struct mc_param_hooks hooks; /* installed by DDP (mc_ddp_init); all NULL = none */
};

/* Called by the model: the hooks, when installed. */
static inline mc_status mc_param_set_grad_ready(const struct mc_param_set *s, int64_t first_ready)
{
    return s->hooks.grad_ready ? s->hooks.grad_ready(s->hooks.ctx, first_ready) : MC_OK;
}

static inline mc_status mc_param_set_param_use(const struct mc_param_set *s, int64_t end)
{
    return s->hooks.param_use ? s->hooks.param_use(s->hooks.ctx, end) : MC_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_PARAM_SET_H */
