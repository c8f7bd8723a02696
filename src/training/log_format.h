/* Text of Megatron's training-log lines: training_log()'s per-interval line,
 * evaluate_and_print_results()'s validation box, print_datetime(), the timers block
 * (megatron/core/timers.py) and report_memory(). Megatron-LM core_v0.12.1,
 * megatron/training/training.py and utils.py. Formatting only: the loop supplies the numbers. */
#ifndef MC_TRAINING_LOG_FORMAT_H
#define MC_TRAINING_LOG_FORMAT_H

#include <stddef.h>
#include <time.h>

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One training line. Losses are the interval's float32 sums (Megatron accumulates them in a
 * float32 tensor); each prints as sum / max(1, advanced_iters) only when that is > 0. */
struct mc_log_train_line {
    time_t now;                     /* local time of the line; 0 = time(NULL) */
    int64_t iteration, train_iters;
    int64_t consumed_samples, skipped_samples; /* skipped printed only when > 0 */
    double elapsed_per_iter_s;      /* interval time / (advanced + skipped iterations) */
    bool log_throughput;
    double throughput;              /* TFLOP/s/GPU */
    double learning_rate;           /* scheduler value; printed rounded to float32 */
    bool has_decoupled_lr;
    double decoupled_lr;            /* printed unrounded (Megatron does not reduce it) */
    int64_t batch_size;             /* running global batch size */
    int n_losses;
    const char *const *loss_names;  /* [n_losses], in insertion order ("lm loss") */
    const float *loss_sums;         /* [n_losses] */
    int64_t advanced_iters, skipped_iters, nan_iters;
    double loss_scale;
    bool has_grad_norm;             /* false after a skipped last iteration */
    double grad_norm;               /* printed rounded to float32 */
    bool has_num_zeros;
    double num_zeros;               /* printed as Python str(float): "9.0" */
    bool num_zeros_is_int;          /* MixedPrecisionOptimizer without --log-num-zeros-in-grad
                                       returns the int 0: printed "0" */
    bool has_params_norm;
    double params_norm;             /* printed rounded to float32 */
};

/* training_log's running totals between two printed lines (its total_loss_dict): losses are
 * float32 sums over advanced iterations, keyed in first-seen order; a skipped iteration adds
 * nothing but counts as a nan iteration when any of its losses is +-inf or NaN. */
#define MC_LOG_MAX_LOSSES 8
struct mc_log_accum {
    int n;
    char names[MC_LOG_MAX_LOSSES][64];
    float sums[MC_LOG_MAX_LOSSES];
    int64_t advanced, skipped, nan;
};
MC_API void mc_log_accum_init(struct mc_log_accum *acc);
/* Adds one iteration's reduced losses. MC_ERR_CONFIG when more than MC_LOG_MAX_LOSSES keys. */
/* total_loss_dict[name] += value for a key outside the iteration count (track_moe_metrics'
 * aux losses, added on skipped iterations too). */
MC_API mc_status mc_log_accum_add_extra(struct mc_log_accum *acc, const char *name, float value);
MC_API mc_status mc_log_accum_add(struct mc_log_accum *acc, int n, const char *const *names,
                                  const float *values, bool skipped_iter);
/* Points the line's loss/counter fields at the totals (valid while acc lives). */
MC_API void mc_log_accum_fill(const struct mc_log_accum *acc, const char **names_buf,
                              struct mc_log_train_line *l);
/* After a printed line: sums and counters back to zero, keys kept (as Megatron does). */
MC_API void mc_log_accum_reset(struct mc_log_accum *acc);
/* TFLOP/s per GPU: flops / (seconds per iteration x 1e12 x world size). */
MC_API double mc_log_throughput(double flops_per_iter, double elapsed_per_iter_s, int64_t world);

/* Writes the line (no newline) to buf; returns the length needed (snprintf convention). */
MC_API size_t mc_log_format_train_line(char *buf, size_t n, const struct mc_log_train_line *l);

/* The three-line validation box for `prefix` ("iteration 10", "iteration 20 on test set"),
 * with "\n" after each line. */
MC_API size_t mc_log_format_validation(char *buf, size_t n, const char *prefix, int n_losses,
                                       const char *const *names, const double *values);

/* "[<what>] datetime: 2025-01-01 12:00:02 " (local time; now 0 = time(NULL)). */
MC_API size_t mc_log_format_datetime(char *buf, size_t n, const char *what, time_t now);

/* Timers block. mode: "minmax", "max" or "all". For minmax/max, mins/maxs[k] are already divided
 * by the normalizer (ms) and entries whose max is 0 are skipped; returns 0 (empty buf) when none
 * qualifies, as Megatron prints nothing then. For "all", per_rank[k * world + r] (ms, already
 * normalized) and zero entries are skipped. */
MC_API size_t mc_log_format_timers(char *buf, size_t n, const char *mode, int n_timers,
                                   const char *const *names, const double *mins,
                                   const double *maxs, const double *per_rank, int world);

/* "[Rank 0] (after 5 iterations) memory (MB) | allocated: ... | max reserved: ..." with Python
 * str() of each float. */
MC_API size_t mc_log_format_memory(char *buf, size_t n, int rank, const char *name,
                                   double allocated_mb, double max_allocated_mb,
                                   double reserved_mb, double max_reserved_mb);

/* One progress.txt line (--log-progress, utils.append_to_progress_log), with "\n":
 * "<time>\tJob ID: <SLURM_JOB_ID or empty>\t# GPUs: <world>\t<text>". */
MC_API size_t mc_log_format_progress(char *buf, size_t n, time_t now, const char *job_id,
                                     int64_t world, const char *text);
/* The text of a save entry: "Saved checkpoint\tIteration: 10\tJob throughput: 1.2 TFLOP/s/GPU
 * \tCumulative throughput: ...\tFloating-point operations: 1.23e+18\tTokens (in billions): 0.12"
 * ("Saving async checkpoint" when async). */
MC_API size_t mc_log_format_progress_saved(char *buf, size_t n, bool async, int64_t iteration,
                                           double job_tflops, double cumulative_tflops,
                                           double flops_so_far, int64_t tokens_so_far);

#ifdef __cplusplus
}
#endif

#endif
