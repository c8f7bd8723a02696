/* safetensors files (src/checkpointing/safetensors.c: the 8-byte length, the JSON header, dtypes,
 * shapes and data_offsets): the input is the file, opened as the HF loader opens
 * model.safetensors; every tensor it accepts is looked up by name and converted to float32. */
#include "checkpointing/safetensors.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[256];
    mc_fuzz_write("model.safetensors", data, size, path, sizeof(path));
    struct mc_st_file f;
    memset(&f, 0, sizeof(f));
    if (mc_fuzz_report("mc_st_open", mc_st_open(&f, path)) != MC_OK)
        return 0;
    for (int64_t i = 0; i < f.n; i++) {
        const struct mc_st_tensor *t = mc_st_find(&f, f.t[i].name);
        if (!t || t->numel > (1 << 22))
            continue;
        float *x = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
        mc_st_to_f32(t, x);
        mc_fuzz_touch(x, (size_t)t->numel * sizeof(float));
        free(x);
    }
    mc_st_close(&f);
    return 0;
}
