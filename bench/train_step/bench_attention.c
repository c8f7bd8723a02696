/* Core attention forward + backward of one layer (the backend op pairs of backend.h) on random
 * inputs, for bench/flash/run.py: `bench_attention flash|unfused DTYPE B S HEADS GROUPS HN
 * [ITERS]` (causal mask, no dropout; threads from OMP_NUM_THREADS). Prints the best fwd and bwd
 * wall times over ITERS (after one warm-up), the best CPU time of fwd + bwd (all threads: the
 * fairer figure on a loaded machine) and the peak resident memory the ops added on top of
 * the inputs and outputs (VmHWM after the runs minus VmRSS before them, /proc/self/status). */
#include "backend/backend.h"
#include "core/dtype.h"
#include "megatron.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* user + system CPU time of the process (all threads) in ms */
static double cpu_ms(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

/* a field of /proc/self/status in KiB ("VmRSS:", "VmHWM:") */
static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)))
            v = atol(line + strlen(key));
    if (f)
        fclose(f);
    return v;
}

static void *filled(struct mc_backend *be, enum mc_dtype dt, int64_t n, uint64_t seed)
{
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    size_t es = mc_dtype_size(dt);
    void *p = be->ops->alloc(be, es * (size_t)n);
    void *t = malloc(es * (size_t)n);
    mc_dtype_from_f32(t, dt, h, n);
    be->ops->copy_to_backend(be, p, t, es * (size_t)n);
    free(h);
    free(t);
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: %s flash|unfused float32|bfloat16 B S HEADS GROUPS HN [ITERS]\n",
                argv[0]);
        return 2;
    }
    bool flash = !strcmp(argv[1], "flash");
    enum mc_dtype dt = !strcmp(argv[2], "bfloat16") ? MC_DTYPE_BF16 : MC_DTYPE_F32;
    struct mc_attention_desc d = {.dt = dt, .b = atoll(argv[3]), .s = atoll(argv[4]),
                                  .heads = atoll(argv[5]), .groups = atoll(argv[6]),
                                  .hn = atoll(argv[7]), .mult = 1.0f};
    int iters = argc > 8 ? atoi(argv[8]) : 3;
    d.alpha = 1.0f / sqrtf((float)d.hn);
    d.qkv_ld = (d.heads + 2 * d.groups) * d.hn;
    d.ctx_ld = d.heads * d.hn;
    d.heads_total = d.heads;
    struct mc_backend *be;
    if (mc_backend_create("cpu", &be) != MC_OK) {
        fprintf(stderr, "bench_attention: %s\n", mc_last_error());
        return 1;
    }
    int64_t T = d.b * d.s;
    size_t es = mc_dtype_size(dt);
    void *qkv = filled(be, dt, T * d.qkv_ld, 1), *dctx = filled(be, dt, T * d.ctx_ld, 2);
    void *ctx = filled(be, dt, T * d.ctx_ld, 3), *dqkv = filled(be, dt, T * d.qkv_ld, 4);
    float *lse = filled(be, MC_DTYPE_F32, d.b * d.heads * d.s, 5);
    long rss0 = status_kib("VmRSS:");
    /* unfused: the saved probabilities and the work buffers the model carves for this op */
    size_t np = flash ? 0 : (size_t)(d.b * d.heads * d.s * d.s);
    void *probs = NULL;
    struct mc_attention_work w = {NULL, NULL, NULL};
    if (!flash) {
        probs = be->ops->alloc(be, es * np);
        w.a = be->ops->alloc(be, es * np);
        w.b = be->ops->alloc(be, es * np);
        if (!probs || !w.a || !w.b) {
            fprintf(stderr, "bench_attention: no memory for the s x s buffers\n");
            return 1;
        }
    }
    double best_f = 1e300, best_b = 1e300, best_cpu = 1e300;
    for (int it = 0; it <= iters; it++) { /* iteration 0 warms up (and touches the pages) */
        double c0 = cpu_ms(), t0 = now_ms(), t1, t2;
        if (flash) {
            be->ops->flash_attention_fwd(be, &d, qkv, ctx, lse);
            t1 = now_ms();
            be->ops->flash_attention_bwd(be, &d, qkv, ctx, lse, dctx, dqkv);
        } else {
            be->ops->attention_fwd(be, &d, qkv, probs, ctx, &w);
            t1 = now_ms();
            be->ops->attention_bwd(be, &d, qkv, probs, dctx, dqkv, &w);
        }
        t2 = now_ms();
        double c = cpu_ms() - c0;
        if (it > 0 || iters == 0) {
            best_cpu = c < best_cpu ? c : best_cpu;
            best_f = t1 - t0 < best_f ? t1 - t0 : best_f;
            best_b = t2 - t1 < best_b ? t2 - t1 : best_b;
        }
    }
    long hwm = status_kib("VmHWM:");
    printf("fwd_ms=%.2f bwd_ms=%.2f peak_extra_mib=%.1f cpu_ms=%.1f\n", best_f, best_b,
           (double)(hwm - rss0) / 1024.0, best_cpu);
    mc_backend_free(be);
    return 0;
}
