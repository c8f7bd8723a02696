/* The backend seam (private, versioned), on the model of ggml-backend and cuBLAS: a backend is
 * an object (struct mc_backend: its ops table and its own state) created once and handed to
 * the model, which reaches every numeric operation through be->ops->op(be, ...), forward and
 * backward, and keeps its tensors in buffers the backend allocates. The CPU backend (cpu/)
 * binds each op to a kernel table: the scalar references (kernels/<op>_ref.c) or, where the
 * CPU supports it, the fast kernels (kernels/<op>_avx512.c) with the same semantics. A device
 * backend fills the same table (as NPU backends implement Megatron's ops).
 *
 * Dtypes: every op on tensors says their dtype (enum mc_dtype, include/megatron.h); GEMM takes
 * A/B/C dtypes and a compute type, as cublasGemmEx does. supports() tells which combinations a
 * backend implements; calling an op with one it does not support stops the process with a
 * message naming the op and dtype. Statistics (norm mean/rstd, cross-entropy max/sumexp, the
 * per-token dloss and loss mask) and optimizer state are fp32 whatever the tensor dtype.
 *
 * Conventions: outputs first, then inputs, then sizes. Row-major. Backward ops ADD (+=) into
 * parameter grads (dw, db) and OVERWRITE activation grads (dx). Ops trust their arguments:
 * shapes are checked once at the API boundary. Every op gives bit-identical results for any
 * thread count (fixed owners / fixed chunks summed in order). Tensor pointers are backend
 * memory (the CPU backend's buffers are host memory); host data enters and leaves through the
 * copy ops. Ops run in order on the backend's stream; sync() waits for all of them. */
#ifndef MC_BACKEND_H
#define MC_BACKEND_H

#include "megatron.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_BACKEND_VERSION 6
#define MC_BACKEND_MEASURES 4 /* slots of measure() / adopt() */

struct mc_backend_ops;

/* Where the 16-bit elementwise ops round (fp32 is never affected). The reference Megatron
 * numbers differ by platform, and a user aligns with the one their references came from:
 * FUSED      Megatron on a GPU: each op widens its 16-bit inputs, computes in fp32 and rounds
 *            each output once (the fused bias-GELU/SwiGLU/dropout-add kernels, TE/Apex norms,
 *            fp32 norm statistics). The default.
 * TORCH_CPU  Megatron run by PyTorch on a CPU: the fused functions execute as their separate
 *            16-bit torch ops (each rounds; an added Python scalar is rounded to the dtype
 *            first), LayerNorm keeps its mean and rstd in the dtype and sums its weight and
 *            bias grads row by row into 16-bit accumulators (torch's CPU kernel with one
 *            intra-op thread). RMSNorm is torch 2.x's fp32-inside op either way.
 * docs/alignment.md section 4b. */
enum mc_rounding { MC_ROUNDING_FUSED, MC_ROUNDING_TORCH_CPU };

/* A backend instance. ops and the fields below are set at creation and never change, except
 * rounding, which set_rounding() sets once before the first op. */
struct mc_backend {
    const struct mc_backend_ops *ops;
    const char *name;          /* the kernels it runs: "cpu-ref", "cpu-avx512", ... */
    int n_threads;             /* worker threads its ops use (OpenMP threads on the CPU) */
    void *impl;                /* the backend's private state */
    enum mc_rounding rounding; /* MC_ROUNDING_FUSED unless set_rounding() chose another */
};

/* Ops, for supports(). The dtype list each one takes is given next to it. */
enum mc_backend_op {
    MC_OP_BUFFER,           /* {}: alloc, free, copies, set, sync */
    MC_OP_GEMM,             /* {A, B, C, compute} */
    MC_OP_LAYERNORM,        /* {x}: y, x, w, b, dx, dy, dw, db share it */
    MC_OP_RMSNORM,          /* {x} */
    MC_OP_GELU_TANH,        /* {x} */
    MC_OP_GELU_ERF,         /* {x} */
    MC_OP_SQUARED_RELU,     /* {x} */
    MC_OP_SWIGLU,           /* {x} */
    MC_OP_BIAS_GRAD,        /* {dy} */
    MC_OP_BIAS_DROPOUT_ADD, /* {x} */
    MC_OP_MASKED_SOFTMAX,   /* {scores} */
    MC_OP_ROPE,             /* {t} */
    MC_OP_EMBEDDING,        /* {w} */
    MC_OP_CROSS_ENTROPY,    /* {logits} */
    MC_OP_SUMSQ,            /* {x} */
    MC_OP_COUNT_ZEROS,      /* {x} */
    MC_OP_SCALE,            /* {x} */
    MC_OP_ADAMW,            /* {param, grad} */
    MC_OP_SGD,              /* {param, grad} */
    MC_OP_ATTENTION,        /* {qkv} */
    MC_OP_DROPOUT_MASK,     /* {keep mask} (MC_DTYPE_U8) */
    MC_OP_FILL_NORMAL,      /* {out} */
    MC_OP_MASKED_LOSS,      /* {loss} */
    MC_OP_CONVERT,          /* {dst, src}: each F32, BF16 or F16 */
    MC_OP_ACCUMULATE,       /* {dst, src}: each F32, BF16 or F16 */
    MC_OP_FLASH_ATTENTION,  /* {qkv} */
    MC_OP_COUNT
};

/* The Philox stream of one dropout site (core/rng.h: key seed, counter words c1_hi, c2, c3). */
struct mc_dropout_stream {
    uint64_t seed;
    uint32_t c1_hi, c2, c3;
};

/* Core attention of one layer, DotProductAttention of Megatron's local spec:
 * probs = softmax(where(mask, -10000, (q k^T * alpha) * mult)), dropped out, ctx = probs @ v.
 * qkv is the fused linear_qkv output [s, b, qkv_ld] (token t = s_index * b + b_index), each
 * token's row laid out per key/value group: [heads/groups query heads | k | v], hn each; query
 * head i uses the k and v of its group (GQA). ctx [s, b, ctx_ld] holds head i at column i*hn.
 * 16-bit dt: the rounding points of DotProductAttention on 16-bit tensors (fp32 accumulation in
 * every bmm): scores = round(alpha q k^T) (baddbmm), softmax in fp32 of the widened scores,
 * probs rounded, dropout on the 16-bit probs (keep ? round(p * round(1/(1-p_drop))) : 0, torch's
 * CPU dropout noise tensor), ctx = round(probs @ v). Backward: dprobs = round(dctx v^T),
 * dv = round(probs^T dctx) per head, dropout's mask and scale again with one rounding, softmax
 * backward in fp32 with one rounding, dq = round(round(dscores k) * alpha) (autograd's baddbmm
 * backward multiplies the bmm output by alpha; once when alpha is 1), dk likewise; the dk and
 * dv of a group's query heads (each rounded) are summed in fp32 in head order and rounded once
 * (the backward of repeat_interleave in torch 2.x, a sum over the expanded dim). */
struct mc_attention_desc {
    enum mc_dtype dt;                /* qkv, probs, ctx and their grads */
    int64_t b, s;                    /* batch rows; sequence length (queries = keys) */
    int64_t heads, groups, hn;       /* query heads, key/value groups (of this rank), head dim */
    int64_t qkv_ld, ctx_ld;          /* row widths of qkv and ctx */
    float alpha;                     /* 1 / norm_factor on the scores */
    float mult;                      /* softmax input scale (query-key layer scaling), else 1 */
    const uint8_t *mask;             /* [b, s, s] 1 = masked; NULL = causal */
    int64_t window;                  /* flash ops only: query i also masks keys before i - window
                                      * (sliding window); 0 = none. The unfused ops take a
                                      * window in mask. */
    float dropout;                   /* attention-dropout probability; 0 = none */
    struct mc_dropout_stream rng;    /* the site's stream; element (b_index, global head,
                                      * query, key) of the [b, heads_total, s, s] probs */
    int64_t heads_total, head_first; /* global head count; this rank's first head */
    /* MindSpeed-LLM's ALiBi (--position-embedding-type alibi): NULL = none; else the fp32
     * slopes of this rank's heads [heads] (host memory, like the descriptor). Score (i, j) of
     * head h gets bias / mult added before the softmax's scaling by mult (so the softmax input
     * is q k^T / sqrt(hn) + bias), bias = slope_h * (j - i) with alibi_square (the [s, s] form
     * of --square-alibi-mask), else slope_h * j (the [1, s] row form: the same softmax up to
     * rounding, as softmax ignores a row's constant). 16-bit dt: the bias rounded to dt first
     * (MindSpeed casts its alibi tensor to params_dtype). Masked scores still get -10000. */
    const float *alibi_slopes;
    bool alibi_square;
    bool softmax_in_fp32;            /* 16-bit dt only: Megatron's --attention-softmax-in-fp32
                                      * (forced by query-key layer scaling): the softmax backward
                                      * reads the fp32 probs (recomputed) instead of the 16-bit
                                      * ones. The forward is the same bits either way. */
};
/* Work buffers of the attention ops, each [b, heads, s, s] elements of d->dt (backend memory). */
struct mc_attention_work {
    void *a, *b;
    uint8_t *keep;
};

struct mc_backend_ops {
    int version;      /* MC_BACKEND_VERSION */
    const char *name; /* the table: "cpu", ... */

    /* true when the backend implements op for the dtype list documented at enum
     * mc_backend_op (n entries). */
    bool (*supports)(const struct mc_backend *be, enum mc_backend_op op,
                     const enum mc_dtype *dtypes, int n);

    /* ---- buffers ---- */
    /* bytes of backend memory, aligned for any dtype; NULL when out of memory */
    void *(*alloc)(struct mc_backend *be, size_t bytes);
    void (*free)(struct mc_backend *be, void *p); /* free(NULL) does nothing */
    void (*copy_to_backend)(struct mc_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*copy_to_host)(struct mc_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(struct mc_backend *be, void *dst, const void *src, size_t bytes);
    void (*set)(struct mc_backend *be, void *dst, int byte, size_t bytes); /* memset */
    void (*sync)(struct mc_backend *be);

    /* ---- measured choices that change the numbers ----
     * A backend may choose kernels by measuring the machine. Where a choice changes the bits,
     * every rank of a job must choose alike, or a rank's timing noise makes its numbers (and the
     * run's) differ from the others'. measure() fills m with this process's measurements (the
     * CPU backend: m[0] = its bf16 dot products' FLOP rate over its fp32 FMAs', 0 without them;
     * unused slots 0); the caller combines every rank's (the trainer: the largest of each)
     * and hands the result to adopt(), after which this process chooses from those values. A
     * backend that is never given adopt() chooses from its own. */
    void (*measure)(struct mc_backend *be, double m[MC_BACKEND_MEASURES]);
    void (*adopt)(struct mc_backend *be, const double m[MC_BACKEND_MEASURES]);
    /* Chooses the rounding points of the 16-bit elementwise ops (enum mc_rounding), once,
     * before the first op; a wrapper passes it to the backend it wraps. false: the backend
     * does not implement that choice (be->rounding is left as it was). */
    bool (*set_rounding)(struct mc_backend *be, enum mc_rounding r);

    /* ---- dtype conversion (mixed precision: main params and grads in fp32) ---- */
    /* dst[i] = src[i] converted (16-bit outputs rounded to nearest even; widening exact). */
    void (*convert)(struct mc_backend *be, void *dst, enum mc_dtype dst_dt, const void *src,
                    enum mc_dtype src_dt, int64_t n);
    /* dst[i] = round_dst(float(dst[i]) + float(src[i])): main_grad += param.grad. */
    void (*accumulate)(struct mc_backend *be, void *dst, enum mc_dtype dst_dt, const void *src,
                       enum mc_dtype src_dt, int64_t n);

    /* C[M,N] = alpha * op(A) @ op(B) + beta * C; op(X) = X or X^T (ta/tb); lda/ldb/ldc are
     * the row strides of the stored matrices, in elements. beta == 0 ignores C's old contents
     * (even NaN). Accumulates in the compute type. */
    void (*gemm)(struct mc_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                 float alpha, const void *A, enum mc_dtype a_dt, int64_t lda, const void *B,
                 enum mc_dtype b_dt, int64_t ldb, float beta, void *C, enum mc_dtype c_dt,
                 int64_t ldc, enum mc_dtype compute);

    /* LayerNorm over the last dim (biased variance). mean/rstd [rows] are saved for backward.
     * b may be NULL (no bias). */
    void (*layernorm_fwd)(struct mc_backend *be, enum mc_dtype dt, void *y, float *mean,
                          float *rstd, const void *x, const void *w, const void *b, int64_t rows,
                          int64_t h, float eps);
    void (*layernorm_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw, void *db,
                          const void *dy, const void *x, const void *w, const float *mean,
                          const float *rstd, int64_t rows, int64_t h);
    /* RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w; rstd [rows] saved. */
    void (*rmsnorm_fwd)(struct mc_backend *be, enum mc_dtype dt, void *y, float *rstd,
                        const void *x, const void *w, int64_t rows, int64_t h, float eps);
    void (*rmsnorm_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                        const void *dy, const void *x, const void *w, const float *rstd,
                        int64_t rows, int64_t h);

    /* y = act(x + bias[col]) on [rows, cols]; bias may be NULL. Backward writes dx (the grad of
     * the pre-activation, also the bias grad's source: dbias is summed by bias_grad). */
    void (*gelu_tanh_fwd)(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                          const void *bias, int64_t rows, int64_t cols);
    void (*gelu_tanh_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dx, const void *dy,
                          const void *x, const void *bias, int64_t rows, int64_t cols);
    void (*gelu_erf_fwd)(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                         const void *bias, int64_t rows, int64_t cols);
    void (*gelu_erf_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dx, const void *dy,
                         const void *x, const void *bias, int64_t rows, int64_t cols);
    void (*squared_relu_fwd)(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                             const void *bias, int64_t rows, int64_t cols);
    void (*squared_relu_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dx, const void *dy,
                             const void *x, const void *bias, int64_t rows, int64_t cols);
    /* SwiGLU on x [rows, 2*cols] = [gate | up] per row (+ bias [2*cols] or NULL):
     * y [rows, cols] = silu(gate) * up. dx is [rows, 2*cols]. */
    void (*swiglu_fwd)(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                       const void *bias, int64_t rows, int64_t cols);
    void (*swiglu_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dx, const void *dy,
                       const void *x, const void *bias, int64_t rows, int64_t cols);

    /* db[c] += sum over rows of dy[r, c] (bias grads), chunked in a fixed order. */
    void (*bias_grad)(struct mc_backend *be, enum mc_dtype dt, void *db, const void *dy,
                      int64_t rows, int64_t cols);
    /* y[r, c] = x[r, c] + bias[c] (bias may be NULL) + residual[r, c] (may be NULL), with
     * dropout applied to (x + bias) when keep_mask != NULL: keep_mask[i] ? v * scale : 0. */
    void (*bias_dropout_add)(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                             const void *bias, const void *residual, const uint8_t *keep_mask,
                             float scale, int64_t rows, int64_t cols);

    /* Attention probabilities in place on scores [rows = bh*sq, sk]: p = softmax(where(mask,
     * -10000, scores * mult)) along the last dim. mask: NULL = causal (key j > query i masked),
     * else a [sq, sk] byte mask (1 = masked) shared by every row block of sq. */
    void (*masked_softmax_fwd)(struct mc_backend *be, enum mc_dtype dt, void *p, int64_t bh,
                               int64_t sq, int64_t sk, float mult, const uint8_t *mask);
    /* dscores = mult * p * (dp - sum(dp * p)) in place on dp. */
    void (*masked_softmax_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dp, const void *p,
                               int64_t bh, int64_t sq, int64_t sk, float mult);

    /* RoPE on t [rows = s*b*heads, hn] in place: positions pos[row / (b*heads)]-th row of
     * cos/sin tables [s, rot_dim]; only the first rot_dim of hn rotate. bwd applies the
     * transpose rotation (sin -> -sin). */
    void (*rope_fwd)(struct mc_backend *be, enum mc_dtype dt, void *t, const float *cos,
                     const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                     bool interleaved);
    void (*rope_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dgrad, const float *cos,
                     const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                     bool interleaved);

    /* Embedding: y[t] = w[ids[t] - vocab_start] for ids in [vocab_start, vocab_start + rows_local),
     * zero otherwise (vocab-parallel). bwd: dw[ids[t] - start] += dy[t], rows owned by fixed
     * threads so the result is thread-count independent. */
    void (*embedding_fwd)(struct mc_backend *be, enum mc_dtype dt, void *y, const void *w,
                          const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                          int64_t vocab_local);
    void (*embedding_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dw, const void *dy,
                          const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                          int64_t vocab_local);

    /* Vocab-parallel cross-entropy, the local half of Megatron's algorithm on logits
     * [n, v_local]: max_local[n] = max_j logits. (The caller all-reduces MAX across tp.) */
    void (*xent_max)(struct mc_backend *be, enum mc_dtype dt, float *max_local,
                     const void *logits, int64_t n, int64_t v);
    /* sumexp_local[n] = sum_j exp(logits - max[n]); target_logit[n] = logits[t] - max[n] when
     * target t is in [v_start, v_start + v) else 0. (The caller all-reduces SUM across tp.) */
    void (*xent_sumexp)(struct mc_backend *be, enum mc_dtype dt, float *sumexp_local,
                        float *target_logit, const void *logits, const float *max,
                        const int64_t *target, int64_t n, int64_t v, int64_t v_start);
    /* dlogits[n, v] = (exp(logits - max) / sumexp - onehot(target)) * dloss[n] (in place into
     * dlogits, which may alias logits). */
    void (*xent_bwd)(struct mc_backend *be, enum mc_dtype dt, void *dlogits, const void *logits,
                     const float *max, const float *sumexp, const int64_t *target,
                     const float *dloss, int64_t n, int64_t v, int64_t v_start);

    /* Sum of squares of x[n] in double, chunked in a fixed order (grad norm). */
    double (*sumsq)(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n);
    /* Number of exact zeros in x[n] (--log-num-zeros-in-grad). */
    int64_t (*count_zeros)(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n);
    /* x *= s */
    void (*scale)(struct mc_backend *be, enum mc_dtype dt, void *x, float s, int64_t n);
    /* AdamW (decoupled wd, bias correction with step t >= 1), as torch.optim.AdamW / apex
     * FusedAdam adam_w_mode: p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). m, v fp32. */
    void (*adamw)(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                  float *m, float *v, const void *g, int64_t n, float lr, float b1, float b2,
                  float eps, float wd, int64_t t);
    /* SGD with momentum and (coupled, torch.optim.SGD) weight decay; buf fp32. */
    void (*sgd)(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                float *buf, const void *g, int64_t n, float lr, float momentum, float wd,
                bool first_step);

    /* Core attention (struct mc_attention_desc), one op pair a backend may fuse. forward
     * writes probs [b, heads, s, s] (the softmax output before dropout, kept for backward) and
     * ctx; backward writes every element of dqkv from dctx, qkv and probs (dK and dV summed
     * over the heads of their group in head order). Both redraw the dropout mask. */
    void (*attention_fwd)(struct mc_backend *be, const struct mc_attention_desc *d,
                          const void *qkv, void *probs, void *ctx, struct mc_attention_work *w);
    void (*attention_bwd)(struct mc_backend *be, const struct mc_attention_desc *d,
                          const void *qkv, const void *probs, const void *dctx, void *dqkv,
                          struct mc_attention_work *w);
    /* Flash attention (FlashAttention-2): the attention of struct mc_attention_desc without
     * the [b, heads, s, s] probabilities. forward writes ctx and lse [b, heads, s] (fp32, the
     * log-sum-exp of each query row's softmax input); backward recomputes the probabilities
     * from qkv and lse and writes every element of dqkv from dctx, ctx and lse (dK, dV summed
     * over the heads of their group in head order). The same mask, dropout stream and scaling
     * as attention_fwd (same kept elements), fp32 statistics for every dtype; the numbers
     * equal the unfused op's up to the order of fp32 sums (16-bit: rounded once at the end,
     * softmax_in_fp32 has no effect). Masks must leave every query row a key (Megatron's do). */
    void (*flash_attention_fwd)(struct mc_backend *be, const struct mc_attention_desc *d,
                                const void *qkv, void *ctx, float *lse);
    void (*flash_attention_bwd)(struct mc_backend *be, const struct mc_attention_desc *d,
                                const void *qkv, const void *ctx, const float *lse,
                                const void *dctx, void *dqkv);
    /* keep[i] = dropout keep flag of element first + i of the stream (probability p of a 0). */
    void (*dropout_mask)(struct mc_backend *be, uint8_t *keep, const struct mc_dropout_stream *r,
                         int64_t first, int64_t n, float p);
    /* out[i] = std * normal sample first + i of Philox stream (seed; c2, c3) (core/rng.h). */
    void (*fill_normal)(struct mc_backend *be, enum mc_dtype dt, void *out, int64_t first,
                        int64_t n, uint64_t seed, uint32_t c2, uint32_t c3, float std);
    /* loss_func's reduction: *sum = sum_i loss[i] * mask[i] and *count = sum_i mask[i], in
     * double, in index order. */
    void (*masked_loss)(struct mc_backend *be, enum mc_dtype dt, double *sum, double *count,
                        const void *loss, const float *mask, int64_t n);
    /* Its gradient: dloss[i] = mask[i] * scale. */
    void (*masked_loss_bwd)(struct mc_backend *be, float *dloss, const float *mask, float scale,
                            int64_t n);
};

/* Creates a backend. name: "cpu" (or NULL): the CPU kernels chosen for this machine, the scalar
 * references with MC_KERNELS=ref; "cpu-ref": the scalar references (GEMM included) always. */
mc_status mc_backend_create(const char *name, struct mc_backend **out);
void mc_backend_free(struct mc_backend *be); /* NULL does nothing */

/* Every backend table that ships (the tests check each is complete); NULL past the last. */
const struct mc_backend_ops *mc_backend_table(int i);

#endif /* MC_BACKEND_H */
