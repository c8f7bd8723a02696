/* GEMM library comparison on the GPT-2 124M training shapes (docs/gemm.md). One source, built
 * once per library (-DUSE_OPENBLAS / -DUSE_BLIS / -DUSE_DNNL, see run.sh), because OpenBLAS and
 * BLIS both export cblas_sgemm. Row-major C = op(A) @ op(B) as in the backend's gemm contract.
 * Shapes mirror Megatron's ColumnParallelLinear/RowParallelLinear: forward Y = X W^T (NT),
 * backward dX = dY W (NN) and dW += dY^T X (TN), for qkv, proj, fc1, fc2 and the output layer.
 * Usage: bench_gemm <threads> <T> [min_seconds]; prints one line per shape with GFLOP/s. */
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(USE_OPENBLAS)
#include <cblas.h>
#define LIBNAME "openblas"
#elif defined(USE_BLIS)
#include <blis.h>
#define LIBNAME "blis"
#elif defined(USE_DNNL)
#include <oneapi/dnnl/dnnl.h>
#define LIBNAME "onednn"
#else
#error "define USE_OPENBLAS, USE_BLIS or USE_DNNL"
#endif

static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *C, int64_t ldc)
{
#if defined(USE_OPENBLAS) || defined(USE_BLIS)
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, 0.0f, C, (int)ldc);
#else
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
#endif
}

/* BENCH_CPUTIME=1 times with the process CPU clock instead of the wall clock: on a shared,
 * oversubscribed machine a 1-thread run then still measures the work, not the waiting for a
 * core (with more threads it would also count spin-waiting, so use it for 1 thread only). */
static double now(void)
{
    static int cpu = -1;
    if (cpu < 0) cpu = getenv("BENCH_CPUTIME") && atoi(getenv("BENCH_CPUTIME")) > 0;
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static float *randbuf(int64_t n)
{
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int64_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

/* Determinism: the backend contract asks for bit-identical results for any thread count, so
 * each shape is run with 1 and with `threads` threads and compared bit for bit. */
static int check_determinism(int threads, int64_t T)
{
    const int64_t h = 768;
    struct { bool ta, tb; int64_t M, N, K; } s[] = {
        {false, true, T, 3 * h, h}, {false, false, T, h, 4 * h}, {true, false, 4 * h, h, T},
        {false, false, T, h, 50304}, {true, false, 50304, h, T}, {true, false, h, h, T},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        int64_t M = s[i].M, N = s[i].N, K = s[i].K;
        int64_t lda = s[i].ta ? M : K, ldb = s[i].tb ? K : N;
        float *A = randbuf(M * K), *B = randbuf(K * N), *C1 = randbuf(M * N), *C2 = randbuf(M * N);
        for (int64_t j = 0; j < M * K; j++) A[j] *= 1.0f + (float)(j % 7) * 0.1f;
        int th[2] = {1, threads};
        for (int r = 0; r < 2; r++) {
            omp_set_num_threads(th[r]);
#if defined(USE_OPENBLAS)
            openblas_set_num_threads(th[r]);
#elif defined(USE_BLIS)
            bli_thread_set_num_threads(th[r]);
#endif
            gemm(s[i].ta, s[i].tb, M, N, K, A, lda, B, ldb, r ? C2 : C1, N);
        }
        int same = memcmp(C1, C2, (size_t)(M * N) * sizeof(float)) == 0;
        bad += !same;
        printf("%-8s determinism 1 vs %d threads %c%c M=%-5lld N=%-5lld K=%-5lld %s\n", LIBNAME,
               threads, s[i].ta ? 'T' : 'N', s[i].tb ? 'T' : 'N', (long long)M, (long long)N,
               (long long)K, same ? "bitwise equal" : "DIFFERENT");
        free(A); free(B); free(C1); free(C2);
    }
    return bad;
}

/* A training step alternates GEMMs with OpenMP kernels. A library with its own thread pool
 * (OpenBLAS pthreads) can leave spinning threads that compete with the OpenMP team on the same
 * cores; this times GEMM + an OpenMP elementwise pass, alternated, against each alone. */
static void mixed(int threads, int64_t T)
{
    const int64_t h = 768, o = 4 * h;
    float *X = randbuf(T * h), *W = randbuf(o * h), *Y = randbuf(T * o);
    omp_set_num_threads(threads);
#if defined(USE_OPENBLAS)
    openblas_set_num_threads(threads);
#elif defined(USE_BLIS)
    bli_thread_set_num_threads(threads);
#endif
    double tg = 1e30, te = 1e30, tm = 1e30, t0, t;
    for (int rep = 0; rep < 8; rep++) { /* fastest of 8: the machine is shared */
        t0 = now();
        gemm(false, true, T, o, h, X, h, W, h, Y, o);
        t = now() - t0;
        tg = t < tg ? t : tg;
        t0 = now();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < T * o; i++) Y[i] = Y[i] * 0.5f + 1.0f / (1.0f + Y[i] * Y[i]);
        t = now() - t0;
        te = t < te ? t : te;
    }
    for (int rep = 0; rep < 8; rep++) {
        t0 = now();
        gemm(false, true, T, o, h, X, h, W, h, Y, o);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < T * o; i++) Y[i] = Y[i] * 0.5f + 1.0f / (1.0f + Y[i] * Y[i]);
        t = now() - t0;
        tm = t < tm ? t : tm;
    }
    printf("%-8s %d threads T=%lld mixed: gemm %.2f ms + omp pass %.2f ms (timed apart) vs %.2f ms alternated\n",
           LIBNAME, threads, (long long)T, tg * 1e3, te * 1e3, tm * 1e3);
    free(X); free(W); free(Y);
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "mix") == 0) { mixed(atoi(argv[2]), atoll(argv[3])); return 0; }
    if (argc >= 4 && strcmp(argv[1], "det") == 0) return check_determinism(atoi(argv[2]), atoll(argv[3])) ? 1 : 0;
    if (argc < 3) { fprintf(stderr, "usage: %s threads T [min_seconds]\n", argv[0]); return 2; }
    int threads = atoi(argv[1]);
    int64_t T = atoll(argv[2]);
    double min_s = argc > 3 ? atof(argv[3]) : 0.5;
    omp_set_num_threads(threads);
#if defined(USE_OPENBLAS)
    openblas_set_num_threads(threads);
    const char *core = openblas_get_corename();
#elif defined(USE_BLIS)
    bli_thread_set_num_threads(threads);
    const char *core = bli_arch_string(bli_arch_query_id());
#else
    const char *core = "jit";
#endif
    const int64_t h = 768;
    struct { const char *name; int64_t in, out; } lin[] = {
        {"qkv", h, 3 * h}, {"proj", h, h}, {"fc1", h, 4 * h}, {"fc2", 4 * h, h},
        {"logits", h, 50304},
    };
    double total_flop = 0, total_s = 0;
    const char *only = getenv("BENCH_ONLY"); /* e.g. BENCH_ONLY=fc1: one layer's shapes */
    for (size_t l = 0; l < sizeof lin / sizeof lin[0]; l++) {
        if (only && strcmp(only, lin[l].name)) continue;
        int64_t in = lin[l].in, out = lin[l].out;
        float *X = randbuf(T * in), *W = randbuf(out * in), *Y = randbuf(T * out);
        float *dW = randbuf(out * in), *dX = randbuf(T * in);
        for (int pass = 0; pass < 3; pass++) {
            const char *kind = pass == 0 ? "fwd NT" : pass == 1 ? "bwd NN" : "bwd TN";
            int64_t M = pass == 2 ? out : T, N = pass == 0 ? out : in, K = pass == 0 ? in : pass == 1 ? out : T;
            double flop = 2.0 * M * N * K, start = now(), dt = 1e30;
            /* one warm-up call, then the fastest of repeated calls until min_s has passed: the
             * machine is shared, and the minimum is the least disturbed measurement */
            for (int rep = 0; rep < 2 || now() - start < min_s; rep++) {
                double t0 = now();
                if (pass == 0) gemm(false, true, M, N, K, X, in, W, in, Y, out);
                else if (pass == 1) gemm(false, false, M, N, K, Y, out, W, in, dX, in);
                else gemm(true, false, M, N, K, Y, out, X, in, dW, in);
                double t = now() - t0;
                if (rep > 0 && t < dt) dt = t;
            }
            total_flop += flop;
            total_s += dt;
            printf("%-8s %-2d T=%-5lld %-6s %-6s M=%-5lld N=%-5lld K=%-5lld %8.2f ms %7.1f GFLOP/s  [%s]\n",
                   LIBNAME, threads, (long long)T, lin[l].name, kind, (long long)M, (long long)N,
                   (long long)K, dt * 1e3, flop / dt * 1e-9, core);
        }
        free(X); free(W); free(Y); free(dW); free(dX);
    }
    /* Core attention, one head (hn = 64) at sequence length T, with the strides of Megatron's
     * [s, b, 3h] qkv layout (b = 1): scores NT, context NN, and the backward NT/TN/NN. */
    if (!only || !strcmp(only, "attn")) {
        const int64_t hn = 64, ldq = 3 * h;
        float *Q = randbuf(T * ldq), *P = randbuf(T * T), *Cx = randbuf(T * h);
        struct { const char *kind; bool ta, tb; int64_t M, N, K, lda, ldb, ldc; const float *A, *B; float *C; } at[] = {
            {"scores NT", false, true, T, T, hn, ldq, ldq, T, Q, Q + h, P},
            {"ctx NN", false, false, T, hn, T, T, ldq, h, P, Q + 2 * h, Cx},
            {"dV/dK TN", true, false, T, hn, T, T, h, ldq, P, Cx, Q},
        };
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
            double flop = 2.0 * at[i].M * at[i].N * at[i].K, start = now(), dt = 1e30;
            for (int rep = 0; rep < 3 || now() - start < min_s; rep++) {
                double t0 = now();
                gemm(at[i].ta, at[i].tb, at[i].M, at[i].N, at[i].K, at[i].A, at[i].lda, at[i].B,
                     at[i].ldb, at[i].C, at[i].ldc);
                double t = now() - t0;
                if (rep > 0 && t < dt) dt = t;
            }
            printf("%-8s %-2d T=%-5lld %-6s %-9s M=%-5lld N=%-5lld K=%-5lld %8.3f ms %7.1f GFLOP/s  [%s]\n",
                   LIBNAME, threads, (long long)T, "attn", at[i].kind, (long long)at[i].M,
                   (long long)at[i].N, (long long)at[i].K, dt * 1e3, flop / dt * 1e-9, core);
        }
        free(Q); free(P); free(Cx);
    }
    printf("%-8s %-2d T=%-5lld TOTAL one layer+logits fwd+bwd %8.2f ms %7.1f GFLOP/s\n", LIBNAME,
           threads, (long long)T, total_s * 1e3, total_flop / total_s * 1e-9);
    return 0;
}
