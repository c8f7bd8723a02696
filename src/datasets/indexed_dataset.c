/* Megatron's .bin/.idx indexed dataset: a read-only mmap reader and a builder.
 * Mirrors megatron/core/datasets/indexed_dataset.py (IndexedDataset, _IndexReader,
 * IndexedDatasetBuilder, DType). Byte layout: docs/formats/indexed_dataset.md.
 *
 * The .idx arrays are never aligned in the file (lengths start at byte 34), so the reader
 * copies them into aligned buffers once at open instead of handing out pointers into the map. */
#include "megatron/indexed_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IDX_MAGIC "MMIDIDX\0\0"
#define IDX_MAGIC_LEN 9
#define IDX_HEADER_LEN 34 /* magic 9 + version 8 + dtype 1 + n 8 + d 8 */

/* ---- dtype codes (Megatron's DType enum) ------------------------------------------------ */

static size_t code_bytes(int code)
{
    switch (code) {
    case 1: case 2: return 1;          /* uint8, int8 */
    case 3: case 8: return 2;          /* int16, uint16 */
    case 4: case 7: return 4;          /* int32, float32 */
    case 5: case 6: return 8;          /* int64, float64 */
    default: return 0;
    }
}

int mc_ds_optimal_dtype_code(int64_t vocab_size)
{
    /* DType.optimal_dtype: uint16 below 65500 (not 65536), else int32 */
    return (vocab_size >= 0 && vocab_size < 65500) ? 8 : 4;
}

/* Stores v as dtype `code` at p (little-endian host assumed, as Megatron's numpy files are). */
static mc_status put_token(unsigned char *p, int code, int64_t v)
{
    int64_t lo = 0, hi = 0;
    switch (code) {
    case 1: lo = 0; hi = UINT8_MAX; break;
    case 2: lo = INT8_MIN; hi = INT8_MAX; break;
    case 3: lo = INT16_MIN; hi = INT16_MAX; break;
    case 8: lo = 0; hi = UINT16_MAX; break;
    case 4: lo = INT32_MIN; hi = INT32_MAX; break;
    default: lo = INT64_MIN; hi = INT64_MAX; break;
    }
    if (v < lo || v > hi)
        return MC_ERR_CONFIG;
    switch (code) {
    case 1: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    case 2: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case 3: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case 8: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case 4: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case 5: memcpy(p, &v, 8); break;
    case 6: { double x = (double)v; memcpy(p, &x, 8); break; }
    case 7: { float x = (float)v; memcpy(p, &x, 4); break; }
    default: return MC_ERR_INTERNAL;
    }
    return MC_OK;
}

/* A float32/float64 token as numpy's astype(int64) would give it (truncation), when it has one:
 * NaN, infinities and values outside int64 have none (converting them is undefined in C). */
static bool float_token(double x, int64_t *v)
{
    if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0))
        return false;
    *v = (int64_t)x;
    return true;
}

static int64_t get_token(const unsigned char *p, int code)
{
    switch (code) {
    case 1: { uint8_t x; memcpy(&x, p, 1); return x; }
    case 2: { int8_t x; memcpy(&x, p, 1); return x; }
    case 3: { int16_t x; memcpy(&x, p, 2); return x; }
    case 8: { uint16_t x; memcpy(&x, p, 2); return x; }
    case 4: { int32_t x; memcpy(&x, p, 4); return x; }
    case 5: { int64_t x; memcpy(&x, p, 8); return x; }
    case 6: case 7: return 0; /* float dtypes go through float_token */
    default: return 0;
    }
}

/* ---- read-only file maps -------------------------------------------------------------- */

struct fmap {
    const unsigned char *data; /* NULL for an empty file */
    size_t size;
};

static mc_status fmap_open(const char *path, struct fmap *m)
{
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mc_error(MC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        mc_status s = mc_error(MC_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mc_error(MC_ERR_IO, "%s is not a regular file", path);
    }
    m->size = (size_t)st.st_size;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            mc_status s = mc_error(MC_ERR_IO, "cannot mmap %s (%zu bytes): %s", path,
                                   m->size, strerror(errno));
            close(fd);
            return s;
        }
        m->data = p;
    }
    close(fd); /* the mapping outlives the descriptor */
    return MC_OK;
}

static void fmap_close(struct fmap *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

/* ---- reader ----------------------------------------------------------------------------- */

struct mc_indexed_dataset {
    struct fmap bin;
    char *bin_path;     /* for messages */
    int dtype_code;
    size_t itemsize;
    int64_t n, d;
    int32_t *lengths;   /* [n] */
    int64_t *pointers;  /* [n] */
    int64_t *doc_idx;   /* [d] */
};

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = mc_alloc(la + lb + 1);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

static uint64_t rd_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Parses and checks the header of an .idx map: magic, version, dtype, and that the file is
 * exactly as long as the counts say (34 + 12n + 8d, or + n more for multimodal files). */
static mc_status check_header(const char *path, const struct fmap *m, mc_indexed_dataset *ds)
{
    if (m->size < IDX_HEADER_LEN)
        return mc_error(MC_ERR_FORMAT, "%s: file is %zu bytes, shorter than the %d-byte header",
                        path, m->size, IDX_HEADER_LEN);
    if (memcmp(m->data, IDX_MAGIC, IDX_MAGIC_LEN) != 0)
        return mc_error(MC_ERR_FORMAT, "%s: bad magic (expected \"MMIDIDX\\0\\0\"); not a "
                        "Megatron indexed dataset index", path);
    uint64_t version = rd_u64(m->data + 9);
    if (version != 1)
        return mc_error(MC_ERR_FORMAT, "%s: version is %llu, expected 1", path,
                        (unsigned long long)version);
    int code = m->data[17];
    if (code_bytes(code) == 0)
        return mc_error(MC_ERR_FORMAT, "%s: dtype code is %d, expected one of 1..8", path, code);
    uint64_t n = rd_u64(m->data + 18), d = rd_u64(m->data + 26);
    uint64_t room = (uint64_t)(m->size - IDX_HEADER_LEN);
    if (n > room / 12 || d > room / 8 || 12 * n + 8 * d > room)
        return mc_error(MC_ERR_FORMAT, "%s: header counts sequences=%llu document_indices=%llu "
                        "need more bytes than the file has (%zu); truncated or corrupt index",
                        path, (unsigned long long)n, (unsigned long long)d, m->size);
    uint64_t want = IDX_HEADER_LEN + 12 * n + 8 * d;
    if (m->size != want && m->size != want + n)
        return mc_error(MC_ERR_FORMAT, "%s: file size is %zu bytes, expected %llu (or %llu with "
                        "multimodal modes) for sequences=%llu document_indices=%llu", path,
                        m->size, (unsigned long long)want, (unsigned long long)(want + n),
                        (unsigned long long)n, (unsigned long long)d);
    if (d < 1)
        return mc_error(MC_ERR_FORMAT, "%s: document_indices count is 0, expected at least 1",
                        path);
    ds->dtype_code = code;
    ds->itemsize = code_bytes(code);
    ds->n = (int64_t)n;
    ds->d = (int64_t)d;
    return MC_OK;
}

/* Copies the three arrays out of the map and checks document_indices. */
static mc_status load_arrays(const char *path, const struct fmap *m, mc_indexed_dataset *ds)
{
    size_t n = (size_t)ds->n, d = (size_t)ds->d;
    ds->lengths = mc_alloc(n ? n * sizeof(int32_t) : 1);
    ds->pointers = mc_alloc(n ? n * sizeof(int64_t) : 1);
    ds->doc_idx = mc_alloc(d * sizeof(int64_t));
    if (!ds->lengths || !ds->pointers || !ds->doc_idx)
        return MC_ERR_NOMEM;
    const unsigned char *p = m->data + IDX_HEADER_LEN;
    if (n) {
        memcpy(ds->lengths, p, n * 4);
        memcpy(ds->pointers, p + 4 * n, n * 8);
    }
    memcpy(ds->doc_idx, p + 12 * n, d * 8);
    if (ds->doc_idx[0] != 0)
        return mc_error(MC_ERR_FORMAT, "%s: document_indices[0] is %lld, expected 0", path,
                        (long long)ds->doc_idx[0]);
    for (size_t k = 1; k < d; k++)
        if (ds->doc_idx[k] < ds->doc_idx[k - 1] || ds->doc_idx[k] > ds->n)
            return mc_error(MC_ERR_FORMAT, "%s: document_indices[%zu] is %lld, expected a value "
                            "in [%lld, %lld] (non-decreasing, at most sequences)", path, k,
                            (long long)ds->doc_idx[k], (long long)ds->doc_idx[k - 1],
                            (long long)ds->n);
    if (ds->doc_idx[d - 1] != ds->n)
        return mc_error(MC_ERR_FORMAT, "%s: last document_indices entry is %lld, expected the "
                        "sequence count %lld", path, (long long)ds->doc_idx[d - 1],
                        (long long)ds->n);
    return MC_OK;
}

/* Every sequence must lie inside .bin: 0 <= pointer, length >= 0, pointer + bytes <= size. */
static mc_status check_sequences(const char *idx_path, const char *bin_path,
                                 const mc_indexed_dataset *ds)
{
    int64_t size = (int64_t)ds->bin.size, isz = (int64_t)ds->itemsize;
    for (int64_t i = 0; i < ds->n; i++) {
        int64_t len = ds->lengths[i], ptr = ds->pointers[i];
        if (len < 0)
            return mc_error(MC_ERR_FORMAT, "%s: sequence_lengths[%lld] is %lld, expected >= 0",
                            idx_path, (long long)i, (long long)len);
        if (ptr < 0 || ptr > size || len > (size - ptr) / isz)
            return mc_error(MC_ERR_FORMAT, "%s: sequence %lld (sequence_pointers=%lld, "
                            "sequence_lengths=%lld, %lld bytes each) ends past the end of the "
                            "file (%lld bytes); truncated .bin or corrupt .idx", bin_path,
                            (long long)i, (long long)ptr, (long long)len, (long long)isz,
                            (long long)size);
    }
    return MC_OK;
}

mc_status mc_ds_open(const char *path_prefix, mc_indexed_dataset **out)
{
    *out = NULL;
    mc_status s = MC_OK;
    struct fmap idx = {0};
    char *idx_path = concat(path_prefix, ".idx"), *bin_path = concat(path_prefix, ".bin");
    mc_indexed_dataset *ds = mc_calloc(1, sizeof(*ds));
    if (!idx_path || !bin_path || !ds) {
        s = MC_ERR_NOMEM;
        goto out_free;
    }
    if ((s = fmap_open(idx_path, &idx)) != MC_OK)
        goto out_free;
    if ((s = check_header(idx_path, &idx, ds)) != MC_OK)
        goto out_free;
    if ((s = load_arrays(idx_path, &idx, ds)) != MC_OK)
        goto out_free;
    if ((s = fmap_open(bin_path, &ds->bin)) != MC_OK)
        goto out_free;
    if ((s = check_sequences(idx_path, bin_path, ds)) != MC_OK)
        goto out_free;
    ds->bin_path = bin_path;
    bin_path = NULL;
    *out = ds;
    ds = NULL;
out_free:
    fmap_close(&idx);
    mc_ds_close(ds);
    mc_free(idx_path);
    mc_free(bin_path);
    return s;
}

void mc_ds_close(mc_indexed_dataset *ds)
{
    if (!ds)
        return;
    fmap_close(&ds->bin);
    mc_free(ds->bin_path);
    mc_free(ds->lengths);
    mc_free(ds->pointers);
    mc_free(ds->doc_idx);
    mc_free(ds);
}

int64_t mc_ds_num_sequences(const mc_indexed_dataset *ds) { return ds->n; }
int64_t mc_ds_num_documents(const mc_indexed_dataset *ds) { return ds->d - 1; }
int mc_ds_dtype_code(const mc_indexed_dataset *ds) { return ds->dtype_code; }
size_t mc_ds_dtype_bytes(const mc_indexed_dataset *ds) { return ds->itemsize; }
const int32_t *mc_ds_sequence_lengths(const mc_indexed_dataset *ds) { return ds->lengths; }
const int64_t *mc_ds_sequence_pointers(const mc_indexed_dataset *ds) { return ds->pointers; }
const int64_t *mc_ds_document_indices(const mc_indexed_dataset *ds) { return ds->doc_idx; }

/* Unlike Megatron's get(), reads are confined to the sequence: a window that leaves it is
 * an error, not a silent read into the next sequence. */
mc_status mc_ds_get(const mc_indexed_dataset *ds, int64_t idx, int64_t offset, int64_t length,
                    int64_t *out)
{
    if (idx < 0 || idx >= ds->n)
        return mc_error(MC_ERR_CONFIG, "sequence index %lld out of range [0, %lld)",
                        (long long)idx, (long long)ds->n);
    int64_t len = ds->lengths[idx];
    if (offset < 0 || length < 0 || offset > len || length > len - offset)
        return mc_error(MC_ERR_CONFIG, "tokens [%lld, %lld+%lld) outside sequence %lld of "
                        "length %lld", (long long)offset, (long long)offset, (long long)length,
                        (long long)idx, (long long)len);
    const unsigned char *p = ds->bin.data + ds->pointers[idx] + offset * (int64_t)ds->itemsize;
    if (ds->dtype_code == 6 || ds->dtype_code == 7) {
        for (int64_t i = 0; i < length; i++) {
            const unsigned char *q = p + i * (int64_t)ds->itemsize;
            double x;
            if (ds->dtype_code == 6) {
                memcpy(&x, q, 8);
            } else {
                float f;
                memcpy(&f, q, 4);
                x = f;
            }
            if (!float_token(x, &out[i]))
                return mc_error(MC_ERR_FORMAT, "%s: token %lld of sequence %lld is %g, which is "
                                "not a token id (a %s .bin holds integer ids)", ds->bin_path,
                                (long long)(offset + i), (long long)idx, x,
                                ds->dtype_code == 6 ? "float64" : "float32");
        }
        return MC_OK;
    }
    for (int64_t i = 0; i < length; i++)
        out[i] = get_token(p + i * (int64_t)ds->itemsize, ds->dtype_code);
    return MC_OK;
}

/* ---- builder ---------------------------------------------------------------------------- */

struct vec { void *data; size_t len, cap, elem; };

static mc_status vec_reserve(struct vec *v, size_t extra)
{
    if (v->len + extra <= v->cap)
        return MC_OK;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap < v->len + extra)
        cap *= 2;
    void *p = mc_alloc(cap * v->elem);
    if (!p)
        return MC_ERR_NOMEM;
    if (v->len)
        memcpy(p, v->data, v->len * v->elem);
    mc_free(v->data);
    v->data = p;
    v->cap = cap;
    return MC_OK;
}

static mc_status vec_push(struct vec *v, const void *x)
{
    mc_status s = vec_reserve(v, 1);
    if (s != MC_OK)
        return s;
    memcpy((char *)v->data + v->len * v->elem, x, v->elem);
    v->len++;
    return MC_OK;
}

struct mc_ds_builder {
    char *bin_path, *idx_path, *bin_tmp, *idx_tmp;
    FILE *bin;
    int dtype_code;
    size_t itemsize;
    struct vec lengths; /* int32 */
    struct vec doc_idx; /* int64 */
    unsigned char *buf; /* conversion buffer */
    size_t buf_cap;
};

static void builder_free(mc_ds_builder *b)
{
    if (!b)
        return;
    if (b->bin)
        fclose(b->bin);
    mc_free(b->bin_path);
    mc_free(b->idx_path);
    mc_free(b->bin_tmp);
    mc_free(b->idx_tmp);
    mc_free(b->lengths.data);
    mc_free(b->doc_idx.data);
    mc_free(b->buf);
    mc_free(b);
}

/* Temporaries are named after the target plus ".tmp.<pid>" so two runs never share one. */
static char *tmp_name(const char *path)
{
    char suffix[40];
    snprintf(suffix, sizeof(suffix), ".tmp.%ld", (long)getpid());
    return concat(path, suffix);
}

mc_status mc_ds_builder_init(const char *path_prefix, int dtype_code, mc_ds_builder **out)
{
    *out = NULL;
    if (code_bytes(dtype_code) == 0)
        return mc_error(MC_ERR_CONFIG, "indexed dataset builder for %s: dtype code %d, expected "
                        "one of 1..8", path_prefix, dtype_code);
    mc_ds_builder *b = mc_calloc(1, sizeof(*b));
    if (!b)
        return MC_ERR_NOMEM;
    b->dtype_code = dtype_code;
    b->itemsize = code_bytes(dtype_code);
    b->lengths.elem = sizeof(int32_t);
    b->doc_idx.elem = sizeof(int64_t);
    b->bin_path = concat(path_prefix, ".bin");
    b->idx_path = concat(path_prefix, ".idx");
    b->bin_tmp = b->bin_path ? tmp_name(b->bin_path) : NULL;
    b->idx_tmp = b->idx_path ? tmp_name(b->idx_path) : NULL;
    int64_t zero = 0;
    mc_status s = MC_ERR_NOMEM;
    if (!b->bin_path || !b->idx_path || !b->bin_tmp || !b->idx_tmp ||
        vec_push(&b->doc_idx, &zero) != MC_OK)
        goto out_free;
    b->bin = fopen(b->bin_tmp, "wb");
    if (!b->bin) {
        s = mc_error(MC_ERR_IO, "cannot create %s: %s", b->bin_tmp, strerror(errno));
        goto out_free;
    }
    *out = b;
    return MC_OK;
out_free:
    builder_free(b);
    return s;
}

static mc_status write_bin(mc_ds_builder *b, const void *p, size_t bytes)
{
    if (bytes && fwrite(p, 1, bytes, b->bin) != bytes)
        return mc_error(MC_ERR_IO, "write to %s failed: %s", b->bin_tmp, strerror(errno));
    return MC_OK;
}

mc_status mc_ds_builder_add_item(mc_ds_builder *b, const int64_t *tokens, int64_t n)
{
    if (n < 0 || n > INT32_MAX)
        return mc_error(MC_ERR_CONFIG, "%s: sequence of %lld tokens; the .idx stores lengths as "
                        "int32 (0..%d)", b->bin_path, (long long)n, INT32_MAX);
    size_t bytes = (size_t)n * b->itemsize;
    if (bytes > b->buf_cap) {
        mc_free(b->buf);
        b->buf_cap = bytes < 65536 ? 65536 : bytes;
        b->buf = mc_alloc(b->buf_cap);
        if (!b->buf) {
            b->buf_cap = 0;
            return MC_ERR_NOMEM;
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (put_token(b->buf + i * (int64_t)b->itemsize, b->dtype_code, tokens[i]) != MC_OK)
            return mc_error(MC_ERR_CONFIG, "%s: token id %lld does not fit the dataset dtype "
                            "code %d (%zu bytes)", b->bin_path, (long long)tokens[i],
                            b->dtype_code, b->itemsize);
    mc_status s = write_bin(b, b->buf, bytes);
    if (s != MC_OK)
        return s;
    int32_t len = (int32_t)n;
    return vec_push(&b->lengths, &len);
}

mc_status mc_ds_builder_end_document(mc_ds_builder *b)
{
    int64_t n = (int64_t)b->lengths.len;
    return vec_push(&b->doc_idx, &n);
}

/* Appends the whole of other.bin (as Megatron does) and the shifted index arrays. */
mc_status mc_ds_builder_add_index(mc_ds_builder *b, const char *other_prefix)
{
    mc_indexed_dataset *o = NULL;
    mc_status s = mc_ds_open(other_prefix, &o);
    if (s != MC_OK)
        return s;
    if (o->dtype_code != b->dtype_code) {
        s = mc_error(MC_ERR_CONFIG, "merging %s.idx: dtype code %d, but the output %s has %d",
                     other_prefix, o->dtype_code, b->bin_path, b->dtype_code);
        goto out_close;
    }
    int64_t offset = (int64_t)b->lengths.len;
    if ((s = vec_reserve(&b->lengths, (size_t)o->n)) != MC_OK ||
        (s = vec_reserve(&b->doc_idx, (size_t)o->d)) != MC_OK)
        goto out_close;
    if (o->n)
        memcpy((int32_t *)b->lengths.data + b->lengths.len, o->lengths, (size_t)o->n * 4);
    b->lengths.len += (size_t)o->n;
    int64_t *di = b->doc_idx.data;
    for (int64_t k = 1; k < o->d; k++)
        di[b->doc_idx.len++] = offset + o->doc_idx[k];
    s = write_bin(b, o->bin.data, o->bin.size);
out_close:
    mc_ds_close(o);
    return s;
}

static mc_status write_idx(mc_ds_builder *b)
{
    FILE *f = fopen(b->idx_tmp, "wb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot create %s: %s", b->idx_tmp, strerror(errno));
    uint64_t version = 1, n = b->lengths.len, d = b->doc_idx.len;
    uint8_t code = (uint8_t)b->dtype_code;
    int ok = fwrite(IDX_MAGIC, 1, IDX_MAGIC_LEN, f) == IDX_MAGIC_LEN &&
             fwrite(&version, 8, 1, f) == 1 && fwrite(&code, 1, 1, f) == 1 &&
             fwrite(&n, 8, 1, f) == 1 && fwrite(&d, 8, 1, f) == 1;
    if (ok && n)
        ok = fwrite(b->lengths.data, 4, n, f) == n;
    /* pointers are recomputed from the lengths, never copied (as Megatron's finalize) */
    int64_t ptr = 0, chunk[4096];
    const int32_t *len = b->lengths.data;
    for (uint64_t i = 0; ok && i < n;) {
        size_t k = 0;
        for (; k < 4096 && i < n; k++, i++) {
            chunk[k] = ptr;
            ptr += (int64_t)len[i] * (int64_t)b->itemsize;
        }
        ok = fwrite(chunk, 8, k, f) == k;
    }
    if (ok)
        ok = fwrite(b->doc_idx.data, 8, d, f) == d;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok)
        return mc_error(MC_ERR_IO, "write to %s failed: %s", b->idx_tmp, strerror(errno));
    return MC_OK;
}

mc_status mc_ds_builder_finalize(mc_ds_builder *b)
{
    mc_status s = MC_OK;
    FILE *bin = b->bin;
    b->bin = NULL;
    if (fclose(bin) != 0) {
        s = mc_error(MC_ERR_IO, "closing %s failed: %s", b->bin_tmp, strerror(errno));
        goto out_abort;
    }
    if ((s = write_idx(b)) != MC_OK)
        goto out_abort;
    /* .bin first, .idx last: until the .idx appears under its name no reader picks up the
     * pair, and a crash in between pairs a new .bin with an old .idx, which the reader's
     * per-sequence bounds checks catch unless the old index happens to fit */
    if (rename(b->bin_tmp, b->bin_path) != 0) {
        s = mc_error(MC_ERR_IO, "cannot rename %s to %s: %s", b->bin_tmp, b->bin_path,
                     strerror(errno));
        goto out_abort;
    }
    if (rename(b->idx_tmp, b->idx_path) != 0) {
        s = mc_error(MC_ERR_IO, "cannot rename %s to %s: %s", b->idx_tmp, b->idx_path,
                     strerror(errno));
        unlink(b->bin_path);
        goto out_abort;
    }
    builder_free(b);
    return MC_OK;
out_abort:
    mc_ds_builder_abort(b);
    return s;
}

void mc_ds_builder_abort(mc_ds_builder *b)
{
    if (!b)
        return;
    if (b->bin) {
        fclose(b->bin);
        b->bin = NULL;
    }
    unlink(b->bin_tmp);
    unlink(b->idx_tmp);
    builder_free(b);
}
