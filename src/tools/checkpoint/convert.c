/* The converter's model (full tensors + metadata) and what every loader and saver shares: the
 * message check of saver_base.py (queue_get / check_message), the vocabulary size logic of
 * loader_base.py (compute_true_vocab_size, verify_vocabs_match) and
 * megatron/training/tokenizer/tokenizer.py (_vocab_size_with_padding), and the output
 * directory written under a temporary name and renamed at the end. Megatron-LM core_v0.12.1. */
#include "tools/checkpoint/convert.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"

void mc_cv_model_init(struct mc_cv_model *m)
{
    memset(m, 0, sizeof(*m));
    m->md.true_vocab_size = -1;
    m->md.make_vocab_size_divisible_by = 128;
    m->md.norm_epsilon = 1e-5;
    m->md.rotary_base = 10000;
    m->md.rotary_percent = 1.0;
    m->md.rope_scaling_factor = 8.0;
    m->md.params_dtype = MC_DTYPE_F32;
    m->md.previous_tp = m->md.previous_pp = 1;
    strcpy(m->md.position_embedding_type, "learned_absolute");
    strcpy(m->md.normalization, "LayerNorm");
    strcpy(m->md.tokenizer_type, "GPT2BPETokenizer");
}

void mc_cv_model_free(struct mc_cv_model *m)
{
    for (int64_t i = 0; i < m->n; i++)
        mc_free(m->t[i].data);
    mc_free(m->t);
    if (m->md.doc)
        mc_pk_doc_free(m->md.doc);
    memset(m, 0, sizeof(*m));
}

mc_status mc_cv_add(struct mc_cv_model *m, struct mc_cv_tensor **out, enum mc_dtype dtype,
                    int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
{
    if (m->n == m->cap) {
        int64_t cap = m->cap ? 2 * m->cap : 64;
        struct mc_cv_tensor *t = mc_calloc((size_t)cap, sizeof(*t));
        if (!t)
            return MC_ERR_NOMEM;
        if (m->n)
            memcpy(t, m->t, (size_t)m->n * sizeof(*t));
        mc_free(m->t);
        m->t = t;
        m->cap = cap;
    }
    struct mc_cv_tensor *t = &m->t[m->n];
    memset(t, 0, sizeof(*t));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof(t->name), fmt, ap);
    va_end(ap);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 1;
    size_t bytes = (size_t)d0 * (size_t)t->shape[1] * mc_dtype_size(dtype);
    t->data = mc_calloc(bytes ? bytes : 1, 1);
    if (!t->data)
        return MC_ERR_NOMEM;
    m->n++;
    *out = t;
    return MC_OK;
}

struct mc_tensor mc_cv_view(const struct mc_cv_tensor *t)
{
    return mc_tensor_view(t->data, t->dtype, t->ndim, t->shape);
}

struct mc_cv_tensor *mc_cv_get(const struct mc_cv_model *m, const char *fmt, ...)
{
    char name[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    for (int64_t i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name))
            return &m->t[i];
    return NULL;
}

/* ---- the message check ------------------------------------------------------------------------- */
struct expect {
    char name[64];
    int ndim;
    int64_t d0, d1; /* d0 < 0: any number of rows (vocabulary tables) */
};

static int expected(const struct mc_cv_meta *md, struct expect *e, int cap)
{
    int n = 0;
    int64_t h = md->hidden_size, hn = md->kv_channels, np = md->num_attention_heads;
    int64_t qkv = (np + 2 * md->num_query_groups) * hn, ffn = md->ffn_hidden_size;
    bool ln = !strcmp(md->normalization, "LayerNorm");
#define E(nd, a, b, ...)                                                                           \
    do {                                                                                           \
        if (n < cap) {                                                                             \
            snprintf(e[n].name, sizeof(e[n].name), __VA_ARGS__);                                   \
            e[n].ndim = nd, e[n].d0 = a, e[n].d1 = b;                                              \
        }                                                                                          \
        n++;                                                                                       \
    } while (0)
    E(2, -1, h, "word embeddings");
    if (!strcmp(md->position_embedding_type, "learned_absolute"))
        E(2, md->max_position_embeddings, h, "position embeddings");
    for (int64_t l = 0; l < md->num_layers; l++) {
        E(1, h, 1, "layer %lld input norm weight", (long long)l);
        if (ln)
            E(1, h, 1, "layer %lld input norm bias", (long long)l);
        E(2, qkv, h, "layer %lld qkv weight", (long long)l);
        if (md->qkv_bias || md->linear_bias)
            E(1, qkv, 1, "layer %lld qkv bias", (long long)l);
        E(2, h, np * hn, "layer %lld dense weight", (long long)l);
        if (md->linear_bias)
            E(1, h, 1, "layer %lld dense bias", (long long)l);
        E(1, h, 1, "layer %lld post norm weight", (long long)l);
        if (ln)
            E(1, h, 1, "layer %lld post norm bias", (long long)l);
        E(2, (md->swiglu ? 2 : 1) * ffn, h, "layer %lld mlp l0 weight", (long long)l);
        if (md->linear_bias)
            E(1, (md->swiglu ? 2 : 1) * ffn, 1, "layer %lld mlp l0 bias", (long long)l);
        E(2, h, ffn, "layer %lld mlp l1 weight", (long long)l);
        if (md->linear_bias)
            E(1, h, 1, "layer %lld mlp l1 bias", (long long)l);
    }
    E(1, h, 1, "final norm weight");
    if (ln)
        E(1, h, 1, "final norm bias");
    if (md->untied)
        E(2, -1, h, "output layer weight");
#undef E
    return n;
}

mc_status mc_cv_check(const struct mc_cv_model *m, const char *what)
{
    int n = expected(&m->md, NULL, 0);
    struct expect *e = mc_calloc((size_t)n, sizeof(*e));
    if (!e)
        return MC_ERR_NOMEM;
    expected(&m->md, e, n);
    mc_status st = MC_OK;
    for (int k = 0; !st && k < n; k++) {
        const struct mc_cv_tensor *t = mc_cv_get(m, "%s", e[k].name);
        if (!t)
            st = mc_error(MC_ERR_FORMAT, "%s: no tensor for '%s'", what, e[k].name);
        else if (t->ndim != e[k].ndim || (e[k].d0 >= 0 && t->shape[0] != e[k].d0) ||
                 (e[k].ndim > 1 && t->shape[1] != e[k].d1))
            st = mc_error(MC_ERR_SHAPE, "%s: '%s' has shape [%lld, %lld], expected [%lld, %lld] "
                          "for the model's arguments", what, e[k].name, (long long)t->shape[0],
                          (long long)t->shape[1], (long long)e[k].d0, (long long)e[k].d1);
    }
    if (!st && m->n != n) /* check_message: nothing left over */
        for (int64_t i = 0; !st && i < m->n; i++) {
            bool known = false;
            for (int k = 0; k < n && !known; k++)
                known = !strcmp(e[k].name, m->t[i].name);
            if (!known)
                st = mc_error(MC_ERR_FORMAT, "%s: unexpected tensor '%s' for the model's arguments",
                              what, m->t[i].name);
        }
    mc_free(e);
    return st;
}

/* ---- vocabulary -------------------------------------------------------------------------------- */
int64_t mc_cv_padded_vocab(int64_t true_vocab, int64_t divisible_by, int tp)
{
    int64_t mult = divisible_by * tp;
    return (true_vocab + mult - 1) / mult * mult;
}

mc_status mc_cv_true_vocab(const struct mc_cv_options *o, int64_t *out)
{
    *out = o->true_vocab_size;
    if (!o->vocab_file)
        return MC_OK;
    mc_json_doc *doc;
    mc_status st = mc_json_parse_file(o->vocab_file, &doc);
    if (st)
        return st;
    const struct mc_json *root = mc_json_doc_root(doc);
    int64_t n = root->type == MC_JSON_OBJECT || root->type == MC_JSON_ARRAY ? root->len : -1;
    mc_json_doc_free(doc);
    if (n < 0)
        return mc_error(MC_ERR_FORMAT, "--vocab-file %s: expected a JSON object (a vocab.json) "
                        "whose size is the vocabulary size", o->vocab_file);
    if (o->true_vocab_size >= 0 && o->true_vocab_size != n)
        return mc_error(MC_ERR_CONFIG, "Both --true-vocab-size and --vocab-file specified and the "
                        "vocab size does not match: --true-vocab-size %lld, %s holds %lld entries",
                        (long long)o->true_vocab_size, o->vocab_file, (long long)n);
    *out = n;
    return MC_OK;
}

/* ---- output directory -------------------------------------------------------------------------- */
mc_status mc_cv_mkdirs(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return mc_error(MC_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return mc_error(MC_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
    return MC_OK;
}

static bool dir_empty(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return false;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

mc_status mc_cv_begin_output(const char *save_dir, char *tmp, size_t n)
{
    struct stat sb;
    if (!stat(save_dir, &sb) && (!S_ISDIR(sb.st_mode) || !dir_empty(save_dir)))
        return mc_error(MC_ERR_CONFIG, "--save-dir %s already exists and is not an empty directory; "
                        "convert_checkpoint writes a new directory (choose another name or remove "
                        "it)", save_dir);
    snprintf(tmp, n, "%s.tmp.%ld", save_dir, (long)getpid());
    mc_cv_abort_output(tmp);
    return mc_cv_mkdirs(tmp);
}

mc_status mc_cv_finish_output(const char *save_dir, const char *tmp)
{
    rmdir(save_dir); /* an existing empty directory */
    if (rename(tmp, save_dir))
        return mc_error(MC_ERR_IO, "cannot rename %s to %s: %s", tmp, save_dir, strerror(errno));
    return MC_OK;
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    char sub[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
        remove_tree(sub);
    }
    closedir(d);
    rmdir(path);
}

void mc_cv_abort_output(const char *tmp)
{
    remove_tree(tmp);
}
