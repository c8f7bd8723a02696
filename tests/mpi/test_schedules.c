/* The pipeline schedules over MPI (run with 4 ranks): the world is split into pipelines of
 * 1 (no pipelining), 2, 3 and 4 stages, and each stage runs forward_backward_no_pipelining or
 * the 1F1B schedule for 1..8 micro-batches, training and forward-only, with step callbacks
 * that tag every activation and grad by (micro-batch, stage). Checked: each rank's sequence of
 * forward steps, backward steps and exchanges equals the line of
 * tests/golden/pipeline/schedules_golden.txt written by running Megatron's own schedule
 * functions; every received activation and grad is the one the neighbour sent for that
 * micro-batch; every backward but the last micro-batch's runs under no_sync (set_grad_sync
 * false), the last one's with the grad sync on, as Megatron's no_sync_func / enable_grad_sync;
 * zero micro-batches are refused. The 1F1B cases run again with bf16 messages (Megatron's
 * pipeline_dtype = params_dtype): the same order, each value arriving as the bf16 the
 * neighbour sent. Ranks agree on pass/fail. */
#include "pipeline_parallel/pipeline_parallel.h"
#include "test.h"

#include "core/dtype.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 6 }; /* elements per message */

struct ctx {
    int rank, size;
    enum mc_dtype dt; /* the messages' dtype: F32 or BF16 */
    char trace[4096];
    float out[N], dx[N]; /* N elements of dt (bf16 uses the first half) */
    int bad_values;
    int64_t m;      /* micro-batches of the case */
    int sync;       /* the last set_grad_sync (-1: never called) */
    int bad_sync;   /* backwards whose grad sync was not (k == m - 1) */
};

static void set_sync(void *c, bool sync)
{
    struct ctx *x = c;
    x->sync = sync;
}

static void on_event(void *c, const char *ev)
{
    struct ctx *x = c;
    if (x->trace[0])
        strcat(x->trace, " ");
    strcat(x->trace, ev);
}

static float act(int64_t k, int stage) { return (float)(k * 100 + stage); }
static float grd(int64_t k, int stage) { return (float)(-k * 100 - stage - 1); }

/* element i of a message of dt, and the value it should hold (v rounded to dt) */
static float get(const struct ctx *x, const void *buf, int i)
{
    return x->dt == MC_DTYPE_BF16 ? mc_bf16_to_f32(((const uint16_t *)buf)[i])
                                  : ((const float *)buf)[i];
}

static void put(const struct ctx *x, void *buf, int i, float v)
{
    if (x->dt == MC_DTYPE_BF16)
        ((uint16_t *)buf)[i] = mc_f32_to_bf16(v);
    else
        ((float *)buf)[i] = v;
}

static float as_dt(const struct ctx *x, float v)
{
    return x->dt == MC_DTYPE_BF16 ? mc_bf16_to_f32(mc_f32_to_bf16(v)) : v;
}

static mc_status forward(void *c, int64_t k, const void *input, const void **output)
{
    struct ctx *x = c;
    if ((input == NULL) != (x->rank == 0))
        x->bad_values++;
    for (int i = 0; input && i < N; i++)
        x->bad_values += get(x, input, i) != as_dt(x, act(k, x->rank - 1) + (float)i);
    for (int i = 0; i < N; i++)
        put(x, x->out, i, act(k, x->rank) + (float)i);
    *output = x->out;
    return MC_OK;
}

static mc_status backward(void *c, int64_t k, const void *input, const void *output_grad,
                          const void **input_grad)
{
    struct ctx *x = c;
    if ((output_grad == NULL) != (x->rank == x->size - 1))
        x->bad_values++;
    for (int i = 0; input && i < N; i++) /* the schedule kept k's input */
        x->bad_values += get(x, input, i) != as_dt(x, act(k, x->rank - 1) + (float)i);
    for (int i = 0; output_grad && i < N; i++)
        x->bad_values += get(x, output_grad, i) != as_dt(x, grd(k, x->rank + 1) * (float)(i + 1));
    for (int i = 0; i < N; i++)
        put(x, x->dx, i, grd(k, x->rank) * (float)(i + 1));
    x->bad_sync += x->sync != (k == x->m - 1);
    *input_grad = x->dx;
    return MC_OK;
}

static char *golden;

/* Open MPI keeps allocations until exit that LeakSanitizer reports; our own memory is checked
 * with mc_alloc_live_bytes instead. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "leak_check_at_exit=0"; }

static const char *find_golden(const char *key)
{
    static char line[4096];
    const char *p = strstr(golden, key);
    if (!p)
        return NULL;
    p += strlen(key);
    size_t n = strcspn(p, "\n");
    snprintf(line, sizeof(line), "%.*s", (int)n, p);
    return line;
}

static void run_case(MPI_Comm comm, int size, int rank, int64_t m, bool forward_only,
                     enum mc_dtype dt)
{
    struct ctx x = {.rank = rank, .size = size, .dt = dt, .m = m, .sync = -1};
    struct mc_pp_p2p p = {size > 1 ? &comm : NULL, size, rank, N, on_event, &x, false, dt};
    struct mc_pp_schedule s;
    struct mc_pp_step_ops ops = {&x, forward, backward, set_sync};
    CHECK(mc_pp_schedule_init(&s, &p) == MC_OK);
    mc_status st = size == 1 ? mc_pp_forward_backward_no_pipelining(&s, &ops, m, forward_only)
                             : mc_pp_forward_backward_pipelining_without_interleaving(&s, &ops, m,
                                                                                      forward_only);
    CHECK(st == MC_OK);
    CHECK(x.bad_values == 0);
    CHECK(x.bad_sync == 0);
    CHECK(forward_only ? x.sync == -1 : x.sync == 1); /* forward only: no grads to sync */
    char key[128];
    snprintf(key, sizeof(key), "%s pp=%d rank=%d M=%lld %s : ", size == 1 ? "no_pipelining" : "1f1b",
             size, rank, (long long)m, forward_only ? "forward" : "train");
    const char *want = find_golden(key);
    CHECK(want != NULL);
    if (want && strcmp(want, x.trace) != 0) {
        CHECK(0);
        fprintf(stderr, "%s\n  want: %s\n  got:  %s\n", key, want, x.trace);
    }
    mc_pp_schedule_free(&s);
}

static void load_golden(void)
{
    const char *src = getenv("MC_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/golden/pipeline/schedules_golden.txt", src ? src : "..");
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    golden = calloc((size_t)n + 1, 1);
    CHECK(fread(golden, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    load_golden();
    static const int64_t ms[] = {1, 2, 3, 4, 5, 8};
    for (int pp = 1; pp <= 4 && pp <= world; pp++) {
        /* pipelines of pp consecutive ranks; ranks past the last whole pipeline sit out */
        int color = rank / pp < world / pp ? rank / pp : MPI_UNDEFINED;
        MPI_Comm c;
        MPI_Comm_split(MPI_COMM_WORLD, color, rank, &c);
        if (c == MPI_COMM_NULL)
            continue;
        MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
            if (pp == 1 && ms[i] == 4)
                continue; /* not in the golden */
            if (pp == 1 && ms[i] == 8)
                continue;
            run_case(c, pp, rank % pp, ms[i], false, MC_DTYPE_F32);
            run_case(c, pp, rank % pp, ms[i], true, MC_DTYPE_F32);
            if (pp > 1)
                run_case(c, pp, rank % pp, ms[i], false, MC_DTYPE_BF16);
        }
        struct ctx x = {.rank = rank % pp, .size = pp};
        struct mc_pp_p2p p = {pp > 1 ? &c : NULL, pp, rank % pp, N, NULL, NULL, false,
                              MC_DTYPE_F32};
        struct mc_pp_schedule s;
        struct mc_pp_step_ops ops = {&x, forward, backward, NULL};
        CHECK(mc_pp_schedule_init(&s, &p) == MC_OK);
        CHECK(mc_pp_forward_backward_pipelining_without_interleaving(&s, &ops, 0, false) ==
              MC_ERR_CONFIG);
        CHECK(strstr(mc_last_error(), "number of micro-batches 0") != NULL);
        mc_pp_schedule_free(&s);
        MPI_Comm_free(&c);
    }
    /* the embedding group: first and last stage of a 4-stage pipeline */
    if (world == 4) {
        struct mc_pp_p2p p = {&(MPI_Comm){MPI_COMM_WORLD}, 4, rank, N, NULL, NULL, false,
                              MC_DTYPE_F32};
        void *eg = NULL;
        CHECK(mc_pp_embedding_group_init(&p, &eg) == MC_OK);
        CHECK((eg != NULL) == (rank == 0 || rank == 3));
        if (eg) {
            int n = 0;
            MPI_Comm_size(*(MPI_Comm *)eg, &n);
            CHECK(n == 2);
        }
        mc_pp_group_free(eg);
    }
    free(golden);
    CHECK(mc_alloc_live_bytes() == 0);
    int fails = test_failures;
    MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    test_failures = fails;
    MPI_Finalize();
    return test_summary(rank == 0 ? "test_schedules" : "test_schedules (rank > 0)");
}
