/* Unit tests of src/checkpointing/safetensors.c and the converter library (convert*.c):
 * IEEE half/bfloat16 rounding (every 16-bit pattern round-trips, ties go to even, overflow to
 * infinity), safetensors write -> read and its refusal of broken files, and in-process round
 * trips of a hand-made Llama-like model (GQA, SwiGLU, untied) through Megatron checkpoints at
 * tp2 x pp2 (local, transformer_engine and legacy names) and through a HuggingFace directory:
 * every tensor comes back bit-exact; a bfloat16 release checkpoint stays bfloat16 (same bits) and
 * a release checkpoint. Runs under ASan/UBSan with the other C tests. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/checkpoint/convert.h"
#include "tools/checkpoint/convert_args.h"
#include "checkpointing/safetensors.h"
#include "test.h"

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_half_rounding(void)
{
    CHECK(mc_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(mc_f32_to_bf16(f32_of(0x3f808000u)) == 0x3f80); /* halfway, even stays */
    CHECK(mc_f32_to_bf16(f32_of(0x3f818000u)) == 0x3f82); /* halfway, odd rounds up */
    CHECK(mc_f32_to_bf16(f32_of(0x3f808001u)) == 0x3f81);
    CHECK(mc_f32_to_f16(1.0f) == 0x3c00);
    CHECK(mc_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(mc_f32_to_f16(65520.0f) == 0x7c00);          /* rounds to infinity */
    CHECK(mc_f32_to_f16(-65519.0f) == 0xfbff);
    CHECK(mc_f32_to_f16(ldexpf(1, -24)) == 0x0001);
    CHECK(mc_f32_to_f16(ldexpf(1, -25)) == 0x0000);    /* tie to even (zero) */
    CHECK(mc_f32_to_f16(ldexpf(3, -25)) == 0x0002);    /* tie to even (2) */
    CHECK(mc_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3c00);
    CHECK(mc_f32_to_f16(1.0f + ldexpf(3, -11)) == 0x3c02);
    int bad_h = 0, bad_b = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t h = (uint16_t)u;
        bool nan_h = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        bool nan_b = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (!nan_h && mc_f32_to_f16(mc_f16_to_f32(h)) != h)
            bad_h++;
        if (!nan_b && mc_f32_to_bf16(mc_bf16_to_f32(h)) != h)
            bad_b++;
    }
    CHECK(bad_h == 0);
    CHECK(bad_b == 0);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    MC_ASSERT(f);
    fwrite(p, 1, n, f);
    fclose(f);
}

static void test_safetensors(const char *dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/a.safetensors", dir);
    float w[6] = {1, -2, 3.5f, 0.1f, 1e-3f, -7}, b[3] = {0.5f, 0.25f, -1};
    struct mc_st_item items[2] = {{.name = "w", .ndim = 2, .shape = {2, 3}, .data = w},
                                  {.name = "b\"q", .ndim = 1, .shape = {3}, .data = b}};
    for (int dt = 0; dt < 3; dt++) {
        enum mc_dtype t = dt == 0 ? MC_DTYPE_F32 : dt == 1 ? MC_DTYPE_BF16 : MC_DTYPE_F16;
        CHECK(mc_st_write(path, items, 2, t) == MC_OK);
        struct mc_st_file f;
        CHECK(mc_st_open(&f, path) == MC_OK);
        CHECK(f.n == 2);
        const struct mc_st_tensor *tw = mc_st_find(&f, "w"), *tb = mc_st_find(&f, "b\"q");
        CHECK(tw && tb && tw->dtype == t && tw->ndim == 2 && tw->shape[1] == 3 && tb->numel == 3);
        uint64_t hlen = 0;
        memcpy(&hlen, f.map, 8);
        CHECK(hlen % 8 == 0);
        float got[6];
        if (tw) {
            mc_st_to_f32(tw, got);
            for (int i = 0; i < 6; i++) {
                float want = t == MC_DTYPE_F32 ? w[i] : t == MC_DTYPE_BF16 ? mc_bf16_to_f32(mc_f32_to_bf16(w[i]))
                                                                     : mc_f16_to_f32(mc_f32_to_f16(w[i]));
                CHECK(got[i] == want);
            }
        }
        mc_st_close(&f);
    }
    CHECK(mc_st_write(path, items, 2, MC_DTYPE_I32) == MC_ERR_UNSUPPORTED);
    /* broken files: each refused with MC_ERR_FORMAT / UNSUPPORTED, never a crash */
    static const char *const headers[] = {
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}",   /* past the end */
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",    /* size mismatch */
        "{\"x\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}",     /* unknown dtype */
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",   /* negative dim */
        "[1, 2]",                                                            /* not an object */
        "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",     /* bad JSON */
    };
    for (size_t k = 0; k < sizeof(headers) / sizeof(*headers); k++) {
        uint8_t buf[256] = {0};
        size_t n = strlen(headers[k]);
        buf[0] = (uint8_t)n;
        memcpy(buf + 8, headers[k], n);
        write_bytes(path, buf, 8 + n + 8);
        struct mc_st_file f;
        mc_status st = mc_st_open(&f, path);
        CHECK(st == MC_ERR_FORMAT || st == MC_ERR_UNSUPPORTED);
        mc_st_close(&f);
    }
    /* hostile headers with the message they must give (issue 15): a shape whose element count
     * overflows int64 (UBSan: signed overflow), overlapping data_offsets (named both), and
     * what must still pass: a zero dimension beside huge ones, tensors that touch */
    static const struct { const char *h; mc_status want; const char *needle; } cases[] = {
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,1099511627776],"
         "\"data_offsets\":[0,8]}}", MC_ERR_FORMAT, "more elements of F32 than"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776,0],"
         "\"data_offsets\":[0,0]}}", MC_OK, NULL},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", MC_ERR_FORMAT,
         "tensors 'a' (data_offsets [4, 12]) and 'c' ([8, 12]) overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]}}", MC_OK, NULL},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
        uint8_t buf[512] = {0};
        size_t n = strlen(cases[k].h);
        buf[0] = (uint8_t)n;
        memcpy(buf + 8, cases[k].h, n);
        write_bytes(path, buf, 8 + n + 16);
        struct mc_st_file f;
        mc_status st = mc_st_open(&f, path);
        CHECK(st == cases[k].want);
        CHECK(!cases[k].needle || strstr(mc_last_error(), cases[k].needle));
        if (st != cases[k].want)
            fprintf(stderr, "case %zu: %s\n", k, mc_last_error());
        mc_st_close(&f);
    }
    uint8_t big[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    write_bytes(path, big, 8);
    struct mc_st_file f;
    CHECK(mc_st_open(&f, path) == MC_ERR_FORMAT); /* header length past the end */
    mc_st_close(&f);
}

/* A Llama-like model: 4 layers, hidden 16, 4 heads / 2 groups, ffn 24 (SwiGLU), vocab 300. */
static void make_model(struct mc_cv_model *m)
{
    mc_cv_model_init(m);
    struct mc_cv_meta *md = &m->md;
    md->num_layers = 4, md->hidden_size = 16, md->num_attention_heads = 4, md->num_query_groups = 2;
    md->kv_channels = 4, md->ffn_hidden_size = 24, md->seq_length = 8, md->max_position_embeddings = 8;
    strcpy(md->position_embedding_type, "rope");
    strcpy(md->normalization, "RMSNorm");
    strcpy(md->tokenizer_type, "HuggingFaceTokenizer");
    md->swiglu = true, md->untied = true, md->iteration = 5, md->true_vocab_size = 300;
    int64_t h = 16, qkv = (4 + 2 * 2) * 4;
    struct { const char *name; int64_t d0, d1; } shapes[] = {
        {"input norm weight", h, 1}, {"qkv weight", qkv, h}, {"dense weight", h, 16},
        {"post norm weight", h, 1}, {"mlp l0 weight", 48, h}, {"mlp l1 weight", h, 24}};
    struct mc_cv_tensor *t;
    uint32_t seed = 12345;
    MC_ASSERT(!mc_cv_add(m, &t, MC_DTYPE_F32, 2, 384, h, "word embeddings"));
    for (int64_t l = 0; l < 4; l++)
        for (int k = 0; k < 6; k++)
            MC_ASSERT(!mc_cv_add(m, &t, MC_DTYPE_F32, shapes[k].d1 > 1 ? 2 : 1, shapes[k].d0, shapes[k].d1,
                                 "layer %lld %s", (long long)l, shapes[k].name));
    MC_ASSERT(!mc_cv_add(m, &t, MC_DTYPE_F32, 1, h, 1, "final norm weight"));
    MC_ASSERT(!mc_cv_add(m, &t, MC_DTYPE_F32, 2, 384, h, "output layer weight"));
    /* source args as the llama_mistral loader would make them */
    MC_ASSERT(!mc_pk_doc_init(&md->doc));
    MC_ASSERT(!mc_cv_hf_source_args(md->doc, md, "hand-made", 384, &md->checkpoint_args));
    for (int64_t i = 0; i < m->n; i++) {
        float *f = (float *)m->t[i].data;
        for (int64_t j = 0; j < m->t[i].shape[0] * m->t[i].shape[1]; j++) {
            seed = seed * 1664525u + 1013904223u;
            f[j] = (float)(seed >> 8) / 16777216.0f - 0.5f;
        }
    }
}

/* The same model with every tensor rounded to bfloat16, loaded from a release checkpoint. */
static void to_bf16(struct mc_cv_model *m)
{
    for (int64_t i = 0; i < m->n; i++) {
        struct mc_cv_tensor *t = &m->t[i];
        int64_t n = t->shape[0] * t->shape[1];
        uint16_t *h = (uint16_t *)t->data; /* in place: element i is read before it is overwritten */
        for (int64_t j = 0; j < n; j++)
            h[j] = mc_f32_to_bf16(((const float *)t->data)[j]);
        t->dtype = MC_DTYPE_BF16;
    }
    m->md.params_dtype = MC_DTYPE_BF16;
    m->md.release = true;
    MC_ASSERT(!mc_cv_hf_source_args(m->md.doc, &m->md, "hand-made", 384, &m->md.checkpoint_args));
}

static void same_models(const struct mc_cv_model *a, const struct mc_cv_model *b, int64_t vocab_rows)
{
    CHECK(a->n == b->n);
    for (int64_t i = 0; i < a->n; i++) {
        const struct mc_cv_tensor *x = &a->t[i], *y = mc_cv_get(b, "%s", x->name);
        CHECK(y != NULL);
        if (!y)
            continue;
        bool vocab = strstr(x->name, "embeddings") || strstr(x->name, "output layer");
        int64_t rows = vocab ? vocab_rows : x->shape[0];
        CHECK(y->shape[1] == x->shape[1] && y->shape[0] >= rows);
        CHECK(y->dtype == x->dtype);
        if (y->shape[1] == x->shape[1] && y->shape[0] >= rows && y->dtype == x->dtype)
            CHECK(!memcmp(x->data, y->data, (size_t)(rows * x->shape[1]) * mc_dtype_size(x->dtype)));
    }
}

static void test_roundtrips(const char *dir)
{
    struct mc_cv_model m, back;
    make_model(&m);
    CHECK(mc_cv_check(&m, "hand-made") == MC_OK);
    static const char *const impls[] = {"local", "transformer_engine", NULL};
    for (int k = 0; k < 3; k++) {
        char save[512];
        snprintf(save, sizeof(save), "%s/mc%d", dir, k);
        struct mc_cv_options o = {.load_dir = save, .save_dir = save, .target_tp = 2, .target_pp = 2,
                                  .true_vocab_size = -1, .make_vocab_size_divisible_by = -1,
                                  .saver_impl = impls[k], .legacy_saver = k == 2, .checking = true};
        mc_status st = mc_cv_save_megatron(&m, &o);
        CHECK(st == MC_OK);
        if (st)
            fprintf(stderr, "%s\n", mc_last_error());
        mc_cv_model_init(&back);
        st = mc_cv_load_megatron(&back, &o);
        CHECK(st == MC_OK);
        if (st)
            fprintf(stderr, "%s\n", mc_last_error());
        CHECK(back.md.previous_tp == 2 && back.md.previous_pp == 2 && back.md.iteration == 5);
        CHECK(back.md.num_query_groups == 2 && back.md.swiglu && back.md.untied);
        /* padded for tp 2: 300 -> 512 rows, the first 300 (and the loaded 384) unchanged */
        const struct mc_cv_tensor *w = mc_cv_get(&back, "word embeddings");
        CHECK(w && w->shape[0] == 512);
        same_models(&m, &back, 384);
        mc_cv_model_free(&back);
    }
    /* bfloat16, release */
    char save[512];
    struct mc_cv_model b16;
    make_model(&b16);
    to_bf16(&b16);
    snprintf(save, sizeof(save), "%s/bf16", dir);
    struct mc_cv_options ob = {.load_dir = save, .save_dir = save, .target_tp = 2, .target_pp = 2,
                               .true_vocab_size = -1, .saver_impl = "local"};
    CHECK(mc_cv_save_megatron(&b16, &ob) == MC_OK);
    char rel[600];
    snprintf(rel, sizeof(rel), "%s/release/mp_rank_01_001/model_optim_rng.pt", save);
    CHECK(access(rel, R_OK) == 0);
    mc_cv_model_init(&back);
    CHECK(mc_cv_load_megatron(&back, &ob) == MC_OK);
    CHECK(back.md.release && back.md.params_dtype == MC_DTYPE_BF16); /* --bf16 in the args */
    same_models(&b16, &back, 384);
    mc_cv_model_free(&back);
    mc_cv_model_free(&b16);
    /* a target TP that does not divide the query groups: refused, nothing written */
    snprintf(save, sizeof(save), "%s/tp4", dir);
    struct mc_cv_options o = {.load_dir = save, .save_dir = save, .target_tp = 4, .target_pp = 1,
                              .true_vocab_size = -1, .saver_impl = "local"};
    CHECK(mc_cv_save_megatron(&m, &o) == MC_ERR_CONFIG);
    CHECK(access(save, F_OK) != 0);
    /* HuggingFace: export (vocab cut to 300), import, same tensors */
    snprintf(save, sizeof(save), "%s/hf", dir);
    struct mc_cv_options h = {.load_dir = save, .save_dir = save, .true_vocab_size = -1,
                              .make_vocab_size_divisible_by = -1};
    CHECK(mc_cv_save_hf(&m, &h) == MC_OK);
    mc_cv_model_init(&back);
    mc_status st = mc_cv_load_hf(&back, &h);
    CHECK(st == MC_OK);
    if (st)
        fprintf(stderr, "%s\n", mc_last_error());
    const struct mc_cv_tensor *w = mc_cv_get(&back, "word embeddings");
    CHECK(w && w->shape[0] == 300 && back.md.true_vocab_size == 300);
    same_models(&m, &back, 300);
    mc_cv_model_free(&back);
    mc_cv_model_free(&m);
}

int main(void)
{
    char dir[] = "/tmp/mc_test_convert_XXXXXX";
    MC_ASSERT(mkdtemp(dir));
    test_half_rounding();
    test_safetensors(dir);
    test_roundtrips(dir);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd))
        fprintf(stderr, "could not remove %s\n", dir);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_convert");
}
