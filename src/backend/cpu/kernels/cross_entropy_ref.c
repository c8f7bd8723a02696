/* Reference vocab-parallel cross-entropy pieces: the local half of Megatron's
 * _VocabParallelCrossEntropy (tensor_parallel/cross_entropy.py). The caller all-reduces the
 * max (MAX) and the sum of exps and target logit (SUM) across tensor-parallel ranks and forms
 * loss = log(sumexp) - target_logit. Rows (tokens) are independent, so any split is exact. */
#include "backend/cpu/kernels/ref.h"

#include <math.h>

void xent_max_ref(float *max_local, const float *logits, int64_t n, int64_t v)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        float mx = -INFINITY;
        for (int64_t j = 0; j < v; j++)
            mx = lr[j] > mx ? lr[j] : mx;
        max_local[r] = mx;
    }
}

void xent_sumexp_ref(float *sumexp_local, float *target_logit, const float *logits,
                     const float *max, const int64_t *target, int64_t n, int64_t v,
                     int64_t v_start)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        double s = 0.0;
        for (int64_t j = 0; j < v; j++)
            s += expf(lr[j] - max[r]);
        sumexp_local[r] = (float)s;
        int64_t t = target[r] - v_start;
        target_logit[r] = t >= 0 && t < v ? lr[t] - max[r] : 0.0f;
    }
}

void xent_bwd_ref(float *dlogits, const float *logits, const float *max, const float *sumexp,
                  const int64_t *target, const float *dloss, int64_t n, int64_t v,
                  int64_t v_start)
{
#pragma omp parallel for schedule(static) if (n * v > 16384)
    for (int64_t r = 0; r < n; r++) {
        const float *lr = logits + r * v;
        float *dr = dlogits + r * v;
        float inv = 1.0f / sumexp[r], g = dloss[r];
        for (int64_t j = 0; j < v; j++)
            dr[j] = expf(lr[j] - max[r]) * inv * g;
        int64_t t = target[r] - v_start;
        if (t >= 0 && t < v)
            dr[t] -= g;
    }
}
