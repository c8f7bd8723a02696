/* The low-level dataset a GPTDataset reads from disk: Megatron's IndexedDataset (.idx/.bin,
 * megatron/core/datasets/indexed_dataset.py), i.e. GPTDataset.build_low_level_dataset. An
 * adapter from the project's reader (include/megatron/indexed_dataset.h) to the interface the
 * GPT datasets share with the mock data (struct mc_gpt_lowlevel). */
#include "megatron/gpt_dataset.h"
#include "megatron/indexed_dataset.h"

#include <stdio.h>
#include <string.h>

struct idx_ctx {
    mc_indexed_dataset *ds;
    char *prefix;
};

static mc_status idx_get(void *ctx, int64_t i, int64_t offset, int64_t length, int64_t *out)
{
    struct idx_ctx *c = ctx;
    mc_status st = mc_ds_get(c->ds, i, offset, length, out);
    if (st) {
        char why[512]; /* copied: mc_error rewrites the buffer mc_last_error points to */
        snprintf(why, sizeof(why), "%s", mc_last_error());
        return mc_error(st, "%s: %s", c->prefix, why);
    }
    return MC_OK;
}

static void idx_close(void *ctx)
{
    struct idx_ctx *c = ctx;
    if (!c)
        return;
    mc_ds_close(c->ds);
    mc_free(c->prefix);
    mc_free(c);
}

mc_status mc_gpt_lowlevel_open(const char *prefix, struct mc_gpt_lowlevel **out)
{
    *out = NULL;
    size_t n = strlen(prefix) + 1;
    struct idx_ctx *c = mc_calloc(1, sizeof(*c));
    struct mc_gpt_lowlevel *ll = mc_calloc(1, sizeof(*ll));
    mc_status st = MC_ERR_NOMEM;
    if (!c || !ll || !(c->prefix = mc_alloc(n)))
        goto fail;
    memcpy(c->prefix, prefix, n);
    if ((st = mc_ds_open(prefix, &c->ds)))
        goto fail;
    ll->n_sequences = mc_ds_num_sequences(c->ds);
    ll->sequence_lengths = mc_ds_sequence_lengths(c->ds);
    ll->path_prefix = c->prefix;
    ll->get = idx_get;
    ll->ctx = c;
    ll->close = idx_close;
    *out = ll;
    return MC_OK;
fail:
    idx_close(c);
    mc_free(ll);
    return st;
}
