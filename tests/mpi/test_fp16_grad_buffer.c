/* Megatron's fp16 gradient buffer (--fp16 without --accumulate-allreduce-grads-in-fp32) at
 * every rounding point, on hand-picked values whose fp16 results follow from IEEE 754 binary16
 * (11-bit significand, round to nearest, ties to even; largest finite 65504, smallest
 * subnormal 2^-24), not from our conversion code:
 * - the weight-grad commit (DDP's main_grad.add_(param.grad), one per micro-batch): 1 + 2^-11
 *   is a tie and stays 1; 1 + 3 * 2^-11 rounds up to 1 + 2^-9; 2048 + 1 + 1 over two
 *   micro-batches stays 2048 (fp32 accumulation gives 2050); 65504 + 16 overflows to inf, 65504
 *   + 8 rounds back to 65504;
 * - the data-parallel all-reduce (start_grad_sync: grad_data *= 1/dp, then the sum, both in the
 *   fp16 buffer) over 4 ranks, with and without the distributed optimizer (its reduce-scatter
 *   into this rank's shard): 2048 on rank 0 and 1 on rank 1 give 512 + 0.25, a tie that rounds
 *   to 512 in any summation order (fp32 would keep 512.25); 2^-24 on every rank is 2^-26 after
 *   the 1/4, below half the smallest subnormal, so each rank's share and the sum are 0 (fp32:
 *   4 * 2^-26); 1.0 on every rank stays 1.0;
 * - check_grads' bucket norm, an fp16 tensor: inf (fatal) once past 65504 though every grad is
 *   finite.
 * With fp32 grads (the same model without grad_dtype) every one of these keeps the exact sum. */
#include "backend/backend.h"
#include "core/dtype.h"
#include "distributed/ddp.h"
#include "models/gpt/gpt_model.h"
#include "tensor_parallel/tensor_parallel.h"
#include "test.h"

#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

/* OpenMPI leaks small objects of its own (see test_distopt.c) */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "leak_check_at_exit=0"; }

/* main += g once per entry of gs (one micro-batch each) through mc_tp_wgrad_commit */
static float commit_all(struct mc_tp_group *g, float main, const float *gs, int n)
{
    float grad[1] = {main};
    for (int k = 0; k < n; k++) {
        uint16_t *t = mc_tp_wgrad_target(g, grad, 0, 1, true);
        *t = mc_f32_to_f16(gs[k]);
        mc_tp_wgrad_commit(g, grad, 0, 1);
    }
    return grad[0];
}

static void test_commit(enum mc_dtype grad_dt)
{
    struct mc_backend *be = NULL;
    CHECK(mc_backend_create(NULL, &be) == MC_OK);
    if (!be)
        return;
    struct mc_tp_group g = {1, 0, NULL, false, MC_DTYPE_F16, be, NULL, NULL, grad_dt};
    g.wgrad = be->ops->alloc(be, 2 * sizeof(uint16_t));
    CHECK(g.wgrad != NULL);
    bool f16 = grad_dt == MC_DTYPE_F16;
    float two[2] = {1.0f, 1.0f};
    float tie = ldexpf(1.0f, -11), up = 3.0f * ldexpf(1.0f, -11);
    CHECK(commit_all(&g, 1.0f, &tie, 1) == (f16 ? 1.0f : 1.0f + tie));
    CHECK(commit_all(&g, 1.0f, &up, 1) == (f16 ? 1.0f + ldexpf(1.0f, -9) : 1.0f + up));
    CHECK(commit_all(&g, 2048.0f, two, 2) == (f16 ? 2048.0f : 2050.0f));
    float sixteen = 16.0f, eight = 8.0f;
    float over = commit_all(&g, 65504.0f, &sixteen, 1);
    CHECK(f16 ? isinf(over) && over > 0 : over == 65520.0f);
    CHECK(commit_all(&g, 65504.0f, &eight, 1) == (f16 ? 65504.0f : 65512.0f));
    be->ops->free(be, g.wgrad);
    mc_backend_free(be);
}

static mc_gpt_model *tiny_model(enum mc_dtype grad_dt)
{
    struct mc_gpt_config c;
    mc_gpt_config_default(&c);
    c.num_layers = 1;
    c.hidden_size = 16;
    c.num_attention_heads = 2;
    c.vocab_size = c.padded_vocab_size = 32;
    c.max_position_embeddings = c.seq_length = 8;
    c.micro_batch_size = 1;
    c.params_dtype = MC_DTYPE_F16;
    c.grad_dtype = grad_dt;
    mc_gpt_model *m = NULL;
    if (mc_gpt_model_init(&c, &m) != MC_OK)
        fprintf(stderr, "init: %s\n", mc_last_error());
    return m;
}

/* this rank's grad of every element of parameter p: three kinds of parameter, cycling (so a
 * distributed-optimizer shard, which may start anywhere in a parameter, needs no position) */
static float grad_of(int rank, int64_t p)
{
    switch (p % 3) {
    case 0: return rank == 0 ? 2048.0f : rank == 1 ? 1.0f : 0.0f;
    case 1: return ldexpf(1.0f, -24);
    default: return 1.0f;
    }
}

static float want(int64_t p, bool f16)
{
    switch (p % 3) {
    case 0: return f16 ? 512.0f : 512.25f;
    case 1: return f16 ? 0.0f : ldexpf(1.0f, -24); /* 4 * 2^-26 */
    default: return 1.0f;
    }
}

/* The DDP bucket path (mc_ddp_grad_sync), or with dopt the distributed optimizer's
 * reduce-scatter (then this rank's shards are checked). */
static void test_reduce(void *world, int rank, int size, bool dopt, enum mc_dtype grad_dt)
{
    struct mc_parallel_state ps;
    struct mc_ps_config pc = {1, 1, 1, 1, NULL};
    mc_gpt_model *m = tiny_model(grad_dt);
    CHECK(m && mc_ps_init(&ps, world, &pc) == MC_OK);
    if (!m)
        return;
    struct mc_optimizer_config oc;
    mc_opt_config_default(&oc);
    oc.fp16 = true;
    mc_distopt *d = NULL;
    struct mc_param_set *s = mc_gpt_param_set(m);
    if (dopt)
        CHECK(mc_distopt_init(&oc, s, &ps, world, 300, false, &d) == MC_OK);
    struct mc_ddp_config dc = {.grad_scale = mc_ddp_grad_scale(&ps, false), .bucket_size = 300};
    mc_ddp *ddp = NULL;
    CHECK(mc_ddp_init(&dc, s, &ps, d, &ddp) == MC_OK);
    for (int64_t p = 0; p < s->n_params; p++)
        for (int64_t k = 0; k < s->params[p].view.numel; k++)
            m->grad_block[s->params[p].offset + k] = grad_of(rank, p);
    CHECK(size == 4 && ddp && mc_ddp_grad_sync(ddp) == MC_OK);
    bool f16 = grad_dt == MC_DTYPE_F16;
    int64_t bad = 0, seen = 0;
    for (int64_t p = 0; p < s->n_params; p++) {
        float *g = m->grad_block + s->params[p].offset;
        int64_t n = s->params[p].view.numel;
        if (dopt) /* this rank's reduce-scattered part of the parameter */
            mc_distopt_param_main_grad(d, p, &g, &n);
        for (int64_t k = 0; k < n; k++)
            bad += g[k] != want(p, f16);
        seen += n;
    }
    CHECK(bad == 0 && seen > 0);
    if (rank == 0)
        printf("%s, %s grads: %lld elements checked on rank 0, %lld wrong\n",
               dopt ? "distributed optimizer reduce-scatter" : "all-reduce",
               f16 ? "fp16" : "fp32", (long long)seen, (long long)bad);
    mc_ddp_free(ddp);
    mc_distopt_free(d);
    mc_ps_free(&ps);
    mc_gpt_model_free(m);
}

/* check_grads' bucket norm (--check-for-nan-in-loss-and-grad, on with a constant loss scale):
 * every grad 4096 (finite in fp16) over a bucket of more than 256 elements has a norm above
 * 65504, which as Megatron's fp16 norm tensor is inf: a fatal error with fp16 grads, every rank
 * alike (the check runs before the collective); fp32 grads pass. */
static void test_check_grads(void *world, enum mc_dtype grad_dt)
{
    struct mc_parallel_state ps;
    struct mc_ps_config pc = {1, 1, 1, 1, NULL};
    mc_gpt_model *m = tiny_model(grad_dt);
    CHECK(m && mc_ps_init(&ps, world, &pc) == MC_OK);
    if (!m)
        return;
    struct mc_ddp_config dc = {.grad_scale = mc_ddp_grad_scale(&ps, false),
                               .check_for_nan_in_grad = true};
    mc_ddp *ddp = NULL;
    CHECK(mc_ddp_init(&dc, mc_gpt_param_set(m), &ps, NULL, &ddp) == MC_OK);
    CHECK(m->n_elements > 256);
    for (int64_t i = 0; i < m->n_elements; i++)
        m->grad_block[i] = 4096.0f;
    mc_status st = ddp ? mc_ddp_grad_sync(ddp) : MC_ERR_INTERNAL;
    if (grad_dt == MC_DTYPE_F16)
        CHECK(st == MC_ERR_INTERNAL && strstr(mc_last_error(), "found Inf in local grad norm"));
    else
        CHECK(st == MC_OK);
    mc_ddp_free(ddp);
    mc_ps_free(&ps);
    mc_gpt_model_free(m);
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
    test_commit(MC_DTYPE_F16);
    test_commit(MC_DTYPE_F32);
    for (int dopt = 0; dopt < 2; dopt++) {
        test_reduce(&world, rank, size, dopt, MC_DTYPE_F16);
        test_reduce(&world, rank, size, dopt, MC_DTYPE_F32);
    }
    test_check_grads(&world, MC_DTYPE_F16);
    test_check_grads(&world, MC_DTYPE_F32);
    CHECK(mc_alloc_live_bytes() == live);
    int fails = test_summary("test_fp16_grad_buffer");
    int any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, world);
    MPI_Finalize();
    return any;
}
