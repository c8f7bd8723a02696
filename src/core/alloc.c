/* Aligned, counted allocation. Every block carries a 64-byte header holding its size, so
 * mc_free can keep the live-byte counter exact and tests can assert that nothing leaks. */
#include "megatron.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MC_ALIGN 64

static atomic_size_t live_bytes;
static atomic_size_t peak_bytes;

void *mc_alloc(size_t bytes)
{
    if (bytes > SIZE_MAX - MC_ALIGN) {
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
    memcpy(base, &bytes, sizeof(bytes));
    size_t now = atomic_fetch_add(&live_bytes, bytes) + bytes;
    size_t peak = atomic_load(&peak_bytes);
    while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now))
        ;
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
    size_t bytes;
    memcpy(&bytes, base, sizeof(bytes));
    atomic_fetch_sub(&live_bytes, bytes);
    free(base);
}

size_t mc_alloc_live_bytes(void) { return atomic_load(&live_bytes); }
size_t mc_alloc_peak_bytes(void) { return atomic_load(&peak_bytes); }
