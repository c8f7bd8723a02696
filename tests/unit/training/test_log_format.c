/* Log-line text (src/training/log_format.c) against the spec's Megatron fixtures (§6). */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "training/log_format.h"

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    char buf[2048];
    const char *names[] = {"lm loss"};
    float sums[] = {7.631606f};
    struct mc_log_train_line l = {
        .now = 1735732804, .iteration = 5, .train_iters = 20, .consumed_samples = 40,
        .elapsed_per_iter_s = 0.134, .learning_rate = 9.913534e-4, .batch_size = 8,
        .n_losses = 1, .loss_names = names, .loss_sums = sums, .advanced_iters = 1,
        .loss_scale = 1.0, .has_grad_norm = true, .grad_norm = 0.474, .has_num_zeros = true,
        .num_zeros = 9.0};
    mc_log_format_train_line(buf, sizeof(buf), &l);
    CHECK(!strcmp(buf, " [2025-01-01 12:00:04] iteration        5/      20 | consumed samples:    "
                       "       40 | elapsed time per iteration (ms): 134.0 | learning rate: "
                       "9.913534E-04 | global batch size:     8 | lm loss: 7.631606E+00 | loss "
                       "scale: 1.0 | grad norm: 0.474 | num zeros: 9.0 | number of skipped "
                       "iterations:   0 | number of nan iterations:   0 |"));
    /* bf16/fp16 without --log-num-zeros-in-grad: Megatron's int 0; a large loss scale */
    l.num_zeros_is_int = true;
    l.num_zeros = 0;
    l.loss_scale = 4294967296.0;
    mc_log_format_train_line(buf, sizeof(buf), &l);
    CHECK(strstr(buf, " loss scale: 4294967296.0 | grad norm: 0.474 | num zeros: 0 | ") != NULL);
    l.num_zeros_is_int = false;
    l.num_zeros = 9.0;
    l.loss_scale = 1.0;
    /* float32 rounding of the printed LR: 2.9975454545e-04 prints as 2.997546E-04 */
    l.learning_rate = 2.9975454545e-04;
    l.skipped_samples = 3;
    mc_log_format_train_line(buf, sizeof(buf), &l);
    CHECK(strstr(buf, "learning rate: 2.997546E-04 |") != NULL);
    CHECK(strstr(buf, " skipped samples:            3 |") != NULL);
    /* a NaN average is silently dropped */
    sums[0] = NAN;
    mc_log_format_train_line(buf, sizeof(buf), &l);
    CHECK(strstr(buf, "lm loss") == NULL);

    mc_log_format_datetime(buf, sizeof(buf), "after megatron is initialized", 1735732802);
    CHECK(!strcmp(buf, "[after megatron is initialized] datetime: 2025-01-01 12:00:02 "));

    const char *tn[] = {"forward-backward", "optimizer"};
    double mins[] = {65.0, 0.0}, maxs[] = {65.0, 0.0};
    mc_log_format_timers(buf, sizeof(buf), "minmax", 2, tn, mins, maxs, NULL, 0);
    CHECK(!strcmp(buf, "(min, max) time across ranks (ms):\n"
                       "    forward-backward ...............................: (65.00, 65.00)"));
    mc_log_format_timers(buf, sizeof(buf), "max", 2, tn, mins, maxs, NULL, 0);
    CHECK(!strcmp(buf, "max time across ranks (ms):\n"
                       "    forward-backward ...............................: 65.00"));
    double per_rank[] = {34.0, 34.0, 0.0, 0.0};
    mc_log_format_timers(buf, sizeof(buf), "all", 2, tn, NULL, NULL, per_rank, 2);
    CHECK(!strcmp(buf, "times across ranks (ms):\n  forward-backward:\n     rank  0: 34.00\n"
                       "     rank  1: 34.00"));
    double zero[] = {0, 0};
    CHECK(mc_log_format_timers(buf, sizeof(buf), "minmax", 2, tn, zero, zero, NULL, 0) == 0);
    CHECK(buf[0] == '\0');
    mc_log_format_memory(buf, sizeof(buf), 0, "(after 5 iterations)", 1843.25, 2711.5, 3072.0, 3072.0);
    CHECK(!strcmp(buf, "[Rank 0] (after 5 iterations) memory (MB) | allocated: 1843.25 | max "
                       "allocated: 2711.5 | reserved: 3072.0 | max reserved: 3072.0"));
    /* Accumulation: fp16-style interval of 3 iterations, the middle one skipped with inf. */
    struct mc_log_accum acc;
    mc_log_accum_init(&acc);
    const char *keys[] = {"lm loss"};
    float v1[] = {2.5f}, vinf[] = {INFINITY}, v3[] = {3.25f};
    CHECK(mc_log_accum_add(&acc, 1, keys, v1, false) == MC_OK);
    CHECK(mc_log_accum_add(&acc, 1, keys, vinf, true) == MC_OK);
    CHECK(mc_log_accum_add(&acc, 1, keys, v3, false) == MC_OK);
    CHECK(acc.advanced == 2 && acc.skipped == 1 && acc.nan == 1 && acc.sums[0] == 5.75f);
    const char *nb[MC_LOG_MAX_LOSSES];
    struct mc_log_train_line l2 = l;
    sums[0] = 0;
    mc_log_accum_fill(&acc, nb, &l2);
    mc_log_format_train_line(buf, sizeof(buf), &l2);
    CHECK(strstr(buf, " lm loss: 2.875000E+00 |") != NULL);
    CHECK(strstr(buf, " number of skipped iterations:   1 | number of nan iterations:   1 |") != NULL);
    mc_log_accum_reset(&acc);
    CHECK(acc.n == 1 && acc.sums[0] == 0.0f && acc.advanced == 0 && acc.nan == 0);
    CHECK(mc_log_throughput(2e12, 0.5, 4) == 1.0);
    char text[512];
    mc_log_format_progress_saved(text, sizeof(text), false, 10, 1.25, 1.0, 1.234e18, 123456789);
    mc_log_format_progress(buf, sizeof(buf), 1735732804, NULL, 8, text);
    CHECK(!strcmp(buf, "2025-01-01 12:00:04\tJob ID: \t# GPUs: 8\tSaved checkpoint\tIteration: 10\t"
                       "Job throughput: 1.2 TFLOP/s/GPU\tCumulative throughput: 1.0 TFLOP/s/GPU\t"
                       "Floating-point operations: 1.23e+18\tTokens (in billions): 0.12\n"));
    return test_summary("test_log_format");
}
