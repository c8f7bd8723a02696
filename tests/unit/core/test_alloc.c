/* The allocator's categories (src/core/alloc.c): scopes tag blocks, mc_free credits the block's
 * own category, the current bytes sum to the live total, the split at the peak sums to the peak,
 * and the counters stay exact when threads allocate at once. */
#include "megatron.h"
#include "test.h"

#include <pthread.h>
#include <string.h>

static size_t sum(const size_t *v)
{
    size_t s = 0;
    for (int c = 0; c < MC_MEM_COUNT; c++)
        s += v[c];
    return s;
}

static void *churn(void *arg)
{
    enum mc_mem_category c = (enum mc_mem_category)(size_t)arg;
    for (int i = 0; i < 20000; i++) {
        void *p = MC_MEM_AS(c, mc_alloc((size_t)(i % 97) * 8 + 1));
        mc_free(p);
    }
    return NULL;
}

int main(void)
{
    struct mc_mem_stats a, b;
    mc_mem_get_stats(&a);
    CHECK(sum(a.current) == a.live_bytes);

    char *other = mc_alloc(100);
    char *par = MC_MEM_AS(MC_MEM_PARAMS, mc_alloc(1000));
    mc_mem_push(MC_MEM_ACTIVATIONS);
    char *act = mc_alloc(3000);
    mc_mem_push(MC_MEM_COMM); /* nested: the innermost scope wins */
    char *comm = mc_calloc(10, 50);
    mc_mem_pop();
    char *act2 = mc_alloc(7);
    CHECK(mc_mem_pop_status(MC_ERR_IO) == MC_ERR_IO);
    mc_mem_get_stats(&b);
    CHECK(b.current[MC_MEM_OTHER] == a.current[MC_MEM_OTHER] + 100);
    CHECK(b.current[MC_MEM_PARAMS] == a.current[MC_MEM_PARAMS] + 1000);
    CHECK(b.current[MC_MEM_ACTIVATIONS] == a.current[MC_MEM_ACTIVATIONS] + 3007);
    CHECK(b.current[MC_MEM_COMM] == a.current[MC_MEM_COMM] + 500);
    CHECK(b.live_count == a.live_count + 5);
    CHECK(b.live_bytes == a.live_bytes + 4607);
    CHECK(sum(b.current) == b.live_bytes);
    CHECK(sum(b.at_peak) == b.peak_bytes);
    CHECK(b.peak_bytes >= b.live_bytes);

    /* freed outside any scope: the block's own category is credited */
    mc_free(act);
    mc_mem_push(MC_MEM_GRADS);
    mc_free(par);
    mc_mem_pop();
    mc_mem_get_stats(&b);
    CHECK(b.current[MC_MEM_PARAMS] == a.current[MC_MEM_PARAMS]);
    CHECK(b.current[MC_MEM_GRADS] == a.current[MC_MEM_GRADS]);
    CHECK(b.current[MC_MEM_ACTIVATIONS] == a.current[MC_MEM_ACTIVATIONS] + 7);
    CHECK(b.peak[MC_MEM_ACTIVATIONS] >= a.current[MC_MEM_ACTIVATIONS] + 3007);
    mc_free(act2);
    mc_free(comm);
    mc_free(other);

    /* reset: the peaks restart from the live numbers */
    mc_mem_reset_peaks();
    mc_mem_get_stats(&b);
    CHECK(b.peak_bytes == b.live_bytes && b.live_bytes == a.live_bytes);
    CHECK(memcmp(b.peak, b.current, sizeof(b.peak)) == 0);
    char *big = MC_MEM_AS(MC_MEM_OPTIMIZER, mc_alloc(1 << 20));
    mc_mem_get_stats(&b);
    CHECK(b.peak_bytes == a.live_bytes + (1 << 20));
    CHECK(b.at_peak[MC_MEM_OPTIMIZER] == a.current[MC_MEM_OPTIMIZER] + (1 << 20));
    CHECK(sum(b.at_peak) == b.peak_bytes);
    mc_free(big);

    /* threads: every block returns, the per-category counters included */
    pthread_t th[4];
    for (size_t i = 0; i < 4; i++)
        CHECK(pthread_create(&th[i], NULL, churn, (void *)(i + 1)) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    mc_mem_get_stats(&b);
    CHECK(b.live_bytes == a.live_bytes && b.live_count == a.live_count);
    CHECK(memcmp(b.current, a.current, sizeof(b.current)) == 0);
    CHECK(sum(b.at_peak) == b.peak_bytes);

    CHECK(strcmp(mc_mem_category_name(MC_MEM_OPTIMIZER), "optimizer state") == 0);
    CHECK(strcmp(mc_mem_category_name(MC_MEM_COUNT), "invalid") == 0);
    size_t rss = mc_mem_rss_bytes(), peak_rss = mc_mem_peak_rss_bytes();
#if defined(__linux__)
    CHECK(rss > 0 && peak_rss >= rss); /* the peak is never below the resident set now */
    /* touched pages show in the resident set */
    size_t n = 64u << 20;
    char *touched = mc_alloc(n);
    memset(touched, 1, n);
    CHECK(mc_mem_rss_bytes() >= rss + n / 2);
    CHECK(mc_mem_peak_rss_bytes() >= rss + n / 2);
    mc_free(touched);
#endif
    return test_summary("test_alloc");
}
