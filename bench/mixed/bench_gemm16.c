/* The three 16-bit GEMM paths of the CPU backend (cpu_backend.c) on GPT-2 124M's linear
 * shapes, bf16, C bf16, beta 0, as --bf16 training calls them: forward NT (Y = X W^T), data
 * grad NN (dX = dY W), weight grad TN (dW = dY^T X, K = tokens). "copies": A and B widened
 * whole (convert_avx2, rows over the threads, as gemm_half), gemm_blas, C rounded; "tiles":
 * gemm_blas_half; "dot": gemm_dot_bf16 (AVX512-BF16; skipped where not available). Beside them
 * the fp32 gemm_blas on the same shape, for the ratio the issue asks about.
 * Usage: bench_gemm16 <T> [reps]; threads from OMP_NUM_THREADS; BENCH_ONLY=<linear> runs one
 * (qkv, proj, fc1, fc2, logits). Prints GFLOP/s per shape (best of reps after one warm-up).
 * A benchmark, not a test. */
#include "backend/cpu/kernels/kernels_avx512.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *buf(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void to_f32(float *dst, const uint16_t *src, int64_t rows, int64_t cols)
{
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++)
        convert_avx2(dst + r * cols, MC_DTYPE_F32, src + r * cols, MC_DTYPE_BF16, cols);
}

struct gemm_case {
    bool ta, tb;
    int64_t M, N, K, lda, ldb;
    const uint16_t *A, *B;
    uint16_t *C;
    float *af, *bf, *cf, *A32, *B32;
};

/* path 0 copies, 1 tiles, 2 dot, 3 fp32 gemm_blas on fp32 copies of A and B */
static void run(const struct gemm_case *g, int path)
{
    int64_t ar = g->ta ? g->K : g->M, br = g->tb ? g->N : g->K;
    if (path == 0) {
        to_f32(g->af, g->A, ar, g->lda);
        to_f32(g->bf, g->B, br, g->ldb);
        gemm_blas(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->af, g->lda, g->bf, g->ldb, 0.0f,
                  g->cf, g->N);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < g->M; r++)
            convert_avx2(g->C + r * g->N, MC_DTYPE_BF16, g->cf + r * g->N, MC_DTYPE_F32, g->N);
    } else if (path == 1) {
        gemm_blas_half(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, MC_DTYPE_BF16, g->lda, g->B,
                       g->ldb, 0.0f, g->C, MC_DTYPE_BF16, g->N, convert_avx2);
    } else if (path == 2) {
        gemm_dot_bf16(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->lda, g->B, g->ldb, 0.0f,
                      g->C, MC_DTYPE_BF16, g->N, convert_avx2);
    } else {
        gemm_blas(g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A32, g->lda, g->B32, g->ldb, 0.0f,
                  g->cf, g->N);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s T [reps]\n", argv[0]);
        return 2;
    }
    int64_t T = atoll(argv[1]);
    int reps = argc > 2 ? atoi(argv[2]) : 2;
    const char *why;
    bool dot = gemm_dot_bf16_available(&why);
    const int64_t h = 768;
    struct { const char *name; int64_t in, out; } lin[] = {
        {"qkv", h, 3 * h}, {"proj", h, h}, {"fc1", h, 4 * h}, {"fc2", 4 * h, h},
        {"logits", h, 50304},
    };
    const char *kind[] = {"fwd NT", "bwd NN", "bwd TN"};
    printf("library: %s, %d threads, T=%lld, bf16 dot products: %s%s\n", mc_gemm_blas_name(),
           omp_get_max_threads(), (long long)T, dot ? "" : "none, ", why);
    printf("%-7s %-7s %6s %6s %6s %9s %9s %9s %9s %7s\n", "linear", "case", "M", "N", "K",
           "copies", "tiles", "dot", "fp32", "dot/f32");
    double tot_s[4] = {0}, tot_f = 0;
    const char *only = getenv("BENCH_ONLY");
    for (size_t l = 0; l < sizeof lin / sizeof lin[0]; l++) {
        if (only && strcmp(only, lin[l].name))
            continue;
        int64_t in = lin[l].in, out = lin[l].out, big = (T > out ? T : out) * in;
        int64_t bigo = T * (in > out ? in : out) > big ? T * (in > out ? in : out) : big;
        uint16_t *A = buf(2 * (size_t)bigo), *B = buf(2 * (size_t)bigo), *C = buf(2 * (size_t)bigo);
        float *af = buf(4 * (size_t)bigo), *bf = buf(4 * (size_t)bigo), *cf = buf(4 * (size_t)bigo);
        for (int64_t i = 0; i < bigo; i++) /* bf16 of small pseudo-random values */
            A[i] = B[i] = (uint16_t)(0x3c00 + (uint16_t)((uint64_t)i * 2654435761u % 0x3ff)) ^
                          (uint16_t)((i & 1) << 15);
        for (int pass = 0; pass < 3; pass++) {
            struct gemm_case g = {.ta = pass == 2, .tb = pass == 0, .A = A, .B = B, .C = C,
                                  .af = af, .bf = bf, .cf = cf};
            g.M = pass == 2 ? out : T;
            g.N = pass == 0 ? out : in;
            g.K = pass == 0 ? in : pass == 1 ? out : T;
            g.lda = g.ta ? g.M : g.K;
            g.ldb = g.tb ? g.K : g.N;
            to_f32(af, A, g.ta ? g.K : g.M, g.lda);
            to_f32(bf, B, g.tb ? g.N : g.K, g.ldb);
            float *a32 = buf(4 * (size_t)bigo), *b32 = buf(4 * (size_t)bigo);
            memcpy(a32, af, 4 * (size_t)bigo);
            memcpy(b32, bf, 4 * (size_t)bigo);
            g.A32 = a32;
            g.B32 = b32;
            double flop = 2.0 * (double)g.M * (double)g.N * (double)g.K, best[4];
            for (int p = 0; p < 4; p++) {
                best[p] = 1e30;
                if (p == 2 && !dot)
                    continue;
                for (int r = 0; r <= reps; r++) {
                    double t0 = now();
                    run(&g, p);
                    double t = now() - t0;
                    if (r > 0 && t < best[p])
                        best[p] = t;
                }
                tot_s[p] += best[p];
            }
            tot_f += flop;
            printf("%-7s %-7s %6lld %6lld %6lld %9.1f %9.1f %9.1f %9.1f %7.2f\n", lin[l].name,
                   kind[pass], (long long)g.M, (long long)g.N, (long long)g.K,
                   flop / best[0] * 1e-9, flop / best[1] * 1e-9,
                   dot ? flop / best[2] * 1e-9 : 0.0, flop / best[3] * 1e-9,
                   dot ? best[3] / best[2] : 0.0);
            free(a32);
            free(b32);
        }
        free(A); free(B); free(C); free(af); free(bf); free(cf);
    }
    printf("all shapes (GFLOP/s): copies %.1f, tiles %.1f, dot %.1f, fp32 %.1f\n",
           tot_f / tot_s[0] * 1e-9, tot_f / tot_s[1] * 1e-9, dot ? tot_f / tot_s[2] * 1e-9 : 0.0,
           tot_f / tot_s[3] * 1e-9);
    return 0;
}
