/* TensorBoard event encoding (src/training/tensorboard.c): CRC-32C against the standard check
 * values (RFC 3720 B.4), and whole framed records against the bytes torch 1.13's SummaryWriter
 * (tensorboard 2.21 EventFileWriter) wrote for the same wall time, step, tag and value; then the
 * writer's file: the file_version record first, every record's framing and CRCs valid. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "training/tensorboard.h"

static size_t from_hex(uint8_t *out, const char *hex)
{
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

static double double_from_bits(uint64_t bits)
{
    double d;
    memcpy(&d, &bits, sizeof(d));
    return d;
}

static void test_crc(void)
{
    uint8_t z[32], f[32], inc[32];
    memset(z, 0, sizeof(z));
    memset(f, 0xFF, sizeof(f));
    for (int i = 0; i < 32; i++)
        inc[i] = (uint8_t)i;
    CHECK(mc_tb_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(mc_tb_crc32c(z, 32) == 0x8A9136AAu);
    CHECK(mc_tb_crc32c(f, 32) == 0x62A8AB43u);
    CHECK(mc_tb_crc32c(inc, 32) == 0x46DD794Eu);
    CHECK(mc_tb_crc32c("", 0) == 0);
}

/* Records written by torch 1.13's SummaryWriter (tensorboard 2.21 from PyPI), made with
 *   /usr/bin/python3 -c "from torch.utils.tensorboard import SummaryWriter as W; w = W('d');
 *     w.add_scalar('lm loss', 7.5, 3); w.add_text('lr', '0.0001', global_step=0); w.close()"
 * and the 2nd and 3rd TFRecords of d/events.out.tfevents.* printed in hex; the wall times used
 * below are the bits those records hold. */
static const char scalar_rec[] =
    "1d00000000000000602fdf2309ca09850f3fc3da4110032a100a0e0a076c6d206c6f7373150000f040fbb60c97";
static const char text_rec[] =
    "3a000000000000001295eae209e90a850f3fc3da412a2f0a2d0a0f6c722f746578745f73756d6d617279421008"
    "071204120208014206302e303030314a080a060a0474657874ff918d5f";

static void check_record(const char *name, const char *want_hex, const uint8_t *ev, size_t len)
{
    uint8_t want[256], got[256];
    size_t wn = from_hex(want, want_hex);
    size_t gn = mc_tb_frame_record(got, sizeof(got), ev, len);
    CHECK(gn == wn);
    if (gn != wn || memcmp(got, want, wn)) {
        CHECK(!"record bytes differ");
        fprintf(stderr, "%s: got ", name);
        for (size_t i = 0; i < gn; i++)
            fprintf(stderr, "%02x", got[i]);
        fprintf(stderr, "\n%s: want %s\n", name, want_hex);
    }
}

static void test_known_records(void)
{
    uint8_t ev[256];
    double wall = double_from_bits(0x41dac33f0f8509caull);
    size_t n = mc_tb_encode_scalar(ev, sizeof(ev), wall, 3, "lm loss", 7.5f);
    CHECK(n == 29);
    check_record("scalar", scalar_rec, ev, n);
    wall = double_from_bits(0x41dac33f0f850ae9ull);
    n = mc_tb_encode_text(ev, sizeof(ev), wall, 0, "lr", "0.0001");
    CHECK(n == 58);
    check_record("text", text_rec, ev, n);
    /* measuring needs no buffer; a short buffer is never overrun */
    CHECK(mc_tb_encode_scalar(NULL, 0, wall, 3, "lm loss", 7.5f) == 29);
    memset(ev, 0xAB, sizeof(ev));
    CHECK(mc_tb_encode_text(ev, 10, wall, 0, "lr", "0.0001") == 58 && ev[10] == 0xAB);
    /* step 0 is left out (proto3 default); a 0.0 scalar is still written (oneof member) */
    n = mc_tb_encode_scalar(ev, sizeof(ev), wall, 0, "z", 0.0f);
    CHECK(n == 9 + 2 + 2 + 3 + 5 && ev[9] == 0x2a);
    /* large steps are varints: 2^40 takes 6 bytes */
    CHECK(mc_tb_encode_scalar(NULL, 0, wall, (int64_t)1 << 40, "z", 0.0f) == n + 1 + 6);
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Walks the file's records; returns how many are well framed (-1 on a bad one). */
static int count_records(const char *path, uint8_t *first, size_t first_n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    int count = 0;
    for (size_t i = 0; i < n;) {
        if (n - i < 12)
            return -1;
        uint64_t len = 0;
        for (int k = 7; k >= 0; k--)
            len = len << 8 | buf[i + k];
        if (le32(buf + i + 8) != mc_tb_masked_crc32c(buf + i, 8) || n - i < 16 + len)
            return -1;
        if (le32(buf + i + 12 + len) != mc_tb_masked_crc32c(buf + i + 12, len))
            return -1;
        if (count == 0 && len <= first_n)
            memcpy(first, buf + i + 12, len);
        i += 16 + len;
        count++;
    }
    return count;
}

static void test_writer(void)
{
    char dir[] = "/tmp/mc_tb_test_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    mc_tb_writer *w = NULL;
    CHECK(mc_tb_open(sub, 3, &w) == MC_OK && w);
    if (!w)
        return;
    const char *path = mc_tb_path(w);
    CHECK(strstr(path, "/a/b/events.out.tfevents.") != NULL);
    uint8_t first[128] = {0};
    CHECK(count_records(path, first, sizeof(first)) == 1); /* file_version written at once */
    CHECK(memcmp(first + 9, "\x1a\x0d" "brain.Event:2", 15) == 0);
    CHECK(mc_tb_add_scalar(w, "a", 1.0, 1) == MC_OK);
    CHECK(mc_tb_add_text(w, "b", "x", 1) == MC_OK);
    CHECK(count_records(path, first, sizeof(first)) == 1); /* still queued */
    CHECK(mc_tb_add_scalar(w, "c", 2.0, 2) == MC_OK);     /* third pending: max_queue reached */
    CHECK(count_records(path, first, sizeof(first)) == 4);
    CHECK(mc_tb_add_scalar(w, "d", 3.0, 3) == MC_OK);
    CHECK(mc_tb_flush(w) == MC_OK);
    CHECK(count_records(path, first, sizeof(first)) == 5);
    char keep[512];
    snprintf(keep, sizeof(keep), "%s", path);
    CHECK(mc_tb_close(w) == MC_OK);
    CHECK(mc_tb_close(NULL) == MC_OK);
    remove(keep);
    /* a regular file where a directory must be: a clear MC_ERR_IO */
    char file[160];
    snprintf(file, sizeof(file), "%s/plain", dir);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    snprintf(sub, sizeof(sub), "%s/plain/x", dir);
    CHECK(mc_tb_open(sub, 10, &w) == MC_ERR_IO && w == NULL);
    CHECK(strstr(mc_last_error(), "not a directory") != NULL);
    CHECK(mc_tb_open("", 10, &w) == MC_ERR_CONFIG);
    remove(file);
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    rmdir(sub);
    snprintf(sub, sizeof(sub), "%s/a", dir);
    rmdir(sub);
    rmdir(dir);
}

int main(void)
{
    test_crc();
    test_known_records();
    test_writer();
    return test_summary("test_tensorboard");
}
