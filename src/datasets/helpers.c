/* Index builders of megatron/core/datasets/helpers.cpp (build_sample_idx,
 * build_blending_indices, build_exhaustive_blending_indices) and numpy's float64 sum used by
 * utils.normalize. The arithmetic follows the C++ (and numpy) operation for operation, since
 * the results are written into cache files that Megatron must be able to reuse. */
#include "megatron/gpt_dataset.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The drop_last count is integer; the other uses binary32 as the C++ does
 * (ceil(float(E*T - x) / seq)), which can differ from exact arithmetic for large counts. */
int64_t mc_gpt_num_samples(int64_t num_epochs, int64_t tokens_per_epoch, int64_t seq_length,
                           bool drop_last, int add_extra_token)
{
    int64_t total = num_epochs * tokens_per_epoch - add_extra_token;
    if (drop_last)
        return total / seq_length;
    return (int64_t)ceilf((float)total / (float)(int32_t)seq_length);
}

mc_status mc_gpt_build_sample_idx(int64_t *out, const int32_t *sizes, const int32_t *doc_idx,
                                  int64_t n_doc_idx, int64_t seq_length, int64_t num_epochs,
                                  int64_t tokens_per_epoch, bool drop_last, int add_extra_token)
{
    if (seq_length <= 1 || num_epochs <= 0 || tokens_per_epoch <= 1 || n_doc_idx <= 0)
        return mc_error(MC_ERR_CONFIG, "build_sample_idx needs seq_length > 1 (got %lld), "
                        "num_epochs > 0 (got %lld) and tokens_per_epoch > 1 (got %lld)",
                        (long long)seq_length, (long long)num_epochs, (long long)tokens_per_epoch);
    int64_t num_samples = mc_gpt_num_samples(num_epochs, tokens_per_epoch, seq_length, drop_last,
                                             add_extra_token);
    int64_t p = 0, off = 0;
    out[0] = 0;
    out[1] = 0;
    for (int64_t k = 1; k <= num_samples; k++) {
        int64_t remaining = seq_length + add_extra_token;
        while (remaining != 0) {
            int64_t len_here = sizes[doc_idx[p]] - off;
            remaining -= len_here;
            if (remaining <= 0) {
                /* the sample ends inside this document; the next one starts at its last token
                 * when the extra token is shared */
                off += remaining + len_here - add_extra_token;
                remaining = 0;
            } else {
                if (p == n_doc_idx - 1) {
                    if (k != num_samples)
                        return mc_error(MC_ERR_INTERNAL, "build_sample_idx ran out of documents "
                                        "at sample %lld of %lld", (long long)k, (long long)num_samples);
                    off = sizes[doc_idx[p]] - add_extra_token;
                    break;
                }
                p++;
                off = 0;
            }
        }
        out[2 * k] = p;
        out[2 * k + 1] = off;
    }
    return MC_OK;
}

mc_status mc_blend_build_indices(int16_t *dataset_index, int64_t *dataset_sample_index,
                                 const double *weights, int n_datasets, int64_t size)
{
    int64_t *count = mc_calloc((size_t)n_datasets, sizeof(*count));
    if (!count)
        return MC_ERR_NOMEM;
    for (int64_t k = 0; k < size; k++) {
        double kk = fmax((double)k, 1.0);
        int best = 0;
        double best_err = weights[0] * kk - (double)count[0];
        for (int d = 1; d < n_datasets; d++) {
            double err = weights[d] * kk - (double)count[d];
            if (err > best_err) {
                best_err = err;
                best = d;
            }
        }
        dataset_index[k] = (int16_t)best;
        dataset_sample_index[k] = count[best]++;
    }
    mc_free(count);
    return MC_OK;
}

mc_status mc_blend_build_exhaustive_indices(int16_t *dataset_index, int64_t *dataset_sample_index,
                                            const int64_t *sizes, int n_datasets)
{
    int64_t *count = mc_calloc((size_t)n_datasets, sizeof(*count));
    double *w = mc_calloc((size_t)n_datasets, sizeof(*w));
    bool *spent = mc_calloc((size_t)n_datasets, sizeof(*spent));
    if (!count || !w || !spent) {
        mc_free(count);
        mc_free(w);
        mc_free(spent);
        return MC_ERR_NOMEM;
    }
    int64_t total = 0;
    int unspent = n_datasets;
    for (int d = 0; d < n_datasets; d++)
        total += sizes[d];
    for (int d = 0; d < n_datasets; d++)
        w[d] = (double)sizes[d] / (double)total;
    for (int64_t k = 0; unspent > 0; k++) {
        double kk = fmax((double)k, 1.0);
        int best = -1;
        double best_err = -DBL_MAX;
        for (int d = 0; d < n_datasets; d++) {
            if (spent[d])
                continue;
            double err = w[d] * kk - (double)count[d];
            if (err > best_err) {
                best_err = err;
                best = d;
            }
        }
        dataset_index[k] = (int16_t)best;
        dataset_sample_index[k] = count[best]++;
        if ((double)sizes[best] - (double)count[best] == 0) {
            spent[best] = true;
            unspent--;
        }
    }
    mc_free(count);
    mc_free(w);
    mc_free(spent);
    return MC_OK;
}

/* numpy's pairwise_sum for float64 (8-way unrolled blocks, split at multiples of 8). */
static double pairwise(const double *a, int64_t n)
{
    if (n < 8) {
        double r = -0.0;
        for (int64_t i = 0; i < n; i++)
            r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        memcpy(r, a, sizeof(r));
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += a[i + j];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            s += a[i];
        return s;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(a, n2) + pairwise(a + n2, n - n2);
}

double mc_np_sum(const double *x, int64_t n) { return 0.0 + pairwise(x, n); }

void mc_blend_normalize(double *w, int64_t n)
{
    double s = mc_np_sum(w, n);
    for (int64_t i = 0; i < n; i++)
        w[i] = w[i] / s;
}
