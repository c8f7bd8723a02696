/* torch_dist checkpoint save/load throughput of the library (src/checkpointing/, the path
 * pretrain_gpt --ckpt-format torch_dist takes): a GPT-2-124M-sized model (12 layers, hidden
 * 768, 12 heads, vocab padded to 50304, 1024 positions, fp32, local spec names) with its Adam
 * state (exp_avg, exp_avg_sq), one process. Save = mc_ckpt_save into a fresh DIR (the .distcp
 * files, .metadata, common.pt, metadata.json, the tracker; fsync'ed, temp names renamed);
 * load = mc_ckpt_load of it back into the model and the optimizer. Best of REPEATS each; the
 * loaded parameters are checked against the saved ones.
 * Usage: bench_dist DIR REPEATS; prints one JSON line. Run by bench/checkpoint/run_dist.sh. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "megatron/checkpoint.h"
#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "optimizer/lr_scheduler.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_dist: %s: %s\n", what, mc_last_error());
    return 1;
}

static mc_gpt_model *gpt2_124m(void)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 12;
    c.hidden_size = 768;
    c.num_attention_heads = 12;
    c.vocab_size = 50257;
    c.make_vocab_size_divisible_by = 128;
    c.max_position_embeddings = 1024;
    c.seq_length = 1024;
    c.micro_batch_size = 1;
    mc_gpt_model *m = NULL;
    return mc_gpt_model_init(&c, &m) ? NULL : m;
}

/* Removes DIR (a fresh directory per save, as a new iter_* directory is). */
static int clear(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: bench_dist DIR REPEATS\n");
        return 2;
    }
    int reps = atoi(argv[2]);
    mc_gpt_model *m = gpt2_124m();
    if (!m)
        return fail("model");
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    mc_optimizer *o = NULL;
    if (mc_opt_init(&oc, mc_gpt_param_set(m), &o))
        return fail("optimizer");
    struct mc_opt_sched sched;
    struct mc_opt_sched_config sc = {.max_lr = 6e-4, .warmup_steps = 8, .decay_steps = 64,
                                     .decay_style = MC_LR_COSINE, .start_wd = 0.1, .end_wd = 0.1,
                                     .wd_incr_steps = 64, .use_checkpoint = true};
    if (mc_opt_sched_init(&sched, &sc, NULL))
        return fail("scheduler");
    struct mc_param_set *ps = mc_gpt_param_set(m);
    size_t n = (size_t)ps->n_elements;
    float *saved = malloc(n * sizeof(float));
    if (!saved)
        return fail("memory");
    memcpy(saved, ps->param_block, n * sizeof(float));
    struct mc_ckpt_state s = {.model = m, .opt = o, .sched = &sched, .iteration = 10,
                              .writer = true, .write_tracker = true};
    s.opts = (struct mc_ckpt_options){.dir = argv[1], .local_names = true, .save_optim = true,
                                      .adam = true, .save_dist = true, .adam_beta1 = 0.9,
                                      .adam_beta2 = 0.999, .adam_eps = 1e-8, .max_lr = 6e-4,
                                      .load_optim = true, .exit_on_missing = true,
                                      .ckpt_format = "torch_dist", .read_dist = true};
    double best_save = 1e30, best_load = 1e30;
    for (int r = 0; r < reps; r++) {
        if (clear(argv[1]))
            return fail("rm -rf DIR");
        double t0 = now();
        if (mc_ckpt_save(&s, NULL))
            return fail("save");
        double t1 = now();
        memset(ps->param_block, 0, n * sizeof(float)); /* the load must bring them back */
        bool loaded = false;
        if (mc_ckpt_load(&s, NULL, &loaded) || !loaded)
            return fail("load");
        double t2 = now();
        if (memcmp(ps->param_block, saved, n * sizeof(float)))
            return fail("the loaded parameters differ from the saved ones");
        best_save = t1 - t0 < best_save ? t1 - t0 : best_save;
        best_load = t2 - t1 < best_load ? t2 - t1 : best_load;
    }
    clear(argv[1]);
    /* fp32 params + exp_avg + exp_avg_sq */
    printf("{\"tensors\": %lld, \"gb\": %.4f, \"save_s\": %.4f, \"load_s\": %.4f}\n",
           (long long)(3 * mc_gpt_num_params(m)), 3.0 * 4.0 * (double)n / 1e9, best_save,
           best_load);
    free(saved);
    mc_opt_free(o);
    mc_gpt_model_free(m);
    return 0;
}
