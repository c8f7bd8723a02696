/* Theoretical memory per rank: mirrors compute_weight_and_optimizer_memory(),
 * compute_activation_memory() and report_theoretical_memory() of
 * megatron/training/theoretical_memory_usage.py (core_v0.12.1), same operation order, same
 * printed lines (Python's f-string formats map to printf's: "{: .2f}" is "% .2f"). */
#include "training/theoretical_memory.h"

#include <math.h>
#include <string.h>

#define MB (1024.0 * 1024.0)
#define I(x) mc_args_int(a, MC_A_##x)

static mc_status weights(const struct mc_args *a, double V, struct mc_memory_estimate *e)
{
    double h = (double)I(hidden_size), H = (double)I(num_attention_heads);
    int64_t L = I(num_layers);
    double q_ratio = (double)(I(kv_channels) * I(num_attention_heads)) / h;
    double g = mc_args_bool(a, MC_A_group_query_attention) ? (double)I(num_query_groups) : H;
    bool moe = !mc_args_is_none(a, MC_A_num_experts);
    double n_exp = moe ? (double)I(num_experts) : 1.0;
    double glu = mc_args_bool(a, MC_A_swiglu) ? 1.5 : 1.0;
    double Fs = mc_args_is_none(a, MC_A_moe_shared_expert_intermediate_size) ? 0.0
                : (double)I(moe_shared_expert_intermediate_size);
    int64_t n_moe = 0, last = 0;
    double Fm = 0;
    if (moe) {
        const struct mc_val *f = &a->v[MC_A_moe_layer_freq];
        if (f->kind == MC_V_INT) {
            if (f->i == 0)
                return mc_error(MC_ERR_CONFIG, "--moe-layer-freq 0: integer modulo by zero");
            for (int64_t i = 0; i < L; i++) {
                last = (i % f->i == 0);
                n_moe += last;
            }
        } else {
            if (f->n != L)
                return mc_error(MC_ERR_CONFIG, "Invalid length of moe_layer_pattern: %d, "
                                "expected %lld", f->n, (long long)L);
            for (int k = 0; k < f->n; k++)
                n_moe += f->items[k].i;
            last = f->items[f->n - 1].i;
        }
        Fm = (double)I(moe_ffn_hidden_size);
    }
    int64_t n_dense = L - n_moe;
    bool has_mtp = !mc_args_is_none(a, MC_A_mtp_num_layers);
    int64_t M = has_mtp ? I(mtp_num_layers) : 0;
    double attn;
    if (mc_args_bool(a, MC_A_multi_latent_attention)) {
        double qk = (double)I(qk_head_dim), qp = (double)I(qk_pos_emb_head_dim);
        double vh = (double)I(v_head_dim), kvl = (double)I(kv_lora_rank);
        double q_term = mc_args_is_none(a, MC_A_q_lora_rank) ? h * H * (qk + qp)
                        : (double)I(q_lora_rank) * (h + H * (qk + qp) + 1);
        attn = q_term + kvl * (h + H * (qk + vh) + 1) + h * qp + (H * vh) * h;
    } else {
        attn = 2 * h * h * ((1 + (g / H)) * q_ratio);
    }
    double dense = 2 * h * ((double)I(ffn_hidden_size) * glu + 2) + attn;
    double moe_layer = 2 * h * (Fm * n_exp * glu + Fs * glu + 2) + attn;
    double emb = h * V;
    double emb_layers = mc_args_bool(a, MC_A_untie_embeddings_and_output_weights) ? 2 * emb : emb;
    e->params_transformer_block = dense * (double)n_dense + moe_layer * (double)n_moe + 2 * h;
    e->params_mtp_block = dense * (double)((1 - last) * M) + moe_layer * (double)(last * M);
    e->params_embedding = emb_layers;
    e->params_total = e->params_transformer_block + e->params_mtp_block + emb_layers;
    double tp = (double)I(tensor_model_parallel_size), pp = (double)I(pipeline_model_parallel_size);
    e->params_most_loaded_shard = (e->params_transformer_block / pp + e->params_mtp_block + emb) / tp;
    if (mc_args_bool(a, MC_A_untie_embeddings_and_output_weights) && pp == 1)
        e->params_most_loaded_shard += emb / tp;
    e->params_other_shards = pp > 1 ? e->params_transformer_block / (pp * tp) : 0;
    double bytes_per_param = mc_args_bool(a, MC_A_use_distributed_optimizer)
                                 ? 6 + (12 / (double)I(data_parallel_size)) : 18;
    e->weight_and_optimizer_bytes = e->params_most_loaded_shard * bytes_per_param;
    return MC_OK;
}

static void activations(const struct mc_args *a, double V, int64_t num_micro,
                        struct mc_memory_estimate *e)
{
    double s = (double)I(seq_length), b = (double)I(micro_batch_size), h = (double)I(hidden_size);
    double pp = (double)I(pipeline_model_parallel_size), tp = (double)I(tensor_model_parallel_size);
    double act = (s * b * h) * (18 + (4 * ((double)I(ffn_hidden_size) / h)));
    e->activation_per_layer_bytes = act;
    act *= (double)I(num_layers);
    act += 8 * s * b * pp;
    act += s * b * h * pp;
    e->in_flight_microbatches = -1;
    if (!mc_args_is_none(a, MC_A_virtual_pipeline_model_parallel_size)) {
        double vpp = (double)I(virtual_pipeline_model_parallel_size);
        e->interleave_penalty = 1 + ((pp - 1) / (pp * vpp));
        e->in_flight_microbatches = (int64_t)ceil(e->interleave_penalty * pp);
        act *= e->interleave_penalty;
    } else if (pp > 1) {
        if (num_micro >= 0) {
            double r = (double)num_micro / pp;
            act *= r < 1 ? r : 1;
            e->in_flight_microbatches = num_micro < (int64_t)pp ? num_micro : (int64_t)pp;
        } else {
            e->in_flight_microbatches = (int64_t)pp;
        }
    }
    if (pp == 1)
        act += s * b * h * 4 * (1 + (V / h));
    e->activation_bytes = act / tp;
}

mc_status mc_memory_estimate(const struct mc_args *a, int64_t padded_vocab_size,
                             int64_t num_microbatches, struct mc_memory_estimate *e)
{
    memset(e, 0, sizeof(*e));
    if (mc_args_bool(a, MC_A_is_hybrid_model))
        return mc_error(MC_ERR_UNSUPPORTED, "Theoretical memory footprints not yet supported for "
                        "hybrid Mamba-Transformer models.");
    mc_status st = weights(a, (double)padded_vocab_size, e);
    if (st != MC_OK)
        return st;
    const char *gran = mc_args_str(a, MC_A_recompute_granularity);
    e->has_activation = mc_args_bool(a, MC_A_sequence_parallel) && gran && !strcmp(gran, "selective");
    if (e->has_activation)
        activations(a, (double)padded_vocab_size, num_microbatches, e);
    return MC_OK;
}

void mc_memory_report(FILE *f, const struct mc_args *a, const struct mc_memory_estimate *e)
{
    fprintf(f, "Number of parameters in transformer block in billions: % .2f\n",
            e->params_transformer_block / 1e9);
    if (!mc_args_is_none(a, MC_A_mtp_num_layers))
        fprintf(f, "Number of parameters in mtp block in billions: % .2f\n", e->params_mtp_block / 1e9);
    fprintf(f, "Number of parameters in embedding layers in billions: %.2f\n", e->params_embedding / 1e9);
    fprintf(f, "Total number of parameters in billions: %.2f\n", e->params_total / 1e9);
    fprintf(f, "Number of parameters in most loaded shard in billions: %.4f\n",
            e->params_most_loaded_shard / 1e9);
    if (I(pipeline_model_parallel_size) > 1)
        fprintf(f, "Number of parameters in other shards in billions: %.4f\n",
                e->params_other_shards / 1e9);
    double w = e->weight_and_optimizer_bytes / MB;
    if (!e->has_activation) {
        fprintf(f, "Theoretical memory footprints: weight and optimizer=%.2f MB\n", w);
        return;
    }
    fprintf(f, "Activation memory footprint per transformer layer: %.1f MB\n",
            e->activation_per_layer_bytes / MB / (double)I(tensor_model_parallel_size));
    if (e->interleave_penalty > 0)
        fprintf(f, "Memory penalty from interleaved schedule: %.2f\n", e->interleave_penalty);
    if (e->in_flight_microbatches >= 0)
        fprintf(f, "Number of in-flight microbatches: %lld\n", (long long)e->in_flight_microbatches);
    double act = e->activation_bytes / MB;
    fprintf(f, "Theoretical memory footprints: weight and optimizer=%.2f MB, activation=%.2f MB, "
               "total=%.2f MB\n\n", w, act, w + act);
}
