/* How fast this CPU's bf16 dot products (VDPBF16PS) run beside its fp32 FMAs, measured once:
 * register-only chains of each instruction, timed on the thread's CPU clock. It decides whether
 * the 16-bit GEMM takes the bf16 dot-product path by default (cpu_backend.c): on AMD Zen 4 the
 * ratio is about 2 (VDPBF16PS issues like an FMA and does twice the work), on Intel Xeons
 * without AMX about 0.5 (bench/peak: 164 vs 330 GFLOP/s, issue 16); a threshold of 1.0
 * separates the two families by a factor of two, and the ranks of a job adopt one reading
 * (backend.h: measure, adopt). No Megatron counterpart (cuBLAS picks tensor-core kernels
 * itself). */
#include "backend/cpu/kernels/kernels_avx512.h"

#include <immintrin.h>
#include <time.h>

/* Many short trials, interleaved, the fastest of each instruction's kept: a trial that a
 * preemption hit is dropped. A loaded machine still skews the ratio either way (Zen 4: 2.0
 * quiet, 1.36 to 2.75 beside 6 busy processes), which the threshold's margin absorbs. */
#define CHAINS_ITERS 20000L
#define TRIALS 41

static double thread_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Eight independent chains (more than latency x ports on both families), so the loop measures
 * issue throughput; the result feeds a volatile so no chain is dropped. */
static volatile float sink;

static double fma_s(void)
{
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    __m512 c[8];
    for (int k = 0; k < 8; k++)
        c[k] = _mm512_set1_ps((float)k);
    double t0 = thread_s();
    for (long i = 0; i < CHAINS_ITERS; i++)
        for (int k = 0; k < 8; k++)
            c[k] = _mm512_fmadd_ps(c[k], a, b);
    double t = thread_s() - t0;
    for (int k = 1; k < 8; k++)
        c[0] = _mm512_add_ps(c[0], c[k]);
    sink = _mm512_reduce_add_ps(c[0]);
    return t;
}

static double dot_s(void)
{
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    __m512 c[8];
    for (int k = 0; k < 8; k++)
        c[k] = _mm512_set1_ps((float)k);
    double t0 = thread_s();
    for (long i = 0; i < CHAINS_ITERS; i++)
        for (int k = 0; k < 8; k++)
            c[k] = _mm512_dpbf16_ps(c[k], a, b);
    double t = thread_s() - t0;
    for (int k = 1; k < 8; k++)
        c[0] = _mm512_add_ps(c[0], c[k]);
    sink = _mm512_reduce_add_ps(c[0]);
    return t;
}

/* FLOP rate of VDPBF16PS (64 FLOP: two bf16 multiply-adds per fp32 lane) over that of the
 * 512-bit fp32 FMA (32 FLOP); the fastest of TRIALS interleaved trials each (about 2 ms in
 * all). Call only where the CPU has AVX512-BF16. */
double bf16_dot_rate_ratio_avx512bf16(void)
{
    double f = 1e30, d = 1e30;
    for (int r = 0; r < TRIALS; r++) {
        double tf = fma_s(), td = dot_s();
        f = tf < f ? tf : f;
        d = td < d ? td : d;
    }
    return d > 0 ? 2.0 * f / d : 0.0;
}
