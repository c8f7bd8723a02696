/* TikTokenizer's vocabulary file (src/tokenizer/tiktoken.c: Megatron's JSON list of
 * {"rank", "token_bytes" (base64), "token_str"}): the input is the file, loaded with a small
 * vocabulary size so that both short and complete rank lists occur, and 10 special tokens
 * (the default 1000 are checked for uniqueness pairwise: 500k instrumented strcmp a run). */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[256];
    mc_fuzz_write("tiktoken.json", data, size, path, sizeof(path));
    struct mc_tokenizer_args a = {.tokenizer_type = "TikTokenizer", .tokenizer_model = path,
                                  .vocab_size = 310, .tiktoken_pattern = "v2",
                                  .tiktoken_num_special_tokens = 10};
    mc_fuzz_use_tokenizer(&a);
    return 0;
}
