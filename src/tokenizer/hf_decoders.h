/* The decoder chain of a HuggingFace tokenizer.json (see hf_decoders.c). */
#ifndef MC_TOKENIZER_HF_DECODERS_H
#define MC_TOKENIZER_HF_DECODERS_H

#include "core/json.h"

enum { HFD_BYTE_LEVEL = 1, HFD_REPLACE, HFD_BYTE_FALLBACK, HFD_FUSE, HFD_STRIP, HFD_METASPACE };

struct mc_hf_decoder {
    int n;
    struct mc_hf_decode_step {
        int type;
        char pattern[16], content[16]; /* Replace; Strip content; Metaspace replacement */
        int start, stop;               /* Strip */
        bool prepend;                  /* Metaspace: prepend_scheme != never */
    } step[8];
};

/* Reads "decoder" (null, one decoder, or a Sequence). Unsupported types: MC_ERR_UNSUPPORTED. */
mc_status mc_hf_decoder_config(struct mc_hf_decoder *d, const struct mc_json *j, const char *path);
/* Runs the chain on token strings tok[i][0..len[i]) and appends the joined text to out. */
mc_status mc_hf_decode_tokens(const struct mc_hf_decoder *d, const char *const *tok,
                              const size_t *len, int64_t n, struct mc_json_buf *out);

#endif
