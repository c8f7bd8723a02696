/* mc_pp_in_flight: the peak number of micro-batches each model chunk of a stage holds between
 * forward and backward. 1F1B: min(pp - rank, M). Interleaved: cases worked by hand from
 * Megatron's get_schedule_table and step order (schedules.py, core_v0.12.1), e.g. pp2 vp2 N2
 * M4 stage 0: forwards on chunks 0 0 1 1 | 0 0 1 1, backwards on 1 1 0 0 | 1 1 0 0, warmup 4:
 * chunk 0 reaches 4, chunk 1 2. Also: the chunks' peaks add up to at least Megatron's
 * max_outstanding_backprops bound reached at the end of warmup (warmup + 1 when M allows), and
 * bad arguments are refused. */
#include "pipeline_parallel/in_flight.h"
#include "test.h"

static void expect(int pp, int rank, int vp, int64_t m, int64_t group, const int64_t *want)
{
    int64_t got[8] = {0};
    CHECK(mc_pp_in_flight(pp, rank, vp, m, group, got) == MC_OK);
    for (int c = 0; c < vp; c++)
        if (got[c] != want[c]) {
            printf("pp%d stage %d vp%d M%lld N%lld chunk %d: %lld in flight, want %lld\n", pp,
                   rank, vp, (long long)m, (long long)group, c, (long long)got[c],
                   (long long)want[c]);
            CHECK(got[c] == want[c]);
        }
}

int main(void)
{
    /* 1F1B */
    expect(4, 0, 1, 8, 0, (int64_t[]){4});
    expect(4, 2, 1, 8, 0, (int64_t[]){2});
    expect(4, 3, 1, 8, 0, (int64_t[]){1});
    expect(4, 0, 1, 2, 0, (int64_t[]){2});
    /* interleaved, worked by hand */
    expect(2, 0, 2, 4, 2, (int64_t[]){4, 2});
    expect(2, 1, 2, 4, 2, (int64_t[]){3, 1});
    expect(2, 0, 2, 4, 0, (int64_t[]){4, 2}); /* group 0 = pp */
    /* all in warmup (M * vp <= warmup): every micro-batch of every chunk */
    expect(4, 0, 2, 4, 4, (int64_t[]){4, 4});
    /* the peak total is at least warmup + 1 (Megatron's max_outstanding_backprops) */
    for (int rank = 0; rank < 4; rank++) {
        int64_t got[4];
        CHECK(mc_pp_in_flight(4, rank, 2, 8, 4, got) == MC_OK);
        int64_t warmup = (4 - rank - 1) * 2 + 4;
        CHECK(got[0] + got[1] >= warmup + 1);
        CHECK(got[0] <= 8 && got[1] <= 8);
    }
    int64_t x[2];
    CHECK(mc_pp_in_flight(2, 2, 1, 4, 0, x) == MC_ERR_CONFIG);
    CHECK(mc_pp_in_flight(2, 0, 1, 0, 0, x) == MC_ERR_CONFIG);
    return test_summary("test_in_flight");
}
