/* Indexed dataset reader and builder (src/datasets/indexed_dataset.c): round trips for every
 * dtype code, empty documents, merging with add_index, the exact .idx bytes of a small case
 * written by hand from the format description, and every kind of corrupt input. */
#include "megatron/indexed_dataset.h"
#include "test.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static const char *path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
    return buf[k];
}

static long file_size(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static unsigned char *slurp(const char *p, long *n)
{
    *n = file_size(p);
    if (*n < 0)
        return NULL;
    unsigned char *b = malloc((size_t)*n + 1);
    FILE *f = fopen(p, "rb");
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) *n = -1;
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, long n)
{
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, (size_t)n, f);
    fclose(f);
}

static int count_files(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* docs: {[1,2,3]}, {} (empty), {[4], [5,6]} -> 3 sequences, 3 documents */
static mc_status build_small(const char *prefix, int code)
{
    mc_ds_builder *b;
    mc_status s = mc_ds_builder_init(path(prefix), code, &b);
    if (s != MC_OK)
        return s;
    int64_t a[] = {1, 2, 3}, c[] = {4}, d[] = {5, 6};
    if ((s = mc_ds_builder_add_item(b, a, 3)) || (s = mc_ds_builder_end_document(b)) ||
        (s = mc_ds_builder_end_document(b)) || (s = mc_ds_builder_add_item(b, c, 1)) ||
        (s = mc_ds_builder_add_item(b, d, 2)) || (s = mc_ds_builder_end_document(b))) {
        mc_ds_builder_abort(b);
        return s;
    }
    return mc_ds_builder_finalize(b);
}

static void test_exact_bytes(void)
{
    CHECK(build_small("small", 8) == MC_OK);
    unsigned char want[34 + 12 * 3 + 8 * 4];
    unsigned char *p = want;
    memcpy(p, "MMIDIDX\0\0", 9); p += 9;
    uint64_t v = 1, n = 3, d = 4;
    memcpy(p, &v, 8); p += 8;
    *p++ = 8;
    memcpy(p, &n, 8); p += 8;
    memcpy(p, &d, 8); p += 8;
    int32_t lens[] = {3, 1, 2};
    int64_t ptrs[] = {0, 6, 8}, docs[] = {0, 1, 1, 3};
    memcpy(p, lens, 12); p += 12;
    memcpy(p, ptrs, 24); p += 24;
    memcpy(p, docs, 32);
    long got_n;
    unsigned char *got = slurp(path("small.idx"), &got_n);
    CHECK(got_n == (long)sizeof(want) && memcmp(got, want, sizeof(want)) == 0);
    free(got);
    unsigned char bin_want[] = {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0};
    got = slurp(path("small.bin"), &got_n);
    CHECK(got_n == 12 && memcmp(got, bin_want, 12) == 0);
    free(got);
}

static void test_roundtrip_all_dtypes(void)
{
    for (int code = 1; code <= 8; code++) {
        char name[32];
        snprintf(name, sizeof(name), "rt%d", code);
        CHECK(build_small(name, code) == MC_OK);
        mc_indexed_dataset *ds;
        CHECK(mc_ds_open(path(name), &ds) == MC_OK);
        if (!ds)
            continue;
        size_t isz = mc_ds_dtype_bytes(ds);
        CHECK(mc_ds_dtype_code(ds) == code);
        CHECK(mc_ds_num_sequences(ds) == 3 && mc_ds_num_documents(ds) == 3);
        const int32_t *l = mc_ds_sequence_lengths(ds);
        const int64_t *p = mc_ds_sequence_pointers(ds), *di = mc_ds_document_indices(ds);
        CHECK(l[0] == 3 && l[1] == 1 && l[2] == 2);
        CHECK(p[0] == 0 && p[1] == (int64_t)(3 * isz) && p[2] == (int64_t)(4 * isz));
        CHECK(di[0] == 0 && di[1] == 1 && di[2] == 1 && di[3] == 3);
        int64_t out[3] = {0};
        CHECK(mc_ds_get(ds, 0, 0, 3, out) == MC_OK && out[0] == 1 && out[2] == 3);
        CHECK(mc_ds_get(ds, 2, 1, 1, out) == MC_OK && out[0] == 6);
        CHECK(mc_ds_get(ds, 2, 0, 0, out) == MC_OK);
        CHECK(mc_ds_get(ds, 2, 1, 2, out) == MC_ERR_CONFIG); /* leaves the sequence */
        CHECK(mc_ds_get(ds, 3, 0, 1, out) == MC_ERR_CONFIG);
        CHECK(mc_ds_get(ds, -1, 0, 1, out) == MC_ERR_CONFIG);
        mc_ds_close(ds);
    }
}

static void test_dtype_choice_and_range(void)
{
    CHECK(mc_ds_optimal_dtype_code(50257) == 8);
    CHECK(mc_ds_optimal_dtype_code(65499) == 8);
    CHECK(mc_ds_optimal_dtype_code(65500) == 4);
    CHECK(mc_ds_optimal_dtype_code(65536) == 4);
    CHECK(mc_ds_optimal_dtype_code(128256) == 4);
    mc_ds_builder *b;
    CHECK(mc_ds_builder_init(path("range"), 8, &b) == MC_OK);
    int64_t ok[] = {0, 65535}, bad[] = {65536}, neg[] = {-1};
    CHECK(mc_ds_builder_add_item(b, ok, 2) == MC_OK);
    CHECK(mc_ds_builder_add_item(b, bad, 1) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "65536") != NULL);
    CHECK(mc_ds_builder_add_item(b, neg, 1) == MC_ERR_CONFIG);
    int before = count_files();
    mc_ds_builder_abort(b); /* removes the temporary .bin */
    CHECK(count_files() == before - 1);
    CHECK(file_size(path("range.bin")) < 0 && file_size(path("range.idx")) < 0);
    CHECK(mc_ds_builder_init(path("badcode"), 9, &b) == MC_ERR_CONFIG);
    CHECK(mc_ds_builder_init(path("nodir/x"), 8, &b) == MC_ERR_IO);
}

static void test_merge(void)
{
    CHECK(build_small("m1", 4) == MC_OK);
    CHECK(build_small("m2", 4) == MC_OK);
    CHECK(build_small("m3", 8) == MC_OK);
    mc_ds_builder *b;
    CHECK(mc_ds_builder_init(path("merged"), 4, &b) == MC_OK);
    int64_t x[] = {9, 9};
    CHECK(mc_ds_builder_add_item(b, x, 2) == MC_OK);
    CHECK(mc_ds_builder_end_document(b) == MC_OK);
    CHECK(mc_ds_builder_add_index(b, path("m1")) == MC_OK);
    CHECK(mc_ds_builder_add_index(b, path("m2")) == MC_OK);
    CHECK(mc_ds_builder_add_index(b, path("m3")) == MC_ERR_CONFIG); /* dtype differs */
    CHECK(strstr(mc_last_error(), "dtype") != NULL);
    CHECK(mc_ds_builder_add_index(b, path("missing")) == MC_ERR_IO);
    CHECK(mc_ds_builder_finalize(b) == MC_OK);
    mc_indexed_dataset *ds;
    CHECK(mc_ds_open(path("merged"), &ds) == MC_OK);
    if (!ds)
        return;
    CHECK(mc_ds_num_sequences(ds) == 7 && mc_ds_num_documents(ds) == 7);
    const int64_t *di = mc_ds_document_indices(ds);
    int64_t want_di[] = {0, 1, 2, 2, 4, 5, 5, 7};
    for (int i = 0; i < 8; i++)
        CHECK(di[i] == want_di[i]);
    const int64_t *p = mc_ds_sequence_pointers(ds);
    CHECK(p[6] == 4 * (2 + 3 + 1 + 2 + 3 + 1));
    int64_t out[2];
    CHECK(mc_ds_get(ds, 6, 0, 2, out) == MC_OK && out[0] == 5 && out[1] == 6);
    mc_ds_close(ds);
}

/* Writes a corrupted copy of small.idx (or .bin) and expects a format error naming `what`. */
static void expect_bad(const char *label, long off, const void *bytes, size_t nb, long new_size,
                       int in_bin, const char *what)
{
    long n;
    unsigned char *idx = slurp(path("small.idx"), &n), *bin;
    long nbin;
    bin = slurp(path("small.bin"), &nbin);
    unsigned char *t = in_bin ? bin : idx;
    long *tn = in_bin ? &nbin : &n;
    if (bytes)
        memcpy(t + off, bytes, nb);
    if (new_size >= 0)
        *tn = new_size;
    spit(path("bad.idx"), idx, n);
    spit(path("bad.bin"), bin, nbin);
    free(idx);
    free(bin);
    mc_indexed_dataset *ds = NULL;
    mc_status s = mc_ds_open(path("bad"), &ds);
    int ok = s == MC_ERR_FORMAT && ds == NULL && strstr(mc_last_error(), what) != NULL &&
             strstr(mc_last_error(), "bad.") != NULL;
    if (!ok)
        fprintf(stderr, "case %s: status %s, message: %s\n", label, mc_status_str(s),
                mc_last_error());
    CHECK(ok);
    mc_ds_close(ds);
}

static void test_corrupt(void)
{
    uint64_t big = 1000, two = 2, huge = UINT64_MAX / 2;
    int64_t neg = -5, past = 100, three = 3;
    int32_t negl = -1, longl = 50;
    unsigned char code9 = 9;
    expect_bad("magic", 0, "XMIDIDX", 7, -1, 0, "magic");
    expect_bad("version", 9, &two, 8, -1, 0, "version is 2");
    expect_bad("dtype", 17, &code9, 1, -1, 0, "dtype code is 9");
    expect_bad("count n", 18, &big, 8, -1, 0, "sequences=1000");
    expect_bad("count n huge", 18, &huge, 8, -1, 0, "truncated or corrupt");
    expect_bad("count d", 26, &two, 8, -1, 0, "file size");
    expect_bad("short header", 0, NULL, 0, 20, 0, "shorter than");
    expect_bad("truncated idx", 0, NULL, 0, 60, 0, "truncated");
    expect_bad("doc0", 34 + 36, &three, 8, -1, 0, "document_indices[0]");
    expect_bad("doc decreasing", 34 + 36 + 16, &neg, 8, -1, 0, "document_indices[2]");
    expect_bad("doc last", 34 + 36 + 24, &two, 8, -1, 0, "last document_indices");
    expect_bad("neg length", 34, &negl, 4, -1, 0, "sequence_lengths[0]");
    expect_bad("long length", 34 + 8, &longl, 4, -1, 0, "sequence 2");
    expect_bad("pointer past", 34 + 12 + 8, &past, 8, -1, 0, "sequence_pointers=100");
    expect_bad("neg pointer", 34 + 12, &neg, 8, -1, 0, "sequence_pointers=-5");
    expect_bad("truncated bin", 0, NULL, 0, 10, 1, "truncated .bin");
    expect_bad("empty bin", 0, NULL, 0, 0, 1, "truncated .bin");
    mc_indexed_dataset *ds = NULL;
    CHECK(mc_ds_open(path("does_not_exist"), &ds) == MC_ERR_IO && ds == NULL);
    CHECK(strstr(mc_last_error(), "does_not_exist.idx") != NULL);
    unlink(path("bad.bin"));
    long n;
    unsigned char *idx = slurp(path("small.idx"), &n);
    spit(path("bad.idx"), idx, n);
    free(idx);
    CHECK(mc_ds_open(path("bad"), &ds) == MC_ERR_IO && strstr(mc_last_error(), "bad.bin"));
}

static void test_empty_dataset(void)
{
    mc_ds_builder *b;
    CHECK(mc_ds_builder_init(path("empty"), 4, &b) == MC_OK);
    CHECK(mc_ds_builder_finalize(b) == MC_OK);
    CHECK(file_size(path("empty.idx")) == 34 + 8 && file_size(path("empty.bin")) == 0);
    mc_indexed_dataset *ds;
    CHECK(mc_ds_open(path("empty"), &ds) == MC_OK);
    if (ds) {
        CHECK(mc_ds_num_sequences(ds) == 0 && mc_ds_num_documents(ds) == 0);
        mc_ds_close(ds);
    }
}

/* float32/float64 .bin files (dtype codes 7, 6): a value that is no int64 (NaN, inf, 1e30) is
 * an error naming the .bin, not an undefined float-to-integer conversion (UBSan finding). */
static void test_float_tokens_out_of_range(void)
{
    const double bad[] = {NAN, INFINITY, -INFINITY, 1e30, -1e30, 9223372036854775808.0};
    for (int code = 6; code <= 7; code++) {
        const char *pre = code == 6 ? "f64" : "f32";
        CHECK(build_small(pre, code) == MC_OK);
        char bin[600];
        snprintf(bin, sizeof(bin), "%s.bin", path(pre));
        long n;
        unsigned char *b = slurp(bin, &n);
        for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
            if (code == 6) {
                memcpy(b + 8, &bad[k], 8); /* token 1 of sequence 0 */
            } else {
                float f = (float)bad[k];
                memcpy(b + 4, &f, 4);
            }
            spit(bin, b, n);
            mc_indexed_dataset *ds = NULL;
            CHECK(mc_ds_open(path(pre), &ds) == MC_OK);
            int64_t out[3] = {0};
            CHECK(mc_ds_get(ds, 1, 0, 1, out) == MC_OK); /* other sequences still read */
            CHECK(out[0] == 4);
            CHECK(mc_ds_get(ds, 0, 0, 3, out) == MC_ERR_FORMAT);
            CHECK(strstr(mc_last_error(), bin) && strstr(mc_last_error(), "token 1 of sequence 0"));
            mc_ds_close(ds);
        }
        /* the largest exact values still convert (truncation, as numpy's astype) */
        double big = code == 6 ? 9007199254740993.0 : 16777216.0, frac = 2.75;
        if (code == 6) {
            memcpy(b + 8, &big, 8);
            memcpy(b + 16, &frac, 8);
        } else {
            float f = (float)big, g = (float)frac;
            memcpy(b + 4, &f, 4);
            memcpy(b + 8, &g, 4);
        }
        spit(bin, b, n);
        free(b);
        mc_indexed_dataset *ds = NULL;
        CHECK(mc_ds_open(path(pre), &ds) == MC_OK);
        int64_t out[3] = {0};
        CHECK(mc_ds_get(ds, 0, 0, 3, out) == MC_OK);
        CHECK(out[0] == 1 && out[1] == (int64_t)big && out[2] == 2);
        mc_ds_close(ds);
    }
}

static void cleanup(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            unlink(path(e->d_name));
    closedir(d);
    rmdir(dir);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mc_test_idx_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    size_t live = mc_alloc_live_bytes();
    test_exact_bytes();
    test_roundtrip_all_dtypes();
    test_dtype_choice_and_range();
    test_merge();
    test_corrupt();
    test_empty_dataset();
    test_float_tokens_out_of_range();
    CHECK(mc_alloc_live_bytes() == live); /* nothing leaked, also on error paths */
    cleanup();
    return test_summary("test_indexed_dataset");
}
