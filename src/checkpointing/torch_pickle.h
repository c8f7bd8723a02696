/* Python pickle (protocol 2) as torch.save writes it, and torch.load's restricted reading of it:
 * a tree of Python values (dict, OrderedDict, list, tuple, str, bytes, int, float, bool, None,
 * argparse.Namespace, torch dtypes, Megatron enums, numpy arrays, tensors over storages).
 * The reader runs no code: every GLOBAL must be one it knows, anything else is an error naming
 * it. Counterpart: torch/serialization.py (_save/_load) and torch/_utils.py
 * (_rebuild_tensor_v2). Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_TORCH_PICKLE_H
#define MC_CHECKPOINTING_TORCH_PICKLE_H

#include <stdio.h>

#include "megatron.h"

enum mc_pk_kind {
    MC_PK_NONE = 0, MC_PK_BOOL, MC_PK_INT, MC_PK_FLOAT, MC_PK_STR, MC_PK_BYTES,
    MC_PK_TUPLE, MC_PK_LIST,
    MC_PK_DICT, MC_PK_ODICT, MC_PK_NAMESPACE, /* items: key, value, key, value ... */
    MC_PK_GLOBAL,  /* a module attribute such as torch.float32: s = "torch float32" */
    MC_PK_ENUM,    /* s = "module Class"; items[0] = the value (Class(value)), or with b set the
                      member name (getattr(Class, 'name'), as Python 3.11 pickles enums) */
    MC_PK_STORAGE, MC_PK_TENSOR,
    MC_PK_NDARRAY, MC_PK_NPDTYPE,
    MC_PK_OBJECT,  /* an instance of a known class (the dataclasses of a torch.distributed.checkpoint
                      .metadata pickle): s = "module Class", items = its attributes as key/value
                      pairs (BUILD's dict); a __setstate__ tuple is kept as the pair "__state__" */
};

/* torch's storage class of a dtype ("FloatStorage"; torch.<mc_dtype_name> is its dtype). */
const char *mc_pk_dtype_storage(enum mc_dtype t);

#define MC_PK_MAX_DIM 8

struct mc_pk {
    enum mc_pk_kind kind;
    bool b;
    int64_t i;
    double f;
    char *s;                /* STR, BYTES (len bytes, NUL-terminated too), GLOBAL, ENUM, NPDTYPE */
    size_t len;
    struct mc_pk **items;   /* TUPLE, LIST, ENUM; DICT/ODICT/NAMESPACE as key/value pairs */
    int64_t n, cap;
    /* STORAGE: dtype, numel, data (borrowed: the zip mapping when read, the caller's memory
     * when written), key (assigned on save, "" until then) */
    enum mc_dtype dtype;
    int64_t numel;
    const void *data;
    char key[24];
    /* TENSOR: storage, offset (elements), shape and stride (elements); NDARRAY: shape, dtype
     * (NPDTYPE node), data (numel items). */
    struct mc_pk *storage;
    int64_t offset;
    int ndim;
    int64_t shape[MC_PK_MAX_DIM], stride[MC_PK_MAX_DIM];
    bool requires_grad;
};

/* Owns every node and string of a tree (an arena). */
typedef struct mc_pk_doc mc_pk_doc;
mc_status mc_pk_doc_init(mc_pk_doc **out);
void mc_pk_doc_free(mc_pk_doc *d);
/* n zeroed bytes (16-aligned) that live as long as the doc: the data of a storage built for a
 * save (a 16-bit copy of fp32 values); NULL on allocation failure. */
void *mc_pk_doc_alloc(mc_pk_doc *d, size_t n);

/* ---- building (NULL on allocation failure, which sets the last error) ---------------------- */
struct mc_pk *mc_pk_none(mc_pk_doc *d);
struct mc_pk *mc_pk_bool(mc_pk_doc *d, bool v);
struct mc_pk *mc_pk_int(mc_pk_doc *d, int64_t v);
struct mc_pk *mc_pk_float(mc_pk_doc *d, double v);
struct mc_pk *mc_pk_str(mc_pk_doc *d, const char *s);
struct mc_pk *mc_pk_bytes(mc_pk_doc *d, const void *p, size_t n);
struct mc_pk *mc_pk_new(mc_pk_doc *d, enum mc_pk_kind kind); /* containers */
struct mc_pk *mc_pk_global(mc_pk_doc *d, const char *module, const char *name);
struct mc_pk *mc_pk_enum(mc_pk_doc *d, const char *module, const char *cls, struct mc_pk *value);
struct mc_pk *mc_pk_enum_member(mc_pk_doc *d, const char *module, const char *cls, const char *name);
/* An instance of module.cls (MC_PK_OBJECT): its attributes are set with mc_pk_set; pickled as
 * cls.__new__(cls) + BUILD of that dict, or of the value of a single "__state__" key. */
struct mc_pk *mc_pk_object(mc_pk_doc *d, const char *module, const char *cls);
/* A storage over `data` (borrowed) and a tensor viewing it. */
struct mc_pk *mc_pk_storage(mc_pk_doc *d, enum mc_dtype t, int64_t numel, const void *data);
struct mc_pk *mc_pk_tensor(mc_pk_doc *d, struct mc_pk *storage, int64_t offset, int ndim,
                           const int64_t *shape, const int64_t *stride /* NULL = contiguous */);
/* A numpy array (MC_PK_NDARRAY) of dtype `dtype` in numpy's form with the byte order first
 * ("<u4"), over a copy of `nbytes` bytes of row-major data. */
struct mc_pk *mc_pk_ndarray(mc_pk_doc *d, const char *dtype, int ndim, const int64_t *shape,
                            const void *data, size_t nbytes);
/* Appends to a TUPLE/LIST, or a key/value pair to a DICT/ODICT/NAMESPACE. */
mc_status mc_pk_append(mc_pk_doc *d, struct mc_pk *c, struct mc_pk *item);
mc_status mc_pk_set(mc_pk_doc *d, struct mc_pk *map, const char *key, struct mc_pk *value);

/* ---- reading ------------------------------------------------------------------------------- */
/* Value of a str key in a DICT/ODICT/NAMESPACE, or NULL. */
struct mc_pk *mc_pk_get(const struct mc_pk *map, const char *key);
bool mc_pk_is_map(const struct mc_pk *v);
/* An int, float or bool as a double in *out (Python's numbers); false for anything else. */
bool mc_pk_number(const struct mc_pk *v, double *out);
int64_t mc_pk_tensor_numel(const struct mc_pk *t);
bool mc_pk_tensor_contiguous(const struct mc_pk *t);

/* The storage a BINPERSID names: the loader returns its bytes (numel * itemsize of dtype). */
typedef mc_status (*mc_pk_storage_fn)(void *ctx, const char *key, enum mc_dtype t,
                                      int64_t numel, const void **data);

/* Unpickles `n` bytes. `what` names the source in error messages. */
mc_status mc_pk_load(mc_pk_doc *d, const uint8_t *buf, size_t n, const char *what,
                     mc_pk_storage_fn storage, void *ctx, struct mc_pk **out);
/* Pickles `v` (protocol 2) into a buffer owned by the doc; storages get keys "0", "1", ... in
 * first-use order, listed in *storages (also owned by the doc). */
mc_status mc_pk_dump(mc_pk_doc *d, const struct mc_pk *v, uint8_t **buf, size_t *n,
                     struct mc_pk ***storages, int64_t *num_storages);

/* ---- torch.save / torch.load files ---------------------------------------------------------- */
/* torch.save(v, path) as torch 1.13 writes it (archive folder named after the file's base name),
 * through path.tmp, fsync'ed and renamed. */
mc_status mc_torch_save(mc_pk_doc *d, const struct mc_pk *v, const char *path);
/* The same with every entry in zip64 form (as files past 4 GiB are written), for tests. */
mc_status mc_torch_save_ex(mc_pk_doc *d, const struct mc_pk *v, const char *path, bool force_zip64);
/* torch.save(v, stream) into an open file at its current position, as torch.distributed.checkpoint
 * writes each item of a .distcp file: archive folder `archive`, offsets relative to the blob's
 * start, no fsync (the caller's). *len: the bytes written. `what` names the file in errors. */
mc_status mc_torch_save_stream(mc_pk_doc *d, const struct mc_pk *v, FILE *f, const char *what,
                               uint64_t *len);
/* torch.load(path): the tree's storages point into the file mapping kept by the doc. */
mc_status mc_torch_load(mc_pk_doc *d, const char *path, struct mc_pk **out);
/* torch.load of a torch.save archive held in memory (borrowed: it must outlive the doc), as
 * torch_dist's .distcp files hold one per tensor chunk; `what` names it in errors. */
mc_status mc_torch_load_mem(mc_pk_doc *d, const char *what, const uint8_t *data, size_t size,
                            struct mc_pk **out);

#endif
