/* Peak floating-point throughput of this machine's vector units, the ceiling the GEMM and the
 * kernels are judged against (docs/gemm.md). Each thread runs independent FMA chains (more
 * chains than FMA latency x FMA ports, so the loop is throughput-bound) on registers only.
 * Measures fp32 AVX-512 FMA, fp32 AVX2 FMA, AVX512-BF16 VDPBF16PS (2 bf16 products summed into
 * fp32 per lane) and AVX512-FP16 FMA when the CPU has them, on 1 and 2 threads. The table
 * uses each thread's CPU clock, so it shows what the cores deliver even when other jobs share
 * them; the wall-clock rates (what this process got at that moment) are printed after it.
 * The last table row, "fp32 peak (widest FMA: ...)", repeats the row of the widest fp32 FMA the
 * CPU has (AVX-512 where present, else AVX2; "none" on CPUs with neither): bench/train_step
 * reads its last two fields, so it works on AVX2-only CPUs too.
 * Build and run: bench/peak/run.sh. No Megatron counterpart. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAINS 12
#define ITERS 20000000L
/* Twelve named accumulators (an array may be kept in memory, adding store-to-load latency). */
#define CHAIN_DECL(T, init) T c0 = init(0), c1 = init(1), c2 = init(2), c3 = init(3), c4 = init(4), \
    c5 = init(5), c6 = init(6), c7 = init(7), c8 = init(8), c9 = init(9), c10 = init(10), c11 = init(11)
#define CHAIN_STEP(op) do { c0 = op(c0); c1 = op(c1); c2 = op(c2); c3 = op(c3); c4 = op(c4); \
    c5 = op(c5); c6 = op(c6); c7 = op(c7); c8 = op(c8); c9 = op(c9); c10 = op(c10); c11 = op(c11); } while (0)
#define CHAIN_SUM(add) add(add(add(add(c0, c1), add(c2, c3)), add(add(c4, c5), add(c6, c7))), \
    add(add(c8, c9), add(c10, c11)))

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Each kernel returns a value derived from every chain so the compiler keeps them all. */
__attribute__((target("avx512f,fma"))) static float run_avx512_fp32(long iters)
{
    __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
#define INIT(k) _mm512_set1_ps((float)(k))
#define OP(x) _mm512_fmadd_ps(x, a, b)
    CHAIN_DECL(__m512, INIT);
    for (long i = 0; i < iters; i++) CHAIN_STEP(OP);
    return _mm512_reduce_add_ps(CHAIN_SUM(_mm512_add_ps));
#undef INIT
#undef OP
}

__attribute__((target("avx2,fma"))) static float run_avx2_fp32(long iters)
{
    __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
#define INIT(k) _mm256_set1_ps((float)(k))
#define OP(x) _mm256_fmadd_ps(x, a, b)
    CHAIN_DECL(__m256, INIT);
    for (long i = 0; i < iters; i++) CHAIN_STEP(OP);
    __m256 s = CHAIN_SUM(_mm256_add_ps);
#undef INIT
#undef OP
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

__attribute__((target("avx512f,avx512bf16"))) static float run_avx512_bf16(long iters)
{
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
#define INIT(k) _mm512_set1_ps((float)(k))
#define OP(x) _mm512_dpbf16_ps(x, a, b)
    CHAIN_DECL(__m512, INIT);
    for (long i = 0; i < iters; i++) CHAIN_STEP(OP);
    return _mm512_reduce_add_ps(CHAIN_SUM(_mm512_add_ps));
#undef INIT
#undef OP
}

#if defined(__GNUC__) && __GNUC__ >= 12
__attribute__((target("avx512f,avx512fp16"))) static float run_avx512_fp16(long iters)
{
    __m512h a = _mm512_set1_ph((_Float16)0.999f), b = _mm512_set1_ph((_Float16)1e-4f);
#define INIT(k) _mm512_set1_ph((_Float16)(k))
#define OP(x) _mm512_fmadd_ph(x, a, b)
    CHAIN_DECL(__m512h, INIT);
    for (long i = 0; i < iters; i++) CHAIN_STEP(OP);
    return (float)_mm512_reduce_add_ph(CHAIN_SUM(_mm512_add_ph));
#undef INIT
#undef OP
}
#define HAVE_FP16_BUILD 1
#endif

struct kernel {
    const char *name;
    const char *feature; /* __builtin_cpu_supports name */
    float (*run)(long);
    double flop_per_iter; /* per iteration of the outer loop, per thread */
};

static volatile float sink;

static const char *load(void)
{
    static char buf[64] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) snprintf(buf, sizeof buf, "?");
        fclose(f);
        buf[strcspn(buf, "\n")] = 0;
    }
    return buf;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Best of 3 runs. cpu_rate: the sum over threads of each thread's FLOPs / its own CPU time, i.e.
 * what the cores deliver while they run this code (robust when other jobs share the cores);
 * the return value is FLOPs / wall time, what this process got right now. */
static double measure(const struct kernel *k, int threads, double *cpu_rate)
{
    double best = 0, best_cpu = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = 0, t1 = 0, rate = 0;
        long iters = ITERS / 4;
#pragma omp parallel num_threads(threads) reduction(+ : rate)
        {
#pragma omp barrier
#pragma omp master
            t0 = now();
            double c0 = thread_cpu();
            float r = k->run(iters);
            rate = k->flop_per_iter * (double)iters / (thread_cpu() - c0) * 1e-9;
#pragma omp barrier
#pragma omp master
            t1 = now();
#pragma omp atomic
            sink += r;
        }
        double g = k->flop_per_iter * (double)iters * threads / (t1 - t0) * 1e-9;
        best = g > best ? g : best;
        best_cpu = rate > best_cpu ? rate : best_cpu;
    }
    *cpu_rate = best_cpu;
    return best;
}

int main(void)
{
    struct kernel ks[] = {
        {"fp32 AVX-512 FMA (zmm)", "avx512f", run_avx512_fp32, CHAINS * 16 * 2.0},
        {"fp32 AVX2 FMA (ymm)", "fma", run_avx2_fp32, CHAINS * 8 * 2.0},
        {"bf16 AVX512-BF16 VDPBF16PS", "avx512bf16", run_avx512_bf16, CHAINS * 32 * 2.0},
#ifdef HAVE_FP16_BUILD
        {"fp16 AVX512-FP16 FMA", "avx512fp16", run_avx512_fp16, CHAINS * 32 * 2.0},
#endif
    };
    /* The table reports the per-thread CPU-clock rate (the cores' peak, stable on a shared
     * machine); the wall-clock rate, what this process got at this moment, follows below. */
    char wall[512] = "";
    size_t wl = 0;
    const char *fp32_name = NULL; /* the widest fp32 FMA measured (ks[] lists the widest first) */
    double fp32_c1 = 0, fp32_c2 = 0;
    printf("%-30s %14s %14s\n", "peak GFLOP/s", "1 thread", "2 threads");
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        int ok = 0;
        if (!strcmp(ks[i].feature, "avx512f")) ok = __builtin_cpu_supports("avx512f");
        else if (!strcmp(ks[i].feature, "fma")) ok = __builtin_cpu_supports("fma");
        else if (!strcmp(ks[i].feature, "avx512bf16")) ok = __builtin_cpu_supports("avx512bf16");
#ifdef HAVE_FP16_BUILD
        else if (!strcmp(ks[i].feature, "avx512fp16")) ok = __builtin_cpu_supports("avx512fp16");
#endif
        if (!ok) {
            printf("%-30s %14s %14s\n", ks[i].name, "n/a", "n/a (no CPU support)");
            continue;
        }
        double c1, c2;
        double g1 = measure(&ks[i], 1, &c1), g2 = measure(&ks[i], 2, &c2);
        printf("%-30s %14.1f %14.1f\n", ks[i].name, c1, c2);
        if (!fp32_name && !strncmp(ks[i].name, "fp32 ", 5))
            fp32_name = ks[i].name, fp32_c1 = c1, fp32_c2 = c2;
        if (wl < sizeof wall)
            wl += (size_t)snprintf(wall + wl, sizeof wall - wl, "  %-28s %8.1f %8.1f\n",
                                   ks[i].name, g1, g2);
    }
    if (fp32_name) {
        char row[64];
        snprintf(row, sizeof row, "fp32 peak (widest FMA: %.*s)", (int)strcspn(fp32_name + 5, " "),
                 fp32_name + 5);
        printf("%-30s %14.1f %14.1f\n", row, fp32_c1, fp32_c2);
    } else {
        printf("%-30s %14s %14s\n", "fp32 peak (widest FMA: none)", "n/a", "n/a");
    }
    printf("(per-thread CPU clock; wall-clock GFLOP/s now, 1 / 2 threads, load %s):\n%s", load(), wall);
    return 0;
}
