/* AVX-512 LayerNorm and RMSNorm over the last dim, forward and backward (same contract as
 * layernorm_ref.c; counterparts of torch.nn.LayerNorm / Megatron's RMSNorm). Row statistics use
 * fp32 vector partial sums (two passes for the variance, so no cancellation); rows are split
 * statically across threads. The weight/bias grads are column sums computed like the reference:
 * one owner per 64-column block adds the rows in order with the same fp32 operations, so they
 * are bit-identical to the reference for any thread count. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/vec_avx512.h"

#include <math.h>

#define COL_BLOCK 64 /* columns per owner in the grad reductions: 4 vectors */

static float row_sum(const float *x, int64_t h)
{
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * VL <= h; j += 2 * VL) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + j));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + j + VL));
    }
    for (; j < h; j += VL)
        s0 = _mm512_add_ps(s0, v_loadu(x + j, tail_mask(h - j)));
    return v_hsum(_mm512_add_ps(s0, s1));
}

/* sum (x - mu)^2; with mu = 0 it is the sum of squares */
static float row_sqdev(const float *x, float mu, int64_t h)
{
    const __m512 vmu = _mm512_set1_ps(mu);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * VL <= h; j += 2 * VL) {
        __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + j), vmu);
        __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(x + j + VL), vmu);
        s0 = _mm512_fmadd_ps(d0, d0, s0);
        s1 = _mm512_fmadd_ps(d1, d1, s1);
    }
    for (; j < h; j += VL) {
        __mmask16 t = tail_mask(h - j);
        __m512 d = _mm512_maskz_sub_ps(t, v_loadu(x + j, t), vmu);
        s0 = _mm512_fmadd_ps(d, d, s0);
    }
    return v_hsum(_mm512_add_ps(s0, s1));
}

void layernorm_fwd_avx512(float *y, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int64_t rows, int64_t h, float eps)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float mu = (float)((double)row_sum(xr, h) / (double)h);
        float rs = (float)(1.0 / sqrt((double)row_sqdev(xr, mu, h) / (double)h + (double)eps));
        mean[r] = mu;
        rstd[r] = rs;
        const __m512 vmu = _mm512_set1_ps(mu), vrs = _mm512_set1_ps(rs);
        float *yr = y + r * h;
        for (int64_t j = 0; j < h; j += VL) {
            __mmask16 t = tail_mask(h - j);
            __m512 n = _mm512_mul_ps(_mm512_sub_ps(v_loadu(xr + j, t), vmu), vrs);
            n = _mm512_mul_ps(n, v_loadu(w + j, t));
            if (b)
                n = _mm512_add_ps(n, v_loadu(b + j, t));
            v_storeu(yr + j, t, n);
        }
    }
}

/* Column sums for the weight (and bias) grads: dw[j] += sum_r dy[r,j] * xhat[r,j] with
 * xhat = (x - mean) * rstd (mean == NULL: RMSNorm, xhat = x * rstd); db[j] += sum_r dy[r,j]. */
static void norm_param_grads(float *dw, float *db, const float *dy, const float *x,
                             const float *mean, const float *rstd, int64_t rows, int64_t h)
{
    int64_t nblk = (h + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * COL_BLOCK, n = h - j0 < COL_BLOCK ? h - j0 : COL_BLOCK;
        __mmask16 m[4];
        __m512 aw[4], ab[4];
        for (int k = 0; k < 4; k++) {
            m[k] = tail_mask(n - k * VL > 0 ? n - k * VL : 0);
            aw[k] = ab[k] = _mm512_setzero_ps();
        }
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * h + j0, *dyr = dy + r * h + j0;
            __m512 vmu = _mm512_set1_ps(mean ? mean[r] : 0.0f), vrs = _mm512_set1_ps(rstd[r]);
            for (int k = 0; k < 4; k++) {
                if (!m[k])
                    break;
                __m512 xv = v_loadu(xr + k * VL, m[k]), g = v_loadu(dyr + k * VL, m[k]);
                __m512 xhat = mean ? _mm512_mul_ps(_mm512_sub_ps(xv, vmu), vrs) : _mm512_mul_ps(xv, vrs);
                aw[k] = _mm512_add_ps(aw[k], _mm512_mul_ps(g, xhat));
                ab[k] = _mm512_add_ps(ab[k], g);
            }
        }
        for (int k = 0; k < 4 && m[k]; k++) {
            float *pw = dw + j0 + k * VL;
            v_storeu(pw, m[k], _mm512_add_ps(v_loadu(pw, m[k]), aw[k]));
            if (db) {
                float *pb = db + j0 + k * VL;
                v_storeu(pb, m[k], _mm512_add_ps(v_loadu(pb, m[k]), ab[k]));
            }
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w (center = true), or
 * dx = rstd * (g - xhat * mean(g * xhat)) for RMSNorm (center = false, mean unused). */
static void norm_input_grad(float *dx, const float *dy, const float *x, const float *w,
                            const float *mean, const float *rstd, int64_t rows, int64_t h)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h, *dyr = dy + r * h;
        const __m512 vmu = _mm512_set1_ps(mean ? mean[r] : 0.0f), vrs = _mm512_set1_ps(rstd[r]);
        __m512 sg = _mm512_setzero_ps(), sgx = _mm512_setzero_ps();
        for (int64_t j = 0; j < h; j += VL) {
            __mmask16 t = tail_mask(h - j);
            __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(v_loadu(xr + j, t), vmu), vrs);
            __m512 g = _mm512_mul_ps(v_loadu(dyr + j, t), v_loadu(w + j, t));
            sg = _mm512_add_ps(sg, g);
            sgx = _mm512_fmadd_ps(g, xhat, sgx);
        }
        const __m512 mg = _mm512_set1_ps(mean ? (float)((double)v_hsum(sg) / (double)h) : 0.0f);
        const __m512 mgx = _mm512_set1_ps((float)((double)v_hsum(sgx) / (double)h));
        float *dxr = dx + r * h;
        for (int64_t j = 0; j < h; j += VL) {
            __mmask16 t = tail_mask(h - j);
            __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(v_loadu(xr + j, t), vmu), vrs);
            __m512 g = _mm512_mul_ps(v_loadu(dyr + j, t), v_loadu(w + j, t));
            __m512 d = _mm512_sub_ps(_mm512_sub_ps(g, mg), _mm512_mul_ps(xhat, mgx));
            v_storeu(dxr + j, t, _mm512_mul_ps(vrs, d));
        }
    }
}

void layernorm_bwd_avx512(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const float *w, const float *mean, const float *rstd, int64_t rows,
                          int64_t h)
{
    norm_input_grad(dx, dy, x, w, mean, rstd, rows, h);
    norm_param_grads(dw, db, dy, x, mean, rstd, rows, h);
}

void rmsnorm_fwd_avx512(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                        int64_t h, float eps)
{
#pragma omp parallel for schedule(static) if (rows * h > 16384)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * h;
        float rs = (float)(1.0 / sqrt((double)row_sqdev(xr, 0.0f, h) / (double)h + (double)eps));
        rstd[r] = rs;
        const __m512 vrs = _mm512_set1_ps(rs);
        float *yr = y + r * h;
        for (int64_t j = 0; j < h; j += VL) {
            __mmask16 t = tail_mask(h - j);
            __m512 n = _mm512_mul_ps(_mm512_mul_ps(v_loadu(xr + j, t), vrs), v_loadu(w + j, t));
            v_storeu(yr + j, t, n);
        }
    }
}

void rmsnorm_bwd_avx512(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        const float *rstd, int64_t rows, int64_t h)
{
    norm_input_grad(dx, dy, x, w, NULL, rstd, rows, h);
    norm_param_grads(dw, NULL, dy, x, NULL, rstd, rows, h);
}
