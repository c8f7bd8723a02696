/* Index-building benchmark: writes N documents (one sequence each, deterministic lengths and
 * tokens shared with bench_index_megatron.py) with the megatron.c builder, then opens the
 * result with the checking reader and merges it with itself. Prints seconds and rates.
 * Built by bench/data/run_bench.sh against build/libmegatron.a. */
#include "megatron/indexed_dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(mc_status s)
{
    fprintf(stderr, "bench_index: %s: %s\n", mc_status_str(s), mc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: bench_index PREFIX N_DOCS\n");
        return 2;
    }
    const char *prefix = argv[1];
    long long n = atoll(argv[2]);
    int64_t tok[64];
    mc_ds_builder *b;
    mc_status s;
    double t0 = now_s();
    if ((s = mc_ds_builder_init(prefix, 8, &b)) != MC_OK)
        return fail(s);
    long long total = 0;
    for (long long i = 0; i < n; i++) {
        int len = 1 + (int)((i * 7919) % 64);
        for (int k = 0; k < len; k++)
            tok[k] = (i + k) % 50257;
        total += len;
        if ((s = mc_ds_builder_add_item(b, tok, len)) != MC_OK ||
            (s = mc_ds_builder_end_document(b)) != MC_OK)
            return fail(s);
    }
    if ((s = mc_ds_builder_finalize(b)) != MC_OK)
        return fail(s);
    double t1 = now_s();
    mc_indexed_dataset *ds;
    if ((s = mc_ds_open(prefix, &ds)) != MC_OK)
        return fail(s);
    double t2 = now_s();
    mc_ds_close(ds);
    char merged[4096];
    snprintf(merged, sizeof(merged), "%s_merged", prefix);
    if ((s = mc_ds_builder_init(merged, 8, &b)) != MC_OK ||
        (s = mc_ds_builder_add_index(b, prefix)) != MC_OK ||
        (s = mc_ds_builder_add_index(b, prefix)) != MC_OK ||
        (s = mc_ds_builder_finalize(b)) != MC_OK)
        return fail(s);
    double t3 = now_s();
    printf("megatron.c build: %lld docs, %lld tokens in %.3f s (%.2f M docs/s)\n", n, total,
           t1 - t0, n / (t1 - t0) / 1e6);
    printf("megatron.c open+check: %.3f s\n", t2 - t1);
    printf("megatron.c merge (add_index x2): %.3f s\n", t3 - t2);
    printf("RESULT c_build_s=%.4f c_open_s=%.4f c_merge_s=%.4f\n", t1 - t0, t2 - t1, t3 - t2);
    return 0;
}
