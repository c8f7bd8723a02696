/* Mixture of experts internals (mirrors megatron/core/transformer/moe/): the MoE layer that
 * replaces a transformer layer's MLP (moe_layer.c: MoELayer), its router (router.c:
 * TopKRouter), token dispatcher (token_dispatcher.c: the permutation of the allgather /
 * alltoall dispatchers, which are the same at expert- and tensor-parallel size 1), experts
 * (experts.c: SequentialMLP) and the aux losses with their tracker (moe_utils.c). Private
 * header; docs/moe.md describes what is supported.
 *
 * Routing runs in host memory: the router logits [T, E] come out of the backend through its
 * copy op, the choices and the per-row probabilities stay on the host for backward, and only
 * the logits' grad goes back in. The hidden rows move between tokens and expert rows with the
 * backend's own copy / accumulate ops, so a model on a device backend hands it nothing else. */
#ifndef MC_MOE_H
#define MC_MOE_H

#include "transformer/transformer.h"

/* What one MoE layer's forward keeps for backward (host memory, per activation slot). */
struct mc_moe_acts {
    float *logits;   /* [T, E] router logits (fp32 values of the dt logits) */
    int32_t *top;    /* [T, k] chosen experts, in torch.topk's order */
    float *prob;     /* [T, k] their routing probabilities */
    int64_t *count;  /* [E] tokens routed to each expert */
    int32_t *row_token; /* [T k] the token of each permuted row (expert-major, tokens ascending) */
    int32_t *row_slot;  /* [T k] which of the token's k choices the row is */
    bool aux, z;     /* the aux loss / z-loss entered this forward (training with grad) */
    int64_t T;
};

/* State shared by the MoE layers of one model (host memory). */
struct mc_moe_state {
    float aux_scale;      /* MoEAuxLossAutoScaler.main_loss_backward_scale */
    float *track_lb;      /* [num_layers] load_balancing_loss per global layer (tracker) */
    float *track_z;       /* [num_layers] z_loss */
    bool lb_seen, z_seen; /* which entered the tracker first (its dict order) */
    bool z_first;
    /* host scratch, [T, E] / [T k] */
    float *dlogits, *dprob, *tmp, *dot;
    void *logits_dt;      /* [T, E] host copy of the dt logits */
};

/* moe_utils.c: the host state (NULL when out of memory) and n routing records. */
struct mc_moe_state *mc_moe_state_init(const struct mc_gpt_config *cfg, const struct mc_tfm_dims *d);
void mc_moe_state_free(struct mc_moe_state *s);
struct mc_moe_acts *mc_moe_acts_init(const struct mc_tfm_dims *d, int64_t n);
void mc_moe_acts_free(struct mc_moe_acts *a, int64_t n);

/* moe_utils.c: the aux losses (value; grad into dlogits [T, E], += g * d/dlogits) and the
 * tracker. */
double mc_moe_switch_aux_loss(const struct mc_gpt_config *cfg, const float *scores,
                              const int64_t *count, int64_t T);
void mc_moe_switch_aux_loss_bwd(const struct mc_gpt_config *cfg, float *dlogits,
                                const float *logits, const int64_t *count, int64_t T, float g,
                                float *tmp);
double mc_moe_seq_aux_loss(const struct mc_gpt_config *cfg, const float *scores,
                           const struct mc_moe_acts *ma, int64_t b, int64_t s);
void mc_moe_seq_aux_loss_bwd(const struct mc_gpt_config *cfg, float *dlogits,
                             const float *logits, const struct mc_moe_acts *ma, int64_t b,
                             int64_t s, float g, float *tmp);
double mc_moe_z_loss(const float *logits, int64_t T, int64_t E, float coeff);
void mc_moe_z_loss_bwd(float *dlogits, const float *logits, int64_t T, int64_t E, float coeff,
                       float g);
/* the aux-loss scores (compute_routing_scores_for_aux_loss) of one token's logits */
void mc_moe_aux_scores(const struct mc_gpt_config *cfg, float *scores, const float *logits);
void mc_moe_softmax(float *y, const float *x, int64_t n);

/* router.c: TopKRouter on the host logits (topk, probs, counts, aux losses into the tracker). */
void mc_moe_route(const struct mc_tfm_ctx *c, int64_t layer, struct mc_moe_acts *ma,
                  bool training);
/* dprob [T, k] (grad of the routing probabilities) -> dlogits [T, E], with the aux losses' and
 * z-loss's grads */
void mc_moe_route_backward(const struct mc_tfm_ctx *c, const struct mc_moe_acts *ma,
                           const float *dprob, float *dlogits);

/* token_dispatcher.c: rows of x [T, h] into expert order xp [T k, h], and back (summed). */
void mc_moe_permute(const struct mc_tfm_ctx *c, const struct mc_moe_acts *ma, void *xp,
                    const void *x);
void mc_moe_unpermute(const struct mc_tfm_ctx *c, const struct mc_moe_acts *ma, void *y,
                      const void *yp);
void mc_moe_sort_rows(const struct mc_tfm_ctx *c, struct mc_moe_acts *ma);

/* experts.c: SequentialMLP over the permuted rows; backward leaves the rows' input grad in
 * dxp and the grad of each row's probability in dprob_row [T k]. */
mc_status mc_moe_experts_forward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                                 const struct mc_moe_acts *ma, void *fc1, void *yp,
                                 const void *xp);
mc_status mc_moe_experts_backward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                                  const struct mc_tfm_layer_grads *g,
                                  const struct mc_moe_acts *ma, const void *fc1, void *dxp,
                                  float *dprob_row, const void *dyp, const void *xp);

/* moe_layer.c: MoELayer on the pre-MLP norm output ln [T, h] -> y [T, h] (no bias); backward
 * from dy [T, h] leaves the grad of ln in dln. */
mc_status mc_moe_layer_forward(const struct mc_tfm_ctx *c, int64_t layer,
                               const struct mc_tfm_layer_weights *w, struct mc_tfm_layer_acts *a,
                               void *y, const void *ln);
mc_status mc_moe_layer_backward(const struct mc_tfm_ctx *c, const struct mc_tfm_layer_weights *w,
                                const struct mc_tfm_layer_grads *g,
                                const struct mc_tfm_layer_acts *a, void *dln, const void *dy,
                                const void *ln);

/* Elements of one expert's two weights in the parameter block (fc1 then fc2). */
static inline int64_t mc_moe_expert_numel(const struct mc_tfm_dims *d)
{
    return d->moe_fc1_l * d->h + d->h * d->moe_ffn_l;
}

#endif /* MC_MOE_H */
