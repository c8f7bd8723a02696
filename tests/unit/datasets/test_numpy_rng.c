/* numpy RandomState (MT19937) reproduction: known answers from the spec (megatron-data.md
 * 4.5.5), then shuffles/permutations/randint compared with live numpy (/usr/bin/python3) for
 * many seeds and lengths, including lengths that cross the 624-word regeneration and masks
 * with many rejections. */
#include "megatron/gpt_dataset.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static void known_answers(void)
{
    struct mc_np_rng r;
    CHECK(mc_np_rng_seed(&r, 1234) == MC_OK);
    CHECK(mc_np_rng_next32(&r) == 822569775U);
    CHECK(mc_np_rng_next32(&r) == 2137449171U);
    CHECK(mc_np_rng_next32(&r) == 2671936806U);
    CHECK(mc_np_rng_seed(&r, 7) == MC_OK);
    CHECK(mc_np_rng_next32(&r) == 327741615U);
    CHECK(mc_np_rng_next32(&r) == 976413892U);
    CHECK(mc_np_rng_next32(&r) == 3349725721U);
    int32_t a[10], want1234[10] = {7, 2, 9, 1, 0, 8, 4, 5, 6, 3}, want7[10] = {8, 5, 0, 2, 1, 9, 7, 3, 6, 4};
    for (int i = 0; i < 10; i++) a[i] = i;
    mc_np_rng_seed(&r, 1234);
    mc_np_rng_shuffle_i32(&r, a, 10);
    CHECK(memcmp(a, want1234, sizeof(a)) == 0);
    for (int i = 0; i < 10; i++) a[i] = i;
    mc_np_rng_seed(&r, 7);
    mc_np_rng_shuffle_i32(&r, a, 10);
    CHECK(memcmp(a, want7, sizeof(a)) == 0);
    CHECK(mc_np_rng_seed(&r, -1) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "--seed") != NULL);
    CHECK(mc_np_rng_seed(&r, 4294967296LL) == MC_ERR_CONFIG);
    CHECK(mc_np_rng_seed(&r, 4294967295LL) == MC_OK);
    /* max == 0 draws nothing */
    mc_np_rng_seed(&r, 5);
    CHECK(mc_np_rng_interval(&r, 0) == 0);
    struct mc_np_rng r2;
    mc_np_rng_seed(&r2, 5);
    CHECK(mc_np_rng_next32(&r) == mc_np_rng_next32(&r2));
}

/* Runs numpy and compares each printed line against ours. */
static void live_numpy(void)
{
    static const int64_t seeds[] = {0, 1, 7, 42, 1234, 31337, 4294967295LL, 2147483648LL};
    static const int64_t lens[] = {0, 1, 2, 3, 10, 623, 624, 625, 1000, 1025, 4097, 20000};
    const char *py = getenv("MC_PYTHON") ? getenv("MC_PYTHON") : "/usr/bin/python3";
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "%s -c \"\n"
             "import numpy as np\n"
             "seeds=[0,1,7,42,1234,31337,4294967295,2147483648]\n"
             "lens=[0,1,2,3,10,623,624,625,1000,1025,4097,20000]\n"
             "for s in seeds:\n"
             "  for n in lens:\n"
             "    r=np.random.RandomState(s); a=np.arange(n,dtype=np.int32); r.shuffle(a)\n"
             "    b=np.arange(n,dtype=np.uint32); r.shuffle(b); p=r.permutation(n %% 97)\n"
             "    q=r.randint(3, 3+n+1, size=5); w=r.randint(0, 2**40+17, size=3)\n"
             "    print(' '.join(map(str,list(a)+list(b)+list(p)+list(q)+list(w))))\n"
             "\"", py);
    FILE *f = popen(cmd, "r");
    if (!f) {
        CHECK(!"cannot run numpy");
        return;
    }
    size_t cap = 1 << 22;
    char *line = malloc(cap);
    int64_t *buf = malloc(sizeof(int64_t) * 50000);
    int lines = 0, bad = 0;
    for (size_t si = 0; si < sizeof(seeds) / sizeof(*seeds); si++) {
        for (size_t li = 0; li < sizeof(lens) / sizeof(*lens); li++) {
            if (!fgets(line, (int)cap, f)) {
                bad++;
                break;
            }
            lines++;
            int64_t n = lens[li], k = 0;
            struct mc_np_rng r;
            mc_np_rng_seed(&r, seeds[si]);
            int32_t *a = malloc(sizeof(int32_t) * (size_t)(n + 1));
            uint32_t *b = malloc(sizeof(uint32_t) * (size_t)(n + 1));
            for (int64_t i = 0; i < n; i++) a[i] = (int32_t)i, b[i] = (uint32_t)i;
            mc_np_rng_shuffle_i32(&r, a, n);
            mc_np_rng_shuffle_u32(&r, b, n);
            for (int64_t i = 0; i < n; i++) buf[k++] = a[i];
            for (int64_t i = 0; i < n; i++) buf[k++] = b[i];
            mc_np_rng_permutation(&r, buf + k, n % 97);
            k += n % 97;
            mc_np_rng_randint(&r, 3, 3 + n + 1, buf + k, 5);
            k += 5;
            mc_np_rng_randint(&r, 0, (1LL << 40) + 17, buf + k, 3);
            k += 3;
            char *p = line;
            int ok = 1;
            for (int64_t i = 0; i < k; i++) {
                char *e;
                long long v = strtoll(p, &e, 10);
                if (e == p || v != buf[i]) {
                    ok = 0;
                    break;
                }
                p = e;
            }
            if (!ok) {
                bad++;
                fprintf(stderr, "mismatch: seed %lld n %lld\n", (long long)seeds[si], (long long)n);
            }
            free(a);
            free(b);
        }
    }
    int rc = pclose(f);
    CHECK(rc == 0);
    CHECK(lines == (int)(sizeof(seeds) / sizeof(*seeds) * sizeof(lens) / sizeof(*lens)));
    CHECK(bad == 0);
    printf("live numpy: %d seed/length cases compared, %d mismatches\n", lines, bad);
    free(line);
    free(buf);
}

int main(void)
{
    known_answers();
    live_numpy();
    return test_summary("test_numpy_rng");
}
