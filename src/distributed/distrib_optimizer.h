/* The distributed optimizer (--use-distributed-optimizer), the counterpart of
 * megatron/core/optimizer/distrib_optimizer.py with the reduce-scatter / all-gather of
 * param_and_grad_buffer.py (core_v0.12.1), for fp32 training. Private header. */
#ifndef MC_DISTRIB_OPTIMIZER_H
#define MC_DISTRIB_OPTIMIZER_H

#include "megatron/optimizer.h"
#include "distributed/param_and_grad_buffer.h"
#include "parallel_state/parallel_state.h"

typedef struct mc_distopt mc_distopt;

/* Lays out the set's parameters as Megatron's grad buffer (bucket_size as mc_pgb_bucket_size
 * gives it) and allocates optimizer state for this data-parallel rank's shard of every bucket
 * only. Grad norm and zero count are reduced over world_comm, every rank of the job
 * (Megatron's grad-stats group None; NULL for one process). s and ps must outlive the
 * optimizer. */
mc_status mc_distopt_init(const struct mc_optimizer_config *cfg, const struct mc_param_set *s,
                          const struct mc_parallel_state *ps, void *world_comm, int64_t bucket_size,
                          bool pad_buckets_for_high_nccl_busbw, mc_distopt **out);
void mc_distopt_free(mc_distopt *o);

/* One step after the backward passes: copies the set's grads into the buffer, scales them by
 * grad_scale (1/dp, mc_ddp_grad_scale) and reduce-scatters each bucket over the DP group, then
 * multiplies this rank's shard by post_scale (1/num_tokens with --calculate-per-token-loss,
 * else 1); grad norm and zero count over the whole world (each element once, TP duplicates
 * filtered); clipping; Adam/SGD on the shard; all-gather of the updated params into every
 * rank's param block. The grad block is left as it was before the step. */
mc_status mc_distopt_step(mc_distopt *o, float grad_scale, float post_scale, float lr,
                          float weight_decay, struct mc_opt_step_result *res);
/* Interleaved pipelining: one step over the distributed optimizers of this rank's model
 * chunks (one each, in chunk order), with one grad norm, zero count and clipping over all of
 * them, as Megatron's DistributedOptimizer over several chunks' buffers. */
/* --decoupled-lr: the lr of the embedding_or_output parameters for the following steps. */
void mc_distopt_set_decoupled_lr(mc_distopt *o, float lr);
mc_status mc_distopt_step_chunks(mc_distopt *const *os, int n, float grad_scale,
                                 float post_scale, float lr, float weight_decay,
                                 struct mc_opt_step_result *res);

/* --overlap-grad-reduce (driven by ddp.c): bucket b's grads copied into the buffer, scaled
 * and reduce-scattered, non-blocking when async; finish_grad_sync waits for all of them and
 * makes the next mc_distopt_step skip its own reduce-scatter (its grad_scale is then unused).
 * Also the blocking path (async false) for every bucket in order. */
mc_status mc_distopt_start_grad_bucket(mc_distopt *o, int64_t b, float scale, bool async);
mc_status mc_distopt_finish_grad_sync(mc_distopt *o);
/* This rank's reduce-scattered grad of param i (after finish_grad_sync): *n elements at
 * *grad (*n = 0 when it owns none of it). finalize_model_grads' later reductions (the tied
 * embedding over the embedding group) work on these. */
void mc_distopt_param_main_grad(mc_distopt *o, int64_t i, float **grad, int64_t *n);
/* Lowest param index (forward order) in bucket b; bucket b holds the params from there up to
 * bucket_first_param(b - 1) - 1 (buckets run in reverse param order). */
int64_t mc_distopt_bucket_first_param(const mc_distopt *o, int64_t b);
/* --overlap-param-gather: mc_distopt_step starts the all-gathers without waiting;
 * mc_distopt_param_use(o, end) waits for those holding params [0, end) (the forward
 * pre-hook) and finish_param_sync for all. */
void mc_distopt_set_overlap_param_gather(mc_distopt *o, bool on);
mc_status mc_distopt_param_use(mc_distopt *o, int64_t end);
mc_status mc_distopt_finish_param_sync(mc_distopt *o);
/* MPI_Test on every outstanding request (MPI progresses them only inside calls). */
void mc_distopt_progress(mc_distopt *o);

/* Megatron's grad-buffer index map for the set's parameters (what mc_distopt_init uses when
 * c->use_distributed_optimizer is set; c->dp is the data-parallel size). */
mc_status mc_distopt_map_init(const struct mc_param_set *s, const struct mc_pgb_config *c,
                              struct mc_pgb_map *out);
/* The index map in use (forward-order params, buckets). */
const struct mc_pgb_map *mc_distopt_map(const mc_distopt *o);
/* Elements of optimizer state held by this rank (all state tensors together), and what the
 * non-distributed optimizer holds for the same parameters. */
void mc_distopt_state_numel(const mc_distopt *o, int64_t *sharded, int64_t *full);

/* What checkpointing (distrib_optim.pt) needs: this rank's optimizer state over its shard of
 * every bucket (Adam: exp_avg, exp_avg_sq; SGD: momentum; each [shard_numel], bucket b's shard
 * at shard_off[b]), the data-parallel group, and the step count (settable on loading). */
struct mc_distopt_shard {
    float *exp_avg, *exp_avg_sq, *momentum;
    int64_t shard_numel;
    const int64_t *shard_off;
    int dp, dp_rank;
    void *dp_comm;
    int64_t step;
};
void mc_distopt_shard(mc_distopt *o, struct mc_distopt_shard *out);
/* --use-precision-aware-optimizer around a checkpoint (no-ops without it). Before a save, the
 * shard's fp16 states are put in their fp32 values (TE FusedAdam's get_unscaled_state, what
 * Megatron stores); after it, mc_distopt_ckpt_saved puts back the stored values bit for bit.
 * The fp32 params are saved as they are (an fp16 master's unquantized value). A load fills the
 * shard arrays and params with fp32 values; mc_distopt_ckpt_loaded then quantizes fp16 states
 * and an fp16 master from them (set_scaled_state) and marks the states initialized, so the
 * next step continues them instead of starting from zero. */
mc_status mc_distopt_ckpt_unscale(mc_distopt *o);
void mc_distopt_ckpt_saved(mc_distopt *o);
mc_status mc_distopt_ckpt_loaded(mc_distopt *o);
/* The model's 16-bit weights from all of its fp32 params, with the rounding this optimizer
 * updates them with (nearest even; half away from zero for TE's bf16 param remainders). */
void mc_distopt_refresh_compute(mc_distopt *o);
/* TE's bf16 param remainders in use (--bf16 --use-precision-aware-optimizer, fp32 masters): the
 * fp32 params are the masters exactly and the bf16 weights their high halves, rounded. */
bool mc_distopt_bf16_remainders(const mc_distopt *o);
/* One of this rank's shard arrays put together whole, in the set's layout (the dumps of
 * --dump-dir): every bucket's shards all-gathered over the data-parallel group into Megatron's
 * buffer layout and each param's range copied to its offset in out[set->n_elements]. Collective
 * over the data-parallel group; MC_ERR_CONFIG when the optimizer keeps no such state. */
enum mc_distopt_array {
    MC_DISTOPT_MAIN_GRAD, MC_DISTOPT_EXP_AVG, MC_DISTOPT_EXP_AVG_SQ, MC_DISTOPT_MOMENTUM
};
mc_status mc_distopt_gather_whole(mc_distopt *o, enum mc_distopt_array which, float *out);
void mc_distopt_set_step(mc_distopt *o, int64_t step);
/* The grad scaler (megatron/optimizer.h: mc_grad_scaler_get_state / set_state for checkpoints,
 * the scale for the loss). With interleaved pipelining the first chunk's optimizer holds the
 * one mc_distopt_step_chunks updates (Megatron's one DistributedOptimizer over all chunks). */
struct mc_grad_scaler *mc_distopt_grad_scaler(mc_distopt *o);
/* The buffer layout Megatron would build if the model registered its parameters in the order
 * perm[0], perm[1], ... (the TE spec and the legacy model register them in another order than
 * the local spec): out->param[j] is parameter perm[j]. Free with mc_pgb_map_free. */
mc_status mc_distopt_map_in_order(const mc_distopt *o, const int64_t *perm, struct mc_pgb_map *out);

#endif /* MC_DISTRIB_OPTIMIZER_H */
