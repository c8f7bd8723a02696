/* Test helper for src/core/dtype.c: `dtype_driver OP IN OUT` reads IN as a raw little-endian
 * array, converts every element with the core conversion OP and writes the raw result to OUT,
 * for tests/core/test_dtype_torch.py to compare bit for bit with torch. OP: f32_to_bf16,
 * f32_to_f16 (float32 -> 16-bit words), bf16_to_f32, f16_to_f32 (16-bit words -> float32), or
 * <dtype>_to_f32 for any mc_dtype name (int64_to_f32, bool_to_f32, ...: mc_dtype_to_f32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

static void *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END))
        return NULL;
    long len = ftell(f);
    void *p = malloc(len > 0 ? (size_t)len : 1);
    rewind(f);
    if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(p);
        return NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

static int by_name(const char *op, size_t len)
{
    for (int t = 0; t < MC_DTYPE_COUNT; t++)
        if (strlen(mc_dtype_name((enum mc_dtype)t)) == len && !strncmp(op, mc_dtype_name((enum mc_dtype)t), len))
            return t;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: dtype_driver OP IN OUT\n");
        return 2;
    }
    const char *op = argv[1];
    size_t n = 0;
    uint8_t *in = slurp(argv[2], &n);
    if (!in) {
        fprintf(stderr, "dtype_driver: cannot read %s\n", argv[2]);
        return 1;
    }
    const char *to = strstr(op, "_to_");
    int src = to ? by_name(op, (size_t)(to - op)) : -1;
    bool from_f32 = !strcmp(op, "f32_to_bf16") || !strcmp(op, "f32_to_f16");
    if (!from_f32 && !strcmp(op, "bf16_to_f32"))
        src = MC_DTYPE_BF16;
    else if (!from_f32 && !strcmp(op, "f16_to_f32"))
        src = MC_DTYPE_F16;
    if (!from_f32 && (src < 0 || strcmp(to, "_to_f32"))) {
        fprintf(stderr, "dtype_driver: unknown OP %s\n", op);
        return 2;
    }
    size_t es = from_f32 ? 4 : mc_dtype_size((enum mc_dtype)src), count = n / es;
    size_t out_bytes = from_f32 ? count * 2 : count * 4;
    void *out = malloc(out_bytes ? out_bytes : 1);
    if (!out)
        return 1;
    if (from_f32) { /* one scalar call per element: the reference itself, not the array path */
        for (size_t i = 0; i < count; i++) {
            float x;
            memcpy(&x, in + 4 * i, 4);
            uint16_t h = op[7] == 'b' ? mc_f32_to_bf16(x) : mc_f32_to_f16(x);
            memcpy((uint8_t *)out + 2 * i, &h, 2);
        }
    } else {
        mc_dtype_to_f32(out, in, (enum mc_dtype)src, (int64_t)count);
    }
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(out, 1, out_bytes, f) != out_bytes || fclose(f)) {
        fprintf(stderr, "dtype_driver: cannot write %s\n", argv[3]);
        return 1;
    }
    free(in);
    free(out);
    return 0;
}
