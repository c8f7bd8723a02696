/* Sampling the next token: TextGenerationController.sample_from_logits of
 * megatron/core/inference (core_v0.12.1). Greedy is the argmax; otherwise the logits are
 * divided by the temperature, then filtered by top-k (logits below the k-th largest get -inf)
 * or top-p (sorted descending, the tokens after the cumulative probability first exceeds p get
 * -inf, the first always kept: Megatron's shift by one), softmaxed, and one token drawn.
 *
 * Megatron draws with torch.multinomial (CUDA's generator); ours is a Philox draw keyed by the
 * seed at (row, step), so a seed gives the same tokens on every run, thread count and batch
 * composition. Ties in the argmax and in the sort go to the lower token id (torch's CPU argmax
 * does the same). Only the tokenizer's vocabulary is a candidate, never the padding rows. */
#include "inference/inference.h"

#include <math.h>
#include <stdlib.h>

#include "core/rng.h"

mc_status mc_inf_sampling_check(const struct mc_inf_sampling *s, int64_t vocab_size)
{
    if (s->greedy)
        return MC_OK;
    if (!(s->temperature > 0.0f))
        return mc_error(MC_ERR_CONFIG, "--temperature %g: must be greater than 0", s->temperature);
    if (s->top_k < 0 || (s->top_k > 0 && s->top_k >= vocab_size))
        return mc_error(MC_ERR_CONFIG, "--top-k %lld: must be at least 0 and below the vocabulary "
                        "size %lld (top-k is larger than vocab size)", (long long)s->top_k,
                        (long long)vocab_size);
    if (s->top_p < 0.0f || s->top_p > 1.0f)
        return mc_error(MC_ERR_CONFIG, "--top-p %g: must be in [0, 1] (top-p should be in (0,1])",
                        s->top_p);
    if (s->top_k > 0 && s->top_p > 0.0f)
        return mc_error(MC_ERR_CONFIG, "--top-k %lld with --top-p %g: Cannot have top-p and top-k "
                        "both greater than zero", (long long)s->top_k, s->top_p);
    return MC_OK;
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* A uniform double in [0, 1) from 53 bits of Philox block (row, step) under the seed. */
static double uniform(uint64_t seed, int64_t row, int64_t step)
{
    uint32_t out[4], ctr[4] = {(uint32_t)step, (uint32_t)((uint64_t)step >> 32), (uint32_t)row,
                               0x53414d50u /* "SAMP": apart from the dropout streams */};
    mc_rng_philox(out, ctr, seed);
    uint64_t bits = ((uint64_t)out[0] << 21) ^ ((uint64_t)out[1] >> 11);
    return (double)(bits & ((1ull << 53) - 1)) * 0x1p-53;
}

static const float *sort_keys;
static int by_logit_desc(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    float x = sort_keys[i], y = sort_keys[j];
    if (x != y)
        return x > y ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* The k-th largest value of x[n] (k >= 1), through a sorted copy of the indices. */
static void sort_desc(const float *x, int64_t n, int64_t *idx)
{
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    sort_keys = x; /* qsort has no context argument in C11; one thread samples at a time */
    qsort(idx, (size_t)n, sizeof(*idx), by_logit_desc);
}

int64_t mc_inf_sample(const struct mc_inf_sampling *s, const float *logits, int64_t vocab_size,
                      int64_t row, int64_t step, float *work, int64_t *iwork)
{
    int64_t n = vocab_size;
    if (s->greedy)
        return argmax(logits, n);
    float *z = work;
    for (int64_t i = 0; i < n; i++)
        z[i] = logits[i] / s->temperature;
    if (s->top_k > 0 || s->top_p > 0.0f)
        sort_desc(z, n, iwork);
    if (s->top_k > 0) { /* logits < the k-th largest -> -inf (ties with it are kept) */
        float kth = z[iwork[s->top_k - 1]];
        for (int64_t i = 0; i < n; i++)
            if (z[i] < kth)
                z[i] = -INFINITY;
    } else if (s->top_p > 0.0f) {
        /* softmax of the sorted logits, cumulative; drop a token when the sum BEFORE it already
         * exceeds top_p (Megatron's filter shifted right by one) */
        double mx = z[iwork[0]], sum = 0.0, cum = 0.0;
        for (int64_t i = 0; i < n; i++)
            sum += exp((double)z[iwork[i]] - mx);
        bool drop = false;
        for (int64_t i = 0; i < n; i++) {
            int64_t id = iwork[i];
            double p = exp((double)z[id] - mx) / sum;
            if (drop)
                z[id] = -INFINITY;
            cum += p;
            drop = drop || cum > (double)s->top_p;
        }
    }
    double mx = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        mx = z[i] > mx ? z[i] : mx;
    for (int64_t i = 0; i < n; i++)
        sum += z[i] == -INFINITY ? 0.0 : exp((double)z[i] - mx);
    double u = uniform(s->seed, row, step) * sum, acc = 0.0;
    int64_t last = 0;
    for (int64_t i = 0; i < n; i++) {
        if (z[i] == -INFINITY)
            continue;
        acc += exp((double)z[i] - mx);
        last = i;
        if (u < acc)
            return i;
    }
    return last; /* u rounded up to the total */
}
