/* Times one full training step (forward + backward + Adam) of a GPT in a given params dtype
 * (float32, bfloat16 or float16: Megatron's --bf16 / --fp16 with fp32 main params and grads)
 * through the public API. A benchmark, not a test: bench/mixed/run.sh runs it beside PyTorch.
 *
 * usage: bench_mixed_step DTYPE LAYERS HIDDEN HEADS VOCAB SEQ BATCH [ITERS [WARMUP]]
 * MC_BENCH_FLASH=0|1 (default 1): the unfused attention or flash attention (the attention of
 * pretrain_gpt's default --transformer-impl transformer_engine; PyTorch's peer uses its fused
 * scaled_dot_product_attention).
 * prints one line: "megatron.c <dtype> tokens_per_s=<x> step_ms=<y> ... attention=<which>" */
#include "megatron.h"
#include "megatron/gpt.h"
#include "megatron/optimizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Megatron's per-iteration FLOP formula (training.py num_floating_point_operations) for a
 * non-gated, MHA, learned-position GPT: 3 passes (fwd + 2x bwd) of 2 FLOPs per MAC. */
static double step_flops(int64_t L, int64_t h, int64_t V, int64_t s, int64_t b)
{
    double per_layer = 24.0 * h * h * (double)s + 4.0 * (double)s * s * h; /* 12h^2 + 2sh, x2 */
    double logits = 2.0 * (double)s * h * V;
    return 3.0 * (double)b * ((double)L * per_layer + logits);
}

static int die(const char *what, mc_status st)
{
    fprintf(stderr, "bench_train_step: %s: %s: %s\n", what, mc_status_str(st), mc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: %s DTYPE LAYERS HIDDEN HEADS VOCAB SEQ BATCH [ITERS [WARMUP]]\n",
                argv[0]);
        return 2;
    }
    const char *dtn = argv[1];
    enum mc_dtype pdt = !strcmp(dtn, "bfloat16") ? MC_DTYPE_BF16
                        : !strcmp(dtn, "float16") ? MC_DTYPE_F16 : MC_DTYPE_F32;
    if (pdt == MC_DTYPE_F32 && strcmp(dtn, "float32")) {
        fprintf(stderr, "bench_mixed_step: DTYPE %s: expected float32, bfloat16 or float16\n", dtn);
        return 2;
    }
    argv++;
    argc--;
    struct mc_gpt_config cfg;
    mc_gpt_config_default(&cfg);
    cfg.num_layers = atoll(argv[1]);
    cfg.hidden_size = atoll(argv[2]);
    cfg.num_attention_heads = atoll(argv[3]);
    cfg.vocab_size = atoll(argv[4]);
    cfg.padded_vocab_size = cfg.vocab_size;
    cfg.seq_length = atoll(argv[5]);
    cfg.max_position_embeddings = cfg.seq_length;
    cfg.micro_batch_size = atoll(argv[6]);
    cfg.hidden_dropout = 0.0f;
    cfg.attention_dropout = 0.0f;
    cfg.params_dtype = pdt;
    cfg.flash_attention = !getenv("MC_BENCH_FLASH") || atoi(getenv("MC_BENCH_FLASH"));
    int iters = argc > 7 ? atoi(argv[7]) : 5;
    int warmup = argc > 8 ? atoi(argv[8]) : 2;
    int64_t b = cfg.micro_batch_size, s = cfg.seq_length, n = b * s;

    mc_gpt_model *m = NULL;
    mc_status st = mc_gpt_model_init(&cfg, &m);
    if (st != MC_OK)
        return die("model init", st);
    struct mc_optimizer_config ocfg;
    mc_opt_config_default(&ocfg);
    ocfg.bf16 = pdt == MC_DTYPE_BF16;
    ocfg.fp16 = pdt == MC_DTYPE_F16; /* Megatron's dynamic loss scaler (initial 2^32) */
    mc_optimizer *opt = NULL;
    if ((st = mc_opt_init(&ocfg, mc_gpt_param_set(m), &opt)) != MC_OK)
        return die("optimizer init", st);

    int64_t *tokens = mc_alloc((size_t)n * sizeof(*tokens));
    int64_t *labels = mc_alloc((size_t)n * sizeof(*labels));
    float *loss = mc_alloc((size_t)n * sizeof(*loss));
    float *dloss = mc_alloc((size_t)n * sizeof(*dloss));
    if (!tokens || !labels || !loss || !dloss)
        return die("buffers", MC_ERR_NOMEM);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tokens[i] = (int64_t)(x % (uint64_t)cfg.vocab_size);
        labels[i] = (int64_t)((x >> 20) % (uint64_t)cfg.vocab_size);
        dloss[i] = 1.0f / (float)n;
    }
    struct mc_gpt_batch batch = {.b = b, .s = s, .tokens = tokens, .labels = labels};

    double t0 = 0;
    float first = 0, last = 0;
    for (int it = 0; it < warmup + iters; it++) {
        if (it == warmup)
            t0 = now_s();
        mc_gpt_zero_grad(m);
        if ((st = mc_gpt_forward(m, &batch, true, loss)) != MC_OK)
            return die("forward", st);
        if ((st = mc_gpt_backward(m, dloss)) != MC_OK)
            return die("backward", st);
        struct mc_opt_step_result res;
        if ((st = mc_opt_step(opt, 1e-4f, 0.01f, &res)) != MC_OK)
            return die("optimizer step", st);
        double mean = 0;
        for (int64_t i = 0; i < n; i++)
            mean += loss[i];
        last = (float)(mean / (double)n);
        if (it == 0)
            first = last;
    }
    double dt = (now_s() - t0) / iters;
    printf("megatron.c %s tokens_per_s=%.1f step_ms=%.2f flops_per_step=%.6g loss_first=%.4f "
           "loss_last=%.4f attention=%s\n",
           dtn, (double)n / dt, dt * 1e3, step_flops(cfg.num_layers, cfg.hidden_size, cfg.vocab_size, s, b),
           first, last, cfg.flash_attention ? "flash" : "unfused");
    mc_free(dloss);
    mc_free(loss);
    mc_free(labels);
    mc_free(tokens);
    mc_opt_free(opt);
    mc_gpt_model_free(m);
    return 0;
}
