/* Pickle protocol 2: the writer torch.save uses (Python's Pickler with a persistent_id hook for
 * storages) and a reader in the spirit of torch.load(weights_only=True): a stack machine over
 * the opcodes Python's pickler emits for the values Megatron checkpoints hold, with a memo, and
 * a fixed list of GLOBALs it knows how to build (no code is run). Counterparts: Python's
 * pickle.py / pickletools.py, torch/serialization.py, torch/_utils.py (_rebuild_tensor_v2). */
#include "checkpointing/torch_pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpointing/torch_zip.h"

/* ---- dtypes ---------------------------------------------------------------------------------- */
/* torch's legacy storage classes, the names a pickle's persistent ids use (torch/storage.py). */
static const char *const storages[MC_DTYPE_COUNT] = {
    [MC_DTYPE_F32] = "FloatStorage", [MC_DTYPE_F64] = "DoubleStorage",
    [MC_DTYPE_F16] = "HalfStorage",  [MC_DTYPE_BF16] = "BFloat16Storage",
    [MC_DTYPE_I64] = "LongStorage",  [MC_DTYPE_I32] = "IntStorage",
    [MC_DTYPE_I16] = "ShortStorage", [MC_DTYPE_I8] = "CharStorage",
    [MC_DTYPE_U8] = "ByteStorage",   [MC_DTYPE_BOOL] = "BoolStorage",
};
const char *mc_pk_dtype_storage(enum mc_dtype t) { return storages[t]; }

/* ---- the arena ------------------------------------------------------------------------------- */
struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};
struct zip_node {
    struct mc_zip_reader *z;
    struct zip_node *next;
};
struct mc_pk_doc {
    struct block *blocks;
    struct zip_node *zips; /* every archive loaded into the doc, kept mapped while the tree points
                              into them (a torch_dist load reads several into one doc) */
};

mc_status mc_pk_doc_init(mc_pk_doc **out)
{
    *out = mc_calloc(1, sizeof(**out));
    return *out ? MC_OK : MC_ERR_NOMEM;
}

void mc_pk_doc_free(mc_pk_doc *d)
{
    if (!d)
        return;
    for (struct zip_node *n = d->zips, *nx; n; n = nx) {
        nx = n->next;
        mc_zip_reader_close(n->z);
        mc_free(n->z);
        mc_free(n);
    }
    for (struct block *b = d->blocks, *nx; b; b = nx) {
        nx = b->next;
        mc_free(b);
    }
    mc_free(d);
}

mc_status mc_pk_doc_keep_zip(mc_pk_doc *d, struct mc_zip_reader *z);
mc_status mc_pk_doc_keep_zip(mc_pk_doc *d, struct mc_zip_reader *z)
{
    struct zip_node *n = mc_alloc(sizeof(*n));
    if (!n)
        return MC_ERR_NOMEM;
    n->z = z, n->next = d->zips;
    d->zips = n;
    return MC_OK;
}

static void *arena(mc_pk_doc *d, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (!(b = mc_alloc(sizeof(*b) + cap)))
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = d->blocks;
        d->blocks = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void *mc_pk_doc_alloc(mc_pk_doc *d, size_t n)
{
    void *p = arena(d, n);
    if (!p)
        mc_error(MC_ERR_NOMEM, "out of memory for a %zu-byte checkpoint tensor", n);
    return p;
}

static char *arena_str(mc_pk_doc *d, const char *s, size_t n)
{
    char *p = arena(d, n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* ---- building -------------------------------------------------------------------------------- */
struct mc_pk *mc_pk_new(mc_pk_doc *d, enum mc_pk_kind kind)
{
    struct mc_pk *v = arena(d, sizeof(*v));
    if (v)
        v->kind = kind;
    return v;
}
struct mc_pk *mc_pk_none(mc_pk_doc *d) { return mc_pk_new(d, MC_PK_NONE); }
struct mc_pk *mc_pk_bool(mc_pk_doc *d, bool x)
{
    struct mc_pk *v = mc_pk_new(d, MC_PK_BOOL);
    if (v) v->b = x;
    return v;
}
struct mc_pk *mc_pk_int(mc_pk_doc *d, int64_t x)
{
    struct mc_pk *v = mc_pk_new(d, MC_PK_INT);
    if (v) v->i = x;
    return v;
}
struct mc_pk *mc_pk_float(mc_pk_doc *d, double x)
{
    struct mc_pk *v = mc_pk_new(d, MC_PK_FLOAT);
    if (v) v->f = x;
    return v;
}
static struct mc_pk *text(mc_pk_doc *d, enum mc_pk_kind k, const char *s, size_t n)
{
    struct mc_pk *v = mc_pk_new(d, k);
    if (v && !(v->s = arena_str(d, s, n)))
        return NULL;
    if (v)
        v->len = n;
    return v;
}
struct mc_pk *mc_pk_str(mc_pk_doc *d, const char *s) { return text(d, MC_PK_STR, s, strlen(s)); }
struct mc_pk *mc_pk_bytes(mc_pk_doc *d, const void *p, size_t n) { return text(d, MC_PK_BYTES, p, n); }
struct mc_pk *mc_pk_global(mc_pk_doc *d, const char *module, const char *name)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf), "%s %s", module, name);
    return text(d, MC_PK_GLOBAL, buf, (size_t)n);
}
struct mc_pk *mc_pk_enum(mc_pk_doc *d, const char *module, const char *cls, struct mc_pk *value)
{
    struct mc_pk *v = mc_pk_global(d, module, cls);
    if (!v || !value || mc_pk_append(d, v, value))
        return NULL;
    v->kind = MC_PK_ENUM;
    return v;
}
struct mc_pk *mc_pk_object(mc_pk_doc *d, const char *module, const char *cls)
{
    struct mc_pk *v = mc_pk_global(d, module, cls);
    if (v)
        v->kind = MC_PK_OBJECT;
    return v;
}
struct mc_pk *mc_pk_enum_member(mc_pk_doc *d, const char *module, const char *cls, const char *name)
{
    struct mc_pk *v = mc_pk_enum(d, module, cls, mc_pk_str(d, name));
    if (v)
        v->b = true;
    return v;
}

struct mc_pk *mc_pk_storage(mc_pk_doc *d, enum mc_dtype t, int64_t numel, const void *data)
{
    struct mc_pk *v = mc_pk_new(d, MC_PK_STORAGE);
    if (v) {
        v->dtype = t;
        v->numel = numel;
        v->data = data;
    }
    return v;
}
struct mc_pk *mc_pk_ndarray(mc_pk_doc *d, const char *dtype, int ndim, const int64_t *shape,
                            const void *data, size_t nbytes)
{
    MC_ASSERT(ndim >= 0 && ndim <= MC_PK_MAX_DIM && strchr("<>|=", dtype[0]));
    struct mc_pk *v = text(d, MC_PK_NDARRAY, dtype, strlen(dtype));
    void *copy = v ? arena(d, nbytes + 1) : NULL;
    if (!copy)
        return NULL;
    memcpy(copy, data, nbytes);
    v->ndim = ndim;
    memcpy(v->shape, shape, (size_t)ndim * sizeof(*shape));
    v->data = copy;
    v->numel = (int64_t)nbytes;
    return v;
}
struct mc_pk *mc_pk_tensor(mc_pk_doc *d, struct mc_pk *storage, int64_t offset, int ndim,
                           const int64_t *shape, const int64_t *stride)
{
    MC_ASSERT(ndim >= 0 && ndim <= MC_PK_MAX_DIM);
    struct mc_pk *v = mc_pk_new(d, MC_PK_TENSOR);
    if (!v || !storage)
        return NULL;
    v->storage = storage;
    v->dtype = storage->dtype;
    v->offset = offset;
    v->ndim = ndim;
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        v->shape[k] = shape[k];
        v->stride[k] = stride ? stride[k] : s;
        if (!stride) /* contiguous strides only when asked: a given shape may be forged */
            s *= shape[k];
    }
    return v;
}

mc_status mc_pk_append(mc_pk_doc *d, struct mc_pk *c, struct mc_pk *item)
{
    if (!item)
        return MC_ERR_NOMEM;
    if (c->n == c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 8;
        struct mc_pk **it = arena(d, (size_t)cap * sizeof(*it));
        if (!it)
            return MC_ERR_NOMEM;
        if (c->n)
            memcpy(it, c->items, (size_t)c->n * sizeof(*it));
        c->items = it;
        c->cap = cap;
    }
    c->items[c->n++] = item;
    return MC_OK;
}

mc_status mc_pk_set(mc_pk_doc *d, struct mc_pk *map, const char *key, struct mc_pk *value)
{
    MC_ASSERT(mc_pk_is_map(map) || map->kind == MC_PK_OBJECT); /* an object's attributes too */
    struct mc_pk *k = mc_pk_str(d, key);
    mc_status st = mc_pk_append(d, map, k);
    return st ? st : mc_pk_append(d, map, value);
}

bool mc_pk_is_map(const struct mc_pk *v)
{
    return v && (v->kind == MC_PK_DICT || v->kind == MC_PK_ODICT || v->kind == MC_PK_NAMESPACE);
}

bool mc_pk_number(const struct mc_pk *v, double *out)
{
    if (v && v->kind == MC_PK_INT)
        *out = (double)v->i;
    else if (v && v->kind == MC_PK_FLOAT)
        *out = v->f;
    else if (v && v->kind == MC_PK_BOOL)
        *out = v->b;
    else
        return false;
    return true;
}

struct mc_pk *mc_pk_get(const struct mc_pk *map, const char *key)
{
    if (!mc_pk_is_map(map) && !(map && map->kind == MC_PK_OBJECT))
        return NULL;
    for (int64_t i = 0; i + 1 < map->n; i += 2)
        if (map->items[i]->kind == MC_PK_STR && !strcmp(map->items[i]->s, key))
            return map->items[i + 1];
    return NULL;
}

int64_t mc_pk_tensor_numel(const struct mc_pk *t)
{
    int64_t n = 1;
    for (int k = 0; k < t->ndim; k++)
        n *= t->shape[k];
    return n;
}

bool mc_pk_tensor_contiguous(const struct mc_pk *t)
{
    int64_t s = 1;
    for (int k = t->ndim - 1; k >= 0; k--) {
        if (t->shape[k] != 1 && t->stride[k] != s)
            return false;
        s *= t->shape[k];
    }
    return true;
}

/* ---- the writer ------------------------------------------------------------------------------ */
struct out {
    mc_pk_doc *d;
    uint8_t *buf;
    size_t n, cap;
    struct mc_pk **st; /* storages in first-use order */
    int64_t nst, capst;
};

static mc_status emit(struct out *o, const void *p, size_t n)
{
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->n + n)
            cap *= 2;
        uint8_t *b = mc_alloc(cap);
        if (!b)
            return MC_ERR_NOMEM;
        if (o->n)
            memcpy(b, o->buf, o->n);
        mc_free(o->buf);
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->n, p, n);
    o->n += n;
    return MC_OK;
}
static mc_status op(struct out *o, uint8_t c) { return emit(o, &c, 1); }

static mc_status emit_int(struct out *o, int64_t v)
{
    uint8_t b[10];
    if (v >= 0 && v < 256) {
        b[0] = 'K';
        b[1] = (uint8_t)v;
        return emit(o, b, 2);
    }
    if (v >= 0 && v < 65536) {
        b[0] = 'M';
        b[1] = v & 0xff;
        b[2] = (uint8_t)(v >> 8);
        return emit(o, b, 3);
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
        uint32_t u = (uint32_t)(int32_t)v;
        b[0] = 'J';
        for (int k = 0; k < 4; k++)
            b[1 + k] = (uint8_t)(u >> (8 * k));
        return emit(o, b, 5);
    }
    /* LONG1: little-endian two's complement, as few bytes as keep the sign. */
    uint64_t u = (uint64_t)v;
    int nb = 8;
    while (nb > 1) {
        uint8_t top = (uint8_t)(u >> (8 * (nb - 1))), next = (uint8_t)(u >> (8 * (nb - 2)));
        if ((top == 0 && !(next & 0x80)) || (top == 0xff && (next & 0x80)))
            nb--;
        else
            break;
    }
    b[0] = 0x8a;
    b[1] = (uint8_t)nb;
    for (int k = 0; k < nb; k++)
        b[2 + k] = (uint8_t)(u >> (8 * k));
    return emit(o, b, (size_t)(2 + nb));
}

static mc_status emit_float(struct out *o, double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    uint8_t b[9] = {'G'};
    for (int k = 0; k < 8; k++)
        b[1 + k] = (uint8_t)(u >> (8 * (7 - k)));
    return emit(o, b, 9);
}

static mc_status emit_str(struct out *o, const char *s, size_t n)
{
    uint8_t b[5] = {'X', (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    mc_status st = emit(o, b, 5);
    return st ? st : emit(o, s, n);
}

/* GLOBAL 'module\nname\n' from "module name". */
static mc_status emit_global(struct out *o, const char *modname)
{
    const char *sp = strchr(modname, ' ');
    MC_ASSERT(sp);
    mc_status st = op(o, 'c');
    if (st || (st = emit(o, modname, (size_t)(sp - modname))) || (st = op(o, '\n')))
        return st;
    if ((st = emit(o, sp + 1, strlen(sp + 1))))
        return st;
    return op(o, '\n');
}

/* Protocol 2 has no bytes opcode: Python writes _codecs.encode(<latin-1 text>, 'latin1'). */
static mc_status emit_bytes(struct out *o, const uint8_t *p, size_t n)
{
    uint8_t *u = mc_alloc(2 * n + 1);
    if (!u)
        return MC_ERR_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0x80) {
            u[m++] = p[i];
        } else {
            u[m++] = (uint8_t)(0xc0 | (p[i] >> 6));
            u[m++] = (uint8_t)(0x80 | (p[i] & 0x3f));
        }
    }
    mc_status st = emit_global(o, "_codecs encode");
    if (!st)
        st = emit_str(o, (const char *)u, m);
    mc_free(u);
    if (st || (st = emit_str(o, "latin1", 6)) || (st = op(o, 0x86)))
        return st;
    return op(o, 'R');
}

static mc_status dump(struct out *o, const struct mc_pk *v);

static mc_status dump_pairs(struct out *o, const struct mc_pk *v)
{
    if (!v->n)
        return MC_OK;
    mc_status st = op(o, '(');
    for (int64_t i = 0; i < v->n && !st; i++)
        st = dump(o, v->items[i]);
    return st ? st : op(o, 'u');
}

static mc_status dump_tuple(struct out *o, const struct mc_pk *v)
{
    static const uint8_t small[] = {')', 0x85, 0x86, 0x87};
    mc_status st = MC_OK;
    if (v->n > 3)
        st = op(o, '(');
    for (int64_t i = 0; i < v->n && !st; i++)
        st = dump(o, v->items[i]);
    return st ? st : op(o, v->n > 3 ? 't' : small[v->n]);
}

static mc_status dump_int_tuple(struct out *o, int n, const int64_t *x)
{
    static const uint8_t small[] = {')', 0x85, 0x86, 0x87};
    mc_status st = MC_OK;
    if (n > 3)
        st = op(o, '(');
    for (int i = 0; i < n && !st; i++)
        st = emit_int(o, x[i]);
    return st ? st : op(o, n > 3 ? 't' : small[n]);
}

/* _rebuild_tensor_v2(persistent storage, offset, size, stride, requires_grad, OrderedDict()) */
static mc_status dump_tensor(struct out *o, const struct mc_pk *t)
{
    struct mc_pk *s = t->storage;
    if (!s->key[0]) {
        if (o->nst == o->capst) {
            int64_t cap = o->capst ? 2 * o->capst : 64;
            struct mc_pk **a = arena(o->d, (size_t)cap * sizeof(*a));
            if (!a)
                return MC_ERR_NOMEM;
            if (o->nst)
                memcpy(a, o->st, (size_t)o->nst * sizeof(*a));
            o->st = a;
            o->capst = cap;
        }
        snprintf(s->key, sizeof(s->key), "%lld", (long long)o->nst);
        o->st[o->nst++] = s;
    }
    char cls[64];
    snprintf(cls, sizeof(cls), "torch %s", storages[s->dtype]);
    mc_status st = emit_global(o, "torch._utils _rebuild_tensor_v2");
    if (st || (st = op(o, '(')) || (st = op(o, '(')) || (st = emit_str(o, "storage", 7)) ||
        (st = emit_global(o, cls)) || (st = emit_str(o, s->key, strlen(s->key))) ||
        (st = emit_str(o, "cpu", 3)) || (st = emit_int(o, s->numel)) || (st = op(o, 't')) ||
        (st = op(o, 'Q')) || (st = emit_int(o, t->offset)) ||
        (st = dump_int_tuple(o, t->ndim, t->shape)) || (st = dump_int_tuple(o, t->ndim, t->stride)) ||
        (st = op(o, t->requires_grad ? 0x88 : 0x89)) || (st = emit_global(o, "collections OrderedDict")) ||
        (st = op(o, ')')) || (st = op(o, 'R')) || (st = op(o, 't')))
        return st;
    return op(o, 'R');
}

/* numpy's ndarray.__reduce__ at protocol 2, as numpy 1.x writes it (numpy.core paths, which
 * numpy 2 still loads; numpy 2's own numpy._core paths do not load in numpy 1.x):
 * _reconstruct(ndarray, (0,), b'b') then BUILD (1, shape, dtype, False, raw bytes), the dtype
 * being dtype(type, False, True) with BUILD (3, byteorder, None, None, None, -1, -1, 0). */
static mc_status dump_ndarray(struct out *o, const struct mc_pk *v)
{
    static const int64_t zero = 0;
    char byteorder[2] = {v->s[0], 0};
    mc_status st;
    if ((st = emit_global(o, "numpy.core.multiarray _reconstruct")) ||
        (st = emit_global(o, "numpy ndarray")) || (st = dump_int_tuple(o, 1, &zero)) ||
        (st = emit_bytes(o, (const uint8_t *)"b", 1)) || (st = op(o, 0x87)) || (st = op(o, 'R')) ||
        (st = op(o, '(')) || (st = emit_int(o, 1)) || (st = dump_int_tuple(o, v->ndim, v->shape)) ||
        (st = emit_global(o, "numpy dtype")) || (st = emit_str(o, v->s + 1, strlen(v->s + 1))) ||
        (st = op(o, 0x89)) || (st = op(o, 0x88)) || (st = op(o, 0x87)) || (st = op(o, 'R')) ||
        (st = op(o, '(')) || (st = emit_int(o, 3)) || (st = emit_str(o, byteorder, 1)) ||
        (st = op(o, 'N')) || (st = op(o, 'N')) || (st = op(o, 'N')) || (st = emit_int(o, -1)) ||
        (st = emit_int(o, -1)) || (st = emit_int(o, 0)) || (st = op(o, 't')) || (st = op(o, 'b')) ||
        (st = op(o, 0x89)) || (st = emit_bytes(o, v->data, (size_t)v->numel)) || (st = op(o, 't')))
        return st;
    return op(o, 'b');
}

static mc_status dump(struct out *o, const struct mc_pk *v)
{
    mc_status st;
    switch (v->kind) {
    case MC_PK_NONE: return op(o, 'N');
    case MC_PK_BOOL: return op(o, v->b ? 0x88 : 0x89);
    case MC_PK_INT: return emit_int(o, v->i);
    case MC_PK_FLOAT: return emit_float(o, v->f);
    case MC_PK_STR: return emit_str(o, v->s, v->len);
    case MC_PK_BYTES: return emit_bytes(o, (const uint8_t *)v->s, v->len);
    case MC_PK_TUPLE: return dump_tuple(o, v);
    case MC_PK_LIST:
        if ((st = op(o, ']')) || !v->n || (st = op(o, '(')))
            return st;
        for (int64_t i = 0; i < v->n; i++)
            if ((st = dump(o, v->items[i])))
                return st;
        return op(o, 'e');
    case MC_PK_DICT:
        return (st = op(o, '}')) ? st : dump_pairs(o, v);
    case MC_PK_ODICT:
        if ((st = emit_global(o, "collections OrderedDict")) || (st = op(o, ')')) || (st = op(o, 'R')))
            return st;
        return dump_pairs(o, v);
    case MC_PK_NAMESPACE:
        if ((st = emit_global(o, "argparse Namespace")) || (st = op(o, ')')) || (st = op(o, 0x81)) ||
            (st = op(o, '}')) || (st = dump_pairs(o, v)))
            return st;
        return op(o, 'b');
    case MC_PK_GLOBAL: return emit_global(o, v->s);
    case MC_PK_OBJECT: /* cls.__new__(cls), then BUILD with its __dict__ or its "__state__" value */
        if ((st = emit_global(o, v->s)) || (st = op(o, ')')) || (st = op(o, 0x81)))
            return st;
        if (v->n == 2 && v->items[0]->kind == MC_PK_STR && !strcmp(v->items[0]->s, "__state__"))
            st = dump(o, v->items[1]);
        else if (!(st = op(o, '}')))
            st = dump_pairs(o, v);
        return st ? st : op(o, 'b');
    case MC_PK_ENUM: /* getattr(Class, 'name') as Python 3.11 pickles members, or Class(value) */
        if (v->b && (st = emit_global(o, "__builtin__ getattr")))
            return st;
        if ((st = emit_global(o, v->s)) || (st = dump(o, v->items[0])) || (st = op(o, v->b ? 0x86 : 0x85)))
            return st;
        return op(o, 'R');
    case MC_PK_TENSOR: return dump_tensor(o, v);
    case MC_PK_NDARRAY: return dump_ndarray(o, v);
    default:
        return mc_error(MC_ERR_UNSUPPORTED, "pickling a value of kind %d (storage/numpy objects "
                        "outside a tensor) is not implemented", (int)v->kind);
    }
}

mc_status mc_pk_dump(mc_pk_doc *d, const struct mc_pk *v, uint8_t **buf, size_t *n,
                     struct mc_pk ***storages, int64_t *num_storages)
{
    struct out o = {.d = d};
    static const uint8_t proto[2] = {0x80, 2};
    mc_status st = emit(&o, proto, 2);
    if (st || (st = dump(&o, v)) || (st = op(&o, '.')))
        goto out;
    if (!(*buf = arena(d, o.n))) {
        st = MC_ERR_NOMEM;
        goto out;
    }
    memcpy(*buf, o.buf, o.n);
    *n = o.n;
    *storages = o.st;
    *num_storages = o.nst;
out:
    mc_free(o.buf);
    return st;
}

/* ---- the reader ------------------------------------------------------------------------------ */
struct in {
    mc_pk_doc *d;
    const uint8_t *p, *end, *start;
    const char *what;
    struct mc_pk **stack;
    int64_t sp, scap;
    int64_t *marks;
    int64_t nm, mcap;
    struct mc_pk **memo;
    int64_t nmemo, nmemo_next;
    mc_pk_storage_fn storage;
    void *ctx;
    struct mc_pk *storages; /* LIST of loaded storages, one per key */
};

static mc_status corrupt(const struct in *r, const char *why)
{
    return mc_error(MC_ERR_FORMAT, "%s: bad pickle at byte %lld: %s", r->what,
                    (long long)(r->p - r->start), why);
}

static mc_status need(struct in *r, size_t n)
{
    return (size_t)(r->end - r->p) < n ? corrupt(r, "data ends inside an opcode (truncated)") : MC_OK;
}

static mc_status push(struct in *r, struct mc_pk *v)
{
    if (!v)
        return MC_ERR_NOMEM;
    if (r->sp == r->scap) {
        int64_t cap = r->scap ? 2 * r->scap : 64;
        struct mc_pk **s = mc_alloc((size_t)cap * sizeof(*s));
        if (!s)
            return MC_ERR_NOMEM;
        if (r->sp)
            memcpy(s, r->stack, (size_t)r->sp * sizeof(*s));
        mc_free(r->stack);
        r->stack = s;
        r->scap = cap;
    }
    r->stack[r->sp++] = v;
    return MC_OK;
}

static mc_status pop(struct in *r, struct mc_pk **v)
{
    int64_t floor = r->nm ? r->marks[r->nm - 1] : 0;
    if (r->sp <= floor)
        return corrupt(r, "stack underflow");
    *v = r->stack[--r->sp];
    return MC_OK;
}

static mc_status mark(struct in *r)
{
    if (r->nm == r->mcap) {
        int64_t cap = r->mcap ? 2 * r->mcap : 16;
        int64_t *m = mc_alloc((size_t)cap * sizeof(*m));
        if (!m)
            return MC_ERR_NOMEM;
        if (r->nm)
            memcpy(m, r->marks, (size_t)r->nm * sizeof(*m));
        mc_free(r->marks);
        r->marks = m;
        r->mcap = cap;
    }
    r->marks[r->nm++] = r->sp;
    return MC_OK;
}

/* Items since the last MARK: [*first, sp). Pops the mark. */
static mc_status pop_mark(struct in *r, int64_t *first)
{
    if (!r->nm)
        return corrupt(r, "no MARK for a MARK-delimited opcode");
    *first = r->marks[--r->nm];
    return MC_OK;
}

static mc_status memo_put(struct in *r, uint64_t idx)
{
    if (!r->sp)
        return corrupt(r, "memo put on an empty stack");
    /* a pickler numbers its memo 0, 1, 2, ... with at least one opcode byte each, so no index
     * reaches the pickle's length; a larger one would size the memo table from a forged number */
    if (idx >= (uint64_t)(r->end - r->start) || idx > (uint64_t)1 << 30)
        return corrupt(r, "memo index out of range (larger than the pickle)");
    if ((int64_t)idx >= r->nmemo) {
        int64_t n = (int64_t)idx * 2 + 16;
        struct mc_pk **m = mc_calloc((size_t)n, sizeof(*m));
        if (!m)
            return MC_ERR_NOMEM;
        if (r->nmemo)
            memcpy(m, r->memo, (size_t)r->nmemo * sizeof(*m));
        mc_free(r->memo);
        r->memo = m;
        r->nmemo = n;
    }
    r->memo[idx] = r->stack[r->sp - 1];
    return MC_OK;
}

static mc_status memo_get(struct in *r, uint64_t idx)
{
    if ((int64_t)idx >= r->nmemo || !r->memo[idx])
        return corrupt(r, "memo get of an unset index");
    return push(r, r->memo[idx]);
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

/* The GLOBALs torch.load may meet in a Megatron checkpoint. Anything else is refused by name. */
static const char *const known_globals[] = {
    "torch._utils _rebuild_tensor_v2", "torch._utils _rebuild_parameter",
    "collections OrderedDict", "argparse Namespace", "_codecs encode",
    "numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype",
    /* torch 2.x / numpy 2: a tensor with Python attributes (Megatron's fp32 main params carry
     * tensor_model_parallel etc.), numpy 2's module name */
    "torch._tensor _rebuild_from_type_v2", "torch Tensor", "numpy._core.multiarray _reconstruct",
    "megatron.core.enums ModelType", "megatron.core.transformer.enums AttnBackend",
    "megatron.core.transformer.enums AttnMaskType", "megatron.core.transformer.enums AttnType",
    "megatron.core.rerun_state_machine RerunMode", "megatron.core.rerun_state_machine RerunState",
    "megatron.core.rerun_state_machine RerunDiagnostic",
    "__builtin__ getattr", "builtins getattr", /* Enum members by name (Python >= 3.11) */
    "_io BytesIO", /* Transformer Engine's serialized _extra_state (fp8 metadata) */
    /* torch_dist checkpoints: DCP's .metadata (dist_checkpoint.c) */
    "torch Size", "torch.serialization _get_layout", "pathlib PosixPath",
    "torch.distributed.checkpoint.metadata _MEM_FORMAT_ENCODING",
    "torch.distributed.checkpoint.planner WriteItemType",
    NULL};

/* Classes whose instances are rebuilt as MC_PK_OBJECT (NEWOBJ + BUILD of plain attributes). */
static const char *const object_classes[] = {
    "torch.distributed.checkpoint.metadata Metadata",
    "torch.distributed.checkpoint.metadata TensorStorageMetadata",
    "torch.distributed.checkpoint.metadata BytesStorageMetadata",
    "torch.distributed.checkpoint.metadata ChunkStorageMetadata",
    "torch.distributed.checkpoint.metadata TensorProperties",
    "torch.distributed.checkpoint.metadata MetadataIndex",
    "torch.distributed.checkpoint.metadata StorageMeta",
    "torch.distributed.checkpoint.filesystem _StorageInfo",
    "torch.distributed.checkpoint.planner WriteItem",
    "torch.distributed.checkpoint.planner TensorWriteData",
    "megatron.core.dist_checkpointing.strategies.torch MCoreSavePlan",
    NULL};

static bool is_object_class(const char *full)
{
    for (int k = 0; object_classes[k]; k++)
        if (!strcmp(full, object_classes[k]))
            return true;
    return false;
}

static mc_status global(struct in *r, const char *mod, const char *name)
{
    char full[256];
    snprintf(full, sizeof(full), "%s %s", mod, name);
    bool ok = false;
    for (int k = 0; known_globals[k] && !ok; k++)
        ok = !strcmp(full, known_globals[k]);
    ok = ok || is_object_class(full);
    if (!strcmp(mod, "torch")) /* dtypes and storage classes */
        for (int t = 0; t < MC_DTYPE_COUNT && !ok; t++)
            ok = !strcmp(name, mc_dtype_name((enum mc_dtype)t)) || !strcmp(name, storages[t]);
    if (!ok)
        return mc_error(MC_ERR_FORMAT, "%s: the pickle references the global %s.%s, which "
                        "megatron.c does not load (it runs no code from checkpoints)", r->what,
                        mod, name);
    return push(r, mc_pk_global(r->d, mod, name));
}

static bool is_global(const struct mc_pk *v, const char *full)
{
    return v->kind == MC_PK_GLOBAL && !strcmp(v->s, full);
}

static mc_status int_tuple(struct in *r, const struct mc_pk *t, int *n, int64_t *out)
{
    if (t->kind != MC_PK_TUPLE || t->n > MC_PK_MAX_DIM)
        return corrupt(r, "tensor size/stride is not a tuple of at most 8 ints");
    for (int64_t k = 0; k < t->n; k++) {
        if (t->items[k]->kind != MC_PK_INT)
            return corrupt(r, "tensor size/stride holds a non-int");
        out[k] = t->items[k]->i;
    }
    *n = (int)t->n;
    return MC_OK;
}

static mc_status rebuild_tensor(struct in *r, const struct mc_pk *args, struct mc_pk **out)
{
    if (args->kind != MC_PK_TUPLE || args->n < 4 || args->items[0]->kind != MC_PK_STORAGE ||
        args->items[1]->kind != MC_PK_INT)
        return corrupt(r, "_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, ...)");
    int64_t shape[MC_PK_MAX_DIM], stride[MC_PK_MAX_DIM];
    int nd, nd2;
    mc_status st = int_tuple(r, args->items[2], &nd, shape);
    if (st || (st = int_tuple(r, args->items[3], &nd2, stride)))
        return st;
    if (nd != nd2)
        return corrupt(r, "tensor size and stride differ in length");
    struct mc_pk *s = args->items[0];
    int64_t last = args->items[1]->i, numel = 1;
    if (last < 0)
        return corrupt(r, "negative tensor storage offset");
    for (int k = 0; k < nd; k++) {
        if (shape[k] < 0 || stride[k] < 0)
            return corrupt(r, "negative tensor size or stride");
        /* a forged size or stride must not overflow the extent arithmetic below */
        if ((shape[k] > 1 && stride[k] > (INT64_MAX - last) / (shape[k] - 1)) ||
            (numel && shape[k] > INT64_MAX / numel))
            return corrupt(r, "tensor size or stride too large");
        last += shape[k] ? (shape[k] - 1) * stride[k] : 0;
        numel *= shape[k];
    }
    if (numel && last >= s->numel)
        return mc_error(MC_ERR_FORMAT, "%s: a tensor view reaches element %lld of storage %s, "
                        "which holds %lld", r->what, (long long)last, s->key, (long long)s->numel);
    *out = mc_pk_tensor(r->d, s, args->items[1]->i, nd, shape, stride);
    if (*out && args->n > 4 && args->items[4]->kind == MC_PK_BOOL)
        (*out)->requires_grad = args->items[4]->b;
    return *out ? MC_OK : MC_ERR_NOMEM;
}

static struct mc_pk *latin1_bytes(struct in *r, const struct mc_pk *s)
{
    /* _codecs.encode(text, 'latin1'): code points < 256 become single bytes */
    uint8_t *b = arena(r->d, s->len + 1);
    size_t m = 0;
    if (!b)
        return NULL;
    for (size_t i = 0; i < s->len; i++) {
        uint8_t c = (uint8_t)s->s[i];
        if (c >= 0xc0 && c < 0xc4 && i + 1 < s->len)
            b[m++] = (uint8_t)(((c & 0x03) << 6) | ((uint8_t)s->s[++i] & 0x3f));
        else
            b[m++] = c;
    }
    struct mc_pk *v = mc_pk_new(r->d, MC_PK_BYTES);
    if (v) {
        v->s = (char *)b;
        v->len = m;
    }
    return v;
}

static mc_status reduce(struct in *r)
{
    struct mc_pk *args = NULL, *fn = NULL, *v = NULL;
    mc_status st = pop(r, &args);
    if (st || (st = pop(r, &fn)))
        return st;
    if (fn->kind != MC_PK_GLOBAL || args->kind != MC_PK_TUPLE)
        return corrupt(r, "REDUCE of something that is not a known callable");
    if (is_global(fn, "torch._utils _rebuild_tensor_v2")) {
        if ((st = rebuild_tensor(r, args, &v)))
            return st;
    } else if (is_global(fn, "torch._tensor _rebuild_from_type_v2")) {
        /* (func, type, args, state): a plain tensor rebuilt by func(*args); the state holds the
         * Python attributes set on it, nothing a checkpoint reader restores */
        if (args->n != 4 || !is_global(args->items[0], "torch._utils _rebuild_tensor_v2") ||
            !is_global(args->items[1], "torch Tensor") || args->items[2]->kind != MC_PK_TUPLE)
            return corrupt(r, "_rebuild_from_type_v2 other than of a torch.Tensor");
        if ((st = rebuild_tensor(r, args->items[2], &v)))
            return st;
    } else if (is_global(fn, "torch._utils _rebuild_parameter")) {
        if (args->n < 1 || args->items[0]->kind != MC_PK_TENSOR)
            return corrupt(r, "_rebuild_parameter of a non-tensor");
        v = args->items[0];
    } else if (is_global(fn, "collections OrderedDict")) {
        v = mc_pk_new(r->d, MC_PK_ODICT);
    } else if (is_global(fn, "_codecs encode")) {
        if (args->n < 1 || args->items[0]->kind != MC_PK_STR)
            return corrupt(r, "_codecs.encode of a non-str");
        v = latin1_bytes(r, args->items[0]);
    } else if (is_global(fn, "numpy.core.multiarray _reconstruct") ||
               is_global(fn, "numpy._core.multiarray _reconstruct")) {
        v = mc_pk_new(r->d, MC_PK_NDARRAY);
    } else if (is_global(fn, "numpy dtype")) {
        if (args->n < 1 || args->items[0]->kind != MC_PK_STR)
            return corrupt(r, "numpy.dtype of a non-str");
        v = text(r->d, MC_PK_NPDTYPE, args->items[0]->s, args->items[0]->len);
    } else if (is_global(fn, "__builtin__ getattr") || is_global(fn, "builtins getattr")) {
        if (args->n != 2 || args->items[0]->kind != MC_PK_GLOBAL ||
            strncmp(args->items[0]->s, "megatron.", 9) || args->items[1]->kind != MC_PK_STR)
            return corrupt(r, "getattr other than of a Megatron enum member");
        v = mc_pk_enum(r->d, "", "", args->items[1]);
        if (v)
            v->s = args->items[0]->s, v->len = args->items[0]->len, v->b = true;
    } else if (is_global(fn, "torch Size")) { /* torch.Size((...)): the tuple */
        if (args->n != 1 || args->items[0]->kind != MC_PK_TUPLE)
            return corrupt(r, "torch.Size of something other than a tuple");
        v = args->items[0];
    } else if (is_global(fn, "torch.serialization _get_layout")) {
        if (args->n != 1 || args->items[0]->kind != MC_PK_STR)
            return corrupt(r, "_get_layout of a non-str");
        v = text(r->d, MC_PK_GLOBAL, args->items[0]->s, args->items[0]->len);
    } else if (is_global(fn, "pathlib PosixPath")) { /* the path's parts joined */
        char buf[4096];
        size_t m = 0;
        for (int64_t k = 0; k < args->n; k++) {
            if (args->items[k]->kind != MC_PK_STR)
                return corrupt(r, "PosixPath of a non-str");
            m += (size_t)snprintf(buf + m, sizeof(buf) - m, "%s%s", k && m && buf[m - 1] != '/' ? "/" : "",
                                  args->items[k]->s);
            if (m >= sizeof(buf))
                return corrupt(r, "PosixPath too long");
        }
        v = text(r->d, MC_PK_STR, buf, m);
    } else if ((!strncmp(fn->s, "megatron.", 9) ||
                is_global(fn, "torch.distributed.checkpoint.metadata _MEM_FORMAT_ENCODING") ||
                is_global(fn, "torch.distributed.checkpoint.planner WriteItemType")) && args->n == 1) {
        v = mc_pk_enum(r->d, "", "", args->items[0]);
        if (v)
            v->s = fn->s, v->len = fn->len;
    } else {
        return mc_error(MC_ERR_FORMAT, "%s: the pickle calls %s, which megatron.c does not "
                        "load", r->what, fn->s);
    }
    return push(r, v);
}

/* BUILD: Namespace.__dict__ update, numpy dtype/ndarray __setstate__. */
static mc_status build(struct in *r)
{
    struct mc_pk *state = NULL, *obj = NULL;
    mc_status st = pop(r, &state);
    if (st || (st = pop(r, &obj)))
        return st;
    if (obj->kind == MC_PK_NAMESPACE && state->kind == MC_PK_DICT) {
        obj->items = state->items;
        obj->n = state->n;
        obj->cap = state->cap;
    } else if (obj->kind == MC_PK_BYTES) {
        /* io.BytesIO.__setstate__((value, position, __dict__)): the value is what is kept */
        if (state->kind != MC_PK_TUPLE || state->n < 1 || state->items[0]->kind != MC_PK_BYTES)
            return corrupt(r, "io.BytesIO state is not (bytes, position, dict)");
        obj->s = state->items[0]->s;
        obj->len = state->items[0]->len;
    } else if (obj->kind == MC_PK_OBJECT) {
        /* a dataclass: __dict__ (or (None, slots) for slotted ones), else a __setstate__ value */
        struct mc_pk *attrs = state;
        if (state->kind == MC_PK_TUPLE && state->n == 2 && state->items[1]->kind == MC_PK_DICT &&
            state->items[0]->kind == MC_PK_NONE)
            attrs = state->items[1];
        if (attrs->kind == MC_PK_DICT) {
            for (int64_t k = 0; k < attrs->n; k++)
                if ((st = mc_pk_append(r->d, obj, attrs->items[k])))
                    return st;
        } else {
            struct mc_pk *key = mc_pk_str(r->d, "__state__");
            if (!key || (st = mc_pk_append(r->d, obj, key)) || (st = mc_pk_append(r->d, obj, state)))
                return st ? st : MC_ERR_NOMEM;
        }
    } else if (obj->kind == MC_PK_ODICT) {
        /* state_dict()'s `_metadata` attribute (module versions): not needed, dropped */
    } else if (obj->kind == MC_PK_NPDTYPE) {
        /* (version, byteorder, ...): keep the byte order in front of the type ("<u4") */
        if (state->kind == MC_PK_TUPLE && state->n > 1 && state->items[1]->kind == MC_PK_STR) {
            char buf[64];
            int n = snprintf(buf, sizeof(buf), "%s%s", state->items[1]->s, obj->s);
            if (!(obj->s = arena_str(r->d, buf, (size_t)n)))
                return MC_ERR_NOMEM;
            obj->len = (size_t)n;
        }
    } else if (obj->kind == MC_PK_NDARRAY) {
        /* (version, shape, dtype, is_fortran, raw bytes) */
        if (state->kind != MC_PK_TUPLE || state->n != 5 || state->items[2]->kind != MC_PK_NPDTYPE ||
            state->items[4]->kind != MC_PK_BYTES)
            return corrupt(r, "numpy array state is not (version, shape, dtype, fortran, bytes)");
        if ((st = int_tuple(r, state->items[1], &obj->ndim, obj->shape)))
            return st;
        obj->s = state->items[2]->s;
        obj->data = state->items[4]->s;
        obj->numel = (int64_t)state->items[4]->len;
    } else {
        return corrupt(r, "BUILD on an object megatron.c does not know how to set up");
    }
    return push(r, obj);
}

static mc_status persistent(struct in *r)
{
    struct mc_pk *pid = NULL;
    mc_status st = pop(r, &pid);
    if (st)
        return st;
    if (pid->kind != MC_PK_TUPLE || pid->n != 5 || pid->items[0]->kind != MC_PK_STR ||
        strcmp(pid->items[0]->s, "storage") || pid->items[1]->kind != MC_PK_GLOBAL ||
        pid->items[2]->kind != MC_PK_STR || pid->items[4]->kind != MC_PK_INT)
        return corrupt(r, "persistent id is not ('storage', StorageType, key, location, numel)");
    const char *cls = strchr(pid->items[1]->s, ' ') + 1, *key = pid->items[2]->s;
    int t = 0;
    while (t < MC_DTYPE_COUNT && strcmp(cls, storages[t]))
        t++;
    if (t == MC_DTYPE_COUNT)
        return corrupt(r, "persistent id names an unknown storage class");
    for (int64_t k = 0; k < r->storages->n; k++) /* torch caches storages by key */
        if (!strcmp(r->storages->items[k]->key, key))
            return push(r, r->storages->items[k]);
    if (pid->items[4]->i < 0 || strlen(key) >= sizeof(((struct mc_pk *)0)->key))
        return corrupt(r, "bad storage key or size");
    const void *data;
    if (!r->storage)
        return corrupt(r, "a persistent id (tensor storage) where none can be");
    if ((st = r->storage(r->ctx, key, (enum mc_dtype)t, pid->items[4]->i, &data)))
        return st;
    struct mc_pk *s = mc_pk_storage(r->d, (enum mc_dtype)t, pid->items[4]->i, data);
    if (!s)
        return MC_ERR_NOMEM;
    strcpy(s->key, key);
    if ((st = mc_pk_append(r->d, r->storages, s)))
        return st;
    return push(r, s);
}

static mc_status seq_from_mark(struct in *r, enum mc_pk_kind kind, struct mc_pk *into)
{
    int64_t first = 0;
    mc_status st = pop_mark(r, &first);
    if (st)
        return st;
    struct mc_pk *c = into ? into : mc_pk_new(r->d, kind);
    if (!c)
        return MC_ERR_NOMEM;
    for (int64_t k = first; k < r->sp; k++)
        if ((st = mc_pk_append(r->d, c, r->stack[k])))
            return st;
    r->sp = first;
    return into ? MC_OK : push(r, c);
}

static mc_status small_tuple(struct in *r, int n)
{
    struct mc_pk *t = mc_pk_new(r->d, MC_PK_TUPLE), *v[3];
    if (!t)
        return MC_ERR_NOMEM;
    for (int k = n - 1; k >= 0; k--) {
        mc_status st = pop(r, &v[k]);
        if (st)
            return st;
    }
    for (int k = 0; k < n; k++)
        if (mc_pk_append(r->d, t, v[k]))
            return MC_ERR_NOMEM;
    return push(r, t);
}

static mc_status set_items(struct in *r, int64_t first)
{
    if (first < 1 || (r->sp - first) % 2)
        return corrupt(r, "SETITEMS without a dict or with an odd number of items");
    struct mc_pk *m = r->stack[first - 1];
    if (!mc_pk_is_map(m))
        return corrupt(r, "SETITEM(S) on something that is not a dict");
    for (int64_t k = first; k < r->sp; k++)
        if (mc_pk_append(r->d, m, r->stack[k]))
            return MC_ERR_NOMEM;
    r->sp = first;
    return MC_OK;
}

static mc_status read_text(struct in *r, int lenbytes, enum mc_pk_kind kind)
{
    mc_status st = need(r, (size_t)lenbytes);
    if (st)
        return st;
    uint64_t n = le(r->p, lenbytes);
    r->p += lenbytes;
    if ((st = need(r, n)))
        return st;
    struct mc_pk *v = text(r->d, kind, (const char *)r->p, n);
    r->p += n;
    return push(r, v);
}

static mc_status read_global(struct in *r)
{
    const uint8_t *nl1 = memchr(r->p, '\n', (size_t)(r->end - r->p));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(r->end - nl1 - 1)) : NULL;
    if (!nl2 || nl1 - r->p > 120 || nl2 - nl1 > 120)
        return corrupt(r, "unterminated GLOBAL");
    char mod[128], name[128];
    memcpy(mod, r->p, (size_t)(nl1 - r->p));
    mod[nl1 - r->p] = 0;
    memcpy(name, nl1 + 1, (size_t)(nl2 - nl1 - 1));
    name[nl2 - nl1 - 1] = 0;
    r->p = nl2 + 1;
    return global(r, mod, name);
}

static mc_status step(struct in *r, uint8_t c, bool *stop)
{
    mc_status st;
    struct mc_pk *v = NULL, *w = NULL;
    int64_t first = 0;
    switch (c) {
    case 0x80: /* PROTO */
        if ((st = need(r, 1)))
            return st;
        if (*r->p > 5)
            return corrupt(r, "pickle protocol above 5");
        r->p++;
        return MC_OK;
    case 0x95: /* FRAME (protocol 4) */
        if ((st = need(r, 8)))
            return st;
        r->p += 8;
        return MC_OK;
    case '.': *stop = true; return MC_OK;
    case '(': return mark(r);
    case 'N': return push(r, mc_pk_none(r->d));
    case 0x88: return push(r, mc_pk_bool(r->d, true));
    case 0x89: return push(r, mc_pk_bool(r->d, false));
    case 'K': if ((st = need(r, 1))) return st; r->p += 1; return push(r, mc_pk_int(r->d, r->p[-1]));
    case 'M': if ((st = need(r, 2))) return st; r->p += 2; return push(r, mc_pk_int(r->d, (int64_t)le(r->p - 2, 2)));
    case 'J': if ((st = need(r, 4))) return st; r->p += 4; return push(r, mc_pk_int(r->d, (int32_t)(uint32_t)le(r->p - 4, 4)));
    case 0x8a: { /* LONG1 */
        if ((st = need(r, 1)))
            return st;
        int n = *r->p++;
        if (n > 8 || (st = need(r, (size_t)n)))
            return st ? st : mc_error(MC_ERR_UNSUPPORTED, "%s: an integer wider than 64 bits", r->what);
        uint64_t u = le(r->p, n);
        if (n && n < 8 && (r->p[n - 1] & 0x80))
            u |= ~(uint64_t)0 << (8 * n);
        r->p += n;
        return push(r, mc_pk_int(r->d, (int64_t)u));
    }
    case 'G': {
        if ((st = need(r, 8)))
            return st;
        uint64_t u = 0;
        for (int k = 0; k < 8; k++)
            u = u << 8 | r->p[k];
        r->p += 8;
        double f;
        memcpy(&f, &u, 8);
        return push(r, mc_pk_float(r->d, f));
    }
    case 'X': return read_text(r, 4, MC_PK_STR);
    case 0x8c: return read_text(r, 1, MC_PK_STR);  /* SHORT_BINUNICODE */
    case 'T': return read_text(r, 4, MC_PK_STR);   /* BINSTRING */
    case 'U': return read_text(r, 1, MC_PK_STR);   /* SHORT_BINSTRING */
    case 'B': return read_text(r, 4, MC_PK_BYTES); /* BINBYTES */
    case 'C': return read_text(r, 1, MC_PK_BYTES); /* SHORT_BINBYTES */
    case ')': return push(r, mc_pk_new(r->d, MC_PK_TUPLE));
    case ']': return push(r, mc_pk_new(r->d, MC_PK_LIST));
    case '}': return push(r, mc_pk_new(r->d, MC_PK_DICT));
    case 0x85: return small_tuple(r, 1);
    case 0x86: return small_tuple(r, 2);
    case 0x87: return small_tuple(r, 3);
    case 't': return seq_from_mark(r, MC_PK_TUPLE, NULL);
    case 'l': return seq_from_mark(r, MC_PK_LIST, NULL);
    case 'e':
        if ((st = pop_mark(r, &first)))
            return st;
        if (first < 1 || r->stack[first - 1]->kind != MC_PK_LIST)
            return corrupt(r, "APPENDS on something that is not a list");
        for (int64_t k = first; k < r->sp; k++)
            if ((st = mc_pk_append(r->d, r->stack[first - 1], r->stack[k])))
                return st;
        r->sp = first;
        return MC_OK;
    case 'a':
        if ((st = pop(r, &v)))
            return st;
        if (!r->sp || r->stack[r->sp - 1]->kind != MC_PK_LIST)
            return corrupt(r, "APPEND on something that is not a list");
        return mc_pk_append(r->d, r->stack[r->sp - 1], v);
    case 'u':
        if ((st = pop_mark(r, &first)))
            return st;
        return set_items(r, first);
    case 's':
        if (r->sp < 3)
            return corrupt(r, "SETITEM with too few items");
        return set_items(r, r->sp - 2);
    case 'q': if ((st = need(r, 1))) return st; r->p += 1; return memo_put(r, r->p[-1]);
    case 'r': if ((st = need(r, 4))) return st; r->p += 4; return memo_put(r, le(r->p - 4, 4));
    case 'h': if ((st = need(r, 1))) return st; r->p += 1; return memo_get(r, r->p[-1]);
    case 'j': if ((st = need(r, 4))) return st; r->p += 4; return memo_get(r, le(r->p - 4, 4));
    case 0x94: return memo_put(r, (uint64_t)r->nmemo_next++); /* MEMOIZE (protocol 4) */
    case 'c': return read_global(r);
    case 0x93: /* STACK_GLOBAL (protocol 4): module and name from the stack */
        if ((st = pop(r, &v)) || (st = pop(r, &w)))
            return st;
        if (v->kind != MC_PK_STR || w->kind != MC_PK_STR || v->len > 120 || w->len > 120)
            return corrupt(r, "STACK_GLOBAL of other than two short strings");
        return global(r, w->s, v->s);
    case 'R': return reduce(r);
    case 0x81: /* NEWOBJ */
        if ((st = pop(r, &v)) || (st = pop(r, &w)))
            return st;
        if (is_global(w, "_io BytesIO")) /* its bytes arrive with BUILD */
            return push(r, mc_pk_new(r->d, MC_PK_BYTES));
        if (w->kind == MC_PK_GLOBAL && is_object_class(w->s)) { /* its attributes arrive with BUILD */
            struct mc_pk *o = mc_pk_new(r->d, MC_PK_OBJECT);
            if (o && !(o->s = arena_str(r->d, w->s, w->len)))
                return MC_ERR_NOMEM;
            if (o)
                o->len = w->len;
            return push(r, o);
        }
        if (!is_global(w, "argparse Namespace"))
            return corrupt(r, "NEWOBJ of a class other than argparse.Namespace or io.BytesIO");
        return push(r, mc_pk_new(r->d, MC_PK_NAMESPACE));
    case 'b': return build(r);
    case 'Q': return persistent(r);
    case '0': return pop(r, &v);
    case '2':
        if ((st = pop(r, &v)) || (st = push(r, v)))
            return st;
        return push(r, v);
    default: {
        char why[64];
        snprintf(why, sizeof(why), "unsupported opcode 0x%02x", c);
        return corrupt(r, why);
    }
    }
}

mc_status mc_pk_load(mc_pk_doc *d, const uint8_t *buf, size_t n, const char *what,
                     mc_pk_storage_fn storage, void *ctx, struct mc_pk **out)
{
    struct in r = {.d = d, .p = buf, .start = buf, .end = buf + n, .what = what,
                   .storage = storage, .ctx = ctx};
    mc_status st = MC_OK;
    bool stop = false;
    if (!(r.storages = mc_pk_new(d, MC_PK_LIST)))
        return MC_ERR_NOMEM;
    while (!st && !stop) {
        if (r.p >= r.end) {
            st = corrupt(&r, "no STOP opcode (truncated)");
            break;
        }
        uint8_t c = *r.p++;
        st = step(&r, c, &stop);
    }
    if (!st && (r.sp != 1 || r.nm))
        st = corrupt(&r, "STOP with other than one value on the stack");
    if (!st)
        *out = r.stack[0];
    mc_free(r.stack);
    mc_free(r.marks);
    mc_free(r.memo);
    return st;
}
