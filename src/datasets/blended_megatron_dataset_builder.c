/* BlendedMegatronDatasetBuilder for GPT: config validation and the split matrix
 * (blended_megatron_dataset_config.py), blend lists and weight normalization (utils.py), the
 * per-dataset sample budgets with their 0.5% margin, and the three build modes: mock, one
 * blend for all splits, a blend per split (blended_megatron_dataset_builder.py). */
#include "datasets/gptds_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mc_megatron_dataset {
    mc_gpt_dataset *gpt;           /* a plain GPTDataset, or */
    mc_blended_dataset *blend;     /* a BlendedDataset of GPTDatasets */
    struct mc_gpt_lowlevel **lls;  /* owned low-level datasets */
    int n_ll;
};

/* ---- tokenizer description --------------------------------------------------------------- */

mc_status mc_gpt_tokenizer_desc_from_args(struct mc_gpt_tokenizer_desc *d, const char *type,
                                          const char *vocab_file, const char *merge_file,
                                          const char *model, int64_t vocab_size, char vocab_buf[32])
{
    memset(d, 0, sizeof(*d));
    if (!type)
        type = "GPT2BPETokenizer"; /* pretrain_gpt.py's default */
    if (!strcmp(type, "GPT2BPETokenizer")) {
        d->class_name = "_GPT2BPETokenizer";
        d->n_paths = 2;
        d->paths[0] = vocab_file;
        d->paths[1] = merge_file;
        return MC_OK;
    }
    if (!strcmp(type, "NullTokenizer")) {
        d->class_name = "_NullTokenizer";
        d->n_paths = 1;
        d->paths[0] = NULL;
        snprintf(vocab_buf, 32, "%lld", (long long)vocab_size);
        d->n_extra = 1;
        d->extra_keys[0] = "vocab_size";
        d->extra_values[0] = vocab_buf;
        return MC_OK;
    }
    static const struct { const char *type, *cls; } spm[] = {
        {"SentencePieceTokenizer", "_SentencePieceTokenizer"},
        {"GPTSentencePieceTokenizer", "_GPTSentencePieceTokenizer"},
        {"Llama2Tokenizer", "_Llama2Tokenizer"},
    };
    for (size_t i = 0; i < sizeof(spm) / sizeof(*spm); i++) {
        if (!strcmp(type, spm[i].type)) {
            d->class_name = spm[i].cls;
            d->n_paths = 1;
            d->paths[0] = model;
            d->n_extra = 1;
            d->extra_keys[0] = "vocab_extra_ids";
            d->extra_values[0] = "0";
            return MC_OK;
        }
    }
    if (!strcmp(type, "HuggingFaceTokenizer") || !strcmp(type, "PretrainedFromHF")) {
        /* MegatronTokenizer(name): {"class", "tokenizer_path": [name]} for both */
        d->class_name = type[0] == 'H' ? "_HuggingFaceTokenizer" : "_AutoTokenizer";
        d->n_paths = 1;
        d->paths[0] = model;
        return MC_OK;
    }
    return mc_error(MC_ERR_UNSUPPORTED, "--tokenizer-type %s: the dataset cache description of this "
                    "tokenizer is not implemented (supported: GPT2BPETokenizer, NullTokenizer, "
                    "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer, "
                    "HuggingFaceTokenizer, PretrainedFromHF)", type);
}

/* ---- config ------------------------------------------------------------------------------ */

/* parse_and_normalize_split: every maximal [.0-9]+ run is a Python float. */
static mc_status parse_split(const char *split, double v[3])
{
    int n = 0;
    const char *p = split;
    while (*p) {
        if (!((*p >= '0' && *p <= '9') || *p == '.')) {
            p++;
            continue;
        }
        const char *b = p;
        while ((*p >= '0' && *p <= '9') || *p == '.')
            p++;
        char tok[64];
        size_t len = (size_t)(p - b);
        if (len >= sizeof(tok))
            return mc_error(MC_ERR_CONFIG, "--split \"%s\": number too long", split);
        memcpy(tok, b, len);
        tok[len] = '\0';
        char *e;
        double x = strtod(tok, &e);
        if (*e || strchr(tok, '.') != strrchr(tok, '.') || !strcmp(tok, "."))
            return mc_error(MC_ERR_CONFIG, "--split \"%s\": \"%s\" is not a number (expected "
                            "comma-separated weights such as \"969,30,1\")", split, tok);
        if (n == 3)
            return mc_error(MC_ERR_CONFIG, "--split \"%s\": more than 3 weights (train, valid, "
                            "test)", split);
        v[n++] = x;
    }
    for (; n < 3; n++)
        v[n] = 0.0;
    if (mc_np_sum(v, 3) <= 0)
        return mc_error(MC_ERR_CONFIG, "--split \"%s\": the weights sum to 0", split);
    mc_blend_normalize(v, 3);
    return MC_OK;
}

mc_status mc_gpt_dataset_config_finalize(struct mc_gpt_dataset_config *c)
{
    bool per_split = c->blend_per_split[0] || c->blend_per_split[1] || c->blend_per_split[2];
    c->mock = false;
    c->has_split_matrix = false;
    if (per_split) {
        if (c->blend)
            return mc_error(MC_ERR_CONFIG, "--data-path and --train/valid/test-data-path are "
                            "incompatible");
        if (c->split)
            return mc_error(MC_ERR_CONFIG, "--split \"%s\" cannot be used with "
                            "--train/valid/test-data-path", c->split);
        return MC_OK;
    }
    if (c->blend) {
        if (!c->split)
            return mc_error(MC_ERR_CONFIG, "--split is required with --data-path");
    } else {
        c->mock = true;
        c->split = "1,1,1"; /* Megatron overwrites the split for mock data */
    }
    double v[3];
    mc_status st = parse_split(c->split, v);
    if (st)
        return st;
    /* cumulative bounds start at the integer 0; a zero weight leaves its split out */
    double b[4] = {0, 0, 0, 0};
    for (int i = 0; i < 3; i++)
        b[i + 1] = b[i] + v[i];
    for (int i = 0; i < 3; i++) {
        c->split_present[i] = b[i + 1] > b[i];
        c->split_lo[i] = b[i];
        c->split_hi[i] = b[i + 1];
        c->split_lo_is_int0[i] = i == 0;
    }
    c->has_split_matrix = true;
    return MC_OK;
}

/* Python round (half to even) of the float product, as int(round(bound * float(n))). */
void mc_gpt_split_range(const struct mc_gpt_dataset_config *c, int split, int64_t n, int64_t *beg,
                        int64_t *end)
{
    *beg = (int64_t)nearbyint(c->split_lo[split] * (double)n);
    *end = (int64_t)nearbyint(c->split_hi[split] * (double)n);
}

void mc_gpt_train_valid_test_num_samples(int64_t train_iters, int64_t train_samples,
                                         int64_t global_batch_size, int64_t eval_interval,
                                         int64_t eval_iters, int64_t out[3])
{
    out[0] = train_samples > 0 ? train_samples : train_iters * global_batch_size;
    out[1] = (train_iters / eval_interval + 1) * eval_iters * global_batch_size;
    out[2] = eval_iters * global_batch_size;
}

/* ---- blend lists ------------------------------------------------------------------------- */

static bool parse_py_float(const char *s, double *out)
{
    /* Python float(): surrounding whitespace, inf/nan spellings, underscores between digits */
    char buf[128];
    size_t k = 0;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v')
        s++;
    for (; *s && k + 1 < sizeof(buf); s++) {
        if (*s == '_') {
            if (k == 0 || !(buf[k - 1] >= '0' && buf[k - 1] <= '9') || !(s[1] >= '0' && s[1] <= '9'))
                return false;
            continue;
        }
        buf[k++] = *s;
    }
    while (k && (buf[k - 1] == ' ' || buf[k - 1] == '\t' || buf[k - 1] == '\n' || buf[k - 1] == '\r'))
        k--;
    buf[k] = '\0';
    if (!k || (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')))
        return false;
    char *e;
    *out = strtod(buf, &e);
    return *e == '\0';
}

static char *strip_dup(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    char *d = mc_alloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

mc_status mc_blend_from_list(const char **tokens, int n, struct mc_blend *out)
{
    memset(out, 0, sizeof(*out));
    if (n <= 0)
        return mc_error(MC_ERR_CONFIG, "empty data path list");
    bool weighted = n % 2 == 0;
    double *w = NULL;
    if (weighted) {
        if (!(w = mc_alloc(sizeof(double) * (size_t)(n / 2))))
            return MC_ERR_NOMEM;
        for (int i = 0; weighted && i < n; i += 2)
            weighted = parse_py_float(tokens[i], &w[i / 2]);
        if (!weighted) {
            mc_free(w);
            w = NULL;
        }
    }
    int np = weighted ? n / 2 : n;
    const char **pre = mc_calloc((size_t)np, sizeof(*pre));
    if (!pre) {
        mc_free(w);
        return MC_ERR_NOMEM;
    }
    out->prefixes = pre;
    out->weights = w;
    out->n = np;
    for (int i = 0; i < np; i++) {
        if (!(pre[i] = strip_dup(tokens[weighted ? 2 * i + 1 : i]))) {
            mc_blend_free(out);
            return MC_ERR_NOMEM;
        }
    }
    return MC_OK;
}

void mc_blend_free(struct mc_blend *b)
{
    if (!b)
        return;
    for (int i = 0; b->prefixes && i < b->n; i++)
        mc_free((void *)b->prefixes[i]);
    mc_free((void *)b->prefixes);
    mc_free((void *)b->weights);
    memset(b, 0, sizeof(*b));
}

/* ---- top-level datasets ------------------------------------------------------------------ */

int64_t mc_megatron_dataset_len(const mc_megatron_dataset *d)
{
    return d->gpt ? mc_gpt_dataset_len(d->gpt) : mc_blended_dataset_len(d->blend);
}

const char *mc_megatron_dataset_description(const mc_megatron_dataset *d)
{
    return d->gpt ? mc_gpt_dataset_description(d->gpt) : mc_blended_dataset_description(d->blend);
}

const char *mc_megatron_dataset_hash(const mc_megatron_dataset *d)
{
    return d->gpt ? mc_gpt_dataset_hash(d->gpt) : mc_blended_dataset_hash(d->blend);
}

bool mc_megatron_dataset_is_blended(const mc_megatron_dataset *d) { return d->blend != NULL; }

static mc_status locate(const mc_megatron_dataset *d, int64_t idx, const mc_gpt_dataset **g,
                        int64_t *sample, int *dataset_id)
{
    int ds = 0;
    mc_status st = MC_OK;
    if (d->gpt) {
        *g = d->gpt;
        *sample = idx;
    } else {
        st = mc_blended_dataset_locate(d->blend, idx, &ds, sample, g);
    }
    if (dataset_id)
        *dataset_id = ds;
    return st;
}

mc_status mc_megatron_dataset_get(const mc_megatron_dataset *d, int64_t idx,
                                  struct mc_gpt_sample *s, int *dataset_id)
{
    const mc_gpt_dataset *g;
    int64_t k;
    mc_status st = locate(d, idx, &g, &k, dataset_id);
    return st ? st : mc_gpt_dataset_get(g, k, s);
}

mc_status mc_megatron_dataset_get_text(const mc_megatron_dataset *d, int64_t idx, int64_t *out,
                                       int *dataset_id)
{
    const mc_gpt_dataset *g;
    int64_t k;
    mc_status st = locate(d, idx, &g, &k, dataset_id);
    return st ? st : mc_gpt_dataset_get_text(g, k, out);
}

mc_status mc_megatron_dataset_dump(const mc_megatron_dataset *d, int64_t seq, int64_t n,
                                   const char *path)
{
    int64_t *tok = mc_alloc(sizeof(int64_t) * (size_t)seq), *lab = mc_alloc(sizeof(int64_t) * (size_t)seq);
    int64_t *pos = mc_alloc(sizeof(int64_t) * (size_t)seq);
    float *lm = mc_alloc(sizeof(float) * (size_t)seq);
    uint8_t *am = mc_alloc((size_t)(seq * seq));
    mc_status st = MC_OK;
    FILE *f = NULL;
    if (!tok || !lab || !pos || !lm || !am) {
        st = mc_error(MC_ERR_NOMEM, "sample buffers for %s", path);
        goto out;
    }
    if (!(f = fopen(path, "wb"))) {
        st = mc_error(MC_ERR_IO, "cannot create %s", path);
        goto out;
    }
    int64_t len = mc_megatron_dataset_len(d);
    for (int64_t k = 0; k < n && k < len && !st; k++) {
        struct mc_gpt_sample s = {tok, lab, lm, pos, am};
        int did;
        if ((st = mc_megatron_dataset_get(d, k, &s, &did)))
            break;
        int32_t d32 = did;
        fwrite(&d32, 4, 1, f);
        fwrite(tok, 8, (size_t)seq, f);
        fwrite(lab, 8, (size_t)seq, f);
        fwrite(lm, 4, (size_t)seq, f);
        fwrite(pos, 8, (size_t)seq, f);
        if (s.attention_mask)
            fwrite(am, 1, (size_t)(seq * seq), f);
    }
    if (fclose(f) != 0 && !st)
        st = mc_error(MC_ERR_IO, "cannot write %s", path);
out:
    mc_free(tok); mc_free(lab); mc_free(pos); mc_free(lm); mc_free(am);
    return st;
}

void mc_megatron_dataset_free(mc_megatron_dataset *d)
{
    if (!d)
        return;
    mc_gpt_dataset_free(d->gpt);
    mc_blended_dataset_free(d->blend);
    for (int i = 0; i < d->n_ll; i++)
        mc_gpt_lowlevel_free(d->lls[i]);
    mc_free(d->lls);
    mc_free(d);
}

/* ---- the builder ------------------------------------------------------------------------- */

static mc_status open_ll(const struct mc_gpt_dataset_config *c, const char *prefix,
                         struct mc_gpt_lowlevel **ll)
{
    return c->mock ? mc_gpt_lowlevel_mock(c->eod, ll) : mc_gpt_lowlevel_open(prefix, ll);
}

/* A mid-level GPTDataset of one prefix and split; range from the split matrix, or the whole
 * dataset for blend_per_split's spoofed (0.0, 1.0). */
static mc_status build_mid(const struct mc_gpt_dataset_config *c, mc_megatron_dataset *top,
                           const char *prefix, int split, int64_t num_samples, bool whole,
                           mc_gpt_dataset **out)
{
    struct mc_gpt_lowlevel *ll;
    mc_status st = open_ll(c, prefix, &ll);
    if (st)
        return st;
    top->lls[top->n_ll++] = ll;
    int64_t beg = 0, end = ll->n_sequences;
    if (!whole)
        mc_gpt_split_range(c, split, ll->n_sequences, &beg, &end);
    return mc_gpt_dataset_init(c, ll, beg, end, num_samples, split, out);
}

/* One split of a blend: a plain GPTDataset when single and unweighted (always single with
 * blend_per_split), else a BlendedDataset with the target/buffer budgets. */
static mc_status build_split(const struct mc_gpt_dataset_config *c, const struct mc_blend *b, int split,
                             int64_t size, bool per_split, mc_megatron_dataset **out)
{
    mc_megatron_dataset *top = mc_calloc(1, sizeof(*top));
    mc_gpt_dataset **mids = NULL;
    double *w = NULL;
    mc_status st = MC_ERR_NOMEM;
    *out = NULL;
    if (!top || !(top->lls = mc_calloc((size_t)b->n, sizeof(*top->lls))))
        goto fail;
    if (b->n == 1 && (!b->weights || per_split)) {
        if ((st = build_mid(c, top, b->prefixes[0], split, size, per_split, &top->gpt)))
            goto fail;
        *out = top;
        return MC_OK;
    }
    if (b->weights && size < 0) {
        st = mc_error(MC_ERR_CONFIG, "blend weights need a sample count for the %s split",
                      mc_split_name(split));
        goto fail;
    }
    if (!(mids = mc_calloc((size_t)b->n, sizeof(*mids))))
        goto fail;
    int64_t total = 0;
    if (b->weights) {
        if (!(w = mc_alloc(sizeof(double) * (size_t)b->n)))
            goto fail;
        memcpy(w, b->weights, sizeof(double) * (size_t)b->n);
        mc_blend_normalize(w, b->n);
    }
    for (int j = 0; j < b->n; j++) {
        int64_t buffer = -1;
        if (w) {
            double target = ceil((double)size * w[j]);
            total += (int64_t)target;
            buffer = (int64_t)ceil(target * (1 + 0.5 / 100));
        }
        if ((st = build_mid(c, top, b->prefixes[j], split, buffer, per_split, &mids[j])))
            goto fail;
    }
    if (!w && size >= 0) {
        int64_t sum = 0;
        for (int j = 0; j < b->n; j++)
            sum += mc_gpt_dataset_len(mids[j]);
        total = size < sum ? size : sum;
    } else if (!w) {
        total = -1;
    }
    st = mc_blended_dataset_init(c, mids, b->n, w, total, &top->blend);
    mids = NULL; /* owned by the blend now, even on failure */
    if (st)
        goto fail;
    mc_free(w);
    *out = top;
    return MC_OK;
fail:
    for (int j = 0; mids && j < b->n; j++)
        mc_gpt_dataset_free(mids[j]);
    mc_free(mids);
    mc_free(w);
    mc_megatron_dataset_free(top);
    return st;
}

mc_status mc_gpt_build_datasets(const struct mc_gpt_dataset_config *c, const int64_t sizes[3],
                                mc_megatron_dataset *out[3])
{
    mc_status st = MC_OK;
    for (int i = 0; i < 3; i++)
        out[i] = NULL;
    bool per_split = !c->mock && !c->blend;
    for (int i = 0; i < 3 && !st; i++) {
        if (per_split) {
            if (!c->blend_per_split[i])
                continue;
            st = build_split(c, c->blend_per_split[i], i, sizes[i], true, &out[i]);
        } else {
            if (!c->split_present[i])
                continue;
            static const char *mock_prefix[1] = {NULL};
            struct mc_blend mock = {1, mock_prefix, NULL};
            st = build_split(c, c->mock ? &mock : c->blend, i, sizes[i], false, &out[i]);
        }
    }
    if (st) {
        for (int i = 0; i < 3; i++) {
            mc_megatron_dataset_free(out[i]);
            out[i] = NULL;
        }
    }
    return st;
}
