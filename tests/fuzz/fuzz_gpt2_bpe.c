/* GPT2BPETokenizer's vocab.json and merges.txt (src/tokenizer/gpt2_bpe.c, bpe.c): the input is
 * vocab.json, MC_FUZZ_SEP, merges.txt; a vocabulary that loads is then used (fuzz_tok.h). */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    char vocab[256], merges[256];
    size_t n = mc_fuzz_split(data, size, part, len, 2);
    mc_fuzz_write("vocab.json", part[0], len[0], vocab, sizeof(vocab));
    mc_fuzz_write("merges.txt", n > 1 ? part[1] : data, n > 1 ? len[1] : 0, merges, sizeof(merges));
    struct mc_tokenizer_args a = {.tokenizer_type = "GPT2BPETokenizer", .vocab_file = vocab,
                                  .merge_file = merges};
    mc_fuzz_use_tokenizer(&a);
    return 0;
}
