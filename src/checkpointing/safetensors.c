/* safetensors reading and writing (format: huggingface/safetensors docs; the Rust reference
 * writer pads the JSON header with spaces to a multiple of 8 bytes). See safetensors.h. */
#include "checkpointing/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"

static const char *const names[MC_DTYPE_COUNT] = {
    [MC_DTYPE_F32] = "F32", [MC_DTYPE_F16] = "F16", [MC_DTYPE_BF16] = "BF16", [MC_DTYPE_F64] = "F64",
    [MC_DTYPE_I64] = "I64", [MC_DTYPE_I32] = "I32", [MC_DTYPE_I16] = "I16",   [MC_DTYPE_I8] = "I8",
    [MC_DTYPE_U8] = "U8",   [MC_DTYPE_BOOL] = "BOOL",
};

const char *mc_st_dtype_name(enum mc_dtype t)
{
    return (unsigned)t < MC_DTYPE_COUNT && names[t] ? names[t] : "?";
}

/* ---- reading ----------------------------------------------------------------------------------- */
static mc_status bad(const struct mc_st_file *f, const char *what)
{
    return mc_error(MC_ERR_FORMAT, "%s: not a valid safetensors file: %s", f->path, what);
}

static int dtype_by_name(const char *s)
{
    for (int k = 0; k < MC_DTYPE_COUNT; k++)
        if (names[k] && !strcmp(s, names[k]))
            return k;
    return -1;
}

static mc_status parse_entry(struct mc_st_file *f, const struct mc_json *e, struct mc_st_tensor *t,
                             uint64_t data_start)
{
    const struct mc_json *dt = mc_json_get(e, "dtype"), *sh = mc_json_get(e, "shape"),
                         *off = mc_json_get(e, "data_offsets");
    if (e->type != MC_JSON_OBJECT || !dt || dt->type != MC_JSON_STRING || !sh ||
        sh->type != MC_JSON_ARRAY || !off || off->type != MC_JSON_ARRAY || off->len != 2)
        return mc_error(MC_ERR_FORMAT, "%s: tensor '%s' needs dtype, shape and data_offsets [begin, end]",
                        f->path, e->key);
    int d = dtype_by_name(dt->str);
    if (d < 0)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; this reader knows F32, "
                        "F16, BF16, F64, I64, I32, I16, I8, U8, BOOL", f->path, e->key, dt->str);
    if (sh->len > MC_ST_MAX_DIM)
        return mc_error(MC_ERR_FORMAT, "%s: tensor '%s' has %lld dimensions (at most %d)", f->path,
                        e->key, (long long)sh->len, MC_ST_MAX_DIM);
    t->dtype = (enum mc_dtype)d;
    t->ndim = (int)sh->len;
    /* the element count must fit the file (checked arithmetic: a hostile shape must not
     * overflow int64); a zero dimension anywhere makes it 0 whatever the others are */
    bool zero = false, over = false;
    int64_t numel = 1, room = (int64_t)(f->size / mc_dtype_size((enum mc_dtype)d));
    for (int k = 0; k < t->ndim; k++) {
        const struct mc_json *x = &sh->items[k];
        if (x->type != MC_JSON_NUMBER || !x->is_int || x->inum < 0 || x->inum > (1ll << 40))
            return mc_error(MC_ERR_FORMAT, "%s: tensor '%s': bad shape entry", f->path, e->key);
        t->shape[k] = x->inum;
        zero = zero || x->inum == 0;
        if (!over && (__builtin_mul_overflow(numel, x->inum, &numel) || numel > room))
            over = true;
    }
    if (over && !zero)
        return mc_error(MC_ERR_FORMAT, "%s: tensor '%s': its shape has more elements of %s than "
                        "the %zu-byte file can hold", f->path, e->key, names[d], f->size);
    t->numel = zero ? 0 : numel;
    const struct mc_json *b = &off->items[0], *en = &off->items[1];
    if (b->type != MC_JSON_NUMBER || !b->is_int || en->type != MC_JSON_NUMBER || !en->is_int ||
        b->inum < 0 || en->inum < b->inum || data_start + (uint64_t)en->inum > f->size)
        return mc_error(MC_ERR_FORMAT, "%s: tensor '%s': data_offsets outside the file", f->path, e->key);
    if ((uint64_t)(en->inum - b->inum) != (uint64_t)t->numel * mc_dtype_size((enum mc_dtype)d))
        return mc_error(MC_ERR_FORMAT, "%s: tensor '%s': %lld bytes for %lld elements of %s", f->path,
                        e->key, (long long)(en->inum - b->inum), (long long)t->numel, names[d]);
    t->data = f->map + data_start + (uint64_t)b->inum;
    t->name = mc_alloc(e->key_len + 1);
    if (!t->name)
        return MC_ERR_NOMEM;
    memcpy(t->name, e->key, e->key_len + 1);
    return MC_OK;
}

/* qsort order of tensors by where their data starts, then by size */
static int by_offset(const void *x, const void *y)
{
    const struct mc_st_tensor *a = *(const struct mc_st_tensor *const *)x,
                              *b = *(const struct mc_st_tensor *const *)y;
    if (a->data != b->data)
        return a->data < b->data ? -1 : 1;
    return (a->numel * mc_dtype_size(a->dtype) > b->numel * mc_dtype_size(b->dtype)) -
           (a->numel * mc_dtype_size(a->dtype) < b->numel * mc_dtype_size(b->dtype));
}

/* Two tensors whose data_offsets overlap would alias each other's bytes: refuse, naming both
 * (the safetensors library refuses them too). Empty tensors overlap nothing. */
static mc_status check_overlaps(const struct mc_st_file *f)
{
    if (f->n < 2)
        return MC_OK;
    const struct mc_st_tensor **order = mc_alloc((size_t)f->n * sizeof(*order));
    if (!order)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof(*order), by_offset);
    mc_status st = MC_OK;
    const struct mc_st_tensor *last = NULL; /* the non-empty tensor reaching furthest so far */
    for (int64_t i = 0; i < f->n && st == MC_OK; i++) {
        const struct mc_st_tensor *t = order[i];
        size_t nb = (size_t)t->numel * mc_dtype_size(t->dtype);
        if (nb == 0)
            continue;
        if (last && t->data < last->data + (size_t)last->numel * mc_dtype_size(last->dtype))
            st = mc_error(MC_ERR_FORMAT, "%s: tensors '%s' (data_offsets [%zu, %zu]) and '%s' "
                          "([%zu, %zu]) overlap", f->path, last->name,
                          (size_t)(last->data - f->data0),
                          (size_t)(last->data - f->data0) + (size_t)last->numel * mc_dtype_size(last->dtype),
                          t->name, (size_t)(t->data - f->data0), (size_t)(t->data - f->data0) + nb);
        if (!last || t->data + nb > last->data + (size_t)last->numel * mc_dtype_size(last->dtype))
            last = t;
    }
    mc_free(order);
    return st;
}

static mc_status parse_header(struct mc_st_file *f)
{
    if (f->size < 8)
        return bad(f, "shorter than the 8-byte header length");
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--)
        hlen = hlen << 8 | f->map[k];
    if (hlen > f->size - 8)
        return bad(f, "header length past the end of the file");
    mc_json_doc *doc;
    mc_status st = mc_json_doc_init(&doc);
    if (st)
        return st;
    if ((st = mc_json_doc_parse(doc, (const char *)f->map + 8, (size_t)hlen, f->path, 1)))
        goto out;
    const struct mc_json *root = mc_json_doc_root(doc);
    if (root->type != MC_JSON_OBJECT) {
        st = bad(f, "the header is not a JSON object");
        goto out;
    }
    f->t = mc_calloc((size_t)root->len + 1, sizeof(*f->t));
    if (!f->t) {
        st = MC_ERR_NOMEM;
        goto out;
    }
    for (int64_t i = 0; i < root->len; i++) {
        const struct mc_json *e = &root->items[i];
        if (!strcmp(e->key, "__metadata__"))
            continue;
        if ((st = parse_entry(f, e, &f->t[f->n], 8 + hlen)))
            goto out;
        f->n++;
    }
    f->data0 = f->map + 8 + hlen;
    st = check_overlaps(f);
out:
    mc_json_doc_free(doc);
    return st;
}

static mc_status st_open(struct mc_st_file *f, const char *path)
{
    memset(f, 0, sizeof(*f));
    f->path = mc_alloc(strlen(path) + 1);
    if (!f->path)
        return MC_ERR_NOMEM;
    strcpy(f->path, path);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return mc_error(MC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    mc_status st = MC_OK;
    if (fstat(fd, &sb) || sb.st_size <= 0) {
        st = mc_error(MC_ERR_FORMAT, "%s: empty or unreadable file", path);
        close(fd);
        return st;
    }
    f->size = (size_t)sb.st_size;
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return mc_error(MC_ERR_IO, "cannot map %s: %s", path, strerror(errno));
    f->map = m;
    return parse_header(f);
}

/* On failure nothing stays allocated or mapped: a caller that gives up on the file need not
 * close it (found by tests/fuzz/fuzz_safetensors.c: the path leaked on every refused file). */
mc_status mc_st_open(struct mc_st_file *f, const char *path)
{
    mc_status st = st_open(f, path);
    if (st)
        mc_st_close(f);
    return st;
}

void mc_st_close(struct mc_st_file *f)
{
    if (f->map)
        munmap((void *)f->map, f->size);
    for (int64_t i = 0; f->t && i < f->n; i++)
        mc_free(f->t[i].name);
    mc_free(f->t);
    mc_free(f->path);
    memset(f, 0, sizeof(*f));
}

const struct mc_st_tensor *mc_st_find(const struct mc_st_file *f, const char *name)
{
    for (int64_t i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name))
            return &f->t[i];
    return NULL;
}

struct mc_tensor mc_st_view(const struct mc_st_tensor *t)
{
    _Static_assert(MC_ST_MAX_DIM <= MC_TENSOR_MAX_DIMS, "a safetensors shape fits a view");
    return mc_tensor_view((void *)t->data, t->dtype, t->ndim, t->shape);
}

void mc_st_to_f32(const struct mc_st_tensor *t, float *dst)
{
    mc_dtype_to_f32(dst, t->data, t->dtype, t->numel);
}

/* ---- writing ----------------------------------------------------------------------------------- */
static mc_status header_json(struct mc_json_buf *b, const struct mc_st_item *items, int64_t n,
                             enum mc_dtype dtype)
{
    mc_status st = mc_json_buf_printf(b, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int64_t i = 0; !st && i < n; i++) {
        int64_t numel = 1;
        st = mc_json_buf_printf(b, ",");
        st = st ? st : mc_json_write_string(b, items[i].name, strlen(items[i].name), true);
        st = st ? st : mc_json_buf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", names[dtype]);
        for (int k = 0; !st && k < items[i].ndim; k++) {
            numel *= items[i].shape[k];
            st = mc_json_buf_printf(b, "%s%lld", k ? "," : "", (long long)items[i].shape[k]);
        }
        uint64_t end = off + (uint64_t)numel * mc_dtype_size(dtype);
        st = st ? st : mc_json_buf_printf(b, "],\"data_offsets\":[%llu,%llu]}",
                                          (unsigned long long)off, (unsigned long long)end);
        off = end;
    }
    st = st ? st : mc_json_buf_printf(b, "}");
    while (!st && b->len % 8) /* the reference writer's alignment of the data area */
        st = mc_json_buf_append(b, " ", 1);
    return st;
}

static mc_status write_data(FILE *fp, const struct mc_st_item *it, enum mc_dtype dtype)
{
    int64_t numel = 1;
    for (int k = 0; k < it->ndim; k++)
        numel *= it->shape[k];
    if (dtype == MC_DTYPE_F32)
        return fwrite(it->data, 4, (size_t)numel, fp) == (size_t)numel ? MC_OK : MC_ERR_IO;
    uint16_t buf[4096];
    for (int64_t i = 0; i < numel; i += 4096) {
        size_t m = (size_t)(numel - i < 4096 ? numel - i : 4096);
        mc_dtype_from_f32(buf, dtype, it->data + i, (int64_t)m);
        if (fwrite(buf, 2, m, fp) != m)
            return MC_ERR_IO;
    }
    return MC_OK;
}

mc_status mc_st_write(const char *path, const struct mc_st_item *items, int64_t n,
                      enum mc_dtype dtype)
{
    if (dtype != MC_DTYPE_F32 && dtype != MC_DTYPE_F16 && dtype != MC_DTYPE_BF16)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: safetensors export as %s (F32, F16 or BF16 only)",
                        path, mc_st_dtype_name(dtype));
    struct mc_json_buf b = {0};
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    mc_status st = header_json(&b, items, n, dtype);
    FILE *fp = st ? NULL : fopen(tmp, "wb");
    if (!st && !fp)
        st = mc_error(MC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    if (!st) {
        uint8_t len8[8];
        for (int k = 0; k < 8; k++)
            len8[k] = (uint8_t)((uint64_t)b.len >> (8 * k));
        if (fwrite(len8, 1, 8, fp) != 8 || fwrite(b.data, 1, b.len, fp) != b.len)
            st = MC_ERR_IO;
        for (int64_t i = 0; !st && i < n; i++)
            st = write_data(fp, &items[i], dtype);
        if (!st && (fflush(fp) || fsync(fileno(fp))))
            st = MC_ERR_IO;
        if (fclose(fp) && !st)
            st = MC_ERR_IO;
        if (st == MC_ERR_IO)
            st = mc_error(MC_ERR_IO, "writing %s failed: %s", tmp, strerror(errno));
        if (!st && rename(tmp, path))
            st = mc_error(MC_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (st)
            unlink(tmp);
    }
    mc_free(b.data);
    return st;
}
