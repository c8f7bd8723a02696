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
 * neighbour sent. They run once more with the callbacks' outputs in a test backend's memory,
 * whose bytes are scrambled until its copy_to_host unscrambles them: every value must arrive
 * right (a schedule that sent such a tensor in place would deliver the scrambled bytes), and
 * every send must go through that copy op. Messages of the wrong dtype or shape, and a
 * backend's tensor handed to p2p directly, are refused with MC_ERR_SHAPE before anything is
 * posted. Ranks agree on pass/fail. */
#include "pipeline_parallel/pipeline_parallel.h"
#include "backend/backend.h"
#include "test.h"

#include "core/dtype.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 6 }; /* elements per message */

/* The test backend: its memory holds every byte XOR 0x5a, so only its copy op reads it right. */
static size_t dev_copied; /* bytes through dev_copy_to_host */

static void dev_copy_to_host(struct mc_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)dst)[i] = ((const uint8_t *)src)[i] ^ 0x5a;
    dev_copied += bytes;
}

static const struct mc_backend_ops dev_ops = {.name = "test-device",
                                              .copy_to_host = dev_copy_to_host};
static struct mc_backend dev = {&dev_ops, "test-device", 1, NULL, MC_ROUNDING_FUSED};

/* host bytes into the test backend's representation */
static void dev_store(void *dst, const void *src, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)dst)[i] = ((const uint8_t *)src)[i] ^ 0x5a;
}

static struct mc_tensor message(enum mc_dtype dt, void *data)
{
    return mc_tensor_view(data, dt, 1, (const int64_t[]){N});
}

struct ctx {
    int rank, size;
    enum mc_dtype dt; /* the messages' dtype: F32 or BF16 */
    char trace[4096];
    float out[N], dx[N]; /* N elements of dt (bf16 uses the first half) */
    bool on_dev;         /* outputs in the test backend's memory (dev_out, dev_dx) */
    float dev_out[N], dev_dx[N];
    int64_t sends;       /* outputs and input grads handed to the schedule to send */
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

/* A received message: dt, [N], host memory. */
static const void *got(struct ctx *x, const struct mc_tensor *t)
{
    if (!t)
        return NULL;
    x->bad_values += t->dtype != x->dt || t->ndim != 1 || t->shape[0] != N || t->backend;
    return t->data;
}

/* What a callback returns: host data as it is, or its copy in the test backend's memory. */
static struct mc_tensor give(struct ctx *x, const float *host, float *dev_buf, bool sends)
{
    x->sends += sends;
    if (!x->on_dev)
        return message(x->dt, (void *)host);
    dev_store(dev_buf, host, sizeof(x->out));
    struct mc_tensor t = message(x->dt, dev_buf);
    t.backend = &dev;
    return t;
}

static mc_status forward(void *c, int64_t k, const struct mc_tensor *in, struct mc_tensor *output)
{
    struct ctx *x = c;
    const void *input = got(x, in);
    if ((input == NULL) != (x->rank == 0))
        x->bad_values++;
    for (int i = 0; input && i < N; i++)
        x->bad_values += get(x, input, i) != as_dt(x, act(k, x->rank - 1) + (float)i);
    for (int i = 0; i < N; i++)
        put(x, x->out, i, act(k, x->rank) + (float)i);
    *output = give(x, x->out, x->dev_out, x->rank < x->size - 1);
    return MC_OK;
}

static mc_status backward(void *c, int64_t k, const struct mc_tensor *in,
                          const struct mc_tensor *og, struct mc_tensor *input_grad)
{
    struct ctx *x = c;
    const void *input = got(x, in), *output_grad = got(x, og);
    if ((output_grad == NULL) != (x->rank == x->size - 1))
        x->bad_values++;
    for (int i = 0; input && i < N; i++) /* the schedule kept k's input */
        x->bad_values += get(x, input, i) != as_dt(x, act(k, x->rank - 1) + (float)i);
    for (int i = 0; output_grad && i < N; i++)
        x->bad_values += get(x, output_grad, i) != as_dt(x, grd(k, x->rank + 1) * (float)(i + 1));
    for (int i = 0; i < N; i++)
        put(x, x->dx, i, grd(k, x->rank) * (float)(i + 1));
    x->bad_sync += x->sync != (k == x->m - 1);
    *input_grad = give(x, x->dx, x->dev_dx, x->rank > 0);
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
                     enum mc_dtype dt, bool on_dev)
{
    struct ctx x = {.rank = rank, .size = size, .dt = dt, .m = m, .sync = -1, .on_dev = on_dev};
    struct mc_pp_p2p p = {.comm = size > 1 ? &comm : NULL, .size = size, .rank = rank,
                          .msg = message(dt, NULL), .trace = on_event, .trace_ctx = &x};
    size_t copied = dev_copied;
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
    /* every send of a backend's tensor was staged through its copy op, nothing else was */
    CHECK(dev_copied - copied == (on_dev ? (size_t)x.sends * mc_pp_msg_bytes(&p) : 0));
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

/* Messages that are not the pipeline's are refused on every stage before anything is posted
 * (so no neighbour is left waiting), with what was given and what was expected. */
static void check_refusals(const struct mc_pp_p2p *p)
{
    float buf[N + 1] = {0}, staged[N];
    struct mc_tensor wrong_dt = message(MC_DTYPE_BF16, buf);
    struct mc_tensor wrong_shape = mc_tensor_view(buf, MC_DTYPE_F32, 1, (const int64_t[]){N + 1});
    struct mc_tensor on_dev = message(MC_DTYPE_F32, buf), out;
    on_dev.backend = &dev;
    bool first = p->rank == 0;
    CHECK((first ? mc_pp_send_forward(p, &wrong_dt) : mc_pp_recv_forward(p, &wrong_dt)) ==
          MC_ERR_SHAPE);
    CHECK(strstr(mc_last_error(), "is bfloat16 [6]; the pipeline's messages are float32 [6]") !=
          NULL);
    CHECK((first ? mc_pp_send_forward(p, &wrong_shape) : mc_pp_recv_forward(p, &wrong_shape)) ==
          MC_ERR_SHAPE);
    CHECK(strstr(mc_last_error(), "is float32 [7]") != NULL);
    CHECK((first ? mc_pp_send_forward(p, &on_dev) : mc_pp_recv_forward(p, &on_dev)) ==
          MC_ERR_SHAPE);
    CHECK(strstr(mc_last_error(), "in a backend's memory") != NULL);
    /* staging: a host message stays in place, a backend's goes through its copy op */
    struct mc_tensor host = message(MC_DTYPE_F32, buf);
    size_t copied = dev_copied;
    CHECK(mc_pp_stage_msg(p, &host, staged, "host", &out) == MC_OK && out.data == buf);
    CHECK(mc_pp_stage_msg(p, &on_dev, staged, "device", &out) == MC_OK && out.data == staged &&
          !out.backend && dev_copied - copied == sizeof(staged));
    CHECK(mc_pp_stage_msg(p, &wrong_shape, staged, "the forward step's output", &out) ==
          MC_ERR_SHAPE);
    CHECK(strstr(mc_last_error(), "the forward step's output is float32 [7]") != NULL);
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
            run_case(c, pp, rank % pp, ms[i], false, MC_DTYPE_F32, false);
            run_case(c, pp, rank % pp, ms[i], true, MC_DTYPE_F32, false);
            if (pp > 1) {
                run_case(c, pp, rank % pp, ms[i], false, MC_DTYPE_BF16, false);
                run_case(c, pp, rank % pp, ms[i], false, MC_DTYPE_BF16, true);
                run_case(c, pp, rank % pp, ms[i], true, MC_DTYPE_F32, true);
            }
        }
        struct ctx x = {.rank = rank % pp, .size = pp};
        struct mc_pp_p2p p = {.comm = pp > 1 ? &c : NULL, .size = pp, .rank = rank % pp,
                              .msg = message(MC_DTYPE_F32, NULL)};
        struct mc_pp_schedule s;
        struct mc_pp_step_ops ops = {&x, forward, backward, NULL};
        CHECK(mc_pp_schedule_init(&s, &p) == MC_OK);
        CHECK(mc_pp_forward_backward_pipelining_without_interleaving(&s, &ops, 0, false) ==
              MC_ERR_CONFIG);
        CHECK(strstr(mc_last_error(), "number of micro-batches 0") != NULL);
        mc_pp_schedule_free(&s);
        if (pp > 1)
            check_refusals(&p);
        MPI_Comm_free(&c);
    }
    /* the embedding group: first and last stage of a 4-stage pipeline */
    if (world == 4) {
        struct mc_pp_p2p p = {.comm = &(MPI_Comm){MPI_COMM_WORLD}, .size = 4, .rank = rank,
                              .msg = message(MC_DTYPE_F32, NULL)};
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
