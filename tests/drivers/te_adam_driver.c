/* Driver of tests/optimizer/test_te_fused_adam.py: runs megatron.c's Transformer Engine
 * FusedAdam update (src/optimizer/te_fused_adam_ref.c) on inputs read from stdin and writes
 * what it keeps after every step to stdout (little-endian binary, all fp32 unless said).
 *   in:  int32 mode; mode 1 (steps): int32 param_dt, master_dt, m_dt, v_dt (enum mc_dtype),
 *        int64 n, steps; float beta1, beta2, eps; float p0[n]; then per step float lr, wd,
 *        g[n].  mode 2 (rounding): int64 n; float x[n].
 *   out: mode 1, per step: model param [n] (the 16-bit weight widened, or the fp32 param),
 *        p [n], master [n] (zeros without an fp16 master), m [n], v [n] (as stored), and
 *        float scale[3]. mode 2: uint16 bf16 bits [n] of mc_te_adam_bf16_of. */
#include <stdio.h>
#include <stdlib.h>

#include "core/dtype.h"
#include "optimizer/te_fused_adam.h"

static void rd(void *p, size_t sz, size_t n)
{
    if (fread(p, sz, n, stdin) != n) {
        fprintf(stderr, "te_adam_driver: short input\n");
        exit(2);
    }
}

static void wr(const void *p, size_t sz, size_t n) { fwrite(p, sz, n, stdout); }

static float model_value(const struct mc_te_adam_cfg *c, float p)
{
    if (c->param_dt == MC_DTYPE_BF16)
        return mc_bf16_to_f32(mc_te_adam_remainders(c) ? mc_te_adam_bf16_of(p) : mc_f32_to_bf16(p));
    if (c->param_dt == MC_DTYPE_F16)
        return mc_f16_to_f32(mc_f32_to_f16(p));
    return p;
}

static int rounding(void)
{
    int64_t n;
    rd(&n, sizeof(n), 1);
    float *x = malloc((size_t)n * sizeof(float));
    uint16_t *b = malloc((size_t)n * sizeof(uint16_t));
    rd(x, sizeof(float), (size_t)n);
    mc_te_adam_bf16_params(b, x, n);
    wr(b, sizeof(uint16_t), (size_t)n);
    free(x);
    free(b);
    return 0;
}

int main(void)
{
    int32_t mode, dt[4];
    rd(&mode, sizeof(mode), 1);
    if (mode == 2)
        return rounding();
    int64_t n, steps;
    float hp[3];
    rd(dt, sizeof(int32_t), 4);
    rd(&n, sizeof(n), 1);
    rd(&steps, sizeof(steps), 1);
    rd(hp, sizeof(float), 3);
    struct mc_te_adam_cfg c = {hp[0], hp[1], hp[2], (enum mc_dtype)dt[0], (enum mc_dtype)dt[1],
                               (enum mc_dtype)dt[2], (enum mc_dtype)dt[3]};
    float *buf = calloc((size_t)(6 * n), sizeof(float));
    float *p = buf, *master = buf + n, *m = buf + 2 * n, *v = buf + 3 * n, *g = buf + 4 * n;
    float *w = buf + 5 * n;
    rd(p, sizeof(float), (size_t)n);
    bool has_master = c.param_dt != MC_DTYPE_F32 && c.master_dt == MC_DTYPE_F16;
    struct mc_te_adam_tensor t = {.n = n, .p = p, .master = has_master ? master : NULL,
                                  .m = m, .v = v, .g = g};
    mc_te_adam_init(&c, &t);
    for (int64_t s = 1; s <= steps; s++) {
        float lw[2];
        rd(lw, sizeof(float), 2);
        rd(g, sizeof(float), (size_t)n);
        mc_te_adam_step(&c, &t, lw[0], lw[1], s);
        for (int64_t i = 0; i < n; i++)
            w[i] = model_value(&c, p[i]);
        wr(w, sizeof(float), (size_t)n);
        wr(p, sizeof(float), (size_t)n);
        wr(master, sizeof(float), (size_t)n);
        wr(m, sizeof(float), (size_t)n);
        wr(v, sizeof(float), (size_t)n);
        wr(t.scale, sizeof(float), 3);
    }
    free(buf);
    return 0;
}
