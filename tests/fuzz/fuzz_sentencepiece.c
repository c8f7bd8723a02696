/* SentencePiece .model files (src/tokenizer/sentencepiece.c: the protobuf reader, unigram and
 * BPE models, normalizer tables): the input is the .model file. The first byte also picks which
 * of Megatron's three SentencePiece tokenizer types wraps it (they differ in specials and eod). */
#include "fuzz_tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *types[3] = {"SentencePieceTokenizer", "GPTSentencePieceTokenizer",
                                   "Llama2Tokenizer"};
    char path[256];
    mc_fuzz_write("tok.model", data, size, path, sizeof(path));
    struct mc_tokenizer_args a = {.tokenizer_type = types[size ? data[size - 1] % 3 : 0],
                                  .tokenizer_model = path};
    mc_fuzz_use_tokenizer(&a);
    return 0;
}
