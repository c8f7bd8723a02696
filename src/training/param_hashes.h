/* --check-weight-hash-across-dp-replicas-interval: megatron/core/utils.py's
 * check_param_hashes_across_dp_replicas (cross_check=True) over MPI. */
#ifndef MC_TRAINING_PARAM_HASHES_H
#define MC_TRAINING_PARAM_HASHES_H

#include <stdbool.h>

#include "megatron/gpt.h"
#include "parallel_state/parallel_state.h"

/* Hashes every parameter of the vp model chunks on this rank (MD5 of its fp32 values), gathers
 * the hashes over the data-parallel group and sets *match when every replica holds the same
 * values; a parameter that differs from data-parallel rank 0's is named on this rank's stdout
 * (Megatron's logger.info line). Collective over the data-parallel group. world_rank: for the
 * log line. */
mc_status mc_param_hashes_match(mc_gpt_model *const *chunks, int vp, const struct mc_ps_comm *dp,
                                int world_rank, bool *match);

/* --test-mode with --qk-layernorm: Attention.run_realtime_tests. Every q_layernorm /
 * k_layernorm weight and bias of the vp chunks is gathered over the data-parallel group, then
 * the tensor-parallel group, and compared element for element with this rank's; the first
 * difference is MC_ERR_INTERNAL with Megatron's AssertionError text. Collective over both. */
mc_status mc_qk_norms_match(mc_gpt_model *const *chunks, int vp, const struct mc_ps_comm *dp,
                            const struct mc_ps_comm *tp);

#endif
