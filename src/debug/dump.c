/* Tensor dump files (include/megatron/dump.h, byte layout in docs/formats/dump.md). Megatron has
 * no counterpart: it is our alignment tool, the format the parity tests use to move weights,
 * batches, logits and grads between the PyTorch twin and the C engine. Little-endian only, as
 * every machine we target; the reader checks every size against the file size before using it. */
#include "megatron/dump.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

static const unsigned char dump_magic[8] = {'M', 'C', 'D', 'U', 'M', 'P', 0, 0x1a};

struct mc_dump {
    struct mc_dump_tensor *t;
    int64_t n, cap;
};

mc_status mc_dump_init(mc_dump **out)
{
    mc_dump *d = mc_calloc(1, sizeof(*d));
    if (!d)
        return MC_ERR_NOMEM;
    *out = d;
    return MC_OK;
}

void mc_dump_free(mc_dump *d)
{
    if (!d)
        return;
    for (int64_t i = 0; i < d->n; i++) {
        mc_free(d->t[i].data);
        mc_free(d->t[i].name);
    }
    mc_free(d->t);
    mc_free(d);
}

int64_t mc_dump_count(const mc_dump *d) { return d->n; }

const struct mc_dump_tensor *mc_dump_get(const mc_dump *d, int64_t i)
{
    MC_ASSERT(i >= 0 && i < d->n);
    return &d->t[i];
}

const struct mc_dump_tensor *mc_dump_find(const mc_dump *d, const char *name)
{
    for (int64_t i = 0; i < d->n; i++)
        if (strcmp(d->t[i].name, name) == 0)
            return &d->t[i];
    return NULL;
}

/* numel of a shape, MC_ERR_SHAPE on a negative dim or an overflow past 2^62 bytes. */
static mc_status shape_numel(const char *name, enum mc_dtype dtype, int ndim, const int64_t *shape,
                             int64_t *numel)
{
    int64_t n = 1;
    const int64_t limit = ((int64_t)1 << 62) / (int64_t)mc_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return mc_error(MC_ERR_SHAPE, "dump tensor '%s': dim %d is negative (%lld)", name, i,
                            (long long)shape[i]);
        if (shape[i] && n > limit / shape[i])
            return mc_error(MC_ERR_SHAPE, "dump tensor '%s': shape too large", name);
        n *= shape[i];
    }
    *numel = n;
    return MC_OK;
}

static mc_status grow(mc_dump *d)
{
    if (d->n < d->cap)
        return MC_OK;
    int64_t cap = d->cap ? 2 * d->cap : 16;
    struct mc_dump_tensor *t = mc_calloc((size_t)cap, sizeof(*t));
    if (!t)
        return MC_ERR_NOMEM;
    if (d->n)
        memcpy(t, d->t, (size_t)d->n * sizeof(*t));
    mc_free(d->t);
    d->t = t;
    d->cap = cap;
    return MC_OK;
}

mc_status mc_dump_add(mc_dump *d, const char *name, enum mc_dtype dtype, int ndim,
                      const int64_t *shape, const void *data)
{
    size_t len = strlen(name);
    if (len == 0 || len >= MC_DUMP_MAX_NAME)
        return mc_error(MC_ERR_CONFIG, "dump tensor name '%s' must have 1..%d characters", name,
                        MC_DUMP_MAX_NAME - 1);
    if ((int)dtype < 0 || dtype >= MC_DTYPE_COUNT)
        return mc_error(MC_ERR_CONFIG, "dump tensor '%s': unknown dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > MC_DUMP_MAX_DIMS)
        return mc_error(MC_ERR_SHAPE, "dump tensor '%s': ndim %d not in 0..%d", name, ndim,
                        MC_DUMP_MAX_DIMS);
    if (mc_dump_find(d, name))
        return mc_error(MC_ERR_CONFIG, "dump already holds a tensor named '%s'", name);
    int64_t numel;
    mc_status st = shape_numel(name, dtype, ndim, shape, &numel);
    if (st != MC_OK || (st = grow(d)) != MC_OK)
        return st;
    size_t bytes = (size_t)numel * mc_dtype_size(dtype);
    struct mc_dump_tensor *t = &d->t[d->n];
    memset(t, 0, sizeof(*t));
    t->name = mc_alloc(len + 1);
    t->data = mc_alloc(bytes ? bytes : 1);
    if (!t->name || !t->data) {
        mc_free(t->name);
        mc_free(t->data);
        return MC_ERR_NOMEM;
    }
    memcpy(t->name, name, len + 1);
    if (bytes)
        memcpy(t->data, data, bytes);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->numel = numel;
    d->n++;
    return MC_OK;
}

mc_status mc_dump_add_f32(mc_dump *d, const char *name, int ndim, const int64_t *shape,
                          const float *data)
{
    return mc_dump_add(d, name, MC_DTYPE_F32, ndim, shape, data);
}

mc_status mc_dump_add_scalar_f32(mc_dump *d, const char *name, float v)
{
    return mc_dump_add(d, name, MC_DTYPE_F32, 0, NULL, &v);
}

mc_status mc_dump_add_scalar_i64(mc_dump *d, const char *name, int64_t v)
{
    return mc_dump_add(d, name, MC_DTYPE_I64, 0, NULL, &v);
}

struct mc_tensor mc_dump_view(const struct mc_dump_tensor *t)
{
    _Static_assert(MC_DUMP_MAX_DIMS <= MC_TENSOR_MAX_DIMS, "a dump shape fits a view");
    return mc_tensor_view(t->data, t->dtype, t->ndim, t->shape);
}

static mc_status scalar_of(const mc_dump *d, const char *name, const struct mc_dump_tensor **out)
{
    const struct mc_dump_tensor *t = mc_dump_find(d, name);
    if (!t)
        return mc_error(MC_ERR_FORMAT, "dump has no tensor '%s'", name);
    if (t->numel != 1)
        return mc_error(MC_ERR_FORMAT, "dump tensor '%s' has %lld elements, expected a scalar",
                        name, (long long)t->numel);
    *out = t;
    return MC_OK;
}

mc_status mc_dump_get_f64(const mc_dump *d, const char *name, double *out)
{
    const struct mc_dump_tensor *t = NULL;
    mc_status st = scalar_of(d, name, &t);
    if (st != MC_OK)
        return st;
    *out = mc_dtype_get_f64(t->data, t->dtype, 0);
    return MC_OK;
}

mc_status mc_dump_get_i64(const mc_dump *d, const char *name, int64_t *out)
{
    const struct mc_dump_tensor *t = NULL;
    mc_status st = scalar_of(d, name, &t);
    if (st != MC_OK)
        return st;
    if (t->dtype == MC_DTYPE_I64) { /* exact beyond 2^53, where a double is not */
        memcpy(out, t->data, 8);
        return MC_OK;
    }
    /* every other dtype is exact in a double; a float must hold an integer in int64's range */
    double v = mc_dtype_get_f64(t->data, t->dtype, 0);
    if (!(v == floor(v) && v >= -0x1p63 && v < 0x1p63))
        return mc_error(MC_ERR_FORMAT, "dump tensor '%s' = %g, expected an integer", name, v);
    *out = (int64_t)v;
    return MC_OK;
}

/* ---- writing --------------------------------------------------------------------------- */

static int put(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }
static int put_u32(FILE *f, uint32_t v) { return put(f, &v, 4); }
static int put_u64(FILE *f, uint64_t v) { return put(f, &v, 8); }

static int write_tensor(FILE *f, const struct mc_dump_tensor *t)
{
    size_t len = strlen(t->name);
    size_t bytes = (size_t)t->numel * mc_dtype_size(t->dtype);
    int ok = put_u32(f, (uint32_t)len) && put(f, t->name, len) && put_u32(f, (uint32_t)t->dtype) &&
             put_u32(f, (uint32_t)t->ndim);
    for (int i = 0; ok && i < t->ndim; i++)
        ok = put_u64(f, (uint64_t)t->shape[i]);
    return ok && put_u64(f, bytes) && put(f, t->data, bytes);
}

mc_status mc_dump_write(const mc_dump *d, const char *path)
{
    size_t plen = strlen(path);
    char *tmp = mc_alloc(plen + 5);
    if (!tmp)
        return MC_ERR_NOMEM;
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    mc_status st = MC_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st = mc_error(MC_ERR_IO, "cannot create dump %s", tmp);
        goto out_tmp;
    }
    int ok = put(f, dump_magic, 8) && put_u32(f, MC_DUMP_VERSION) && put_u32(f, 0) &&
             put_u64(f, (uint64_t)d->n);
    for (int64_t i = 0; ok && i < d->n; i++)
        ok = write_tensor(f, &d->t[i]);
    if (fclose(f) != 0)
        ok = 0;
    if (!ok) {
        st = mc_error(MC_ERR_IO, "write to dump %s failed", tmp);
        remove(tmp);
        goto out_tmp;
    }
    if (rename(tmp, path) != 0) {
        st = mc_error(MC_ERR_IO, "cannot rename %s to %s", tmp, path);
        remove(tmp);
    }
out_tmp:
    mc_free(tmp);
    return st;
}

/* ---- reading --------------------------------------------------------------------------- */

struct cursor {
    const unsigned char *p;
    size_t left, size;
    const char *path;
};

static int take(struct cursor *c, void *dst, size_t n)
{
    if (n > c->left)
        return 0;
    memcpy(dst, c->p, n);
    c->p += n;
    c->left -= n;
    return 1;
}

static mc_status truncated(const struct cursor *c, const char *what, int64_t i)
{
    return mc_error(MC_ERR_FORMAT, "dump %s: truncated in %s of tensor %lld at byte %zu of %zu",
                    c->path, what, (long long)i, c->size - c->left, c->size);
}

static mc_status read_tensor(struct cursor *c, int64_t i, mc_dump *d)
{
    uint32_t len, dtype, ndim;
    char name[MC_DUMP_MAX_NAME];
    int64_t shape[MC_DUMP_MAX_DIMS];
    uint64_t bytes;
    if (!take(c, &len, 4))
        return truncated(c, "name length", i);
    if (len == 0 || len >= MC_DUMP_MAX_NAME)
        return mc_error(MC_ERR_FORMAT, "dump %s: tensor %lld has name length %u, expected 1..%d",
                        c->path, (long long)i, len, MC_DUMP_MAX_NAME - 1);
    if (!take(c, name, len))
        return truncated(c, "name", i);
    name[len] = 0;
    if (!take(c, &dtype, 4) || !take(c, &ndim, 4))
        return truncated(c, "dtype/ndim", i);
    if (dtype >= MC_DTYPE_COUNT || ndim > MC_DUMP_MAX_DIMS)
        return mc_error(MC_ERR_FORMAT, "dump %s: tensor '%s' has dtype %u (expected < %d) and ndim "
                        "%u (expected <= %d)", c->path, name, dtype, MC_DTYPE_COUNT, ndim,
                        MC_DUMP_MAX_DIMS);
    for (uint32_t k = 0; k < ndim; k++)
        if (!take(c, &shape[k], 8))
            return truncated(c, "shape", i);
    int64_t numel;
    mc_status st = shape_numel(name, (enum mc_dtype)dtype, (int)ndim, shape, &numel);
    if (st != MC_OK)
        return mc_error(MC_ERR_FORMAT, "dump %s: %s", c->path, mc_last_error());
    if (!take(c, &bytes, 8))
        return truncated(c, "byte count", i);
    if (bytes != (uint64_t)numel * mc_dtype_size((enum mc_dtype)dtype))
        return mc_error(MC_ERR_FORMAT, "dump %s: tensor '%s' says %llu data bytes, its shape needs "
                        "%llu", c->path, name, (unsigned long long)bytes,
                        (unsigned long long)((uint64_t)numel * mc_dtype_size((enum mc_dtype)dtype)));
    if (bytes > c->left)
        return truncated(c, "data", i);
    st = mc_dump_add(d, name, (enum mc_dtype)dtype, (int)ndim, shape, c->p);
    if (st != MC_OK)
        return st == MC_ERR_NOMEM ? st : mc_error(MC_ERR_FORMAT, "dump %s: %s", c->path, mc_last_error());
    c->p += bytes;
    c->left -= bytes;
    return MC_OK;
}

static mc_status parse(struct cursor *c, mc_dump *d)
{
    unsigned char magic[8];
    uint32_t version, flags;
    uint64_t count;
    if (!take(c, magic, 8) || memcmp(magic, dump_magic, 8) != 0)
        return mc_error(MC_ERR_FORMAT, "dump %s: bad magic (not a megatron.c dump)", c->path);
    if (!take(c, &version, 4) || !take(c, &flags, 4) || !take(c, &count, 8))
        return mc_error(MC_ERR_FORMAT, "dump %s: header truncated (%zu bytes)", c->path, c->size);
    if (version != MC_DUMP_VERSION || flags != 0)
        return mc_error(MC_ERR_FORMAT, "dump %s: version %u flags %u, expected version %d flags 0",
                        c->path, version, flags, MC_DUMP_VERSION);
    /* every tensor takes at least 25 bytes: bounds the count before looping on it */
    if (count > c->left / 25)
        return mc_error(MC_ERR_FORMAT, "dump %s: count %llu cannot fit in %zu bytes", c->path,
                        (unsigned long long)count, c->size);
    for (uint64_t i = 0; i < count; i++) {
        mc_status st = read_tensor(c, (int64_t)i, d);
        if (st != MC_OK)
            return st;
    }
    if (c->left)
        return mc_error(MC_ERR_FORMAT, "dump %s: %zu trailing bytes after %llu tensors", c->path,
                        c->left, (unsigned long long)count);
    return MC_OK;
}

static mc_status slurp(const char *path, unsigned char **buf, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot open dump %s", path);
    mc_status st = MC_OK;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = mc_error(MC_ERR_IO, "cannot size dump %s", path);
        goto out_close;
    }
    *buf = mc_alloc((size_t)n + 1);
    if (!*buf) {
        st = MC_ERR_NOMEM;
        goto out_close;
    }
    if (fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        mc_free(*buf);
        *buf = NULL;
        st = mc_error(MC_ERR_IO, "short read of dump %s", path);
        goto out_close;
    }
    *size = (size_t)n;
out_close:
    fclose(f);
    return st;
}

mc_status mc_dump_read(const char *path, mc_dump **out)
{
    unsigned char *buf = NULL;
    size_t size = 0;
    mc_dump *d = NULL;
    mc_status st = slurp(path, &buf, &size);
    if (st != MC_OK)
        return st;
    if ((st = mc_dump_init(&d)) != MC_OK)
        goto out_buf;
    struct cursor c = {buf, size, size, path};
    st = parse(&c, d);
    if (st != MC_OK) {
        mc_dump_free(d);
        d = NULL;
    }
out_buf:
    mc_free(buf);
    *out = d;
    return st;
}

/* ---- debug hooks ----------------------------------------------------------------------- */

static struct {
    bool checked_env, active;
    char *path;
    mc_dump *d;
    mc_status failed; /* first failure while recording, reported by flush */
} hooks;

void mc_dump_hooks_disable(void)
{
    mc_dump_free(hooks.d);
    mc_free(hooks.path);
    hooks.d = NULL;
    hooks.path = NULL;
    hooks.active = false;
    hooks.failed = MC_OK;
    hooks.checked_env = true; /* an explicit call overrides MC_DUMP_HOOKS */
}

mc_status mc_dump_hooks_enable(const char *path)
{
    mc_dump_hooks_disable();
    size_t n = strlen(path);
    if (n == 0)
        return mc_error(MC_ERR_CONFIG, "dump hooks: empty output path");
    hooks.path = mc_alloc(n + 1);
    if (!hooks.path)
        return MC_ERR_NOMEM;
    memcpy(hooks.path, path, n + 1);
    mc_status st = mc_dump_init(&hooks.d);
    if (st != MC_OK) {
        mc_dump_hooks_disable();
        return st;
    }
    hooks.active = true;
    return MC_OK;
}

bool mc_dump_hooks_active(void)
{
    if (!hooks.checked_env) {
        hooks.checked_env = true;
        const char *env = getenv("MC_DUMP_HOOKS");
        if (env && *env && mc_dump_hooks_enable(env) != MC_OK)
            mc_log(MC_LOG_WARN, "MC_DUMP_HOOKS=%s: cannot enable dump hooks: %s", env,
                   mc_last_error());
    }
    return hooks.active;
}

/* Adds prefix + name, or name@k for the first k >= 1 not taken (the k-th repeat). */
static mc_status add_repeated(mc_dump *d, const char *prefix, const char *name,
                              enum mc_dtype dtype, int ndim, const int64_t *shape,
                              const void *data, char *key, size_t key_size)
{
    snprintf(key, key_size, "%s%s", prefix, name);
    for (int k = 1; mc_dump_find(d, key); k++)
        snprintf(key, key_size, "%s%s@%d", prefix, name, k);
    return mc_dump_add(d, key, dtype, ndim, shape, data);
}

void mc_dump_hook(const char *name, enum mc_dtype dtype, int ndim, const int64_t *shape,
                  const void *data)
{
    if (!mc_dump_hooks_active())
        return;
    char key[MC_DUMP_MAX_NAME];
    mc_status st = add_repeated(hooks.d, "", name, dtype, ndim, shape, data, key, sizeof(key));
    if (st != MC_OK) {
        mc_log(MC_LOG_WARN, "dump hook %s: %s; hooks stop recording", key, mc_last_error());
        hooks.failed = st;
        hooks.active = false;
    }
}

mc_status mc_dump_hooks_flush(void)
{
    if (!hooks.d)
        return mc_error(MC_ERR_CONFIG, "dump hooks: flush without mc_dump_hooks_enable");
    if (hooks.failed != MC_OK)
        return mc_error(hooks.failed, "dump hooks: recording into %s stopped after a failure",
                        hooks.path);
    mc_status st = mc_dump_write(hooks.d, hooks.path);
    mc_dump *fresh = NULL;
    mc_status st2 = mc_dump_init(&fresh);
    mc_dump_free(hooks.d);
    hooks.d = fresh;
    if (st2 != MC_OK) {
        hooks.active = false;
        hooks.failed = st2;
    }
    return st != MC_OK ? st : st2;
}

/* ---- run dumps ------------------------------------------------------------------------- */

static struct {
    unsigned points; /* 0 while no recording is open (or after a failure) */
    mc_dump *d;
    mc_status failed;
    char failure[2100];
} rec;

static const char *const point_names[] = {"batch", "forward", "backward", "params", "grads",
                                          "optimizer", "loss"};

const char *mc_dump_point_name(enum mc_dump_point p)
{
    for (int i = 0; i < (int)(sizeof(point_names) / sizeof(point_names[0])); i++)
        if ((unsigned)p == 1u << i)
            return point_names[i];
    return NULL;
}

mc_status mc_dump_points_open(unsigned points)
{
    mc_dump_free(rec.d);
    rec.d = NULL;
    rec.points = 0;
    rec.failed = MC_OK;
    mc_status st = mc_dump_init(&rec.d);
    if (st == MC_OK)
        rec.points = points;
    return st;
}

bool mc_dump_point_on(enum mc_dump_point point) { return (rec.points & (unsigned)point) != 0; }

void mc_dump_point(enum mc_dump_point point, const char *prefix, const char *name,
                   enum mc_dtype dtype, int ndim, const int64_t *shape, const void *data)
{
    if (!mc_dump_point_on(point))
        return;
    char key[MC_DUMP_MAX_NAME];
    mc_status st = add_repeated(rec.d, prefix, name, dtype, ndim, shape, data, key, sizeof(key));
    if (st != MC_OK) { /* kept for the close, which fails the iteration with it */
        snprintf(rec.failure, sizeof(rec.failure), "%.1000s: %.1000s", key, mc_last_error());
        rec.failed = st;
        rec.points = 0;
    }
}

const mc_dump *mc_dump_points_recording(void)
{
    return rec.failed == MC_OK ? rec.d : NULL;
}

void mc_dump_points_replace(mc_dump *d)
{
    mc_dump_free(rec.d);
    rec.d = d;
}

mc_status mc_dump_points_close(const char *path)
{
    mc_status st = MC_OK;
    if (rec.failed != MC_OK)
        st = mc_error(rec.failed, "dump %s: recording stopped at %s", path ? path : "(dropped)",
                      rec.failure);
    else if (path && rec.d)
        st = mc_dump_write(rec.d, path);
    mc_dump_free(rec.d);
    rec.d = NULL;
    rec.points = 0;
    rec.failed = MC_OK;
    return st;
}

bool mc_dump_test_perturbed_layer(int64_t layer)
{
    static int checked;
    static long long chosen = -1;
    if (!checked) {
        checked = 1;
        const char *env = getenv("MC_TEST_PERTURB_LN_EPS");
        const char *pre = "decoder.layers.";
        char *end;
        if (env && strncmp(env, pre, strlen(pre)) == 0) {
            chosen = strtoll(env + strlen(pre), &end, 10);
            if (*end || end == env + strlen(pre))
                chosen = -1;
        }
        if (env && chosen < 0)
            mc_log(MC_LOG_WARN, "MC_TEST_PERTURB_LN_EPS=%s: expected decoder.layers.<i>", env);
    }
    return chosen >= 0 && layer == chosen;
}
