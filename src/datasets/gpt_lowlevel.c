/* The low-level dataset a GPTDataset reads from disk: Megatron's IndexedDataset (.idx/.bin,
 * megatron/core/datasets/indexed_dataset.py) opened read-only with mmap. GPT datasets need only
 * the sequence lengths, the pointers and token reads, so this file holds a small private reader
 * of that format (docs/formats/indexed_dataset.md, spec section 1.2) until the project's full
 * reader (include/megatron/indexed_dataset.h, mc_ds_open) is merged; the file is then reduced
 * to an adapter over mc_ds_*. Every header field and offset is checked against the file sizes. */
#include "megatron/gpt_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct idx_reader {
    const unsigned char *idx_map, *bin_map;
    size_t idx_size, bin_size;
    int64_t n;
    int code;
    size_t item;
    int32_t *lengths;
    int64_t *pointers;
    char *prefix;
};

static size_t code_size(int code)
{
    static const size_t sz[] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    return code >= 1 && code <= 8 ? sz[code] : 0;
}

static mc_status map_file(const char *path, const unsigned char **map, size_t *size)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return mc_error(MC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return mc_error(MC_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    *size = (size_t)sb.st_size;
    *map = NULL;
    if (*size) {
        void *p = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return mc_error(MC_ERR_IO, "cannot mmap %s: %s", path, strerror(errno));
        }
        *map = p;
    }
    close(fd);
    return MC_OK;
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static mc_status parse_idx(struct idx_reader *r, const char *path)
{
    const unsigned char *m = r->idx_map;
    if (r->idx_size < 34 || memcmp(m, "MMIDIDX\0\0", 9) != 0)
        return mc_error(MC_ERR_FORMAT, "%s: not a Megatron .idx file (bad magic or shorter than "
                        "its 34-byte header)", path);
    if (rd64(m + 9) != 1)
        return mc_error(MC_ERR_FORMAT, "%s: version %llu, expected 1", path,
                        (unsigned long long)rd64(m + 9));
    r->code = m[17];
    if (!(r->item = code_size(r->code)))
        return mc_error(MC_ERR_FORMAT, "%s: dtype code %d, expected 1..8", path, r->code);
    uint64_t n = rd64(m + 18), d = rd64(m + 26);
    if (n > (r->idx_size - 34) / 12 || d > (r->idx_size - 34 - 12 * n) / 8)
        return mc_error(MC_ERR_FORMAT, "%s: header says %llu sequences and %llu document indices, "
                        "which need more than the file's %zu bytes", path, (unsigned long long)n,
                        (unsigned long long)d, r->idx_size);
    r->n = (int64_t)n;
    r->lengths = mc_alloc(sizeof(int32_t) * (n ? n : 1));
    r->pointers = mc_alloc(sizeof(int64_t) * (n ? n : 1));
    if (!r->lengths || !r->pointers)
        return MC_ERR_NOMEM;
    memcpy(r->lengths, m + 34, 4 * n);       /* unaligned in the file: copy */
    memcpy(r->pointers, m + 34 + 4 * n, 8 * n);
    return MC_OK;
}

static mc_status idx_get(void *ctx, int64_t i, int64_t offset, int64_t length, int64_t *out)
{
    struct idx_reader *r = ctx;
    int64_t start = r->pointers[i] + offset * (int64_t)r->item;
    if (i < 0 || i >= r->n || offset < 0 || length < 0 || start < 0 ||
        (uint64_t)start + (uint64_t)length * r->item > r->bin_size)
        return mc_error(MC_ERR_FORMAT, "%s.bin: sequence %lld tokens [%lld, %lld) lie outside the "
                        "file (%zu bytes)", r->prefix, (long long)i, (long long)offset,
                        (long long)(offset + length), r->bin_size);
    const unsigned char *p = r->bin_map + start;
    for (int64_t k = 0; k < length; k++, p += r->item) {
        switch (r->code) {
        case 1: out[k] = p[0]; break;
        case 2: out[k] = (int8_t)p[0]; break;
        case 3: { int16_t v; memcpy(&v, p, 2); out[k] = v; break; }
        case 4: { int32_t v; memcpy(&v, p, 4); out[k] = v; break; }
        case 5: { int64_t v; memcpy(&v, p, 8); out[k] = v; break; }
        case 6: { double v; memcpy(&v, p, 8); out[k] = (int64_t)v; break; }
        case 7: { float v; memcpy(&v, p, 4); out[k] = (int64_t)v; break; }
        default: { uint16_t v; memcpy(&v, p, 2); out[k] = v; break; }
        }
    }
    return MC_OK;
}

static void idx_close(void *ctx)
{
    struct idx_reader *r = ctx;
    if (!r)
        return;
    if (r->idx_map) munmap((void *)r->idx_map, r->idx_size);
    if (r->bin_map) munmap((void *)r->bin_map, r->bin_size);
    mc_free(r->lengths);
    mc_free(r->pointers);
    mc_free(r->prefix);
    mc_free(r);
}

mc_status mc_gpt_lowlevel_open(const char *prefix, struct mc_gpt_lowlevel **out)
{
    *out = NULL;
    mc_status st;
    size_t pl = strlen(prefix);
    char *path = mc_alloc(pl + 8);
    struct idx_reader *r = mc_calloc(1, sizeof(*r));
    struct mc_gpt_lowlevel *ll = mc_calloc(1, sizeof(*ll));
    if (!path || !r || !ll || !(r->prefix = mc_alloc(pl + 1))) {
        st = MC_ERR_NOMEM;
        goto fail;
    }
    memcpy(r->prefix, prefix, pl + 1);
    snprintf(path, pl + 8, "%s.idx", prefix);
    if ((st = map_file(path, &r->idx_map, &r->idx_size)) || (st = parse_idx(r, path)))
        goto fail;
    snprintf(path, pl + 8, "%s.bin", prefix);
    if ((st = map_file(path, &r->bin_map, &r->bin_size)))
        goto fail;
    for (int64_t i = 0; i < r->n; i++) {
        if (r->lengths[i] < 0 || r->pointers[i] < 0 ||
            (uint64_t)r->pointers[i] + (uint64_t)r->lengths[i] * r->item > r->bin_size) {
            st = mc_error(MC_ERR_FORMAT, "%s.idx: sequence %lld (length %d at byte %lld) runs past "
                          "the end of %s.bin (%zu bytes)", prefix, (long long)i, r->lengths[i],
                          (long long)r->pointers[i], prefix, r->bin_size);
            goto fail;
        }
    }
    ll->n_sequences = r->n;
    ll->sequence_lengths = r->lengths;
    ll->path_prefix = r->prefix;
    ll->get = idx_get;
    ll->ctx = r;
    ll->close = idx_close;
    mc_free(path);
    *out = ll;
    return MC_OK;
fail:
    idx_close(r);
    mc_free(ll);
    mc_free(path);
    return st;
}
