/* HuggingFaceTokenizer's tokenizer.json and tokenizer_config.json (src/tokenizer/hf_tokenizer.c,
 * hf_decoders.c): the input is tokenizer.json, optionally MC_FUZZ_SEP and
 * tokenizer_config.json, written into a directory given as --tokenizer-model. */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    char path[256];
    size_t n = mc_fuzz_split(data, size, part, len, 2);
    mc_fuzz_write("tokenizer.json", part[0], len[0], path, sizeof(path));
    if (n > 1)
        mc_fuzz_write("tokenizer_config.json", part[1], len[1], path, sizeof(path));
    else
        mc_fuzz_unlink("tokenizer_config.json");
    struct mc_tokenizer_args a = {.tokenizer_type = "HuggingFaceTokenizer",
                                  .tokenizer_model = mc_fuzz_dir()};
    mc_fuzz_use_tokenizer(&a);
    return 0;
}
