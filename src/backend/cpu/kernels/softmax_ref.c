/* Reference masked softmax for core attention, forward and backward: the math of Megatron's
 * FusedScaleMaskSoftmax on the unfused path (fusions/fused_softmax.py): scale by `mult` (the
 * layer number under --apply-query-key-layer-scaling, else 1), masked_fill(mask, -10000.0)
 * (a fill, not -inf), softmax along the last dim. */
#include "backend/cpu/kernels/ref.h"

#include <math.h>

void masked_softmax_fwd_ref(float *p, int64_t bh, int64_t sq, int64_t sk, float mult,
                            const uint8_t *mask)
{
    int64_t rows = bh * sq;
#pragma omp parallel for schedule(static) if (rows * sk > 16384)
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = r % sq;
        float *pr = p + r * sk;
        float mx = -INFINITY;
        for (int64_t j = 0; j < sk; j++) {
            bool masked = mask ? mask[i * sk + j] != 0 : j > i;
            float v = masked ? -10000.0f : pr[j] * mult;
            pr[j] = v;
            mx = v > mx ? v : mx;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < sk; j++) {
            pr[j] = expf(pr[j] - mx);
            sum += pr[j];
        }
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < sk; j++)
            pr[j] *= inv;
    }
}

void masked_softmax_bwd_ref(float *dp, const float *p, int64_t bh, int64_t sq, int64_t sk,
                            float mult)
{
    int64_t rows = bh * sq;
#pragma omp parallel for schedule(static) if (rows * sk > 16384)
    for (int64_t r = 0; r < rows; r++) {
        float *dr = dp + r * sk;
        const float *pr = p + r * sk;
        double dot = 0.0;
        for (int64_t j = 0; j < sk; j++)
            dot += (double)dr[j] * pr[j];
        float d = (float)dot;
        for (int64_t j = 0; j < sk; j++)
            dr[j] = mult * (pr[j] * (dr[j] - d));
    }
}
