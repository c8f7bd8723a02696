/* Dropout keep masks of the transformer's sites: the Philox counters of one call (the contract
 * models/gpt/gpt_model.c documents, reproduced by the PyTorch twin), drawn by the backend. */
#include "transformer/transformer.h"

struct mc_dropout_stream mc_tfm_dropout_stream(const struct mc_tfm_ctx *c, uint32_t site)
{
    return (struct mc_dropout_stream){
        .seed = c->seed,
        .c1_hi = (c->micro >> 8) & 0xffffu,
        .c2 = c->step,
        .c3 = ((c->micro & 0xffu) << 24) | (site & 0xffffffu),
    };
}

void mc_tfm_dropout_mask(const struct mc_tfm_ctx *c, uint8_t *keep, uint32_t site, int64_t first,
                         int64_t n, float p)
{
    struct mc_dropout_stream r = mc_tfm_dropout_stream(c, site);
    c->be->ops->dropout_mask(c->be, keep, &r, first, n, p);
}
