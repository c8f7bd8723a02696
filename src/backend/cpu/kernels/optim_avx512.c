/* AVX-512 optimizer and grad-norm kernels (same contract as optim_ref.c): torch.optim.AdamW /
 * apex FusedAdam adam_w_mode, torch.optim.SGD, and the sum of squares / zero count of Megatron's
 * clip_grads.py. The elementwise updates use the reference's exact fp32 operation sequence
 * (no FMA contraction; sqrt and division are correctly rounded), so they are bit-identical to
 * the reference. sumsq accumulates in double over chunks whose length depends on n only, and
 * adds the chunk partials in order: thread-count independent. */
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/vec_avx512.h"

#include <math.h>

#define SUMSQ_MAX_CHUNKS 1024

double sumsq_avx512(const float *x, int64_t n)
{
    if (n <= 0)
        return 0.0;
    int64_t chunk = 65536;
    if ((n + chunk - 1) / chunk > SUMSQ_MAX_CHUNKS)
        chunk = ((n + SUMSQ_MAX_CHUNKS - 1) / SUMSQ_MAX_CHUNKS + VL - 1) / VL * VL;
    int64_t nchunks = (n + chunk - 1) / chunk;
    double part[SUMSQ_MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t i0 = c * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        __m512d a0 = _mm512_setzero_pd(), a1 = a0;
        for (int64_t i = i0; i < i1; i += VL) {
            __m512 v = v_loadu(x + i, tail_mask(i1 - i));
            __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
            a0 = _mm512_fmadd_pd(lo, lo, a0);
            a1 = _mm512_fmadd_pd(hi, hi, a1);
        }
        part[c] = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    }
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++)
        total += part[c];
    return total;
}

int64_t count_zeros_avx512(const float *x, int64_t n)
{
    int64_t z = 0;
#pragma omp parallel for schedule(static) reduction(+ : z) if (n > 65536)
    for (int64_t i = 0; i < n; i += VL) {
        __mmask16 t = tail_mask(n - i);
        z += __builtin_popcount(_mm512_mask_cmp_ps_mask(t, v_loadu(x + i, t), _mm512_setzero_ps(), _CMP_EQ_OQ));
    }
    return z;
}

void scale_avx512(float *x, float s, int64_t n)
{
    const __m512 vs = _mm512_set1_ps(s);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i += VL) {
        __mmask16 t = tail_mask(n - i);
        v_storeu(x + i, t, _mm512_mul_ps(v_loadu(x + i, t), vs));
    }
}

void adamw_avx512(float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1,
                  float b2, float eps, float wd, int64_t t)
{
    /* scalars exactly as the reference (and Python) form them: in double, then fp32 */
    float decay = (float)(1.0 - (double)lr * (double)wd);
    double bc1 = 1.0 - pow((double)b1, (double)t);
    double bc2 = 1.0 - pow((double)b2, (double)t);
    const __m512 vdecay = _mm512_set1_ps(decay), vstep = _mm512_set1_ps((float)((double)lr / bc1));
    const __m512 vbc2s = _mm512_set1_ps((float)sqrt(bc2)), veps = _mm512_set1_ps(eps);
    const __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2);
    const __m512 vomb1 = _mm512_set1_ps((float)(1.0 - (double)b1));
    const __m512 vomb2 = _mm512_set1_ps((float)(1.0 - (double)b2));
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i += VL) {
        __mmask16 k = tail_mask(n - i);
        __m512 gi = v_loadu(g + i, k);
        __m512 pi = _mm512_mul_ps(v_loadu(p + i, k), vdecay);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(v_loadu(m + i, k), vb1), _mm512_mul_ps(gi, vomb1));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(v_loadu(v + i, k), vb2),
                                  _mm512_mul_ps(_mm512_mul_ps(gi, gi), vomb2));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), vbc2s), veps);
        __m512 pn = _mm512_sub_ps(pi, _mm512_mul_ps(vstep, _mm512_div_ps(mi, denom)));
        v_storeu(p + i, k, pn);
        v_storeu(m + i, k, mi);
        v_storeu(v + i, k, vi);
    }
}

void sgd_avx512(float *p, float *buf, const float *g, int64_t n, float lr, float momentum,
                float wd, bool first_step)
{
    const __m512 vlr = _mm512_set1_ps(lr), vmom = _mm512_set1_ps(momentum), vwd = _mm512_set1_ps(wd);
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i += VL) {
        __mmask16 k = tail_mask(n - i);
        __m512 pi = v_loadu(p + i, k), d = v_loadu(g + i, k);
        if (wd != 0.0f)
            d = _mm512_add_ps(d, _mm512_mul_ps(vwd, pi));
        if (momentum != 0.0f) {
            d = first_step ? d : _mm512_add_ps(_mm512_mul_ps(v_loadu(buf + i, k), vmom), d);
            v_storeu(buf + i, k, d);
        }
        v_storeu(p + i, k, _mm512_sub_ps(pi, _mm512_mul_ps(vlr, d)));
    }
}
