/* Minimal test harness: CHECK, CHECK_CLOSE, check_tensor_close. A test binary returns
 * test_summary() from main, which is non-zero when any check failed. */
#ifndef MC_TEST_H
#define MC_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

static int test_failures;
static int test_checks;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        test_checks++;                                                                 \
        if (!(cond)) {                                                                 \
            test_failures++;                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                              \
    } while (0)

#define CHECK_CLOSE(got, want, tol)                                                    \
    do {                                                                               \
        double g_ = (got), w_ = (want);                                                \
        test_checks++;                                                                 \
        if (!(fabs(g_ - w_) <= (tol))) {                                               \
            test_failures++;                                                           \
            fprintf(stderr, "%s:%d: CHECK_CLOSE failed: %s = %.9g, want %.9g (tol %g)\n", \
                    __FILE__, __LINE__, #got, g_, w_, (double)(tol));                  \
        }                                                                              \
    } while (0)

/* Passes when |got - want| <= atol + rtol * |want| everywhere; prints the worst element,
 * the max abs and rel error and the NMSE either way when verbose or failing. */
static inline int check_tensor_close(const char *name, const float *got, const float *want,
                                     int64_t n, double rtol, double atol)
{
    int64_t worst = -1, bad = 0;
    double worst_excess = 0, max_abs = 0, max_rel = 0, se = 0, sw = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i], d = fabs(g - w);
        double lim = atol + rtol * fabs(w);
        if (!(d <= lim)) {
            bad++;
            if (worst < 0 || d - lim > worst_excess || isnan(d)) {
                worst = i;
                worst_excess = d - lim;
            }
        }
        if (d > max_abs) max_abs = d;
        if (fabs(w) > 0 && d / fabs(w) > max_rel) max_rel = d / fabs(w);
        se += d * d;
        sw += w * w;
    }
    test_checks++;
    if (bad) {
        test_failures++;
        fprintf(stderr, "%s: %lld of %lld elements out of tolerance (rtol %g atol %g); worst [%lld] got %.9g want %.9g; max abs %.3g max rel %.3g nmse %.3g\n",
                name, (long long)bad, (long long)n, rtol, atol, (long long)worst, got[worst],
                want[worst], max_abs, max_rel, sw > 0 ? se / sw : se);
        return 0;
    }
    return 1;
}

static inline int test_summary(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, test_checks, test_failures);
    return test_failures ? 1 : 0;
}

#endif
