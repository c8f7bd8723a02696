/* Megatron's checkpoint `rng_state` (megatron/training/checkpointing.py get_rng_state,
 * Megatron-LM core_v0.12.1). Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_RNG_STATE_H
#define MC_CHECKPOINTING_RNG_STATE_H

#include "checkpointing/torch_pickle.h"
#include "megatron/checkpoint.h"

/* The list get_rng_state returns on this rank: one dict, or with --data-parallel-random-init
 * and data-parallel size > 1 one per data-parallel rank (Megatron's all_gather_object), each
 *   {'random_rng_state': random.getstate(), 'np_rng_state': np.random.get_state(),
 *    'torch_rng_state': torch.get_rng_state(), 'cuda_rng_state': torch.cuda.get_rng_state(),
 *    'rng_tracker_states': {'data-parallel-rng', 'model-parallel-rng', 'expert-parallel-rng'}}
 * as _set_random_seed leaves them: seed = --seed + 100 * pipeline rank (+ 10 * data-parallel rank
 * with --data-parallel-random-init) for random / numpy / torch / the default CUDA generator and
 * the data-parallel tracker state, seed + 2718 + tensor-parallel rank for the model-parallel one,
 * seed + 1024 + 100 * expert-parallel rank + expert-tensor-parallel rank for the expert one.
 * NULL on allocation failure. */
struct mc_pk *mc_ckpt_rng_state(mc_pk_doc *d, const struct mc_ckpt_state *s);

/* "rng_state/shard_<pp rank>.<tp rank>_<pp size>.<tp size>": the ShardedObject's unique key in a
 * torch_dist checkpoint. */
void mc_ckpt_rng_state_key(char *out, size_t n, const struct mc_ckpt_state *s);

#endif
