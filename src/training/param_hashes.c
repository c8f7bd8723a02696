/* Parameter hashes across data-parallel replicas (megatron/core/utils.py,
 * check_param_hashes_across_dp_replicas with cross_check=True): a silent corruption of one
 * replica (memory, network) would otherwise train on unnoticed, since data parallelism only ever
 * exchanges gradients. Megatron hashes with SHA-1; MD5 here (the digests are only compared,
 * never shown, so any collision-resistant digest gives the same answer). */
#include "training/param_hashes.h"

#include <stdio.h>
#include <string.h>

#include "core/md5.h"

mc_status mc_param_hashes_match(mc_gpt_model *const *chunks, int vp, const struct mc_ps_comm *dp,
                                int world_rank, bool *match)
{
    int64_t n = 0;
    for (int v = 0; v < vp; v++)
        n += mc_gpt_num_params(chunks[v]);
    /* A digest is 16 bytes: two int64 words, so the comm layer's int64 all-gather moves it. */
    int64_t *local = mc_calloc((size_t)(2 * n + 1), sizeof(int64_t));
    int64_t *all = mc_calloc((size_t)(2 * n + 1) * (size_t)dp->size, sizeof(int64_t));
    if (!local || !all) {
        mc_free(local);
        mc_free(all);
        return mc_error(MC_ERR_NOMEM, "out of memory hashing the parameters");
    }
    int64_t k = 0;
    for (int v = 0; v < vp; v++)
        for (int64_t i = 0; i < mc_gpt_num_params(chunks[v]); i++, k++) {
            struct mc_param_view p = mc_gpt_param(chunks[v], i);
            mc_md5(p.data, (size_t)p.numel * sizeof(float), (uint8_t *)&local[2 * k]);
        }
    mc_status st = mc_comm_all_gather(dp->comm, all, local, 2 * n, MC_DTYPE_I64,
                                      "data-parallel weight-hash all-gather");
    if (st == MC_OK) {
        size_t bytes = (size_t)(2 * n) * sizeof(int64_t);
        /* Name what differs from data-parallel rank 0 (Megatron's logger.info, every rank). */
        if (memcmp(local, all, bytes)) {
            k = 0;
            for (int v = 0; v < vp; v++)
                for (int64_t i = 0; i < mc_gpt_num_params(chunks[v]); i++, k++)
                    if (memcmp(&local[2 * k], &all[2 * k], 2 * sizeof(int64_t)))
                        printf("INFO:megatron.core.utils:[Rank %d] Hash not matching for %s in "
                               "model chunk%d\n", world_rank, mc_gpt_param(chunks[v], i).name, v);
            fflush(stdout);
        }
        /* cross_check: every replica against this one; all ranks see the same gathered set,
         * so all reach the same answer. */
        *match = true;
        for (int r = 0; r < dp->size; r++)
            if (memcmp(local, all + (size_t)r * (size_t)(2 * n), bytes))
                *match = false;
    }
    mc_free(local);
    mc_free(all);
    return st;
}
