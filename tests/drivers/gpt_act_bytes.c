/* Prints the activation block of one tensor-parallel rank of GPT-2 124M (12 layers, hidden
 * 768, 12 heads, vocab 50257 padded as Megatron pads it, dropout 0.1) with and without
 * sequence parallelism: `gpt_act_bytes TP SEQ MBS [DTYPE]` (DTYPE fp32 (default), bf16 or fp16:
 * params_dtype, the activations' dtype). Building the model needs no communicator
 * (only forward does), so one process measures any rank. Used for the memory figures of
 * docs/sequence-parallel.md. */
#include "megatron/gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t act_bytes(int tp, int64_t seq, int64_t mbs, bool sp, enum mc_dtype dt)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.params_dtype = dt;
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
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: gpt_act_bytes TP SEQ MBS [fp32|bf16|fp16]\n");
        return 2;
    }
    int tp = atoi(argv[1]);
    int64_t seq = atoll(argv[2]), mbs = atoll(argv[3]);
    const char *dn = argc == 5 ? argv[4] : "fp32";
    enum mc_dtype dt = !strcmp(dn, "bf16") ? MC_DTYPE_BF16 : !strcmp(dn, "fp16") ? MC_DTYPE_F16
                                                                                : MC_DTYPE_F32;
    if (dt == MC_DTYPE_F32 && strcmp(dn, "fp32")) {
        fprintf(stderr, "gpt_act_bytes: dtype %s: expected fp32, bf16 or fp16\n", dn);
        return 2;
    }
    size_t plain = act_bytes(tp, seq, mbs, false, dt);
    size_t sp = tp > 1 ? act_bytes(tp, seq, mbs, true, dt) : plain;
    printf("gpt2-124M %s tp=%d seq=%lld mbs=%lld: act_block %.1f MiB, with --sequence-parallel "
           "%.1f MiB (saves %.1f MiB)\n", dn, tp, (long long)seq, (long long)mbs,
           plain / 1048576.0, sp / 1048576.0, (plain - sp) / 1048576.0);
    return 0;
}
