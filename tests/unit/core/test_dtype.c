/* src/core/dtype.c: every dtype has a size and a unique torch name, every file format's name
 * table covers every dtype (safetensors names, torch storage classes), the scalar conversions'
 * fixed points (ties to even, subnormals, overflow, NaN as torch gives it) and the array paths
 * agreeing with them. tests/core/test_dtype_torch.py checks the same functions against torch. */
#include <string.h>

#include "checkpointing/safetensors.h"
#include "checkpointing/torch_pickle.h"
#include "core/dtype.h"
#include "test.h"

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_tables(void)
{
    static const size_t want[MC_DTYPE_COUNT] = {4, 2, 2, 4, 8, 1, 8, 2, 1, 1};
    /* the dump format stores these numbers: they never move */
    CHECK(MC_DTYPE_F32 == 0 && MC_DTYPE_BF16 == 1 && MC_DTYPE_F16 == 2 && MC_DTYPE_I32 == 3 &&
          MC_DTYPE_I64 == 4 && MC_DTYPE_U8 == 5 && MC_DTYPE_F64 == 6);
    for (int t = 0; t < MC_DTYPE_COUNT; t++) {
        enum mc_dtype d = (enum mc_dtype)t;
        CHECK(mc_dtype_size(d) == want[t]);
        CHECK(strcmp(mc_dtype_name(d), "invalid") && strcmp(mc_st_dtype_name(d), "?"));
        CHECK(mc_pk_dtype_storage(d) != NULL && strstr(mc_pk_dtype_storage(d), "Storage"));
        for (int u = 0; u < t; u++)
            CHECK(strcmp(mc_dtype_name(d), mc_dtype_name((enum mc_dtype)u)) &&
                  strcmp(mc_st_dtype_name(d), mc_st_dtype_name((enum mc_dtype)u)) &&
                  strcmp(mc_pk_dtype_storage(d), mc_pk_dtype_storage((enum mc_dtype)u)));
    }
    CHECK(!strcmp(mc_dtype_name(MC_DTYPE_BF16), "bfloat16") && !strcmp(mc_st_dtype_name(MC_DTYPE_BF16), "BF16") &&
          !strcmp(mc_pk_dtype_storage(MC_DTYPE_BF16), "BFloat16Storage"));
    CHECK(mc_dtype_size(MC_DTYPE_COUNT) == 0 && !strcmp(mc_dtype_name(MC_DTYPE_COUNT), "invalid"));
    CHECK(mc_dtype_is_float(MC_DTYPE_F64) && mc_dtype_is_float(MC_DTYPE_BF16) &&
          !mc_dtype_is_float(MC_DTYPE_I16) && !mc_dtype_is_float(MC_DTYPE_BOOL));
}

static void test_scalars(void)
{
    CHECK(mc_f32_to_bf16(f32_of(0x7fc00000u)) == 0xffff); /* Tensor.to's NaN on x86 */
    CHECK(mc_f32_to_bf16(f32_of(0xff800001u)) == 0xffff);
    CHECK(mc_f32_to_bf16(f32_of(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to infinity */
    CHECK(mc_f32_to_bf16(f32_of(0x80000001u)) == 0x8000); /* subnormal to -0 */
    CHECK(mc_f32_to_f16(f32_of(0xffc00000u)) == 0xfe00);  /* sign kept, payload dropped */
    CHECK(mc_f32_to_f16(f32_of(0x387fe000u)) == 0x0400);  /* largest subnormal rounds up to normal */
    CHECK(mc_f32_to_f16(f32_of(0x33000001u)) == 0x0001);  /* just past half of 2^-24 */
    CHECK(bits_of(mc_f16_to_f32(0x7c01)) == 0x7fc02000u); /* signalling NaN comes back quiet */
    CHECK(bits_of(mc_f16_to_f32(0xfc00)) == 0xff800000u);
    CHECK(bits_of(mc_f16_to_f32(0x8001)) == 0xb3800000u); /* -2^-24 */
    CHECK(bits_of(mc_f16_to_f32(0x8000)) == 0x80000000u);
    CHECK(bits_of(mc_bf16_to_f32(0x7f81)) == 0x7f810000u); /* bf16 -> f32 is a shift */
}

static void test_arrays(void)
{
    float src[6] = {1.0f, -2.5f, 65520.0f, 1e-8f, f32_of(0x3f808000u), f32_of(0x7fc00000u)};
    uint16_t h[6], b[6];
    double d[6];
    mc_dtype_from_f32(h, MC_DTYPE_F16, src, 6);
    mc_dtype_from_f32(b, MC_DTYPE_BF16, src, 6);
    mc_dtype_from_f32(d, MC_DTYPE_F64, src, 6);
    float back[6];
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad += h[i] != mc_f32_to_f16(src[i]) || b[i] != mc_f32_to_bf16(src[i]) ||
               bits_of((float)d[i]) != bits_of(src[i]);
    CHECK(bad == 0);
    mc_dtype_to_f32(back, h, MC_DTYPE_F16, 6);
    for (int i = 0; i < 6; i++)
        bad += bits_of(back[i]) != bits_of(mc_f16_to_f32(h[i]));
    mc_dtype_to_f32(back, b, MC_DTYPE_BF16, 6);
    for (int i = 0; i < 6; i++)
        bad += bits_of(back[i]) != bits_of(mc_bf16_to_f32(b[i]));
    CHECK(bad == 0);
    int64_t l[3] = {-3, ((int64_t)1 << 24) + 1, INT64_MAX};
    mc_dtype_to_f32(back, l, MC_DTYPE_I64, 3);
    CHECK(back[0] == -3 && back[1] == 16777216.0f && back[2] == 0x1p63f);
    CHECK(mc_dtype_get_f64(l, MC_DTYPE_I64, 1) == 16777217.0);
    int8_t c[2] = {-128, 127};
    uint8_t u[2] = {255, 1};
    CHECK(mc_dtype_get_f64(c, MC_DTYPE_I8, 0) == -128 && mc_dtype_get_f64(u, MC_DTYPE_U8, 0) == 255 &&
          mc_dtype_get_f64(u, MC_DTYPE_BOOL, 1) == 1);
    /* unaligned source (a file mapping): element access goes through memcpy */
    uint8_t raw[9] = {0};
    float one = 1.0f;
    memcpy(raw + 1, &one, 4);
    CHECK(mc_dtype_get_f64(raw + 1, MC_DTYPE_F32, 0) == 1.0);
}

int main(void)
{
    test_tables();
    test_scalars();
    test_arrays();
    return test_summary("test_dtype");
}
