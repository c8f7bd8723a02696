/* Micro-batch calculator with batch-size ramp-up: mirrors
 * megatron/core/num_microbatches_calculator.py (ConstantNumMicroBatchesCalculator,
 * RampupBatchsizeNumMicroBatchesCalculator) and update_train_iters() of training.py. The ramp
 * uses Python's float division and int() truncation: integer formulas differ at the
 * boundaries. Messages carry Megatron's logger prefix, typos fixed (docs/cli-differences.md). */
#include "training/microbatches.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define LOGP "INFO:megatron.core.num_microbatches_calculator:"

#define bad(...) mc_error(MC_ERR_CONFIG, __VA_ARGS__)

static void note(const struct mc_microbatches *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void note(const struct mc_microbatches *m, const char *fmt, ...)
{
    if (!m->log)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs(LOGP, m->log);
    vfprintf(m->log, fmt, ap);
    fputc('\n', m->log);
    va_end(ap);
}

static mc_status init_constant(struct mc_microbatches *m)
{
    int64_t mbdp = m->micro_batch_size * m->data_parallel_size;
    if (m->decrease_if_needed) {
        m->running = (m->global_batch_size / mbdp) * mbdp;
        note(m, "decreasing batch size from %lld to %lld to keep divisibility by "
                "micro_batch_size=%lld * data_parallel_size=%lld",
             (long long)m->global_batch_size, (long long)m->running,
             (long long)m->micro_batch_size, (long long)m->data_parallel_size);
    } else {
        if (m->global_batch_size % mbdp)
            return bad("global batch size (%lld) is not divisible by micro batch size (%lld) "
                       "times data parallel size (%lld)", (long long)m->global_batch_size,
                       (long long)m->micro_batch_size, (long long)m->data_parallel_size);
        m->running = m->global_batch_size;
    }
    m->num_micro_batches = m->running / mbdp;
    if (m->num_micro_batches < 1)
        return bad("number of microbatches should be at least 1, got %lld.",
                   (long long)m->num_micro_batches);
    m->current = m->global_batch_size;
    note(m, "setting number of microbatches to constant %lld",
         (long long)m->num_micro_batches);
    return MC_OK;
}

static bool parse_int(const char *s, int64_t *out)
{
    char *end;
    while (*s == ' ')
        s++;
    long long v = strtoll(s, &end, 10);
    while (*end == ' ')
        end++;
    if (end == s || *end)
        return false;
    *out = v;
    return true;
}

mc_status mc_microbatches_init(struct mc_microbatches *m, const char *const *rampup,
                               int n_rampup, int64_t global_batch_size, int64_t micro_batch_size,
                               int64_t data_parallel_size, bool decrease_if_needed, FILE *log)
{
    memset(m, 0, sizeof(*m));
    m->global_batch_size = global_batch_size;
    m->micro_batch_size = micro_batch_size;
    m->data_parallel_size = data_parallel_size;
    m->decrease_if_needed = decrease_if_needed;
    m->log = log;
    m->current = -1;
    if (micro_batch_size * data_parallel_size <= 0) /* Python: ZeroDivisionError */
        return bad("micro_batch_size (%lld) * data_parallel_size (%lld) must be positive",
                   (long long)micro_batch_size, (long long)data_parallel_size);
    if (!rampup)
        return init_constant(m);
    if (n_rampup != 3)
        return mc_error(MC_ERR_CONFIG, "expected the following format: --rampup-batch-size "
                        "<start batch size> <batch size increment> <ramp-up samples>");
    int64_t v[3];
    for (int k = 0; k < 3; k++)
        if (!parse_int(rampup[k], &v[k]))
            return mc_error(MC_ERR_CONFIG, "invalid literal for int() with base 10: '%s'",
                            rampup[k]);
    m->rampup = true;
    m->start = v[0];
    m->increment = v[1];
    m->rampup_samples = v[2];
    note(m, "will use batch size rampup starting from global batch size %lld to global batch "
            "size %lld with batch size increments %lld over %lld samples.",
         (long long)m->start, (long long)global_batch_size, (long long)m->increment,
         (long long)m->rampup_samples);
    if (global_batch_size <= 0)
        return bad("global batch size should be positive, got %lld.",
                   (long long)global_batch_size);
    if (m->start <= 0)
        return bad("start batch size should be positive, got %lld.",
                   (long long)m->start);
    if (m->increment <= 0)
        return bad("batch size increment should be positive, got %lld.",
                   (long long)m->increment);
    if (m->rampup_samples < 0)
        return bad("ramp-up samples should be non-negative, got %lld.",
                   (long long)m->rampup_samples);
    if (micro_batch_size * data_parallel_size <= 0)
        return mc_error(MC_ERR_CONFIG, "micro_batch_size * data_parallel_size must be positive");
    int64_t diff = global_batch_size - m->start;
    if (diff < 0)
        return bad("expected global batch size to be greater than or equal to start batch size, "
                   "got %lld and %lld", (long long)global_batch_size, (long long)m->start);
    if (diff % m->increment)
        return bad("expected global batch size interval (%lld) to be divisible by global batch "
                   "size increment (%lld)", (long long)diff, (long long)m->increment);
    int64_t n_inc = diff / m->increment;
    if (n_inc == 0) /* Python raises ZeroDivisionError here */
        return mc_error(MC_ERR_CONFIG, "ZeroDivisionError: --rampup-batch-size start (%lld) "
                        "equals the global batch size: nothing to ramp up", (long long)m->start);
    m->samples_per_increment = (double)m->rampup_samples / (double)n_inc;
    mc_status st = mc_microbatches_update(m, 0, false);
    return st;
}

mc_status mc_microbatches_update(struct mc_microbatches *m, int64_t consumed, bool check)
{
    if (!m->rampup)
        return MC_OK;
    int64_t old = m->current;
    if (consumed > m->rampup_samples) {
        m->current = m->global_batch_size;
    } else {
        if (m->samples_per_increment == 0.0)
            return mc_error(MC_ERR_CONFIG, "ZeroDivisionError: float division by zero "
                            "(--rampup-batch-size with 0 ramp-up samples)");
        /* Python: int(consumed / per_increment), truncation toward zero */
        int64_t steps = (int64_t)((double)consumed / m->samples_per_increment);
        m->current = m->start + steps * m->increment;
        if (m->current > m->global_batch_size)
            return mc_error(MC_ERR_CONFIG, "ramp-up batch size %lld exceeds the global batch size",
                            (long long)m->current);
    }
    bool changed = old != m->current;
    if (changed && old < 0)
        note(m, "setting initial batch size to %lld", (long long)m->current);
    else if (changed)
        note(m, "ramping up batch size from %lld to %lld", (long long)old,
             (long long)m->current);
    int64_t mbdp = m->micro_batch_size * m->data_parallel_size;
    if (check && !m->decrease_if_needed && m->current % mbdp)
        return bad("current global batch size (%lld) is not divisible by micro-batch-size (%lld) "
                   "times data parallel size (%lld)", (long long)m->current,
                   (long long)m->micro_batch_size, (long long)m->data_parallel_size);
    if (m->decrease_if_needed && m->current % mbdp) {
        m->running = (m->current / mbdp) * mbdp;
        if (changed)
            note(m, "decreasing batch size from %lld to %lld to keep divisibility by "
                    "micro_batch_size=%lld * data_parallel_size=%lld",
                 (long long)m->current, (long long)m->running, (long long)m->micro_batch_size,
                 (long long)m->data_parallel_size);
    } else {
        m->running = m->current;
    }
    m->num_micro_batches = m->running / mbdp;
    return MC_OK;
}

int64_t mc_microbatches_train_iters(struct mc_microbatches *m, int64_t train_samples)
{
    if (!m->rampup)
        return train_samples / m->global_batch_size;
    int64_t iters = 0, consumed = 0;
    FILE *log = m->log;
    m->log = NULL; /* Megatron's update here is not verbose */
    while (consumed <= m->rampup_samples && consumed <= train_samples) {
        mc_microbatches_update(m, consumed, false);
        consumed += m->current;
        iters++;
    }
    mc_microbatches_update(m, 0, false);
    m->log = log;
    if (train_samples > consumed)
        iters += (train_samples - consumed) / m->global_batch_size;
    return iters;
}
