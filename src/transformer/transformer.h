/* Transformer internals shared by the layer code (attention.c, mlp.c, transformer_layer.c) and
 * the GPT model (models/gpt/gpt_model.c): derived sizes, per-layer weight views, saved
 * activations and the per-call context. Private header.
 *
 * Layout conventions: activations are sequence-first, token t = s_index * b + b_index, so a
 * [T, h] matrix is Megatron's [s, b, h]. Weights are [out, in] (torch layout).
 *
 * Dtypes: activations (saved and scratch) and the weights the layers read are `void *` in the
 * context's dt (params_dtype: fp32, or bf16/fp16 with the weights in the parameter set's
 * compute block); norm statistics are fp32; the weight grads are the fp32 main grads (16-bit
 * grads go through the tensor-parallel group's wgrad temporary, tensor_parallel.h). */
#ifndef MC_TRANSFORMER_H
#define MC_TRANSFORMER_H

#include "backend/backend.h"
#include "megatron/transformer_config.h"
#include "tensor_parallel/tensor_parallel.h"

struct mc_moe_acts;  /* transformer/moe/moe.h */
struct mc_moe_state;

/* Sizes derived from a validated config; _l = this tensor-parallel rank's share. */
struct mc_tfm_dims {
    int64_t L;                       /* layers on this pipeline stage */
    int64_t layer_offset;            /* global index of this stage's first layer */
    bool first_stage, last_stage;    /* embeddings / final norm, output layer and loss */
    int64_t h, np, ng, hn, ffn, V, tp, tp_rank;
    int64_t np_l, ng_l, per_group;   /* per_group = np / ng query heads per key/value head */
    int64_t qkv_l;                   /* (np + 2 ng) hn / tp: linear_qkv rows on this rank */
    int64_t ctx_l;                   /* np_l * hn: linear_proj input width on this rank */
    int64_t ffn_l, fc1_l;            /* ffn / tp; fc1 rows (2 ffn_l when gated) */
    int64_t V_l;                     /* padded vocab / tp */
    int64_t rot_dim;                 /* RoPE channels (0 without RoPE) */
    int64_t b_max, s_max;
    bool gated, layernorm, qkv_bias, linear_bias;
    bool qk_layernorm;               /* q_layernorm / k_layernorm over hn (attention.c) */
    int64_t qk_rows;                 /* (np_l + ng_l) per token: the heads they normalize */
    /* mixture of experts (0 without): experts, top-k, one expert's widths, the rows of the
     * expert-ordered tokens (b_max s_max topk) */
    int64_t E, topk, moe_ffn_l, moe_fc1_l, moe_rows;
};

/* Pointers into the weights the layers compute with (dt) for one layer; NULL where absent. */
struct mc_tfm_layer_weights {
    void *ln1_w, *ln1_b;   /* input_layernorm [h] */
    void *proj_w, *proj_b; /* self_attention.linear_proj [h, ctx_l], [h] */
    void *qkv_w, *qkv_b;   /* self_attention.linear_qkv [qkv_l, h], [qkv_l] */
    void *ln2_w, *ln2_b;   /* pre_mlp_layernorm [h] */
    void *fc1_w, *fc1_b;   /* mlp.linear_fc1 [fc1_l, h], [fc1_l] */
    void *fc2_w, *fc2_b;   /* mlp.linear_fc2 [h, ffn_l], [h] */
    void *qln_w, *qln_b;   /* self_attention.q_layernorm [hn] (--qk-layernorm) */
    void *kln_w, *kln_b;   /* self_attention.k_layernorm [hn] */
    /* a MoE layer (NULL otherwise; fc1/fc2 above are NULL then): mlp.router.weight [E, h] and
     * mlp.experts.local_experts.0.linear_fc1.weight, the experts' weights following it packed
     * (fc1 [moe_fc1_l, h], fc2 [h, moe_ffn_l] per expert: mc_moe_expert_numel) */
    void *router_w, *experts_w;
};

/* The same layer's fp32 main grads (the grad block). */
struct mc_tfm_layer_grads {
    float *ln1_w, *ln1_b, *proj_w, *proj_b, *qkv_w, *qkv_b;
    float *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    float *qln_w, *qln_b, *kln_w, *kln_b;
    float *router_w, *experts_w;
};

/* What one layer's forward keeps for its backward (sized for b_max x s_max; the [T, h]
 * tensors and the norm statistics for b_max x s_max / tp with sequence parallelism). The norm outputs
 * and the MLP activation are not kept: backward recomputes them (elementwise, cheap) into
 * scratch, which saves 2 h + ffn floats per token and layer. */
struct mc_tfm_layer_acts {
    void *x_in;             /* [T, h] layer input (first residual) */
    float *ln1_mean, *ln1_rstd; /* [T] */
    void *qkv;              /* [T, qkv_l] linear_qkv output with bias, RoPE applied to q and k */
    void *probs;            /* [b, np_l, s, s] softmax output before dropout (NULL with
                             * flash attention) */
    float *lse;             /* [b, np_l, s] softmax row log-sum-exp (flash attention only) */
    void *ctx;              /* [T, ctx_l] */
    uint8_t *keep_attn_out; /* [T, h] hidden-dropout keep mask after linear_proj */
    void *x_mid;            /* [T, h] second residual */
    float *ln2_mean, *ln2_rstd; /* [T] */
    void *fc1;              /* [T, fc1_l] linear_fc1 output WITHOUT bias (fused into the act) */
    uint8_t *keep_mlp_out;  /* [T, h] */
    /* --qk-layernorm: the query rows [T np_l, hn] then the key rows [T ng_l, hn] of linear_qkv's
     * output before their norms, and the norms' statistics [T qk_rows] (NULL without) */
    void *qk_in;
    float *qk_mean, *qk_rstd;
    /* a MoE layer: the routing (host memory, moe.h; NULL otherwise); fc1 then holds the
     * [T k, moe_fc1_l] expert rows */
    struct mc_moe_acts *moe;
};

/* Buffers reused by every layer (never read across layers). */
struct mc_tfm_scratch {
    /* h1, h2 are always [T, h] (the sequence-parallel all-gather / reduce-scatter work
     * buffers); norm_out and the norm statistics hold T_sp rows. */
    void *attn_a;        /* [b, np_l, s, s] dropped probs (fwd), Pd (bwd); NULL with flash */
    void *attn_b;        /* [b, np_l, s, s] grad of probs (bwd); NULL with flash */
    uint8_t *attn_keep;  /* [b, np_l, s, s] attention-dropout keep mask; NULL with flash */
    void *attn_probs;    /* [b, np_l, s, s] selective recompute: every layer's probs, written
                            by its forward and again just before its backward (NULL without,
                            and with flash attention, which keeps none) */
    void *h1, *h2;       /* [T, h] */
    void *norm_out;      /* [T, h] a norm's output (forward, and recomputed in backward) */
    float *norm_mean, *norm_rstd; /* [T] statistics of a recomputed norm (equal to the saved) */
    void *gamma1;        /* [max(h, hn)] 1 + weight of a zero-centered norm (NULL without) */
    /* --fp32-residual-connection (NULL without): fp32 [T, h] work for the widened operands of
     * the residual adds and the hidden-state norms, and [h] widened norm weight / bias and
     * their fp32 grads (db32 = dw32 + h) */
    float *r32a, *r32b, *w32, *b32, *dw32, *db32;
    void *act;           /* [T, ffn_l] the MLP activation (forward, recomputed in backward) */
    void *dqkv;          /* [T, qkv_l] */
    void *dctx;          /* [T, ctx_l] */
    void *dfc1;          /* [T, fc1_l] */
    void *dact;          /* [T, ffn_l] */
    void *qk_a, *qk_b;   /* [T qk_rows, hn] q/k norm outputs (fwd), their grads (bwd) */
    /* MoE layers (NULL without): act, dact, dfc1 above hold max(T, T k) rows */
    void *moe_x, *moe_y; /* [T k, h] the expert-ordered rows (input; output / grads) */
    void *moe_logits;    /* [T, E] router logits (dt); their grad in backward */
    float *moe_dot;      /* [T k] the probability grads (fp32) */
};

/* One forward or backward call. */
struct mc_tfm_ctx {
    struct mc_backend *be;
    enum mc_dtype dt;         /* activations and weights (params_dtype) */
    enum mc_dtype rdt;        /* the residual stream: dt, or F32 (--fp32-residual-connection) */
    const struct mc_tp_group *tp;
    const struct mc_gpt_config *cfg;
    const struct mc_tfm_dims *d;
    struct mc_tfm_scratch *scr;
    int64_t b, s, T;
    /* The activations outside the tensor-parallel regions (norms, residuals, hidden dropout):
     * T_sp rows starting at global token sp_first; with sequence parallelism this rank's
     * [s/tp, b] shard (T_sp = T / tp, sp_first = tp_rank * T_sp), else all T rows from 0. */
    int64_t T_sp, sp_first;
    const uint8_t *attn_mask; /* [b, 1, s, s], 1 = masked; NULL = causal */
    const float *rope_cos, *rope_sin; /* [s_max, rot_dim] */
    bool hidden_dropout, attention_dropout; /* active this call */
    bool recompute_core_attention; /* selective recompute: backward reruns core attention
                                      (the layer's probs are not kept) */
    uint64_t seed;
    uint32_t step, micro;     /* Philox counter word c2 and the micro-batch in c3 (rng.h) */
    bool training;            /* a training forward (the router's aux losses) */
    struct mc_moe_state *moe; /* the model's MoE state (moe.h; NULL for a dense model) */
};

/* dropout.c: the Philox stream of a dropout site in this call (gpt_model.c documents the
 * counters), and the keep mask of `n` of its elements from element `first`, drawn by the
 * backend. */
struct mc_dropout_stream mc_tfm_dropout_stream(const struct mc_tfm_ctx *c, uint32_t site);
void mc_tfm_dropout_mask(const struct mc_tfm_ctx *c, uint8_t *keep, uint32_t site, int64_t first,
                         int64_t n, float p);
/* Dropout sites (the low 24 bits of Philox counter word c3). */
#define MC_TFM_SITE_EMBEDDING 0u
#define MC_TFM_SITE_ATTN_PROBS(l) (1u + 3u * (uint32_t)(l))
#define MC_TFM_SITE_ATTN_OUT(l) (2u + 3u * (uint32_t)(l))
#define MC_TFM_SITE_MLP_OUT(l) (3u + 3u * (uint32_t)(l))

/* attention.c: RoPE tables and core attention (DotProductAttention, local spec). */
/* MindSpeed-LLM's ALiBi slopes (get_slopes of mindspeed_llm/tasks/models/common/alibi.py) of
 * heads first .. first + n - 1 of heads_total, as fp32: for a power of two p,
 * 2^(-8 / p) ^ (k + 1); otherwise the p = 2^floor(log2 heads) ones, then every other one of
 * the 2p ones. The arithmetic in double (Python floats), rounded once. */
void mc_tfm_alibi_slopes(float *out, int64_t heads_total, int64_t first, int64_t n);
void mc_tfm_rope_tables(float *cos, float *sin, const struct mc_gpt_config *cfg, int64_t rot_dim,
                        int64_t s_max);
void mc_tfm_rope_apply(const struct mc_tfm_ctx *c, void *qkv, bool backward);
/* --qk-layernorm: q_layernorm / k_layernorm on the query and key heads of a->qkv in place
 * (keeping their inputs in a->qk_in), and backward on the grad of the normed heads in dqkv. */
void mc_tfm_qk_norm_forward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                            struct mc_tfm_layer_acts *a);
void mc_tfm_qk_norm_backward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                             const struct mc_tfm_layer_grads *g,
                             const struct mc_tfm_layer_acts *a, void *dqkv);
void mc_tfm_core_attention_forward(const struct mc_tfm_ctx *c, int64_t layer,
                                   struct mc_tfm_layer_acts *a);
void mc_tfm_core_attention_backward(const struct mc_tfm_ctx *c, int64_t layer,
                                    const struct mc_tfm_layer_acts *a, const void *dctx,
                                    void *dqkv);

/* mlp.c: the activation of the MLP (bias fused), forward and backward. */
void mc_tfm_mlp_act_forward(const struct mc_tfm_ctx *c, void *y, const void *u,
                            const void *bias);
void mc_tfm_mlp_act_backward(const struct mc_tfm_ctx *c, void *du, const void *dy,
                             const void *u, const void *bias);

/* transformer_layer.c: one pre-norm layer. forward reads a->x_in, writes x_out [T, h];
 * backward takes dx [T, h] = grad of the layer output and leaves the grad of its input there. */
mc_status mc_tfm_layer_forward(const struct mc_tfm_ctx *c, int64_t layer,
                               const struct mc_tfm_layer_weights *w,
                               struct mc_tfm_layer_acts *a, void *x_out);
mc_status mc_tfm_layer_backward(const struct mc_tfm_ctx *c, int64_t layer,
                                const struct mc_tfm_layer_weights *w,
                                const struct mc_tfm_layer_grads *g,
                                const struct mc_tfm_layer_acts *a, void *dx);

/* norm.c: LayerNorm or RMSNorm per the config (b may be NULL for RMSNorm). dw, db are the
 * fp32 main grads (16-bit: the op's dt grads go through the wgrad temporary). */
void mc_tfm_norm_forward(const struct mc_tfm_ctx *c, void *y, float *mean, float *rstd,
                         const void *x, const void *w, const void *b);
void mc_tfm_norm_backward(const struct mc_tfm_ctx *c, void *dx, float *dw, float *db,
                          const void *dy, const void *x, const void *w, const float *mean,
                          const float *rstd);
/* The same norm on `rows` rows of width n (the q/k layernorms: rows of hn). */
void mc_tfm_norm_rows_forward(const struct mc_tfm_ctx *c, void *y, float *mean, float *rstd,
                              const void *x, const void *w, const void *b, int64_t rows,
                              int64_t n);
void mc_tfm_norm_rows_backward(const struct mc_tfm_ctx *c, void *dx, float *dw, float *db,
                               const void *dy, const void *x, const void *w, const float *mean,
                               const float *rstd, int64_t rows, int64_t n);

/* The hidden-dropout scale 1 / (1 - p) as the dropout multiplies by it: with 16-bit
 * activations torch's CPU dropout builds its mask in dt, so the scale is rounded to dt
 * (bf16 1/0.9 = 1.109375). transformer_layer.c. */
float mc_tfm_dropout_scale(enum mc_dtype dt, float p);

#endif /* MC_TRANSFORMER_H */
