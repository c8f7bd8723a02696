/* Unit tests for src/distributed/param_and_grad_buffer.c: small layouts worked out by hand
 * from Megatron's _ParamAndGradBuffer rules (and cross-checked against Megatron's code by
 * tests/parallel/test_distopt_buffer.py), including the shared-embedding quirk where the
 * param starts before its padded bucket. */
#include "test.h"

#include "distributed/param_and_grad_buffer.h"

struct want {
    int64_t param[4][3];  /* start, end, bucket (forward order) */
    int64_t bucket[3][3]; /* start, end, unpadded */
    int64_t n_buckets, numel, numel_unpadded;
};

static void check_map(const struct mc_pgb_config *c, int64_t n, const int64_t *numel,
                      const bool *shared, const struct want *w)
{
    struct mc_pgb_map m;
    CHECK(mc_pgb_map_init(c, n, numel, shared, &m) == MC_OK);
    for (int64_t i = 0; i < n; i++) {
        CHECK(m.param[i].start == w->param[i][0]);
        CHECK(m.param[i].end == w->param[i][1]);
        CHECK(m.param[i].bucket == w->param[i][2]);
    }
    CHECK(m.n_buckets == w->n_buckets);
    for (int64_t b = 0; b < m.n_buckets && b < w->n_buckets; b++) {
        CHECK(m.bucket[b].start == w->bucket[b][0]);
        CHECK(m.bucket[b].end == w->bucket[b][1]);
        CHECK(m.bucket[b].numel_unpadded == w->bucket[b][2]);
    }
    CHECK(m.numel == w->numel);
    CHECK(m.numel_unpadded == w->numel_unpadded);
    mc_pgb_map_free(&m);
}

int main(void)
{
    const int64_t three[] = {10, 20, 30};
    /* plain DDP: reverse order, no padding, one bucket */
    struct mc_pgb_config ddp = {4, false, 0, false};
    check_map(&ddp, 3, three, NULL,
              &(struct want){{{50, 60, 0}, {30, 50, 0}, {0, 30, 0}}, {{0, 60, 60}}, 1, 60, 60});
    /* distopt dp4: params 64-aligned, the bucket padded to lcm(4, 128) = 128 */
    struct mc_pgb_config d4 = {4, true, 0, false};
    check_map(&d4, 3, three, NULL,
              &(struct want){{{128, 138, 0}, {64, 84, 0}, {0, 30, 0}}, {{0, 256, 138}}, 1, 256,
                             138});
    /* distopt dp3, bucket_size 50: buckets padded to lcm(3, 128) = 384 */
    struct mc_pgb_config d3 = {3, true, 50, false};
    check_map(&d3, 3, three, NULL,
              &(struct want){{{384, 394, 1}, {64, 84, 0}, {0, 30, 0}},
                             {{0, 384, 84}, {384, 768, 10}}, 2, 768, 94});
    /* a shared embedding gets its own bucket; it starts at 64 while its bucket starts at 128 */
    const int64_t four[] = {100, 7, 300, 5};
    const bool shared[] = {false, false, true, false};
    struct mc_pgb_config d2 = {2, true, 0, false};
    check_map(&d2, 4, four, shared,
              &(struct want){{{448, 548, 2}, {384, 391, 2}, {64, 364, 1}, {0, 5, 0}},
                             {{0, 128, 64}, {128, 384, 236}, {384, 640, 164}}, 3, 640, 464});
    /* DistributedDataParallel's bucket size */
    CHECK(mc_pgb_bucket_size(false, 0, 4, 0) == 0);
    CHECK(mc_pgb_bucket_size(true, 0, 4, 0) == 40000000);
    CHECK(mc_pgb_bucket_size(true, 0, 64, 0) == 64000000);
    CHECK(mc_pgb_bucket_size(true, 5000, 4, 0) == 5000);
    CHECK(mc_pgb_bucket_size(true, 5000, 4, 1) == 0);
    /* bad requests are errors, not crashes */
    struct mc_pgb_map m;
    struct mc_pgb_config bad = {0, true, 0, false};
    CHECK(mc_pgb_map_init(&bad, 3, three, NULL, &m) == MC_ERR_CONFIG);
    CHECK(mc_pgb_map_init(&d2, 0, three, NULL, &m) == MC_ERR_CONFIG);
    return test_summary("test_param_and_grad_buffer");
}
