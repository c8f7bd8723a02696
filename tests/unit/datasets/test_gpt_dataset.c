/* GPT dataset building blocks against independent references: MD5 (RFC 1321 vectors), Python
 * float repr and json.dumps(indent=4) (the spec's fixture description and its MD5), .npy bytes
 * (live numpy), numpy's PCG64/SeedSequence (spec known answers), the split matrix and ranges,
 * blend lists, build_sample_idx on hand-checked cases (drop_last both ways), the blending
 * indices, and the error paths (bad seed, bad split, empty split, missing files). */
#include "core/md5.h"
#include "core/pyformat.h"
#include "datasets/description.h"
#include "megatron/gpt_dataset.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_md5(void)
{
    char h[33];
    mc_md5_hex("", 0, h);
    CHECK(!strcmp(h, "d41d8cd98f00b204e9800998ecf8427e"));
    mc_md5_hex("abc", 3, h);
    CHECK(!strcmp(h, "900150983cd24fb0d6963f7d28e17f72"));
    const char *s = "12345678901234567890123456789012345678901234567890123456789012345678901234567890";
    mc_md5_hex(s, strlen(s), h);
    CHECK(!strcmp(h, "57edf4a22be3c955ac49da2e2107b67a"));
    mc_md5_hex("message digest", 14, h);
    CHECK(!strcmp(h, "f96b697d7cb7938d525a2f31aaf161d0"));
}

static void test_repr(void)
{
    static const struct { double x; const char *want; } cases[] = {
        {0.969, "0.969"}, {0.1 + 0.2, "0.30000000000000004"}, {1.0, "1.0"}, {1.0 / 3, "0.3333333333333333"},
        {1e-5, "1e-05"}, {1e16, "1e+16"}, {1.2345678901234568e+17, "1.2345678901234568e+17"},
        {0.0001, "0.0001"}, {123456789012345.0, "123456789012345.0"}, {1e15, "1000000000000000.0"},
        {2.5e-7, "2.5e-07"}, {0.999, "0.999"}, {100.0, "100.0"}, {-0.5, "-0.5"}, {1e300, "1e+300"},
    };
    char buf[40];
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        mc_py_float_repr(buf, sizeof(buf), cases[i].x);
        if (strcmp(buf, cases[i].want))
            fprintf(stderr, "repr(%.17g) = %s, want %s\n", cases[i].x, buf, cases[i].want);
        CHECK(!strcmp(buf, cases[i].want));
    }
}

/* The spec's fixture description (megatron-data.md 4.8), whose MD5 Megatron computed. */
static void test_description(void)
{
    struct mc_gpt_dataset_config c = {0};
    const char *pre[1] = {"preprocess/b_eod_text_document"};
    struct mc_blend b = {1, pre, NULL};
    c.random_seed = 1234;
    c.sequence_length = 16;
    c.split = "969,30,1";
    c.blend = &b;
    char vb[32];
    CHECK(mc_gpt_tokenizer_desc_from_args(&c.tokenizer, "GPT2BPETokenizer", "vocab.json",
                                          "merges.txt", NULL, 0, vb) == MC_OK);
    CHECK(mc_gpt_dataset_config_finalize(&c) == MC_OK);
    CHECK(c.split_present[0] && c.split_present[1] && c.split_present[2]);
    CHECK(c.split_hi[0] == 0.969 && c.split_hi[1] == 0.999 && c.split_hi[2] == 1.0);
    int64_t beg, end;
    mc_gpt_split_range(&c, 0, 692, &beg, &end);
    CHECK(beg == 0 && end == 671);
    mc_gpt_split_range(&c, 1, 692, &beg, &end);
    CHECK(beg == 671 && end == 691);
    mc_gpt_split_range(&c, 2, 500, &beg, &end); /* round(499.5) = 500: half to even */
    CHECK(beg == 500 && end == 500);

    /* an unbuildable low-level dataset with the fixture's name: the description comes first,
     * then the (tiny) build fails on its empty split; check the text through a 2-token split */
    int32_t lens[2] = {3, 4};
    struct mc_gpt_lowlevel ll = {2, lens, "preprocess/b_eod_text_document", NULL, NULL, NULL, NULL};
    c.path_to_cache = NULL;
    mc_gpt_dataset *d = NULL;
    /* num_samples 160 over 7 tokens needs many epochs; no cache dir is written because we
     * point the cache to a scratch directory */
    char dir[] = "/tmp/mc_gptds_unitXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    c.path_to_cache = dir;
    mc_status st = mc_gpt_dataset_init(&c, &ll, 0, 2, 160, MC_SPLIT_TRAIN, &d);
    CHECK(st == MC_OK);
    if (d) {
        CHECK(!strcmp(mc_gpt_dataset_hash(d), "b745cd9038321994c7457f3d88cc8d82"));
        const char *want_head = "{\n    \"class\": \"GPTDataset\",\n    \"dataset_path\": "
                                "\"preprocess/b_eod_text_document\",\n    \"num_samples\": 160,\n";
        CHECK(!strncmp(mc_gpt_dataset_description(d), want_head, strlen(want_head)));
        CHECK(mc_gpt_dataset_built_anew(d));
        mc_gpt_dataset_free(d);
    }
    /* second time: a cache hit, same indices */
    st = mc_gpt_dataset_init(&c, &ll, 0, 2, 160, MC_SPLIT_TRAIN, &d);
    CHECK(st == MC_OK && d && !mc_gpt_dataset_built_anew(d));
    int64_t n_samples = d ? mc_gpt_dataset_len(d) : 0;
    mc_gpt_dataset_free(d);
    /* a corrupted cache (a shuffle index pointing past the samples) is an error, not a crash */
    char f[256];
    snprintf(f, sizeof(f), "%s/b745cd9038321994c7457f3d88cc8d82-GPTDataset-train-shuffle_index.npy", dir);
    uint32_t *bad = calloc((size_t)n_samples, sizeof(uint32_t));
    bad[0] = (uint32_t)n_samples;
    int64_t shp[1] = {n_samples};
    CHECK(mc_npy_save(f, "<u4", 1, shp, bad) == MC_OK);
    st = mc_gpt_dataset_init(&c, &ll, 0, 2, 160, MC_SPLIT_TRAIN, &d);
    CHECK(st == MC_ERR_FORMAT && d == NULL && strstr(mc_last_error(), "shuffle_index[0]"));
    CHECK(mc_npy_save(f, "<i2", 1, shp, bad) == MC_OK); /* wrong dtype */
    st = mc_gpt_dataset_init(&c, &ll, 0, 2, 160, MC_SPLIT_TRAIN, &d);
    CHECK(st == MC_ERR_FORMAT && d == NULL);
    free(bad);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);

    /* empty split: an error naming the split, not a hang */
    c.path_to_cache = NULL;
    st = mc_gpt_dataset_init(&c, &ll, 1, 1, 10, MC_SPLIT_TEST, &d);
    CHECK(st == MC_ERR_CONFIG && d == NULL);
    CHECK(strstr(mc_last_error(), "test split") != NULL);

    /* json escaping: quotes, backslash, control, non-ASCII (BMP and astral) */
    struct mc_desc *o = mc_desc_obj();
    CHECK(mc_desc_add(o, "k", mc_desc_str("a\"b\\c\n\x01\x7f\xc3\xa9\xf0\x9f\x98\x80")) == MC_OK);
    struct mc_desc *l = mc_desc_list();
    CHECK(mc_desc_add(o, "e", l) == MC_OK);
    char *txt;
    CHECK(mc_desc_dump(o, &txt) == MC_OK);
    CHECK(!strcmp(txt, "{\n    \"k\": \"a\\\"b\\\\c\\n\\u0001\\u007f\\u00e9\\ud83d\\ude00\",\n    \"e\": []\n}"));
    mc_free(txt);
    mc_desc_free(o);
}

static void test_split_errors(void)
{
    const char *pre[1] = {"x"};
    struct mc_blend b = {1, pre, NULL};
    struct mc_gpt_dataset_config c = {0};
    c.blend = &b;
    c.split = "1,2,3,4";
    CHECK(mc_gpt_dataset_config_finalize(&c) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "more than 3") != NULL);
    c.split = "0,0,0";
    CHECK(mc_gpt_dataset_config_finalize(&c) == MC_ERR_CONFIG);
    c.split = "1.2.3";
    CHECK(mc_gpt_dataset_config_finalize(&c) == MC_ERR_CONFIG);
    c.split = NULL;
    CHECK(mc_gpt_dataset_config_finalize(&c) == MC_ERR_CONFIG);
    c.split = "0,1,0"; /* the integer 0 appears only as a present first bound */
    CHECK(mc_gpt_dataset_config_finalize(&c) == MC_OK);
    CHECK(!c.split_present[0] && c.split_present[1] && !c.split_present[2]);
    c.blend = NULL;
    c.split = "99,1,0";
    CHECK(mc_gpt_dataset_config_finalize(&c) == MC_OK && c.mock && !strcmp(c.split, "1,1,1"));
    CHECK(c.split_hi[0] == 1.0 / 3 && c.split_hi[1] == 2.0 / 3);
    c.split = NULL;
    mc_gpt_split_range(&c, 1, 100000, &(int64_t){0}, &(int64_t){0});
    int64_t bg, en;
    mc_gpt_split_range(&c, 1, 100000, &bg, &en);
    CHECK(bg == 33333 && en == 66667);

    struct mc_gpt_lowlevel *ll;
    CHECK(mc_gpt_lowlevel_open("/nonexistent/prefix", &ll) == MC_ERR_IO);
    CHECK(strstr(mc_last_error(), "/nonexistent/prefix.idx") != NULL);
}

static void test_blend_list(void)
{
    const char *t1[] = {"0.3", " a ", "0.7", "b"};
    struct mc_blend b;
    CHECK(mc_blend_from_list(t1, 4, &b) == MC_OK);
    CHECK(b.n == 2 && b.weights && b.weights[0] == 0.3 && !strcmp(b.prefixes[0], "a"));
    mc_blend_free(&b);
    const char *t2[] = {"a", "b"};
    CHECK(mc_blend_from_list(t2, 2, &b) == MC_OK);
    CHECK(b.n == 2 && !b.weights && !strcmp(b.prefixes[1], "b"));
    mc_blend_free(&b);
    const char *t3[] = {"1e-3", "a", "inf", "b"};
    CHECK(mc_blend_from_list(t3, 4, &b) == MC_OK && b.weights && b.weights[0] == 1e-3);
    mc_blend_free(&b);
    const char *t4[] = {"x", "a", "b"};
    CHECK(mc_blend_from_list(t4, 3, &b) == MC_OK && b.n == 3 && !b.weights);
    mc_blend_free(&b);
    double w[3] = {0.3, 0.5, 0.2};
    mc_blend_normalize(w, 3);
    CHECK(w[0] == 0.3 / (0.3 + 0.5 + 0.2));
    int64_t s[3];
    mc_gpt_train_valid_test_num_samples(20, 0, 8, 10, 2, s);
    CHECK(s[0] == 160 && s[1] == 48 && s[2] == 16);
    mc_gpt_train_valid_test_num_samples(100, 0, 10, 50, 1, s);
    CHECK(s[0] == 1000 && s[1] == 30 && s[2] == 10);
}

static void test_pcg64(void)
{
    int32_t v[8], want[8] = {3484, 2609, 2094, 1105, 1261, 168, 309, 68};
    mc_np_pcg64_integers_i32(0, 1, 4096, v, 8);
    CHECK(!memcmp(v, want, sizeof(v)));
    struct mc_gpt_lowlevel *ll;
    CHECK(mc_gpt_lowlevel_mock(50256, &ll) == MC_OK);
    CHECK(ll->n_sequences == 100000 && ll->sequence_lengths[0] == 3484);
    int64_t t[4];
    CHECK(ll->get(ll->ctx, 5, 165, 3, t) == MC_OK); /* document 5 has 168 tokens */
    CHECK(t[0] == 166 && t[1] == 167 && t[2] == 50256);
    CHECK(ll->get(ll->ctx, 5, 166, 3, t) == MC_ERR_CONFIG);
    mc_gpt_lowlevel_free(ll);
}

static void test_sample_idx(void)
{
    /* documents of 5, 3, 7 tokens in that order; seq 4 with the shared extra token */
    int32_t sizes[3] = {5, 3, 7}, doc[3] = {0, 1, 2};
    int64_t p[2 * 8];
    CHECK(mc_gpt_num_samples(1, 15, 4, true, 1) == 3);
    CHECK(mc_gpt_build_sample_idx(p, sizes, doc, 3, 4, 1, 15, true, 1) == MC_OK);
    int64_t want[8] = {0, 0, 0, 4, 2, 0, 2, 4};
    CHECK(!memcmp(p, want, sizeof(want)));
    /* without drop_last: ceil(14 / 4) = 4 samples, the last one ends at the final document */
    CHECK(mc_gpt_num_samples(1, 15, 4, false, 1) == 4);
    CHECK(mc_gpt_build_sample_idx(p, sizes, doc, 3, 4, 1, 15, false, 1) == MC_OK);
    CHECK(p[8] == 2 && p[9] == 6);
    /* without the extra token (x = 0): samples do not overlap */
    CHECK(mc_gpt_build_sample_idx(p, sizes, doc, 3, 4, 1, 15, true, 0) == MC_OK);
    int64_t want0[8] = {0, 0, 0, 4, 1, 3, 2, 4};
    CHECK(!memcmp(p, want0, sizeof(want0)));
    /* binary32 ceil: 2^24 + 1 tokens over seq 2 rounds through float */
    CHECK(mc_gpt_num_samples(1, (1 << 24) + 2, 2, false, 1) == (1 << 23));
    CHECK(mc_gpt_build_sample_idx(p, sizes, doc, 3, 1, 1, 15, true, 1) == MC_ERR_CONFIG);
}

static void test_blending(void)
{
    int16_t di[10];
    int64_t si[10];
    double w[2] = {0.75, 0.25};
    CHECK(mc_blend_build_indices(di, si, w, 2, 8) == MC_OK);
    /* errors: k=0,1 -> w*1 - count; ties to the lowest index */
    int16_t want[8] = {0, 1, 0, 0, 0, 1, 0, 0};
    CHECK(!memcmp(di, want, sizeof(want)));
    CHECK(si[7] == 5 && si[5] == 1);
    int64_t sz[3] = {2, 1, 3};
    CHECK(mc_blend_build_exhaustive_indices(di, si, sz, 3) == MC_OK);
    int cnt[3] = {0, 0, 0};
    for (int k = 0; k < 6; k++)
        CHECK(si[k] == cnt[di[k]]++);
    CHECK(cnt[0] == 2 && cnt[1] == 1 && cnt[2] == 3);
    double x[300];
    for (int i = 0; i < 300; i++)
        x[i] = 1.0 / (i + 1);
    double s = 0;
    for (int i = 0; i < 300; i++)
        s += x[i];
    CHECK(fabs(mc_np_sum(x, 300) - s) < 1e-12);
}

/* .npy bytes against numpy.save run live. */
static void test_npy(void)
{
    char dir[] = "/tmp/mc_gptds_npyXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p1[128], p2[128], p3[128], cmd[1024];
    snprintf(p1, sizeof(p1), "%s/a.npy", dir);
    snprintf(p2, sizeof(p2), "%s/b.npy", dir);
    snprintf(p3, sizeof(p3), "%s/c.npy", dir);
    int32_t a[671];
    for (int i = 0; i < 671; i++) a[i] = i * 7 - 3;
    int64_t sh1[1] = {671}, sh2[2] = {3, 2}, sh3[1] = {123456};
    int64_t b[6] = {0, 0, 1, 5, -2, 1LL << 40};
    CHECK(mc_npy_save(p1, "<i4", 1, sh1, a) == MC_OK);
    CHECK(mc_npy_save(p2, "<i8", 2, sh2, b) == MC_OK);
    uint32_t *c = malloc(4 * 123456);
    for (int i = 0; i < 123456; i++) c[i] = (uint32_t)i * 2654435761U;
    CHECK(mc_npy_save(p3, "<u4", 1, sh3, c) == MC_OK);
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 -c \"\n"
             "import numpy as np, io, sys\n"
             "def same(path, arr):\n"
             "    f = io.BytesIO(); np.save(f, arr); return open(path,'rb').read() == f.getvalue()\n"
             "ok = same('%s', np.arange(671, dtype=np.int32) * 7 - 3)\n"
             "ok &= same('%s', np.array([[0,0],[1,5],[-2,1<<40]], dtype=np.int64))\n"
             "ok &= same('%s', (np.arange(123456, dtype=np.uint64) * 2654435761 %% 2**32).astype(np.uint32))\n"
             "sys.exit(0 if ok else 1)\"",
             p1, p2, p3);
    CHECK(system(cmd) == 0);
    struct mc_npy r;
    CHECK(mc_npy_load(p2, &r) == MC_OK);
    CHECK(r.ndim == 2 && r.shape[0] == 3 && r.shape[1] == 2 && !strcmp(r.descr, "<i8"));
    CHECK(!memcmp(r.data, b, sizeof(b)));
    mc_npy_free(&r);
    FILE *f = fopen(p1, "wb");
    fputs("garbage", f);
    fclose(f);
    CHECK(mc_npy_load(p1, &r) == MC_ERR_FORMAT);
    free(c);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    mc_log_set_level(MC_LOG_WARN);
    size_t live = mc_alloc_live_bytes();
    test_md5();
    test_repr();
    test_description();
    test_split_errors();
    test_blend_list();
    test_pcg64();
    test_sample_idx();
    test_blending();
    test_npy();
    CHECK(mc_alloc_live_bytes() == live);
    return test_summary("test_gpt_dataset");
}
