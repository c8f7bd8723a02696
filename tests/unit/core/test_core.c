/* Status strings, last-error formatting and the counted allocator. */
#include "megatron.h"
#include "test.h"

#include <string.h>

int main(void)
{
    CHECK(strcmp(mc_status_str(MC_ERR_CONFIG), "MC_ERR_CONFIG") == 0);
    mc_status s = mc_error(MC_ERR_IO, "cannot open %s", "x.idx");
    CHECK(s == MC_ERR_IO);
    CHECK(strstr(mc_last_error(), "test_core.c:") != NULL);
    CHECK(strstr(mc_last_error(), "cannot open x.idx") != NULL);

    size_t before = mc_alloc_live_bytes();
    float *a = mc_alloc(1000 * sizeof(*a));
    CHECK(a != NULL && ((uintptr_t)a % 64) == 0);
    CHECK(mc_alloc_live_bytes() == before + 1000 * sizeof(*a));
    char *z = mc_calloc(77, 3);
    int allzero = 1;
    for (int i = 0; i < 231; i++) allzero &= z[i] == 0;
    CHECK(allzero);
    mc_free(z);
    mc_free(a);
    mc_free(NULL);
    CHECK(mc_alloc_live_bytes() == before);
    CHECK(mc_alloc(SIZE_MAX - 8) == NULL);
    CHECK(mc_dtype_size(MC_DTYPE_BF16) == 2);
    return test_summary("test_core");
}
