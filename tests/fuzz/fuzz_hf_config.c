/* HuggingFace config.json (src/tools/checkpoint/convert_hf.c read_config: GPT-2 and Llama
 * configurations, rope_scaling): the input is config.json, beside a real tiny Llama's
 * model.safetensors, so an accepted configuration goes on to the weight import's shape checks. */
#include "fuzz_hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init++)
        mc_fuzz_copy_golden("model.safetensors");
    char path[256];
    mc_fuzz_write("config.json", data, size, path, sizeof(path));
    mc_fuzz_load_hf_dir();
    return 0;
}
