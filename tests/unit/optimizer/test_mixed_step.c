/* The mixed-precision step of the optimizer (MixedPrecisionOptimizer.step of Megatron-LM
 * core_v0.12.1) on a parameter set built by hand, with 16-bit model weights beside the fp32
 * main params:
 *  - a clean fp16 step unscales the main grads by the loss scale (a power of two: exactly) and
 *    then updates as the fp32 optimizer does on the unscaled grads, bit for bit; the 16-bit
 *    weights are round(main) afterwards;
 *  - an inf or NaN anywhere in the main grads (the shared copy too, which the grad norm skips)
 *    skips the step: params, 16-bit weights, Adam moments and the step count unchanged, no
 *    grad norm; the dynamic scaler counts down its hysteresis and then halves the scale;
 *  - the constant scaler (--loss-scale) skips without changing the scale;
 *  - bf16 without --loss-scale has no scaler (Megatron's grad_scaler None): no check, the step
 *    is taken, the loss scale is 1;
 *  - bf16 with --clip-grad 0 still reports the grad norm (ChainedOptimizer.step computes it).
 * The scaler's own rule is tested against Megatron's code in
 * tests/optimizer/test_grad_scaler.py. */
#include "megatron/optimizer.h"
#include "backend/backend.h"
#include "core/dtype.h"
#include "test.h"

#include <math.h>
#include <string.h>

enum { NW = 6, NB = 3, NS = 2, N = NW + NB + NS };

struct hand {
    float p[N], g[N];
    uint16_t w16[N];
    struct mc_param params[3];
    struct mc_param_set set;
};

static struct mc_backend *test_be;

/* w [2, 3] (decayed), b [3] (no decay), s [2] (a shared copy: not in the norm) */
static void hand_init(struct hand *h, enum mc_dtype dt)
{
    if (!test_be)
        MC_ASSERT(mc_backend_create("cpu", &test_be) == MC_OK);
    float *p = h->p, *g = h->g;
    h->params[0] = (struct mc_param){{"w", 2, {2, 3}, NW, p, g, false, false, -1, false, false},
                                     0, false};
    h->params[1] = (struct mc_param){{"b", 1, {NB, 0}, NB, p + NW, g + NW, true, false, -1,
                                      false, false}, NW, false};
    h->params[2] = (struct mc_param){{"s", 1, {NS, 0}, NS, p + NW + NB, g + NW + NB, true, false,
                                      -1, true, false}, NW + NB, true};
    h->set = (struct mc_param_set){.n_params = 3, .params = h->params, .n_elements = N,
                                   .param_block = p, .grad_block = g, .be = test_be,
                                   .compute_dtype = dt,
                                   .compute_block = dt == MC_DTYPE_F32 ? NULL : h->w16,
                                   .tp_size = 1, .tp_rank = 0, .pp_size = 1};
    for (int i = 0; i < N; i++) {
        p[i] = 0.3f * (float)(i + 1) - 1.7f;
        if (dt == MC_DTYPE_F16) { /* main = float(model param), as after init */
            h->w16[i] = mc_f32_to_f16(p[i]);
            p[i] = mc_f16_to_f32(h->w16[i]);
        } else if (dt == MC_DTYPE_BF16) {
            h->w16[i] = mc_f32_to_bf16(p[i]);
            p[i] = mc_bf16_to_f32(h->w16[i]);
        }
    }
}

/* grads g_i (the true ones) times the loss scale, as backward of the scaled loss leaves them */
static void set_grads(struct hand *h, float scale, int step)
{
    for (int i = 0; i < N; i++)
        h->g[i] = scale * (0.125f * (float)((i * 5 + step * 3) % 7) - 0.375f);
}

static mc_optimizer *make(struct hand *h, bool fp16, bool bf16, double loss_scale, float clip)
{
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.fp16 = fp16;
    oc.bf16 = bf16;
    oc.loss_scale = loss_scale;
    oc.initial_loss_scale = 65536.0;
    oc.hysteresis = 2;
    oc.loss_scale_window = 3.0;
    oc.clip_grad = clip;
    mc_optimizer *o = NULL;
    CHECK(mc_opt_init(&oc, &h->set, &o) == MC_OK);
    return o;
}

static bool w16_is_round_of_main(const struct hand *h, enum mc_dtype dt)
{
    for (int i = 0; i < N; i++) {
        uint16_t want = dt == MC_DTYPE_F16 ? mc_f32_to_f16(h->p[i]) : mc_f32_to_bf16(h->p[i]);
        if (h->w16[i] != want)
            return false;
    }
    return true;
}

/* A snapshot of everything a skipped step must leave alone. */
struct snap {
    float p[N], m[N], v[N];
    uint16_t w16[N];
    int64_t step;
};

static void take(struct snap *s, mc_optimizer *o, const struct hand *h)
{
    memset(s, 0, sizeof(*s)); /* padding too: snapshots compare with memcmp */
    memcpy(s->p, h->p, sizeof s->p);
    memcpy(s->w16, h->w16, sizeof s->w16);
    for (int64_t k = 0; k < 3; k++) {
        struct mc_opt_param_state st = mc_opt_param_state(o, k);
        int64_t at = h->params[k].offset, n = h->params[k].view.numel;
        memcpy(s->m + at, st.exp_avg, (size_t)n * sizeof(float));
        memcpy(s->v + at, st.exp_avg_sq, (size_t)n * sizeof(float));
    }
    s->step = mc_opt_step_count(o);
}

static bool same(const struct snap *a, const struct snap *b)
{
    return !memcmp(a, b, sizeof(*a));
}

static void test_fp16_dynamic(void)
{
    static struct hand h, ref;
    hand_init(&h, MC_DTYPE_F16);
    hand_init(&ref, MC_DTYPE_F16);
    ref.set.compute_dtype = MC_DTYPE_F32; /* the fp32 optimizer on the same main params */
    ref.set.compute_block = NULL;
    mc_optimizer *o = make(&h, true, false, 0.0, 1.0f);
    mc_optimizer *r = make(&ref, false, false, 0.0, 1.0f);
    CHECK(mc_opt_has_grad_scaler(o) && mc_opt_grad_scaler_dynamic(o));
    CHECK(!mc_opt_has_grad_scaler(r) && mc_opt_loss_scale(r) == 1.0);
    CHECK(mc_opt_loss_scale(o) == 65536.0);
    struct mc_opt_step_result res, rres;

    /* 1. a clean step: the same update as fp32 on the unscaled grads */
    set_grads(&h, 65536.0f, 0);
    set_grads(&ref, 1.0f, 0);
    CHECK(mc_opt_step(o, 1e-2f, 0.1f, &res) == MC_OK && !res.skipped);
    CHECK(mc_opt_step(r, 1e-2f, 0.1f, &rres) == MC_OK && !rres.skipped);
    CHECK(memcmp(h.p, ref.p, sizeof h.p) == 0);
    CHECK(res.grad_norm == rres.grad_norm && res.num_zeros == rres.num_zeros);
    CHECK(w16_is_round_of_main(&h, MC_DTYPE_F16));
    CHECK(mc_opt_step_count(o) == 1);

    /* 2. inf in the shared copy's grad (outside the norm): skipped, nothing moves; hysteresis
     * 2 -> 1, scale kept */
    struct snap before, after;
    take(&before, o, &h);
    set_grads(&h, 65536.0f, 1);
    h.g[NW + NB] = INFINITY;
    CHECK(mc_opt_step(o, 1e-2f, 0.1f, &res) == MC_OK && res.skipped);
    take(&after, o, &h);
    CHECK(same(&before, &after));
    struct mc_grad_scaler_state gs;
    mc_opt_grad_scaler_state(o, &gs);
    CHECK(gs.scale == 65536.0 && gs.growth_tracker == 0 && gs.hysteresis_tracker == 1);

    /* 3. NaN: skipped again, hysteresis exhausted: scale halves */
    set_grads(&h, 65536.0f, 2);
    h.g[2] = NAN;
    CHECK(mc_opt_step(o, 1e-2f, 0.1f, &res) == MC_OK && res.skipped);
    take(&after, o, &h);
    CHECK(same(&before, &after));
    mc_opt_grad_scaler_state(o, &gs);
    CHECK(gs.scale == 32768.0 && gs.hysteresis_tracker == 0);
    CHECK(mc_opt_loss_scale(o) == 32768.0);

    /* 4. the next clean step uses the new scale and equals the fp32 step (Adam's t = 2) */
    set_grads(&h, 32768.0f, 3);
    set_grads(&ref, 1.0f, 3);
    CHECK(mc_opt_step(o, 1e-2f, 0.1f, &res) == MC_OK && !res.skipped);
    CHECK(mc_opt_step(r, 1e-2f, 0.1f, &rres) == MC_OK);
    CHECK(memcmp(h.p, ref.p, sizeof h.p) == 0 && mc_opt_step_count(o) == 2);
    CHECK(w16_is_round_of_main(&h, MC_DTYPE_F16));
    mc_opt_grad_scaler_state(o, &gs);
    CHECK(gs.growth_tracker == 1 && gs.hysteresis_tracker == 0);

    /* 5. checkpoint state in and out */
    struct mc_grad_scaler_state load = {1024.0, 2, 1};
    CHECK(mc_opt_set_grad_scaler_state(o, &load) == MC_OK);
    mc_opt_grad_scaler_state(o, &gs);
    CHECK(gs.scale == 1024.0 && gs.growth_tracker == 2 && gs.hysteresis_tracker == 1);
    struct mc_grad_scaler_state bad = {0.0, 0, 1};
    CHECK(mc_opt_set_grad_scaler_state(o, &bad) == MC_ERR_CONFIG);
    /* one more clean step reaches the window (3): the scale doubles, hysteresis refills */
    set_grads(&h, 1024.0f, 4);
    CHECK(mc_opt_step(o, 1e-2f, 0.1f, &res) == MC_OK && !res.skipped);
    mc_opt_grad_scaler_state(o, &gs);
    CHECK(gs.scale == 2048.0 && gs.growth_tracker == 0 && gs.hysteresis_tracker == 2);
    mc_opt_free(o);
    mc_opt_free(r);
}

static void test_constant_and_bf16(void)
{
    static struct hand h;
    struct mc_opt_step_result res;
    struct snap before, after;
    struct mc_grad_scaler_state gs;

    /* constant scaler (--loss-scale 128, here with bf16): skip on inf, scale unchanged */
    hand_init(&h, MC_DTYPE_BF16);
    mc_optimizer *o = make(&h, false, true, 128.0, 1.0f);
    CHECK(mc_opt_has_grad_scaler(o) && !mc_opt_grad_scaler_dynamic(o));
    take(&before, o, &h);
    set_grads(&h, 128.0f, 0);
    h.g[0] = -INFINITY;
    CHECK(mc_opt_step(o, 1e-2f, 0.0f, &res) == MC_OK && res.skipped);
    take(&after, o, &h);
    CHECK(same(&before, &after));
    mc_opt_grad_scaler_state(o, &gs);
    CHECK(gs.scale == 128.0 && mc_opt_loss_scale(o) == 128.0);
    /* a checkpoint's state does not change a constant scaler (ConstantGradScaler ignores it) */
    struct mc_grad_scaler_state load = {4.0, 1, 1};
    CHECK(mc_opt_set_grad_scaler_state(o, &load) == MC_OK && mc_opt_loss_scale(o) == 128.0);
    set_grads(&h, 128.0f, 1);
    CHECK(mc_opt_step(o, 1e-2f, 0.0f, &res) == MC_OK && !res.skipped);
    CHECK(w16_is_round_of_main(&h, MC_DTYPE_BF16) && mc_opt_step_count(o) == 1);
    mc_opt_free(o);

    /* bf16 without --loss-scale: no scaler, no check (Megatron steps on inf grads too) */
    hand_init(&h, MC_DTYPE_BF16);
    o = make(&h, false, true, 0.0, 1.0f);
    CHECK(!mc_opt_has_grad_scaler(o) && mc_opt_loss_scale(o) == 1.0);
    set_grads(&h, 1.0f, 0);
    h.g[1] = INFINITY;
    CHECK(mc_opt_step(o, 1e-2f, 0.0f, &res) == MC_OK && !res.skipped);
    CHECK(mc_opt_step_count(o) == 1);
    mc_opt_free(o);

    /* bf16 and --clip-grad 0: the norm is still reported (ChainedOptimizer.step computes it
     * before deciding to clip; MixedPrecisionOptimizer.step's 0.0 is never reached) */
    hand_init(&h, MC_DTYPE_BF16);
    o = make(&h, false, true, 0.0, 0.0f);
    set_grads(&h, 1.0f, 0);
    CHECK(mc_opt_step(o, 1e-2f, 0.0f, &res) == MC_OK && !res.skipped && res.grad_norm > 0.0f);
    mc_opt_free(o);

    /* fp32 (no --fp16/--bf16) never checks and keeps its norm even without clipping */
    hand_init(&h, MC_DTYPE_F32);
    o = make(&h, false, false, 0.0, 0.0f);
    set_grads(&h, 1.0f, 0);
    CHECK(mc_opt_step(o, 1e-2f, 0.0f, &res) == MC_OK && !res.skipped && res.grad_norm > 0.0f);
    mc_opt_free(o);
}

static void test_bad_configs(void)
{
    static struct hand h;
    hand_init(&h, MC_DTYPE_F16);
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.fp16 = true;
    mc_optimizer *o = NULL;
    oc.min_loss_scale = 0.0;
    CHECK(mc_opt_init(&oc, &h.set, &o) == MC_ERR_CONFIG && o == NULL);
    CHECK(strstr(mc_last_error(), "--min-loss-scale") != NULL);
    mc_opt_config_default(&oc);
    oc.fp16 = true;
    oc.hysteresis = 0;
    CHECK(mc_opt_init(&oc, &h.set, &o) == MC_ERR_CONFIG && o == NULL);
    CHECK(strstr(mc_last_error(), "--hysteresis") != NULL);
    mc_opt_config_default(&oc);
    oc.fp16 = oc.bf16 = true;
    CHECK(mc_opt_init(&oc, &h.set, &o) == MC_ERR_CONFIG && o == NULL);
}

int main(void)
{
    test_fp16_dynamic();
    test_constant_and_bf16();
    test_bad_configs();
    mc_backend_free(test_be);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("mixed_step");
}
