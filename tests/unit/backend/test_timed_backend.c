/* The timed backend wrapper (src/backend/timed, bench_train_step --breakdown) changes no number:
 * the same ops on the wrapped and on the bare CPU backend give the same bytes (GEMM, LayerNorm,
 * GELU, cross-entropy, AdamW, the sum of squares' double), its table is complete, and its report
 * counts the calls of each op class and GEMM shape (and reset clears them). */
#include "backend/backend.h"
#include "backend/timed/timed_backend.h"
#include "megatron.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float urand(void)
{
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)(rs >> 40) / 16777216.0f - 0.5f;
}

enum { M = 64, N = 48, K = 32, V = 40 };

struct bufs {
    float a[M * K], b[N * K], c[M * N], y[M * K], mean[M], rstd[M], g[M * N];
    float xmax[M], sumexp[M], tl[M], dl[M * V], p[M * N], m[M * N], v[M * N];
    double sq;
};

/* A few ops of each kind on be, from the same inputs. */
static void run_ops(struct mc_backend *be, struct bufs *o, const float *logits,
                    const int64_t *target, const float *dloss)
{
    const struct mc_backend_ops *ops = be->ops;
    ops->gemm(be, false, true, M, N, K, 1.0f, o->a, MC_DTYPE_F32, K, o->b, MC_DTYPE_F32, K, 0.0f,
              o->c, MC_DTYPE_F32, N, MC_DTYPE_F32);
    ops->gemm(be, false, true, M, N, K, 1.0f, o->a, MC_DTYPE_F32, K, o->b, MC_DTYPE_F32, K, 1.0f,
              o->c, MC_DTYPE_F32, N, MC_DTYPE_F32);
    ops->layernorm_fwd(be, MC_DTYPE_F32, o->y, o->mean, o->rstd, o->a, o->b, o->b + K, M, K,
                       1e-5f);
    ops->gelu_tanh_fwd(be, MC_DTYPE_F32, o->g, o->c, o->b, M, N);
    ops->xent_max(be, MC_DTYPE_F32, o->xmax, logits, M, V);
    ops->xent_sumexp(be, MC_DTYPE_F32, o->sumexp, o->tl, logits, o->xmax, target, M, V, 0);
    ops->xent_bwd(be, MC_DTYPE_F32, o->dl, logits, o->xmax, o->sumexp, target, dloss, M, V, 0);
    ops->adamw(be, MC_DTYPE_F32, MC_DTYPE_F32, o->p, o->m, o->v, o->g, M * N, 1e-3f, 0.9f,
               0.999f, 1e-8f, 0.01f, 1);
    o->sq = ops->sumsq(be, MC_DTYPE_F32, o->p, M * N);
}

int main(void)
{
    static struct bufs in, bare, timed;
    static float logits[M * V], dloss[M];
    static int64_t target[M];
    for (int i = 0; i < M * K; i++)
        in.a[i] = urand();
    for (int i = 0; i < N * K; i++)
        in.b[i] = urand();
    for (int i = 0; i < M * N; i++)
        in.p[i] = urand(), in.m[i] = 0.1f * urand(), in.v[i] = 0.01f * (urand() + 0.5f);
    for (int i = 0; i < M * V; i++)
        logits[i] = 4.0f * urand();
    for (int i = 0; i < M; i++)
        target[i] = i % V, dloss[i] = 1.0f / M;
    bare = in, timed = in;

    struct mc_backend *cpu = NULL, *tb = NULL;
    CHECK(mc_backend_create(NULL, &cpu) == MC_OK);
    CHECK(mc_timed_backend_create(cpu, &tb) == MC_OK);
    CHECK(tb->ops->version == MC_BACKEND_VERSION && tb->n_threads == cpu->n_threads);
    /* every op slot filled (the ops follow name and supports in the table) */
    const void *const *slot = (const void *const *)&tb->ops->supports;
    const void *const *end = (const void *const *)(tb->ops + 1);
    int nulls = 0;
    for (; slot < end; slot++)
        nulls += *slot == NULL;
    CHECK(nulls == 0);
    enum mc_dtype f32 = MC_DTYPE_F32;
    CHECK(tb->ops->supports(tb, MC_OP_LAYERNORM, &f32, 1) ==
          cpu->ops->supports(cpu, MC_OP_LAYERNORM, &f32, 1));

    run_ops(cpu, &bare, logits, target, dloss);
    run_ops(tb, &timed, logits, target, dloss);
    CHECK(memcmp(&bare, &timed, sizeof bare) == 0); /* every output byte, the double included */

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mc_timed_backend_report(tb, f, 1, 1.0, 1.0);
    fclose(f);
    /* two calls of the one GEMM shape (NT: a Linear's forward), three cross-entropy ops */
    CHECK(strstr(text, "gemm NT 64x48x32 (fwd)") != NULL);
    const char *row = strstr(text, "gemm NT 64x48x32");
    CHECK(row && strtod(row + 44, NULL) == 2.0);
    row = strstr(text, "cross-entropy (vocab)");
    CHECK(row && strtod(row + 44, NULL) == 3.0);
    CHECK(strstr(text, "rest (outside backend ops)") != NULL);
    free(text);

    mc_timed_backend_reset(tb);
    text = NULL;
    f = open_memstream(&text, &len);
    mc_timed_backend_report(tb, f, 1, 1.0, 1.0);
    fclose(f);
    CHECK(strstr(text, "cross-entropy") == NULL && strstr(text, "gemm NT") == NULL);
    free(text);

    mc_timed_backend_free(tb);
    mc_backend_free(cpu);
    return test_summary("test_timed_backend");
}
