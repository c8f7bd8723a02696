/* GPTModel internals shared by gpt_model.c (construction, parameters, init) and gpt_forward.c
 * (forward, loss, backward). Private header. */
#ifndef MC_GPT_MODEL_H
#define MC_GPT_MODEL_H

#include "megatron/gpt.h"
#include "transformer/transformer.h"

#define MC_GPT_NAME_MAX 96

enum mc_gpt_init { MC_INIT_NORMAL, MC_INIT_SCALED_NORMAL, MC_INIT_ONE, MC_INIT_ZERO };

struct mc_gpt_param {
    struct mc_param_view view;
    char name[MC_GPT_NAME_MAX];
    int64_t offset;        /* into param_block / grad_block, in floats (views are packed) */
    enum mc_gpt_init init;
    int64_t ordinal;       /* construction order of the master matrix (RNG stream) */
    bool gated;            /* SwiGLU fc1: rows are [gate_r; up_r] */
};

/* Where a parameter's initial values come from. */
struct mc_gpt_param_spec {
    const char *name;
    int ndim;
    int64_t d0, d1;
    enum mc_gpt_init init;
    int64_t ordinal;
    int partition_dim;
    bool gated, shared;
};

struct mc_gpt_model {
    struct mc_gpt_config cfg; /* validated */
    struct mc_tfm_dims dims;
    struct mc_tp_group tp;
    void *mp_comm; /* model-parallel (tp x pp) communicator for the grad norm when pp > 1 */
    struct mc_backend *be; /* every op and buffer of the model goes through it */
    bool owns_be;          /* created by mc_gpt_model_init (freed with the model) */

    int64_t n_params, n_elements;
    struct mc_gpt_param *params; /* state_dict order */
    /* dt = cfg.params_dtype. param_block / grad_block: the fp32 main params and main grads;
     * compute_block: the dt weights forward and backward read (Megatron's bf16/fp16 model
     * params, same offsets), NULL with fp32, where the model computes on param_block. */
    enum mc_dtype dt;
    size_t esize;                    /* mc_dtype_size(dt) */
    /* the residual stream (layer inputs and outputs, x_mid, their grads): dt, or F32 with
     * --fp32-residual-connection and 16-bit params */
    enum mc_dtype rdt;
    size_t rsize;                    /* mc_dtype_size(rdt) */
    float *param_block, *grad_block;
    void *compute_block;
    /* the weights the model reads (dt: compute_block, or param_block with fp32) and the
     * fp32 main grads */
    void *word_w, *pos_w, *lnf_w, *lnf_b, *out_w;
    float *word_g, *pos_g, *lnf_g, *lnf_bg, *out_g;
    struct mc_tfm_layer_weights *layer_w; /* [L] */
    struct mc_tfm_layer_grads *layer_g;   /* [L] */

    float *sp_grads;                 /* coalescing buffer of the sequence-parallel grads */
    int64_t sp_numel;
    void *act_block;                 /* every buffer below (shared and per slot) lives in it */
    size_t act_bytes, slot_bytes;    /* the whole block; one slot's part of it */
    int n_slots;                     /* activation slots (mc_gpt_set_activation_slots) */
    int cur;                         /* the slot forward / backward use (mc_gpt_use_slot) */
    struct mc_gpt_slot *slots;       /* [n_slots] */
    /* Full activation recompute (cfg.recompute_granularity FULL, gpt_forward.c): the layers
     * of a recomputed group keep their activations in this work area, shared by every slot
     * and rebuilt by rerunning the group before its backward; a slot keeps only each group's
     * input. rc_work_layers = the longest group (0 without full recompute). */
    int64_t rc_work_layers;
    struct mc_tfm_layer_acts *rc_work; /* [rc_work_layers] */
    void *rc_out;                    /* [Ts, h] the rerun group's output (not needed again) */
    /* shared by the slots (never read across calls) */
    struct mc_tfm_scratch scratch;
    /* T = micro_batch_size x seq_length tokens; Ts = T / tp with sequence parallelism, else T */
    float *xent_target, *loss_sf, *dloss_sf; /* [T] */
    void *dx;                        /* [Ts, h]; after backward on a non-first stage: the input
                                        grad */
    float *rope_cos, *rope_sin;      /* [s_max, rot_dim] */
    /* 16-bit dt only (NULL with fp32): */
    float *logits_f32;               /* [T, V_l] the logits widened for the fp32 cross-entropy
                                        (output.float()), then their fp32 grad */
    void *wgrad;                     /* dt weight-grad temporary: max(largest param, 2 h) */
    void *tied_wgrad;                /* [V_l, h] the tied word embedding's dt grad, summed over
                                        its two uses (output layer, embedding) on one stage */
    float *tp_red;                   /* fp32 tensor-parallel reduction scratch (tp > 1) */

    int64_t step;
    uint32_t micro_next;
    /* mixture of experts (NULL for a dense model): the tracker and host scratch, and the
     * routing records of every slot's MoE layers ([n_slots L], transformer/moe/moe.h) */
    struct mc_moe_state *moe;
    struct mc_moe_acts *moe_acts;
    int64_t n_moe_acts;

    /* what the optimizer and DDP see (mc_gpt_param_set): built once the params are, holds
     * the mp communicator and DDP's hooks (data-parallel overlap; all NULL = off) */
    struct mc_param_set pset;
    struct mc_param *pset_params; /* [n_params] */
};

/* Everything backward needs of one forward: the activations, keep masks, ids, shapes and the
 * dropout stream (step, micro) of the micro-batch, so several micro-batches can be in flight
 * (pipeline stages keep each one's activations until its backward). */
struct mc_gpt_slot {
    struct mc_tfm_layer_acts *acts;  /* [L]; a recomputed layer's point into the work area */
    void **ckpt;                     /* [L] distribute_saved_activations: this rank's 1/tp of
                                        the input of each recomputed group (at its first
                                        layer; NULL elsewhere) */
    uint8_t *emb_keep;               /* [Ts, h] embedding dropout keep mask */
    void *x_final;                   /* [Ts, h] last layer output (a non-last stage's output) */
    void *lnf;
    float *lnf_mean, *lnf_rstd;
    void *logits;                    /* [T, V_l] (dt); the grad in place after backward */
    float *xent_max, *xent_sumexp;   /* [T] */
    int64_t *ids_sf, *pos_sf, *labels_sf; /* [T] sequence-first */
    uint8_t *mask_copy;              /* [b, s, s] the attention mask (with more than one slot) */
    /* the forward held, for backward */
    bool valid, labels, training;
    int64_t b, s;
    uint32_t step, micro;
    const uint8_t *mask;
};

/* The grads of params [first_ready, n_params) (state_dict order) are final for this
 * backward; called by backward after the head, after each layer and after the embeddings. */
static inline mc_status mc_gpt_hook_grad_ready(struct mc_gpt_model *m, int64_t first_ready)
{
    return mc_param_set_grad_ready(&m->pset, first_ready);
}

/* Forward is about to read params [0, end) (state_dict order). */
static inline mc_status mc_gpt_hook_param_use(struct mc_gpt_model *m, int64_t end)
{
    return mc_param_set_param_use(&m->pset, end);
}

/* Full recompute: the first layer of the recomputed group local layer l belongs to, or -1
 * when l keeps its activations; and one past that group's last layer. */
int64_t mc_gpt_recompute_group(const struct mc_gpt_model *m, int64_t l);
int64_t mc_gpt_recompute_group_end(const struct mc_gpt_model *m, int64_t first);

/* Bytes of the 16-bit weight-grad temporaries (0 in fp32): the dt grad of the largest
 * parameter and, when this stage holds both uses of the tied word embedding, their dt sum. */
size_t mc_gpt_wgrad_temp_bytes(const struct mc_gpt_model *m);

/* Index of the first parameter of local layer l (l = L: the first one after the layers). */
int64_t mc_gpt_layer_first_param(const struct mc_gpt_model *m, int64_t l);

#endif /* MC_GPT_MODEL_H */
