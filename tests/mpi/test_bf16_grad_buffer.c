/* Megatron's bf16 gradient buffer (--bf16 --grad-reduce-in-bf16: DDP's grad_data in bf16) at
 * every rounding point, on hand-picked values whose bf16 results follow from the bfloat16
 * format (8-bit significand, round to nearest, ties to even; the fp32 exponent range), not
 * from our conversion code:
 * - the weight-grad commit (DDP's main_grad.add_(param.grad), one per micro-batch): 1 + 2^-8
 *   is a tie and stays 1; 1 + 3 * 2^-8 is a tie that rounds up to 1 + 2^-6 (the even
 *   neighbour); 256 + 1 + 1 over two micro-batches stays 256 (fp32 accumulation gives 258);
 *   the largest bf16 value (2 - 2^-7) * 2^127 plus 2^118, a quarter of its ulp, stays there;
 * - the data-parallel all-reduce (start_grad_sync: grad_data *= 1/dp, then the sum, both in the
 *   bf16 buffer) over 4 ranks, with and without the distributed optimizer (its reduce-scatter
 *   into this rank's shard): 256 on rank 0 and 1 on rank 1 give 64 + 0.25, a tie that rounds
 *   to 64 in any summation order (fp32 keeps 64.25); 2^-133 (bf16's smallest subnormal) on
 *   every rank is 2^-135 after the 1/4, below half of it, so each rank's share and the sum
 *   are 0 (fp32: 4 * 2^-135); 1.0 on every rank stays 1.0.
 * With fp32 grads (the same model without grad_dtype) every one of these keeps the exact sum;
 * with an fp16 buffer (the same code's other 16-bit dtype) several come out otherwise. */
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
        *t = mc_f32_to_bf16(gs[k]);
        CHECK(mc_bf16_to_f32(*t) == gs[k]); /* every param.grad here is a bf16 value */
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
    struct mc_tp_group g = {1, 0, NULL, false, MC_DTYPE_BF16, be, NULL, NULL, grad_dt};
    g.wgrad = be->ops->alloc(be, 2 * sizeof(uint16_t));
    CHECK(g.wgrad != NULL);
    bool b16 = grad_dt == MC_DTYPE_BF16;
    float two[2] = {1.0f, 1.0f};
    float tie = ldexpf(1.0f, -8), up = 3.0f * ldexpf(1.0f, -8);
    CHECK(commit_all(&g, 1.0f, &tie, 1) == (b16 ? 1.0f : 1.0f + tie));
    CHECK(commit_all(&g, 1.0f, &up, 1) == (b16 ? 1.0f + ldexpf(1.0f, -6) : 1.0f + up));
    CHECK(commit_all(&g, 256.0f, two, 2) == (b16 ? 256.0f : 258.0f));
    float top = ldexpf(2.0f - ldexpf(1.0f, -7), 127), quarter = ldexpf(1.0f, 118);
    CHECK(commit_all(&g, top, &quarter, 1) == (b16 ? top : top + quarter));
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
    c.params_dtype = MC_DTYPE_BF16;
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
    case 0: return rank == 0 ? 256.0f : rank == 1 ? 1.0f : 0.0f;
    case 1: return ldexpf(1.0f, -133);
    default: return 1.0f;
    }
}

static float want(int64_t p, bool b16)
{
    switch (p % 3) {
    case 0: return b16 ? 64.0f : 64.25f;
    case 1: return b16 ? 0.0f : ldexpf(1.0f, -133); /* 4 * 2^-135 */
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
    oc.bf16 = true;
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
    bool b16 = grad_dt == MC_DTYPE_BF16;
    int64_t bad = 0, seen = 0;
    for (int64_t p = 0; p < s->n_params; p++) {
        float *g = m->grad_block + s->params[p].offset;
        int64_t n = s->params[p].view.numel;
        if (dopt) /* this rank's reduce-scattered part of the parameter */
            mc_distopt_param_main_grad(d, p, &g, &n);
        for (int64_t k = 0; k < n; k++)
            bad += g[k] != want(p, b16);
        seen += n;
    }
    CHECK(bad == 0 && seen > 0);
    if (rank == 0)
        printf("%s, %s grads: %lld elements checked on rank 0, %lld wrong\n",
               dopt ? "distributed optimizer reduce-scatter" : "all-reduce",
               b16 ? "bf16" : "fp32", (long long)seen, (long long)bad);
    mc_ddp_free(ddp);
    mc_distopt_free(d);
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
    test_commit(MC_DTYPE_BF16);
    test_commit(MC_DTYPE_F32);
    for (int dopt = 0; dopt < 2; dopt++) {
        test_reduce(&world, rank, size, dopt, MC_DTYPE_BF16);
        test_reduce(&world, rank, size, dopt, MC_DTYPE_F32);
    }
    CHECK(mc_alloc_live_bytes() == live);
    int fails = test_summary("test_bf16_grad_buffer");
    int any = 0;
    MPI_Allreduce(&fails, &any, 1, MPI_INT, MPI_MAX, world);
    MPI_Finalize();
    return any;
}
