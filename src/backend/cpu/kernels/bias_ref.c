/* Reference bias grad (column sum) and bias-dropout-add, the counterparts of the bias grads
 * autograd computes for Megatron's linears and of fusions/fused_bias_dropout.py
 * (residual + dropout(x + bias)). */
#include "backend/cpu/kernels/ref.h"

void bias_grad_ref(float *db, const float *dy, int64_t rows, int64_t cols)
{
    int64_t nblk = (cols + MC_REF_COL_BLOCK - 1) / MC_REF_COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * MC_REF_COL_BLOCK;
        int64_t j1 = j0 + MC_REF_COL_BLOCK < cols ? j0 + MC_REF_COL_BLOCK : cols;
        float acc[MC_REF_COL_BLOCK] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = j0; j < j1; j++)
                acc[j - j0] += dy[r * cols + j];
        for (int64_t j = j0; j < j1; j++)
            db[j] += acc[j - j0];
    }
}

void bias_dropout_add_ref(float *y, const float *x, const float *bias, const float *residual,
                          const uint8_t *keep_mask, float scale, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            float v = bias ? x[i] + bias[c] : x[i];
            if (keep_mask)
                v = keep_mask[i] ? v * scale : 0.0f;
            y[i] = residual ? residual[i] + v : v;
        }
}
