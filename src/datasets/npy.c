/* NumPy .npy files (format 1.0) as numpy 1.24's numpy.save writes them, for Megatron's index
 * caches (gpt_dataset.py / blended_dataset.py save with numpy.save and load with numpy.load).
 * The writer reproduces numpy's header bytes exactly, including the spare spaces numpy leaves
 * for growing the first axis; the reader parses the header instead of assuming its length. */
#include "megatron/gpt_dataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_ALIGN 64
#define NPY_GROWTH_DIGITS 21

size_t mc_npy_itemsize(const char *descr)
{
    if (!strcmp(descr, "<i4") || !strcmp(descr, "<u4")) return 4;
    if (!strcmp(descr, "<i8") || !strcmp(descr, "<u8")) return 8;
    if (!strcmp(descr, "<i2") || !strcmp(descr, "<u2")) return 2;
    if (!strcmp(descr, "|i1") || !strcmp(descr, "|u1")) return 1;
    return 0;
}

/* The header dict as numpy prints it: sorted keys, repr values, then the growth spaces. */
static int npy_header(char *buf, size_t cap, const char *descr, int ndim, const int64_t *shape)
{
    char shp[80], first[32];
    if (ndim == 1)
        snprintf(shp, sizeof(shp), "(%lld,)", (long long)shape[0]);
    else
        snprintf(shp, sizeof(shp), "(%lld, %lld)", (long long)shape[0], (long long)shape[1]);
    int n = snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shp);
    int digits = snprintf(first, sizeof(first), "%lld", (long long)shape[0]);
    for (int i = 0; i < NPY_GROWTH_DIGITS - digits; i++)
        buf[n++] = ' ';
    /* magic(6) + version(2) + u16 length + header + '\n' padded to 64; numpy pads a full 64
     * when already aligned */
    int hlen = n + 1;
    int pad = NPY_ALIGN - ((8 + 2 + hlen) % NPY_ALIGN);
    for (int i = 0; i < pad; i++)
        buf[n++] = ' ';
    buf[n++] = '\n';
    buf[n] = '\0';
    return n;
}

static mc_status write_all(FILE *f, const void *p, size_t n, const char *path)
{
    if (n && fwrite(p, 1, n, f) != n)
        return mc_error(MC_ERR_IO, "writing %s: %s", path, strerror(errno));
    return MC_OK;
}

mc_status mc_npy_save(const char *path, const char *descr, int ndim, const int64_t *shape,
                      const void *data)
{
    size_t item = mc_npy_itemsize(descr);
    if (!item || ndim < 1 || ndim > 2)
        return mc_error(MC_ERR_INTERNAL, "npy: unsupported descr %s / ndim %d for %s", descr, ndim,
                        path);
    char header[256];
    int hn = npy_header(header, sizeof(header), descr, ndim, shape);
    size_t count = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
    size_t plen = strlen(path) + 32;
    char *tmp = mc_alloc(plen);
    if (!tmp)
        return MC_ERR_NOMEM;
    snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
    mc_status st = MC_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = mc_error(MC_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto out_free;
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hn & 0xff),
                             (unsigned char)(hn >> 8)};
    if ((st = write_all(f, pre, sizeof(pre), tmp)) || (st = write_all(f, header, (size_t)hn, tmp)) ||
        (st = write_all(f, data, count * item, tmp))) {
        fclose(f);
        goto out_unlink;
    }
    if (fclose(f) != 0) {
        st = mc_error(MC_ERR_IO, "closing %s: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    if (rename(tmp, path) != 0) {
        st = mc_error(MC_ERR_IO, "renaming %s to %s: %s", tmp, path, strerror(errno));
        goto out_unlink;
    }
    goto out_free;
out_unlink:
    remove(tmp);
out_free:
    mc_free(tmp);
    return st;
}

/* Parses "{'descr': '<i4', 'fortran_order': False, 'shape': (n, m), }" in any key order. */
static mc_status parse_header(const char *h, const char *path, struct mc_npy *a)
{
    const char *d = strstr(h, "'descr':");
    const char *fo = strstr(h, "'fortran_order':");
    const char *sh = strstr(h, "'shape':");
    if (!d || !fo || !sh)
        return mc_error(MC_ERR_FORMAT, "%s: .npy header lacks descr/fortran_order/shape: %s", path, h);
    d = strchr(d + 8, '\'');
    if (!d || strlen(d) < 5 || d[4] != '\'')
        return mc_error(MC_ERR_FORMAT, "%s: unreadable descr in .npy header %s", path, h);
    memcpy(a->descr, d + 1, 3);
    a->descr[3] = '\0';
    if (!mc_npy_itemsize(a->descr))
        return mc_error(MC_ERR_FORMAT, "%s: dtype %s is not an integer type of an index cache",
                        path, a->descr);
    fo += 16;
    while (*fo == ' ') fo++;
    if (strncmp(fo, "False", 5) != 0)
        return mc_error(MC_ERR_FORMAT, "%s: fortran_order arrays are not supported", path);
    sh = strchr(sh, '(');
    if (!sh)
        return mc_error(MC_ERR_FORMAT, "%s: unreadable shape in .npy header %s", path, h);
    sh++;
    a->ndim = 0;
    while (a->ndim < 2) {
        while (*sh == ' ') sh++;
        if (*sh == ')') break;
        char *e;
        long long v = strtoll(sh, &e, 10);
        if (e == sh || v < 0)
            return mc_error(MC_ERR_FORMAT, "%s: unreadable shape in .npy header %s", path, h);
        a->shape[a->ndim++] = v;
        sh = e;
        while (*sh == ' ') sh++;
        if (*sh == ',') sh++;
    }
    while (*sh == ' ') sh++;
    if (*sh != ')' || a->ndim == 0)
        return mc_error(MC_ERR_FORMAT, "%s: only 1-D and 2-D arrays are supported (%s)", path, h);
    /* the byte count must fit in int64 (a corrupt shape must not wrap to a small size) */
    int64_t limit = INT64_MAX / (int64_t)mc_npy_itemsize(a->descr);
    if (a->ndim == 2 && a->shape[1] > 0)
        limit /= a->shape[1];
    if (a->shape[0] > limit)
        return mc_error(MC_ERR_FORMAT, "%s: shape too large in .npy header %s", path, h);
    return MC_OK;
}

/* Bytes of the open file, or -1 (with the error set). */
static int64_t file_size(FILE *f, const char *path)
{
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        mc_error(MC_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
        return -1;
    }
    return (int64_t)sb.st_size;
}

/* Reads the header; leaves f positioned at the data and *data_off set to its offset. */
static mc_status read_header(FILE *f, const char *path, struct mc_npy *a, long *data_off)
{
    unsigned char pre[12];
    char *h = NULL;
    mc_status st = MC_OK;
    size_t hlen, pre_len = 10;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return mc_error(MC_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2)
            return mc_error(MC_ERR_FORMAT, "%s: truncated .npy header", path);
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        pre_len = 12;
    } else {
        return mc_error(MC_ERR_FORMAT, "%s: .npy version %d.%d, expected 1.0, 2.0 or 3.0", path,
                        pre[6], pre[7]);
    }
    int64_t size = file_size(f, path);
    if (size < 0)
        return MC_ERR_IO;
    if ((int64_t)hlen > size - (int64_t)pre_len) /* before allocating what a corrupt length says */
        return mc_error(MC_ERR_FORMAT, "%s: truncated .npy header (%zu bytes expected)", path, hlen);
    if (!(h = mc_alloc(hlen + 1)))
        return MC_ERR_NOMEM;
    if (fread(h, 1, hlen, f) != hlen) {
        st = mc_error(MC_ERR_FORMAT, "%s: truncated .npy header (%zu bytes expected)", path, hlen);
    } else {
        h[hlen] = '\0';
        st = parse_header(h, path, a);
    }
    mc_free(h);
    *data_off = (long)(pre_len + hlen);
    return st;
}

int64_t mc_npy_count(const struct mc_npy *a)
{
    return a->shape[0] * (a->ndim == 2 ? a->shape[1] : 1);
}

mc_status mc_npy_load(const char *path, struct mc_npy *a)
{
    memset(a, 0, sizeof(*a));
    long off;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    mc_status st = read_header(f, path, a, &off);
    size_t bytes = st ? 0 : (size_t)mc_npy_count(a) * mc_npy_itemsize(a->descr);
    int64_t size = st ? 0 : file_size(f, path);
    if (!st && size < 0)
        st = MC_ERR_IO;
    if (!st && (uint64_t)size < (uint64_t)off + bytes) /* checked before allocating */
        st = mc_error(MC_ERR_FORMAT, "%s: %lld bytes, but its header's shape needs %zu", path,
                      (long long)size, (size_t)off + bytes);
    if (!st && !(a->data = mc_alloc(bytes ? bytes : 1)))
        st = MC_ERR_NOMEM;
    if (!st && bytes && fread(a->data, 1, bytes, f) != bytes)
        st = mc_error(MC_ERR_FORMAT, "%s: data shorter than its header's shape says (%zu bytes "
                      "expected)", path, bytes);
    fclose(f);
    if (st) {
        mc_free(a->data);
        a->data = NULL;
    }
    return st;
}

/* Like numpy.load(mmap_mode='r'): the data stay in the page cache, shared between ranks. */
mc_status mc_npy_map(const char *path, struct mc_npy *a)
{
    memset(a, 0, sizeof(*a));
    long off;
    FILE *f = fopen(path, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    mc_status st = read_header(f, path, a, &off);
    struct stat sb;
    if (!st && fstat(fileno(f), &sb) != 0)
        st = mc_error(MC_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    size_t bytes = st ? 0 : (size_t)mc_npy_count(a) * mc_npy_itemsize(a->descr);
    if (!st && (size_t)sb.st_size < (size_t)off + bytes)
        st = mc_error(MC_ERR_FORMAT, "%s: %lld bytes, but its header's shape needs %zu", path,
                      (long long)sb.st_size, (size_t)off + bytes);
    if (!st && (off % 8) != 0)
        st = mc_error(MC_ERR_FORMAT, "%s: data at offset %ld is not 8-byte aligned", path, off);
    if (!st && sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fileno(f), 0);
        if (m == MAP_FAILED) {
            st = mc_error(MC_ERR_IO, "cannot mmap %s: %s", path, strerror(errno));
        } else {
            a->map = m;
            a->map_len = (size_t)sb.st_size;
            a->data = (char *)m + off;
        }
    }
    fclose(f);
    return st;
}

int64_t mc_npy_get(const struct mc_npy *a, int64_t i)
{
    const char *d = a->data;
    bool u = a->descr[1] == 'u';
    switch (a->descr[2]) {
    case '1': return u ? (int64_t)((const uint8_t *)d)[i] : ((const int8_t *)d)[i];
    case '2': return u ? (int64_t)((const uint16_t *)d)[i] : ((const int16_t *)d)[i];
    case '4': return u ? (int64_t)((const uint32_t *)d)[i] : ((const int32_t *)d)[i];
    default: return ((const int64_t *)d)[i];
    }
}

void mc_npy_free(struct mc_npy *a)
{
    if (!a)
        return;
    if (a->map)
        munmap(a->map, a->map_len);
    else
        mc_free(a->data);
    a->data = a->map = NULL;
}
