/* Training-log text: mirrors the string building of training_log(),
 * evaluate_and_print_results() and print_datetime() in megatron/training/training.py,
 * report_memory() in utils.py and Timers.log() in megatron/core/timers.py (core_v0.12.1).
 * Python's "{:.6E}", "{:.1f}", "{:8d}" map to printf's "%.6E", "%.1f", "%8lld"; str(float) is
 * mc_py_float_repr. Values that Megatron passes through a float32 tensor are rounded here. */
#include "training/log_format.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "training/args.h"

struct sbuf {
    char *p;
    size_t n, at;
};

static void add(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add(struct sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->at < b->n ? b->p + b->at : NULL, b->at < b->n ? b->n - b->at : 0, fmt, ap);
    va_end(ap);
    if (k > 0)
        b->at += (size_t)k;
}

static void start(struct sbuf *b, char *p, size_t n)
{
    b->p = p;
    b->n = n;
    b->at = 0;
    if (n)
        p[0] = '\0';
}

static void stamp(char *out, size_t n, time_t now)
{
    if (!now)
        now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(out, n, "%Y-%m-%d %H:%M:%S", &tmv);
}

size_t mc_log_format_train_line(char *buf, size_t n, const struct mc_log_train_line *l)
{
    struct sbuf b;
    char ts[32], z[64];
    start(&b, buf, n);
    stamp(ts, sizeof(ts), l->now);
    add(&b, " [%s]", ts);
    add(&b, " iteration %8lld/%8lld |", (long long)l->iteration, (long long)l->train_iters);
    add(&b, " consumed samples: %12lld |", (long long)l->consumed_samples);
    if (l->skipped_samples > 0)
        add(&b, " skipped samples: %12lld |", (long long)l->skipped_samples);
    add(&b, " elapsed time per iteration (ms): %.1f |", l->elapsed_per_iter_s * 1000.0);
    if (l->log_throughput)
        add(&b, " throughput per GPU (TFLOP/s/GPU): %.1f |", l->throughput);
    add(&b, " learning rate: %.6E |", (double)(float)l->learning_rate);
    if (l->has_decoupled_lr)
        add(&b, " decoupled learning rate: %.6E |", l->decoupled_lr);
    add(&b, " global batch size: %5lld |", (long long)l->batch_size);
    double denom = (double)(l->advanced_iters > 1 ? l->advanced_iters : 1);
    for (int k = 0; k < l->n_losses; k++) {
        double avg = (double)l->loss_sums[k] / denom;
        if (avg > 0.0)
            add(&b, " %s: %.6E |", l->loss_names[k], avg);
    }
    add(&b, " loss scale: %.1f |", l->loss_scale);
    if (l->has_grad_norm)
        add(&b, " grad norm: %.3f |", (double)(float)l->grad_norm);
    if (l->has_num_zeros) {
        if (l->num_zeros_is_int)
            snprintf(z, sizeof(z), "%lld", (long long)l->num_zeros);
        else
            mc_py_float_repr(z, sizeof(z), l->num_zeros);
        add(&b, " num zeros: %s |", z);
    }
    if (l->has_params_norm)
        add(&b, " params norm: %.3f |", (double)(float)l->params_norm);
    add(&b, " number of skipped iterations: %3lld |", (long long)l->skipped_iters);
    add(&b, " number of nan iterations: %3lld |", (long long)l->nan_iters);
    return b.at;
}

size_t mc_log_format_validation(char *buf, size_t n, const char *prefix, int n_losses,
                                const char *const *names, const double *values)
{
    /* The middle line first, to know the dash count (its length + 1). */
    char line[4096];
    struct sbuf m;
    start(&m, line, sizeof(line));
    add(&m, " validation loss at %s | ", prefix);
    for (int k = 0; k < n_losses; k++) {
        double ppl = exp(values[k] < 20 ? values[k] : 20);
        add(&m, "%s value: %.6E | ", names[k], values[k]);
        add(&m, "%s PPL: %.6E | ", names[k], ppl);
    }
    struct sbuf b;
    start(&b, buf, n);
    size_t dashes = m.at + 1;
    for (int rep = 0; rep < 3; rep++) {
        if (rep == 1) {
            add(&b, "%s\n", line);
            continue;
        }
        for (size_t k = 0; k < dashes; k++)
            add(&b, "-");
        add(&b, "\n");
    }
    return b.at;
}

size_t mc_log_format_datetime(char *buf, size_t n, const char *what, time_t now)
{
    char ts[32];
    stamp(ts, sizeof(ts), now);
    struct sbuf b;
    start(&b, buf, n);
    add(&b, "[%s] datetime: %s ", what, ts);
    return b.at;
}

/* (name + ' ').ljust(48, '.') */
static void timer_name(struct sbuf *b, const char *name)
{
    size_t len = strlen(name) + 1;
    add(b, "%s ", name);
    for (; len < 48; len++)
        add(b, ".");
}

size_t mc_log_format_timers(char *buf, size_t n, const char *mode, int n_timers,
                            const char *const *names, const double *mins, const double *maxs,
                            const double *per_rank, int world)
{
    struct sbuf b;
    start(&b, buf, n);
    bool any = false;
    if (!strcmp(mode, "all")) {
        add(&b, "times across ranks (ms):");
        for (int k = 0; k < n_timers; k++) {
            bool first = true;
            for (int r = 0; r < world; r++) {
                double t = per_rank[(size_t)k * (size_t)world + (size_t)r];
                if (!(t > 0))
                    continue;
                if (first)
                    add(&b, "\n  %s:", names[k]);
                first = false;
                any = true;
                add(&b, "\n     rank %2d: %.2f", r, t);
            }
        }
    } else {
        bool max_only = !strcmp(mode, "max");
        add(&b, max_only ? "max time across ranks (ms):" : "(min, max) time across ranks (ms):");
        for (int k = 0; k < n_timers; k++) {
            if (!(maxs[k] > 0))
                continue;
            any = true;
            add(&b, "\n    ");
            timer_name(&b, names[k]);
            if (max_only)
                add(&b, ": %.2f", maxs[k]);
            else
                add(&b, ": (%.2f, %.2f)", mins[k], maxs[k]);
        }
    }
    if (!any) {
        if (n)
            buf[0] = '\0';
        return 0;
    }
    return b.at;
}

size_t mc_log_format_memory(char *buf, size_t n, int rank, const char *name, double allocated_mb,
                            double max_allocated_mb, double reserved_mb, double max_reserved_mb)
{
    char v[4][64];
    mc_py_float_repr(v[0], sizeof(v[0]), allocated_mb);
    mc_py_float_repr(v[1], sizeof(v[1]), max_allocated_mb);
    mc_py_float_repr(v[2], sizeof(v[2]), reserved_mb);
    mc_py_float_repr(v[3], sizeof(v[3]), max_reserved_mb);
    struct sbuf b;
    start(&b, buf, n);
    add(&b, "[Rank %d] %s memory (MB) | allocated: %s | max allocated: %s | reserved: %s | "
            "max reserved: %s", rank, name, v[0], v[1], v[2], v[3]);
    return b.at;
}

void mc_log_accum_init(struct mc_log_accum *acc) { memset(acc, 0, sizeof(*acc)); }

static int accum_key(struct mc_log_accum *acc, const char *name)
{
    for (int k = 0; k < acc->n; k++)
        if (!strcmp(acc->names[k], name))
            return k;
    if (acc->n == MC_LOG_MAX_LOSSES || strlen(name) >= sizeof(acc->names[0]))
        return -1;
    snprintf(acc->names[acc->n], sizeof(acc->names[0]), "%s", name);
    acc->sums[acc->n] = 0.0f;
    return acc->n++;
}

mc_status mc_log_accum_add(struct mc_log_accum *acc, int n, const char *const *names,
                           const float *values, bool skipped_iter)
{
    bool got_nan = false;
    if (!skipped_iter)
        acc->advanced++;
    acc->skipped += skipped_iter ? 1 : 0;
    for (int k = 0; k < n; k++) {
        if (skipped_iter) {
            got_nan = got_nan || isnan(values[k]) || isinf(values[k]);
            continue;
        }
        int j = accum_key(acc, names[k]);
        if (j < 0)
            return mc_error(MC_ERR_CONFIG, "training log: loss key '%s' does not fit (at most %d "
                            "keys of up to %zu characters)", names[k], MC_LOG_MAX_LOSSES,
                            sizeof(acc->names[0]) - 1);
        acc->sums[j] = acc->sums[j] + values[k]; /* float32 addition, as the CUDA tensor */
    }
    acc->nan += got_nan ? 1 : 0;
    return MC_OK;
}

mc_status mc_log_accum_add_extra(struct mc_log_accum *acc, const char *name, float value)
{
    int j = accum_key(acc, name);
    if (j < 0)
        return mc_error(MC_ERR_CONFIG, "training log: loss key '%s' does not fit", name);
    acc->sums[j] = acc->sums[j] + value;
    return MC_OK;
}

void mc_log_accum_fill(const struct mc_log_accum *acc, const char **names_buf,
                       struct mc_log_train_line *l)
{
    for (int k = 0; k < acc->n; k++)
        names_buf[k] = acc->names[k];
    l->n_losses = acc->n;
    l->loss_names = names_buf;
    l->loss_sums = acc->sums;
    l->advanced_iters = acc->advanced;
    l->skipped_iters = acc->skipped;
    l->nan_iters = acc->nan;
}

void mc_log_accum_reset(struct mc_log_accum *acc)
{
    for (int k = 0; k < acc->n; k++)
        acc->sums[k] = 0.0f;
    acc->advanced = acc->skipped = acc->nan = 0;
}

double mc_log_throughput(double flops_per_iter, double elapsed_per_iter_s, int64_t world)
{
    return flops_per_iter / (elapsed_per_iter_s * 1e12 * (double)world);
}

size_t mc_log_format_progress(char *buf, size_t n, time_t now, const char *job_id, int64_t world,
                              const char *text)
{
    char ts[32];
    stamp(ts, sizeof(ts), now);
    struct sbuf b;
    start(&b, buf, n);
    add(&b, "%s\tJob ID: %s\t# GPUs: %lld\t%s\n", ts, job_id ? job_id : "", (long long)world, text);
    return b.at;
}

size_t mc_log_format_progress_saved(char *buf, size_t n, bool async, int64_t iteration,
                                    double job_tflops, double cumulative_tflops,
                                    double flops_so_far, int64_t tokens_so_far)
{
    struct sbuf b;
    start(&b, buf, n);
    add(&b, "%s\tIteration: %lld\tJob throughput: %.1f TFLOP/s/GPU\tCumulative throughput: "
            "%.1f TFLOP/s/GPU\tFloating-point operations: %.2e\tTokens (in billions): %.2f",
        async ? "Saving async checkpoint" : "Saved checkpoint", (long long)iteration, job_tflops,
        cumulative_tflops, flops_so_far, (double)tokens_so_far / 1e9);
    return b.at;
}
