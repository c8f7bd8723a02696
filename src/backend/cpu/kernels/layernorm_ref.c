/* Reference LayerNorm and RMSNorm over the last dim, forward and backward. Counterparts of
 * torch.nn.LayerNorm (biased variance, Megatron's default --normalization LayerNorm) and of
 * torch.nn.RMSNorm / Megatron's RMSNorm (y = x * rsqrt(mean(x^2) + eps) * w).
 * Row statistics are accumulated in double (this is the definition, not a speed path). The
 * weight/bias grads are column sums: each column block has one owner that adds rows in order,
 * so they are bit-identical for any thread count. */
#include "backend/cpu/kernels/ref.h"

#include <math.h>

void layernorm_fwd_ref(float *y, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int64_t rows, int64_t h, float eps)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        double s = 0.0;
        for (int64_t j = 0; j < h; j++)
            s += xr[j];
        float mu = (float)(s / (double)h);
        double v = 0.0;
        for (int64_t j = 0; j < h; j++) {
            double d = (double)xr[j] - mu;
            v += d * d;
        }
        float rs = (float)(1.0 / sqrt(v / (double)h + (double)eps));
        mean[r] = mu;
        rstd[r] = rs;
        float *yr = y + r * h;
        for (int64_t j = 0; j < h; j++) {
            float n = (xr[j] - mu) * rs;
            yr[j] = b ? n * w[j] + b[j] : n * w[j];
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w. */
void layernorm_bwd_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                       const float *w, const float *mean, const float *rstd, int64_t rows,
                       int64_t h)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h, *dyr = dy + r * h;
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = 0; j < h; j++) {
            float xhat = (xr[j] - mean[r]) * rstd[r];
            float g = dyr[j] * w[j];
            sg += g;
            sgx += (double)g * xhat;
        }
        float mg = (float)(sg / (double)h), mgx = (float)(sgx / (double)h);
        float *dxr = dx + r * h;
        for (int64_t j = 0; j < h; j++) {
            float xhat = (xr[j] - mean[r]) * rstd[r];
            dxr[j] = rstd[r] * (dyr[j] * w[j] - mg - xhat * mgx);
        }
    }
    int64_t nblk = (h + MC_REF_COL_BLOCK - 1) / MC_REF_COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * MC_REF_COL_BLOCK;
        int64_t j1 = j0 + MC_REF_COL_BLOCK < h ? j0 + MC_REF_COL_BLOCK : h;
        float aw[MC_REF_COL_BLOCK] = {0}, ab[MC_REF_COL_BLOCK] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * h, *dyr = dy + r * h;
            for (int64_t j = j0; j < j1; j++) {
                float xhat = (xr[j] - mean[r]) * rstd[r];
                aw[j - j0] += dyr[j] * xhat;
                ab[j - j0] += dyr[j];
            }
        }
        for (int64_t j = j0; j < j1; j++) {
            dw[j] += aw[j - j0];
            if (db)
                db[j] += ab[j - j0];
        }
    }
}

void rmsnorm_fwd_ref(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                     int64_t h, float eps)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        double s = 0.0;
        for (int64_t j = 0; j < h; j++)
            s += (double)xr[j] * xr[j];
        float rs = (float)(1.0 / sqrt(s / (double)h + (double)eps));
        rstd[r] = rs;
        float *yr = y + r * h;
        for (int64_t j = 0; j < h; j++)
            yr[j] = xr[j] * rs * w[j];
    }
}

/* dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * rstd. */
void rmsnorm_bwd_ref(float *dx, float *dw, const float *dy, const float *x, const float *w,
                     const float *rstd, int64_t rows, int64_t h)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h, *dyr = dy + r * h;
        double sgx = 0.0;
        for (int64_t j = 0; j < h; j++)
            sgx += (double)(dyr[j] * w[j]) * (xr[j] * rstd[r]);
        float mgx = (float)(sgx / (double)h);
        float *dxr = dx + r * h;
        for (int64_t j = 0; j < h; j++)
            dxr[j] = rstd[r] * (dyr[j] * w[j] - xr[j] * rstd[r] * mgx);
    }
    int64_t nblk = (h + MC_REF_COL_BLOCK - 1) / MC_REF_COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * MC_REF_COL_BLOCK;
        int64_t j1 = j0 + MC_REF_COL_BLOCK < h ? j0 + MC_REF_COL_BLOCK : h;
        float aw[MC_REF_COL_BLOCK] = {0};
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = j0; j < j1; j++)
                aw[j - j0] += dy[r * h + j] * (x[r * h + j] * rstd[r]);
        for (int64_t j = j0; j < j1; j++)
            dw[j] += aw[j - j0];
    }
}
