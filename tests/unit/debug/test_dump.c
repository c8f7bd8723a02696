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
    c[66] = 9;
    expect_format_error(bad, c, n, "dtype");
    memcpy(c, b, n);
    c[74] = 3; /* shape[0] 2 -> 3: byte count no longer matches */
    expect_format_error(bad, c, n, "byte count");
    free(c);
    free(b);

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
