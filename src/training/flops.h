/* FLOPs of one training iteration: num_floating_point_operations() of
 * megatron/training/training.py (Megatron-LM core_v0.12.1). */
#ifndef MC_TRAINING_FLOPS_H
#define MC_TRAINING_FLOPS_H

#include "training/args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Forward + backward matmul FLOPs for `batch_size` sequences, evaluated in Megatron's
 * operation order (bit-exact in double). Needs validated args and padded_vocab_size.
 * MC_ERR_UNSUPPORTED for hybrid (Mamba) models; MC_ERR_CONFIG for a bad MoE pattern. */
MC_API mc_status mc_flops_per_iteration(const struct mc_args *a, int64_t padded_vocab_size,
                                        int64_t batch_size, double *out);

#ifdef __cplusplus
}
#endif

#endif
