/* The generator states Megatron's _set_random_seed leaves behind (megatron/training/
 * initialize.py, Megatron-LM core_v0.12.1: random.seed, np.random.seed, torch.manual_seed and
 * tensor_parallel.model_parallel_cuda_manual_seed), as the bytes and numbers Python, numpy and
 * torch report for them. megatron.c draws nothing from these generators (its streams are
 * rng.h's); it computes them only to write a checkpoint's rng_state the way Megatron does.
 * Private header of src/.
 *
 * MT19937 (Matsumoto & Nishimura 1998), two seedings:
 *   init_genrand(s): mt[0] = s, mt[i] = 1812433253 * (mt[i-1] ^ (mt[i-1] >> 30)) + i (mod 2^32):
 *     numpy's legacy np.random.seed(int) and torch's CPU generator (at::mt19937(seed), which
 *     seeds with the low 32 bits of the seed);
 *   init_by_array(key): init_genrand(19650218), then the reference code's two mixing loops over
 *     the key: Python's random.seed(int), whose key is |seed| cut into 32-bit words, least
 *     significant first (one word 0 for seed 0).
 * After seeding, all three stand at position 624 (the next draw regenerates the table). */
#ifndef MC_CORE_HOST_RNG_H
#define MC_CORE_HOST_RNG_H

#include <stdint.h>

#define MC_MT_N 624
/* torch.get_rng_state() of the CPU generator: sizeof(at::CPUGeneratorImplState). */
#define MC_TORCH_CPU_STATE_BYTES 5056
/* torch.cuda.get_rng_state(): the Philox seed (uint64) then offset (int64), little endian. */
#define MC_TORCH_CUDA_STATE_BYTES 16

void mc_mt_init_genrand(uint32_t mt[MC_MT_N], uint32_t seed);
void mc_mt_init_by_array(uint32_t mt[MC_MT_N], const uint32_t *key, int n);

/* random.seed(seed); random.getstate()[1][:624] (the index that follows is 624). */
void mc_py_random_seed(uint32_t mt[MC_MT_N], uint64_t seed);

/* torch.manual_seed(seed); torch.get_rng_state(): CPUGeneratorImplStateLegacy
 * {uint64 the_initial_seed = seed; int32 left = 1; int32 seeded = 1; uint64 next = 0;
 *  uint64 state[624] (the 32-bit table widened); double normal_x, normal_y, normal_rho;
 *  int32 normal_is_valid} then float next_float_normal_sample, bool valid: with no cached
 * normal all of these are 0, the padding too (torch value-initializes the struct). */
void mc_torch_cpu_rng_state(uint8_t out[MC_TORCH_CPU_STATE_BYTES], uint64_t seed);

/* torch.cuda.manual_seed(seed); torch.cuda.get_rng_state() (CUDAGeneratorImpl::get_state):
 * seed and Philox offset, which manual_seed resets to 0. */
void mc_torch_cuda_rng_state(uint8_t out[MC_TORCH_CUDA_STATE_BYTES], uint64_t seed, int64_t offset);

#endif /* MC_CORE_HOST_RNG_H */
