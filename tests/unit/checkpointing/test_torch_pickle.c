/* src/checkpointing: torch.save in C, read back by our torch.load; then every truncation and
 * many single-byte corruptions of the file and of the pickle must give an error or a value,
 * never a crash (run under ASan/UBSan too). The torch 1.13 cross-checks live in
 * tests/checkpointing/test_torch_format.py. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpointing/torch_pickle.h"
#include "checkpointing/torch_zip.h"
#include "test.h"

static float w[6] = {1, 2, 3, 4, 5, 6};
static uint16_t h[2] = {0x3c00, 0x4000};

static struct mc_pk *sample(mc_pk_doc *d)
{
    struct mc_pk *root = mc_pk_new(d, MC_PK_DICT), *ns = mc_pk_new(d, MC_PK_NAMESPACE);
    struct mc_pk *s = mc_pk_storage(d, MC_DTYPE_F32, 6, w), *od = mc_pk_new(d, MC_PK_ODICT);
    int64_t shape[2] = {2, 3}, vs[1] = {2}, vst[1] = {3}, hs[1] = {2};
    mc_pk_set(d, od, "w", mc_pk_tensor(d, s, 0, 2, shape, NULL));
    mc_pk_set(d, od, "col", mc_pk_tensor(d, s, 1, 1, vs, vst));
    mc_pk_set(d, od, "h", mc_pk_tensor(d, mc_pk_storage(d, MC_DTYPE_F16, 2, h), 0, 1, hs, NULL));
    mc_pk_set(d, od, "x._extra_state", mc_pk_none(d));
    mc_pk_set(d, ns, "num_layers", mc_pk_int(d, 12));
    mc_pk_set(d, ns, "lr", mc_pk_float(d, 6e-4));
    mc_pk_set(d, ns, "dt", mc_pk_global(d, "torch", "float32"));
    mc_pk_set(d, ns, "be", mc_pk_enum_member(d, "megatron.core.transformer.enums", "AttnBackend", "auto"));
    mc_pk_set(d, ns, "big", mc_pk_int(d, -5000000000LL));
    mc_pk_set(d, root, "args", ns);
    mc_pk_set(d, root, "model", od);
    mc_pk_set(d, root, "bytes", mc_pk_bytes(d, "\x01\xfe", 2));
    return root;
}

static void check_roundtrip(const char *path)
{
    mc_pk_doc *d;
    struct mc_pk *v;
    CHECK(mc_pk_doc_init(&d) == MC_OK);
    CHECK(mc_torch_load(d, path, &v) == MC_OK);
    if (!v) {
        mc_pk_doc_free(d);
        return;
    }
    struct mc_pk *m = mc_pk_get(v, "model"), *ns = mc_pk_get(v, "args");
    struct mc_pk *wt = mc_pk_get(m, "w"), *col = mc_pk_get(m, "col"), *hh = mc_pk_get(m, "h");
    CHECK(v->kind == MC_PK_DICT && m && m->kind == MC_PK_ODICT && ns && ns->kind == MC_PK_NAMESPACE);
    CHECK(wt && wt->ndim == 2 && wt->shape[1] == 3 && ((const float *)wt->storage->data)[5] == 6.0f);
    CHECK(col && col->storage == wt->storage && col->offset == 1 && col->stride[0] == 3);
    CHECK(hh && hh->dtype == MC_DTYPE_F16 && ((const uint16_t *)hh->storage->data)[1] == 0x4000);
    CHECK(mc_pk_get(m, "x._extra_state") && mc_pk_get(m, "x._extra_state")->kind == MC_PK_NONE);
    CHECK(mc_pk_get(ns, "num_layers")->i == 12 && mc_pk_get(ns, "lr")->f == 6e-4);
    CHECK(mc_pk_get(ns, "big")->i == -5000000000LL);
    CHECK(!strcmp(mc_pk_get(ns, "dt")->s, "torch float32"));
    struct mc_pk *be = mc_pk_get(ns, "be");
    CHECK(be->kind == MC_PK_ENUM && be->b && !strcmp(be->items[0]->s, "auto"));
    struct mc_pk *b = mc_pk_get(v, "bytes");
    CHECK(b->kind == MC_PK_BYTES && b->len == 2 && (uint8_t)b->s[1] == 0xfe);
    mc_pk_doc_free(d);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n)
        *n = 0;
    fclose(f);
    return b;
}

static int try_load(const char *path)
{
    mc_pk_doc *d;
    struct mc_pk *v;
    mc_pk_doc_init(&d);
    int st = mc_torch_load(d, path, &v);
    mc_pk_doc_free(d);
    return st;
}

static void check_damage(const char *path, const char *bad)
{
    size_t n;
    unsigned char *raw = slurp(path, &n);
    int errors = 0, tries = 0;
    for (size_t cut = 0; cut < n; cut += (cut < 64 || n - cut < 64) ? 1 : 97) {
        FILE *f = fopen(bad, "wb");
        fwrite(raw, 1, cut, f);
        fclose(f);
        errors += try_load(bad) != MC_OK;
        tries++;
    }
    CHECK(errors == tries); /* every truncation is an error (the end record is gone) */
    srand(1234);
    for (int k = 0; k < 200; k++) { /* flipped bytes: error or a value, never a crash */
        unsigned char *c = malloc(n);
        memcpy(c, raw, n);
        c[(size_t)rand() % n] ^= (unsigned char)(1 + rand() % 255);
        FILE *f = fopen(bad, "wb");
        fwrite(c, 1, n, f);
        fclose(f);
        try_load(bad);
        free(c);
    }
    free(raw);
}

/* The pickle alone: every prefix and every single-byte change of data.pkl's stream. */
static mc_status no_storage(void *ctx, const char *key, enum mc_dtype t, int64_t numel, const void **data)
{
    (void)ctx; (void)key; (void)t;
    static const uint8_t zeros[64];
    *data = zeros;
    return numel <= 16 ? MC_OK : mc_error(MC_ERR_FORMAT, "storage too large");
}

static void check_pickle_fuzz(void)
{
    mc_pk_doc *d;
    uint8_t *buf;
    size_t n;
    struct mc_pk **st;
    int64_t nst;
    mc_pk_doc_init(&d);
    CHECK(mc_pk_dump(d, sample(d), &buf, &n, &st, &nst) == MC_OK);
    CHECK(nst == 2);
    uint8_t *c = malloc(n);
    int ok = 0;
    for (size_t cut = 0; cut <= n; cut++) {
        mc_pk_doc *e;
        struct mc_pk *v;
        mc_pk_doc_init(&e);
        ok += mc_pk_load(e, buf, cut, "prefix", no_storage, NULL, &v) == MC_OK;
        mc_pk_doc_free(e);
    }
    CHECK(ok == 1); /* only the whole stream loads */
    for (size_t i = 0; i < n; i++)
        for (int x = 1; x < 256; x += 85) {
            memcpy(c, buf, n);
            c[i] ^= (uint8_t)x;
            mc_pk_doc *e;
            struct mc_pk *v;
            mc_pk_doc_init(&e);
            mc_pk_load(e, c, n, "fuzz", no_storage, NULL, &v);
            mc_pk_doc_free(e);
        }
    free(c);
    mc_pk_doc_free(d);
}

/* A memo index no pickler writes (past the stream's length) is refused, not used to size the
 * memo table (a 12-byte pickle once asked for 16 MiB here, 16 GiB with a larger index). */
static void check_memo_index(void)
{
    static const uint8_t far[] = {0x80, 4, 'N', 'r', 0, 0, 0x10, 0, '.'};
    static const uint8_t near[] = {0x80, 4, 'N', 'r', 3, 0, 0, 0, '.'};
    mc_pk_doc *e;
    struct mc_pk *v;
    mc_pk_doc_init(&e);
    CHECK(mc_pk_load(e, far, sizeof(far), "far", no_storage, NULL, &v) == MC_ERR_FORMAT);
    CHECK(strstr(mc_last_error(), "memo index out of range") != NULL);
    CHECK(mc_pk_load(e, near, sizeof(near), "near", no_storage, NULL, &v) == MC_OK);
    CHECK(v && v->kind == MC_PK_NONE);
    mc_pk_doc_free(e);
}

int main(void)
{
    char path[200], bad[256];
    /* many small files are written: use memory-backed /dev/shm where there is one */
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof(path), "%s/mc_test_torch_pickle_%d.pt", dir, (int)getpid());
    snprintf(bad, sizeof(bad), "%s.bad", path);
    mc_pk_doc *d;
    CHECK(mc_pk_doc_init(&d) == MC_OK);
    CHECK(mc_torch_save(d, sample(d), path) == MC_OK);
    mc_pk_doc_free(d);
    check_roundtrip(path);
    check_damage(path, bad);
    check_pickle_fuzz();
    check_memo_index();
    CHECK(try_load("/nonexistent/x.pt") == MC_ERR_IO);
    remove(path);
    remove(bad);
    return test_summary("test_torch_pickle");
}
