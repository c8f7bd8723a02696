/* Aligned, counted allocation. Every block carries a 64-byte header holding its size and its
 * category (enum mc_mem_category), so mc_free keeps the live counters exact, tests can assert
 * that nothing leaks, and a run reports its memory by category the way Megatron reports
 * torch.cuda.memory_stats() (megatron/training/training.py training_log, utils.py
 * report_memory, core_v0.12.1). The counters sit under one spinlock: the critical section is a
 * few additions, and it keeps a snapshot (and the by-category split at the peak) consistent
 * when threads allocate at once. */
#include "megatron.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#include <unistd.h>
#endif

#define MC_ALIGN 64
#define MC_SCOPE_MAX 16

struct header { /* the first bytes of the 64 before each block */
    size_t bytes;
    unsigned char category;
};
_Static_assert(sizeof(struct header) <= MC_ALIGN, "the header must fit its 64 bytes");

static atomic_flag lock = ATOMIC_FLAG_INIT;
static struct mc_mem_stats st; /* under lock */

/* the calling thread's scopes (mc_mem_push/pop) */
static _Thread_local unsigned char scope[MC_SCOPE_MAX];
static _Thread_local int depth;

static void take(void)
{
    while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire))
        ;
}

static void give(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }

static void count_alloc(size_t bytes, int c)
{
    take();
    st.live_bytes += bytes;
    st.live_count++;
    st.current[c] += bytes;
    if (st.current[c] > st.peak[c])
        st.peak[c] = st.current[c];
    if (st.live_bytes > st.peak_bytes) { /* a new overall peak: remember its split */
        st.peak_bytes = st.live_bytes;
        memcpy(st.at_peak, st.current, sizeof(st.at_peak));
    }
    give();
}

static void count_free(size_t bytes, int c)
{
    take();
    st.live_bytes -= bytes;
    st.live_count--;
    st.current[c] -= bytes;
    give();
}

void *mc_alloc(size_t bytes)
{
    if (bytes > SIZE_MAX - 2 * MC_ALIGN) {
        mc_error(MC_ERR_NOMEM, "allocation of %zu bytes overflows", bytes);
        return NULL;
    }
    /* round up so aligned_alloc's size is a multiple of the alignment */
    size_t total = (bytes + MC_ALIGN + MC_ALIGN - 1) / MC_ALIGN * MC_ALIGN;
    unsigned char *base = aligned_alloc(MC_ALIGN, total);
    if (!base) {
        mc_error(MC_ERR_NOMEM, "out of memory allocating %zu bytes", bytes);
        return NULL;
    }
    struct header h = {bytes, depth > 0 ? scope[depth - 1] : MC_MEM_OTHER};
    memcpy(base, &h, sizeof(h));
    count_alloc(bytes, h.category);
    return base + MC_ALIGN;
}

void *mc_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        mc_error(MC_ERR_NOMEM, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    void *p = mc_alloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void mc_free(void *p)
{
    if (!p)
        return;
    unsigned char *base = (unsigned char *)p - MC_ALIGN;
    struct header h;
    memcpy(&h, base, sizeof(h));
    count_free(h.bytes, h.category);
    free(base);
}

size_t mc_alloc_live_bytes(void)
{
    struct mc_mem_stats s;
    mc_mem_get_stats(&s);
    return s.live_bytes;
}

size_t mc_alloc_peak_bytes(void)
{
    struct mc_mem_stats s;
    mc_mem_get_stats(&s);
    return s.peak_bytes;
}

/* ---- categories ------------------------------------------------------------------------- */

const char *mc_mem_category_name(enum mc_mem_category c)
{
    static const char *const names[MC_MEM_COUNT] = {
        [MC_MEM_OTHER] = "other", [MC_MEM_PARAMS] = "parameters",
        [MC_MEM_GRADS] = "gradients", [MC_MEM_OPTIMIZER] = "optimizer state",
        [MC_MEM_ACTIVATIONS] = "activations", [MC_MEM_COMM] = "communication buffers",
        [MC_MEM_WORKSPACE] = "workspace"};
    return (unsigned)c < MC_MEM_COUNT ? names[c] : "invalid";
}

void mc_mem_push(enum mc_mem_category c)
{
    MC_ASSERT((unsigned)c < MC_MEM_COUNT);
    MC_ASSERT(depth < MC_SCOPE_MAX);
    scope[depth++] = (unsigned char)c;
}

void mc_mem_pop(void)
{
    MC_ASSERT(depth > 0);
    depth--;
}

void *mc_mem_pop_ptr(void *p)
{
    mc_mem_pop();
    return p;
}

mc_status mc_mem_pop_status(mc_status s)
{
    mc_mem_pop();
    return s;
}

void mc_mem_get_stats(struct mc_mem_stats *s)
{
    take();
    *s = st;
    give();
}

void mc_mem_reset_peaks(void)
{
    take();
    st.peak_bytes = st.live_bytes;
    memcpy(st.peak, st.current, sizeof(st.peak));
    memcpy(st.at_peak, st.current, sizeof(st.at_peak));
    give();
}

/* ---- what the process holds from the system ---------------------------------------------- */

size_t mc_mem_rss_bytes(void)
{
#if defined(__linux__)
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    int n = f ? fscanf(f, "%llu %llu", &size, &resident) : 0;
    if (f)
        fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (size_t)resident * (size_t)page : 0;
#else
    return 0;
#endif
}

/* Linux raises ru_maxrss lazily (when the resident set is about to shrink, and at exit), so
 * the peak is at least the resident set now. */
size_t mc_mem_peak_rss_bytes(void)
{
    size_t peak = 0;
#if defined(__unix__) || defined(__APPLE__)
    struct rusage ru;
    if (!getrusage(RUSAGE_SELF, &ru))
#if defined(__APPLE__)
        peak = (size_t)ru.ru_maxrss; /* bytes on macOS */
#else
        peak = (size_t)ru.ru_maxrss * 1024; /* KiB on Linux and the BSDs */
#endif
#endif
    size_t now = mc_mem_rss_bytes();
    return peak > now ? peak : now;
}
