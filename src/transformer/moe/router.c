/* TopKRouter, mirrors transformer/moe/router.py with topk_softmax_with_capacity
 * (moe_utils.py) without capacity: per token the top-k experts of the logits (softmax after
 * the top-k), or of softmax(logits) with --moe-router-pre-softmax, or of sigmoid(logits)
 * (--moe-router-score-function sigmoid, normalized over the k when k > 1). The probabilities
 * are rounded to the logits' dtype (type_as). In training the aux loss (aux_loss or
 * seq_aux_loss, over every expert's scores) and the z-loss add their grads to the logits'
 * through MoEAuxLossAutoScaler, and their values divided by their coefficients go to the
 * tracker of the layer (save_to_aux_losses_tracker). Host fp32 on [T, E]. */
#include "transformer/moe/moe.h"

#include "core/dtype.h"

#include <math.h>

static float round_dt(enum mc_dtype dt, float x)
{
    if (dt == MC_DTYPE_BF16)
        return mc_bf16_to_f32(mc_f32_to_bf16(x));
    if (dt == MC_DTYPE_F16)
        return mc_f16_to_f32(mc_f32_to_f16(x));
    return x;
}

/* torch.topk(x, k) (sorted, descending; the lower index first among equal values) */
static void topk(int32_t *idx, const float *x, int64_t n, int64_t k)
{
    for (int64_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int64_t e = 0; e < n; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++)
                taken = taken || idx[i] == (int32_t)e;
            if (!taken && (best < 0 || x[e] > x[best]))
                best = (int32_t)e;
        }
        idx[j] = best;
    }
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* One token: its k experts and probabilities. tmp [E]. */
static void route_token(const struct mc_gpt_config *cfg, enum mc_dtype dt, int32_t *top,
                        float *prob, const float *logits, float *tmp)
{
    int64_t E = cfg->num_moe_experts, k = cfg->moe_router_topk;
    if (cfg->moe_router_score_function == MC_MOE_SIGMOID) {
        for (int64_t e = 0; e < E; e++)
            tmp[e] = round_dt(dt, sigmoidf(logits[e]));
        topk(top, tmp, E, k);
        float sum = 0.0f;
        for (int64_t j = 0; j < k; j++)
            sum += tmp[top[j]];
        for (int64_t j = 0; j < k; j++)
            prob[j] = round_dt(dt, k > 1 ? tmp[top[j]] / (sum + 1e-20f) : tmp[top[j]]);
        return;
    }
    if (cfg->moe_router_pre_softmax) {
        mc_moe_softmax(tmp, logits, E);
        for (int64_t e = 0; e < E; e++)
            tmp[e] = round_dt(dt, tmp[e]);
        topk(top, tmp, E, k);
        for (int64_t j = 0; j < k; j++)
            prob[j] = tmp[top[j]];
        return;
    }
    topk(top, logits, E, k);
    float sel[64] = {0};
    for (int64_t j = 0; j < k; j++)
        sel[j] = logits[top[j]];
    mc_moe_softmax(prob, sel, k);
    for (int64_t j = 0; j < k; j++)
        prob[j] = round_dt(dt, prob[j]);
}

/* The aux losses of this forward into the tracker (router.py: apply_z_loss, then
 * apply_load_balancing_loss). */
static void aux_losses(const struct mc_tfm_ctx *c, int64_t layer, struct mc_moe_acts *ma)
{
    const struct mc_gpt_config *cfg = c->cfg;
    struct mc_moe_state *st = c->moe;
    int64_t T = ma->T, E = cfg->num_moe_experts;
    ma->z = cfg->moe_z_loss_coeff > 0.0f;
    if (ma->z) {
        double z = mc_moe_z_loss(ma->logits, T, E, cfg->moe_z_loss_coeff);
        st->track_z[layer] += (float)(z / cfg->moe_z_loss_coeff);
    }
    ma->aux = cfg->moe_router_load_balancing_type != MC_MOE_BALANCE_NONE &&
              cfg->moe_aux_loss_coeff != 0.0f;
    if (!ma->aux)
        return;
    float *scores = st->dlogits; /* free until backward */
    for (int64_t t = 0; t < T; t++)
        mc_moe_aux_scores(cfg, scores + t * E, ma->logits + t * E);
    double aux = cfg->moe_router_load_balancing_type == MC_MOE_AUX_LOSS
                     ? mc_moe_switch_aux_loss(cfg, scores, ma->count, T)
                     : mc_moe_seq_aux_loss(cfg, scores, ma, c->b, c->s);
    st->track_lb[layer] += (float)(aux / cfg->moe_aux_loss_coeff);
}

void mc_moe_route(const struct mc_tfm_ctx *c, int64_t layer, struct mc_moe_acts *ma,
                  bool training)
{
    const struct mc_gpt_config *cfg = c->cfg;
    int64_t T = ma->T, E = cfg->num_moe_experts, k = cfg->moe_router_topk;
    for (int64_t e = 0; e < E; e++)
        ma->count[e] = 0;
    for (int64_t t = 0; t < T; t++) {
        route_token(cfg, c->dt, ma->top + t * k, ma->prob + t * k, ma->logits + t * E,
                    c->moe->tmp);
        for (int64_t j = 0; j < k; j++)
            ma->count[ma->top[t * k + j]]++;
    }
    ma->aux = ma->z = false;
    if (training)
        aux_losses(c, layer, ma);
}

/* The grad of one token's k probabilities into its logits' grad. tmp [2 E]. */
static void route_token_bwd(const struct mc_gpt_config *cfg, float *dl, const float *logits,
                            const int32_t *top, const float *dp, float *tmp)
{
    int64_t E = cfg->num_moe_experts, k = cfg->moe_router_topk;
    if (cfg->moe_router_score_function == MC_MOE_SIGMOID) {
        float sum = 0.0f, dot = 0.0f;
        for (int64_t j = 0; j < k; j++) {
            tmp[j] = sigmoidf(logits[top[j]]);
            sum += tmp[j];
            dot += dp[j] * tmp[j];
        }
        float S = sum + 1e-20f;
        for (int64_t j = 0; j < k; j++) {
            float ds = k > 1 ? dp[j] / S - dot / (S * S) : dp[j];
            dl[top[j]] += ds * tmp[j] * (1.0f - tmp[j]);
        }
        return;
    }
    if (cfg->moe_router_pre_softmax) {
        float *s = tmp, *ds = tmp + E, dot = 0.0f;
        mc_moe_softmax(s, logits, E);
        for (int64_t e = 0; e < E; e++)
            ds[e] = 0.0f;
        for (int64_t j = 0; j < k; j++)
            ds[top[j]] += dp[j];
        for (int64_t e = 0; e < E; e++)
            dot += s[e] * ds[e];
        for (int64_t e = 0; e < E; e++)
            dl[e] += s[e] * (ds[e] - dot);
        return;
    }
    float sel[64] = {0}, p[64], dot = 0.0f;
    for (int64_t j = 0; j < k; j++)
        sel[j] = logits[top[j]];
    mc_moe_softmax(p, sel, k);
    for (int64_t j = 0; j < k; j++)
        dot += p[j] * dp[j];
    for (int64_t j = 0; j < k; j++)
        dl[top[j]] += p[j] * (dp[j] - dot);
}

void mc_moe_route_backward(const struct mc_tfm_ctx *c, const struct mc_moe_acts *ma,
                           const float *dprob, float *dlogits)
{
    const struct mc_gpt_config *cfg = c->cfg;
    int64_t T = ma->T, E = cfg->num_moe_experts, k = cfg->moe_router_topk;
    float *tmp = c->moe->tmp;
    for (int64_t i = 0; i < T * E; i++)
        dlogits[i] = 0.0f;
    for (int64_t t = 0; t < T; t++)
        route_token_bwd(cfg, dlogits + t * E, ma->logits + t * E, ma->top + t * k,
                        dprob + t * k, tmp);
    /* MoEAuxLossAutoScaler: the aux losses' grad is the main loss's scale (times the tokens
     * with --calculate-per-token-loss, router.py) */
    float g = c->moe->aux_scale * (cfg->calculate_per_token_loss ? (float)T : 1.0f);
    if (ma->aux && cfg->moe_router_load_balancing_type == MC_MOE_AUX_LOSS)
        mc_moe_switch_aux_loss_bwd(cfg, dlogits, ma->logits, ma->count, T, g, tmp);
    else if (ma->aux)
        mc_moe_seq_aux_loss_bwd(cfg, dlogits, ma->logits, ma, c->b, c->s, g, tmp);
    if (ma->z)
        mc_moe_z_loss_bwd(dlogits, ma->logits, T, E, cfg->moe_z_loss_coeff, g);
}
