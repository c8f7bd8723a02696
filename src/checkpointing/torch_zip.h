/* The zip container torch.save writes (PyTorchStreamWriter / PyTorchStreamReader in PyTorch's
 * caffe2/serialize/inline_container.cc, which uses miniz): stored (uncompressed) entries whose data
 * start at multiples of 64 bytes, data descriptors after each entry, a zip64 end record.
 * Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_TORCH_ZIP_H
#define MC_CHECKPOINTING_TORCH_ZIP_H

#include <stdio.h>

#include "megatron.h"

#define MC_ZIP_ALIGN 64

struct mc_zip_entry_rec {
    char *name;
    uint64_t offset; /* of the local header */
    uint64_t size;
    uint32_t crc;
};

/* Writes <path> through <path>.tmp: the file appears, complete and fsync'ed, only on close. */
struct mc_zip_writer {
    FILE *f;
    char *path, *tmp;
    uint64_t pos;
    uint64_t kicked; /* disk writes started up to here (write-behind) */
    struct mc_zip_entry_rec *e;
    int64_t n, cap;
    bool open_entry;
    bool force_zip64; /* zip64 sizes/offsets even for small entries (tests of the > 4 GiB path) */
    bool stream;      /* writing into the caller's open file (mc_zip_writer_open_stream) */
};

mc_status mc_zip_writer_open(struct mc_zip_writer *w, const char *path);
/* An archive written into the caller's open file `f` from its current position (offsets count
 * from there), as one item of a torch_dist .distcp file; `what` names the file in errors.
 * Finished by mc_zip_writer_finish, which leaves f open (no fsync: the caller's). */
mc_status mc_zip_writer_open_stream(struct mc_zip_writer *w, FILE *f, const char *what);
mc_status mc_zip_writer_finish(struct mc_zip_writer *w, uint64_t *size); /* size: the archive's bytes */
/* An entry written in pieces: begin, any number of writes, end. `name` is the full entry name. */
mc_status mc_zip_writer_begin(struct mc_zip_writer *w, const char *name);
mc_status mc_zip_writer_write(struct mc_zip_writer *w, const void *data, size_t n);
mc_status mc_zip_writer_end(struct mc_zip_writer *w);
mc_status mc_zip_writer_add(struct mc_zip_writer *w, const char *name, const void *data, size_t n);
/* Central directory, zip64 end records, fsync, rename to the final name. Frees w. */
mc_status mc_zip_writer_close(struct mc_zip_writer *w);
/* Seconds the last mc_zip_writer_close on this thread spent in its final flush + fsync (for
 * benchmarks: torch.save does not fsync). */
double mc_zip_last_sync_seconds(void);
/* Drops the temporary file (after a failure). Frees w. */
void mc_zip_writer_abort(struct mc_zip_writer *w);

/* A zip file mapped read-only; entry data point into the mapping. */
struct mc_zip_reader {
    char *path;
    const uint8_t *map;
    size_t size;
    struct mc_zip_entry_rec *e;
    int64_t n;
    uint64_t *data_off; /* [n] where each entry's bytes start */
    bool borrowed;      /* map is the caller's memory (mc_zip_reader_open_mem), not unmapped */
};
/* Maps the file, parses the end records and the central directory and checks every local
 * header; MC_ERR_FORMAT naming the file and what is wrong. */
mc_status mc_zip_reader_open(struct mc_zip_reader *r, const char *path);
/* The same over `size` bytes at `data` (borrowed: they must outlive the reader), e.g. a
 * torch.save blob inside a torch_dist .distcp file; `what` names it in errors. */
mc_status mc_zip_reader_open_mem(struct mc_zip_reader *r, const char *what, const uint8_t *data,
                                 size_t size);
void mc_zip_reader_close(struct mc_zip_reader *r);
/* Entry by full name; MC_ERR_FORMAT when absent. Checks the CRC-32 of the entry. */
mc_status mc_zip_reader_find(const struct mc_zip_reader *r, const char *name, const uint8_t **data,
                             uint64_t *size);

uint32_t mc_crc32_update(uint32_t crc, const void *data, size_t n);
/* The carry-less-multiplication CRC (crc32_clmul.c): whether this CPU has it, and the fold of
 * n bytes (n >= 64, a multiple of 16) into the running, not inverted, CRC register. */
bool mc_crc32_clmul_usable(void);
uint32_t mc_crc32_clmul(uint32_t crc, const uint8_t *p, size_t n);

#endif
