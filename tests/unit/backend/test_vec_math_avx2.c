/* Accuracy of the 8-wide exp / erf / sigmoid of vec_avx2.h (the AVX2 kernel table's math) against
 * libm in double, in ulps of the fp32 result, on a dense grid (plus special values); the same
 * bounds as vec_avx512.h's in test_vec_math.c. The AVX2 + FMA target is enabled for this file
 * only, and the checks run only when the CPU/OS support it. */
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels/vec_avx2.h"
#include "test.h"

#include <math.h>

typedef __m256 (*vfn)(__m256);
typedef double (*dfn)(double);

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static __m256 v8_exp_f(__m256 x) { return v8_exp(x); }
static __m256 v8_erf_f(__m256 x) { return v8_erf(x); }
static __m256 v8_sigmoid_f(__m256 x) { return v8_sigmoid(x); }

/* Max error in ulps of the correctly rounded fp32 result over n points in [lo, hi]; results
 * below FLT_MIN are measured in units of the denormal spacing. */
static double max_ulp(vfn f, dfn ref, float lo, float hi, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i += 8) {
        float x[8], y[8];
        for (int k = 0; k < 8; k++) x[k] = lo + (hi - lo) * (float)(i + k) / (float)n;
        _mm256_storeu_ps(y, f(_mm256_loadu_ps(x)));
        for (int k = 0; k < 8; k++) {
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
    float y[8];
    _mm256_storeu_ps(y, f(_mm256_set1_ps(x)));
    return y[0];
}

int main(void)
{
    if (!mc_cpu_has_avx2()) {
        printf("test_vec_math_avx2: no AVX2 + FMA + F16C on this CPU/OS; the AVX2 kernels are not used here\n");
        return test_summary("test_vec_math_avx2");
    }
    const int n = 1 << 21;
    double e = max_ulp(v8_exp_f, exp, -87.0f, 88.7f, n);
    double r = max_ulp(v8_erf_f, erf, -6.0f, 6.0f, n);
    double s = max_ulp(v8_sigmoid_f, sigmoid_d, -30.0f, 30.0f, n);
    double es = max_ulp(v8_exp_f, exp, -103.0f, -87.0f, n / 8); /* denormal results */
    printf("max error: exp %.2f ulp, erf %.2f ulp, sigmoid %.2f ulp; exp denormal range %.2f\n", e,
           r, s, es);
    CHECK(e <= 1.5);
    CHECK(r <= 3.0);
    CHECK(s <= 4.0);
    CHECK(es <= 1.5);
    /* special values: NaN propagates, overflow/underflow saturate, erf stays odd */
    CHECK(isnan(lane0(v8_exp_f, NAN)) && isnan(lane0(v8_sigmoid_f, NAN)));
    CHECK(lane0(v8_exp_f, INFINITY) == INFINITY && lane0(v8_exp_f, -INFINITY) == 0.0f);
    CHECK(lane0(v8_exp_f, 89.0f) == INFINITY && lane0(v8_exp_f, -104.0f) == 0.0f);
    CHECK(lane0(v8_exp_f, 0.0f) == 1.0f);
    CHECK(lane0(v8_erf_f, 10.0f) == 1.0f && lane0(v8_erf_f, -10.0f) == -1.0f);
    CHECK(lane0(v8_erf_f, 0.0f) == 0.0f && lane0(v8_erf_f, -2.5f) == -lane0(v8_erf_f, 2.5f));
    CHECK(lane0(v8_sigmoid_f, -200.0f) == 0.0f && lane0(v8_sigmoid_f, 200.0f) == 1.0f);
    return test_summary("test_vec_math_avx2");
}
