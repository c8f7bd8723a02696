/* GPTDataset: document index, sample index and shuffle index of one split, their cache files,
 * and sample assembly (tokens, labels, loss_mask, position_ids, attention_mask). Mirrors
 * megatron/core/datasets/gpt_dataset.py (GPTDataset, _build_document_index,
 * _build_shuffle_index, _get_ltor_masks_and_position_ids) and megatron_dataset.py (the
 * description and its MD5). The caches are byte-identical to Megatron's. */
#include "megatron/gpt_dataset.h"

#include "core/md5.h"
#include "datasets/description.h"
#include "datasets/gptds_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct mc_gpt_dataset {
    const struct mc_gpt_dataset_config *c;
    struct mc_gpt_lowlevel *ll;
    int split;
    int64_t beg, end, num_samples;
    struct mc_desc *ids;     /* unique_identifiers, reused by BlendedDataset descriptions */
    char *description;
    char hash[33];
    bool built_anew;
    /* the three indices in their cache dtypes, built in memory or mapped from the cache */
    struct mc_npy doc;       /* <i4 [n_doc] */
    struct mc_npy pairs;     /* <i4 | <i8 [S + 1, 2] */
    struct mc_npy shuf;      /* <u4 | <i8 [S] */
    int64_t n_doc, S;
};

const char *mc_split_name(int split)
{
    static const char *names[] = {"train", "valid", "test"};
    return split >= 0 && split < 3 ? names[split] : "?";
}

/* The tokenizer's unique_identifiers map. */
struct mc_desc *mc_gptds_tokenizer_json(const struct mc_gpt_tokenizer_desc *t)
{
    struct mc_desc *o = mc_desc_obj(), *paths = mc_desc_list();
    mc_status st = mc_desc_add(o, "class", mc_desc_str(t->class_name ? t->class_name : ""));
    for (int i = 0; !st && i < t->n_paths; i++)
        st = mc_desc_add(paths, NULL, mc_desc_str(t->paths[i]));
    if (st) {
        mc_desc_free(paths);
        mc_desc_free(o);
        return NULL;
    }
    st = mc_desc_add(o, "tokenizer_path", paths);
    for (int i = 0; !st && i < t->n_extra; i++)
        st = mc_desc_add(o, t->extra_keys[i], mc_desc_str(t->extra_values[i]));
    if (st) {
        mc_desc_free(o);
        return NULL;
    }
    return o;
}

/* MegatronDataset.unique_identifiers for GPTDataset / MockGPTDataset. */
static struct mc_desc *gpt_identifiers(const struct mc_gpt_dataset_config *c, const char *path,
                                       int64_t num_samples, int split)
{
    struct mc_desc *o = mc_desc_obj();
    mc_status st = mc_desc_add(o, "class", mc_desc_str(c->mock ? "MockGPTDataset" : "GPTDataset"));
    if (!st) st = mc_desc_add(o, "dataset_path", mc_desc_str(path));
    if (!st) st = mc_desc_add(o, "num_samples", num_samples < 0 ? mc_desc_null() : mc_desc_int(num_samples));
    if (!st) st = mc_desc_add(o, "index_split", mc_desc_str(mc_split_name(split)));
    if (!st) st = mc_desc_add(o, "random_seed", mc_desc_int(c->random_seed));
    if (!st) st = mc_desc_add(o, "sequence_length", mc_desc_int(c->sequence_length));
    if (!st) st = mc_desc_add(o, "split", mc_desc_str(c->split));
    if (!st) {
        struct mc_desc *m = c->has_split_matrix ? mc_desc_list() : mc_desc_null();
        for (int i = 0; c->has_split_matrix && !st && i < 3; i++) {
            if (!c->split_present[i]) {
                st = mc_desc_add(m, NULL, mc_desc_null());
                continue;
            }
            struct mc_desc *pair = mc_desc_list();
            st = mc_desc_add(pair, NULL, c->split_lo_is_int0[i] ? mc_desc_int(0)
                                                                 : mc_desc_float(c->split_lo[i]));
            if (!st) st = mc_desc_add(pair, NULL, mc_desc_float(c->split_hi[i]));
            if (!st) st = mc_desc_add(m, NULL, pair);
            else mc_desc_free(pair);
        }
        if (!st) st = mc_desc_add(o, "split_matrix", m);
        else mc_desc_free(m);
    }
    if (!st) st = mc_desc_add(o, "tokenizer", mc_gptds_tokenizer_json(&c->tokenizer));
    if (st) {
        mc_desc_free(o);
        return NULL;
    }
    return o;
}

/* Description text and MD5 of an identifiers map. */
mc_status mc_gptds_describe(const struct mc_desc *ids, char **text, char hash[33])
{
    mc_status st = mc_desc_dump(ids, text);
    if (!st)
        mc_md5_hex(*text, strlen(*text), hash);
    return st;
}

/* ---- epochs and indices ------------------------------------------------------------------ */

static mc_status num_epochs(const mc_gpt_dataset *d, int64_t tokens, int64_t *out)
{
    int x = d->c->add_extra_token_to_sequence ? 1 : 0;
    if (tokens <= 1)
        return mc_error(MC_ERR_CONFIG, "the %s split of %s has %lld token%s (sequences [%lld, %lld) "
                        "of %lld, --split \"%s\"): at least 2 are needed. Megatron hangs here "
                        "(or asserts tokens_per_epoch > 1); give that split more data or change "
                        "--split", mc_split_name(d->split),
                        d->ll->path_prefix ? d->ll->path_prefix : "mock data", (long long)tokens,
                        tokens == 1 ? "" : "s", (long long)d->beg, (long long)d->end,
                        (long long)d->ll->n_sequences, d->c->split ? d->c->split : "(per split)");
    int64_t e = 1;
    if (d->num_samples >= 0) {
        int64_t need = d->num_samples * d->c->sequence_length + x;
        e = need <= tokens ? 1 : (need + tokens - 1) / tokens;
    }
    *out = e;
    return MC_OK;
}

static void fill_epochs(int32_t *doc, int64_t beg, int64_t end, int64_t epochs)
{
    int64_t n = end - beg, k = 0;
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t i = 0; i < n; i++)
            doc[k++] = (int32_t)(beg + i);
}

static void *alloc_npy(struct mc_npy *a, const char *descr, int ndim, int64_t n0, int64_t n1)
{
    snprintf(a->descr, sizeof(a->descr), "%s", descr);
    a->ndim = ndim;
    a->shape[0] = n0;
    a->shape[1] = n1;
    size_t bytes = (size_t)mc_npy_count(a) * mc_npy_itemsize(descr);
    return a->data = mc_alloc(bytes ? bytes : 1);
}

/* The sample index in Megatron's dtype: int32 when max(len(document_index), longest sequence
 * of the whole dataset) fits, as helpers.build_sample_idx chooses. */
static mc_status build_pairs(mc_gpt_dataset *d, int64_t E, int64_t T, bool drop_last, int x)
{
    int64_t maxv = d->n_doc, np = 2 * (d->S + 1);
    for (int64_t i = 0; i < d->ll->n_sequences; i++)
        if (d->ll->sequence_lengths[i] > maxv)
            maxv = d->ll->sequence_lengths[i];
    bool narrow = maxv <= INT32_MAX;
    int64_t *wide = narrow ? mc_alloc(sizeof(int64_t) * (size_t)np)
                           : alloc_npy(&d->pairs, "<i8", 2, d->S + 1, 2);
    if (!wide)
        return MC_ERR_NOMEM;
    mc_status st = mc_gpt_build_sample_idx(wide, d->ll->sequence_lengths, d->doc.data, d->n_doc,
                                           d->c->sequence_length, E, T, drop_last, x);
    if (!st && narrow) {
        int32_t *p = alloc_npy(&d->pairs, "<i4", 2, d->S + 1, 2);
        if (!p)
            st = MC_ERR_NOMEM;
        for (int64_t i = 0; p && i < np; i++)
            p[i] = (int32_t)wide[i];
    }
    if (narrow)
        mc_free(wide);
    return st;
}

/* The shuffle index: uint32 unless the sample count reaches 2^32 - 2; [0, first) and
 * [first, S) are shuffled separately (separate final epoch). Same draws for both dtypes. */
static mc_status build_shuffle(mc_gpt_dataset *d, struct mc_np_rng *rng, int64_t first)
{
    int64_t S = d->S;
    if (S < (int64_t)UINT32_MAX - 1) {
        uint32_t *u = alloc_npy(&d->shuf, "<u4", 1, S, 0);
        if (!u)
            return MC_ERR_NOMEM;
        for (int64_t i = 0; i < S; i++)
            u[i] = (uint32_t)i;
        mc_np_rng_shuffle_u32(rng, u, first);
        if (first < S)
            mc_np_rng_shuffle_u32(rng, u + first, S - first);
    } else {
        int64_t *w = alloc_npy(&d->shuf, "<i8", 1, S, 0);
        if (!w)
            return MC_ERR_NOMEM;
        for (int64_t i = 0; i < S; i++)
            w[i] = i;
        mc_np_rng_shuffle_i64(rng, w, first);
        if (first < S)
            mc_np_rng_shuffle_i64(rng, w + first, S - first);
    }
    return MC_OK;
}

static mc_status build_indices(mc_gpt_dataset *d)
{
    const struct mc_gpt_dataset_config *c = d->c;
    int x = c->add_extra_token_to_sequence ? 1 : 0;
    int64_t seq = c->sequence_length, T = 0, E = 1;
    for (int64_t i = d->beg; i < d->end; i++)
        T += d->ll->sequence_lengths[i];
    mc_status st = num_epochs(d, T, &E);
    if (st)
        return st;
    bool sep = false;
    int64_t sans = 0;
    if (E > 1) {
        sans = ((E - 1) * T - x) / seq;
        int64_t last = d->num_samples - sans, per = (T - x) / seq;
        if (last < 0 || last > per + 1)
            return mc_error(MC_ERR_INTERNAL, "final-epoch sample count %lld outside [0, %lld]",
                            (long long)last, (long long)per + 1);
        sep = last < (int64_t)(0.80 * (double)per);
    }
    struct mc_np_rng rng;
    if ((st = mc_np_rng_seed(&rng, c->random_seed)))
        return st;
    int64_t n = d->end - d->beg;
    d->n_doc = E * n;
    int32_t *doc = alloc_npy(&d->doc, "<i4", 1, d->n_doc, 0);
    if (!doc)
        return MC_ERR_NOMEM;
    /* document index: all epochs shuffled together, or the first E-1 then the last alone */
    if (!sep) {
        fill_epochs(doc, d->beg, d->end, E);
        mc_np_rng_shuffle_i32(&rng, doc, d->n_doc);
    } else {
        fill_epochs(doc, d->beg, d->end, E - 1);
        mc_np_rng_shuffle_i32(&rng, doc, (E - 1) * n);
        fill_epochs(doc + (E - 1) * n, d->beg, d->end, 1);
        mc_np_rng_shuffle_i32(&rng, doc + (E - 1) * n, n);
    }
    bool drop_last = d->split != MC_SPLIT_VALID || c->drop_last_partial_validation_sequence;
    d->S = mc_gpt_num_samples(E, T, seq, drop_last, x);
    if ((st = build_pairs(d, E, T, drop_last, x)))
        return st;
    return build_shuffle(d, &rng, sep ? sans : d->S);
}

/* ---- cache files ------------------------------------------------------------------------- */

mc_status mc_gptds_mkdirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof(buf))
        return mc_error(MC_ERR_IO, "cache path too long: %s", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char ch = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return mc_error(MC_ERR_IO, "cannot create cache directory %s: %s", buf,
                                strerror(errno));
            buf[i] = ch;
        }
    }
    return MC_OK;
}

mc_status mc_gptds_cache_path(char *out, size_t cap, const char *dir, const char *hash,
                              const char *cls, int split, const char *affix)
{
    int n = snprintf(out, cap, "%s/%s-%s-%s-%s", dir, hash, cls, mc_split_name(split), affix);
    if (n < 0 || (size_t)n >= cap)
        return mc_error(MC_ERR_IO, "cache path too long under %s", dir);
    return MC_OK;
}

bool mc_gptds_file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

mc_status mc_gptds_write_text(const char *path, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return mc_error(MC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    return MC_OK;
}

/* The directory of this dataset's cache, or "" when it is not cached (mock without
 * --data-cache-path). */
static void cache_dir(const mc_gpt_dataset *d, char *out, size_t cap)
{
    if (d->c->path_to_cache)
        snprintf(out, cap, "%s", d->c->path_to_cache);
    else if (!d->c->mock && d->ll->path_prefix)
        snprintf(out, cap, "%s/cache/GPTDataset_indices", d->ll->path_prefix);
    else
        out[0] = '\0';
}

static mc_status save_cache(const mc_gpt_dataset *d, const char *dir, const char *cls)
{
    char p[4096];
    mc_status st;
    const struct mc_npy *arr[3] = {&d->doc, &d->pairs, &d->shuf};
    static const char *affix[3] = {"document_index.npy", "sample_index.npy", "shuffle_index.npy"};
    if ((st = mc_gptds_mkdirs(dir)))
        return st;
    /* Megatron's order: the description, then the three arrays */
    if ((st = mc_gptds_cache_path(p, sizeof(p), dir, d->hash, cls, d->split, "description.txt")) ||
        (st = mc_gptds_write_text(p, d->description)))
        return st;
    for (int k = 0; k < 3; k++)
        if ((st = mc_gptds_cache_path(p, sizeof(p), dir, d->hash, cls, d->split, affix[k])) ||
            (st = mc_npy_save(p, arr[k]->descr, arr[k]->ndim, arr[k]->shape, arr[k]->data)))
            return st;
    return MC_OK;
}

static int64_t doc_at(const mc_gpt_dataset *d, int64_t i) { return ((const int32_t *)d->doc.data)[i]; }
static int64_t pair_at(const mc_gpt_dataset *d, int64_t i) { return mc_npy_get(&d->pairs, i); }

/* Every cached sample must hold exactly seq + x tokens of the current data (the last one may
 * be shorter when partial samples are kept). The cache name does not depend on the data's
 * contents (as in Megatron), so this is what catches indices built for other data. */
static mc_status check_sample_spans(const mc_gpt_dataset *d, const char *p)
{
    int64_t x = d->c->add_extra_token_to_sequence ? 1 : 0, want = d->c->sequence_length + x;
    for (int64_t s = 0; s < d->S; s++) {
        int64_t p0 = pair_at(d, 2 * s), o0 = pair_at(d, 2 * s + 1);
        int64_t p1 = pair_at(d, 2 * s + 2), o1 = pair_at(d, 2 * s + 3), got = -o0;
        if (p1 < p0)
            got = -1;
        for (int64_t q = p0; q < p1 && got <= want; q++)
            got += d->ll->sequence_lengths[doc_at(d, q)];
        got += p1 >= p0 ? o1 + x : 0;
        if (got > want || got <= 0 || (got < want && s + 1 < d->S))
            return mc_error(MC_ERR_FORMAT, "cache %s: sample %lld spans %lld tokens of %s, expected "
                            "%lld: the cached indices were built for other data; delete them and "
                            "rerun", p, (long long)s, (long long)got,
                            d->ll->path_prefix ? d->ll->path_prefix : "mock data", (long long)want);
    }
    return MC_OK;
}

/* Maps a cache hit (as numpy.load(mmap_mode='r') does), checking dtypes, shapes and every index
 * against the data, so that a stale or foreign cache is an error, not an out-of-bounds read. */
static mc_status load_cache(mc_gpt_dataset *d, const char *dir, const char *cls)
{
    char p[4096];
    struct mc_npy *a[3] = {&d->doc, &d->pairs, &d->shuf};
    static const char *affix[3] = {"document_index.npy", "sample_index.npy", "shuffle_index.npy"};
    mc_status st = MC_OK;
    for (int k = 0; k < 3 && !st; k++)
        if (!(st = mc_gptds_cache_path(p, sizeof(p), dir, d->hash, cls, d->split, affix[k])))
            st = mc_npy_map(p, a[k]);
    if (st)
        return st;
    mc_gptds_cache_path(p, sizeof(p), dir, d->hash, cls, d->split, "*");
    if (strcmp(d->doc.descr, "<i4") || (strcmp(d->pairs.descr, "<i4") && strcmp(d->pairs.descr, "<i8")) ||
        (strcmp(d->shuf.descr, "<u4") && strcmp(d->shuf.descr, "<i8")) || d->doc.ndim != 1 ||
        d->pairs.ndim != 2 || d->pairs.shape[1] != 2 || d->shuf.ndim != 1 ||
        d->shuf.shape[0] != d->pairs.shape[0] - 1)
        return mc_error(MC_ERR_FORMAT, "cache %s: not Megatron's layout (document_index %s[%lld], "
                        "sample_index %s[%lld, %lld], shuffle_index %s[%lld]; expected <i4, <i4|<i8 "
                        "[S+1, 2], <u4|<i8 [S])", p, d->doc.descr, (long long)d->doc.shape[0],
                        d->pairs.descr, (long long)d->pairs.shape[0], (long long)d->pairs.shape[1],
                        d->shuf.descr, (long long)d->shuf.shape[0]);
    d->n_doc = d->doc.shape[0];
    d->S = d->shuf.shape[0];
    for (int64_t i = 0; i < d->n_doc; i++) {
        int64_t v = doc_at(d, i);
        if (v < 0 || v >= d->ll->n_sequences)
            return mc_error(MC_ERR_FORMAT, "cache %s: document_index[%lld] = %lld is not a sequence "
                            "of %s (%lld sequences): stale cache?", p, (long long)i, (long long)v,
                            d->ll->path_prefix ? d->ll->path_prefix : "mock data",
                            (long long)d->ll->n_sequences);
    }
    for (int64_t i = 0; i < 2 * (d->S + 1); i++) {
        int64_t v = pair_at(d, i);
        int64_t lim = i % 2 == 0 ? d->n_doc - 1 : d->ll->sequence_lengths[doc_at(d, pair_at(d, i - 1))];
        if (v < 0 || v > lim)
            return mc_error(MC_ERR_FORMAT, "cache %s: sample_index entry %lld = %lld out of range "
                            "[0, %lld]: stale cache?", p, (long long)i, (long long)v, (long long)lim);
    }
    for (int64_t i = 0; i < d->S; i++) {
        int64_t v = mc_npy_get(&d->shuf, i);
        if (v < 0 || v >= d->S)
            return mc_error(MC_ERR_FORMAT, "cache %s: shuffle_index[%lld] = %lld out of range",
                            p, (long long)i, (long long)v);
    }
    return check_sample_spans(d, p);
}

static mc_status indices_cached(mc_gpt_dataset *d)
{
    char dir[4096], p[4200];
    const char *cls = d->c->mock ? "MockGPTDataset" : "GPTDataset";
    cache_dir(d, dir, sizeof(dir));
    bool hit = dir[0] != '\0';
    static const char *affix[4] = {"description.txt", "document_index.npy", "sample_index.npy",
                                   "shuffle_index.npy"};
    for (int k = 0; hit && k < 4; k++) {
        mc_status st = mc_gptds_cache_path(p, sizeof(p), dir, d->hash, cls, d->split, affix[k]);
        if (st)
            return st;
        hit = mc_gptds_file_exists(p);
    }
    if (hit) {
        mc_log(MC_LOG_INFO, "Load the %s %s indices from %s", cls, mc_split_name(d->split), dir);
        return load_cache(d, dir, cls);
    }
    mc_log(MC_LOG_INFO, "Build and save the %s %s indices", cls, mc_split_name(d->split));
    d->built_anew = true;
    mc_status st = build_indices(d);
    if (!st && dir[0])
        st = save_cache(d, dir, cls);
    return st;
}

mc_status mc_gpt_dataset_init(const struct mc_gpt_dataset_config *c, struct mc_gpt_lowlevel *ll,
                              int64_t beg, int64_t end, int64_t num_samples, int split,
                              mc_gpt_dataset **out)
{
    *out = NULL;
    if (beg < 0 || end < beg || end > ll->n_sequences || end - beg > INT32_MAX)
        return mc_error(MC_ERR_CONFIG, "split %s range [%lld, %lld) is outside the %lld sequences "
                        "of %s", mc_split_name(split), (long long)beg, (long long)end,
                        (long long)ll->n_sequences, ll->path_prefix ? ll->path_prefix : "mock data");
    if (c->sequence_length < 2 || c->sequence_length > INT32_MAX)
        return mc_error(MC_ERR_CONFIG, "--seq-length %lld: must be at least 2",
                        (long long)c->sequence_length);
    mc_gpt_dataset *d = mc_calloc(1, sizeof(*d));
    if (!d)
        return MC_ERR_NOMEM;
    d->c = c;
    d->ll = ll;
    d->split = split;
    d->beg = beg;
    d->end = end;
    d->num_samples = num_samples;
    mc_status st;
    if (!(d->ids = gpt_identifiers(c, ll->path_prefix, num_samples, split))) {
        st = mc_error(MC_ERR_NOMEM, "out of memory describing a GPTDataset");
        goto fail;
    }
    if ((st = mc_gptds_describe(d->ids, &d->description, d->hash)) || (st = indices_cached(d)))
        goto fail;
    *out = d;
    return MC_OK;
fail:
    mc_gpt_dataset_free(d);
    return st;
}

void mc_gpt_dataset_free(mc_gpt_dataset *d)
{
    if (!d)
        return;
    mc_npy_free(&d->doc);
    mc_npy_free(&d->pairs);
    mc_npy_free(&d->shuf);
    mc_free(d->description);
    mc_desc_free(d->ids);
    mc_free(d);
}

int64_t mc_gpt_dataset_len(const mc_gpt_dataset *d) { return d->S; }
const char *mc_gpt_dataset_description(const mc_gpt_dataset *d) { return d->description; }
const char *mc_gpt_dataset_hash(const mc_gpt_dataset *d) { return d->hash; }
bool mc_gpt_dataset_built_anew(const mc_gpt_dataset *d) { return d->built_anew; }
const struct mc_desc *mc_gptds_identifiers(const mc_gpt_dataset *d) { return d->ids; }
int mc_gptds_split(const mc_gpt_dataset *d) { return d->split; }

/* ---- samples ----------------------------------------------------------------------------- */

/* Reads the seq + x tokens of item idx (padded with pad), token 0 into *head and tokens
 * 1.. into rest[0..], so that a sample can be assembled without a scratch buffer. */
static mc_status read_text(const mc_gpt_dataset *d, int64_t idx, int64_t *head, int64_t *rest)
{
    if (idx < 0 || idx >= d->S)
        return mc_error(MC_ERR_CONFIG, "sample %lld out of range for a dataset of %lld samples",
                        (long long)idx, (long long)d->S);
    int x = d->c->add_extra_token_to_sequence ? 1 : 0;
    int64_t want = d->c->sequence_length + x, got = 0;
    int64_t s = mc_npy_get(&d->shuf, idx);
    int64_t p0 = pair_at(d, 2 * s), o0 = pair_at(d, 2 * s + 1);
    int64_t p1 = pair_at(d, 2 * s + 2), o1 = pair_at(d, 2 * s + 3);
    mc_status st;
    for (int64_t q = p0; q <= p1; q++) {
        int64_t seqi = doc_at(d, q);
        int64_t off = q == p0 ? o0 : 0;
        int64_t len = q < p1 ? d->ll->sequence_lengths[seqi] - off : o1 + x - off;
        if (len <= 0)
            continue;
        if (got + len > want)
            return mc_error(MC_ERR_FORMAT, "sample %lld spans %lld tokens, more than seq + %d = "
                            "%lld: corrupt sample index", (long long)idx, (long long)(got + len),
                            x, (long long)want);
        if (got == 0) {
            if ((st = d->ll->get(d->ll->ctx, seqi, off, 1, head)))
                return st;
            off++;
            len--;
            got++;
        }
        if (len > 0 && (st = d->ll->get(d->ll->ctx, seqi, off, len, rest + got - 1)))
            return st;
        got += len;
    }
    if (got == 0) {
        *head = d->c->pad;
        got++;
    }
    for (; got < want; got++)
        rest[got - 1] = d->c->pad;
    return MC_OK;
}

mc_status mc_gpt_dataset_get_text(const mc_gpt_dataset *d, int64_t idx, int64_t *out)
{
    return read_text(d, idx, out, out + 1);
}

/* _get_ltor_masks_and_position_ids on tokens (before pad replacement), then the pad masking. */
static void masks(const struct mc_gpt_dataset_config *c, const int64_t *tokens, const int64_t *labels,
                  int64_t seq, struct mc_gpt_sample *s)
{
    for (int64_t i = 0; i < seq; i++) {
        s->loss_mask[i] = c->eod_mask_loss && tokens[i] == c->eod ? 0.0f : 1.0f;
        s->position_ids[i] = i;
    }
    if (s->attention_mask)
        for (int64_t r = 0; r < seq; r++)
            for (int64_t col = 0; col < seq; col++)
                s->attention_mask[r * seq + col] = col > r;
    int64_t prev = 0;
    for (int64_t e = 0; e < seq; e++) {
        if (tokens[e] != c->eod)
            continue;
        if (c->reset_attention_mask && s->attention_mask)
            for (int64_t r = e + 1; r < seq; r++)
                memset(s->attention_mask + r * seq, 1, (size_t)(e + 1));
        if (c->reset_position_ids) {
            for (int64_t i = e + 1; i < seq; i++)
                s->position_ids[i] -= e + 1 - prev;
            prev = e + 1;
        }
    }
    for (int64_t i = 0; i < seq; i++)
        if (labels[i] == c->pad)
            s->loss_mask[i] = 0.0f;
}

mc_status mc_gpt_dataset_get(const mc_gpt_dataset *d, int64_t idx, struct mc_gpt_sample *s)
{
    const struct mc_gpt_dataset_config *c = d->c;
    int64_t seq = c->sequence_length;
    int x = c->add_extra_token_to_sequence ? 1 : 0;
    /* text[0] -> tokens[0], text[1..] -> labels[0..]: labels are then final (x = 1) and tokens
     * are labels shifted right by one */
    mc_status st = read_text(d, idx, s->tokens, s->labels);
    if (st)
        return st;
    for (int64_t i = 1; i < seq; i++)
        s->tokens[i] = s->labels[i - 1];
    if (!x)
        s->labels[seq - 1] = c->pad; /* torch.roll, then the last label is pad */
    if (!c->create_attention_mask)
        s->attention_mask = NULL;
    masks(c, s->tokens, s->labels, seq, s);
    for (int64_t i = 0; i < seq; i++) {
        if (s->tokens[i] == c->pad) s->tokens[i] = 0;
        if (s->labels[i] == c->pad) s->labels[i] = 0;
    }
    return MC_OK;
}
