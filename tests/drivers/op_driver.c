/* Test helper for tests/backend/test_ops_torch.py: `op_driver OP DTYPE DIR key=value...` runs
 * one backend op (and its backward) in DTYPE (bfloat16, float16 or float32) on the inputs
 * DIR/<name>.bin (raw little-endian: tensors of DTYPE, statistics float32, ids int64, masks
 * uint8) and writes every output to DIR/out_<name>.bin. Sizes come from the key=value
 * parameters; an input file of the wrong size is an error. The backend is MC_BACKEND (default
 * cpu); MC_ROUNDING=torch-cpu selects MC_ROUNDING_TORCH_CPU. OPs: gemm layernorm rmsnorm gelu_tanh gelu_erf squared_relu swiglu bias_grad
 * bias_dropout_add softmax rope embedding xent attention accumulate. */
#include "backend/backend.h"
#include "core/dtype.h"
#include "megatron.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;
static int nparam;
static char **params;
static struct mc_backend *be;
static const struct mc_backend_ops *o;
static enum mc_dtype dt;

static double P(const char *key)
{
    size_t n = strlen(key);
    for (int i = 0; i < nparam; i++)
        if (!strncmp(params[i], key, n) && params[i][n] == '=')
            return atof(params[i] + n + 1);
    fprintf(stderr, "op_driver: parameter %s= missing\n", key);
    exit(2);
}

/* Input DIR/name.bin of exactly `bytes` bytes, in backend memory. */
static void *in(const char *name, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "rb");
    void *h = malloc(bytes + 1);
    if (!f || !h || fread(h, 1, bytes + 1, f) != bytes) {
        fprintf(stderr, "op_driver: %s: cannot read exactly %zu bytes\n", path, bytes);
        exit(1);
    }
    fclose(f);
    void *p = o->alloc(be, bytes ? bytes : 1);
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
        fprintf(stderr, "op_driver: cannot write %s\n", path);
        exit(1);
    }
    free(h);
}

#define I(k) ((int64_t)P(k))

static size_t E; /* bytes per element of dt */

static void run_gemm(void)
{
    bool ta = I("ta"), tb = I("tb");
    int64_t M = I("M"), N = I("N"), K = I("K");
    enum mc_dtype cdt = I("c_f32") ? MC_DTYPE_F32 : dt;
    void *A = in("A", E * M * K), *B = in("B", E * K * N), *C = in("C", mc_dtype_size(cdt) * M * N);
    o->gemm(be, ta, tb, M, N, K, (float)P("alpha"), A, dt, ta ? M : K, B, dt, tb ? K : N,
            (float)P("beta"), C, cdt, N, MC_DTYPE_F32);
    out("C", C, mc_dtype_size(cdt) * M * N);
}

static void run_norm(bool layer)
{
    int64_t rows = I("rows"), h = I("h");
    bool hasb = layer && I("bias");
    void *x = in("x", E * rows * h), *w = in("w", E * h), *b = hasb ? in("b", E * h) : NULL;
    void *dy = in("dy", E * rows * h), *y = zeros(E * rows * h), *dx = zeros(E * rows * h);
    void *dw = zeros(E * h), *db = hasb ? zeros(E * h) : NULL;
    float *mean = zeros(4 * rows), *rstd = zeros(4 * rows);
    if (layer) {
        o->layernorm_fwd(be, dt, y, mean, rstd, x, w, b, rows, h, (float)P("eps"));
        o->layernorm_bwd(be, dt, dx, dw, db, dy, x, w, mean, rstd, rows, h);
    } else {
        o->rmsnorm_fwd(be, dt, y, rstd, x, w, rows, h, (float)P("eps"));
        o->rmsnorm_bwd(be, dt, dx, dw, dy, x, w, rstd, rows, h);
    }
    out("y", y, E * rows * h);
    out("dx", dx, E * rows * h);
    out("dw", dw, E * h);
    if (hasb)
        out("db", db, E * h);
}

static void run_act(const char *op)
{
    int64_t rows = I("rows"), cols = I("cols"), xw = strcmp(op, "swiglu") ? cols : 2 * cols;
    void *x = in("x", E * rows * xw), *bias = I("bias") ? in("bias", E * xw) : NULL;
    void *dy = in("dy", E * rows * cols), *y = zeros(E * rows * cols), *dx = zeros(E * rows * xw);
    if (!strcmp(op, "gelu_tanh")) {
        o->gelu_tanh_fwd(be, dt, y, x, bias, rows, cols);
        o->gelu_tanh_bwd(be, dt, dx, dy, x, bias, rows, cols);
    } else if (!strcmp(op, "gelu_erf")) {
        o->gelu_erf_fwd(be, dt, y, x, bias, rows, cols);
        o->gelu_erf_bwd(be, dt, dx, dy, x, bias, rows, cols);
    } else if (!strcmp(op, "squared_relu")) {
        o->squared_relu_fwd(be, dt, y, x, bias, rows, cols);
        o->squared_relu_bwd(be, dt, dx, dy, x, bias, rows, cols);
    } else {
        o->swiglu_fwd(be, dt, y, x, bias, rows, cols);
        o->swiglu_bwd(be, dt, dx, dy, x, bias, rows, cols);
    }
    out("y", y, E * rows * cols);
    out("dx", dx, E * rows * xw);
}

static void run_bias(bool grad)
{
    int64_t rows = I("rows"), cols = I("cols");
    if (grad) {
        void *dy = in("dy", E * rows * cols), *db = zeros(E * cols);
        o->bias_grad(be, dt, db, dy, rows, cols);
        out("db", db, E * cols);
        return;
    }
    void *x = in("x", E * rows * cols), *b = in("bias", E * cols), *r = in("residual", E * rows * cols);
    uint8_t *keep = in("keep", (size_t)(rows * cols));
    void *y = zeros(E * rows * cols);
    o->bias_dropout_add(be, dt, y, x, b, r, keep, (float)(1.0 / (1.0 - P("p"))), rows, cols);
    out("y", y, E * rows * cols);
}

static void run_softmax(void)
{
    int64_t bh = I("bh"), sq = I("sq"), sk = I("sk");
    size_t n = E * (size_t)(bh * sq * sk);
    void *p = in("scores", n), *dp = in("dp", n);
    uint8_t *mask = I("causal") ? NULL : in("mask", (size_t)(sq * sk));
    o->masked_softmax_fwd(be, dt, p, bh, sq, sk, (float)P("mult"), mask);
    o->masked_softmax_bwd(be, dt, dp, p, bh, sq, sk, (float)P("mult"));
    out("p", p, n);
    out("ds", dp, n);
}

static void run_rope(void)
{
    int64_t s = I("s"), bh = I("bh"), hn = I("hn"), rot = I("rot");
    size_t n = E * (size_t)(s * bh * hn);
    void *t = in("t", n), *g = in("dy", n);
    float *c = in("cos", 4 * (size_t)(s * rot)), *sn = in("sin", 4 * (size_t)(s * rot));
    o->rope_fwd(be, dt, t, c, sn, s, bh, hn, rot, I("interleaved"));
    o->rope_bwd(be, dt, g, c, sn, s, bh, hn, rot, I("interleaved"));
    out("y", t, n);
    out("dx", g, n);
}

static void run_embedding(void)
{
    int64_t n = I("n"), h = I("h"), vs = I("vstart"), vl = I("vlocal");
    void *w = in("w", E * vl * h), *dy = in("dy", E * n * h);
    int64_t *ids = in("ids", 8 * (size_t)n);
    void *y = zeros(E * n * h), *dw = zeros(E * vl * h);
    o->embedding_fwd(be, dt, y, w, ids, n, h, vs, vl);
    o->embedding_bwd(be, dt, dw, dy, ids, n, h, vs, vl);
    out("y", y, E * n * h);
    out("dw", dw, E * vl * h);
}

static void run_xent(void)
{
    int64_t n = I("n"), v = I("v");
    void *lg = in("logits", E * n * v);
    int64_t *tg = in("target", 8 * (size_t)n);
    float *dl = in("dloss", 4 * (size_t)n), *mx = zeros(4 * n), *se = zeros(4 * n);
    float *tl = zeros(4 * n);
    o->xent_max(be, dt, mx, lg, n, v);
    o->xent_sumexp(be, dt, se, tl, lg, mx, tg, n, v, 0);
    o->xent_bwd(be, dt, lg, lg, mx, se, tg, dl, n, v, 0);
    out("max", mx, 4 * n);
    out("sumexp", se, 4 * n);
    out("target_logit", tl, 4 * n);
    out("dlogits", lg, E * n * v);
}

static void run_attention(void)
{
    struct mc_attention_desc d = {.dt = dt, .b = I("b"), .s = I("s"), .heads = I("heads"),
                                  .groups = I("groups"), .hn = I("hn"), .alpha = (float)P("alpha"),
                                  .mult = (float)P("mult"), .dropout = (float)P("p"),
                                  .rng = {(uint64_t)I("seed"), 0, 1, 2},
                                  .softmax_in_fp32 = I("softmax_fp32")};
    d.qkv_ld = (d.heads + 2 * d.groups) * d.hn;
    d.ctx_ld = d.heads * d.hn;
    d.heads_total = d.heads;
    int64_t T = d.b * d.s, np = d.b * d.heads * d.s * d.s;
    void *qkv = in("qkv", E * T * d.qkv_ld), *dctx = in("dctx", E * T * d.ctx_ld);
    if (!I("causal"))
        d.mask = in("mask", (size_t)(d.b * d.s * d.s));
    void *probs = zeros(E * np), *ctx = zeros(E * T * d.ctx_ld), *dqkv = zeros(E * T * d.qkv_ld);
    struct mc_attention_work w = {zeros(E * np), zeros(E * np), zeros((size_t)np)};
    o->attention_fwd(be, &d, qkv, probs, ctx, &w);
    out("keep", w.keep, (size_t)np);
    o->attention_bwd(be, &d, qkv, probs, dctx, dqkv, &w);
    out("probs", probs, E * np);
    out("ctx", ctx, E * T * d.ctx_ld);
    out("dqkv", dqkv, E * T * d.qkv_ld);
}

/* main_grad (fp32) += grad (dt), and the fp32 -> dt conversion of the result. */
static void run_accumulate(void)
{
    int64_t n = I("n");
    float *mg = in("main", 4 * (size_t)n);
    void *g = in("grad", E * n), *r = zeros(E * n);
    o->accumulate(be, mg, MC_DTYPE_F32, g, dt, n);
    o->convert(be, r, dt, mg, MC_DTYPE_F32, n);
    out("main", mg, 4 * (size_t)n);
    out("rounded", r, E * n);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: op_driver OP DTYPE DIR key=value...\n");
        return 2;
    }
    const char *op = argv[1];
    dir = argv[3];
    nparam = argc - 4;
    params = argv + 4;
    dt = !strcmp(argv[2], "bfloat16") ? MC_DTYPE_BF16 : !strcmp(argv[2], "float16") ? MC_DTYPE_F16
         : !strcmp(argv[2], "float32") ? MC_DTYPE_F32 : MC_DTYPE_COUNT;
    if (dt == MC_DTYPE_COUNT) {
        fprintf(stderr, "op_driver: DTYPE %s: expected bfloat16, float16 or float32\n", argv[2]);
        return 2;
    }
    E = mc_dtype_size(dt);
    const char *name = getenv("MC_BACKEND");
    if (mc_backend_create(name && *name ? name : "cpu", &be) != MC_OK) {
        fprintf(stderr, "op_driver: %s\n", mc_last_error());
        return 1;
    }
    o = be->ops;
    const char *rounding = getenv("MC_ROUNDING"); /* torch-cpu: MC_ROUNDING_TORCH_CPU */
    if (rounding && !strcmp(rounding, "torch-cpu") && !o->set_rounding(be, MC_ROUNDING_TORCH_CPU)) {
        fprintf(stderr, "op_driver: backend %s has no torch-cpu rounding\n", be->name);
        return 1;
    }
    if (!strcmp(op, "gemm"))
        run_gemm();
    else if (!strcmp(op, "layernorm") || !strcmp(op, "rmsnorm"))
        run_norm(!strcmp(op, "layernorm"));
    else if (!strcmp(op, "gelu_tanh") || !strcmp(op, "gelu_erf") || !strcmp(op, "squared_relu") ||
             !strcmp(op, "swiglu"))
        run_act(op);
    else if (!strcmp(op, "bias_grad") || !strcmp(op, "bias_dropout_add"))
        run_bias(!strcmp(op, "bias_grad"));
    else if (!strcmp(op, "softmax"))
        run_softmax();
    else if (!strcmp(op, "rope"))
        run_rope();
    else if (!strcmp(op, "embedding"))
        run_embedding();
    else if (!strcmp(op, "xent"))
        run_xent();
    else if (!strcmp(op, "attention"))
        run_attention();
    else if (!strcmp(op, "accumulate"))
        run_accumulate();
    else {
        fprintf(stderr, "op_driver: unknown OP %s\n", op);
        return 2;
    }
    mc_backend_free(be); /* (buffers are freed with the process; cpu-sim frees its blocks) */
    return 0;
}
