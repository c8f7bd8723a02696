/* Times GPTModel forward+backward (and the Adam step) on the GPT-2 124M shape (12 layers,
 * h 768, 12 heads, vocab 50257 -> 50304) for a micro-batch of b x s tokens.
 * Build and run: see docs/engine.md (Benchmark). Usage: gpt_bench B S [iters] */
#include "megatron/optimizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s B S [iters]\n", argv[0]);
        return 2;
    }
    int64_t b = atoll(argv[1]), s = atoll(argv[2]);
    int iters = argc > 3 ? atoi(argv[3]) : 3;
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 12;
    c.hidden_size = 768;
    c.num_attention_heads = 12;
    c.vocab_size = 50257;
    c.max_position_embeddings = 1024;
    c.seq_length = s;
    c.micro_batch_size = b;
    c.hidden_dropout = 0.0f;
    c.attention_dropout = 0.0f;
    mc_gpt_model *m = NULL;
    if (mc_gpt_model_init(&c, &m) != MC_OK) {
        fprintf(stderr, "init: %s\n", mc_last_error());
        return 1;
    }
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    mc_optimizer *o = NULL;
    if (mc_opt_init(&oc, m, &o) != MC_OK)
        return 1;
    int64_t n = b * s;
    int64_t *tok = malloc(sizeof(int64_t) * (size_t)n), *lab = malloc(sizeof(int64_t) * (size_t)n);
    float *loss = malloc(sizeof(float) * (size_t)n), *dl = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        tok[i] = (i * 7919) % 50257;
        lab[i] = (i * 104729 + 1) % 50257;
        dl[i] = 1.0f / (float)n;
    }
    struct mc_gpt_batch bt = {b, s, tok, lab, NULL, NULL, NULL};
    double tf = 0, tb = 0, to = 0;
    for (int it = 0; it <= iters; it++) {
        double t0 = now();
        if (mc_gpt_forward(m, &bt, true, loss) != MC_OK) {
            fprintf(stderr, "forward: %s\n", mc_last_error());
            return 1;
        }
        double t1 = now();
        mc_gpt_zero_grad(m);
        mc_gpt_backward(m, dl);
        double t2 = now();
        mc_opt_step(o, 1e-4f, 0.01f, NULL);
        double t3 = now();
        if (it > 0) { /* the first iteration warms up */
            tf += t1 - t0;
            tb += t2 - t1;
            to += t3 - t2;
        }
    }
    printf("gpt2-124M b=%lld s=%lld: forward %.1f ms, backward %.1f ms, adam %.1f ms, "
           "fwd+bwd %.1f ms, %.0f tokens/s (fwd+bwd)\n",
           (long long)b, (long long)s, 1e3 * tf / iters, 1e3 * tb / iters, 1e3 * to / iters,
           1e3 * (tf + tb) / iters, (double)n * iters / (tf + tb));
    mc_opt_free(o);
    mc_gpt_model_free(m);
    free(tok);
    free(lab);
    free(loss);
    free(dl);
    return 0;
}
