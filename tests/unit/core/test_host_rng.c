/* Seeded generator states (core/host_rng.h) against values CPython 3.11 and numpy 1.24 printed
 * (random.seed(s); random.getstate()[1], np.random.seed(s); np.random.get_state()[1]), and the
 * layouts of torch's CPU and CUDA generator states. tests/checkpointing/test_rng_state.py checks
 * whole states against Python, numpy and torch run live. */
#include "core/host_rng.h"
#include "test.h"

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

int main(void)
{
    uint32_t mt[MC_MT_N];
    /* Python: one key word (0 and 1234), two (2^32 + 5), two with the top bit (2^63 + 77) */
    static const struct { uint64_t seed; uint32_t w1, w2, w623; } py[] = {
        {0, 766982754u, 497961170u, 2902720905u},
        {1234, 681931688u, 3687344416u, 343805460u},
        {4294967301ull, 3029627165u, 109794771u, 656747425u},
        {9223372036854775885ull, 1676108433u, 4054310480u, 2174133322u},
    };
    for (int i = 0; i < 4; i++) {
        mc_py_random_seed(mt, py[i].seed);
        CHECK(mt[0] == 0x80000000u && mt[1] == py[i].w1 && mt[2] == py[i].w2 && mt[623] == py[i].w623);
    }
    /* numpy's legacy seeding */
    static const struct { uint32_t seed, w1, w2, w623; } np[] = {
        {0, 1u, 1812433255u, 1796872496u},
        {1234, 3159640283u, 4062961311u, 3064478787u},
        {4294967295u, 1340201581u, 3941791902u, 3413567280u},
    };
    for (int i = 0; i < 3; i++) {
        mc_mt_init_genrand(mt, np[i].seed);
        CHECK(mt[0] == np[i].seed && mt[1] == np[i].w1 && mt[2] == np[i].w2 && mt[623] == np[i].w623);
    }
    /* torch's CPU state: seed, left 1, seeded 1, next 0, the table widened, zeros */
    static uint8_t cpu[MC_TORCH_CPU_STATE_BYTES];
    mc_torch_cpu_rng_state(cpu, 1234);
    CHECK(le(cpu, 8) == 1234 && le(cpu + 8, 4) == 1 && le(cpu + 12, 4) == 1 && le(cpu + 16, 8) == 0);
    CHECK(le(cpu + 24, 8) == 1234 && le(cpu + 32, 8) == 3159640283u && le(cpu + 24 + 8 * 623, 8) == 3064478787u);
    int zeros = 1;
    for (int k = 24 + 8 * MC_MT_N; k < MC_TORCH_CPU_STATE_BYTES; k++)
        zeros &= cpu[k] == 0;
    CHECK(zeros && MC_TORCH_CPU_STATE_BYTES - (24 + 8 * MC_MT_N) == 40);
    /* a 64-bit seed: the full seed first, the table from its low 32 bits */
    mc_torch_cpu_rng_state(cpu, (1ull << 40) + 1234);
    CHECK(le(cpu, 8) == (1ull << 40) + 1234 && le(cpu + 24, 8) == 1234 && le(cpu + 32, 8) == 3159640283u);
    uint8_t cuda[MC_TORCH_CUDA_STATE_BYTES];
    mc_torch_cuda_rng_state(cuda, 3952, 0);
    CHECK(le(cuda, 8) == 3952 && le(cuda + 8, 8) == 0);
    return test_summary("test_host_rng");
}
