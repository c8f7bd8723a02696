/* The MoE aux losses and their grads, mirrors transformer/moe/moe_utils.py
 * (switch_load_balancing_loss_func, sequence_load_balancing_loss_func, z_loss_func) and the
 * scores compute_routing_scores_for_aux_loss feeds them (router.py). Everything here is host
 * fp32 on [T, E] router values, token t = s_index * b + b_index (sequence-first).
 *
 * The grads are what autograd gives through MoEAuxLossAutoScaler: the aux loss's grad is the
 * scale g (main_loss_backward_scale), pushed back through the scores' softmax / sigmoid into
 * the logits. */
#include "transformer/moe/moe.h"

#include <math.h>
#include <string.h>

void mc_moe_softmax(float *y, const float *x, int64_t n)
{
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - mx);
        sum += y[i];
    }
    for (int64_t i = 0; i < n; i++)
        y[i] /= sum;
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* scores over all E experts: softmax, or sigmoid normalized to sum 1 when k > 1 */
void mc_moe_aux_scores(const struct mc_gpt_config *cfg, float *scores, const float *logits)
{
    int64_t E = cfg->num_moe_experts;
    if (cfg->moe_router_score_function == MC_MOE_SOFTMAX) {
        mc_moe_softmax(scores, logits, E);
        return;
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) {
        scores[e] = sigmoidf(logits[e]);
        sum += scores[e];
    }
    if (cfg->moe_router_topk > 1)
        for (int64_t e = 0; e < E; e++)
            scores[e] /= sum + 1e-20f;
}

/* d logits += J^T ds for the scores above (ds [E] grad of one token's scores). */
static void aux_scores_bwd(const struct mc_gpt_config *cfg, float *dlogits, const float *logits,
                           const float *ds, float *tmp)
{
    int64_t E = cfg->num_moe_experts;
    if (cfg->moe_router_score_function == MC_MOE_SOFTMAX) {
        mc_moe_softmax(tmp, logits, E);
        float dot = 0.0f;
        for (int64_t e = 0; e < E; e++)
            dot += tmp[e] * ds[e];
        for (int64_t e = 0; e < E; e++)
            dlogits[e] += tmp[e] * (ds[e] - dot);
        return;
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) {
        tmp[e] = sigmoidf(logits[e]);
        sum += tmp[e];
    }
    bool norm = cfg->moe_router_topk > 1;
    float S = sum + 1e-20f, dot = 0.0f;
    for (int64_t e = 0; e < E; e++)
        dot += ds[e] * tmp[e];
    for (int64_t e = 0; e < E; e++) {
        /* q_e = s_e / S: dq/ds_j = delta / S - s_e / S^2 */
        float dsig = norm ? ds[e] / S - dot / (S * S) : ds[e];
        dlogits[e] += dsig * tmp[e] * (1.0f - tmp[e]);
    }
}

/* aux = sum_e (sum_t scores[t, e]) count[e] * E coeff / (T^2 k) */
double mc_moe_switch_aux_loss(const struct mc_gpt_config *cfg, const float *scores,
                              const int64_t *count, int64_t T)
{
    int64_t E = cfg->num_moe_experts, k = cfg->moe_router_topk;
    float total = 0.0f;
    for (int64_t e = 0; e < E; e++) {
        float col = 0.0f;
        for (int64_t t = 0; t < T; t++)
            col += scores[t * E + e];
        total += col * (float)count[e];
    }
    float c = (float)((double)E * (double)cfg->moe_aux_loss_coeff / ((double)T * (double)T * (double)k));
    return (double)(total * c);
}

void mc_moe_switch_aux_loss_bwd(const struct mc_gpt_config *cfg, float *dlogits,
                                const float *logits, const int64_t *count, int64_t T, float g,
                                float *tmp)
{
    int64_t E = cfg->num_moe_experts, k = cfg->moe_router_topk;
    float c = (float)((double)E * (double)cfg->moe_aux_loss_coeff / ((double)T * (double)T * (double)k));
    float *ds = tmp + E;
    for (int64_t e = 0; e < E; e++)
        ds[e] = g * c * (float)count[e];
    for (int64_t t = 0; t < T; t++)
        aux_scores_bwd(cfg, dlogits + t * E, logits + t * E, ds, tmp);
}

/* cost[b, e] = (routed tokens of sequence b to e) / (s k / E);
 * aux = coeff * mean_b sum_e cost[b, e] * mean_s scores[s, b, e] */
static float seq_cost(const struct mc_gpt_config *cfg, const struct mc_moe_acts *ma, int64_t b,
                      int64_t s, int64_t bi, int64_t e)
{
    int64_t k = cfg->moe_router_topk, n = 0;
    for (int64_t si = 0; si < s; si++) {
        int64_t t = si * b + bi;
        for (int64_t j = 0; j < k; j++)
            n += ma->top[t * k + j] == e;
    }
    return (float)n / (float)((double)s * (double)k / (double)cfg->num_moe_experts);
}

double mc_moe_seq_aux_loss(const struct mc_gpt_config *cfg, const float *scores,
                           const struct mc_moe_acts *ma, int64_t b, int64_t s)
{
    int64_t E = cfg->num_moe_experts;
    float total = 0.0f;
    for (int64_t bi = 0; bi < b; bi++) {
        float row = 0.0f;
        for (int64_t e = 0; e < E; e++) {
            float mean = 0.0f;
            for (int64_t si = 0; si < s; si++)
                mean += scores[(si * b + bi) * E + e];
            row += seq_cost(cfg, ma, b, s, bi, e) * (mean / (float)s);
        }
        total += row;
    }
    return (double)(total / (float)b * cfg->moe_aux_loss_coeff);
}

void mc_moe_seq_aux_loss_bwd(const struct mc_gpt_config *cfg, float *dlogits,
                             const float *logits, const struct mc_moe_acts *ma, int64_t b,
                             int64_t s, float g, float *tmp)
{
    int64_t E = cfg->num_moe_experts;
    float *ds = tmp + E;
    for (int64_t bi = 0; bi < b; bi++) {
        for (int64_t e = 0; e < E; e++)
            ds[e] = g * cfg->moe_aux_loss_coeff * seq_cost(cfg, ma, b, s, bi, e) /
                    ((float)b * (float)s);
        for (int64_t si = 0; si < s; si++) {
            int64_t t = si * b + bi;
            aux_scores_bwd(cfg, dlogits + t * E, logits + t * E, ds, tmp);
        }
    }
}

static float logsumexp(const float *x, int64_t n)
{
    float mx = x[0];
    for (int64_t i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++)
        sum += expf(x[i] - mx);
    return mx + logf(sum);
}

/* z = mean_t logsumexp(logits[t])^2 * coeff */
double mc_moe_z_loss(const float *logits, int64_t T, int64_t E, float coeff)
{
    float sum = 0.0f;
    for (int64_t t = 0; t < T; t++) {
        float l = logsumexp(logits + t * E, E);
        sum += l * l;
    }
    return (double)(sum / (float)T * coeff);
}

void mc_moe_z_loss_bwd(float *dlogits, const float *logits, int64_t T, int64_t E, float coeff,
                       float g)
{
    for (int64_t t = 0; t < T; t++) {
        const float *x = logits + t * E;
        float l = logsumexp(x, E), f = g * coeff * 2.0f * l / (float)T;
        for (int64_t e = 0; e < E; e++)
            dlogits[t * E + e] += f * expf(x[e] - l);
    }
}

/* ---- host state (the tracker, scratch and the per-slot routing records) ---------------- */

struct mc_moe_state *mc_moe_state_init(const struct mc_gpt_config *cfg, const struct mc_tfm_dims *d)
{
    struct mc_moe_state *s = mc_calloc(1, sizeof(*s));
    int64_t T = d->b_max * d->s_max, rows = d->moe_rows, L = cfg->num_layers;
    if (!s)
        return NULL;
    s->aux_scale = 1.0f;
    s->track_lb = mc_calloc((size_t)L, sizeof(float));
    s->track_z = mc_calloc((size_t)L, sizeof(float));
    s->dlogits = mc_calloc((size_t)(T * d->E), sizeof(float));
    s->dprob = mc_calloc((size_t)rows, sizeof(float));
    s->dot = mc_calloc((size_t)rows, sizeof(float));
    s->tmp = mc_calloc((size_t)(2 * d->E + 64), sizeof(float));
    s->logits_dt = mc_calloc((size_t)(T * d->E), sizeof(uint16_t));
    if (!s->track_lb || !s->track_z || !s->dlogits || !s->dprob || !s->dot || !s->tmp ||
        !s->logits_dt) {
        mc_moe_state_free(s);
        return NULL;
    }
    return s;
}

void mc_moe_state_free(struct mc_moe_state *s)
{
    if (!s)
        return;
    mc_free(s->track_lb);
    mc_free(s->track_z);
    mc_free(s->dlogits);
    mc_free(s->dprob);
    mc_free(s->dot);
    mc_free(s->tmp);
    mc_free(s->logits_dt);
    mc_free(s);
}

void mc_moe_acts_free(struct mc_moe_acts *a, int64_t n)
{
    for (int64_t i = 0; a && i < n; i++)
        mc_free(a[i].logits); /* one block per record */
    mc_free(a);
}

struct mc_moe_acts *mc_moe_acts_init(const struct mc_tfm_dims *d, int64_t n)
{
    struct mc_moe_acts *a = mc_calloc((size_t)(n > 0 ? n : 1), sizeof(*a));
    int64_t T = d->b_max * d->s_max, rows = d->moe_rows;
    size_t f = (size_t)(T * d->E) * sizeof(float), p = (size_t)rows * sizeof(float),
           i32 = (size_t)rows * sizeof(int32_t), c = (size_t)d->E * sizeof(int64_t);
    for (int64_t i = 0; a && i < n; i++) {
        char *b = mc_calloc(1, f + p + c + 3 * i32);
        if (!b) {
            mc_moe_acts_free(a, n);
            return NULL;
        }
        a[i].logits = (float *)b;
        a[i].prob = (float *)(b + f);
        a[i].count = (int64_t *)(b + f + p);
        a[i].top = (int32_t *)(b + f + p + c);
        a[i].row_token = (int32_t *)(b + f + p + c + i32);
        a[i].row_slot = (int32_t *)(b + f + p + c + 2 * i32);
    }
    return a;
}

/* ---- config rules ----------------------------------------------------------------------- */

mc_status mc_moe_config_check(struct mc_gpt_config *c)
{
    int64_t E = c->num_moe_experts, k = c->moe_router_topk;
    if (E < 0)
        return mc_error(MC_ERR_CONFIG, "num_moe_experts must be non-negative.");
    if (E == 0)
        return MC_OK;
    if (c->moe_ffn_hidden_size == 0)
        c->moe_ffn_hidden_size = c->ffn_hidden_size;
    if (E > 1024)
        return mc_error(MC_ERR_UNSUPPORTED, "--num-experts %lld: megatron.c takes at most 1024 "
                        "experts per layer", (long long)E);
    if (k < 1 || k > E || k > 64)
        return mc_error(MC_ERR_CONFIG, "--moe-router-topk %lld: expected 1 to --num-experts "
                        "(%lld), at most 64", (long long)k, (long long)E);
    if (k == 1 && c->moe_router_score_function == MC_MOE_SOFTMAX && !c->moe_router_pre_softmax)
        return mc_error(MC_ERR_CONFIG, "Please use --moe-router-pre-softmax when topk is 1.");
    if (c->tensor_model_parallel_size > 1)
        return mc_error(MC_ERR_UNSUPPORTED, "--num-experts with --tensor-model-parallel-size %d "
                        "is not supported by megatron.c yet (its MoE layers run at tensor- and "
                        "expert-parallel size 1)", c->tensor_model_parallel_size);
    if (c->add_bias_linear)
        return mc_error(MC_ERR_CONFIG, "--num-experts without --disable-bias-linear: Megatron "
                        "0.12.1's experts stop in their first forward (AssertionError: Bias is "
                        "not supported with per_token_scale); add --disable-bias-linear");
    if (c->recompute_granularity == MC_RECOMPUTE_FULL)
        return mc_error(MC_ERR_UNSUPPORTED, "--recompute-granularity full with --num-experts is "
                        "not supported by megatron.c yet");
    if (c->moe_ffn_hidden_size % c->tensor_model_parallel_size != 0)
        return mc_error(MC_ERR_CONFIG, "--moe-ffn-hidden-size %lld is not divisible by "
                        "--tensor-model-parallel-size", (long long)c->moe_ffn_hidden_size);
    return MC_OK;
}
