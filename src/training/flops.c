/* FLOP count of one iteration: mirrors num_floating_point_operations() (transformer_flops) of
 * megatron/training/training.py, core_v0.12.1. Terms are evaluated in Megatron's order, with
 * integers kept exact in double, so the result matches Python's bit for bit. */
#include "training/flops.h"

#include <string.h>

/* MoE layer pattern: 1 where the layer is MoE. Fills counts; last = pattern[L-1]. */
static mc_status moe_pattern(const struct mc_args *a, int64_t L, int64_t *n_moe, int64_t *last)
{
    const struct mc_val *f = &a->v[MC_A_moe_layer_freq];
    *n_moe = 0;
    *last = 0;
    if (f->kind == MC_V_INT) {
        if (f->i == 0)
            return mc_error(MC_ERR_CONFIG, "--moe-layer-freq 0: integer modulo by zero");
        for (int64_t i = 0; i < L; i++) {
            int64_t m = (i % f->i == 0) ? 1 : 0;
            *n_moe += m;
            *last = m;
        }
        return MC_OK;
    }
    if (f->kind != MC_V_LIST || f->n != L)
        return mc_error(MC_ERR_CONFIG, "Invalid length of moe_layer_pattern: %d, expected %lld",
                        f->kind == MC_V_LIST ? f->n : -1, (long long)L);
    for (int k = 0; k < f->n; k++)
        *n_moe += f->items[k].i;
    *last = f->items[f->n - 1].i;
    return MC_OK;
}

mc_status mc_flops_per_iteration(const struct mc_args *a, int64_t V, int64_t batch, double *out)
{
    if (mc_args_bool(a, MC_A_is_hybrid_model))
        return mc_error(MC_ERR_UNSUPPORTED, "FLOPs of hybrid (Mamba) models are not computed by "
                        "megatron.c");
    double h = (double)mc_args_int(a, MC_A_hidden_size);
    double H = (double)mc_args_int(a, MC_A_num_attention_heads);
    double s = (double)mc_args_int(a, MC_A_seq_length);
    int64_t L0 = mc_args_int(a, MC_A_num_layers);
    double q_ratio = (double)(mc_args_int(a, MC_A_kv_channels) * mc_args_int(a, MC_A_num_attention_heads)) / h;
    double g = mc_args_bool(a, MC_A_group_query_attention)
                   ? (double)mc_args_int(a, MC_A_num_query_groups) : H;
    int64_t n_dense = L0, n_moe = 0, k_routed = 0, last_moe = 0;
    if (!mc_args_is_none(a, MC_A_num_experts)) {
        mc_status st = moe_pattern(a, L0, &n_moe, &last_moe);
        if (st != MC_OK)
            return st;
        n_dense = L0 - n_moe;
        k_routed = mc_args_int(a, MC_A_moe_router_topk);
    }
    int64_t M = mc_args_is_none(a, MC_A_mtp_num_layers) ? 0 : mc_args_int(a, MC_A_mtp_num_layers);
    n_moe += last_moe * M;
    n_dense += (1 - last_moe) * M;
    double L = (double)(L0 + M);
    double F = (double)mc_args_int(a, MC_A_ffn_hidden_size);
    double Fm = mc_args_is_none(a, MC_A_moe_ffn_hidden_size) ? F
                : (double)mc_args_int(a, MC_A_moe_ffn_hidden_size);
    double Fs = mc_args_is_none(a, MC_A_moe_shared_expert_intermediate_size) ? 0.0
                : (double)mc_args_int(a, MC_A_moe_shared_expert_intermediate_size);
    double glu = mc_args_bool(a, MC_A_swiglu) ? 1.5 : 1.0;
    double E = 12.0;
    double attn;
    if (mc_args_bool(a, MC_A_multi_latent_attention)) {
        double qk = (double)mc_args_int(a, MC_A_qk_head_dim);
        double qp = (double)mc_args_int(a, MC_A_qk_pos_emb_head_dim);
        double vh = (double)mc_args_int(a, MC_A_v_head_dim);
        double kvl = (double)mc_args_int(a, MC_A_kv_lora_rank);
        double q_term = mc_args_is_none(a, MC_A_q_lora_rank)
                            ? h * H * (qk + qp)
                            : (double)mc_args_int(a, MC_A_q_lora_rank) * (h + H * (qk + qp) + 1);
        attn = 3 * 2 * L * (q_term + kvl * (h + H * (qk + vh) + 1) + h * qp + (H * vh) * h +
                            s * (H * (qk + qp)) / 2 + s * H * vh / 2);
    } else {
        attn = E * L * h * h * ((1 + (g / H) + (s / h / 2)) * q_ratio);
    }
    double mlp = E * L * h *
                 ((F * glu) * ((double)n_dense / L) + (Fm * (double)k_routed * glu) * ((double)n_moe / L) +
                  (Fs * glu) * ((double)n_moe / L));
    double mtp = 3 * 2 * (double)M * (3 * h + 2 * h * h);
    double logits = 3 * 2 * h * (double)V * (double)(M + 1);
    *out = (double)batch * s * (mlp + attn + mtp + logits);
    return MC_OK;
}
