/* HuggingFaceTokenizer (placeholder until the tokenizer.json reader lands: fails loudly). */
#include "tokenizer/tokenizer_impl.h"

mc_status mc_tok_hf_init(const struct mc_tokenizer_args *args, mc_tokenizer *t)
{
    return mc_error(MC_ERR_UNSUPPORTED, "HuggingFaceTokenizer is not implemented yet");
}
