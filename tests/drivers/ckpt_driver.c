/* Test helper for src/checkpointing: `ckpt_driver dump FILE` prints what our torch.load reader
 * sees as JSON (tensors with their values); `ckpt_driver write FILE` torch.saves a fixed set of
 * values (`write64`: with zip64 records everywhere; every storage dtype, a view sharing a storage, Namespace, OrderedDict, enums, ...)
 * for tests/checkpointing/test_torch_format.py to check with torch.load. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpointing/torch_pickle.h"
#include "core/dtype.h"

static double elem(const struct mc_pk *s, int64_t i) { return mc_dtype_get_f64(s->data, s->dtype, i); }

static void pfloat(double f)
{
    char b[40];
    if (isnan(f) || isinf(f)) { /* spelled as Python's json module reads them */
        printf("%s", isnan(f) ? "NaN" : f > 0 ? "Infinity" : "-Infinity");
        return;
    }
    snprintf(b, sizeof(b), "%.17g", f);
    if (!strpbrk(b, ".en"))
        strcat(b, ".0");
    printf("%s", b);
}

static void ints(int n, const int64_t *x)
{
    printf("[");
    for (int k = 0; k < n; k++)
        printf("%s%lld", k ? "," : "", (long long)x[k]);
    printf("]");
}

static void show(const struct mc_pk *v);

static void pairs(const char *tag, const struct mc_pk *v)
{
    printf("{\"%s\":[", tag);
    for (int64_t i = 0; i + 1 < v->n; i += 2) {
        printf("%s[", i ? "," : "");
        show(v->items[i]);
        printf(",");
        show(v->items[i + 1]);
        printf("]");
    }
    printf("]}");
}

static void tensor(const struct mc_pk *t)
{
    printf("{\"tensor\":\"%s\",\"shape\":", mc_dtype_name(t->dtype));
    ints(t->ndim, t->shape);
    printf(",\"stride\":");
    ints(t->ndim, t->stride);
    printf(",\"offset\":%lld,\"storage\":\"%s\",\"storage_numel\":%lld,\"values\":[",
           (long long)t->offset, t->storage->key, (long long)t->storage->numel);
    int64_t n = mc_pk_tensor_numel(t), idx[MC_PK_MAX_DIM] = {0};
    for (int64_t k = 0; k < n; k++) { /* row-major walk of the view */
        int64_t at = t->offset;
        for (int d = 0; d < t->ndim; d++)
            at += idx[d] * t->stride[d];
        if (k)
            printf(",");
        pfloat(elem(t->storage, at));
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d])
                break;
            idx[d] = 0;
        }
    }
    printf("]}");
}

static void show(const struct mc_pk *v)
{
    switch (v->kind) {
    case MC_PK_NONE: printf("null"); break;
    case MC_PK_BOOL: printf(v->b ? "true" : "false"); break;
    case MC_PK_INT: printf("%lld", (long long)v->i); break;
    case MC_PK_FLOAT: pfloat(v->f); break;
    case MC_PK_STR:
        printf("\"");
        for (size_t i = 0; i < v->len; i++) {
            unsigned char c = (unsigned char)v->s[i];
            if (c == '"' || c == '\\') printf("\\%c", c);
            else if (c < 0x20) printf("\\u%04x", c);
            else putchar(c);
        }
        printf("\"");
        break;
    case MC_PK_BYTES:
        printf("{\"bytes\":\"");
        for (size_t i = 0; i < v->len; i++)
            printf("%02x", (unsigned char)v->s[i]);
        printf("\"}");
        break;
    case MC_PK_TUPLE: case MC_PK_LIST:
        printf(v->kind == MC_PK_TUPLE ? "{\"tuple\":[" : "[");
        for (int64_t i = 0; i < v->n; i++) {
            if (i) printf(",");
            show(v->items[i]);
        }
        printf(v->kind == MC_PK_TUPLE ? "]}" : "]");
        break;
    case MC_PK_DICT: pairs("dict", v); break;
    case MC_PK_ODICT: pairs("odict", v); break;
    case MC_PK_NAMESPACE: pairs("namespace", v); break;
    case MC_PK_GLOBAL: printf("{\"global\":\"%s\"}", v->s); break;
    case MC_PK_ENUM: printf("{\"enum\":\"%s\",\"value\":", v->s); show(v->items[0]); printf("}"); break;
    case MC_PK_TENSOR: tensor(v); break;
    case MC_PK_NDARRAY:
        printf("{\"ndarray\":\"%s\",\"shape\":", v->s);
        ints(v->ndim, v->shape);
        printf(",\"nbytes\":%lld}", (long long)v->numel);
        break;
    default: printf("{\"kind\":%d}", (int)v->kind);
    }
}

static float f32[6] = {1.5f, -2.25f, 3.0f, 1e-30f, -0.0f, 65504.0f};
static double f64[3] = {1.0 / 3.0, -1e300, 2.5};
static uint16_t f16[3] = {0x3c00, 0xc000, 0x3555};   /* 1, -2, 0.333 */
static uint16_t bf16[3] = {0x3f80, 0xc040, 0x4049};  /* 1, -3, 3.140625 */
static int64_t i64[2] = {-(1LL << 40), 7};
static int32_t i32[2] = {-5, 123456};
static int16_t i16[2] = {-300, 300};
static int8_t i8[2] = {-128, 127};
static uint8_t u8[3] = {0, 200, 255};
static uint8_t bl[2] = {1, 0};

#define ADD(key, val) do { if (mc_pk_set(d, root, key, (val))) return 1; } while (0)

static struct mc_pk *tens(mc_pk_doc *d, enum mc_dtype t, int64_t n, const void *p)
{
    int64_t shape[1] = {n};
    return mc_pk_tensor(d, mc_pk_storage(d, t, n, p), 0, 1, shape, NULL);
}

static int write_file(const char *path, bool zip64)
{
    mc_pk_doc *d;
    if (mc_pk_doc_init(&d))
        return 1;
    struct mc_pk *root = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *s = mc_pk_storage(d, MC_DTYPE_F32, 6, f32);
    int64_t sh[2] = {2, 3}, vs[1] = {2}, vst[1] = {3};
    ADD("f32", mc_pk_tensor(d, s, 0, 2, sh, NULL));
    ADD("view", mc_pk_tensor(d, s, 1, 1, vs, vst)); /* column 1: shares f32's storage */
    ADD("scalar", mc_pk_tensor(d, s, 2, 0, NULL, NULL));
    ADD("f64", tens(d, MC_DTYPE_F64, 3, f64));
    ADD("f16", tens(d, MC_DTYPE_F16, 3, f16));
    ADD("bf16", tens(d, MC_DTYPE_BF16, 3, bf16));
    ADD("i64", tens(d, MC_DTYPE_I64, 2, i64));
    ADD("i32", tens(d, MC_DTYPE_I32, 2, i32));
    ADD("i16", tens(d, MC_DTYPE_I16, 2, i16));
    ADD("i8", tens(d, MC_DTYPE_I8, 2, i8));
    ADD("u8", tens(d, MC_DTYPE_U8, 3, u8));
    ADD("bool", tens(d, MC_DTYPE_BOOL, 2, bl));
    ADD("empty", tens(d, MC_DTYPE_F32, 0, f32));
    struct mc_pk *ns = mc_pk_new(d, MC_PK_NAMESPACE), *lst = mc_pk_new(d, MC_PK_LIST);
    mc_pk_append(d, lst, mc_pk_int(d, 1));
    mc_pk_append(d, lst, mc_pk_str(d, "a"));
    mc_pk_set(d, ns, "num_layers", mc_pk_int(d, 2));
    mc_pk_set(d, ns, "lr", mc_pk_float(d, 1e-3));
    mc_pk_set(d, ns, "name", mc_pk_str(d, "gpt \"x\" \xc3\xa9"));
    mc_pk_set(d, ns, "load", mc_pk_none(d));
    mc_pk_set(d, ns, "flag", mc_pk_bool(d, true));
    mc_pk_set(d, ns, "items", lst);
    mc_pk_set(d, ns, "params_dtype", mc_pk_global(d, "torch", "bfloat16"));
    mc_pk_set(d, ns, "model_type", mc_pk_enum(d, "megatron.core.enums", "ModelType", mc_pk_int(d, 1)));
    ADD("args", ns);
    struct mc_pk *od = mc_pk_new(d, MC_PK_ODICT);
    mc_pk_set(d, od, "z", mc_pk_int(d, 1));
    mc_pk_set(d, od, "a", mc_pk_none(d));
    ADD("od", od);
    struct mc_pk *nested = mc_pk_new(d, MC_PK_DICT), *inner = mc_pk_new(d, MC_PK_DICT);
    mc_pk_append(d, nested, mc_pk_int(d, 0));
    mc_pk_append(d, nested, inner);
    mc_pk_set(d, inner, "step", tens(d, MC_DTYPE_F32, 1, f32));
    ADD("nested", nested);
    struct mc_pk *tup = mc_pk_new(d, MC_PK_TUPLE), *big = mc_pk_new(d, MC_PK_TUPLE);
    mc_pk_append(d, tup, mc_pk_float(d, 0.9));
    mc_pk_append(d, tup, mc_pk_float(d, 0.999));
    static const int64_t bigs[] = {0, 255, 256, 65535, 65536, -1, -129, 2147483647, 2147483648LL,
                                   -2147483648LL, -2147483649LL, 1LL << 40, INT64_MAX, INT64_MIN};
    for (size_t k = 0; k < sizeof(bigs) / sizeof(*bigs); k++)
        mc_pk_append(d, big, mc_pk_int(d, bigs[k]));
    ADD("betas", tup);
    ADD("ints", big);
    ADD("bytes", mc_pk_bytes(d, "\x00\x7f\x80\xff", 4));
    ADD("empty_list", mc_pk_new(d, MC_PK_LIST));
    ADD("empty_tuple", mc_pk_new(d, MC_PK_TUPLE));
    ADD("empty_dict", mc_pk_new(d, MC_PK_DICT));
    ADD("pi", mc_pk_float(d, 3.141592653589793));
    mc_status st = mc_torch_save_ex(d, root, path, zip64);
    if (st)
        fprintf(stderr, "write: %s: %s\n", mc_status_str(st), mc_last_error());
    mc_pk_doc_free(d);
    return st ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return fprintf(stderr, "usage: ckpt_driver dump|write|write64 FILE\n"), 2;
    if (!strcmp(argv[1], "write") || !strcmp(argv[1], "write64"))
        return write_file(argv[2], !strcmp(argv[1], "write64"));
    mc_pk_doc *d;
    struct mc_pk *v;
    if (mc_pk_doc_init(&d))
        return 1;
    mc_status st = mc_torch_load(d, argv[2], &v);
    if (st) {
        fprintf(stderr, "error: %s: %s\n", mc_status_str(st), mc_last_error());
        mc_pk_doc_free(d);
        return 1;
    }
    show(v);
    printf("\n");
    mc_pk_doc_free(d);
    return 0;
}
