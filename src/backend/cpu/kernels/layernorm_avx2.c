/* AVX2 + FMA LayerNorm and RMSNorm over the last dim, forward and backward: 8-wide ports of
 * layernorm_avx512.c (same contract as layernorm_ref.c; counterparts of torch.nn.LayerNorm /
 * Megatron's RMSNorm). Row statistics use fp32 vector partial sums (two passes for the variance,
 * so no cancellation); rows are split statically across threads. The weight/bias grads are column
 * sums computed like the reference: one owner per 64-column block adds the rows in order with
 * the same fp32 operations, so they are bit-identical to the reference for any thread count. */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

#include <math.h>

#define COL_BLOCK 64                 /* columns per owner in the grad reductions */
#define COL_VECS (COL_BLOCK / VL8)   /* 8 vectors */

static float row_sum(const float *x, int64_t h)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * VL8 <= h; j += 2 * VL8) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x + j));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x + j + VL8));
    }
    for (; j < h; j += VL8)
        s0 = _mm256_add_ps(s0, v8_loadu(x + j, tail_mask8(h - j)));
    return v8_hsum(_mm256_add_ps(s0, s1));
}

/* sum (x - mu)^2; with mu = 0 it is the sum of squares */
static float row_sqdev(const float *x, float mu, int64_t h)
{
    const __m256 vmu = _mm256_set1_ps(mu);
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * VL8 <= h; j += 2 * VL8) {
        __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + j), vmu);
        __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + j + VL8), vmu);
        s0 = _mm256_fmadd_ps(d0, d0, s0);
        s1 = _mm256_fmadd_ps(d1, d1, s1);
    }
    for (; j < h; j += VL8) {
        __m256i t = tail_mask8(h - j);
        /* lanes past the row would be (0 - mu): zero them */
        __m256 d = _mm256_and_ps(_mm256_sub_ps(v8_loadu(x + j, t), vmu), v8_mask_ps(t));
        s0 = _mm256_fmadd_ps(d, d, s0);
    }
    return v8_hsum(_mm256_add_ps(s0, s1));
}

void layernorm_fwd_avx2(float *y, float *mean, float *rstd, const float *x, const float *w,
                        const float *b, int64_t rows, int64_t h, float eps)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float mu = (float)((double)row_sum(xr, h) / (double)h);
        float rs = (float)(1.0 / sqrt((double)row_sqdev(xr, mu, h) / (double)h + (double)eps));
        mean[r] = mu;
        rstd[r] = rs;
        const __m256 vmu = _mm256_set1_ps(mu), vrs = _mm256_set1_ps(rs);
        float *yr = y + r * h;
        for (int64_t j = 0; j < h; j += VL8) {
            __m256i t = tail_mask8(h - j);
            __m256 n = _mm256_mul_ps(_mm256_sub_ps(v8_loadu(xr + j, t), vmu), vrs);
            n = _mm256_mul_ps(n, v8_loadu(w + j, t));
            if (b)
                n = _mm256_add_ps(n, v8_loadu(b + j, t));
            v8_storeu(yr + j, t, n);
        }
    }
}

/* Column sums for the weight (and bias) grads: dw[j] += sum_r dy[r,j] * xhat[r,j] with
 * xhat = (x - mean) * rstd (mean == NULL: RMSNorm, xhat = x * rstd); db[j] += sum_r dy[r,j].
 * Per column: multiply, then add, in row order, exactly the reference's fp32 operations. */
static void norm_param_grads(float *dw, float *db, const float *dy, const float *x,
                             const float *mean, const float *rstd, int64_t rows, int64_t h)
{
    int64_t nblk = (h + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * COL_BLOCK, n = h - j0 < COL_BLOCK ? h - j0 : COL_BLOCK;
        int nv = (int)((n + VL8 - 1) / VL8);
        __m256i m[COL_VECS];
        __m256 aw[COL_VECS], ab[COL_VECS];
        for (int k = 0; k < nv; k++) {
            m[k] = tail_mask8(n - k * VL8);
            aw[k] = ab[k] = _mm256_setzero_ps();
        }
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * h + j0, *dyr = dy + r * h + j0;
            __m256 vmu = _mm256_set1_ps(mean ? mean[r] : 0.0f), vrs = _mm256_set1_ps(rstd[r]);
            for (int k = 0; k < nv; k++) {
                __m256 xv = v8_loadu(xr + k * VL8, m[k]), g = v8_loadu(dyr + k * VL8, m[k]);
                __m256 xhat = mean ? _mm256_mul_ps(_mm256_sub_ps(xv, vmu), vrs) : _mm256_mul_ps(xv, vrs);
                aw[k] = _mm256_add_ps(aw[k], _mm256_mul_ps(g, xhat));
                ab[k] = _mm256_add_ps(ab[k], g);
            }
        }
        for (int k = 0; k < nv; k++) {
            float *pw = dw + j0 + k * VL8;
            v8_storeu(pw, m[k], _mm256_add_ps(v8_loadu(pw, m[k]), aw[k]));
            if (db) {
                float *pb = db + j0 + k * VL8;
                v8_storeu(pb, m[k], _mm256_add_ps(v8_loadu(pb, m[k]), ab[k]));
            }
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w (LayerNorm), or
 * dx = rstd * (g - xhat * mean(g * xhat)) for RMSNorm (mean == NULL). Lanes past the row load
 * g = 0, so they add nothing to the sums. */
static void norm_input_grad(float *dx, const float *dy, const float *x, const float *w,
                            const float *mean, const float *rstd, int64_t rows, int64_t h)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h, *dyr = dy + r * h;
        const __m256 vmu = _mm256_set1_ps(mean ? mean[r] : 0.0f), vrs = _mm256_set1_ps(rstd[r]);
        __m256 sg = _mm256_setzero_ps(), sgx = _mm256_setzero_ps();
        for (int64_t j = 0; j < h; j += VL8) {
            __m256i t = tail_mask8(h - j);
            __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(v8_loadu(xr + j, t), vmu), vrs);
            __m256 g = _mm256_mul_ps(v8_loadu(dyr + j, t), v8_loadu(w + j, t));
            sg = _mm256_add_ps(sg, g);
            sgx = _mm256_fmadd_ps(g, xhat, sgx);
        }
        const __m256 mg = _mm256_set1_ps(mean ? (float)((double)v8_hsum(sg) / (double)h) : 0.0f);
        const __m256 mgx = _mm256_set1_ps((float)((double)v8_hsum(sgx) / (double)h));
        float *dxr = dx + r * h;
        for (int64_t j = 0; j < h; j += VL8) {
            __m256i t = tail_mask8(h - j);
            __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(v8_loadu(xr + j, t), vmu), vrs);
            __m256 g = _mm256_mul_ps(v8_loadu(dyr + j, t), v8_loadu(w + j, t));
            __m256 d = _mm256_sub_ps(_mm256_sub_ps(g, mg), _mm256_mul_ps(xhat, mgx));
            v8_storeu(dxr + j, t, _mm256_mul_ps(vrs, d));
        }
    }
}

void layernorm_bwd_avx2(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const float *w, const float *mean, const float *rstd, int64_t rows,
                        int64_t h)
{
    norm_input_grad(dx, dy, x, w, mean, rstd, rows, h);
    norm_param_grads(dw, db, dy, x, mean, rstd, rows, h);
}

void rmsnorm_fwd_avx2(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                      int64_t h, float eps)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float rs = (float)(1.0 / sqrt((double)row_sqdev(xr, 0.0f, h) / (double)h + (double)eps));
        rstd[r] = rs;
        const __m256 vrs = _mm256_set1_ps(rs);
        float *yr = y + r * h;
        for (int64_t j = 0; j < h; j += VL8) {
            __m256i t = tail_mask8(h - j);
            __m256 n = _mm256_mul_ps(_mm256_mul_ps(v8_loadu(xr + j, t), vrs), v8_loadu(w + j, t));
            v8_storeu(yr + j, t, n);
        }
    }
}

void rmsnorm_bwd_avx2(float *dx, float *dw, const float *dy, const float *x, const float *w,
                      const float *rstd, int64_t rows, int64_t h)
{
    norm_input_grad(dx, dy, x, w, NULL, rstd, rows, h);
    norm_param_grads(dw, NULL, dy, x, NULL, rstd, rows, h);
}
