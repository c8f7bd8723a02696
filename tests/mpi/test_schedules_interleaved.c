/* The interleaved schedule over MPI (run with 4 ranks): pipelines of 2 (two of them), 3 (one
 * rank sits out) and 4 stages run forward_backward_pipelining_with_interleaving for every case
 * of tests/golden/pipeline/interleaved_golden.txt with that pipeline size (vp 2 and 3, several
 * micro-batch counts and group sizes, overlapped and batched exchanges, training and
 * forward-only), with step callbacks that tag every activation and grad by (micro-batch,
 * virtual stage). Checked: each rank's sequence of steps and posted exchanges equals the line
 * Megatron's own function produced; every input and output grad is what the neighbouring
 * virtual stage sent for that micro-batch; the refused micro-batch counts give Megatron's
 * message; no buffer is leaked. Every case runs with fp32 and with bf16 messages (p2p.dt,
 * Megatron's pipeline_dtype): each value arrives as the bf16 the neighbour sent. The bf16 run
 * returns the callbacks' outputs in a test backend's memory, scrambled until its copy_to_host
 * unscrambles them: each value must still arrive right, every send through that copy op.
 * Ranks agree on pass/fail. */
#include "pipeline_parallel/pipeline_parallel.h"
#include "backend/backend.h"
#include "test.h"

#include "core/dtype.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 5 }; /* elements per message */

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

struct ctx {
    int rank, size, vp;
    enum mc_dtype dt; /* the messages' dtype: F32 or BF16 (out and dx hold N of it) */
    char trace[16384];
    float out[N], dx[N];
    int bad_values;
    bool on_dev; /* outputs in the test backend's memory (dev_out, dev_dx) */
    float dev_out[N], dev_dx[N];
    int64_t sends; /* outputs and input grads handed to the schedule to send */
};

static struct mc_tensor message(enum mc_dtype dt, void *data)
{
    return mc_tensor_view(data, dt, 1, (const int64_t[]){N});
}

/* A received message: dt, [N], host memory. */
static const void *got(struct ctx *x, const struct mc_tensor *t)
{
    if (!t)
        return NULL;
    x->bad_values += t->dtype != x->dt || t->ndim != 1 || t->shape[0] != N || t->backend;
    return t->data;
}

/* What a callback returns: host data as it is, or a scrambled copy in the test backend. */
static struct mc_tensor give(struct ctx *x, const float *host, float *dev_buf, bool sends)
{
    x->sends += sends;
    if (!x->on_dev)
        return message(x->dt, (void *)host);
    for (size_t i = 0; i < sizeof(x->out); i++)
        ((uint8_t *)dev_buf)[i] = ((const uint8_t *)host)[i] ^ 0x5a;
    struct mc_tensor t = message(x->dt, dev_buf);
    t.backend = &dev;
    return t;
}

static void on_event(void *c, const char *ev)
{
    struct ctx *x = c;
    if (strlen(x->trace) + strlen(ev) + 2 >= sizeof(x->trace))
        return;
    if (x->trace[0])
        strcat(x->trace, " ");
    strcat(x->trace, ev);
}

static float act(int64_t k, int vs) { return (float)(k * 1000 + vs); }
static float grd(int64_t k, int vs) { return (float)(-k * 1000 - vs - 1); }

static int vstage(const struct ctx *x, int chunk) { return chunk * x->size + x->rank; }

/* element i of a dt message; a value as the dt message carries it */
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

static void check_input(struct ctx *x, int vs, int64_t k, const void *input)
{
    if ((input == NULL) != (vs == 0))
        x->bad_values++;
    for (int i = 0; input && i < N; i++)
        x->bad_values += get(x, input, i) != as_dt(x, act(k, vs - 1) + (float)i);
}

static mc_status forward(void *c, int chunk, int64_t k, const struct mc_tensor *input,
                         struct mc_tensor *output)
{
    struct ctx *x = c;
    int vs = vstage(x, chunk);
    check_input(x, vs, k, got(x, input));
    for (int i = 0; i < N; i++)
        put(x, x->out, i, act(k, vs) + (float)i);
    *output = give(x, x->out, x->dev_out, vs < x->size * x->vp - 1);
    return MC_OK;
}

static mc_status backward(void *c, int chunk, int64_t k, const struct mc_tensor *input,
                          const struct mc_tensor *og, struct mc_tensor *input_grad)
{
    struct ctx *x = c;
    int vs = vstage(x, chunk), last = x->size * x->vp - 1;
    const void *output_grad = got(x, og);
    check_input(x, vs, k, got(x, input));
    if ((output_grad == NULL) != (vs == last))
        x->bad_values++;
    for (int i = 0; output_grad && i < N; i++)
        x->bad_values += get(x, output_grad, i) != as_dt(x, grd(k, vs + 1) * (float)(i + 1));
    for (int i = 0; i < N; i++)
        put(x, x->dx, i, grd(k, vs) * (float)(i + 1));
    *input_grad = give(x, x->dx, x->dev_dx, vs > 0);
    return MC_OK;
}

const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "leak_check_at_exit=0"; }

static char *golden;
static int cases_run;

static void load_golden(void)
{
    const char *src = getenv("MC_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/golden/pipeline/interleaved_golden.txt",
             src ? src : "..");
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

/* One golden line for this pipeline size and rank. */
static void run_line(MPI_Comm comm, int size, int rank, const char *line, enum mc_dtype dt,
                     bool on_dev)
{
    int pp, vp, ng, mm, r;
    char mode[16], kind[16];
    if (sscanf(line, "interleaved pp=%d vp=%d N=%d M=%d %15s %15s rank=%d", &pp, &vp, &ng, &mm,
               mode, kind, &r) != 7) {
        CHECK(0);
        return;
    }
    if (pp != size || r != rank)
        return;
    const char *want = strstr(line, " : ");
    CHECK(want != NULL);
    if (!want)
        return;
    want += 3;
    struct ctx x = {.rank = rank, .size = size, .vp = vp, .dt = dt, .on_dev = on_dev};
    struct mc_pp_p2p p = {.comm = &comm, .size = size, .rank = rank, .msg = message(dt, NULL),
                          .trace = on_event, .trace_ctx = &x};
    size_t copied = dev_copied;
    struct mc_pp_interleaved s;
    struct mc_pp_chunk_ops ops = {&x, forward, backward};
    CHECK(mc_pp_interleaved_init(&s, &p, vp, ng, !strcmp(mode, "overlap")) == MC_OK);
    mc_status st = mc_pp_forward_backward_pipelining_with_interleaving(&s, &ops, mm,
                                                                       !strcmp(kind, "forward"));
    cases_run++;
    if (!strncmp(want, "error ", 6)) {
        const char *msg = strstr(want, ": ");
        CHECK(st == MC_ERR_CONFIG);
        CHECK(msg && strstr(mc_last_error(), msg + 2) != NULL);
        if (msg && !strstr(mc_last_error(), msg + 2))
            fprintf(stderr, "%s\n  got error: %s\n", line, mc_last_error());
    } else {
        CHECK(st == MC_OK);
        CHECK(x.bad_values == 0);
        CHECK(dev_copied - copied == (on_dev ? (size_t)x.sends * mc_pp_msg_bytes(&p) : 0));
        if (strcmp(want, x.trace) != 0) {
            CHECK(0);
            fprintf(stderr, "%s\n  got: %s\n", line, x.trace);
        }
    }
    CHECK(s.n_free == s.n_pool); /* every buffer back in the pool */
    mc_pp_interleaved_free(&s);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    load_golden();
    for (int pp = 2; pp <= 4 && pp <= world; pp++) {
        int color = rank / pp < world / pp ? rank / pp : MPI_UNDEFINED;
        MPI_Comm c;
        MPI_Comm_split(MPI_COMM_WORLD, color, rank, &c);
        if (c == MPI_COMM_NULL)
            continue;
        MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
        for (char *l = golden; *l;) {
            char *e = strchr(l, '\n');
            size_t n = e ? (size_t)(e - l) : strlen(l);
            char line[16384];
            snprintf(line, sizeof(line), "%.*s", (int)n, l);
            run_line(c, pp, rank % pp, line, MC_DTYPE_F32, false);
            run_line(c, pp, rank % pp, line, MC_DTYPE_BF16, true);
            l += n + (e ? 1 : 0);
        }
        MPI_Comm_free(&c);
    }
    CHECK(cases_run > 100);
    free(golden);
    CHECK(mc_alloc_live_bytes() == 0);
    int fails = test_failures;
    MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    test_failures = fails;
    MPI_Finalize();
    return test_summary(rank == 0 ? "test_schedules_interleaved"
                                  : "test_schedules_interleaved (rank > 0)");
}
