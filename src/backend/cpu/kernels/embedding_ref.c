/* Reference vocab-parallel embedding lookup and its grad: the local part of Megatron's
 * VocabParallelEmbedding (tensor_parallel/layers.py): ids outside this rank's vocab range give
 * zero rows (the all-reduce across tp then sums the one real row). The grad is scattered with
 * one owner per column block, adding tokens in order, so it is thread-count independent. */
#include "backend/cpu/kernels/ref.h"

#include <string.h>

void embedding_fwd_ref(float *y, const float *w, const int64_t *ids, int64_t n, int64_t h,
                       int64_t vocab_start, int64_t vocab_local)
{
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t t = 0; t < n; t++) {
        int64_t id = ids[t] - vocab_start;
        if (id >= 0 && id < vocab_local)
            memcpy(y + t * h, w + id * h, (size_t)h * sizeof(float));
        else
            memset(y + t * h, 0, (size_t)h * sizeof(float));
    }
}

void embedding_bwd_ref(float *dw, const float *dy, const int64_t *ids, int64_t n, int64_t h,
                       int64_t vocab_start, int64_t vocab_local)
{
    int64_t nblk = (h + MC_REF_COL_BLOCK - 1) / MC_REF_COL_BLOCK;
#pragma omp parallel for schedule(static) if (n * h > 16384)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t j0 = blk * MC_REF_COL_BLOCK;
        int64_t j1 = j0 + MC_REF_COL_BLOCK < h ? j0 + MC_REF_COL_BLOCK : h;
        for (int64_t t = 0; t < n; t++) {
            int64_t id = ids[t] - vocab_start;
            if (id < 0 || id >= vocab_local)
                continue;
            for (int64_t j = j0; j < j1; j++)
                dw[id * h + j] += dy[t * h + j];
        }
    }
}
