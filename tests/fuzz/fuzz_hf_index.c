/* model.safetensors.index.json and the shards it names (src/tools/checkpoint/convert_hf.c
 * open_index): the input is the index, MC_FUZZ_SEP, the shard model-00001-of-00002.safetensors,
 * loaded beside a real tiny Llama's config.json. */
#include "fuzz_hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init++)
        mc_fuzz_copy_golden("config.json");
    const uint8_t *part[2];
    size_t len[2];
    char path[256];
    size_t n = mc_fuzz_split(data, size, part, len, 2);
    mc_fuzz_write("model.safetensors.index.json", part[0], len[0], path, sizeof(path));
    if (n > 1)
        mc_fuzz_write("model-00001-of-00002.safetensors", part[1], len[1], path, sizeof(path));
    else
        mc_fuzz_unlink("model-00001-of-00002.safetensors");
    mc_fuzz_load_hf_dir();
    return 0;
}
