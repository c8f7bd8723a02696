/* GPTModel: the counterpart of megatron/core/models/gpt/gpt_model.py with the local layer spec
 * (get_gpt_layer_local_spec); its configuration (TransformerConfig) is in
 * megatron/transformer_config.h.
 *
 * Activations are sequence-first [s, b, h] as in Megatron. Parameters are named, shaped and
 * laid out as Megatron core's state dict (see docs/formats/ and spec §3.7): QKV rows grouped per
 * query group, SwiGLU fc1 = [gate; up] per tensor-parallel rank, `linear_proj` registered before
 * `linear_qkv`. Every linear layer is a column- or row-parallel layer and the embedding and loss
 * are vocab-parallel; with tensor_model_parallel_size == 1 the communication is a no-op.
 *
 * Dtypes (mixed precision): the model computes in dt = cfg->params_dtype (fp32, bf16 or fp16,
 * Megatron's params_dtype). Its activations and the logits are dt; the pipeline messages
 * (Megatron's pipeline_dtype) and their grads are the residual stream's dtype: dt, or fp32 with
 * fp32_residual_connection. What crosses the model's boundary as activations (the logits, a
 * stage's output and input grad, the previous stage's output and the next one's grad coming
 * in) is a tensor view (megatron/tensor.h) that carries its dtype, shape and memory, checked
 * where it comes in. The parameter views (mc_param_view.data, .grad) are always fp32: the main
 * params and main grads; with 16-bit dt the weights forward and backward read are the
 * parameter set's compute block (param_set.h), rounded from them. */
#ifndef MEGATRON_GPT_H
#define MEGATRON_GPT_H

#include "megatron.h"
#include "megatron/param_set.h"
#include "megatron/tensor.h"
#include "megatron/transformer_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mc_gpt_model mc_gpt_model;

/* Builds the model and initializes its weights from full master matrices in Megatron's
 * construction order, sliced for this tensor-parallel rank (so a seed gives the same model for
 * any layout). *out is owned by the caller: free with mc_gpt_model_free. */
MC_API mc_status mc_gpt_model_init(const struct mc_gpt_config *cfg, mc_gpt_model **out);
/* The same on a backend the caller created (src/backend/backend.h: mc_backend_create) and
 * frees after the model; mc_gpt_model_init creates a "cpu" backend of its own. */
struct mc_backend;
MC_API mc_status mc_gpt_model_init_backend(const struct mc_gpt_config *cfg,
                                           struct mc_backend *be, mc_gpt_model **out);
MC_API void mc_gpt_model_free(mc_gpt_model *m);
MC_API const struct mc_gpt_config *mc_gpt_model_config(const mc_gpt_model *m);

/* The parameters as named views (struct mc_param_view, megatron/param_set.h) into the model's
 * single parameter block (and grad block). Pointers are valid until mc_gpt_model_free. Order
 * is Megatron's state_dict order. */
MC_API int64_t mc_gpt_num_params(const mc_gpt_model *m);
MC_API struct mc_param_view mc_gpt_param(const mc_gpt_model *m, int64_t i);
/* Index of the named parameter, or -1. */
MC_API int64_t mc_gpt_param_index(const mc_gpt_model *m, const char *name);
/* Total elements in the parameter block (this rank): exactly the sum of the views' numel, which
 * are packed in state-dict order (the grad block has the same layout). */
MC_API int64_t mc_gpt_num_elements(const mc_gpt_model *m);
/* The model's parameter set (megatron/param_set.h): what the optimizer and data-parallel
 * code step and synchronise. Owned by the model, valid until mc_gpt_model_free; its
 * communicators follow mc_gpt_set_tp_comm / mc_gpt_set_mp_comm, and mc_ddp_init installs its
 * hooks there. */
MC_API struct mc_param_set *mc_gpt_param_set(mc_gpt_model *m);

/* One micro-batch, batch-first as pretrain_gpt's get_batch returns it. */
struct mc_gpt_batch {
    int64_t b, s;
    const int64_t *tokens;        /* [b, s] */
    const int64_t *labels;        /* [b, s]; NULL = return logits only */
    const int64_t *position_ids;  /* [b, s]; NULL = 0..s-1 (RoPE always uses 0..s-1) */
    const uint8_t *attention_mask;/* [b, 1, s, s], 1 = masked out; NULL = causal */
    /* The previous stage's output (mc_gpt_stage_tensor's dtype and shape, in host memory or
     * the model's backend's), pipeline stages after the first only (tokens are not read
     * there); NULL on the first stage. */
    const struct mc_tensor *hidden_in;
};

/* Forward. With labels: writes per-token losses [b, s] to `loss` (Megatron's GPTModel returns
 * these; the caller applies the loss mask). Without labels, logits stay inside the model and
 * mc_gpt_logits returns them. `training` enables dropout (deterministic per seed, layer, step
 * and micro-batch: the exact Philox streams are documented in src/models/gpt/gpt_model.c and
 * src/core/rng.h). Any b <= micro_batch_size and s <= seq_length. Token/label ids outside
 * [0, padded vocab) and position ids outside [0, max_position_embeddings) are MC_ERR_SHAPE.
 * Activations needed by backward are kept until the next forward into the same activation
 * slot (mc_gpt_use_slot). With
 * tensor_model_parallel_size > 1 this needs the TP communicator (MC_ERR_UNSUPPORTED until
 * parallel_state provides it). */
MC_API mc_status mc_gpt_forward(mc_gpt_model *m, const struct mc_gpt_batch *batch, bool training,
                                float *loss /* [b, s] or NULL */);
/* Logits of the last forward, sequence-first [s, b, V/tp] in params_dtype, as Megatron's output
 * layer makes them (the loss reads them widened to fp32, Megatron's output.float()), in the
 * model's backend's memory. mc_gpt_backward overwrites them with their gradient (rounded to
 * params_dtype). data is NULL before a forward and on stages before the last. */
MC_API struct mc_tensor mc_gpt_logits(const mc_gpt_model *m);
/* Backward from d(loss)/d(per-token loss) [b, s]. Parameter grads are ACCUMULATED (+=).
 * Needs the previous call to be a successful forward with labels (one backward per forward). */
MC_API mc_status mc_gpt_backward(mc_gpt_model *m, const float *dloss /* [b, s] */);
MC_API void mc_gpt_zero_grad(mc_gpt_model *m);

/* Attaches this rank's tensor-parallel communicator (an MPI_Comm *, which must outlive the
 * model): with tensor_model_parallel_size > 1, forward, backward and the optimizer's grad norm
 * all-reduce over it (Megatron's tensor_parallel/mappings.py regions). Its size and this
 * process's rank in it must equal the config's; MC_ERR_UNSUPPORTED in a build without MPI. */
MC_API mc_status mc_gpt_set_tp_comm(mc_gpt_model *m, void *mpi_comm);
/* finalize_model_grads' _allreduce_layernorm_grads: with sequence_parallel, sums the grads of
 * the parameters flagged sequence_parallel over the tensor-parallel group in one coalesced
 * all-reduce (no-op otherwise). Call after backward, before the grad norm. */
MC_API mc_status mc_gpt_sequence_parallel_grad_sync(mc_gpt_model *m);
/* Bytes of the activation block (every saved activation and scratch buffer of this rank;
 * activations in params_dtype, norm and loss statistics fp32). */
MC_API size_t mc_gpt_activation_bytes(const mc_gpt_model *m);

/* Pipeline stages. Every tensor between stages is mc_gpt_stage_tensor(m, b, s): [s, b, h]
 * ([s/tp, b, h], this rank's sequence shard, with sequence_parallel) of the residual stream's
 * dtype (Megatron's pipeline_dtype); that call gives its dtype and shape with data NULL.
 * A stage that is not the last produces its output hidden states (mc_gpt_stage_output, valid
 * until the next forward, in the backend's memory) instead of logits and loss; it takes the
 * grad of that output in mc_gpt_backward_stage instead of mc_gpt_backward (host or backend
 * memory; a dtype or shape other than the stage tensor's is MC_ERR_SHAPE). A stage that is not
 * the first reads batch->hidden_in and, after backward, offers the grad of it
 * (mc_gpt_stage_input_grad, valid until the next forward). The outputs' data is NULL where the
 * stage has none (the last stage's output, the first stage's input grad). */
MC_API struct mc_tensor mc_gpt_stage_tensor(const mc_gpt_model *m, int64_t b, int64_t s);
MC_API struct mc_tensor mc_gpt_stage_output(const mc_gpt_model *m);
MC_API mc_status mc_gpt_backward_stage(mc_gpt_model *m, const struct mc_tensor *dhidden_out);
MC_API struct mc_tensor mc_gpt_stage_input_grad(const mc_gpt_model *m);
/* The model-parallel (tp x pp) communicator, an MPI_Comm * that outlives the model: with
 * pipeline_model_parallel_size > 1 the optimizer's grad norm and zero count are reduced over it
 * (Megatron's model-parallel group); MC_ERR_UNSUPPORTED without it. */
MC_API mc_status mc_gpt_set_mp_comm(mc_gpt_model *m, void *mpi_comm);

/* Activation slots: the model keeps the activations backward needs (and the micro-batch's
 * shapes, masks, ids and dropout stream) of up to n forwards, one per slot, so a pipeline stage
 * can run the forwards of several micro-batches before their backwards without recomputing
 * them. mc_gpt_use_slot selects the slot the next forward writes and the next backward,
 * mc_gpt_stage_output and mc_gpt_logits read; each slot takes one backward per forward.
 * Default: 1 slot, slot 0 (then the attention mask pointer must stay valid until backward;
 * with more slots the model copies the mask). Setting the count drops what the slots held
 * (MC_ERR_NOMEM keeps the old slots). Weights, grads, scratch and the input grad are shared. */
#define MC_GPT_MAX_SLOTS 4096
MC_API mc_status mc_gpt_set_activation_slots(mc_gpt_model *m, int n);
MC_API int mc_gpt_activation_slots(const mc_gpt_model *m);
MC_API mc_status mc_gpt_use_slot(mc_gpt_model *m, int slot);
/* Bytes of one slot (mc_gpt_activation_bytes = shared scratch + slots x this). */
MC_API size_t mc_gpt_slot_activation_bytes(const mc_gpt_model *m);
/* The same two counts for a config without building the model (its parameters are not
 * allocated): *shared = the scratch and the full-recompute work area, *per_slot = one
 * in-flight micro-batch. MC_ERR_CONFIG when mc_gpt_config_validate refuses the config. */
MC_API mc_status mc_gpt_config_activation_bytes(const struct mc_gpt_config *cfg, size_t *shared,
                                                size_t *per_slot);

/* Dropout step counter: advance once per iteration so every step draws fresh masks; also
 * resets the micro-batch counter (training forwards within a step draw different masks). */
MC_API void mc_gpt_set_step(mc_gpt_model *m, int64_t step);

/* Mixture of experts (cfg.num_moe_experts > 0; no-ops for a dense model). The scale of the aux
 * losses' grads in the next backwards: MoEAuxLossAutoScaler.set_loss_scale (the schedule sets
 * loss scale / num micro-batches before each forward). The tracker: per global layer, the
 * aux losses of this chunk's training forwards divided by their coefficients
 * (save_to_aux_losses_tracker); which = 0 load_balancing_loss, 1 z_loss; NULL for a dense
 * model. Cleared by mc_gpt_moe_tracker_clear (track_moe_metrics clears after each iteration). */
MC_API void mc_gpt_set_moe_aux_loss_scale(mc_gpt_model *m, float scale);
MC_API const float *mc_gpt_moe_tracker(const mc_gpt_model *m, int which);
MC_API void mc_gpt_moe_tracker_clear(mc_gpt_model *m);

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_GPT_H */
