/* BlendedDataset: draws samples from several GPTDatasets of one split in proportion to their
 * weights (or exhaustively, each component's every sample). Mirrors
 * megatron/core/datasets/blended_dataset.py: description, MD5, cache files
 * (dataset_index.npy int16, dataset_sample_index.npy int64) and the over-sampling check of
 * blended_megatron_dataset_builder.py. */
#include "datasets/gptds_internal.h"

#include <stdio.h>
#include <string.h>

struct mc_blended_dataset {
    const struct mc_gpt_dataset_config *c;
    mc_gpt_dataset **datasets;
    int n;
    int split;
    double *weights;     /* normalized, or the integer lengths (exhaustive) */
    int64_t size;        /* -1 = None */
    char *description;
    char hash[33];
    struct mc_npy di, dsi;   /* <i2 / <i8 [len], built in memory or mapped from the cache */
    int16_t *dataset_index;
    int64_t *dataset_sample_index;
    int64_t len;
};

static struct mc_desc *blended_identifiers(const mc_blended_dataset *b)
{
    struct mc_desc *o = mc_desc_obj(), *list = mc_desc_list(), *w = mc_desc_list();
    mc_status st = mc_desc_add(o, "class", mc_desc_str("BlendedDataset"));
    for (int i = 0; !st && i < b->n; i++)
        st = mc_desc_add(list, NULL, mc_desc_clone(mc_gptds_identifiers(b->datasets[i])));
    if (!st) { st = mc_desc_add(o, "datasets", list); list = NULL; }
    if (!st) st = mc_desc_add(o, "split", mc_desc_str(mc_split_name(b->split)));
    for (int i = 0; !st && i < b->n; i++)
        st = mc_desc_add(w, NULL, b->size >= 0 ? mc_desc_float(b->weights[i])
                                               : mc_desc_int((int64_t)b->weights[i]));
    if (!st) { st = mc_desc_add(o, "weights", w); w = NULL; }
    if (!st) st = mc_desc_add(o, "size", b->size >= 0 ? mc_desc_int(b->size) : mc_desc_null());
    mc_desc_free(list);
    mc_desc_free(w);
    if (st) {
        mc_desc_free(o);
        return NULL;
    }
    return o;
}

static mc_status build(mc_blended_dataset *b)
{
    b->len = b->size;
    int64_t *sizes = NULL;
    if (b->size < 0) {
        b->len = 0;
        if (!(sizes = mc_alloc(sizeof(int64_t) * (size_t)b->n)))
            return MC_ERR_NOMEM;
        for (int i = 0; i < b->n; i++)
            b->len += sizes[i] = (int64_t)b->weights[i];
    }
    strcpy(b->di.descr, "<i2");
    strcpy(b->dsi.descr, "<i8");
    b->di.ndim = b->dsi.ndim = 1;
    b->di.shape[0] = b->dsi.shape[0] = b->len;
    b->dataset_index = b->di.data = mc_calloc((size_t)(b->len ? b->len : 1), sizeof(int16_t));
    b->dataset_sample_index = b->dsi.data = mc_calloc((size_t)(b->len ? b->len : 1), sizeof(int64_t));
    mc_status st = MC_ERR_NOMEM;
    if (b->dataset_index && b->dataset_sample_index)
        st = b->size >= 0 ? mc_blend_build_indices(b->dataset_index, b->dataset_sample_index,
                                                   b->weights, b->n, b->size)
                          : mc_blend_build_exhaustive_indices(b->dataset_index,
                                                              b->dataset_sample_index, sizes, b->n);
    mc_free(sizes);
    return st;
}

static mc_status save(const mc_blended_dataset *b, const char *dir)
{
    char p[4096];
    mc_status st;
    int64_t shape[1] = {b->len};
    if ((st = mc_gptds_mkdirs(dir)) ||
        (st = mc_gptds_cache_path(p, sizeof(p), dir, b->hash, "BlendedDataset", b->split,
                                  "description.txt")) ||
        (st = mc_gptds_write_text(p, b->description)) ||
        (st = mc_gptds_cache_path(p, sizeof(p), dir, b->hash, "BlendedDataset", b->split,
                                  "dataset_index.npy")) ||
        (st = mc_npy_save(p, "<i2", 1, shape, b->dataset_index)) ||
        (st = mc_gptds_cache_path(p, sizeof(p), dir, b->hash, "BlendedDataset", b->split,
                                  "dataset_sample_index.npy")))
        return st;
    return mc_npy_save(p, "<i8", 1, shape, b->dataset_sample_index);
}

static mc_status load(mc_blended_dataset *b, const char *dir)
{
    char p[4096];
    mc_status st;
    if ((st = mc_gptds_cache_path(p, sizeof(p), dir, b->hash, "BlendedDataset", b->split,
                                  "dataset_index.npy")) || (st = mc_npy_map(p, &b->di)) ||
        (st = mc_gptds_cache_path(p, sizeof(p), dir, b->hash, "BlendedDataset", b->split,
                                  "dataset_sample_index.npy")) || (st = mc_npy_map(p, &b->dsi)))
        return st;
    if (strcmp(b->di.descr, "<i2") || strcmp(b->dsi.descr, "<i8") || b->di.ndim != 1 ||
        b->dsi.ndim != 1 || b->di.shape[0] != b->dsi.shape[0] ||
        (b->size >= 0 && b->di.shape[0] != b->size))
        return mc_error(MC_ERR_FORMAT, "cache %s: dataset_index %s[%lld] / dataset_sample_index "
                        "%s[%lld] do not match a blend of size %lld", p, b->di.descr,
                        (long long)b->di.shape[0], b->dsi.descr, (long long)b->dsi.shape[0],
                        (long long)b->size);
    b->len = b->di.shape[0];
    b->dataset_index = b->di.data;
    b->dataset_sample_index = b->dsi.data;
    return MC_OK;
}

/* blended_megatron_dataset_builder.py's check, run on every build and load here: no
 * component is asked for a sample it does not have (which also rejects stale caches). */
static mc_status verify(const mc_blended_dataset *b)
{
    for (int64_t k = 0; k < b->len; k++) {
        int d = b->dataset_index[k];
        if (d < 0 || d >= b->n || b->dataset_sample_index[k] < 0 ||
            b->dataset_sample_index[k] >= mc_gpt_dataset_len(b->datasets[d]))
            return mc_error(MC_ERR_CONFIG, "the %s blend asks component %d for sample %lld, but "
                            "it has %lld (entry %lld of the blend)", mc_split_name(b->split), d,
                            (long long)b->dataset_sample_index[k],
                            d >= 0 && d < b->n ? (long long)mc_gpt_dataset_len(b->datasets[d]) : -1LL,
                            (long long)k);
    }
    return MC_OK;
}

mc_status mc_blended_dataset_init(const struct mc_gpt_dataset_config *c, mc_gpt_dataset **datasets, int n,
                                  const double *weights, int64_t size, mc_blended_dataset **out)
{
    *out = NULL;
    mc_status st = MC_OK;
    mc_blended_dataset *b = mc_calloc(1, sizeof(*b));
    if (!b) {
        for (int i = 0; i < n; i++)
            mc_gpt_dataset_free(datasets[i]);
        mc_free(datasets);
        return MC_ERR_NOMEM;
    }
    b->c = c;
    b->datasets = datasets;
    b->n = n;
    b->size = size;
    b->split = mc_gptds_split(datasets[0]);
    if (n >= 32767) {
        st = mc_error(MC_ERR_CONFIG, "a blend has %d datasets; at most 32766 are supported", n);
        goto fail;
    }
    if (!(b->weights = mc_alloc(sizeof(double) * (size_t)n))) {
        st = MC_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        b->weights[i] = weights ? weights[i] : (double)mc_gpt_dataset_len(datasets[i]);
        if (!(b->weights[i] > 0)) {
            st = mc_error(MC_ERR_CONFIG, "blend weight %d of the %s split is %g; every weight (or "
                          "component length) must be > 0", i, mc_split_name(b->split), b->weights[i]);
            goto fail;
        }
    }
    if (size >= 0)
        mc_blend_normalize(b->weights, n);
    struct mc_desc *ids = blended_identifiers(b);
    if (!ids) {
        st = mc_error(MC_ERR_NOMEM, "out of memory describing a BlendedDataset");
        goto fail;
    }
    st = mc_gptds_describe(ids, &b->description, b->hash);
    mc_desc_free(ids);
    if (st)
        goto fail;
    char p[4096];
    const char *dir = c->path_to_cache;
    bool hit = dir != NULL;
    static const char *affix[3] = {"description.txt", "dataset_index.npy", "dataset_sample_index.npy"};
    for (int k = 0; hit && k < 3; k++) {
        if ((st = mc_gptds_cache_path(p, sizeof(p), dir, b->hash, "BlendedDataset", b->split, affix[k])))
            goto fail;
        hit = mc_gptds_file_exists(p);
    }
    if (hit) {
        mc_log(MC_LOG_INFO, "Load the BlendedDataset %s indices from %s", mc_split_name(b->split), dir);
        st = load(b, dir);
    } else {
        mc_log(MC_LOG_INFO, "Build and save the BlendedDataset %s indices", mc_split_name(b->split));
        st = build(b);
        if (!st && dir)
            st = save(b, dir);
    }
    if (st || (st = verify(b)))
        goto fail;
    *out = b;
    return MC_OK;
fail:
    mc_blended_dataset_free(b);
    return st;
}

void mc_blended_dataset_free(mc_blended_dataset *b)
{
    if (!b)
        return;
    for (int i = 0; i < b->n; i++)
        mc_gpt_dataset_free(b->datasets[i]);
    mc_free(b->datasets);
    mc_free(b->weights);
    mc_free(b->description);
    mc_npy_free(&b->di);
    mc_npy_free(&b->dsi);
    mc_free(b);
}

int64_t mc_blended_dataset_len(const mc_blended_dataset *b) { return b->len; }
const char *mc_blended_dataset_description(const mc_blended_dataset *b) { return b->description; }
const char *mc_blended_dataset_hash(const mc_blended_dataset *b) { return b->hash; }

mc_status mc_blended_dataset_locate(const mc_blended_dataset *b, int64_t idx, int *ds,
                                    int64_t *sample, const mc_gpt_dataset **comp)
{
    if (idx < 0 || idx >= b->len)
        return mc_error(MC_ERR_CONFIG, "sample %lld out of range for a blend of %lld samples",
                        (long long)idx, (long long)b->len);
    *ds = b->dataset_index[idx];
    *sample = b->dataset_sample_index[idx];
    *comp = b->datasets[*ds];
    return MC_OK;
}
