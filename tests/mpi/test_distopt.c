/* The distributed optimizer over MPI (4 ranks, dp 4 and tp 1): every rank feeds its own grads
 * to mc_distopt_step and, independently, the data-parallel mean of all ranks' grads (computed
 * here in double) to the non-distributed optimizer on a second copy of the model; after each
 * of 3 steps (Adam and SGD, one bucket and 300-element buckets, clipping active) the params,
 * grad norm and zero count must agree, every rank must hold identical params (the all-gather),
 * and the optimizer state per rank must be 1/dp of the padded buffer. With --fp16's dynamic
 * grad scaler: an inf in one rank's grad (which lands in one rank's shard only) makes every
 * rank skip the step (found_inf MAX over the world) and halve the scale, as the
 * non-distributed optimizer fed the mean does, and the clean steps around it agree. */
#include "distributed/distrib_optimizer.h"
#include "models/gpt/gpt_model.h"
#include "test.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

/* Read by LeakSanitizer in sanitizer builds: OpenMPI leaks small objects of its own, so the
 * exit-time check is off; our own allocations are checked with mc_alloc's live count instead. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "leak_check_at_exit=0"; }

static mc_gpt_model *tiny_model(void)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 1;
    c.hidden_size = 16;
    c.num_attention_heads = 2;
    c.vocab_size = c.padded_vocab_size = 32;
    c.max_position_embeddings = c.seq_length = 8;
    c.micro_batch_size = 1;
    mc_gpt_model *m = NULL;
    if (mc_gpt_model_init(&c, &m) != MC_OK)
        fprintf(stderr, "init: %s\n", mc_last_error());
    return m;
}

/* rank r's grad of element i at step s; every 11th element is zero on all ranks */
static double grad_of(int r, int64_t i, int s)
{
    return i % 11 == 0 ? 0.0 : 0.3 * sin(0.37 * (double)i + 1.3 * r + 0.7 * s) + 0.01 * r;
}

static void run(enum mc_optimizer_type type, int64_t bucket_size, void *world, int rank,
                int size)
{
    struct mc_parallel_state ps;
    struct mc_ps_config pc = {1, 1, 1, 1, NULL};
    mc_gpt_model *a = tiny_model(), *b = tiny_model();
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.optimizer = type;
    oc.clip_grad = 0.5f;
    mc_distopt *d = NULL;
    mc_optimizer *ref = NULL;
    CHECK(a && b && mc_ps_init(&ps, world, &pc) == MC_OK);
    CHECK(mc_distopt_init(&oc, mc_gpt_param_set(a), &ps, world, bucket_size, false, &d) ==
          MC_OK);
    CHECK(mc_opt_init(&oc, mc_gpt_param_set(b), &ref) == MC_OK);
    if (!d || !ref)
        goto out;
    int64_t n = a->n_elements, sharded, full;
    mc_distopt_state_numel(d, &sharded, &full);
    const struct mc_pgb_map *map = mc_distopt_map(d);
    int64_t blocks = type == MC_OPT_ADAM ? 2 : 1;
    CHECK(sharded * size == blocks * map->numel && full == blocks * n);
    CHECK(bucket_size == 0 ? map->n_buckets == 1 : map->n_buckets > 3);
    if (rank == 0)
        printf("%s bucket %lld: %lld buckets, state per rank %lld of %lld elements\n",
               type == MC_OPT_ADAM ? "adam" : "sgd", (long long)bucket_size,
               (long long)map->n_buckets, (long long)sharded, (long long)full);
    for (int s = 1; s <= 3; s++) {
        for (int64_t i = 0; i < n; i++) {
            double mean = 0.0;
            for (int r = 0; r < size; r++)
                mean += grad_of(r, i, s);
            a->grad_block[i] = (float)grad_of(rank, i, s);
            b->grad_block[i] = (float)(mean / size);
        }
        struct mc_opt_step_result ra, rb;
        CHECK(mc_distopt_step(d, 1.0f / (float)size, 1.0f, 1e-2f, 0.1f, &ra) == MC_OK);
        CHECK(mc_opt_step(ref, 1e-2f, 0.1f, &rb) == MC_OK);
        CHECK_CLOSE(ra.grad_norm, rb.grad_norm, 1e-5 * rb.grad_norm);
        CHECK(rb.grad_norm > 0.5f); /* clipping is active */
        CHECK(ra.num_zeros == rb.num_zeros && rb.num_zeros > 0);
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)a->param_block[i] - b->param_block[i]));
        CHECK(worst < 1e-6);
        /* identical params on every rank: max and min over the ranks agree */
        float *mx = malloc((size_t)n * sizeof(float)), *mn = malloc((size_t)n * sizeof(float));
        CHECK(mx && mn);
        if (mx && mn) {
            MPI_Allreduce(a->param_block, mx, (int)n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
            MPI_Allreduce(a->param_block, mn, (int)n, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
            int64_t differ = 0;
            for (int64_t i = 0; i < n; i++)
                differ += mx[i] != mn[i];
            CHECK(differ == 0);
        }
        free(mx);
        free(mn);
    }
out:
    mc_distopt_free(d);
    mc_opt_free(ref);
    mc_ps_free(&ps);
    mc_gpt_model_free(a);
    mc_gpt_model_free(b);
}

static void run_fp16(void *world, int rank, int size)
{
    struct mc_parallel_state ps;
    struct mc_ps_config pc = {1, 1, 1, 1, NULL};
    mc_gpt_model *a = tiny_model(), *b = tiny_model();
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.fp16 = true;
    oc.initial_loss_scale = 1024.0;
    oc.hysteresis = 1;
    mc_distopt *d = NULL;
    mc_optimizer *ref = NULL;
    CHECK(a && b && mc_ps_init(&ps, world, &pc) == MC_OK);
    CHECK(mc_distopt_init(&oc, mc_gpt_param_set(a), &ps, world, 300, false, &d) == MC_OK);
    CHECK(mc_opt_init(&oc, mc_gpt_param_set(b), &ref) == MC_OK);
    if (!d || !ref)
        goto out;
    int64_t n = a->n_elements;
    float *p0 = malloc((size_t)n * sizeof(float));
    CHECK(p0 != NULL);
    for (int s = 1; s <= 3 && p0; s++) {
        float scale = (float)mc_grad_scaler_get_scale(mc_distopt_grad_scaler(d));
        CHECK(scale == (float)mc_opt_loss_scale(ref) && scale == (s < 3 ? 1024.0f : 512.0f));
        for (int64_t i = 0; i < n; i++) {
            double mean = 0.0;
            for (int r = 0; r < size; r++)
                mean += grad_of(r, i, s);
            a->grad_block[i] = scale * (float)grad_of(rank, i, s);
            b->grad_block[i] = scale * (float)(mean / size);
        }
        if (s == 2) { /* an overflow on rank 1 only, near the end of the buffer order */
            a->grad_block[n / 3] = rank == 1 ? INFINITY : a->grad_block[n / 3];
            b->grad_block[n / 3] = INFINITY;
        }
        memcpy(p0, a->param_block, (size_t)n * sizeof(float));
        struct mc_opt_step_result ra, rb;
        CHECK(mc_distopt_step(d, 1.0f / (float)size, 1.0f, 1e-2f, 0.1f, &ra) == MC_OK);
        CHECK(mc_opt_step(ref, 1e-2f, 0.1f, &rb) == MC_OK);
        CHECK(ra.skipped == (s == 2) && rb.skipped == (s == 2));
        if (s == 2)
            CHECK(memcmp(p0, a->param_block, (size_t)n * sizeof(float)) == 0);
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)a->param_block[i] - b->param_block[i]));
        CHECK(worst < 1e-6);
        if (s != 2)
            CHECK_CLOSE(ra.grad_norm, rb.grad_norm, 1e-5 * rb.grad_norm);
    }
    free(p0);
out:
    mc_distopt_free(d);
    mc_opt_free(ref);
    mc_ps_free(&ps);
    mc_gpt_model_free(a);
    mc_gpt_model_free(b);
}

int main(int argc, char **argv)
{
    setenv("OMP_NUM_THREADS", "1", 1);
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    int rank = 0, size = 1;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    size_t live = mc_alloc_live_bytes();
    run(MC_OPT_ADAM, 0, &world, rank, size);
    run(MC_OPT_ADAM, 300, &world, rank, size);
    run(MC_OPT_SGD, 300, &world, rank, size);
    run_fp16(&world, rank, size);
    CHECK(mc_alloc_live_bytes() == live); /* every model, optimizer and group freed */
    int fails = test_summary("test_distopt");
    int any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, world);
    MPI_Finalize();
    return any;
}
