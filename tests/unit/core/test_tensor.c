/* src/core/tensor.c: views of host memory (numel, bytes, scalars, empty tensors, shape
 * comparison), and the views the checkpoint formats and dumps hand out for their tensors. */
#include <string.h>

#include "tools/checkpoint/convert.h"
#include "megatron/dump.h"
#include "megatron/tensor.h"
#include "test.h"

int main(void)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s0[3] = {4, 0, 5};
    struct mc_tensor a = mc_tensor_view(w, MC_DTYPE_F32, 2, s23);
    CHECK(a.data == w && a.dtype == MC_DTYPE_F32 && a.ndim == 2 && a.shape[1] == 3 && a.shape[2] == 0);
    CHECK(mc_tensor_numel(&a) == 6 && mc_tensor_nbytes(&a) == 24 && mc_tensor_on_host(&a));
    struct mc_tensor b = mc_tensor_view(w, MC_DTYPE_BF16, 2, s32);
    CHECK(!mc_tensor_same_shape(&a, &b) && mc_tensor_nbytes(&b) == 12);
    b = mc_tensor_view(w, MC_DTYPE_F64, 2, s23);
    CHECK(mc_tensor_same_shape(&a, &b));
    struct mc_tensor sc = mc_tensor_view(w, MC_DTYPE_I64, 0, NULL);
    CHECK(mc_tensor_numel(&sc) == 1 && mc_tensor_nbytes(&sc) == 8 && !mc_tensor_same_shape(&sc, &a));
    struct mc_tensor e = mc_tensor_view(NULL, MC_DTYPE_BOOL, 3, s0);
    CHECK(mc_tensor_numel(&e) == 0 && mc_tensor_nbytes(&e) == 0);
    int tag;
    a.backend = &tag; /* memory of some backend */
    CHECK(!mc_tensor_on_host(&a));

    /* a dump's tensor and a converter tensor as views */
    mc_dump *d = NULL;
    MC_ASSERT(mc_dump_init(&d) == MC_OK && mc_dump_add_f32(d, "w", 2, s23, w) == MC_OK);
    struct mc_tensor dv = mc_dump_view(mc_dump_find(d, "w"));
    CHECK(dv.dtype == MC_DTYPE_F32 && mc_tensor_same_shape(&dv, &b) && mc_tensor_on_host(&dv) &&
          !memcmp(dv.data, w, sizeof(w)));
    mc_dump_free(d);
    struct mc_cv_model m;
    mc_cv_model_init(&m);
    struct mc_cv_tensor *t;
    MC_ASSERT(mc_cv_add(&m, &t, MC_DTYPE_BF16, 1, 7, 1, "final norm weight") == MC_OK);
    struct mc_tensor cv = mc_cv_view(t);
    CHECK(cv.ndim == 1 && cv.shape[0] == 7 && mc_tensor_nbytes(&cv) == 14 && cv.data == t->data);
    mc_cv_model_free(&m);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_tensor");
}
