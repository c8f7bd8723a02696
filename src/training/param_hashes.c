/* Parameter hashes across data-parallel replicas (megatron/core/utils.py,
 * check_param_hashes_across_dp_replicas with cross_check=True): a silent corruption of one
 * replica (memory, network) would otherwise train on unnoticed, since data parallelism only ever
 * exchanges gradients. Megatron hashes with SHA-1; MD5 here (the digests are only compared,
 * never shown, so any collision-resistant digest gives the same answer). */
#include "training/param_hashes.h"

#include <math.h>
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

/* ---- --test-mode: the q/k layernorm parameters across ranks ---------------------------- */

static bool is_qk_norm(const char *name)
{
    return strstr(name, ".q_layernorm.") || strstr(name, ".k_layernorm.");
}

/* Megatron's names of the four tensors it stacks: q_w, q_b, k_w, k_b. */
static const char *qk_short(const char *name)
{
    bool q = strstr(name, ".q_layernorm.") != NULL, w = strstr(name, ".weight") != NULL;
    return q ? (w ? "q_w" : "q_b") : (w ? "k_w" : "k_b");
}

/* This rank's q/k norm values of every chunk, in parameter order (host copies). */
static float *qk_values(mc_gpt_model *const *chunks, int vp, int64_t *n)
{
    *n = 0;
    for (int v = 0; v < vp; v++)
        for (int64_t i = 0; i < mc_gpt_num_params(chunks[v]); i++)
            if (is_qk_norm(mc_gpt_param(chunks[v], i).name))
                *n += mc_gpt_param(chunks[v], i).numel;
    float *buf = mc_alloc((size_t)(*n > 0 ? *n : 1) * sizeof(float));
    int64_t at = 0;
    for (int v = 0; buf && v < vp; v++) {
        for (int64_t i = 0; i < mc_gpt_num_params(chunks[v]); i++) {
            struct mc_param_view p = mc_gpt_param(chunks[v], i);
            if (!is_qk_norm(p.name))
                continue; /* host memory, as the weight hashes read it */
            memcpy(buf + at, p.data, (size_t)p.numel * sizeof(float));
            at += p.numel;
        }
    }
    return buf;
}

/* The tensor holding element `at` of the concatenation, and its squared-difference norm. */
static mc_status discrepancy(mc_gpt_model *const *chunks, int vp, const float *mine,
                             const float *theirs, int64_t at, const char *par, int i, int rank)
{
    int64_t base = 0;
    for (int v = 0; v < vp; v++)
        for (int64_t k = 0; k < mc_gpt_num_params(chunks[v]); k++) {
            struct mc_param_view p = mc_gpt_param(chunks[v], k);
            if (!is_qk_norm(p.name))
                continue;
            if (at < base + p.numel) {
                double ss = 0;
                for (int64_t e = base; e < base + p.numel; e++)
                    ss += ((double)theirs[e] - mine[e]) * ((double)theirs[e] - mine[e]);
                return mc_error(MC_ERR_INTERNAL, "AssertionError: Discrepancy between %s in %s "
                                "ranks %d and %d. Diff: tensor(%.4f) (%s)", qk_short(p.name), par,
                                i, rank, sqrt(ss), p.name);
            }
            base += p.numel;
        }
    return MC_OK;
}

mc_status mc_qk_norms_match(mc_gpt_model *const *chunks, int vp, const struct mc_ps_comm *dp,
                            const struct mc_ps_comm *tp)
{
    int64_t n;
    float *mine = qk_values(chunks, vp, &n);
    if (!mine)
        return MC_ERR_NOMEM;
    const struct mc_ps_comm *groups[2] = {dp, tp};
    static const char *const par[2] = {"DP", "TP"};
    mc_status st = MC_OK;
    for (int g = 0; g < 2 && !st && n > 0; g++) {
        int size = groups[g]->size;
        float *all = mc_alloc((size_t)size * (size_t)n * sizeof(float));
        if (!all) {
            st = MC_ERR_NOMEM;
            break;
        }
        st = mc_comm_all_gather(groups[g]->comm, all, mine, n, MC_DTYPE_F32,
                                "--test-mode q/k layernorm all-gather");
        for (int i = 0; i < size && !st; i++)
            for (int64_t e = 0; e < n && !st; e++)
                if (!(all[(size_t)i * (size_t)n + (size_t)e] == mine[e])) /* NaN differs too */
                    st = discrepancy(chunks, vp, mine, all + (size_t)i * (size_t)n, e, par[g], i,
                                     groups[g]->rank);
        mc_free(all);
    }
    mc_free(mine);
    return st;
}
