/* Prints the activation block of one tensor-parallel rank of GPT-2 124M (12 layers, hidden
 * 768, 12 heads, vocab 50257 padded as Megatron pads it, dropout 0.1) with and without
 * sequence parallelism: `gpt_act_bytes TP SEQ MBS`. Building the model needs no communicator
 * (only forward does), so one process measures any rank. Used for the memory figures of
 * docs/sequence-parallel.md. */
#include "megatron/gpt.h"

#include <stdio.h>
#include <stdlib.h>

static size_t act_bytes(int tp, int64_t seq, int64_t mbs, bool sp)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 12;
    c.hidden_size = 768;
    c.num_attention_heads = 12;
    c.vocab_size = 50257;
    c.seq_length = seq;
    c.max_position_embeddings = seq > 1024 ? seq : 1024;
    c.micro_batch_size = mbs;
    c.tensor_model_parallel_size = tp;
    c.sequence_parallel = sp;
    mc_gpt_model *m = NULL;
    if (mc_gpt_model_init(&c, &m) != MC_OK) {
        fprintf(stderr, "gpt_act_bytes: %s\n", mc_last_error());
        exit(1);
    }
    size_t n = mc_gpt_activation_bytes(m);
    mc_gpt_model_free(m);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: gpt_act_bytes TP SEQ MBS\n");
        return 2;
    }
    int tp = atoi(argv[1]);
    int64_t seq = atoll(argv[2]), mbs = atoll(argv[3]);
    size_t plain = act_bytes(tp, seq, mbs, false);
    size_t sp = tp > 1 ? act_bytes(tp, seq, mbs, true) : plain;
    printf("gpt2-124M tp=%d seq=%lld mbs=%lld: act_block %.1f MiB, with --sequence-parallel "
           "%.1f MiB (saves %.1f MiB)\n", tp, (long long)seq, (long long)mbs,
           plain / 1048576.0, sp / 1048576.0, (plain - sp) / 1048576.0);
    return 0;
}
