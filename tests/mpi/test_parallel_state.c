/* parallel_state over MPI (4 ranks): (1) the RankGenerator groups of ~3900 (tp, ep, dp, pp,
 * cp, order, token) cases equal Megatron's, read from tests/golden/parallel/rank_layout.txt
 * (made by running Megatron's own RankGenerator, see its README; tests/parallel/
 * test_rank_layout_golden.py re-checks the golden against Megatron live); (2) mc_ps_init builds
 * communicators whose sizes, ranks and members match those groups for every (tp, pp, cp) that
 * divides 4, and an all-reduce over each group sums exactly its members; (3) bad sizes and
 * orders are refused with clear errors; (4) the DDP grad sync averages a model's grads. */
#include "distributed/ddp.h"
#include "models/gpt/gpt_model.h"
#include "parallel_state/parallel_state.h"
#include "test.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "leak_check_at_exit=0"; }

static int format_groups(char *out, size_t cap, const int *ranks, int ng, int gs)
{
    size_t len = 0;
    out[0] = '\0';
    for (int g = 0; g < ng; g++)
        for (int m = 0; m < gs && len < cap; m++)
            len += (size_t)snprintf(out + len, cap - len, "%s%d",
                                    m ? "," : (g ? ";" : ""), ranks[g * gs + m]);
    return len < cap;
}

/* (1): every golden line. */
static void check_golden(void)
{
    char path[1024];
    const char *src = getenv("MC_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/golden/parallel/rank_layout.txt", src ? src : "..");
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    static char line[65536], got[65536];
    int ranks[4096], n = 0, bad = 0;
    while (fgets(line, sizeof line, f)) {
        int tp, ep, dp, pp, cp, off = 0;
        char order[64], token[32];
        if (sscanf(line, "%d %d %d %d %d %63s %31s %n", &tp, &ep, &dp, &pp, &cp, order, token,
                   &off) != 7) {
            CHECK(!"malformed golden line");
            break;
        }
        char *want = line + off;
        want[strcspn(want, "\n")] = '\0';
        struct mc_rank_gen g;
        int ng = 0, gs = 0;
        bool ok = mc_rank_gen_init(&g, tp, ep, dp, pp, cp, order, 0) == MC_OK &&
                  g.world <= 4096 &&
                  mc_rank_gen_get_ranks(&g, token, ranks, &ng, &gs) == MC_OK &&
                  format_groups(got, sizeof got, ranks, ng, gs) && !strcmp(got, want);
        if (!ok && bad++ < 5)
            fprintf(stderr, "layout mismatch: tp %d ep %d dp %d pp %d cp %d %s %s\n  got  %s\n"
                            "  want %s\n", tp, ep, dp, pp, cp, order, token, got, want);
        n++;
    }
    fclose(f);
    CHECK(n > 3000);
    CHECK(bad == 0);
}

/* (2): the communicators of one configuration on this world. */
static void check_groups(int tp, int pp, int cp, const char *order, MPI_Comm *world, int me)
{
    struct mc_parallel_state ps;
    struct mc_ps_config c = {tp, pp, cp, 1, order};
    mc_status st = mc_ps_init(&ps, world, &c);
    CHECK(st == MC_OK);
    if (st) {
        fprintf(stderr, "rank %d: %s\n", me, mc_last_error());
        return;
    }
    CHECK(ps.dp * tp * pp * cp == ps.world);
    for (int k = 0; k < MC_PS_NUM_GROUPS; k++) {
        const struct mc_ps_comm *g = &ps.group[k];
        int size = 0, rank = -1;
        MPI_Comm comm = *(MPI_Comm *)g->comm;
        MPI_Comm_size(comm, &size);
        MPI_Comm_rank(comm, &rank);
        CHECK(size == g->size && rank == g->rank && g->ranks[g->rank] == me);
        /* sum of world ranks over the communicator = sum of the listed members */
        int64_t sum = me, want = 0;
        for (int i = 0; i < g->size; i++)
            want += g->ranks[i];
        CHECK(mc_comm_all_reduce(g->comm, &sum, 1, MC_DTYPE_I64, MC_COMM_SUM, "test") == MC_OK);
        CHECK(sum == want);
    }
    if (!order) { /* default order: rank = tp_rank + tp*(cp_rank + cp*(dp_rank + dp*pp_rank)) */
        CHECK(mc_ps_rank(&ps, MC_PS_TP) == me % tp);
        CHECK(mc_ps_rank(&ps, MC_PS_CP) == (me / tp) % cp);
        CHECK(mc_ps_rank(&ps, MC_PS_DP) == (me / (tp * cp)) % ps.dp);
        CHECK(mc_ps_rank(&ps, MC_PS_PP) == me / (tp * cp * ps.dp));
        CHECK(mc_ps_src_rank(&ps, MC_PS_TP) == me - me % tp);
        CHECK(mc_ps_is_pipeline_last_stage(&ps) == (me / (tp * cp * ps.dp) == pp - 1));
    }
    mc_ps_free(&ps);
}

static void check_errors(MPI_Comm *world)
{
    struct mc_parallel_state ps;
    struct mc_ps_config c = {3, 1, 1, 1, NULL};
    CHECK(mc_ps_init(&ps, world, &c) == MC_ERR_CONFIG); /* 4 % 3 */
    CHECK(strstr(mc_last_error(), "not divisible") != NULL);
    c = (struct mc_ps_config){2, 1, 1, 1, "tp-xx-dp"};
    CHECK(mc_ps_init(&ps, world, &c) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "xx") != NULL);
    c = (struct mc_ps_config){2, 2, 1, 1, "tp-dp"}; /* pp > 1 missing from the order */
    CHECK(mc_ps_init(&ps, world, &c) == MC_ERR_CONFIG);
    c = (struct mc_ps_config){1, 1, 1, 2, NULL};
    CHECK(mc_ps_init(&ps, world, &c) == MC_ERR_UNSUPPORTED);
    struct mc_rank_gen g;
    CHECK(mc_rank_gen_init(&g, 1, 2, 1, 1, 2, NULL, 0) == MC_ERR_CONFIG); /* ep and cp */
}

/* (4): every rank sets its grads to (rank + 1) * x; after the sync they equal mean * x. */
static void check_ddp(MPI_Comm *world, int me, int world_size)
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
    struct mc_parallel_state ps;
    struct mc_ps_config pc = {1, 1, 1, 1, NULL};
    mc_status st = mc_gpt_model_init(&c, &m);
    if (st == MC_OK && (st = mc_ps_init(&ps, world, &pc)) != MC_OK)
        mc_gpt_model_free(m);
    CHECK(st == MC_OK);
    if (st) {
        fprintf(stderr, "rank %d: %s\n", me, mc_last_error());
        return;
    }
    for (int64_t i = 0; i < m->n_elements; i++)
        m->grad_block[i] = (float)(me + 1) * (float)(i % 7);
    CHECK(mc_ddp_finish_grad_sync(mc_gpt_param_set(m), &ps, mc_ddp_grad_scale(&ps, false)) ==
          MC_OK);
    float mean = (float)(world_size + 1) / 2.0f;
    int bad = 0;
    for (int64_t i = 0; i < m->n_elements; i++)
        bad += m->grad_block[i] != mean * (float)(i % 7);
    CHECK(bad == 0);
    CHECK(mc_ddp_grad_scale(&ps, true) == 1.0f);
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
    if (rank == 0)
        check_golden();
    static const int cfg[][3] = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {1, 2, 1}, {2, 2, 1},
                                 {1, 4, 1}, {1, 1, 2}, {2, 1, 2}, {1, 2, 2}, {1, 1, 4}};
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        if (size % (cfg[i][0] * cfg[i][1] * cfg[i][2]) == 0) {
            check_groups(cfg[i][0], cfg[i][1], cfg[i][2], NULL, &world, rank);
            check_groups(cfg[i][0], cfg[i][1], cfg[i][2], "pp-dp-cp-tp", &world, rank);
        }
    check_errors(&world);
    check_ddp(&world, rank, size);
    CHECK(mc_alloc_live_bytes() == 0);
    int local = test_failures, total = 0;
    MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, world);
    if (rank == 0)
        printf("test_parallel_state (world %d): %d checks on rank 0, %d failures over all ranks\n",
               size, test_checks, total);
    MPI_Finalize();
    return total ? 1 : 0;
}
