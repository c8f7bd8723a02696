/* The activation accounting of the flash attention path (--use-flash-attn): a model with
 * cfg.flash_attention carves no [b, heads, s, s] buffer (no saved probabilities per layer, no
 * dropped-probability / probability-grad / keep-mask scratch), only the fp32 row log-sum-exp
 * [b, heads, s] per layer, so mc_gpt_activation_bytes (what the engine allocates, and what its
 * in-flight slot planning counts) is the unfused block minus exactly those buffers, and grows
 * linearly in s apart from the one [b, s, s] byte mask copy of a slot. */
#include "megatron/gpt.h"
#include "test.h"

#include <stdbool.h>

enum { L = 2, HEADS = 4 };

static size_t act_bytes(bool flash, int64_t s, int64_t b)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = L;
    c.hidden_size = 64;
    c.num_attention_heads = HEADS;
    c.vocab_size = 256;
    c.seq_length = s;
    c.max_position_embeddings = s;
    c.micro_batch_size = b;
    c.attention_dropout = 0.1f;
    c.flash_attention = flash;
    mc_gpt_model *m = NULL;
    if (mc_gpt_model_init(&c, &m) != MC_OK) {
        fprintf(stderr, "test_gpt_flash_bytes: %s\n", mc_last_error());
        return 0;
    }
    size_t n = mc_gpt_activation_bytes(m);
    mc_gpt_model_free(m);
    return n;
}

static size_t al(size_t n) { return (n + 63) / 64 * 64; }

int main(void)
{
    int64_t s = 256, b = 2;
    size_t P = (size_t)(b * HEADS * s * s);
    size_t unf = act_bytes(false, s, b), fl = act_bytes(true, s, b);
    /* per layer: probs (fp32) out, lse in; shared: attn_a, attn_b (fp32) and keep out */
    size_t want = unf - L * al(4 * P) + L * al(4 * (size_t)(b * HEADS * s)) - 2 * al(4 * P) - al(P);
    printf("activation block, s %lld, b %lld: unfused %zu bytes, flash %zu bytes\n",
           (long long)s, (long long)b, unf, fl);
    CHECK(unf > 0 && fl == want);
    /* linear in s except the mask copy (b s^2 bytes) */
    size_t f2 = act_bytes(true, 2 * s, b), f4 = act_bytes(true, 4 * s, b);
    size_t m1 = (size_t)(b * 2 * s * 2 * s), m2 = (size_t)(b * 4 * s * 4 * s);
    printf("flash, 2s: %zu, 4s: %zu bytes (mask copies %zu, %zu)\n", f2, f4, m1, m2);
    CHECK(f4 - m2 <= 2 * (f2 - m1) + 4096);
    return test_summary("test_gpt_flash_bytes");
}
