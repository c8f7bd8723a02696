/* The CPU backend: the ops of backend.h on host memory, each bound to the kernel of the same
 * name in the instance's kernel table (the references, or the AVX-512 kernels chosen by
 * select.c). fp32 calls the kernel directly (those numbers never change); BF16/F16 run the
 * reference semantics of backend.h: inputs widened to fp32 (exact), the fp32 kernel, each
 * output rounded once (half_cpu.h), parameter grads by the ADD rule. supports() says which
 * dtypes; an op called with another stops the process naming the op. Buffers are host memory
 * from mc_alloc; the copies are memcpy and sync has nothing to wait for (every op has returned
 * when its call does). */
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/half_cpu.h"
#include "backend/cpu/kernels/kernels_avx512.h"
#include "backend/cpu/kernels/ref.h"
#include "core/dtype.h"

#include "core/rng.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define K(be) mc_cpu_kernels_of(be)

void mc_cpu_need_f32(enum mc_dtype dt, const char *op)
{
    if (dt == MC_DTYPE_F32)
        return;
    mc_log(MC_LOG_ERROR, "backend cpu: op %s is implemented for float32 only, not %s "
           "(ask supports() first)", op, mc_dtype_name(dt));
    abort();
}

static bool is_float_dt(enum mc_dtype t)
{
    return t == MC_DTYPE_F32 || t == MC_DTYPE_BF16 || t == MC_DTYPE_F16;
}

static bool gemm_types_ok(enum mc_dtype a, enum mc_dtype b, enum mc_dtype c, enum mc_dtype comp);

void mc_cpu_need_half(enum mc_dtype dt, const char *op)
{
    if (dt == MC_DTYPE_BF16 || dt == MC_DTYPE_F16)
        return;
    mc_log(MC_LOG_ERROR, "backend cpu: op %s is implemented for float32, bfloat16 and float16, "
           "not %s (ask supports() first)", op, mc_dtype_name(dt));
    abort();
}

/* The dtype list each op takes (enum mc_backend_op) and what the CPU backend implements. */
static bool cpu_supports(const struct mc_backend *be, enum mc_backend_op op,
                         const enum mc_dtype *dtypes, int n)
{
    (void)be;
    int want = op == MC_OP_BUFFER ? 0 : op == MC_OP_GEMM ? 4
               : op == MC_OP_ADAMW || op == MC_OP_SGD || op == MC_OP_CONVERT ||
                       op == MC_OP_ACCUMULATE ? 2 : 1;
    if ((int)op < 0 || op >= MC_OP_COUNT || n != want)
        return false;
    if (op == MC_OP_DROPOUT_MASK)
        return dtypes[0] == MC_DTYPE_U8;
    if (op == MC_OP_GEMM)
        return gemm_types_ok(dtypes[0], dtypes[1], dtypes[2], dtypes[3]);
    for (int i = 0; i < n; i++) /* every other op: each tensor F32, BF16 or F16 */
        if (!is_float_dt(dtypes[i]))
            return false;
    return true;
}

/* Stops the process when convert/accumulate get a dtype other than F32, BF16, F16. */
static void need_float(enum mc_dtype dt, const char *op)
{
    if (is_float_dt(dt))
        return;
    mc_log(MC_LOG_ERROR, "backend cpu: op %s takes float32, bfloat16 or float16, not %s", op,
           mc_dtype_name(dt));
    abort();
}

/* ---- buffers: host memory --------------------------------------------------------------- */

static void *cpu_alloc(struct mc_backend *be, size_t bytes)
{
    (void)be;
    return mc_alloc(bytes);
}

static void cpu_free(struct mc_backend *be, void *p)
{
    (void)be;
    mc_free(p);
}

static void cpu_copy(struct mc_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_set(struct mc_backend *be, void *dst, int byte, size_t bytes)
{
    (void)be;
    if (bytes)
        memset(dst, byte, bytes);
}

static void cpu_sync(struct mc_backend *be) { (void)be; }

/* ---- dtype conversion ---------------------------------------------------------------------- */

static void cpu_convert(struct mc_backend *be, void *dst, enum mc_dtype dst_dt, const void *src,
                        enum mc_dtype src_dt, int64_t n)
{
    need_float(dst_dt, "convert (dst)");
    need_float(src_dt, "convert (src)");
    K(be)->convert(dst, dst_dt, src, src_dt, n);
}

static void cpu_accumulate(struct mc_backend *be, void *dst, enum mc_dtype dst_dt,
                           const void *src, enum mc_dtype src_dt, int64_t n)
{
    need_float(dst_dt, "accumulate (dst)");
    need_float(src_dt, "accumulate (src)");
    K(be)->accumulate(dst, dst_dt, src, src_dt, n);
}

/* ---- ops: the kernel table; 16-bit dtypes staged through fp32 (half_cpu.h) ---------------- */

/* Stops the process unless dt is F32, BF16 or F16 (the dtypes every tensor op takes). */
static void need_op_dt(enum mc_dtype dt, const char *op)
{
    if (is_float_dt(dt))
        return;
    mc_log(MC_LOG_ERROR, "backend cpu: op %s is implemented for float32, bfloat16 and float16, "
           "not %s (ask supports() first)", op, mc_dtype_name(dt));
    abort();
}

#define W(p, dt, n) mc_cpu_widen(K(be), p, dt, n, op)
#define NARROW(dst, dt, src, n) mc_cpu_narrow(K(be), dst, dt, src, n)

/* An fp32 copy of the stored matrix X [rows, cols] with row stride ld, packed (stride cols). */
static float *widen_matrix(struct mc_backend *be, const void *X, enum mc_dtype dt, int64_t rows,
                           int64_t cols, int64_t ld, const char *op)
{
    if (ld == cols)
        return W(X, dt, rows * cols);
    float *p = mc_cpu_scratch(rows * cols, op);
    size_t es = mc_dtype_size(dt);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++)
        K(be)->convert(p + r * cols, MC_DTYPE_F32, (const char *)X + (size_t)(r * ld) * es, dt,
                       cols);
    return p;
}

/* C [M, N] (stride ldc, dtype dt) from/to a packed fp32 copy. */
static void copy_c(struct mc_backend *be, void *C, enum mc_dtype dt, int64_t ldc, float *Cf,
                   int64_t M, int64_t N, bool to_c)
{
    size_t es = mc_dtype_size(dt);
#pragma omp parallel for schedule(static) if (M * N > 65536)
    for (int64_t r = 0; r < M; r++) {
        char *c = (char *)C + (size_t)(r * ldc) * es;
        if (to_c)
            K(be)->convert(c, dt, Cf + r * N, MC_DTYPE_F32, N);
        else
            K(be)->convert(Cf + r * N, MC_DTYPE_F32, c, dt, N);
    }
}

/* 16-bit A, B (same dtype), C in that dtype or fp32, fp32 compute: C = round_C(alpha *
 * sum_fp32(op(A) op(B)) + beta * C), the reference: A and B widened, the fp32 GEMM, C rounded
 * once. */
static void gemm_half(struct mc_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K_,
                      float alpha, const void *A, enum mc_dtype ab_dt, int64_t lda,
                      const void *B, int64_t ldb, float beta, void *C, enum mc_dtype c_dt,
                      int64_t ldc)
{
    const char *op = "gemm";
    if (M <= 0 || N <= 0)
        return;
    int64_t ar = ta ? K_ : M, ac = ta ? M : K_, br = tb ? N : K_, bc = tb ? K_ : N;
    float *a = widen_matrix(be, A, ab_dt, ar, ac, lda, op);
    float *b = widen_matrix(be, B, ab_dt, br, bc, ldb, op);
    if (c_dt == MC_DTYPE_F32) {
        K(be)->gemm(ta, tb, M, N, K_, alpha, a, ac, b, bc, beta, C, ldc);
    } else {
        float *c = mc_cpu_scratch(M * N, op);
        if (beta != 0.0f)
            copy_c(be, C, c_dt, ldc, c, M, N, false);
        K(be)->gemm(ta, tb, M, N, K_, alpha, a, ac, b, bc, beta, c, N);
        copy_c(be, C, c_dt, ldc, c, M, N, true);
        mc_cpu_release(c);
    }
    mc_cpu_release(a);
    mc_cpu_release(b);
}

/* ---- the 16-bit GEMM on the library: three ways to feed it --------------------------------
 * "copies": widen A and B into whole fp32 copies, gemm_blas, round C (gemm_half above);
 * "tiles": gemm_blas_half widens per C tile (no full-size copies). Both make the same library
 * calls on the same values, so they give the same bits (test_half_ops checks): the faster one
 * on the first 16-bit GEMM's shape is used from then on.
 * "dot" (bf16 only, CPUs with AVX512-BF16): gemm_dot_bf16 multiplies in bf16 with fp32
 * accumulation, at twice the fp32 rate on Zen 4 but half of it on Intel Xeons without AMX; its
 * bits differ from the widen feeds by the fp32 summation order. So it is NOT chosen by timing
 * the GEMM, which varies between ranks and runs and would make a bf16 run's numbers depend on
 * timing noise: it is taken where the CPU's dot products run at >= DOT_MIN_RATIO times its fp32
 * FMAs (bf16_dot_rate_ratio_avx512bf16, a register-only probe: ~2 on Zen 4, ~0.5 on Intel
 * Xeons without AMX; a loaded Zen 4 reads anywhere from 1.36 to 2.75, hence a threshold of 1, a
 * factor of two from either). A job's ranks decide from one number: the trainer gathers each
 * rank's probe through measure() and hands every rank the largest through adopt(). All the
 * times are logged beside the choice in one line (which says so if dot timed slower). fp16
 * always widens (no fast fp16 dot product here, and fp16 must keep fp32 accuracy).
 * MC_GEMM16=copies|tiles|dot forces one (dot where unavailable: a warning and the rule). The
 * choice is made once per dtype per process. */
enum gemm16_path { G16_UNSET, G16_COPIES, G16_TILES, G16_DOT };
static enum gemm16_path g16_path[2] = {G16_UNSET, G16_UNSET}; /* [0] bf16, [1] fp16 */
static pthread_mutex_t g16_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const g16_names[] = {"unset", "copies", "tiles", "dot"};
#define DOT_MIN_RATIO 1.0
/* the dot/FMA rate ratio the choice reads: < 0 until probed or adopted */
static double g16_ratio = -1.0;
static bool g16_adopted;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static void gemm16_run(struct mc_backend *be, enum gemm16_path p, bool ta, bool tb, int64_t M,
                       int64_t N, int64_t K_, float alpha, const void *A, enum mc_dtype dt,
                       int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                       enum mc_dtype c_dt, int64_t ldc)
{
    if (p == G16_DOT)
        gemm_dot_bf16(ta, tb, M, N, K_, alpha, A, lda, B, ldb, beta, C, c_dt, ldc,
                      K(be)->convert);
    else if (p == G16_TILES)
        gemm_blas_half(ta, tb, M, N, K_, alpha, A, dt, lda, B, ldb, beta, C, c_dt, ldc,
                       K(be)->convert);
    else
        gemm_half(be, ta, tb, M, N, K_, alpha, A, dt, lda, B, ldb, beta, C, c_dt, ldc);
}

/* MC_GEMM16 as a path, G16_UNSET when unset or not usable for dt (with a warning). */
static enum gemm16_path gemm16_forced(enum mc_dtype dt, bool dot_ok, const char *why)
{
    const char *env = getenv("MC_GEMM16");
    if (!env || !*env)
        return G16_UNSET;
    for (int q = G16_COPIES; q <= G16_DOT; q++)
        if (!strcmp(env, g16_names[q])) {
            if (q != G16_DOT || dot_ok)
                return (enum gemm16_path)q;
            mc_log(MC_LOG_WARN, "MC_GEMM16=dot: no bf16 dot-product GEMM for %s (%s); choosing "
                   "as without it", mc_dtype_name(dt),
                   dt == MC_DTYPE_BF16 ? why : "bf16 only");
            return G16_UNSET;
        }
    mc_log(MC_LOG_WARN, "MC_GEMM16=%s is not one of copies, tiles, dot; choosing as without it",
           env);
    return G16_UNSET;
}

/* The dot/FMA rate ratio: adopted, else this process's probe (once). Under g16_lock. */
static double dot_ratio_locked(void)
{
    if (g16_ratio < 0)
        g16_ratio = bf16_dot_rate_ratio_avx512bf16();
    return g16_ratio;
}

static void cpu_measure(struct mc_backend *be, double m[MC_BACKEND_MEASURES])
{
    (void)be;
    const char *why;
    memset(m, 0, MC_BACKEND_MEASURES * sizeof *m);
    pthread_mutex_lock(&g16_lock);
    if (gemm_dot_bf16_available(&why))
        m[0] = dot_ratio_locked();
    pthread_mutex_unlock(&g16_lock);
}

/* Takes the job's ratio. A choice made before stays (the trainer adopts before any GEMM). */
static void cpu_adopt(struct mc_backend *be, const double m[MC_BACKEND_MEASURES])
{
    (void)be;
    pthread_mutex_lock(&g16_lock);
    g16_ratio = m[0];
    g16_adopted = true;
    pthread_mutex_unlock(&g16_lock);
}

/* Times each candidate on this call's shape (into a scratch C, twice each, the faster kept),
 * logs the times and the choice: dot where available and its probed rate ratio is at least
 * DOT_MIN_RATIO, else the faster widen feed. */
static enum gemm16_path gemm16_time(struct mc_backend *be, bool ta, bool tb, int64_t M,
                                    int64_t N, int64_t K_, const void *A, enum mc_dtype dt,
                                    int64_t lda, const void *B, int64_t ldb, enum mc_dtype c_dt,
                                    bool dot_ok, const char *why)
{
    double ratio = dot_ok ? dot_ratio_locked() : 0.0;
    void *c = mc_cpu_scratch(M * N, "gemm"); /* fp32-sized: fits either C dtype */
    double best[4] = {0, 1e300, 1e300, 1e300};
    for (int rep = 0; rep < 2; rep++)
        for (int q = G16_COPIES; q <= (dot_ok ? G16_DOT : G16_TILES); q++) {
            double t0 = now_ms();
            gemm16_run(be, (enum gemm16_path)q, ta, tb, M, N, K_, 1.0f, A, dt, lda, B, ldb,
                       0.0f, c, c_dt, N);
            double t = now_ms() - t0;
            best[q] = t < best[q] ? t : best[q];
        }
    mc_cpu_release(c);
    enum gemm16_path widen = best[G16_TILES] < best[G16_COPIES] ? G16_TILES : G16_COPIES;
    bool dot_fast = dot_ok && ratio >= DOT_MIN_RATIO;
    enum gemm16_path p = dot_fast ? G16_DOT : widen;
    char dot[192];
    if (dot_ok)
        snprintf(dot, sizeof dot, "bf16 dot products %.2f ms (%s; their probed rate %.2fx the "
                 "fp32 FMA's%s, %s %.1f)", best[G16_DOT], why, ratio,
                 g16_adopted ? ", the job's largest" : "", dot_fast ? ">=" : "<", DOT_MIN_RATIO);
    else
        snprintf(dot, sizeof dot, "no bf16 dot products (%s)",
                 dt == MC_DTYPE_BF16 ? why : "fp16 widens");
    char slower[96] = "";
    if (dot_fast && best[G16_DOT] > best[widen])
        snprintf(slower, sizeof slower, "; dot timed slower on this shape, MC_GEMM16=%s widens",
                 g16_names[widen]);
    mc_log(MC_LOG_INFO, "16-bit GEMM (%s, C %s, %lld x %lld x %lld, %d threads): widen to fp32 "
           "copies %.2f ms, widen per tile %.2f ms (+ %s), %s; using %s%s%s", mc_dtype_name(dt),
           mc_dtype_name(c_dt), (long long)M, (long long)N, (long long)K_, be->n_threads,
           best[G16_COPIES], best[G16_TILES], mc_gemm_blas_name(), dot, g16_names[p],
           dot_fast ? " (by the rate probe, not by this timing: it changes the bits)" : "",
           slower);
    return p;
}

/* The path for dt in this process: forced by MC_GEMM16, else gemm16_time on this call's shape;
 * chosen once under the lock, then read without it. */
static enum gemm16_path gemm16_choose(struct mc_backend *be, bool ta, bool tb, int64_t M,
                                      int64_t N, int64_t K_, const void *A, enum mc_dtype dt,
                                      int64_t lda, const void *B, int64_t ldb,
                                      enum mc_dtype c_dt)
{
    enum gemm16_path *slot = &g16_path[dt == MC_DTYPE_F16];
    pthread_mutex_lock(&g16_lock);
    enum gemm16_path p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (p != G16_UNSET) {
        pthread_mutex_unlock(&g16_lock);
        return p;
    }
    const char *why = "";
    bool dot_ok = dt == MC_DTYPE_BF16 && gemm_dot_bf16_available(&why);
    p = gemm16_forced(dt, dot_ok, why);
    if (p != G16_UNSET)
        mc_log(MC_LOG_INFO, "16-bit GEMM (%s): %s (forced by MC_GEMM16; + %s)",
               mc_dtype_name(dt), p == G16_DOT ? "bf16 dot products" : p == G16_TILES ?
               "widen per tile" : "widen to fp32 copies", p == G16_DOT ? why :
               mc_gemm_blas_name());
    else
        p = gemm16_time(be, ta, tb, M, N, K_, A, dt, lda, B, ldb, c_dt, dot_ok, why);
    __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g16_lock);
    return p;
}

static bool gemm_types_ok(enum mc_dtype a, enum mc_dtype b, enum mc_dtype c, enum mc_dtype comp)
{
    if (comp != MC_DTYPE_F32 || a != b)
        return false;
    return a == MC_DTYPE_F32 ? c == MC_DTYPE_F32
                             : mc_cpu_is_half(a) && (c == a || c == MC_DTYPE_F32);
}

static void cpu_gemm(struct mc_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K_,
                     float alpha, const void *A, enum mc_dtype a_dt, int64_t lda, const void *B,
                     enum mc_dtype b_dt, int64_t ldb, float beta, void *C, enum mc_dtype c_dt,
                     int64_t ldc, enum mc_dtype compute)
{
    if (!gemm_types_ok(a_dt, b_dt, c_dt, compute)) {
        mc_log(MC_LOG_ERROR, "backend cpu: op gemm is not implemented for A %s, B %s, C %s, "
               "compute %s (A, B float32 with C float32, or A, B bfloat16/float16 with C of "
               "their dtype or float32; compute float32)", mc_dtype_name(a_dt),
               mc_dtype_name(b_dt), mc_dtype_name(c_dt), mc_dtype_name(compute));
        abort();
    }
    if (a_dt == MC_DTYPE_F32) {
        K(be)->gemm(ta, tb, M, N, K_, alpha, A, lda, B, ldb, beta, C, ldc);
    } else if (K(be)->gemm != gemm_blas || M <= 0 || N <= 0) {
        gemm_half(be, ta, tb, M, N, K_, alpha, A, a_dt, lda, B, ldb, beta, C, c_dt, ldc);
    } else {
        enum gemm16_path *slot = &g16_path[a_dt == MC_DTYPE_F16];
        enum gemm16_path p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (p == G16_UNSET)
            p = gemm16_choose(be, ta, tb, M, N, K_, A, a_dt, lda, B, ldb, c_dt);
        gemm16_run(be, p, ta, tb, M, N, K_, alpha, A, a_dt, lda, B, ldb, beta, C, c_dt, ldc);
    }
}

/* Element e of a 16-bit array, as a pointer. */
static const void *at16(const void *p, int64_t e) { return (const uint16_t *)p + e; }

/* ---- row-wise 16-bit ops staged in one parallel region ------------------------------------
 * The row-wise ops (activations, bias-dropout-add, norm forwards, cross-entropy) widen and
 * round a block of rows at a time, each thread its own blocks, inside ONE parallel region: a
 * pass per block (widen, the fp32 kernel, round) would open three or four OpenMP regions per
 * block, and on a shared machine each region's barrier waits for a descheduled thread (a bf16
 * GELU measured 7x its fp32 time that way, one region per pass). The fp32 kernels' own
 * parallel loops run nested, so inactive (one thread), on the block. Blocks are about 32K
 * elements of the widest tensor (fp32 copies that stay in L2 between the passes) and at least
 * four per thread. Every kernel computes each row on its own, so the bits are those of
 * whole-tensor staging (test_half_ops covers several blocks). */
#define STAGE_ELEMS 32768
#define STAGE_MAX 4

struct stage16 {
    enum mc_dtype dt;
    int nin, nout;
    const void *in[STAGE_MAX]; /* 16-bit [rows, in_w[i]]; NULL: absent (its fp32 copy too) */
    int64_t in_w[STAGE_MAX];
    void *out[STAGE_MAX]; /* 16-bit [rows, out_w[i]], rounded from the kernel's fp32 output */
    int64_t out_w[STAGE_MAX];
};

/* The fp32 kernel on rows [r0, r0 + nr): in[i] / out[i] are the block's fp32 copies. */
typedef void (*stage_fn)(const struct mc_cpu_kernels *k, float *const *in, float *const *out,
                         int64_t r0, int64_t nr, const void *ctx);

static int64_t stage_rows_per_block(const struct stage16 *s, int64_t rows)
{
    int64_t w = 1;
    for (int i = 0; i < s->nin; i++)
        w = s->in_w[i] > w ? s->in_w[i] : w;
    for (int i = 0; i < s->nout; i++)
        w = s->out_w[i] > w ? s->out_w[i] : w;
    int nt = 1;
#ifdef _OPENMP
    nt = omp_get_max_threads();
#endif
    int64_t rb = STAGE_ELEMS / w, even = (rows + 4 * nt - 1) / (4 * nt);
    rb = rb < even ? rb : even;
    return rb > 0 ? rb : 1;
}

static void stage_block(const struct mc_cpu_kernels *k, const struct stage16 *s, float *const *in,
                        float *const *out, int64_t r0, int64_t nr, stage_fn fn, const void *ctx)
{
    for (int i = 0; i < s->nin; i++)
        if (in[i])
            k->convert(in[i], MC_DTYPE_F32, at16(s->in[i], r0 * s->in_w[i]), s->dt,
                       nr * s->in_w[i]);
    fn(k, in, out, r0, nr, ctx);
    for (int i = 0; i < s->nout; i++)
        k->convert((void *)at16(s->out[i], r0 * s->out_w[i]), s->dt, out[i], MC_DTYPE_F32,
                   nr * s->out_w[i]);
}

/* Runs fn over all rows, block by block; an output may be one of the inputs (in place). */
static void stage_rows(struct mc_backend *be, const struct stage16 *s, int64_t rows, stage_fn fn,
                       const void *ctx, const char *op)
{
    const struct mc_cpu_kernels *k = K(be);
    int64_t rb = stage_rows_per_block(s, rows), nblk = (rows + rb - 1) / rb, per = 0;
    for (int i = 0; i < s->nin; i++)
        per += s->in[i] ? rb * s->in_w[i] : 0;
    for (int i = 0; i < s->nout; i++)
        per += rb * s->out_w[i];
#pragma omp parallel if (nblk > 1)
    {
        float *buf = mc_cpu_scratch(per, op), *in[STAGE_MAX] = {0}, *out[STAGE_MAX] = {0};
        float *p = buf;
        for (int i = 0; i < s->nin; i++)
            if (s->in[i]) {
                in[i] = p;
                p += rb * s->in_w[i];
            }
        for (int i = 0; i < s->nout; i++) {
            out[i] = p;
            p += rb * s->out_w[i];
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nblk; b++) {
            int64_t r0 = b * rb;
            stage_block(k, s, in, out, r0, rows - r0 < rb ? rows - r0 : rb, fn, ctx);
        }
        mc_cpu_release(buf);
    }
}

struct norm_ctx {
    float *mean, *rstd; /* [rows] fp32 statistics (mean: LayerNorm only; NULL allowed) */
    const float *w, *b;
    int64_t h;
    float eps;
};

static float *at_row(float *p, int64_t r0) { return p ? p + r0 : NULL; }

static void layernorm_rows(const struct mc_cpu_kernels *k, float *const *in, float *const *out,
                           int64_t r0, int64_t nr, const void *ctx)
{
    const struct norm_ctx *c = ctx;
    k->layernorm_fwd(out[0], at_row(c->mean, r0), at_row(c->rstd, r0), in[0], c->w, c->b, nr,
                     c->h, c->eps);
}

static void rmsnorm_rows(const struct mc_cpu_kernels *k, float *const *in, float *const *out,
                         int64_t r0, int64_t nr, const void *ctx)
{
    const struct norm_ctx *c = ctx;
    k->rmsnorm_fwd(out[0], at_row(c->rstd, r0), in[0], c->w, nr, c->h, c->eps);
}

/* The norm forwards are row-wise (stage_rows); their backwards sum dw, db over all rows, so
 * they stay staged whole (the kernel's column sums decide the bits). */
static void cpu_layernorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *mean,
                              float *rstd, const void *x, const void *w, const void *b,
                              int64_t rows, int64_t h, float eps)
{
    const char *op = "layernorm_fwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->layernorm_fwd(y, mean, rstd, x, w, b, rows, h, eps);
        return;
    }
    struct norm_ctx c = {mean, rstd, W(w, dt, h), W(b, dt, h), h, eps};
    struct stage16 s = {dt, 1, 1, {x}, {h}, {y}, {h}};
    stage_rows(be, &s, rows, layernorm_rows, &c, op);
    mc_cpu_release((float *)c.w); mc_cpu_release((float *)c.b);
    if (be->rounding == MC_ROUNDING_TORCH_CPU) { /* torch saves the statistics in the dtype */
        if (mean)
            round_to_dtype_tc16(dt, mean, rows);
        round_to_dtype_tc16(dt, rstd, rows);
    }
}

/* MC_ROUNDING_TORCH_CPU: dx from the kernel (with the 16-bit statistics the forward saved);
 * dw, db += torch's row-by-row 16-bit sums instead of the kernel's fp32 ones. */
static void layernorm_bwd_torch_cpu(struct mc_backend *be, enum mc_dtype dt, float *dx,
                                    float *dw, float *db, const float *dy, const float *x,
                                    const float *w, const float *mean, const float *rstd,
                                    int64_t rows, int64_t h)
{
    float *gw = mc_cpu_scratch(3 * h, "layernorm_bwd"), *gb = gw + h, *unused = gb + h;
    memset(unused, 0, (size_t)h * sizeof(float));
    K(be)->layernorm_bwd(dx, unused, NULL, dy, x, w, mean, rstd, rows, h);
    layernorm_wgrad_tc16(dt, gw, db ? gb : NULL, dy, x, mean, rstd, rows, h);
    for (int64_t j = 0; j < h; j++) {
        dw[j] += gw[j];
        if (db)
            db[j] += gb[j];
    }
    mc_cpu_release(gw);
}

/* dw, db: parameter grads, the ADD rule dw = round(dw + contribution). */
static void cpu_layernorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                              void *db, const void *dy, const void *x, const void *w,
                              const float *mean, const float *rstd, int64_t rows, int64_t h)
{
    const char *op = "layernorm_bwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, rows, h);
        return;
    }
    float *dyf = W(dy, dt, rows * h), *xf = W(x, dt, rows * h), *wf = W(w, dt, h);
    float *dwf = W(dw, dt, h), *dbf = W(db, dt, h), *dxf = mc_cpu_scratch(rows * h, op);
    if (be->rounding == MC_ROUNDING_TORCH_CPU)
        layernorm_bwd_torch_cpu(be, dt, dxf, dwf, dbf, dyf, xf, wf, mean, rstd, rows, h);
    else
        K(be)->layernorm_bwd(dxf, dwf, dbf, dyf, xf, wf, mean, rstd, rows, h);
    NARROW(dx, dt, dxf, rows * h);
    NARROW(dw, dt, dwf, h);
    NARROW(db, dt, dbf, h);
    mc_cpu_release(dyf); mc_cpu_release(xf); mc_cpu_release(wf); mc_cpu_release(dwf); mc_cpu_release(dbf); mc_cpu_release(dxf);
}

static void cpu_rmsnorm_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, float *rstd,
                            const void *x, const void *w, int64_t rows, int64_t h, float eps)
{
    const char *op = "rmsnorm_fwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->rmsnorm_fwd(y, rstd, x, w, rows, h, eps);
        return;
    }
    struct norm_ctx c = {NULL, rstd, W(w, dt, h), NULL, h, eps};
    struct stage16 s = {dt, 1, 1, {x}, {h}, {y}, {h}};
    stage_rows(be, &s, rows, rmsnorm_rows, &c, op);
    mc_cpu_release((float *)c.w);
}

static void cpu_rmsnorm_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx, void *dw,
                            const void *dy, const void *x, const void *w, const float *rstd,
                            int64_t rows, int64_t h)
{
    const char *op = "rmsnorm_bwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, h);
        return;
    }
    float *dyf = W(dy, dt, rows * h), *xf = W(x, dt, rows * h), *wf = W(w, dt, h);
    float *dwf = W(dw, dt, h), *dxf = mc_cpu_scratch(rows * h, op);
    K(be)->rmsnorm_bwd(dxf, dwf, dyf, xf, wf, rstd, rows, h);
    NARROW(dx, dt, dxf, rows * h);
    NARROW(dw, dt, dwf, h);
    mc_cpu_release(dyf); mc_cpu_release(xf); mc_cpu_release(wf); mc_cpu_release(dwf); mc_cpu_release(dxf);
}

/* The activations share one shape: forward (y, x, bias), backward (dx, dy, x, bias); x and dx
 * have xw = cols (2 * cols for SwiGLU's [gate | up]) columns, y and dy have cols. */
struct act_ctx {
    const float *bias; /* widened once, [xw] */
    int64_t cols;
    enum mc_dtype dt;
    bool torch_cpu; /* MC_ROUNDING_TORCH_CPU */
};

/* MC_ROUNDING_TORCH_CPU for the activations Megatron calls unfused: the bias add is its own
 * rounded op, then the activation (one torch op: fp32 inside, rounded once) on the sum. */
static const float *unfused_bias(const struct act_ctx *c, float *x, int64_t nr, int64_t xw)
{
    if (!c->torch_cpu || !c->bias)
        return c->bias;
    bias_add_tc16(c->dt, x, c->bias, nr, xw);
    return NULL;
}

/* TC_FWD / TC_BWD: the op's torch_cpu16_ref.c kernels, or NULL where Megatron calls it unfused */
#define CPU_ACTIVATION(opn, XW, TC_FWD, TC_BWD)                                               \
    static void opn##_fwd_rows(const struct mc_cpu_kernels *k, float *const *in,              \
                               float *const *out, int64_t r0, int64_t nr, const void *ctx)    \
    {                                                                                         \
        const struct act_ctx *c = ctx;                                                        \
        mc_tc16_act_fn tc = TC_FWD;                                                           \
        (void)r0;                                                                             \
        if (tc && c->torch_cpu)                                                               \
            tc(c->dt, out[0], in[0], c->bias, nr, c->cols);                                   \
        else                                                                                  \
            k->opn##_fwd(out[0], in[0], unfused_bias(c, in[0], nr, (XW) * c->cols), nr,       \
                         c->cols);                                                            \
    }                                                                                         \
    static void opn##_bwd_rows(const struct mc_cpu_kernels *k, float *const *in,              \
                               float *const *out, int64_t r0, int64_t nr, const void *ctx)    \
    {                                                                                         \
        const struct act_ctx *c = ctx;                                                        \
        mc_tc16_act_bwd_fn tc = TC_BWD;                                                       \
        (void)r0;                                                                             \
        if (tc && c->torch_cpu)                                                               \
            tc(c->dt, out[0], in[0], in[1], c->bias, nr, c->cols);                            \
        else                                                                                  \
            k->opn##_bwd(out[0], in[0], in[1], unfused_bias(c, in[1], nr, (XW) * c->cols),    \
                         nr, c->cols);                                                        \
    }                                                                                         \
    static void cpu_##opn##_fwd(struct mc_backend *be, enum mc_dtype dt, void *y,             \
                                const void *x, const void *bias, int64_t rows, int64_t cols)  \
    {                                                                                         \
        const char *op = #opn "_fwd";                                                         \
        need_op_dt(dt, op);                                                                   \
        if (dt == MC_DTYPE_F32) {                                                             \
            K(be)->opn##_fwd(y, x, bias, rows, cols);                                         \
            return;                                                                           \
        }                                                                                     \
        int64_t xw = (XW) * cols;                                                             \
        struct act_ctx c = {W(bias, dt, xw), cols, dt, be->rounding == MC_ROUNDING_TORCH_CPU}; \
        struct stage16 s = {dt, 1, 1, {x}, {xw}, {y}, {cols}};                                \
        stage_rows(be, &s, rows, opn##_fwd_rows, &c, op);                                     \
        mc_cpu_release((float *)c.bias);                                                      \
    }                                                                                         \
    static void cpu_##opn##_bwd(struct mc_backend *be, enum mc_dtype dt, void *dx,            \
                                const void *dy, const void *x, const void *bias,              \
                                int64_t rows, int64_t cols)                                   \
    {                                                                                         \
        const char *op = #opn "_bwd";                                                         \
        need_op_dt(dt, op);                                                                   \
        if (dt == MC_DTYPE_F32) {                                                             \
            K(be)->opn##_bwd(dx, dy, x, bias, rows, cols);                                    \
            return;                                                                           \
        }                                                                                     \
        int64_t xw = (XW) * cols;                                                             \
        struct act_ctx c = {W(bias, dt, xw), cols, dt, be->rounding == MC_ROUNDING_TORCH_CPU}; \
        struct stage16 s = {dt, 2, 1, {dy, x}, {cols, xw}, {dx}, {xw}};                       \
        stage_rows(be, &s, rows, opn##_bwd_rows, &c, op);                                     \
        mc_cpu_release((float *)c.bias);                                                      \
    }
CPU_ACTIVATION(gelu_tanh, 1, gelu_tanh_fwd_tc16, gelu_tanh_bwd_tc16)
CPU_ACTIVATION(gelu_erf, 1, NULL, NULL)
CPU_ACTIVATION(squared_relu, 1, NULL, NULL)
CPU_ACTIVATION(swiglu, 2, swiglu_fwd_tc16, swiglu_bwd_tc16)

/* Each thread owns a range of whole 64-column blocks (the kernels' owner blocks, ref.h's
 * MC_REF_COL_BLOCK) and walks the rows in order, widening its part of each row and adding it to
 * fp32 column sums that start at zero; then db = round(db + sum). That is the kernels' sum,
 * column by column in row order, so the same bits, with dy read row by row (a column block
 * read down the rows touched a new page per row) and no fp32 copy of dy. */
#define BIAS_COLS 64

static void bias_grad_cols(const struct mc_cpu_kernels *k, enum mc_dtype dt, void *db,
                           const void *dy, int64_t rows, int64_t cols, int64_t j0, int64_t n,
                           float *acc)
{
    memset(acc, 0, (size_t)n * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        k->accumulate(acc, MC_DTYPE_F32, at16(dy, r * cols + j0), dt, n);
    k->accumulate((void *)at16(db, j0), dt, acc, MC_DTYPE_F32, n); /* db = round(db + sum) */
}

static void cpu_bias_grad(struct mc_backend *be, enum mc_dtype dt, void *db, const void *dy,
                          int64_t rows, int64_t cols)
{
    const char *op = "bias_grad";
    need_op_dt(dt, op);
    const struct mc_cpu_kernels *k = K(be);
    if (dt == MC_DTYPE_F32) {
        k->bias_grad(db, dy, rows, cols);
        return;
    }
    int64_t nblk = (cols + BIAS_COLS - 1) / BIAS_COLS;
#pragma omp parallel if (nblk > 1 && rows * cols > 16384)
    {
        int nt = 1, t = 0;
#ifdef _OPENMP
        nt = omp_get_num_threads(), t = omp_get_thread_num();
#endif
        int64_t j0 = nblk * t / nt * BIAS_COLS, j1 = nblk * (t + 1) / nt * BIAS_COLS;
        j1 = j1 < cols ? j1 : cols;
        if (j1 > j0) {
            float *buf = mc_cpu_scratch(j1 - j0, op);
            bias_grad_cols(k, dt, db, dy, rows, cols, j0, j1 - j0, buf);
            mc_cpu_release(buf);
        }
    }
}

/* The dropout scale in a 16-bit op is rounded to the dtype first: torch's CPU dropout
 * multiplies by a noise tensor of the input's dtype holding 1 / (1 - p). */
static float half_scale(struct mc_backend *be, enum mc_dtype dt, float scale)
{
    uint16_t h;
    float f;
    K(be)->convert(&h, dt, &scale, MC_DTYPE_F32, 1);
    K(be)->convert(&f, MC_DTYPE_F32, &h, dt, 1);
    return f;
}

struct bda_ctx {
    const float *bias;
    const uint8_t *keep; /* [rows, cols] or NULL */
    float scale;
    int64_t cols;
    enum mc_dtype dt;
    bool torch_cpu; /* MC_ROUNDING_TORCH_CPU */
};

static void bda_rows(const struct mc_cpu_kernels *k, float *const *in, float *const *out,
                     int64_t r0, int64_t nr, const void *ctx)
{
    const struct bda_ctx *c = ctx;
    if (c->torch_cpu) {
        bias_dropout_add_tc16(c->dt, out[0], in[0], c->bias, in[1],
                              c->keep ? c->keep + r0 * c->cols : NULL, c->scale, nr, c->cols);
        return;
    }
    k->bias_dropout_add(out[0], in[0], c->bias, in[1], c->keep ? c->keep + r0 * c->cols : NULL,
                        c->scale, nr, c->cols);
}

static void cpu_bias_dropout_add(struct mc_backend *be, enum mc_dtype dt, void *y, const void *x,
                                 const void *bias, const void *residual,
                                 const uint8_t *keep_mask, float scale, int64_t rows,
                                 int64_t cols)
{
    const char *op = "bias_dropout_add";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->bias_dropout_add(y, x, bias, residual, keep_mask, scale, rows, cols);
        return;
    }
    struct bda_ctx c = {W(bias, dt, cols), keep_mask, half_scale(be, dt, scale), cols, dt,
                        be->rounding == MC_ROUNDING_TORCH_CPU};
    struct stage16 s = {dt, 2, 1, {x, residual}, {cols, cols}, {y}, {cols}};
    stage_rows(be, &s, rows, bda_rows, &c, op);
    mc_cpu_release((float *)c.bias);
}

static void cpu_masked_softmax_fwd(struct mc_backend *be, enum mc_dtype dt, void *p, int64_t bh,
                                   int64_t sq, int64_t sk, float mult, const uint8_t *mask)
{
    const char *op = "masked_softmax_fwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->masked_softmax_fwd(p, bh, sq, sk, mult, mask);
        return;
    }
    int64_t n = bh * sq * sk;
    float *pf = W(p, dt, n);
    K(be)->masked_softmax_fwd(pf, bh, sq, sk, mult, mask);
    NARROW(p, dt, pf, n);
    mc_cpu_release(pf);
}

static void cpu_masked_softmax_bwd(struct mc_backend *be, enum mc_dtype dt, void *dp,
                                   const void *p, int64_t bh, int64_t sq, int64_t sk, float mult)
{
    const char *op = "masked_softmax_bwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->masked_softmax_bwd(dp, p, bh, sq, sk, mult);
        return;
    }
    int64_t n = bh * sq * sk;
    float *dpf = W(dp, dt, n), *pf = W(p, dt, n);
    K(be)->masked_softmax_bwd(dpf, pf, bh, sq, sk, mult);
    NARROW(dp, dt, dpf, n);
    mc_cpu_release(dpf); mc_cpu_release(pf);
}

static void cpu_rope_fwd(struct mc_backend *be, enum mc_dtype dt, void *t, const float *cos,
                         const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                         bool interleaved)
{
    const char *op = "rope_fwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->rope_fwd(t, cos, sin, s, bh, hn, rot_dim, interleaved);
        return;
    }
    float *tf = W(t, dt, s * bh * hn);
    if (be->rounding == MC_ROUNDING_TORCH_CPU)
        rope_tc16(dt, tf, cos, sin, s, bh, hn, rot_dim, interleaved, 1.0f);
    else
        K(be)->rope_fwd(tf, cos, sin, s, bh, hn, rot_dim, interleaved);
    NARROW(t, dt, tf, s * bh * hn);
    mc_cpu_release(tf);
}

static void cpu_rope_bwd(struct mc_backend *be, enum mc_dtype dt, void *dgrad, const float *cos,
                         const float *sin, int64_t s, int64_t bh, int64_t hn, int64_t rot_dim,
                         bool interleaved)
{
    const char *op = "rope_bwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->rope_bwd(dgrad, cos, sin, s, bh, hn, rot_dim, interleaved);
        return;
    }
    float *gf = W(dgrad, dt, s * bh * hn);
    if (be->rounding == MC_ROUNDING_TORCH_CPU)
        rope_tc16(dt, gf, cos, sin, s, bh, hn, rot_dim, interleaved, -1.0f);
    else
        K(be)->rope_bwd(gf, cos, sin, s, bh, hn, rot_dim, interleaved);
    NARROW(dgrad, dt, gf, s * bh * hn);
    mc_cpu_release(gf);
}

/* 16 bits: a row copy is exact, so the rows are copied as they are. */
static void cpu_embedding_fwd(struct mc_backend *be, enum mc_dtype dt, void *y, const void *w,
                              const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                              int64_t vocab_local)
{
    need_op_dt(dt, "embedding_fwd");
    if (dt == MC_DTYPE_F32) {
        K(be)->embedding_fwd(y, w, ids, n, h, vocab_start, vocab_local);
        return;
    }
    size_t row = (size_t)h * 2;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++) {
        int64_t id = ids[t] - vocab_start;
        if (id >= 0 && id < vocab_local)
            memcpy((char *)y + (size_t)t * row, (const char *)w + (size_t)id * row, row);
        else
            memset((char *)y + (size_t)t * row, 0, row);
    }
}

/* 16 bits: each token's row is added with its own rounding, in token order, dw[id] =
 * round(dw[id] + dy[t]): torch's CPU embedding backward on 16-bit tensors (an index_add into a
 * zeroed 16-bit grad), so a row used by several tokens is not one rounding of their sum. Column
 * blocks have one owner each, so the result does not depend on the thread count. */
static void cpu_embedding_bwd(struct mc_backend *be, enum mc_dtype dt, void *dw, const void *dy,
                              const int64_t *ids, int64_t n, int64_t h, int64_t vocab_start,
                              int64_t vocab_local)
{
    need_op_dt(dt, "embedding_bwd");
    if (dt == MC_DTYPE_F32) {
        K(be)->embedding_bwd(dw, dy, ids, n, h, vocab_start, vocab_local);
        return;
    }
    enum { BLK = 64 };
    uint16_t *w = dw;
    const uint16_t *g = dy;
    bool bf = dt == MC_DTYPE_BF16;
    int64_t nblk = (h + BLK - 1) / BLK;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * BLK, j1 = j0 + BLK < h ? j0 + BLK : h;
        for (int64_t t = 0; t < n; t++) {
            int64_t id = ids[t] - vocab_start;
            if (id < 0 || id >= vocab_local)
                continue;
            for (int64_t j = j0; j < j1; j++) {
                uint16_t *o = &w[id * h + j];
                float v = bf ? mc_bf16_to_f32(*o) + mc_bf16_to_f32(g[t * h + j])
                             : mc_f16_to_f32(*o) + mc_f16_to_f32(g[t * h + j]);
                *o = bf ? mc_f32_to_bf16(v) : mc_f32_to_f16(v);
            }
        }
    }
}

/* Cross-entropy on 16-bit logits: rows are independent (stage_rows). */
struct xent_ctx {
    float *max_local, *sumexp, *target_logit; /* [n] fp32, per op */
    const float *max, *sumexp_in, *dloss;
    const int64_t *target;
    int64_t v, v_start;
};

static void xent_max_rows(const struct mc_cpu_kernels *k, float *const *in, float *const *out,
                          int64_t r0, int64_t nr, const void *ctx)
{
    const struct xent_ctx *c = ctx;
    (void)out;
    k->xent_max(c->max_local + r0, in[0], nr, c->v);
}

static void xent_sumexp_rows(const struct mc_cpu_kernels *k, float *const *in, float *const *out,
                             int64_t r0, int64_t nr, const void *ctx)
{
    const struct xent_ctx *c = ctx;
    (void)out;
    k->xent_sumexp(c->sumexp + r0, c->target_logit + r0, in[0], c->max + r0, c->target + r0, nr,
                   c->v, c->v_start);
}

static void xent_bwd_rows(const struct mc_cpu_kernels *k, float *const *in, float *const *out,
                          int64_t r0, int64_t nr, const void *ctx)
{
    const struct xent_ctx *c = ctx;
    k->xent_bwd(out[0], in[0], c->max + r0, c->sumexp_in + r0, c->target + r0, c->dloss + r0,
                nr, c->v, c->v_start);
}

static void cpu_xent_max(struct mc_backend *be, enum mc_dtype dt, float *max_local,
                         const void *logits, int64_t n, int64_t v)
{
    const char *op = "xent_max";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->xent_max(max_local, logits, n, v);
        return;
    }
    struct xent_ctx c = {.max_local = max_local, .v = v};
    struct stage16 s = {dt, 1, 0, {logits}, {v}, {NULL}, {0}};
    stage_rows(be, &s, n, xent_max_rows, &c, op);
}

static void cpu_xent_sumexp(struct mc_backend *be, enum mc_dtype dt, float *sumexp_local,
                            float *target_logit, const void *logits, const float *max,
                            const int64_t *target, int64_t n, int64_t v, int64_t v_start)
{
    const char *op = "xent_sumexp";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->xent_sumexp(sumexp_local, target_logit, logits, max, target, n, v, v_start);
        return;
    }
    struct xent_ctx c = {.sumexp = sumexp_local, .target_logit = target_logit, .max = max,
                         .target = target, .v = v, .v_start = v_start};
    struct stage16 s = {dt, 1, 0, {logits}, {v}, {NULL}, {0}};
    stage_rows(be, &s, n, xent_sumexp_rows, &c, op);
}

static void cpu_xent_bwd(struct mc_backend *be, enum mc_dtype dt, void *dlogits,
                         const void *logits, const float *max, const float *sumexp,
                         const int64_t *target, const float *dloss, int64_t n, int64_t v,
                         int64_t v_start)
{
    const char *op = "xent_bwd";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->xent_bwd(dlogits, logits, max, sumexp, target, dloss, n, v, v_start);
        return;
    }
    struct xent_ctx c = {.max = max, .sumexp_in = sumexp, .dloss = dloss, .target = target,
                         .v = v, .v_start = v_start};
    struct stage16 s = {dt, 1, 1, {logits}, {v}, {dlogits}, {v}};
    stage_rows(be, &s, n, xent_bwd_rows, &c, op);
}

static double cpu_sumsq(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    const char *op = "sumsq";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32)
        return K(be)->sumsq(x, n);
    float *xf = W(x, dt, n);
    double r = K(be)->sumsq(xf, n);
    mc_cpu_release(xf);
    return r;
}

/* 16 bits: +0 and -0 are the only zeros (no widening needed). */
static int64_t cpu_count_zeros(struct mc_backend *be, enum mc_dtype dt, const void *x, int64_t n)
{
    need_op_dt(dt, "count_zeros");
    if (dt == MC_DTYPE_F32)
        return K(be)->count_zeros(x, n);
    const uint16_t *h = x;
    int64_t z = 0;
#pragma omp parallel for schedule(static) reduction(+ : z)
    for (int64_t i = 0; i < n; i++)
        z += (h[i] & 0x7fff) == 0;
    return z;
}

static void cpu_scale(struct mc_backend *be, enum mc_dtype dt, void *x, float s, int64_t n)
{
    const char *op = "scale";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        K(be)->scale(x, s, n);
        return;
    }
    float *xf = W(x, dt, n);
    K(be)->scale(xf, s, n);
    NARROW(x, dt, xf, n);
    mc_cpu_release(xf);
}

/* 16-bit param or grad: the step on fp32 copies (state m, v fp32), the param rounded once. */
static void cpu_adamw(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                      float *m, float *v, const void *g, int64_t n, float lr, float b1, float b2,
                      float eps, float wd, int64_t t)
{
    const char *op = "adamw";
    need_op_dt(p_dt, "adamw (param)");
    need_op_dt(g_dt, "adamw (grad)");
    float *pf = p_dt == MC_DTYPE_F32 ? p : W(p, p_dt, n);
    float *gf = g_dt == MC_DTYPE_F32 ? (float *)g : W(g, g_dt, n);
    K(be)->adamw(pf, m, v, gf, n, lr, b1, b2, eps, wd, t);
    if (p_dt != MC_DTYPE_F32) {
        NARROW(p, p_dt, pf, n);
        mc_cpu_release(pf);
    }
    if (g_dt != MC_DTYPE_F32)
        mc_cpu_release(gf);
}

static void cpu_sgd(struct mc_backend *be, enum mc_dtype p_dt, enum mc_dtype g_dt, void *p,
                    float *buf, const void *g, int64_t n, float lr, float momentum, float wd,
                    bool first_step)
{
    const char *op = "sgd";
    need_op_dt(p_dt, "sgd (param)");
    need_op_dt(g_dt, "sgd (grad)");
    float *pf = p_dt == MC_DTYPE_F32 ? p : W(p, p_dt, n);
    float *gf = g_dt == MC_DTYPE_F32 ? (float *)g : W(g, g_dt, n);
    K(be)->sgd(pf, buf, gf, n, lr, momentum, wd, first_step);
    if (p_dt != MC_DTYPE_F32) {
        NARROW(p, p_dt, pf, n);
        mc_cpu_release(pf);
    }
    if (g_dt != MC_DTYPE_F32)
        mc_cpu_release(gf);
}

static void cpu_dropout_mask(struct mc_backend *be, uint8_t *keep,
                             const struct mc_dropout_stream *r, int64_t first, int64_t n, float p)
{
    K(be)->dropout_mask(keep, first, n, r->seed, r->c1_hi, r->c2, r->c3, p);
}

static void cpu_fill_normal(struct mc_backend *be, enum mc_dtype dt, void *out, int64_t first,
                            int64_t n, uint64_t seed, uint32_t c2, uint32_t c3, float std)
{
    const char *op = "fill_normal";
    need_op_dt(dt, op);
    if (dt == MC_DTYPE_F32) {
        mc_rng_normal_fill(out, first, n, seed, c2, c3, std);
        return;
    }
    float *f = mc_cpu_scratch(n, op); /* the fp32 samples, rounded once */
    mc_rng_normal_fill(f, first, n, seed, c2, c3, std);
    NARROW(out, dt, f, n);
    mc_cpu_release(f);
}

static void cpu_masked_loss(struct mc_backend *be, enum mc_dtype dt, double *sum, double *count,
                            const void *loss_, const float *mask, int64_t n)
{
    const char *op = "masked_loss";
    need_op_dt(dt, op);
    float *wide = dt == MC_DTYPE_F32 ? NULL : W(loss_, dt, n);
    const float *loss = wide ? wide : loss_;
    double s = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)loss[i] * mask[i];
        d += mask[i];
    }
    mc_cpu_release(wide);
    *sum = s;
    *count = d;
}

static void cpu_masked_loss_bwd(struct mc_backend *be, float *dloss, const float *mask,
                                float scale, int64_t n)
{
    (void)be;
    for (int64_t i = 0; i < n; i++)
        dloss[i] = mask[i] * scale;
}

/* Both rounding modes are implemented for every 16-bit op (torch_cpu16_ref.c). */
static bool cpu_set_rounding(struct mc_backend *be, enum mc_rounding r)
{
    if (r != MC_ROUNDING_FUSED && r != MC_ROUNDING_TORCH_CPU)
        return false;
    be->rounding = r;
    return true;
}

static const struct mc_backend_ops cpu_ops = {
    .version = MC_BACKEND_VERSION,
    .name = "cpu",
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_to_backend = cpu_copy,
    .copy_to_host = cpu_copy,
    .copy = cpu_copy,
    .set = cpu_set,
    .sync = cpu_sync,
    .measure = cpu_measure,
    .adopt = cpu_adopt,
    .set_rounding = cpu_set_rounding,
    .convert = cpu_convert,
    .accumulate = cpu_accumulate,
    .gemm = cpu_gemm,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .gelu_tanh_fwd = cpu_gelu_tanh_fwd,
    .gelu_tanh_bwd = cpu_gelu_tanh_bwd,
    .gelu_erf_fwd = cpu_gelu_erf_fwd,
    .gelu_erf_bwd = cpu_gelu_erf_bwd,
    .squared_relu_fwd = cpu_squared_relu_fwd,
    .squared_relu_bwd = cpu_squared_relu_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .bias_grad = cpu_bias_grad,
    .bias_dropout_add = cpu_bias_dropout_add,
    .masked_softmax_fwd = cpu_masked_softmax_fwd,
    .masked_softmax_bwd = cpu_masked_softmax_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .xent_max = cpu_xent_max,
    .xent_sumexp = cpu_xent_sumexp,
    .xent_bwd = cpu_xent_bwd,
    .sumsq = cpu_sumsq,
    .count_zeros = cpu_count_zeros,
    .scale = cpu_scale,
    .adamw = cpu_adamw,
    .sgd = cpu_sgd,
    .attention_fwd = mc_cpu_attention_fwd,
    .attention_bwd = mc_cpu_attention_bwd,
    .flash_attention_fwd = mc_cpu_flash_attention_fwd,
    .flash_attention_bwd = mc_cpu_flash_attention_bwd,
    .dropout_mask = cpu_dropout_mask,
    .fill_normal = cpu_fill_normal,
    .masked_loss = cpu_masked_loss,
    .masked_loss_bwd = cpu_masked_loss_bwd,
};

const struct mc_backend_ops *mc_cpu_backend_ops(void) { return &cpu_ops; }

mc_status mc_cpu_backend_create(const struct mc_cpu_kernels *k, struct mc_backend **out)
{
    MC_ASSERT(k && k->version == MC_CPU_KERNELS_VERSION);
    struct mc_backend *be = mc_calloc(1, sizeof(*be));
    if (!be)
        return MC_ERR_NOMEM;
    be->ops = &cpu_ops;
    be->name = k->name;
    be->impl = (void *)k;
#ifdef _OPENMP
    be->n_threads = omp_get_max_threads();
#else
    be->n_threads = 1;
#endif
    *out = be;
    return MC_OK;
}
