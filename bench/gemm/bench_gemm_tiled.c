/* The backend's own GEMM path (gemm_blas: shape-dependent tiles, one single-threaded library
 * call per tile, OpenMP over tiles; docs/gemm.md) on the GPT-2 124M linear shapes, per
 * transpose case and beta: forward NT (Y = X W^T), data grad NN (dX = dY W), weight grad TN
 * (dW += dY^T X, beta 1, K = tokens). Megatron's counterpart is cuBLAS under F.linear.
 * Usage: bench_gemm_tiled <T> [min_seconds]; threads from OMP_NUM_THREADS. With
 * BENCH_CPUTIME=1 (use on 1 thread only: with more it counts spin-waiting) it times with the
 * process CPU clock, which is stable on a shared machine. Prints GFLOP/s per shape. */
#include "backend/cpu/kernels/kernels_avx512.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    static int cpu = -1;
    if (cpu < 0)
        cpu = getenv("BENCH_CPUTIME") && atoi(getenv("BENCH_CPUTIME")) > 0;
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *randbuf(int64_t n)
{
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)((uint64_t)i * 2654435761u % 1000) / 1000.0f - 0.5f;
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s T [min_seconds]\n", argv[0]);
        return 2;
    }
    int64_t T = atoll(argv[1]);
    double min_s = argc > 2 ? atof(argv[2]) : 0.3;
    const int64_t h = 768;
    struct { const char *name; int64_t in, out; } lin[] = {
        {"qkv", h, 3 * h}, {"proj", h, h}, {"fc1", h, 4 * h}, {"fc2", 4 * h, h},
        {"logits", h, 50304},
    };
    const char *only = getenv("BENCH_ONLY");
    double flop_case[3] = {0}, s_case[3] = {0};
    printf("library: %s, %d threads, T=%lld, %s clock\n", mc_gemm_blas_name(),
           omp_get_max_threads(), (long long)T,
           getenv("BENCH_CPUTIME") && atoi(getenv("BENCH_CPUTIME")) > 0 ? "CPU" : "wall");
    for (size_t l = 0; l < sizeof lin / sizeof lin[0]; l++) {
        if (only && strcmp(only, lin[l].name))
            continue;
        int64_t in = lin[l].in, out = lin[l].out;
        float *X = randbuf(T * in), *W = randbuf(out * in), *Y = randbuf(T * out);
        float *dW = randbuf(out * in), *dX = randbuf(T * in);
        for (int pass = 0; pass < 3; pass++) {
            const char *kind[] = {"fwd NT b0", "bwd NN b0", "bwd TN b1"};
            int64_t M = pass == 2 ? out : T, N = pass == 0 ? out : in;
            int64_t K = pass == 0 ? in : pass == 1 ? out : T;
            double flop = 2.0 * (double)M * (double)N * (double)K, start = now(), dt = 1e30;
            for (int rep = 0; rep < 2 || now() - start < min_s; rep++) {
                double t0 = now();
                if (pass == 0)
                    gemm_blas(false, true, M, N, K, 1.0f, X, in, W, in, 0.0f, Y, out);
                else if (pass == 1)
                    gemm_blas(false, false, M, N, K, 1.0f, Y, out, W, in, 0.0f, dX, in);
                else /* weight grad accumulates; scale keeps the values bounded */
                    gemm_blas(true, false, M, N, K, 1e-3f, Y, out, X, in, 1.0f, dW, in);
                double t = now() - t0;
                if (rep > 0 && t < dt)
                    dt = t;
            }
            flop_case[pass] += flop;
            s_case[pass] += dt;
            printf("%-6s %-9s M=%-5lld N=%-5lld K=%-5lld %9.2f ms %7.1f GFLOP/s\n", lin[l].name,
                   kind[pass], (long long)M, (long long)N, (long long)K, dt * 1e3,
                   flop / dt * 1e-9);
        }
        free(X);
        free(W);
        free(Y);
        free(dW);
        free(dX);
    }
    for (int c = 0; c < 3; c++)
        if (s_case[c] > 0)
            printf("TOTAL %s %7.1f GFLOP/s\n", c == 0 ? "NT" : c == 1 ? "NN" : "TN",
                   flop_case[c] / s_case[c] * 1e-9);
    return 0;
}
