/* fp32 staging for the CPU backend's 16-bit ops (see half_cpu.h). */
#include "backend/cpu/half_cpu.h"

#include <pthread.h>
#include <stdlib.h>

/* Scratch buffers are kept for reuse after release (up to CACHE_SLOTS of them and CACHE_BYTES in
 * all): a 16-bit op stages through fresh fp32 copies on every call, and fresh large blocks cost
 * page faults (mmap, zeroed pages) that showed as 10-15% of a bf16 training step. Each block
 * carries its capacity in a 64-byte header. */
#define CACHE_SLOTS 16
#define CACHE_BYTES ((int64_t)1 << 30)
#define HDR 64

static struct {
    float *p[CACHE_SLOTS];
    int n;
    int64_t bytes;
    int backends; /* live backends: the cache is emptied when the last one is freed */
    pthread_mutex_t lock;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

void mc_cpu_scratch_hold(void)
{
    pthread_mutex_lock(&cache.lock);
    cache.backends++;
    pthread_mutex_unlock(&cache.lock);
}

void mc_cpu_scratch_unhold(void)
{
    pthread_mutex_lock(&cache.lock);
    if (--cache.backends <= 0) {
        cache.backends = 0;
        while (cache.n > 0)
            mc_free((char *)cache.p[--cache.n] - HDR);
        cache.bytes = 0;
    }
    pthread_mutex_unlock(&cache.lock);
}

static int64_t cap_of(const float *p) { return *(const int64_t *)((const char *)p - HDR); }

float *mc_cpu_scratch(int64_t n, const char *op)
{
    n = n > 0 ? n : 1;
    pthread_mutex_lock(&cache.lock);
    int best = -1;
    for (int i = 0; i < cache.n; i++)
        if (cap_of(cache.p[i]) >= n && (best < 0 || cap_of(cache.p[i]) < cap_of(cache.p[best])))
            best = i;
    float *p = NULL;
    if (best >= 0) {
        p = cache.p[best];
        cache.p[best] = cache.p[--cache.n];
        cache.bytes -= cap_of(p) * 4;
    }
    pthread_mutex_unlock(&cache.lock);
    if (p)
        return p;
    char *raw = MC_MEM_AS(MC_MEM_WORKSPACE, mc_alloc((size_t)n * sizeof(float) + HDR));
    if (!raw) {
        mc_log(MC_LOG_ERROR, "backend cpu: op %s: out of memory for %lld fp32 scratch elements",
               op, (long long)n);
        abort();
    }
    *(int64_t *)raw = n;
    return (float *)(raw + HDR);
}

void mc_cpu_release(float *p)
{
    if (!p)
        return;
    int64_t cap = cap_of(p);
    float *drop = p;
    pthread_mutex_lock(&cache.lock);
    if (cap * 4 <= CACHE_BYTES) {
        /* make room: evict the smallest blocks while over either limit */
        while (cache.n > 0 && (cache.n == CACHE_SLOTS || cache.bytes + cap * 4 > CACHE_BYTES)) {
            int small = 0;
            for (int i = 1; i < cache.n; i++)
                if (cap_of(cache.p[i]) < cap_of(cache.p[small]))
                    small = i;
            if (cap_of(cache.p[small]) >= cap)
                break;
            float *q = cache.p[small];
            cache.p[small] = cache.p[--cache.n];
            cache.bytes -= cap_of(q) * 4;
            mc_free((char *)q - HDR);
        }
        if (cache.n < CACHE_SLOTS && cache.bytes + cap * 4 <= CACHE_BYTES) {
            cache.p[cache.n++] = p;
            cache.bytes += cap * 4;
            drop = NULL;
        }
    }
    pthread_mutex_unlock(&cache.lock);
    if (drop)
        mc_free((char *)drop - HDR);
}

float *mc_cpu_widen(const struct mc_cpu_kernels *k, const void *src, enum mc_dtype dt,
                    int64_t n, const char *op)
{
    if (!src)
        return NULL;
    float *p = mc_cpu_scratch(n, op);
    k->convert(p, MC_DTYPE_F32, src, dt, n);
    return p;
}

void mc_cpu_narrow(const struct mc_cpu_kernels *k, void *dst, enum mc_dtype dt,
                   const float *src, int64_t n)
{
    if (dst)
        k->convert(dst, dt, src, MC_DTYPE_F32, n);
}
