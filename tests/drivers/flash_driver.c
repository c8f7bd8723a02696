/* Runs the flash attention op pair (backend.h flash_attention_fwd/_bwd) and, with unfused=1,
 * the unfused attention op pair on the same inputs, for tests/backend/test_flash_attention.py.
 * usage: flash_driver DTYPE DIR key=value...; inputs DIR/qkv.bin [s, b, qkv_ld], DIR/dctx.bin
 * [s, b, ctx_ld] (DTYPE), DIR/mask.bin [b, s, s] u8 when causal=0; outputs DIR/out_<name>.bin:
 * ctx, lse (fp32 [b, heads, s]), dqkv, and u_ctx, u_dqkv from the unfused op. threads=N sets
 * the OpenMP thread count; MC_KERNELS=ref selects the reference tile kernels; window=W (optional)
 * the flash ops' sliding window (the unfused ops get it as mask.bin); alibi=1 (row form) or 2
 * (square form) adds MindSpeed-LLM's ALiBi bias to both, with the slopes of heads head_first ..
 * of heads_total (mc_tfm_alibi_slopes; defaults: this call's heads); the slopes are written to
 * out_slopes.bin. */
#include "backend/backend.h"
#include "core/dtype.h"
#include "megatron.h"
#include "transformer/transformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const char *dir;
static int nparam;
static char **params;
static struct mc_backend *be;
static const struct mc_backend_ops *o;

static const char *find(const char *key)
{
    size_t n = strlen(key);
    for (int i = 0; i < nparam; i++)
        if (!strncmp(params[i], key, n) && params[i][n] == '=')
            return params[i] + n + 1;
    return NULL;
}

static double P(const char *key)
{
    const char *v = find(key);
    if (!v) {
        fprintf(stderr, "flash_driver: parameter %s= missing\n", key);
        exit(2);
    }
    return atof(v);
}
#define I(k) ((int64_t)P(k))

static void *in(const char *name, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "rb");
    void *h = malloc(bytes + 1);
    if (!f || !h || fread(h, 1, bytes + 1, f) != bytes) {
        fprintf(stderr, "flash_driver: %s: cannot read exactly %zu bytes\n", path, bytes);
        exit(1);
    }
    fclose(f);
    void *p = o->alloc(be, bytes);
    o->copy_to_backend(be, p, h, bytes);
    free(h);
    return p;
}

static void *zeros(size_t bytes)
{
    void *p = o->alloc(be, bytes ? bytes : 1);
    o->set(be, p, 0, bytes);
    return p;
}

static void out(const char *name, const void *p, size_t bytes)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/out_%s.bin", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    void *h = malloc(bytes ? bytes : 1);
    o->copy_to_host(be, h, p, bytes);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(h, 1, bytes, f) != bytes || fclose(f) || rename(tmp, path)) {
        fprintf(stderr, "flash_driver: cannot write %s\n", path);
        exit(1);
    }
    free(h);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: flash_driver DTYPE DIR key=value...\n");
        return 2;
    }
    enum mc_dtype dt = !strcmp(argv[1], "bfloat16") ? MC_DTYPE_BF16
                       : !strcmp(argv[1], "float16") ? MC_DTYPE_F16
                       : !strcmp(argv[1], "float32") ? MC_DTYPE_F32 : MC_DTYPE_COUNT;
    if (dt == MC_DTYPE_COUNT) {
        fprintf(stderr, "flash_driver: DTYPE %s: expected bfloat16, float16 or float32\n", argv[1]);
        return 2;
    }
    dir = argv[2];
    nparam = argc - 3;
    params = argv + 3;
#ifdef _OPENMP
    omp_set_num_threads((int)I("threads"));
#endif
    if (mc_backend_create("cpu", &be) != MC_OK) {
        fprintf(stderr, "flash_driver: %s\n", mc_last_error());
        return 1;
    }
    o = be->ops;
    size_t E = mc_dtype_size(dt);
    struct mc_attention_desc d = {.dt = dt, .b = I("b"), .s = I("s"), .heads = I("heads"),
                                  .groups = I("groups"), .hn = I("hn"), .alpha = (float)P("alpha"),
                                  .mult = (float)P("mult"), .dropout = (float)P("p"),
                                  .rng = {(uint64_t)I("seed"), 0, 1, 2}};
    d.qkv_ld = (d.heads + 2 * d.groups) * d.hn;
    d.ctx_ld = d.heads * d.hn;
    d.heads_total = d.heads;
    d.window = find("window") ? I("window") : 0; /* sliding window: flash ops only */
    float *slopes = calloc((size_t)d.heads, sizeof(float));
    if (find("alibi") && I("alibi")) {
        d.heads_total = find("heads_total") ? I("heads_total") : d.heads;
        d.head_first = find("head_first") ? I("head_first") : 0;
        mc_tfm_alibi_slopes(slopes, d.heads_total, d.head_first, d.heads);
        d.alibi_slopes = slopes;
        d.alibi_square = I("alibi") == 2;
    }
    int64_t T = d.b * d.s, nl = d.b * d.heads * d.s;
    void *qkv = in("qkv", E * (size_t)(T * d.qkv_ld)), *dctx = in("dctx", E * (size_t)(T * d.ctx_ld));
    if (!I("causal"))
        d.mask = in("mask", (size_t)(d.b * d.s * d.s));
    void *ctx = zeros(E * (size_t)(T * d.ctx_ld)), *dqkv = zeros(E * (size_t)(T * d.qkv_ld));
    float *lse = zeros(sizeof(float) * (size_t)nl);
    o->flash_attention_fwd(be, &d, qkv, ctx, lse);
    o->flash_attention_bwd(be, &d, qkv, ctx, lse, dctx, dqkv);
    out("ctx", ctx, E * (size_t)(T * d.ctx_ld));
    out("lse", lse, sizeof(float) * (size_t)nl);
    out("dqkv", dqkv, E * (size_t)(T * d.qkv_ld));
    if (d.alibi_slopes) { /* host floats: written directly */
        char path[4096];
        snprintf(path, sizeof path, "%s/out_slopes.bin", dir);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(slopes, sizeof(float), (size_t)d.heads, f) != (size_t)d.heads || fclose(f)) {
            fprintf(stderr, "flash_driver: cannot write %s\n", path);
            return 1;
        }
    }
    if (I("unfused")) {
        size_t np = (size_t)(d.b * d.heads * d.s * d.s);
        void *probs = zeros(E * np), *uctx = zeros(E * (size_t)(T * d.ctx_ld));
        void *udq = zeros(E * (size_t)(T * d.qkv_ld));
        struct mc_attention_work w = {zeros(E * np), zeros(E * np), zeros(np)};
        o->attention_fwd(be, &d, qkv, probs, uctx, &w);
        o->attention_bwd(be, &d, qkv, probs, dctx, udq, &w);
        out("u_ctx", uctx, E * (size_t)(T * d.ctx_ld));
        out("u_dqkv", udq, E * (size_t)(T * d.qkv_ld));
        out("u_keep", w.keep, np);
    }
    mc_backend_free(be);
    free(slopes);
    return 0;
}
