/* The communication layer's dtype-tagged and non-blocking calls (src/parallel_state/comm.c)
 * over 4 ranks: every dtype of megatron.h moves exactly (bf16/f16 as their bit patterns,
 * including NaN payloads), int32/int64/f64 reduce, a half-precision reduction is refused with
 * an error naming the dtype, a non-blocking all-reduce / reduce-scatter / in-place all-gather
 * completes through mc_comm_wait, a zeroed request is no operation, batched point-to-point
 * around a ring delivers to the right peer, and a split with a negative color gives no group. */
#include "parallel_state/parallel_state.h"
#include "test.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "leak_check_at_exit=0"; }

/* every dtype through an all-gather: rank r sends bytes r*16 + i, which must land unchanged */
static void check_moves(void *world, int me, int size)
{
    for (int t = 0; t < MC_DTYPE_COUNT; t++) {
        size_t es = mc_dtype_size((enum mc_dtype)t);
        unsigned char local[3 * 8], full[4 * 3 * 8];
        for (size_t i = 0; i < 3 * es; i++)
            local[i] = (unsigned char)(me * 16 + (int)i);
        if (t == MC_DTYPE_BF16 || t == MC_DTYPE_F16) /* a NaN with a payload: bits, not values */
            local[1] = 0x7f, local[0] = 0xc1;
        CHECK(mc_comm_all_gather(world, full, local, 3, (enum mc_dtype)t, "test all-gather") ==
              MC_OK);
        int bad = 0;
        for (int r = 0; r < size; r++)
            for (size_t i = 0; i < 3 * es; i++) {
                unsigned char want = (unsigned char)(r * 16 + (int)i);
                if ((t == MC_DTYPE_BF16 || t == MC_DTYPE_F16) && i < 2)
                    want = i ? 0x7f : 0xc1;
                bad += full[(size_t)r * 3 * es + i] != want;
            }
        CHECK(bad == 0);
    }
}

static void check_reductions(void *world, int me, int size)
{
    int32_t i32[2] = {me, -me};
    CHECK(mc_comm_all_reduce(world, i32, 2, MC_DTYPE_I32, MC_COMM_MAX, "test max") == MC_OK);
    CHECK(i32[0] == size - 1 && i32[1] == 0);
    int64_t i64 = (int64_t)1 << (40 + me);
    CHECK(mc_comm_all_reduce(world, &i64, 1, MC_DTYPE_I64, MC_COMM_SUM, "test sum") == MC_OK);
    CHECK(i64 == (((int64_t)1 << (40 + size)) - ((int64_t)1 << 40)));
    double f64 = 0.25 * me;
    CHECK(mc_comm_all_reduce(world, &f64, 1, MC_DTYPE_F64, MC_COMM_SUM, "test sum") == MC_OK);
    CHECK(f64 == 0.125 * size * (size - 1));
    uint16_t h[4] = {0};
    CHECK(mc_comm_all_reduce(world, h, 4, MC_DTYPE_BF16, MC_COMM_SUM, "test bf16 sum") ==
          MC_ERR_UNSUPPORTED);
    CHECK(strstr(mc_last_error(), "bfloat16") && strstr(mc_last_error(), "test bf16 sum"));
    mc_comm_request r;
    CHECK(mc_comm_ireduce_scatter(world, h, h, 1, MC_DTYPE_F16, "test f16", &r) ==
          MC_ERR_UNSUPPORTED);
    CHECK(strstr(mc_last_error(), "float16") != NULL);
    CHECK(!r.active);
}

static void check_nonblocking(void *world, int me, int size)
{
    float x[5], full[4 * 2], mine[2];
    for (int i = 0; i < 5; i++)
        x[i] = (float)(me + 1) * (float)(i + 1);
    mc_comm_request r[3];
    memset(r, 0, sizeof(r));
    CHECK(mc_comm_wait(3, r, world, NULL, "test empty wait") == MC_OK); /* zeroed: no ops */
    CHECK(mc_comm_test(&r[0]));
    CHECK(mc_comm_iall_reduce(world, x, 5, MC_DTYPE_F32, MC_COMM_SUM, "test iallreduce",
                              &r[0]) == MC_OK);
    CHECK(r[0].active);
    for (int i = 0; i < 2 * size; i++)
        full[i] = (float)(i + 1) * (float)(me + 1);
    CHECK(mc_comm_ireduce_scatter(world, mine, full, 2, MC_DTYPE_F32, "test ireduce-scatter",
                                  &r[1]) == MC_OK);
    CHECK(mc_comm_wait(2, r, world, "all-reduce", "test wait") == MC_OK);
    CHECK(!r[0].active && !r[1].active);
    float s = (float)(size * (size + 1) / 2);
    int bad = 0;
    for (int i = 0; i < 5; i++)
        bad += x[i] != s * (float)(i + 1);
    for (int i = 0; i < 2; i++)
        bad += mine[i] != s * (float)(2 * me + i + 1);
    CHECK(bad == 0);
    /* in place: rank r's block is its input */
    float g[4 * 2];
    for (int i = 0; i < 2 * size; i++)
        g[i] = i / 2 == me ? (float)(100 * me + i) : -1.0f;
    CHECK(mc_comm_iall_gather_in_place(world, g, 2, MC_DTYPE_F32, "test iallgather", &r[2]) ==
          MC_OK);
    CHECK(mc_comm_wait(1, &r[2], world, "all-gather", "test wait") == MC_OK);
    bad = 0;
    for (int i = 0; i < 2 * size; i++)
        bad += g[i] != (float)(100 * (i / 2) + i);
    CHECK(bad == 0);
}

/* a ring: send my rank (twice, with two tags) to the next, receive the previous one's */
static void check_p2p(void *world, int me, int size)
{
    int64_t out[2] = {me, 1000 + me}, in[2] = {-1, -1};
    int next = (me + 1) % size, prev = (me + size - 1) % size;
    mc_comm_request r[4];
    struct mc_comm_p2p_op ops[4] = {
        {true, &out[0], 1, next, 1, &r[0]}, {false, &in[1], 1, prev, 2, &r[1]},
        {true, &out[1], 1, next, 2, &r[2]}, {false, &in[0], 1, prev, 1, &r[3]}};
    CHECK(mc_comm_batch_isend_irecv(world, MC_DTYPE_I64, ops, 4, "test p2p") == MC_OK);
    CHECK(mc_comm_wait(4, r, world, NULL, "test p2p") == MC_OK);
    CHECK(in[0] == prev && in[1] == 1000 + prev); /* tags keep the two messages apart */
}

static void check_split(void *world, int me, int size)
{
    void *odd = NULL;
    CHECK(mc_comm_split(world, me % 2 ? 1 : -1, me, &odd, "test split") == MC_OK);
    CHECK((odd != NULL) == (me % 2 == 1));
    int n = 0, r = -1;
    CHECK(mc_comm_size_rank(odd, &n, &r) == MC_OK);
    CHECK(odd ? n == size / 2 && r == me / 2 : n == 1 && r == 0);
    mc_comm_free(odd);
    int local = -1;
    CHECK(mc_comm_node_rank(world, &local) == MC_OK);
    CHECK(local >= 0 && local < size);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    int rank = 0, size = 1;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    if (size > 4) {
        fprintf(stderr, "test_comm: run with at most 4 ranks (got %d)\n", size);
        MPI_Abort(world, 2);
    }
    check_moves(&world, rank, size);
    check_reductions(&world, rank, size);
    check_nonblocking(&world, rank, size);
    check_p2p(&world, rank, size);
    check_split(&world, rank, size);
    CHECK(mc_alloc_live_bytes() == 0);
    int local = test_failures, total = 0;
    MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, world);
    if (rank == 0)
        printf("test_comm (world %d): %d checks on rank 0, %d failures over all ranks\n", size,
               test_checks, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
