/* The CPU backend's kernel tables: the fp32 kernels behind the ops of backend.h, one table per
 * implementation (the scalar references, the references with BLAS GEMM, the AVX-512 kernels).
 * The CPU backend (cpu/cpu_backend.c) holds one of them and binds each op of backend.h to the
 * kernel of the same name; backend.h documents each op. Private to src/backend. */
#ifndef MC_CPU_KERNELS_H
#define MC_CPU_KERNELS_H

#include "megatron.h"

#include <stdbool.h>
#include <stdint.h>

#define MC_CPU_KERNELS_VERSION 3

struct mc_cpu_kernels {
    int version;      /* MC_CPU_KERNELS_VERSION */
    const char *name; /* "cpu-ref", "cpu-ref+blas", "cpu-avx2", "cpu-avx512" */

    /* dst[i] = src[i] converted between F32, BF16 and F16 (core/dtype.c's rounding: nearest
     * even; widening exact; same dtype copies the bits). */
    void (*convert)(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                    int64_t n);
    /* dst[i] = round_dst(float(dst[i]) + float(src[i])) */
    void (*accumulate)(void *dst, enum mc_dtype dst_dt, const void *src, enum mc_dtype src_dt,
                       int64_t n);

    /* C[M,N] = alpha * op(A) @ op(B) + beta * C; op(X) = X or X^T (ta/tb); lda/ldb/ldc are
     * the row strides of the stored matrices. beta == 0 ignores C's old contents (even NaN). */
    void (*gemm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                 float *C, int64_t ldc);

    /* LayerNorm over the last dim (biased variance). mean/rstd [rows] are saved for backward.
     * b may be NULL (no bias). */
    void (*layernorm_fwd)(float *y, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int64_t rows, int64_t h, float eps);
    void (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const float *w, const float *mean, const float *rstd, int64_t rows,
                          int64_t h);
    /* RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w; rstd [rows] saved. */
    void (*rmsnorm_fwd)(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                        int64_t h, float eps);
    void (*rmsnorm_bwd)(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int64_t rows, int64_t h);

    /* y = act(x + bias[col]) on [rows, cols]; bias may be NULL. Backward writes dx (the grad of
     * the pre-activation, also the bias grad's source: dbias is summed by bias_grad). */
    void (*gelu_tanh_fwd)(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
    void (*gelu_tanh_bwd)(float *dx, const float *dy, const float *x, const float *bias,
                          int64_t rows, int64_t cols);
    void (*gelu_erf_fwd)(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
    void (*gelu_erf_bwd)(float *dx, const float *dy, const float *x, const float *bias,
                         int64_t rows, int64_t cols);
    void (*squared_relu_fwd)(float *y, const float *x, const float *bias, int64_t rows,
                             int64_t cols);
    void (*squared_relu_bwd)(float *dx, const float *dy, const float *x, const float *bias,
                             int64_t rows, int64_t cols);
    /* SwiGLU on x [rows, 2*cols] = [gate | up] per row (+ bias [2*cols] or NULL):
     * y [rows, cols] = silu(gate) * up. dx is [rows, 2*cols]. */
    void (*swiglu_fwd)(float *y, const float *x, const float *bias, int64_t rows, int64_t cols);
    void (*swiglu_bwd)(float *dx, const float *dy, const float *x, const float *bias,
                       int64_t rows, int64_t cols);

    /* db[c] += sum over rows of dy[r, c] (bias grads), chunked in a fixed order. */
    void (*bias_grad)(float *db, const float *dy, int64_t rows, int64_t cols);
    /* y[r, c] = x[r, c] + bias[c] (bias may be NULL) + residual[r, c] (may be NULL), with
     * dropout applied to (x + bias) when keep_mask != NULL: keep_mask[i] ? v * scale : 0. */
    void (*bias_dropout_add)(float *y, const float *x, const float *bias, const float *residual,
                             const uint8_t *keep_mask, float scale, int64_t rows, int64_t cols);

    /* keep[k] = dropout keep flag of element first + k of the stream (seed, c1_hi, c2, c3) at
     * drop probability p, exactly core/rng.h's definition (the references call
     * mc_rng_dropout_mask itself; fast versions must give the same bits). */
    void (*dropout_mask)(uint8_t *keep, int64_t first, int64_t n, uint64_t seed, uint32_t c1_hi,
                         uint32_t c2, uint32_t c3, float p);

    /* Attention probabilities in place on scores [rows = bh*sq, sk]: p = softmax(where(mask,
     * -10000, scores * mult)) along the last dim. mask: NULL = causal (key j > query i masked),
     * else a [sq, sk] byte mask (1 = masked) shared by every row block of sq. */
    void (*masked_softmax_fwd)(float *p, int64_t bh, int64_t sq, int64_t sk, float mult,
                               const uint8_t *mask);
    /* dscores = mult * p * (dp - sum(dp * p)) in place on dp. */
    void (*masked_softmax_bwd)(float *dp, const float *p, int64_t bh, int64_t sq, int64_t sk,
                               float mult);

    /* RoPE on t [rows = s*b*heads, hn] in place: positions pos[row / (b*heads)]-th row of
     * cos/sin tables [s, rot_dim]; only the first rot_dim of hn rotate. bwd applies the
     * transpose rotation (sin -> -sin). */
    void (*rope_fwd)(float *t, const float *cos, const float *sin, int64_t s, int64_t bh,
                     int64_t hn, int64_t rot_dim, bool interleaved);
    void (*rope_bwd)(float *dt, const float *cos, const float *sin, int64_t s, int64_t bh,
                     int64_t hn, int64_t rot_dim, bool interleaved);

    /* Embedding: y[t] = w[ids[t] - vocab_start] for ids in [vocab_start, vocab_start + rows_local),
     * zero otherwise (vocab-parallel). bwd: dw[ids[t] - start] += dy[t], rows owned by fixed
     * threads so the result is thread-count independent. */
    void (*embedding_fwd)(float *y, const float *w, const int64_t *ids, int64_t n, int64_t h,
                          int64_t vocab_start, int64_t vocab_local);
    void (*embedding_bwd)(float *dw, const float *dy, const int64_t *ids, int64_t n, int64_t h,
                          int64_t vocab_start, int64_t vocab_local);

    /* Vocab-parallel cross-entropy, the local half of Megatron's algorithm on logits
     * [n, v_local]: max_local[n] = max_j logits. (The caller all-reduces MAX across tp.) */
    void (*xent_max)(float *max_local, const float *logits, int64_t n, int64_t v);
    /* sumexp_local[n] = sum_j exp(logits - max[n]); target_logit[n] = logits[t] - max[n] when
     * target t is in [v_start, v_start + v) else 0. (The caller all-reduces SUM across tp.) */
    void (*xent_sumexp)(float *sumexp_local, float *target_logit, const float *logits,
                        const float *max, const int64_t *target, int64_t n, int64_t v,
                        int64_t v_start);
    /* dlogits[n, v] = (exp(logits - max) / sumexp - onehot(target)) * dloss[n] (in place into
     * dlogits, which may alias logits). */
    void (*xent_bwd)(float *dlogits, const float *logits, const float *max, const float *sumexp,
                     const int64_t *target, const float *dloss, int64_t n, int64_t v,
                     int64_t v_start);

    /* Sum of squares of x[n] in double, chunked in a fixed order (grad norm). */
    double (*sumsq)(const float *x, int64_t n);
    /* Number of exact zeros in x[n] (--log-num-zeros-in-grad). */
    int64_t (*count_zeros)(const float *x, int64_t n);
    /* x *= s */
    void (*scale)(float *x, float s, int64_t n);
    /* AdamW (decoupled wd, bias correction with step t >= 1), as torch.optim.AdamW / apex
     * FusedAdam adam_w_mode: p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps). */
    void (*adamw)(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                  float b2, float eps, float wd, int64_t t);
    /* SGD with momentum and (coupled, torch.optim.SGD) weight decay. */
    void (*sgd)(float *p, float *buf, const float *g, int64_t n, float lr, float momentum,
                float wd, bool first_step);
};

/* The scalar reference table (tests compare every fast kernel against it). */
const struct mc_cpu_kernels *mc_cpu_kernels_ref(void);
/* The references with GEMM through BLAS (ref_table.c). */
const struct mc_cpu_kernels *mc_cpu_kernels_ref_blas(void);
/* The AVX-512 table (select.c), whether or not this CPU can run it. */
const struct mc_cpu_kernels *mc_cpu_kernels_avx512(void);
/* The AVX2 + FMA table (select.c), whether or not this CPU can run it. */
const struct mc_cpu_kernels *mc_cpu_kernels_avx2(void);
/* The table chosen for this machine once (select.c): MC_KERNELS=ref forces the references,
 * MC_KERNELS=avx2 the AVX2 table (where it can run); the choice is logged. */
const struct mc_cpu_kernels *mc_cpu_kernels_select(void);

#endif /* MC_CPU_KERNELS_H */
