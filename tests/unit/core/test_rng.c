/* Philox4x32-10 known answers (Random123 test vectors), dropout keep-rate and
 * offset-consistency, and the moments of the Box-Muller normals. */
#include "core/rng.h"
#include "test.h"

#include <stdlib.h>

int main(void)
{
    /* Random123 kat_vectors (philox4x32 10): counter, key (k0, k1) -> output */
    uint32_t out[4];
    uint32_t zero[4] = {0, 0, 0, 0};
    mc_rng_philox(out, zero, 0);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu &&
          out[3] == 0x9b00dbd8u);
    uint32_t ones[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    mc_rng_philox(out, ones, 0xffffffffffffffffull);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u &&
          out[3] == 0x6d5451fdu);
    uint32_t pi[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
    mc_rng_philox(out, pi, ((uint64_t)0x299f31d0u << 32) | 0xa4093822u);
    CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u &&
          out[3] == 0x24126ea1u);

    const int64_t n = 1 << 20;
    uint8_t *keep = malloc((size_t)n), *part = malloc((size_t)n);
    mc_rng_dropout_mask(keep, 0, n, 1234, 0, 7, 5, 0.1f);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++)
        kept += keep[i];
    CHECK_CLOSE((double)kept / (double)n, 0.9, 0.002);
    /* a window drawn on its own equals the same window of the whole draw */
    mc_rng_dropout_mask(part, 1001, 5003, 1234, 0, 7, 5, 0.1f);
    int same = 1;
    for (int64_t i = 0; i < 5003; i++)
        same &= part[i] == keep[1001 + i];
    CHECK(same);
    /* the keep rule: u = (word >> 8) * 2^-24 >= p */
    uint32_t ctr[4] = {0, 0, 7, 5};
    mc_rng_philox(out, ctr, 1234);
    for (int k = 0; k < 4; k++)
        CHECK(keep[k] == ((float)(out[k] >> 8) * 0x1p-24f >= 0.1f));
    /* different step or stream gives a different mask */
    mc_rng_dropout_mask(part, 0, 4096, 1234, 0, 8, 5, 0.5f);
    mc_rng_dropout_mask(keep, 0, 4096, 1234, 0, 7, 5, 0.5f);
    int64_t diff = 0;
    for (int64_t i = 0; i < 4096; i++)
        diff += part[i] != keep[i];
    CHECK(diff > 1500);
    /* c1_hi lands in the high half of counter word c1 */
    mc_rng_dropout_mask(part, 0, 4, 1234, 3, 7, 5, 0.5f);
    uint32_t ctr1[4] = {0, 3u << 16, 7, 5};
    mc_rng_philox(out, ctr1, 1234);
    for (int k = 0; k < 4; k++)
        CHECK(part[k] == ((float)(out[k] >> 8) * 0x1p-24f >= 0.5f));

    float *z = malloc(sizeof(float) * (size_t)n), *zp = malloc(sizeof(float) * 1000);
    mc_rng_normal_fill(z, 0, n, 42, 0xffffffffu, 3, 2.0f);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += z[i];
        s2 += (double)z[i] * z[i];
    }
    CHECK_CLOSE(s / (double)n, 0.0, 0.01);
    CHECK_CLOSE(sqrt(s2 / (double)n), 2.0, 0.01);
    mc_rng_normal_fill(zp, 333, 1000, 42, 0xffffffffu, 3, 2.0f);
    same = 1;
    for (int64_t i = 0; i < 1000; i++)
        same &= zp[i] == z[333 + i];
    CHECK(same);
    free(keep);
    free(part);
    free(z);
    free(zp);
    return test_summary("test_rng");
}
