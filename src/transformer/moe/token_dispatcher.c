/* The token permutation of MoEAllGatherTokenDispatcher and MoEAlltoAllTokenDispatcher
 * (transformer/moe/token_dispatcher.py, permute / unpermute of moe_utils.py) at expert- and
 * tensor-parallel size 1, where both reduce to it: the rows routed to expert 0 (tokens
 * ascending), then expert 1, ...; the way back sums each token's k expert outputs in that
 * order into zeros (scatter_add), the probabilities having been applied inside the experts.
 * The rows move with the backend's copy and accumulate ops. */
#include "transformer/moe/moe.h"

void mc_moe_sort_rows(const struct mc_tfm_ctx *c, struct mc_moe_acts *ma)
{
    int64_t T = ma->T, E = c->cfg->num_moe_experts, k = c->cfg->moe_router_topk, r = 0;
    for (int64_t e = 0; e < E; e++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < k; j++)
                if (ma->top[t * k + j] == (int32_t)e) {
                    ma->row_token[r] = (int32_t)t;
                    ma->row_slot[r] = (int32_t)j;
                    r++;
                }
}

void mc_moe_permute(const struct mc_tfm_ctx *c, const struct mc_moe_acts *ma, void *xp,
                    const void *x)
{
    struct mc_backend *be = c->be;
    int64_t h = c->d->h, rows = ma->T * c->cfg->moe_router_topk;
    size_t row = (size_t)h * mc_dtype_size(c->dt);
    for (int64_t r = 0; r < rows; r++)
        be->ops->copy(be, (char *)xp + (size_t)r * row,
                      (const char *)x + (size_t)ma->row_token[r] * row, row);
}

void mc_moe_unpermute(const struct mc_tfm_ctx *c, const struct mc_moe_acts *ma, void *y,
                      const void *yp)
{
    struct mc_backend *be = c->be;
    int64_t h = c->d->h, rows = ma->T * c->cfg->moe_router_topk;
    size_t row = (size_t)h * mc_dtype_size(c->dt);
    be->ops->set(be, y, 0, (size_t)ma->T * row);
    for (int64_t r = 0; r < rows; r++)
        be->ops->accumulate(be, (char *)y + (size_t)ma->row_token[r] * row, c->dt,
                            (const char *)yp + (size_t)r * row, c->dt, h);
}
