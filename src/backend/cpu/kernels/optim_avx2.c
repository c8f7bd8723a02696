/* AVX2 optimizer and grad-norm kernels: 8-wide ports of optim_avx512.c (same contract as
 * optim_ref.c): torch.optim.AdamW / apex FusedAdam adam_w_mode, torch.optim.SGD, and the sum of
 * squares / zero count of Megatron's clip_grads.py. The elementwise updates use the reference's
 * exact fp32 operation sequence (no FMA contraction; sqrt and division are correctly rounded),
 * so they are bit-identical to the reference. sumsq accumulates in double over chunks whose
 * length depends on n only, and adds the chunk partials in order: thread-count independent. */
#include "backend/cpu/kernels/kernels_avx2.h"
#include "backend/cpu/kernels/vec_avx2.h"

#include <math.h>

#define SUMSQ_MAX_CHUNKS 1024

/* Sum of squares of x[i0, i1) in double: 4 + 4 lanes, then a fixed reduction. */
static double chunk_sumsq(const float *x, int64_t i0, int64_t i1)
{
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    for (int64_t i = i0; i < i1; i += VL8) {
        __m256 v = v8_loadu(x + i, tail_mask8(i1 - i));
        __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    __m256d a = _mm256_add_pd(a0, a1);
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

double sumsq_avx2(const float *x, int64_t n)
{
    if (n <= 0)
        return 0.0;
    int64_t chunk = 65536;
    if ((n + chunk - 1) / chunk > SUMSQ_MAX_CHUNKS)
        chunk = ((n + SUMSQ_MAX_CHUNKS - 1) / SUMSQ_MAX_CHUNKS + VL8 - 1) / VL8 * VL8;
    int64_t nchunks = (n + chunk - 1) / chunk;
    double part[SUMSQ_MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t i0 = c * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        part[c] = chunk_sumsq(x, i0, i1);
    }
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++)
        total += part[c];
    return total;
}

int64_t count_zeros_avx2(const float *x, int64_t n)
{
    int64_t z = 0;
#pragma omp parallel for schedule(static) reduction(+ : z) if (n > 65536)
    for (int64_t i = 0; i < n; i += VL8) {
        __m256i t = tail_mask8(n - i);
        __m256 eq = _mm256_cmp_ps(v8_loadu(x + i, t), _mm256_setzero_ps(), _CMP_EQ_OQ);
        z += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_and_ps(eq, v8_mask_ps(t))));
    }
    return z;
}

void scale_avx2(float *x, float s, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(s);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i += VL8) {
        __m256i t = tail_mask8(n - i);
        v8_storeu(x + i, t, _mm256_mul_ps(v8_loadu(x + i, t), vs));
    }
}

void adamw_avx2(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                float b2, float eps, float wd, int64_t t)
{
    /* scalars exactly as the reference (and Python) form them: in double, then fp32 */
    float decay = (float)(1.0 - (double)lr * (double)wd);
    double bc1 = 1.0 - pow((double)b1, (double)t);
    double bc2 = 1.0 - pow((double)b2, (double)t);
    const __m256 vdecay = _mm256_set1_ps(decay), vstep = _mm256_set1_ps((float)((double)lr / bc1));
    const __m256 vbc2s = _mm256_set1_ps((float)sqrt(bc2)), veps = _mm256_set1_ps(eps);
    const __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2);
    const __m256 vomb1 = _mm256_set1_ps((float)(1.0 - (double)b1));
    const __m256 vomb2 = _mm256_set1_ps((float)(1.0 - (double)b2));
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i += VL8) {
        __m256i k = tail_mask8(n - i);
        __m256 gi = v8_loadu(g + i, k);
        __m256 pi = _mm256_mul_ps(v8_loadu(p + i, k), vdecay);
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(v8_loadu(m + i, k), vb1), _mm256_mul_ps(gi, vomb1));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(v8_loadu(v + i, k), vb2),
                                  _mm256_mul_ps(_mm256_mul_ps(gi, gi), vomb2));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), vbc2s), veps);
        __m256 pn = _mm256_sub_ps(pi, _mm256_mul_ps(vstep, _mm256_div_ps(mi, denom)));
        v8_storeu(p + i, k, pn);
        v8_storeu(m + i, k, mi);
        v8_storeu(v + i, k, vi);
    }
}

void sgd_avx2(float *p, float *buf, const float *g, int64_t n, float lr, float momentum,
              float wd, bool first_step)
{
    const __m256 vlr = _mm256_set1_ps(lr), vmom = _mm256_set1_ps(momentum), vwd = _mm256_set1_ps(wd);
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i += VL8) {
        __m256i k = tail_mask8(n - i);
        __m256 pi = v8_loadu(p + i, k), d = v8_loadu(g + i, k);
        if (wd != 0.0f)
            d = _mm256_add_ps(d, _mm256_mul_ps(vwd, pi));
        if (momentum != 0.0f) {
            d = first_step ? d : _mm256_add_ps(_mm256_mul_ps(v8_loadu(buf + i, k), vmom), d);
            v8_storeu(buf + i, k, d);
        }
        v8_storeu(p + i, k, _mm256_sub_ps(pi, _mm256_mul_ps(vlr, d)));
    }
}
