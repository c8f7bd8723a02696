/* Megatron's grad scalers, megatron/core/optimizer/grad_scaler.py (core_v0.12.1):
 * ConstantGradScaler (--loss-scale) and DynamicGradScaler (fp16 without --loss-scale), and
 * get_megatron_optimizer's choice between them. The scale is kept as a float32 value and
 * every change of it is a float32 product, as Megatron's 1-element float tensor. */
#include "optimizer/optimizer_internal.h"

#include <math.h>

static mc_status check_dynamic(const struct mc_optimizer_config *c)
{
    if (!(c->initial_loss_scale > 0.0) || !isfinite(c->initial_loss_scale))
        return mc_error(MC_ERR_CONFIG, "--initial-loss-scale (%g) must be > 0",
                        c->initial_loss_scale);
    if (!(c->min_loss_scale > 0.0) || c->min_loss_scale > c->initial_loss_scale)
        return mc_error(MC_ERR_CONFIG, "--min-loss-scale (%g) must be > 0 and <= "
                        "--initial-loss-scale (%g)", c->min_loss_scale, c->initial_loss_scale);
    if (!(c->loss_scale_window > 0.0))
        return mc_error(MC_ERR_CONFIG, "--loss-scale-window (%g) must be > 0",
                        c->loss_scale_window);
    if (c->hysteresis <= 0)
        return mc_error(MC_ERR_CONFIG, "--hysteresis (%lld) must be > 0",
                        (long long)c->hysteresis);
    return MC_OK;
}

mc_status mc_grad_scaler_init(struct mc_grad_scaler *g, const struct mc_optimizer_config *c,
                              bool mixed)
{
    *g = (struct mc_grad_scaler){.scale = 1.0f};
    if (!mixed)
        return MC_OK; /* FP32Optimizer: no scaling */
    if (c->loss_scale != 0.0) { /* `if config.loss_scale:` */
        if (!(c->loss_scale > 0.0) || !isfinite(c->loss_scale))
            return mc_error(MC_ERR_CONFIG, "--loss-scale (%g) must be > 0", c->loss_scale);
        *g = (struct mc_grad_scaler){.on = true, .scale = (float)c->loss_scale};
        return MC_OK;
    }
    if (!c->fp16)
        return MC_OK; /* bf16 (or fp32 distributed) without --loss-scale: none */
    mc_status st = check_dynamic(c);
    if (st)
        return st;
    *g = (struct mc_grad_scaler){.on = true, .dynamic = true,
                                 .scale = (float)c->initial_loss_scale,
                                 .min_scale = (float)c->min_loss_scale,
                                 .growth_interval = c->loss_scale_window,
                                 .hysteresis = c->hysteresis,
                                 .hysteresis_tracker = c->hysteresis};
    return MC_OK;
}

void mc_grad_scaler_update(struct mc_grad_scaler *g, bool found_inf)
{
    if (!g->on || !g->dynamic)
        return;
    if (found_inf) {
        g->growth_tracker = 0;
        g->hysteresis_tracker--;
        if (g->hysteresis_tracker <= 0) { /* torch.max(scale * backoff, min_scale) */
            float s = g->scale * 0.5f;
            g->scale = s > g->min_scale ? s : g->min_scale;
        }
        return;
    }
    g->growth_tracker++;
    /* Megatron compares the int tracker with the (float) window for equality */
    if ((double)g->growth_tracker == g->growth_interval) {
        g->growth_tracker = 0;
        g->hysteresis_tracker = g->hysteresis;
        g->scale = g->scale * 2.0f;
    }
}

double mc_grad_scaler_get_scale(const struct mc_grad_scaler *g)
{
    return g->on ? (double)g->scale : 1.0;
}

float mc_grad_scaler_inv_scale(const struct mc_grad_scaler *g)
{
    return (float)(1.0 / (double)g->scale);
}

void mc_grad_scaler_get_state(const struct mc_grad_scaler *g, struct mc_grad_scaler_state *st)
{
    *st = (struct mc_grad_scaler_state){.scale = g->on ? (double)g->scale : 1.0};
    if (g->on && g->dynamic) {
        st->growth_tracker = g->growth_tracker;
        st->hysteresis_tracker = g->hysteresis_tracker;
    }
}

mc_status mc_grad_scaler_set_state(struct mc_grad_scaler *g, const struct mc_grad_scaler_state *st)
{
    if (!g->on || !g->dynamic)
        return MC_OK;
    if (!(st->scale > 0.0) || !isfinite(st->scale))
        return mc_error(MC_ERR_CONFIG, "grad scaler state: scale %g (expected a positive finite "
                        "number)", st->scale);
    g->scale = (float)st->scale;
    g->growth_tracker = st->growth_tracker;
    g->hysteresis_tracker = st->hysteresis_tracker;
    return MC_OK;
}

/* The finiteness test is the double sum of squares: finite exactly when every element is
 * (n float32 squares cannot overflow a double), and one pass through the backend's op. */
bool mc_opt_check_and_unscale(struct mc_backend *be, float *x, int64_t n, float inv_scale)
{
    if (n <= 0)
        return false;
    bool found = !isfinite(be->ops->sumsq(be, MC_DTYPE_F32, x, n));
    if (inv_scale != 1.0f)
        be->ops->scale(be, MC_DTYPE_F32, x, inv_scale, n);
    return found;
}
