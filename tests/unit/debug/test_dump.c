/* src/debug/dump.c: round trip, lookups, and rejection of damaged files (truncation, bad magic,
 * bad version, trailing bytes, inconsistent byte counts). */
#include "megatron/dump.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_bytes(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fwrite(b, 1, n, f);
    fclose(f);
}

static size_t read_bytes(const char *path, unsigned char **b)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *b = malloc((size_t)n);
    size_t got = fread(*b, 1, (size_t)n, f);
    fclose(f);
    return got;
}

static void expect_format_error(const char *path, const unsigned char *b, size_t n, const char *what)
{
    write_bytes(path, b, n);
    mc_dump *d = NULL;
    mc_status st = mc_dump_read(path, &d);
    CHECK(st == MC_ERR_FORMAT);
    CHECK(d == NULL);
    CHECK(strstr(mc_last_error(), path) != NULL);
    if (st != MC_ERR_FORMAT)
        fprintf(stderr, "  (%s accepted)\n", what);
}

/* mc_dump_get_f64 / _i64 read a one-element tensor of every dtype by its own width (an f64 or
 * int16 scalar used to be read as a float32 or a byte); a non-integer or out-of-range float is
 * refused by _i64, an int64 beyond 2^53 comes back exact. */
static void test_scalars_of_every_dtype(void)
{
    mc_dump *d = NULL;
    MC_ASSERT(mc_dump_init(&d) == MC_OK);
    float f32 = 3;
    double f64 = 5, half = 2.5, big = 1e300;
    uint16_t bf16 = 0x40e0, f16 = 0x4700; /* 7 in bfloat16, 7 in float16 */
    int32_t i32 = -11;
    int64_t i64 = ((int64_t)1 << 60) + 1;
    int16_t i16 = -300;
    int8_t i8 = -5;
    uint8_t u8 = 200, b = 1;
    struct { const char *name; enum mc_dtype t; const void *p; double f; int64_t i; } c[] = {
        {"f32", MC_DTYPE_F32, &f32, 3, 3},     {"f64", MC_DTYPE_F64, &f64, 5, 5},
        {"bf16", MC_DTYPE_BF16, &bf16, 7, 7},  {"f16", MC_DTYPE_F16, &f16, 7, 7},
        {"i32", MC_DTYPE_I32, &i32, -11, -11}, {"i64", MC_DTYPE_I64, &i64, 0x1p60, ((int64_t)1 << 60) + 1},
        {"i16", MC_DTYPE_I16, &i16, -300, -300}, {"i8", MC_DTYPE_I8, &i8, -5, -5},
        {"u8", MC_DTYPE_U8, &u8, 200, 200},    {"bool", MC_DTYPE_BOOL, &b, 1, 1},
    };
    int n = (int)(sizeof(c) / sizeof(*c));
    CHECK(n == MC_DTYPE_COUNT);
    for (int k = 0; k < n; k++)
        MC_ASSERT(mc_dump_add(d, c[k].name, c[k].t, 0, NULL, c[k].p) == MC_OK);
    MC_ASSERT(mc_dump_add(d, "half", MC_DTYPE_F64, 0, NULL, &half) == MC_OK);
    MC_ASSERT(mc_dump_add(d, "big", MC_DTYPE_F64, 0, NULL, &big) == MC_OK);
    for (int k = 0; k < n; k++) {
        double f = -1;
        int64_t i = -1;
        CHECK(mc_dump_get_f64(d, c[k].name, &f) == MC_OK && f == c[k].f);
        CHECK(mc_dump_get_i64(d, c[k].name, &i) == MC_OK && i == c[k].i);
        if (f != c[k].f || i != c[k].i)
            fprintf(stderr, "  %s: got %g / %lld\n", c[k].name, f, (long long)i);
    }
    int64_t i;
    CHECK(mc_dump_get_i64(d, "half", &i) == MC_ERR_FORMAT);
    CHECK(mc_dump_get_i64(d, "big", &i) == MC_ERR_FORMAT);
    mc_dump_free(d);
}

int main(void)
{
    const char *path = "test_dump.dump", *bad = "test_dump_bad.dump";
    size_t live = mc_alloc_live_bytes();
    mc_dump *d;
    CHECK(mc_dump_init(&d) == MC_OK);
    float w[6] = {1, -2, 3.5f, 4, 5, 6e-7f};
    int64_t sw[2] = {2, 3}, st[1] = {4};
    int64_t tok[4] = {7, 0, -1, 1LL << 40};
    CHECK(mc_dump_add_f32(d, "decoder.layers.0.mlp.linear_fc1.weight", 2, sw, w) == MC_OK);
    CHECK(mc_dump_add(d, "tokens", MC_DTYPE_I64, 1, st, tok) == MC_OK);
    CHECK(mc_dump_add_scalar_f32(d, "config.norm_epsilon", 1e-5f) == MC_OK);
    CHECK(mc_dump_add_scalar_i64(d, "config.num_layers", 2) == MC_OK);
    int64_t zero[2] = {0, 5};
    CHECK(mc_dump_add_f32(d, "empty", 2, zero, NULL) == MC_OK);
    CHECK(mc_dump_add_scalar_i64(d, "tokens", 1) == MC_ERR_CONFIG); /* duplicate name */
    CHECK(mc_dump_add_scalar_i64(d, "", 1) == MC_ERR_CONFIG);
    CHECK(mc_dump_write(d, path) == MC_OK);
    mc_dump_free(d);

    mc_dump *r = NULL;
    CHECK(mc_dump_read(path, &r) == MC_OK);
    if (r) {
        CHECK(mc_dump_count(r) == 5);
        const struct mc_dump_tensor *t = mc_dump_get(r, 0);
        CHECK(strcmp(t->name, "decoder.layers.0.mlp.linear_fc1.weight") == 0);
        CHECK(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->numel == 6);
        CHECK(t->dtype == MC_DTYPE_F32 && memcmp(t->data, w, sizeof(w)) == 0);
        t = mc_dump_find(r, "tokens");
        CHECK(t && t->dtype == MC_DTYPE_I64 && memcmp(t->data, tok, sizeof(tok)) == 0);
        double eps = 0;
        int64_t nl = 0;
        CHECK(mc_dump_get_f64(r, "config.norm_epsilon", &eps) == MC_OK && eps == (double)1e-5f);
        CHECK(mc_dump_get_i64(r, "config.num_layers", &nl) == MC_OK && nl == 2);
        CHECK(mc_dump_get_i64(r, "tokens", &nl) == MC_ERR_FORMAT);  /* not a scalar */
        CHECK(mc_dump_get_i64(r, "missing", &nl) == MC_ERR_FORMAT);
        CHECK(mc_dump_find(r, "empty")->numel == 0);
        CHECK(mc_dump_find(r, "nope") == NULL);
        mc_dump_free(r);
    }

    unsigned char *b;
    size_t n = read_bytes(path, &b);
    CHECK(n > 24);
    for (size_t cut = 0; cut < n; cut += (cut < 40 ? 1 : 7))
        expect_format_error(bad, b, cut, "truncated");
    unsigned char *c = malloc(n + 1);
    memcpy(c, b, n);
    c[n] = 0;
    expect_format_error(bad, c, n + 1, "trailing byte");
    c[0] = 'X';
    expect_format_error(bad, c, n, "bad magic");
    memcpy(c, b, n);
    c[8] = 2;
    expect_format_error(bad, c, n, "version 2");
    memcpy(c, b, n);
    c[16] = 0xff; /* absurd count */
    expect_format_error(bad, c, n, "count");
    memcpy(c, b, n);
    /* first record: name length at 24, name (38 bytes), dtype at 66, ndim at 70 */
    c[66] = MC_DTYPE_COUNT; /* the first code past the enum */
    expect_format_error(bad, c, n, "dtype");
    CHECK(strstr(mc_last_error(), "has dtype 10 (expected < 10)") != NULL);
    memcpy(c, b, n);
    c[74] = 3; /* shape[0] 2 -> 3: byte count no longer matches */
    expect_format_error(bad, c, n, "byte count");
    free(c);
    free(b);

    test_scalars_of_every_dtype();

    mc_dump *m = NULL;
    CHECK(mc_dump_read("/nonexistent/x.dump", &m) == MC_ERR_IO && m == NULL);
    CHECK(mc_dump_init(&d) == MC_OK && mc_dump_write(d, "/nonexistent/x.dump") == MC_ERR_IO);
    mc_dump_free(d);
    /* hooks: off until enabled, repeated names numbered, flush writes and clears */
    const char *hp = "test_dump_hooks.dump";
    float act[4] = {1, 2, 3, 4};
    int64_t ash[2] = {2, 2};
    mc_dump_hooks_disable();
    CHECK(!mc_dump_hooks_active());
    mc_dump_hook("ignored", MC_DTYPE_F32, 2, ash, act);
    CHECK(mc_dump_hooks_flush() == MC_ERR_CONFIG);
    CHECK(mc_dump_hooks_enable(hp) == MC_OK && mc_dump_hooks_active());
    mc_dump_hook("decoder.layers.0.output", MC_DTYPE_F32, 2, ash, act);
    act[0] = 9;
    mc_dump_hook("decoder.layers.0.output", MC_DTYPE_F32, 2, ash, act);
    CHECK(mc_dump_hooks_flush() == MC_OK);
    mc_dump *h = NULL;
    CHECK(mc_dump_read(hp, &h) == MC_OK);
    if (h) {
        CHECK(mc_dump_count(h) == 2);
        const struct mc_dump_tensor *t0 = mc_dump_find(h, "decoder.layers.0.output");
        const struct mc_dump_tensor *t1 = mc_dump_find(h, "decoder.layers.0.output@1");
        CHECK(t0 && ((float *)t0->data)[0] == 1 && t1 && ((float *)t1->data)[0] == 9);
        mc_dump_free(h);
    }
    CHECK(mc_dump_hooks_flush() == MC_OK); /* cleared: an empty dump */
    CHECK(mc_dump_read(hp, &h) == MC_OK && h && mc_dump_count(h) == 0);
    mc_dump_free(h);
    mc_dump_hooks_disable();
    CHECK(!mc_dump_hooks_active());
    remove(hp);

    remove(path);
    remove(bad);
    CHECK(mc_alloc_live_bytes() == live);
    return test_summary("test_dump");
}
