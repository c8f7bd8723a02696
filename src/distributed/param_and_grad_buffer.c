/* The index map of _ParamAndGradBuffer.__init__ (megatron/core/distributed/
 * param_and_grad_buffer.py, core_v0.12.1): parameters in reverse state_dict order; with the
 * distributed optimizer each param starts 64-element aligned and each bucket ends padded to a
 * multiple of lcm(dp, 128) (lcm(dp, 128, 2^16) with --ddp-pad-buckets-for-high-nccl-busbw) so
 * it cuts into dp equal shards; a bucket closes once it holds >= bucket_size elements; a
 * shared embedding (pipeline-split tied embeddings) gets a bucket of its own under distopt.
 * The quirks are kept, e.g. the shared embedding's start is padded before the bucket in front
 * of it is closed, exactly as Megatron orders those steps. */
#include "distributed/param_and_grad_buffer.h"

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t lcm64(int64_t a, int64_t b) { return a / gcd64(a, b) * b; }

static int64_t pad_to(int64_t x, int64_t d) { return (x + d - 1) / d * d; }

int64_t mc_pgb_bucket_size(bool overlap_grad_reduce, int64_t ddp_bucket_size, int dp,
                           int pp_rank)
{
    if (!overlap_grad_reduce || pp_rank > 0)
        return 0;
    if (ddp_bucket_size > 0)
        return ddp_bucket_size;
    int64_t by_dp = 1000000 * (int64_t)dp;
    return by_dp > 40000000 ? by_dp : 40000000;
}

struct layout {
    const struct mc_pgb_config *c;
    struct mc_pgb_map *m;
    int64_t bucket_start;
    int64_t bucket_params; /* params in the open bucket */
};

static int64_t pad_bucket_end(const struct layout *l, int64_t end)
{
    if (!l->c->use_distributed_optimizer)
        return end;
    int64_t d = lcm64(l->c->dp, 128);
    if (l->c->pad_buckets_for_high_nccl_busbw)
        d = lcm64(d, 65536);
    return pad_to(end, d);
}

/* _update_bucket_metadata: closes the open bucket at param_end, returns its padded end. */
static int64_t close_bucket(struct layout *l, int64_t param_end)
{
    struct mc_pgb_bucket *b = &l->m->bucket[l->m->n_buckets++];
    b->start = l->bucket_start;
    b->numel_unpadded = param_end - l->bucket_start;
    b->end = pad_bucket_end(l, param_end);
    l->m->numel_unpadded += b->numel_unpadded;
    l->bucket_start = b->end;
    l->bucket_params = 0;
    return b->end;
}

mc_status mc_pgb_map_init(const struct mc_pgb_config *c, int64_t n, const int64_t *numel,
                          const bool *shared_embedding, struct mc_pgb_map *out)
{
    *out = (struct mc_pgb_map){0};
    if (c->dp < 1 || c->bucket_size < 0 || n < 1)
        return mc_error(MC_ERR_CONFIG, "grad buffer: bad layout request (dp %d, bucket size "
                        "%lld, %lld params)", c->dp, (long long)c->bucket_size, (long long)n);
    out->param = mc_calloc((size_t)n, sizeof(*out->param));
    out->bucket = mc_calloc((size_t)n, sizeof(*out->bucket)); /* at most one per param */
    if (!out->param || !out->bucket) {
        mc_pgb_map_free(out);
        return MC_ERR_NOMEM;
    }
    out->n_params = n;
    struct layout l = {c, out, 0, 0};
    bool distopt = c->use_distributed_optimizer;
    int64_t start = 0, end = 0, bucket_id = 0;
    for (int64_t i = n - 1; i >= 0; i--) {
        bool own_bucket = distopt && shared_embedding && shared_embedding[i];
        if (distopt)
            start = pad_to(start, 64);
        if (own_bucket) {
            if (start % c->dp != 0)
                start = pad_bucket_end(&l, start);
            if (l.bucket_params > 0) {
                close_bucket(&l, start);
                bucket_id++;
            }
        }
        end = start + numel[i];
        out->param[i] = (struct mc_pgb_range){start, end, bucket_id};
        l.bucket_params++;
        if ((c->bucket_size > 0 && end - l.bucket_start >= c->bucket_size) || own_bucket) {
            start = close_bucket(&l, end);
            bucket_id++;
        } else {
            start = end;
        }
    }
    if (l.bucket_params > 0)
        close_bucket(&l, end);
    out->numel = out->bucket[out->n_buckets - 1].end;
    return MC_OK;
}

void mc_pgb_map_free(struct mc_pgb_map *m)
{
    mc_free(m->param);
    mc_free(m->bucket);
    *m = (struct mc_pgb_map){0};
}
