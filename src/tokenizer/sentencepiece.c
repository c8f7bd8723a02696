/* SentencePiece tokenizers (placeholder until the .model reader lands: fails loudly). */
#include "tokenizer/tokenizer_impl.h"

mc_status mc_tok_spm_init(const struct mc_tokenizer_args *args, int kind, mc_tokenizer *t)
{
    return mc_error(MC_ERR_UNSUPPORTED, "SentencePiece tokenizers are not implemented yet");
}
