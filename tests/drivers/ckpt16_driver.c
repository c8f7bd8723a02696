/* Test helper for 16-bit checkpoints (src/checkpointing, mixed precision) on the format level:
 * a GPT of Megatron's gpt_tp1 test case (4 layers, hidden 16, 4 heads, vocab 576, seq 16; local
 * spec names) in fp32 memory, saved and loaded as a --bf16 / --fp16 run's checkpoint
 * (struct mc_ckpt_state.params_dtype), for tests/checkpointing/test_ckpt_mixed.py to check with
 * torch.load and against Megatron's own bf16 checkpoint.
 *   ckpt16_driver save DIR DTYPE SCALER        two Adam steps on fixed pseudo-random grads,
 *                                               then save iteration 2 to DIR
 *   ckpt16_driver load DIR DTYPE SCALER OPTIM  load DIR into a fresh model
 *   ckpt16_driver distopt DIR DTYPE SCALER GRADDT OUT
 *                                               --use-distributed-optimizer (one process, dp 1):
 *                                               load DIR with its optimizer state and
 *                                               distrib_optim.pt, save it again to OUT
 * DTYPE: bf16, fp16 or fp32 (the run's params_dtype); SCALER: none, constant or dynamic (the
 * saved scaler state is scale 32768, growth 3, hysteresis 1); OPTIM: optim or nooptim
 * (--no-load-optim); GRADDT: the main grads' dtype Megatron keys distrib_optim.pt with (fp32, or
 * fp16 for --fp16 alone). All print every parameter as `name numel` then its fp32 values' bits
 * (hex) in one line, the step count and the scaler state; errors go to stderr, exit 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "megatron/checkpoint.h"
#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "core/dtype.h"
#include "distributed/distrib_optimizer.h"
#include "parallel_state/parallel_state.h"
#include "optimizer/lr_scheduler.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

static int fail(const char *what)
{
    fprintf(stderr, "ckpt16_driver: %s: %s\n", what, mc_last_error());
    return 1;
}

static mc_gpt_model *model(uint64_t seed)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 4;
    c.hidden_size = 16;
    c.num_attention_heads = 4;
    c.vocab_size = 513; /* NullTokenizer --vocab-size 512: 512 + eod, padded to 576 */
    c.make_vocab_size_divisible_by = 64;
    c.max_position_embeddings = 16;
    c.seq_length = 16;
    c.micro_batch_size = 2;
    c.seed = seed;
    mc_gpt_model *m = NULL;
    return mc_gpt_model_init(&c, &m) ? NULL : m;
}

static void print_params(mc_gpt_model *m, int64_t step, const struct mc_ckpt_state *s)
{
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view p = mc_gpt_param(m, i);
        printf("%s %lld", p.name, (long long)p.numel);
        for (int64_t k = 0; k < p.numel; k++) {
            uint32_t b;
            memcpy(&b, &p.data[k], 4);
            printf(" %08x", b);
        }
        printf("\n");
    }
    printf("step %lld\n", (long long)step);
    printf("scaler loaded=%d scale=%.17g growth=%lld hysteresis=%lld\n", s->scaler.loaded,
           s->scaler.scale, (long long)s->scaler.growth_tracker,
           (long long)s->scaler.hysteresis_tracker);
}

static enum mc_dtype dtype_arg(const char *a)
{
    return !strcmp(a, "bf16") ? MC_DTYPE_BF16 : !strcmp(a, "fp16") ? MC_DTYPE_F16 : MC_DTYPE_F32;
}

static int scaler_arg(const char *a)
{
    return !strcmp(a, "dynamic") ? MC_CKPT_SCALER_DYNAMIC
           : !strcmp(a, "constant") ? MC_CKPT_SCALER_CONSTANT : MC_CKPT_SCALER_NONE;
}

/* The distributed optimizer's checkpoint round trip on one process. */
static int distopt(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    struct mc_parallel_state ps;
    struct mc_ps_config pc = {1, 1, 1, 1, NULL};
    mc_gpt_model *m = model(99);
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    mc_distopt *d = NULL;
    if (!m || mc_ps_init(&ps, &world, &pc) ||
        mc_distopt_init(&oc, mc_gpt_param_set(m), &ps, &world, 0, false, &d))
        return fail("distributed optimizer");
    struct mc_opt_sched sched;
    struct mc_opt_sched_config sc = {.max_lr = 1e-2, .warmup_steps = 8, .decay_steps = 64,
                                     .decay_style = MC_LR_COSINE, .start_wd = 0.01, .end_wd = 0.01,
                                     .wd_incr_steps = 16, .use_checkpoint = true};
    if (mc_opt_sched_init(&sched, &sc, NULL))
        return fail("scheduler");
    struct mc_ckpt_state s = {.model = m, .distopt = d, .sched = &sched, .writer = true,
                              .write_tracker = true, .params_dtype = dtype_arg(argv[3]),
                              .grad_dtype = dtype_arg(argv[5])};
    s.scaler.kind = scaler_arg(argv[4]);
    s.opts.dir = argv[2];
    s.opts.local_names = true;
    s.opts.load_optim = true;
    bool loaded;
    if (mc_ckpt_load(&s, stdout, &loaded) || !loaded)
        return fail("load");
    struct mc_distopt_shard sh;
    mc_distopt_shard(d, &sh);
    print_params(m, sh.step, &s);
    s.opts.dir = argv[6];
    s.opts.save_optim = s.opts.adam = true;
    s.opts.adam_beta1 = 0.9;
    s.opts.adam_beta2 = 0.999;
    s.opts.adam_eps = 1e-8;
    s.opts.max_lr = 1e-2;
    if (mc_ckpt_save(&s, NULL))
        return fail("save");
    mc_distopt_free(d);
    mc_gpt_model_free(m);
    MPI_Finalize();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 7 && !strcmp(argv[1], "distopt"))
        return distopt(argc, argv);
    if (argc < 5 || (strcmp(argv[1], "save") && strcmp(argv[1], "load")) ||
        (!strcmp(argv[1], "load") && argc < 6)) {
        fprintf(stderr, "usage: ckpt16_driver save DIR DTYPE SCALER | load DIR DTYPE SCALER "
                        "optim|nooptim\n");
        return 2;
    }
    bool save = !strcmp(argv[1], "save");
    enum mc_dtype dt = dtype_arg(argv[3]);
    mc_gpt_model *m = model(save ? 1234 : 99);
    if (!m)
        return fail("model");
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    mc_optimizer *o = NULL;
    if (mc_opt_init(&oc, mc_gpt_param_set(m), &o))
        return fail("optimizer");
    struct mc_opt_sched sched;
    struct mc_opt_sched_config sc = {.max_lr = 1e-2, .warmup_steps = 8, .decay_steps = 64,
                                     .decay_style = MC_LR_COSINE, .start_wd = 0.01, .end_wd = 0.01,
                                     .wd_incr_steps = 16, .use_checkpoint = true};
    if (mc_opt_sched_init(&sched, &sc, NULL))
        return fail("scheduler");
    struct mc_ckpt_state s = {.model = m, .opt = o, .sched = &sched, .params_dtype = dt};
    s.scaler.kind = scaler_arg(argv[4]);
    s.opts.dir = argv[2];
    s.opts.local_names = true;
    if (save) {
        /* the model's start as Megatron's: fp32 init, rounded to params_dtype, main = float() */
        struct mc_param_set *ps = mc_gpt_param_set(m);
        uint16_t *h = malloc((size_t)ps->n_elements * sizeof(uint16_t));
        if (!h)
            return fail("memory");
        if (dt != MC_DTYPE_F32) {
            mc_dtype_from_f32(h, dt, ps->param_block, ps->n_elements);
            mc_dtype_to_f32(ps->param_block, h, dt, ps->n_elements);
        }
        free(h);
        for (int step = 1; step <= 2; step++) {
            for (int64_t k = 0; k < ps->n_elements; k++)
                ps->grad_block[k] = (float)((urand() - 0.5) * 0.1);
            struct mc_opt_step_result r;
            mc_opt_sched_step(&sched, 8);
            if (mc_opt_step(o, (float)sched.lr, (float)sched.wd, &r))
                return fail("step");
        }
        s.iteration = 2;
        s.scaler.scale = 32768;
        s.scaler.growth_tracker = 3;
        s.scaler.hysteresis_tracker = 1;
        s.opts.save_optim = true;
        s.opts.adam = true;
        s.opts.adam_beta1 = 0.9;
        s.opts.adam_beta2 = 0.999;
        s.opts.adam_eps = 1e-8;
        s.opts.max_lr = 1e-2;
        if (mc_ckpt_save(&s, NULL))
            return fail("save");
    } else {
        bool loaded;
        s.opts.load_optim = !strcmp(argv[5], "optim");
        if (mc_ckpt_load(&s, stdout, &loaded))
            return fail("load");
        if (!loaded)
            return fail("load (no checkpoint)");
    }
    print_params(m, mc_opt_step_count(o), &s);
    mc_opt_free(o);
    mc_gpt_model_free(m);
    return 0;
}
