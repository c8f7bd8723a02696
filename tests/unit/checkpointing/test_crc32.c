/* mc_crc32_update (src/checkpointing/torch_zip.c, crc32_clmul.c): the check value of zip's
 * CRC-32, every short length and alignment against a bit-at-a-time CRC, and the
 * multi-threaded path (pieces combined) equal to the one-thread path fed in small pieces, for
 * lengths that do not divide evenly and a non-zero starting CRC. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "checkpointing/torch_zip.h"
#include "test.h"

static uint32_t in_small_pieces(uint32_t crc, const uint8_t *p, size_t n)
{
    for (size_t at = 0; at < n; at += 1 << 20)
        crc = mc_crc32_update(crc, p + at, n - at < (1 << 20) ? n - at : 1 << 20);
    return crc;
}

/* Bit at a time, independent of both the tables and the carry-less folding. */
static uint32_t bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? 0xedb88320u ^ (crc >> 1) : crc >> 1;
    }
    return ~crc;
}

/* Every length 0..600 at every alignment 0..15 (the folding path starts at 64 bytes and leaves
 * a tail under 16), and a 3 MB buffer, against the bitwise CRC. */
static void check_against_bitwise(const uint8_t *b)
{
    int bad = 0;
    for (size_t off = 0; off < 16; off++)
        for (size_t n = 0; n <= 600; n++)
            bad += mc_crc32_update(0x1234567u * (uint32_t)n, b + off, n) !=
                   bitwise(0x1234567u * (uint32_t)n, b + off, n);
    CHECK(bad == 0);
    CHECK(mc_crc32_update(0, b + 5, (size_t)3 << 20) == bitwise(0, b + 5, (size_t)3 << 20));
}

int main(void)
{
    CHECK(mc_crc32_update(0, "123456789", 9) == 0xcbf43926u); /* the standard check value */
    CHECK(mc_crc32_update(0, "", 0) == 0);
    size_t n = (size_t)129 << 20; /* two 64 MB pieces with carry-less folding */
    uint8_t *b = malloc(n + 3);
    CHECK(b != NULL);
    if (!b)
        return test_summary("test_crc32");
    uint32_t x = 12345;
    for (size_t i = 0; i < n + 3; i++) {
        x = x * 1103515245u + 12345u;
        b[i] = (uint8_t)(x >> 16);
    }
    check_against_bitwise(b);
    for (int threads = 2; threads <= 5; threads += 3) {
        omp_set_num_threads(threads);
        for (size_t extra = 0; extra < 4; extra += 3) {
            uint32_t whole = mc_crc32_update(0, b, n + extra);
            uint32_t pieces = in_small_pieces(0, b, n + extra);
            CHECK(whole == pieces);
            CHECK(mc_crc32_update(0xdeadbeefu, b + 1, n) == in_small_pieces(0xdeadbeefu, b + 1, n));
        }
    }
    free(b);
    return test_summary("test_crc32");
}
