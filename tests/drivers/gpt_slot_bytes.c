/* Prints the activation memory of GPT-2 124M (12 layers, hidden 768, 12 heads, vocab 50257
 * padded as Megatron pads it, dropout 0.1) per activation slot, for every stage of a pipeline:
 * `gpt_slot_bytes PP SEQ MBS`. A stage with slots n holds shared + n x slot bytes; 1F1B gives
 * stage r min(PP - r, M) slots. Building the model needs no communicator, so one process
 * measures every stage. Used for the memory figures of docs/pipeline-activations.md. */
#include "megatron/gpt.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: gpt_slot_bytes PP SEQ MBS\n");
        return 2;
    }
    int pp = atoi(argv[1]);
    int64_t seq = atoll(argv[2]), mbs = atoll(argv[3]);
    if (pp < 1 || 12 % pp != 0 || seq < 1 || mbs < 1) {
        fprintf(stderr, "gpt_slot_bytes: PP must divide 12, SEQ and MBS be positive\n");
        return 2;
    }
    for (int r = 0; r < pp; r++) {
        struct mc_gpt_config c;
        mc_gpt_config_default(&c);
        c.num_layers = 12;
        c.hidden_size = 768;
        c.num_attention_heads = 12;
        c.vocab_size = 50257;
        c.seq_length = seq;
        c.max_position_embeddings = seq > 1024 ? seq : 1024;
        c.micro_batch_size = mbs;
        c.pipeline_model_parallel_size = pp;
        c.pipeline_model_parallel_rank = r;
        mc_gpt_model *m = NULL;
        int slots = pp - r;
        if (mc_gpt_model_init(&c, &m) != MC_OK ||
            (slots > 1 && mc_gpt_set_activation_slots(m, slots) != MC_OK)) {
            fprintf(stderr, "gpt_slot_bytes: %s\n", mc_last_error());
            mc_gpt_model_free(m);
            return 1;
        }
        size_t slot = mc_gpt_slot_activation_bytes(m), all = mc_gpt_activation_bytes(m);
        printf("gpt2-124M pp=%d stage %d seq=%lld mbs=%lld: %.1f MiB per slot, shared %.1f MiB; "
               "%d slots (1F1B in flight): %.1f MiB\n", pp, r, (long long)seq, (long long)mbs,
               slot / 1048576.0, (all - (size_t)slots * slot) / 1048576.0, slots,
               all / 1048576.0);
        mc_gpt_model_free(m);
    }
    return 0;
}
