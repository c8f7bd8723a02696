/* torch.save / torch.load of torch 1.13 (torch/serialization.py, _save and _load): the pickle
 * goes to <archive>/data.pkl, each storage's raw little-endian bytes to <archive>/data/<key>,
 * then <archive>/version ("3\n"). The archive folder is the file's base name without its
 * extension; readers take it from the first entry. */
#include <string.h>

#include "checkpointing/torch_pickle.h"
#include "checkpointing/torch_zip.h"

mc_status mc_pk_doc_keep_zip(mc_pk_doc *d, struct mc_zip_reader *z);

static void archive_name(char *out, size_t n, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, n, "%s", base);
    char *dot = strrchr(out, '.');
    if (dot && dot != out)
        *dot = 0;
}

mc_status mc_torch_save(mc_pk_doc *d, const struct mc_pk *v, const char *path)
{
    return mc_torch_save_ex(d, v, path, false);
}

mc_status mc_torch_save_ex(mc_pk_doc *d, const struct mc_pk *v, const char *path, bool force_zip64)
{
    uint8_t *pkl;
    size_t n;
    struct mc_pk **st_list;
    int64_t nst;
    mc_status st = mc_pk_dump(d, v, &pkl, &n, &st_list, &nst);
    if (st)
        return st;
    char root[200], name[256];
    archive_name(root, sizeof(root), path);
    struct mc_zip_writer w;
    if ((st = mc_zip_writer_open(&w, path)))
        return st;
    w.force_zip64 = force_zip64;
    snprintf(name, sizeof(name), "%s/data.pkl", root);
    if ((st = mc_zip_writer_add(&w, name, pkl, n)))
        goto fail;
    for (int64_t k = 0; k < nst; k++) {
        const struct mc_pk *s = st_list[k];
        snprintf(name, sizeof(name), "%s/data/%s", root, s->key);
        if ((st = mc_zip_writer_add(&w, name, s->data, (size_t)s->numel * mc_dtype_size(s->dtype))))
            goto fail;
    }
    snprintf(name, sizeof(name), "%s/version", root);
    if ((st = mc_zip_writer_add(&w, name, "3\n", 2)))
        goto fail;
    return mc_zip_writer_close(&w);
fail:
    mc_zip_writer_abort(&w);
    return st;
}

mc_status mc_torch_save_stream(mc_pk_doc *d, const struct mc_pk *v, FILE *f, const char *what,
                               uint64_t *len)
{
    uint8_t *pkl;
    size_t n;
    struct mc_pk **st_list;
    int64_t nst;
    mc_status st = mc_pk_dump(d, v, &pkl, &n, &st_list, &nst);
    struct mc_zip_writer w;
    if (st || (st = mc_zip_writer_open_stream(&w, f, what)))
        return st;
    char name[64];
    st = mc_zip_writer_add(&w, "archive/data.pkl", pkl, n);
    for (int64_t k = 0; !st && k < nst; k++) {
        const struct mc_pk *s = st_list[k];
        snprintf(name, sizeof(name), "archive/data/%s", s->key);
        st = mc_zip_writer_add(&w, name, s->data, (size_t)s->numel * mc_dtype_size(s->dtype));
    }
    st = st ? st : mc_zip_writer_add(&w, "archive/version", "3\n", 2);
    if (st) {
        mc_zip_writer_abort(&w);
        return st;
    }
    return mc_zip_writer_finish(&w, len);
}

struct load_ctx {
    struct mc_zip_reader *z;
    char root[256];
};

static mc_status load_storage(void *ctx, const char *key, enum mc_dtype t, int64_t numel,
                              const void **data)
{
    struct load_ctx *c = ctx;
    char name[512];
    snprintf(name, sizeof(name), "%s/data/%s", c->root, key);
    const uint8_t *p;
    uint64_t n;
    mc_status st = mc_zip_reader_find(c->z, name, &p, &n);
    if (st)
        return st;
    if ((uint64_t)numel > n / mc_dtype_size(t) || n != (uint64_t)numel * mc_dtype_size(t))
        return mc_error(MC_ERR_FORMAT, "%s: storage %s holds %llu bytes, expected %lld %s elements "
                        "(%llu bytes)", c->z->path, name, (unsigned long long)n, (long long)numel,
                        mc_dtype_name(t), (unsigned long long)numel * mc_dtype_size(t));
    *data = p;
    return MC_OK;
}

static mc_status load_zip(mc_pk_doc *d, const char *path, const uint8_t *mem, size_t size,
                          struct mc_pk **out)
{
    struct load_ctx c = {0};
    if (!(c.z = mc_calloc(1, sizeof(*c.z))))
        return MC_ERR_NOMEM;
    mc_status st = mem ? mc_zip_reader_open_mem(c.z, path, mem, size) : mc_zip_reader_open(c.z, path);
    if (st) {
        mc_free(c.z);
        return st;
    }
    if ((st = mc_pk_doc_keep_zip(d, c.z))) {
        mc_zip_reader_close(c.z);
        mc_free(c.z);
        return st;
    }
    if (!c.z->n)
        return mc_error(MC_ERR_FORMAT, "%s: empty zip archive (not a torch.save file)", path);
    const char *first = c.z->e[0].name, *slash = strchr(first, '/');
    if (!slash || (size_t)(slash - first) >= sizeof(c.root))
        return mc_error(MC_ERR_FORMAT, "%s: first zip entry %s is not <archive>/data.pkl; "
                        "not a torch.save file (or a legacy pre-1.6 one, which is not supported)",
                        path, first);
    memcpy(c.root, first, (size_t)(slash - first));
    char name[300];
    snprintf(name, sizeof(name), "%s/data.pkl", c.root);
    const uint8_t *pkl;
    uint64_t n;
    if ((st = mc_zip_reader_find(c.z, name, &pkl, &n)))
        return st;
    return mc_pk_load(d, pkl, (size_t)n, path, load_storage, &c, out);
}

mc_status mc_torch_load(mc_pk_doc *d, const char *path, struct mc_pk **out)
{
    return load_zip(d, path, NULL, 0, out);
}

mc_status mc_torch_load_mem(mc_pk_doc *d, const char *what, const uint8_t *data, size_t size,
                            struct mc_pk **out)
{
    if (!data || size < 22)
        return mc_error(MC_ERR_FORMAT, "%s: %zu bytes, too short for a torch.save archive", what, size);
    return load_zip(d, what, data, size, out);
}
