/* Byte-level BPE trainer (see bpe_trainer.c); used by tools/train_tokenizer. */
#ifndef MC_TOKENIZER_BPE_TRAINER_H
#define MC_TOKENIZER_BPE_TRAINER_H

#include "tokenizer/tokenizer_impl.h"

struct mc_bpe_train_opts {
    int64_t vocab_size;    /* total: 256 bytes + merges + special tokens */
    int64_t min_frequency; /* stop when the best pair occurs fewer times (default 2) */
    const char *const *special; /* added after the merges, e.g. "<|endoftext|>" */
    int n_special;
};

typedef struct mc_bpe_trainer mc_bpe_trainer;
mc_status mc_bpe_trainer_init(mc_bpe_trainer **out);
void mc_bpe_trainer_free(mc_bpe_trainer *tr);
/* Pre-tokenizes one document (GPT-2 pattern) and counts its pieces. */
mc_status mc_bpe_trainer_feed(mc_bpe_trainer *tr, const char *text, size_t len);
mc_status mc_bpe_trainer_train(mc_bpe_trainer *tr, const struct mc_bpe_train_opts *o);
int32_t mc_bpe_trainer_n_merges(const mc_bpe_trainer *tr);
int64_t mc_bpe_trainer_vocab_size(const mc_bpe_trainer *tr); /* after train */
/* Writes DIR/vocab.json, DIR/merges.txt, DIR/tokenizer.json (each via a temporary + rename). */
mc_status mc_bpe_trainer_save(const mc_bpe_trainer *tr, const char *dir);

#endif
