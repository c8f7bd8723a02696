/* The zip container of torch.save (PyTorch's caffe2/serialize/inline_container.cc over miniz):
 * stored entries with general-purpose flags 0x0808 (data descriptor, UTF-8 names), a local "FB"
 * extra field padding each entry's data to a 64-byte boundary, a data descriptor after the data,
 * and a zip64 end-of-central-directory record + locator before the classic one (torch writes
 * them even for tiny files). Spec: megatron-model-parallel-ckpt.md section 7.3. */
#include "checkpointing/torch_zip.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <omp.h>
#include <unistd.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_DESCRIPTOR 0x08074b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOCATOR64 0x07064b50u
#define FLAGS 0x0808u
#define EXTRA_FB 0x4246u
#define EXTRA_ZIP64 0x0001u
#define U32_MAX_ 0xffffffffu

/* CRC-32 (zip's polynomial 0xedb88320), eight bytes per step ("slicing by 8"): checkpoints
 * are gigabytes and every byte is checksummed on save and on load, so large buffers are also
 * cut into one piece per OpenMP thread whose CRCs are combined (crc_combine). */
static uint32_t crc_table[8][256];
static bool crc_clmul; /* the CPU folds by carry-less multiplication (crc32_clmul.c) */

static void crc_init(void)
{
    crc_clmul = mc_crc32_clmul_usable();
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

static uint32_t crc_serial(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    if (crc_clmul && n >= 64) { /* whole 16-byte blocks by folding, the tail by tables */
        size_t m = n & ~(size_t)15;
        crc = mc_crc32_clmul(crc, p, m);
        p += m;
        n -= m;
    }
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
              crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* a(x) * b(x) modulo the CRC polynomial, in the reflected bit order the CRC uses (bit 31 is x^0). */
static uint32_t gf2_mulmod(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (uint32_t bit = 1u << 31; bit; bit >>= 1) {
        if (a & bit)
            prod ^= b;
        b = (b & 1) ? (b >> 1) ^ 0xedb88320u : b >> 1; /* b *= x */
    }
    return prod;
}

/* CRC of A followed by B from crc(A), crc(B) and |B|: crc(A) shifted over |B| zero bytes (a
 * multiplication by x^(8|B|)) plus crc(B); x^(8|B|) by squaring. */
static uint32_t crc_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
    uint32_t shift = 1u << 31, sq = 1u << 23; /* x^0, and x^8: one byte */
    for (size_t n = len_b; n; n >>= 1) {
        if (n & 1)
            shift = gf2_mulmod(shift, sq);
        sq = gf2_mulmod(sq, sq);
    }
    return gf2_mulmod(shift, crc_a) ^ crc_b;
}

/* Below this per thread, one thread is faster. Folding runs at several GB/s on one core, so
 * threads pay only for entries of hundreds of MB (and idle OpenMP workers spin, taking a core
 * from the write and read syscalls on small machines). */
#define CRC_PIECE_MIN (crc_clmul ? (size_t)64 << 20 : (size_t)4 << 20)
#define CRC_MAX_PIECES 64

uint32_t mc_crc32_update(uint32_t crc, const void *data, size_t n)
{
    if (!crc_table[0][1])
        crc_init(); /* before any thread reads the table */
    const uint8_t *p = data;
    int pieces = omp_in_parallel() ? 1 : omp_get_max_threads();
    if ((size_t)pieces > n / CRC_PIECE_MIN)
        pieces = (int)(n / CRC_PIECE_MIN);
    if (pieces > CRC_MAX_PIECES)
        pieces = CRC_MAX_PIECES;
    if (pieces < 2)
        return crc_serial(crc, p, n);
    uint32_t part[CRC_MAX_PIECES];
    size_t per = n / (size_t)pieces;
#pragma omp parallel for num_threads(pieces) schedule(static, 1)
    for (int k = 0; k < pieces; k++)
        part[k] = crc_serial(0, p + (size_t)k * per, k == pieces - 1 ? n - (size_t)k * per : per);
    for (int k = 0; k < pieces; k++)
        crc = crc_combine(crc, part[k], k == pieces - 1 ? n - (size_t)k * per : per);
    return crc;
}

/* ---- little-endian packing ---------------------------------------------------------------- */
static uint8_t *put16(uint8_t *p, uint32_t v) { p[0] = v & 0xff; p[1] = (v >> 8) & 0xff; return p + 2; }
static uint8_t *put32(uint8_t *p, uint32_t v) { put16(p, v & 0xffff); put16(p + 2, v >> 16); return p + 4; }
static uint8_t *put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); return p + 8; }
static uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get32(const uint8_t *p) { return get16(p) | get16(p + 2) << 16; }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* ---- writer ------------------------------------------------------------------------------- */
#define WRITE_BEHIND ((uint64_t)32 << 20)

/* Starts the disk writes of what the file holds so far without waiting for them (Linux), so
 * that the disk works while the next entries are copied into the page cache and the fsync at
 * close finds little left to do. Only a hint: its errors surface at that fsync. */
static void write_behind(struct mc_zip_writer *w)
{
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    if (w->stream || w->pos - w->kicked < WRITE_BEHIND || fflush(w->f))
        return;
    (void)sync_file_range(fileno(w->f), (off_t)w->kicked, (off_t)(w->pos - w->kicked),
                          SYNC_FILE_RANGE_WRITE);
    w->kicked = w->pos;
#else
    (void)w;
#endif
}

static mc_status wr(struct mc_zip_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return mc_error(MC_ERR_IO, "cannot write %s: %s", w->tmp, strerror(errno));
    w->pos += n;
    write_behind(w);
    return MC_OK;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = mc_alloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

mc_status mc_zip_writer_open(struct mc_zip_writer *w, const char *path)
{
    memset(w, 0, sizeof(*w));
    w->path = dup_str(path);
    w->tmp = mc_alloc(strlen(path) + 5);
    if (!w->path || !w->tmp) {
        mc_free(w->path);
        mc_free(w->tmp);
        return MC_ERR_NOMEM;
    }
    sprintf(w->tmp, "%s.tmp", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        mc_status st = mc_error(MC_ERR_IO, "cannot create %s: %s", w->tmp, strerror(errno));
        mc_free(w->path);
        mc_free(w->tmp);
        return st;
    }
    return MC_OK;
}

mc_status mc_zip_writer_open_stream(struct mc_zip_writer *w, FILE *f, const char *what)
{
    memset(w, 0, sizeof(*w));
    w->tmp = dup_str(what);
    if (!w->tmp)
        return MC_ERR_NOMEM;
    w->f = f;
    w->stream = true;
    return MC_OK;
}

mc_status mc_zip_writer_begin(struct mc_zip_writer *w, const char *name)
{
    MC_ASSERT(!w->open_entry);
    if (w->n == w->cap) {
        int64_t cap = w->cap ? 2 * w->cap : 16;
        struct mc_zip_entry_rec *e = mc_calloc((size_t)cap, sizeof(*e));
        if (!e)
            return MC_ERR_NOMEM;
        if (w->n)
            memcpy(e, w->e, (size_t)w->n * sizeof(*e));
        mc_free(w->e);
        w->e = e;
        w->cap = cap;
    }
    struct mc_zip_entry_rec *e = &w->e[w->n];
    size_t name_len = strlen(name);
    if (!(e->name = dup_str(name)))
        return MC_ERR_NOMEM;
    w->n++;
    e->offset = w->pos;
    /* The data must start on a 64-byte boundary: pad with the "FB" extra field. */
    uint64_t data_at = w->pos + 30 + name_len + 4;
    size_t pad = (size_t)((MC_ZIP_ALIGN - data_at % MC_ZIP_ALIGN) % MC_ZIP_ALIGN);
    uint8_t h[30 + 4 + MC_ZIP_ALIGN], *p = h;
    p = put32(p, SIG_LOCAL);
    p = put16(p, 0);             /* version needed */
    p = put16(p, FLAGS);
    p = put16(p, 0);             /* stored */
    p = put32(p, 0);             /* time, date */
    p = put32(p, 0);             /* crc, sizes: in the data descriptor */
    p = put32(p, 0);
    p = put32(p, 0);
    p = put16(p, (uint32_t)name_len);
    p = put16(p, (uint32_t)(4 + pad));
    mc_status st = wr(w, h, 30);
    if (st || (st = wr(w, name, name_len)))
        return st;
    p = put16(h, EXTRA_FB);
    p = put16(p, (uint32_t)pad);
    memset(p, 'Z', pad);
    if ((st = wr(w, h, 4 + pad)))
        return st;
    w->open_entry = true;
    return MC_OK;
}

mc_status mc_zip_writer_write(struct mc_zip_writer *w, const void *data, size_t n)
{
    MC_ASSERT(w->open_entry);
    struct mc_zip_entry_rec *e = &w->e[w->n - 1];
    e->crc = mc_crc32_update(e->crc, data, n);
    e->size += n;
    return wr(w, data, n);
}

mc_status mc_zip_writer_end(struct mc_zip_writer *w)
{
    MC_ASSERT(w->open_entry);
    w->open_entry = false;
    struct mc_zip_entry_rec *e = &w->e[w->n - 1];
    uint8_t d[24], *p = d;
    p = put32(p, SIG_DESCRIPTOR);
    p = put32(p, e->crc);
    if (e->size >= U32_MAX_ || w->force_zip64) {
        p = put64(p, e->size);
        p = put64(p, e->size);
    } else {
        p = put32(p, (uint32_t)e->size);
        p = put32(p, (uint32_t)e->size);
    }
    return wr(w, d, (size_t)(p - d));
}

mc_status mc_zip_writer_add(struct mc_zip_writer *w, const char *name, const void *data, size_t n)
{
    mc_status st = mc_zip_writer_begin(w, name);
    if (st || (st = mc_zip_writer_write(w, data, n)))
        return st;
    return mc_zip_writer_end(w);
}

static mc_status write_central(struct mc_zip_writer *w, const struct mc_zip_entry_rec *e)
{
    bool z64 = e->size >= U32_MAX_ || e->offset >= U32_MAX_ || w->force_zip64;
    size_t name_len = strlen(e->name);
    uint8_t h[46 + 28], *p = h;
    p = put32(p, SIG_CENTRAL);
    p = put16(p, 0);   /* version made by */
    p = put16(p, z64 ? 45 : 0);
    p = put16(p, FLAGS);
    p = put16(p, 0);
    p = put32(p, 0);
    p = put32(p, e->crc);
    p = put32(p, z64 ? U32_MAX_ : (uint32_t)e->size);
    p = put32(p, z64 ? U32_MAX_ : (uint32_t)e->size);
    p = put16(p, (uint32_t)name_len);
    p = put16(p, z64 ? 28 : 0);
    p = put16(p, 0);   /* comment */
    p = put16(p, 0);   /* disk */
    p = put16(p, 0);   /* internal attributes */
    p = put32(p, 0);   /* external attributes */
    p = put32(p, z64 ? U32_MAX_ : (uint32_t)e->offset);
    mc_status st = wr(w, h, 46);
    if (st || (st = wr(w, e->name, name_len)) || !z64)
        return st;
    p = put16(h, EXTRA_ZIP64);
    p = put16(p, 24);
    p = put64(p, e->size);
    p = put64(p, e->size);
    p = put64(p, e->offset);
    return wr(w, h, 28);
}

static mc_status write_end(struct mc_zip_writer *w, uint64_t cd_start)
{
    uint64_t cd_size = w->pos - cd_start, eocd64 = w->pos, n = (uint64_t)w->n;
    uint8_t h[56 + 20 + 22], *p = h;
    p = put32(p, SIG_EOCD64);
    p = put64(p, 44);
    p = put16(p, 45);
    p = put16(p, 45);
    p = put32(p, 0);
    p = put32(p, 0);
    p = put64(p, n);
    p = put64(p, n);
    p = put64(p, cd_size);
    p = put64(p, cd_start);
    p = put32(p, SIG_LOCATOR64);
    p = put32(p, 0);
    p = put64(p, eocd64);
    p = put32(p, 1);
    p = put32(p, SIG_EOCD);
    p = put16(p, 0);
    p = put16(p, 0);
    bool z = w->force_zip64; /* then the classic record defers everything to the zip64 one */
    p = put16(p, z || n >= 0xffff ? 0xffff : (uint32_t)n);
    p = put16(p, z || n >= 0xffff ? 0xffff : (uint32_t)n);
    p = put32(p, z || cd_size >= U32_MAX_ ? U32_MAX_ : (uint32_t)cd_size);
    p = put32(p, z || cd_start >= U32_MAX_ ? U32_MAX_ : (uint32_t)cd_start);
    p = put16(p, 0);
    return wr(w, h, (size_t)(p - h));
}

static _Thread_local double last_sync_s;

double mc_zip_last_sync_seconds(void) { return last_sync_s; }

static void writer_free(struct mc_zip_writer *w)
{
    for (int64_t i = 0; i < w->n; i++)
        mc_free(w->e[i].name);
    mc_free(w->e);
    mc_free(w->path);
    mc_free(w->tmp);
    memset(w, 0, sizeof(*w));
}

mc_status mc_zip_writer_close(struct mc_zip_writer *w)
{
    MC_ASSERT(!w->open_entry);
    uint64_t cd_start = w->pos;
    mc_status st = MC_OK;
    for (int64_t i = 0; i < w->n && !st; i++)
        st = write_central(w, &w->e[i]);
    if (!st)
        st = write_end(w, cd_start);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!st && (fflush(w->f) || fsync(fileno(w->f))))
        st = mc_error(MC_ERR_IO, "cannot flush %s: %s", w->tmp, strerror(errno));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    last_sync_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (fclose(w->f) && !st)
        st = mc_error(MC_ERR_IO, "cannot close %s: %s", w->tmp, strerror(errno));
    w->f = NULL;
    if (!st && rename(w->tmp, w->path))
        st = mc_error(MC_ERR_IO, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
    if (st)
        remove(w->tmp);
    writer_free(w);
    return st;
}

mc_status mc_zip_writer_finish(struct mc_zip_writer *w, uint64_t *size)
{
    MC_ASSERT(!w->open_entry && w->stream);
    uint64_t cd_start = w->pos;
    mc_status st = MC_OK;
    for (int64_t i = 0; i < w->n && !st; i++)
        st = write_central(w, &w->e[i]);
    if (!st)
        st = write_end(w, cd_start);
    *size = w->pos;
    writer_free(w);
    return st;
}

void mc_zip_writer_abort(struct mc_zip_writer *w)
{
    if (w->stream) {
        writer_free(w);
        return;
    }
    if (w->f) {
        fclose(w->f);
        remove(w->tmp);
    }
    writer_free(w);
}

/* ---- reader ------------------------------------------------------------------------------- */
static mc_status bad(const struct mc_zip_reader *r, const char *what)
{
    return mc_error(MC_ERR_FORMAT, "%s: not a valid torch.save zip file: %s", r->path, what);
}

/* Finds the end records; sets the central directory's offset, size and entry count. */
static mc_status find_directory(const struct mc_zip_reader *r, uint64_t *cd_off, uint64_t *cd_size,
                                uint64_t *count)
{
    if (r->size < 22)
        return bad(r, "file shorter than a zip end record (truncated?)");
    size_t lo = r->size > 22 + 65535 ? r->size - 22 - 65535 : 0, at = r->size - 22;
    for (;; at--) {
        if (get32(r->map + at) == SIG_EOCD)
            break;
        if (at == lo)
            return bad(r, "no end-of-central-directory record (truncated or corrupted)");
    }
    const uint8_t *e = r->map + at;
    *count = get16(e + 10);
    *cd_size = get32(e + 12);
    *cd_off = get32(e + 16);
    if (at >= 20 && get32(r->map + at - 20) == SIG_LOCATOR64) {
        uint64_t z = get64(r->map + at - 20 + 8);
        /* z comes from the file: compare without adding to it, which could wrap */
        if (z > at || at - z < 56 || get32(r->map + z) != SIG_EOCD64)
            return bad(r, "zip64 end record locator points outside the file");
        *count = get64(r->map + z + 32);
        *cd_size = get64(r->map + z + 40);
        *cd_off = get64(r->map + z + 48);
    }
    if (*cd_off > r->size || *cd_size > r->size - *cd_off)
        return bad(r, "central directory outside the file (truncated?)");
    return MC_OK;
}

/* Reads the zip64 extra of a central entry for the fields that are 0xffffffff. */
static mc_status read_zip64_extra(const struct mc_zip_reader *r, const uint8_t *x, size_t xlen,
                                  uint64_t *usize, uint64_t *csize, uint64_t *off)
{
    while (xlen >= 4) {
        uint32_t id = get16(x), len = get16(x + 2);
        if (4 + (size_t)len > xlen)
            return bad(r, "central directory extra field overruns its entry");
        if (id == EXTRA_ZIP64) {
            const uint8_t *p = x + 4, *end = x + 4 + len;
            uint64_t *f[3] = {usize, csize, off};
            for (int k = 0; k < 3; k++)
                if (*f[k] == U32_MAX_) {
                    if (end - p < 8)
                        return bad(r, "short zip64 extra field");
                    *f[k] = get64(p);
                    p += 8;
                }
        }
        x += 4 + len;
        xlen -= 4 + len;
    }
    return MC_OK;
}

static mc_status read_entry(struct mc_zip_reader *r, const uint8_t **pp, const uint8_t *end, int64_t i)
{
    const uint8_t *p = *pp;
    if (end - p < 46 || get32(p) != SIG_CENTRAL)
        return bad(r, "corrupted central directory (bad entry signature)");
    uint32_t method = get16(p + 10), name_len = get16(p + 28), xlen = get16(p + 30), clen = get16(p + 32);
    uint64_t csize = get32(p + 20), usize = get32(p + 24), off = get32(p + 42);
    if ((size_t)(end - p) < 46 + (size_t)name_len + xlen + clen)
        return bad(r, "corrupted central directory (entry overruns it)");
    struct mc_zip_entry_rec *e = &r->e[i];
    e->crc = get32(p + 16);
    if (!(e->name = mc_alloc(name_len + 1)))
        return MC_ERR_NOMEM;
    memcpy(e->name, p + 46, name_len);
    e->name[name_len] = 0;
    mc_status st = read_zip64_extra(r, p + 46 + name_len, xlen, &usize, &csize, &off);
    if (st)
        return st;
    if (method != 0 || csize != usize)
        return mc_error(MC_ERR_FORMAT, "%s: entry %s is compressed (method %u); torch.save writes "
                        "stored entries only", r->path, e->name, method);
    e->size = usize;
    e->offset = off;
    if (off > r->size || r->size - off < 30 || get32(r->map + off) != SIG_LOCAL)
        return mc_error(MC_ERR_FORMAT, "%s: entry %s: no local header at offset %llu (corrupted "
                        "or truncated)", r->path, e->name, (unsigned long long)off);
    uint64_t data = off + 30 + get16(r->map + off + 26) + get16(r->map + off + 28);
    if (data > r->size || r->size - data < usize)
        return mc_error(MC_ERR_FORMAT, "%s: entry %s: its %llu bytes run past the end of the file "
                        "(truncated?)", r->path, e->name, (unsigned long long)usize);
    r->data_off[i] = data;
    *pp = p + 46 + name_len + xlen + clen;
    return MC_OK;
}

static mc_status parse_directory(struct mc_zip_reader *r);

mc_status mc_zip_reader_open(struct mc_zip_reader *r, const char *path)
{
    memset(r, 0, sizeof(*r));
    if (!(r->path = dup_str(path)))
        return MC_ERR_NOMEM;
    mc_status st = MC_OK;
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        st = mc_error(MC_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    r->size = (size_t)sb.st_size;
    if (r->size) {
        void *m = mmap(NULL, r->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            st = mc_error(MC_ERR_IO, "cannot mmap %s: %s", path, strerror(errno));
            goto out;
        }
        r->map = m;
    }
    st = parse_directory(r);
out:
    if (fd >= 0)
        close(fd);
    if (st)
        mc_zip_reader_close(r);
    return st;
}

mc_status mc_zip_reader_open_mem(struct mc_zip_reader *r, const char *what, const uint8_t *data,
                                 size_t size)
{
    memset(r, 0, sizeof(*r));
    if (!(r->path = dup_str(what)))
        return MC_ERR_NOMEM;
    r->map = data;
    r->size = size;
    r->borrowed = true;
    mc_status st = parse_directory(r);
    if (st)
        mc_zip_reader_close(r);
    return st;
}

/* The end records, the central directory and every local header of the mapped archive. */
static mc_status parse_directory(struct mc_zip_reader *r)
{
    mc_status st;
    uint64_t cd_off = 0, cd_size = 0, count = 0;
    if ((st = find_directory(r, &cd_off, &cd_size, &count)))
        return st;
    if (count > cd_size / 46 + 1)
        return bad(r, "entry count larger than the central directory can hold");
    r->e = mc_calloc((size_t)count + 1, sizeof(*r->e));
    r->data_off = mc_calloc((size_t)count + 1, sizeof(uint64_t));
    if (!r->e || !r->data_off)
        return MC_ERR_NOMEM;
    const uint8_t *p = r->map + cd_off, *end = p + cd_size;
    for (r->n = 0; r->n < (int64_t)count; r->n++)
        if ((st = read_entry(r, &p, end, r->n)))
            return st;
    return MC_OK;
}

void mc_zip_reader_close(struct mc_zip_reader *r)
{
    if (r->map && !r->borrowed)
        munmap((void *)r->map, r->size);
    for (int64_t i = 0; r->e && i <= r->n; i++) /* [n] may hold a half-read entry's name */
        mc_free(r->e[i].name);
    mc_free(r->e);
    mc_free(r->data_off);
    mc_free(r->path);
    memset(r, 0, sizeof(*r));
}

mc_status mc_zip_reader_find(const struct mc_zip_reader *r, const char *name, const uint8_t **data,
                             uint64_t *size)
{
    for (int64_t i = 0; i < r->n; i++) {
        if (strcmp(r->e[i].name, name))
            continue;
        const uint8_t *d = r->map + r->data_off[i];
        if (mc_crc32_update(0, d, (size_t)r->e[i].size) != r->e[i].crc)
            return mc_error(MC_ERR_FORMAT, "%s: entry %s fails its CRC-32 check (corrupted file)",
                            r->path, name);
        *data = d;
        *size = r->e[i].size;
        return MC_OK;
    }
    return mc_error(MC_ERR_FORMAT, "%s: no entry %s in the zip archive", r->path, name);
}
