/* Accuracy of the vectorized exp / tanh / erf / sigmoid of vec_avx512.h against libm in double,
 * in ulps of the fp32 result, on a dense grid (plus special values). The AVX-512 target is
 * enabled for this file only, and the checks run only when the CPU/OS support AVX-512. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
#endif
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels/vec_avx512.h"
#include "test.h"

#include <math.h>
#include <string.h>

typedef __m512 (*vfn)(__m512);
typedef double (*dfn)(double);

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static __m512 v_exp_f(__m512 x) { return v_exp(x); }
static __m512 v_tanh_f(__m512 x) { return v_tanh(x); }
static __m512 v_erf_f(__m512 x) { return v_erf(x); }
static __m512 v_sigmoid_f(__m512 x) { return v_sigmoid(x); }

/* Max error in ulps of the correctly rounded fp32 result over n points in [lo, hi]; results
 * below FLT_MIN are measured in units of FLT_MIN * 2^-23 (the denormal spacing). */
static double max_ulp(vfn f, dfn ref, float lo, float hi, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i += 16) {
        float x[16], y[16];
        for (int k = 0; k < 16; k++) x[k] = lo + (hi - lo) * (float)(i + k) / (float)n;
        _mm512_storeu_ps(y, f(_mm512_loadu_ps(x)));
        for (int k = 0; k < 16; k++) {
            double want = ref((double)x[k]);
            float w = fabsf((float)want);
            double ulp = w >= 1.17549435e-38f ? (double)nextafterf(w, INFINITY) - w : 1.4e-45;
            double u = fabs((double)y[k] - want) / ulp;
            worst = u > worst ? u : worst;
        }
    }
    return worst;
}

static float lane0(vfn f, float x)
{
    float y[16];
    _mm512_storeu_ps(y, f(_mm512_set1_ps(x)));
    return y[0];
}

int main(void)
{
    if (!mc_cpu_has_avx512()) {
        printf("test_vec_math: no AVX-512 on this CPU/OS; the AVX-512 kernels are not used here\n");
        return test_summary("test_vec_math");
    }
    const int n = 1 << 21;
    double e = max_ulp(v_exp_f, exp, -87.0f, 88.7f, n);
    double t = max_ulp(v_tanh_f, tanh, -10.0f, 10.0f, n);
    double r = max_ulp(v_erf_f, erf, -6.0f, 6.0f, n);
    double s = max_ulp(v_sigmoid_f, sigmoid_d, -30.0f, 30.0f, n);
    double es = max_ulp(v_exp_f, exp, -103.0f, -87.0f, n / 8); /* denormal results */
    printf("max error: exp %.2f ulp, tanh %.2f ulp, erf %.2f ulp, sigmoid %.2f ulp; exp denormal range %.2f\n",
           e, t, r, s, es);
    CHECK(e <= 1.5);
    CHECK(t <= 2.0);
    CHECK(r <= 3.0);
    CHECK(s <= 4.0); /* 1 / (1 + exp(-x)): the exp error plus two roundings */
    CHECK(es <= 1.5);
    /* special values: NaN propagates, saturation is exact, odd functions stay odd */
    CHECK(isnan(lane0(v_exp_f, NAN)) && isnan(lane0(v_tanh_f, NAN)));
    CHECK(lane0(v_exp_f, INFINITY) == INFINITY && lane0(v_exp_f, -INFINITY) == 0.0f);
    CHECK(lane0(v_exp_f, 0.0f) == 1.0f);
    CHECK(lane0(v_tanh_f, 30.0f) == 1.0f && lane0(v_tanh_f, -30.0f) == -1.0f);
    CHECK(lane0(v_erf_f, 10.0f) == 1.0f && lane0(v_erf_f, -10.0f) == -1.0f);
    CHECK(lane0(v_tanh_f, 1e-30f) == 1e-30f && lane0(v_erf_f, 0.0f) == 0.0f);
    CHECK(lane0(v_tanh_f, -0.3f) == -lane0(v_tanh_f, 0.3f));
    CHECK(lane0(v_erf_f, -2.5f) == -lane0(v_erf_f, 2.5f));
    CHECK(lane0(v_sigmoid_f, -200.0f) == 0.0f && lane0(v_sigmoid_f, 200.0f) == 1.0f);
    return test_summary("test_vec_math");
}
#if defined(__clang__)
#pragma clang attribute pop
#endif
