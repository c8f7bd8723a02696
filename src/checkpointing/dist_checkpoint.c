/* Reading Megatron's `--ckpt-format torch_dist` checkpoints (megatron/core/dist_checkpointing with
 * its torch strategy over torch.distributed.checkpoint, Megatron-LM core_v0.12.1), into any tensor
 * x pipeline layout. An iteration directory holds
 *   metadata.json      {"sharded_backend": "torch_dist", ...}
 *   common.pt          torch.save of what is not sharded (args, iteration, optimizer param_groups
 *                      and common_step, opt_param_scheduler, rerun state, FLOPs), by rank 0
 *   .metadata          a pickle (protocol 4) of DCP's Metadata: per global key its global shape and
 *                      chunks (offsets, sizes), and storage_data: (key, chunk offsets) -> (file,
 *                      byte offset, length)
 *   __<rank>_<k>.distcp  the chunks, each a torch.save archive of one tensor
 * Keys are global: transformer layers are stacked on a prepended axis ("decoder.layers.
 * self_attention.linear_qkv.weight" is [L, rows, h]), tensor-parallel shards are chunks at their
 * offsets, norms carry the TE names (linear_qkv.layer_norm_weight), a tied output layer is the
 * word embedding, optimizer moments are "optimizer.state.exp_avg.<key>". Each rank reads only the
 * parts of the chunks it owns and gets the state dict the torch-format loader takes
 * (checkpoint.c): its model with stage-local names, its optimizer state by index. The pickle
 * reader builds only whitelisted DCP classes and runs no code; every offset and length is checked
 * against the file sizes. */
#include "checkpointing/dist_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpointing/checkpoint_internal.h"
#include "checkpointing/state_dict_names.h"
#include "core/dtype.h"
#include "distributed/distrib_optimizer.h"

#define MAX_FILES 4096

struct dfile {
    char name[64];
    const uint8_t *map;
    size_t size;
};

struct reader {
    const char *dir;           /* the iteration directory */
    char meta_path[4200];
    const struct mc_pk *sdm;   /* Metadata.state_dict_metadata: key -> TensorStorageMetadata */
    const struct mc_pk *storage; /* Metadata.storage_data: MetadataIndex -> _StorageInfo */
    const struct mc_pk *mcore; /* Metadata.mcore_data: key -> {} or the flattened tensors'
                                  {'nd_reformulated_orig_global_shape': shape} */
    struct dfile files[MAX_FILES];
    int nfiles;
    int64_t saved_tp, saved_pp; /* the saving run's tensor / pipeline sizes (common.pt's args) */
};

bool mc_dist_ckpt_is(const char *iter_dir)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/metadata.json", iter_dir);
    return !access(p, F_OK);
}

static void close_files(struct reader *r)
{
    for (int k = 0; k < r->nfiles; k++)
        if (r->files[k].map)
            munmap((void *)r->files[k].map, r->files[k].size);
    r->nfiles = 0;
}

/* The mapped data file `name` (a bare file name in the iteration directory). */
static mc_status data_file(struct reader *r, const char *name, const struct dfile **out)
{
    for (int k = 0; k < r->nfiles; k++)
        if (!strcmp(r->files[k].name, name))
            return *out = &r->files[k], MC_OK;
    if (strchr(name, '/') || strlen(name) >= sizeof(r->files[0].name) || !*name)
        return mc_error(MC_ERR_FORMAT, "%s: storage_data names the file '%s'; expected a file "
                        "name inside the checkpoint directory", r->meta_path, name);
    if (r->nfiles == MAX_FILES)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: more than %d data files", r->meta_path, MAX_FILES);
    char path[4400];
    snprintf(path, sizeof(path), "%s/%s", r->dir, name);
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        mc_status st = mc_error(MC_ERR_IO, "%s: cannot open %s (named by %s): %s", r->dir, path,
                                r->meta_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    struct dfile *f = &r->files[r->nfiles];
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->size = (size_t)sb.st_size;
    f->map = NULL;
    if (f->size) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return mc_error(MC_ERR_IO, "cannot mmap %s: %s", path, strerror(errno));
        }
        f->map = m;
    }
    close(fd);
    r->nfiles++;
    return *out = f, MC_OK;
}

static bool int_tuple(const struct mc_pk *t, int max, int *n, int64_t *out)
{
    if (!t || (t->kind != MC_PK_TUPLE && t->kind != MC_PK_LIST) || t->n > max)
        return false;
    for (int64_t k = 0; k < t->n; k++) {
        if (t->items[k]->kind != MC_PK_INT || t->items[k]->i < 0)
            return false;
        out[k] = t->items[k]->i;
    }
    *n = (int)t->n;
    return true;
}

/* storage_data's entry for chunk `offs` of `key`: file, byte offset, length. */
static mc_status find_storage(struct reader *r, const char *key, int nd, const int64_t *offs,
                              const struct dfile **f, uint64_t *off, uint64_t *len)
{
    for (int64_t i = 0; i + 1 < r->storage->n; i += 2) {
        const struct mc_pk *idx = r->storage->items[i], *info = r->storage->items[i + 1];
        const struct mc_pk *fqn = mc_pk_get(idx, "fqn");
        int n;
        int64_t o[MC_PK_MAX_DIM];
        if (!fqn || fqn->kind != MC_PK_STR || strcmp(fqn->s, key) ||
            !int_tuple(mc_pk_get(idx, "offset"), MC_PK_MAX_DIM, &n, o) || n != nd ||
            memcmp(o, offs, (size_t)nd * sizeof(*o)))
            continue;
        const struct mc_pk *path = mc_pk_get(info, "relative_path");
        const struct mc_pk *bo = mc_pk_get(info, "offset"), *bl = mc_pk_get(info, "length");
        const struct mc_pk *tr = mc_pk_get(info, "transform_descriptors");
        if (!path || path->kind != MC_PK_STR || !bo || bo->kind != MC_PK_INT || bo->i < 0 ||
            !bl || bl->kind != MC_PK_INT || bl->i < 0)
            return mc_error(MC_ERR_FORMAT, "%s: storage_data of %s is not (relative_path, offset, "
                            "length)", r->meta_path, key);
        if (tr && tr->kind != MC_PK_NONE && !(tr->kind == MC_PK_LIST && tr->n == 0))
            return mc_error(MC_ERR_UNSUPPORTED, "%s: %s is stored with transforms (compression or "
                            "extensions), which megatron.c does not read", r->meta_path, key);
        mc_status st = data_file(r, path->s, f);
        if (st)
            return st;
        if ((uint64_t)bo->i > (*f)->size || (uint64_t)bl->i > (*f)->size - (uint64_t)bo->i)
            return mc_error(MC_ERR_FORMAT, "%s/%s: a chunk of %s at bytes [%lld, %lld) lies outside "
                            "the file (%zu bytes): truncated or not this checkpoint's file",
                            r->dir, path->s, key, (long long)bo->i, (long long)(bo->i + bl->i),
                            (*f)->size);
        *off = (uint64_t)bo->i;
        *len = (uint64_t)bl->i;
        return MC_OK;
    }
    return mc_error(MC_ERR_FORMAT, "%s: no storage_data entry for a chunk of %s", r->meta_path, key);
}

/* Copies the intersection of chunk [co, co+cs) (data: its row-major float32 values) with the
 * region [o, o+z) into dst (the region, row-major). Returns the elements copied. */
static int64_t copy_intersection(int nd, const int64_t *co, const int64_t *cs, const float *src,
                                 const int64_t *o, const int64_t *z, float *dst)
{
    int64_t lo[MC_PK_MAX_DIM], hi[MC_PK_MAX_DIM], at[MC_PK_MAX_DIM], count = 1;
    for (int k = 0; k < nd; k++) {
        lo[k] = co[k] > o[k] ? co[k] : o[k];
        hi[k] = co[k] + cs[k] < o[k] + z[k] ? co[k] + cs[k] : o[k] + z[k];
        if (hi[k] <= lo[k])
            return 0;
        count *= hi[k] - lo[k];
        at[k] = lo[k];
    }
    if (nd == 0) {
        dst[0] = src[0];
        return 1;
    }
    int64_t run = hi[nd - 1] - lo[nd - 1];
    for (;;) {
        int64_t si = 0, di = 0;
        for (int k = 0; k < nd; k++) {
            si = si * cs[k] + (at[k] - co[k]);
            di = di * z[k] + (at[k] - o[k]);
        }
        memcpy(dst + di, src + si, (size_t)run * sizeof(float));
        int k = nd - 2;
        while (k >= 0 && ++at[k] == hi[k]) {
            at[k] = lo[k];
            k--;
        }
        if (k < 0)
            break;
    }
    return count;
}

/* One chunk's tensor from its torch.save blob as float32 (*vals): contiguous, of the chunk's
 * sizes (cs, nd of them, as DCP has it); float32, or the bfloat16 / float16 model weights of a
 * --bf16 / --fp16 save (widened to float32 exactly, into *wide, which the caller frees). The
 * values live in *doc until mc_pk_doc_free. */
static mc_status load_chunk(struct reader *r, const char *key, int nd, const int64_t *co,
                            const int64_t *cs, mc_pk_doc **doc, const float **vals, float **wide)
{
    const struct dfile *f = NULL;
    uint64_t off = 0, len = 0;
    *doc = NULL, *wide = NULL;
    mc_status st = find_storage(r, key, nd, co, &f, &off, &len);
    if (st)
        return st;
    char what[4600];
    snprintf(what, sizeof(what), "%s/%s (chunk of %s at byte %llu)", r->dir, f->name, key,
             (unsigned long long)off);
    struct mc_pk *t;
    if ((st = mc_pk_doc_init(doc)))
        return st;
    st = mc_torch_load_mem(*doc, what, f->map + off, (size_t)len, &t);
    int64_t numel = 1;
    for (int k = 0; k < nd; k++)
        numel *= cs[k];
    enum mc_dtype dt = !st && t->kind == MC_PK_TENSOR ? t->storage->dtype : MC_DTYPE_U8;
    if (!st && dt != MC_DTYPE_F32 && dt != MC_DTYPE_BF16 && dt != MC_DTYPE_F16)
        st = mc_error(MC_ERR_UNSUPPORTED, "%s: not a float32, bfloat16 or float16 tensor", what);
    bool shape_ok = !st && t->ndim == nd && mc_pk_tensor_contiguous(t);
    for (int k = 0; shape_ok && k < nd; k++)
        shape_ok = t->shape[k] == cs[k];
    if (!st && !shape_ok)
        st = mc_error(MC_ERR_FORMAT, "%s: the tensor's shape is not the chunk's in %s", what,
                      r->meta_path);
    if (!st && dt != MC_DTYPE_F32 && !(*wide = mc_alloc((size_t)numel * sizeof(float) + 1)))
        st = MC_ERR_NOMEM;
    if (!st && *wide)
        mc_dtype_to_f32(*wide, (const char *)t->storage->data + (size_t)t->offset * mc_dtype_size(dt), dt, numel);
    if (!st)
        *vals = *wide ? *wide : (const float *)t->storage->data + t->offset;
    return st;
}

static mc_status copy_chunk(struct reader *r, const char *key, int nd, const int64_t *co,
                            const int64_t *cs, const int64_t *o, const int64_t *z, float *dst,
                            int64_t *copied)
{
    int64_t lo_ok = 1;
    for (int k = 0; k < nd; k++)
        lo_ok &= co[k] < o[k] + z[k] && o[k] < co[k] + cs[k];
    if (!lo_ok && nd)
        return MC_OK;
    mc_pk_doc *d;
    const float *v;
    float *wide;
    mc_status st = load_chunk(r, key, nd, co, cs, &d, &v, &wide);
    if (!st)
        *copied += copy_intersection(nd, co, cs, v, o, z, dst);
    mc_free(wide);
    if (d)
        mc_pk_doc_free(d);
    return st;
}

/* A flattened chunk (the distributed optimizer's state, Megatron's N-D flattened tensors): the
 * global tensor of shape g (nd dimensions) is cut into blocks of shape l, and the chunk holds
 * elements [co[nd], co[nd] + cs[nd]) of block co[0..nd-1] in row-major order. Copies its part
 * inside the region [o, o+z) into dst, run by run along the last dimension. */
static mc_status copy_flat_chunk(struct reader *r, const char *key, int nd, const int64_t *l,
                                 const int64_t *co, const int64_t *cs, const int64_t *o,
                                 const int64_t *z, float *dst, int64_t *copied)
{
    for (int k = 0; k < nd; k++) /* the block misses the region */
        if (co[k] * l[k] >= o[k] + z[k] || (co[k] + 1) * l[k] <= o[k])
            return MC_OK;
    mc_pk_doc *d;
    const float *v;
    float *wide;
    mc_status st = load_chunk(r, key, nd + 1, co, cs, &d, &v, &wide);
    int64_t f = co[nd], end = co[nd] + cs[nd];
    while (!st && f < end) {
        int64_t lc[MC_PK_MAX_DIM] = {0}, rem = f;
        for (int k = nd - 1; k >= 0; k--)
            lc[k] = rem % l[k], rem /= l[k];
        int64_t run = l[nd - 1] - lc[nd - 1] < end - f ? l[nd - 1] - lc[nd - 1] : end - f;
        int64_t di = 0;
        bool in = true;
        for (int k = 0; k < nd - 1; k++) {
            int64_t gk = co[k] * l[k] + lc[k];
            in &= gk >= o[k] && gk < o[k] + z[k];
            di = di * z[k] + (gk - o[k]);
        }
        int64_t g0 = co[nd - 1] * l[nd - 1] + lc[nd - 1], last = nd - 1;
        int64_t lo = g0 > o[last] ? g0 : o[last];
        int64_t hi = g0 + run < o[last] + z[last] ? g0 + run : o[last] + z[last];
        if (in && lo < hi) {
            di = di * z[last] + (lo - o[last]);
            memcpy(dst + di, v + (f - co[nd]) + (lo - g0), (size_t)(hi - lo) * sizeof(float));
            *copied += hi - lo;
        }
        f += run;
    }
    mc_free(wide);
    if (d)
        mc_pk_doc_free(d);
    return st;
}

/* The original global shape of a flattened tensor (mcore_data's
 * nd_reformulated_orig_global_shape); false for a regular one. */
static bool flat_shape(const struct reader *r, const char *key, int *nd, int64_t *g)
{
    const struct mc_pk *e = r->mcore ? mc_pk_get(r->mcore, key) : NULL;
    const struct mc_pk *sh = e && mc_pk_is_map(e) ? mc_pk_get(e, "nd_reformulated_orig_global_shape") : NULL;
    return sh && int_tuple(sh, MC_PK_MAX_DIM - 1, nd, g) && *nd > 0;
}

/* read_region of a flattened tensor: g its original global shape (nd dimensions), the chunks
 * DCP's reformulated ones (nd + 1 dimensions: block index, then the flattened range). */
static mc_status read_flat_region(struct reader *r, const char *key, const struct mc_pk *tm,
                                  const struct mc_pk *chunks, int nd, const int64_t *g,
                                  const int64_t *o, const int64_t *z, float *dst, int64_t want)
{
    int rn;
    int64_t rg[MC_PK_MAX_DIM], l[MC_PK_MAX_DIM], local = 1, copied = 0;
    bool ok = int_tuple(mc_pk_get(tm, "size"), MC_PK_MAX_DIM, &rn, rg) && rn == nd + 1;
    for (int k = 0; ok && k < nd; k++) {
        ok = rg[k] > 0 && g[k] % rg[k] == 0;
        l[k] = ok ? g[k] / rg[k] : 0;
        local *= l[k];
    }
    if (!ok || rg[nd] != local)
        return mc_error(MC_ERR_FORMAT, "%s: %s is a flattened tensor whose size is not blocks of its "
                        "original shape (mcore_data nd_reformulated_orig_global_shape)", r->meta_path, key);
    for (int64_t c = 0; c < chunks->n; c++) {
        int n1, n2;
        int64_t co[MC_PK_MAX_DIM], cs[MC_PK_MAX_DIM];
        bool good = int_tuple(mc_pk_get(chunks->items[c], "offsets"), MC_PK_MAX_DIM, &n1, co) &&
                    int_tuple(mc_pk_get(chunks->items[c], "sizes"), MC_PK_MAX_DIM, &n2, cs) &&
                    n1 == nd + 1 && n2 == nd + 1;
        for (int k = 0; good && k < nd; k++)
            good = cs[k] == 1 && co[k] < rg[k];
        if (!good || co[nd] > rg[nd] || cs[nd] > rg[nd] - co[nd])
            return mc_error(MC_ERR_FORMAT, "%s: a chunk of the flattened tensor %s is not a range "
                            "inside one block of %lld elements", r->meta_path, key, (long long)local);
        mc_status st = copy_flat_chunk(r, key, nd, l, co, cs, o, z, dst, &copied);
        if (st)
            return st;
    }
    if (copied != want)
        return mc_error(MC_ERR_FORMAT, "%s: the chunks of %s cover %lld of the %lld elements this "
                        "rank needs (missing or overlapping chunks)", r->meta_path, key,
                        (long long)copied, (long long)want);
    return MC_OK;
}

/* Reads the region [o, o+z) of the global tensor `key` into dst. */
static mc_status read_region(struct reader *r, const char *key, const struct mc_pk *tm, int nd,
                             const int64_t *g, const int64_t *o, const int64_t *z, float *dst)
{
    const struct mc_pk *chunks = mc_pk_get(tm, "chunks");
    if (!chunks || chunks->kind != MC_PK_LIST)
        return mc_error(MC_ERR_FORMAT, "%s: %s has no chunk list", r->meta_path, key);
    int64_t want = 1, copied = 0;
    for (int k = 0; k < nd; k++)
        want *= z[k];
    int fnd;
    int64_t fg[MC_PK_MAX_DIM];
    if (flat_shape(r, key, &fnd, fg))
        return read_flat_region(r, key, tm, chunks, nd, g, o, z, dst, want);
    for (int64_t c = 0; c < chunks->n; c++) {
        int n1, n2;
        int64_t co[MC_PK_MAX_DIM], cs[MC_PK_MAX_DIM];
        if (!int_tuple(mc_pk_get(chunks->items[c], "offsets"), MC_PK_MAX_DIM, &n1, co) ||
            !int_tuple(mc_pk_get(chunks->items[c], "sizes"), MC_PK_MAX_DIM, &n2, cs) || n1 != nd || n2 != nd)
            return mc_error(MC_ERR_FORMAT, "%s: a chunk of %s is not (offsets, sizes) of its %d "
                            "dimensions", r->meta_path, key, nd);
        for (int k = 0; k < nd; k++)
            if (co[k] > g[k] || cs[k] > g[k] - co[k])
                return mc_error(MC_ERR_FORMAT, "%s: a chunk of %s reaches [%lld, %lld) in dimension "
                                "%d, outside the tensor's size %lld", r->meta_path, key,
                                (long long)co[k], (long long)(co[k] + cs[k]), k, (long long)g[k]);
        mc_status st = copy_chunk(r, key, nd, co, cs, o, z, dst, &copied);
        if (st)
            return st;
    }
    if (copied != want)
        return mc_error(MC_ERR_FORMAT, "%s: the chunks of %s cover %lld of the %lld elements this "
                        "rank needs (missing or overlapping chunks)", r->meta_path, key,
                        (long long)copied, (long long)want);
    return MC_OK;
}

/* The global tensor metadata of key: TensorStorageMetadata with size; NULL if absent. */
static const struct mc_pk *tensor_meta(const struct reader *r, const char *key, int *nd, int64_t *size)
{
    const struct mc_pk *tm = mc_pk_get(r->sdm, key);
    if (!tm || tm->kind != MC_PK_OBJECT || !strstr(tm->s, "TensorStorageMetadata") ||
        !int_tuple(mc_pk_get(tm, "size"), MC_PK_MAX_DIM, nd, size))
        return NULL;
    flat_shape(r, key, nd, size); /* a flattened tensor: its original shape */
    return tm;
}

mc_status mc_dist_ckpt_place(const mc_gpt_model *m, const char *local, struct mc_dist_place *p)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(m);
    char te[512];
    bool absent = false, tied = !c->untie_embeddings_and_output_weights;
    if (tied && !strcmp(local, "output_layer.weight")) /* the last stage's copy of the embedding */
        local = "embedding.word_embeddings.weight";
    mc_status st = mc_sd_name_map(MC_SD_LOCAL, MC_SD_TE, local, tied, te, sizeof(te), &absent);
    if (st || absent)
        return st ? st : mc_error(MC_ERR_INTERNAL, "%s has no TE-spec name", local);
    long l;
    int used = 0;
    p->layer = -1;
    if (sscanf(te, "decoder.layers.%ld.%n", &l, &used) == 1 && used) {
        int pp = c->pipeline_model_parallel_size > 1 ? c->pipeline_model_parallel_size : 1;
        int vp = c->virtual_pipeline_model_parallel_size > 1 ? c->virtual_pipeline_model_parallel_size : 1;
        int64_t n, offset; /* the chunk's global layer numbers (uneven splits too) */
        mc_gpt_stage_layers(c, pp > 1 ? c->pipeline_model_parallel_rank : 0,
                            vp > 1 ? c->virtual_pipeline_model_parallel_rank : 0, &n, &offset);
        p->layer = (long)(offset + l);
        snprintf(p->key, sizeof(p->key), "decoder.layers.%s", te + used);
    } else {
        snprintf(p->key, sizeof(p->key), "%s", te);
    }
    return MC_OK;
}

/* Reads this rank's part of the global tensor `key` for a parameter of local shape
 * (ndim, shape): the layer row of the prepended axis, the tensor-parallel shard (a dimension
 * the checkpoint holds tp times larger), SwiGLU's fc1 as the two halves [gate; up]. */
static mc_status read_param_tensor(struct reader *r, const mc_gpt_model *m, const char *key,
                                   long layer, int ndim, const int64_t *shape, int64_t numel,
                                   float *dst)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(m);
    int nd;
    int64_t g[MC_PK_MAX_DIM], o[MC_PK_MAX_DIM] = {0}, z[MC_PK_MAX_DIM];
    const struct mc_pk *tm = tensor_meta(r, key, &nd, g);
    int pre = layer >= 0 ? 1 : 0;
    if (!tm)
        return mc_error(MC_ERR_FORMAT, "%s: the checkpoint has no tensor %s (another model: "
                        "--num-layers, --untie-embeddings-and-output-weights, biases, "
                        "normalization?)", r->meta_path, key);
    if (nd != ndim + pre)
        return mc_error(MC_ERR_FORMAT, "%s: %s has %d dimensions, this model's has %d%s",
                        r->meta_path, key, nd, ndim + pre, pre ? " (with the layer axis)" : "");
    if (pre) {
        if (layer >= g[0])
            return mc_error(MC_ERR_FORMAT, "%s: %s holds %lld layers, this model needs layer %ld "
                            "(another --num-layers?)", r->meta_path, key, (long long)g[0], layer);
        o[0] = layer;
        z[0] = 1;
    }
    int tp = c->tensor_model_parallel_size > 1 ? c->tensor_model_parallel_size : 1;
    int tr = c->tensor_model_parallel_rank;
    bool swiglu_fc1 = c->activation == MC_ACT_SWIGLU && strstr(key, "mlp.linear_fc1.") &&
                      !strstr(key, "layer_norm");
    int split = -1;
    for (int k = 0; k < ndim; k++) {
        int64_t gk = g[pre + k];
        z[pre + k] = shape[k];
        if (gk == shape[k])
            continue;
        if (gk != shape[k] * tp || split >= 0) {
            bool vocab = strstr(key, "word_embeddings") || strstr(key, "output_layer");
            return mc_error(MC_ERR_CONFIG, "%s: %s is %lld in dimension %d, this rank's shard is "
                            "%lld with --tensor-model-parallel-size %d%s", r->meta_path, key,
                            (long long)gk, k, (long long)shape[k], tp,
                            vocab ? " (the padded vocabulary differs: the checkpoint was padded "
                                    "with another --make-vocab-size-divisible-by x tensor-parallel "
                                    "size; choose --make-vocab-size-divisible-by so that both pad "
                                    "to the same size)" : " (another model size?)");
        }
        split = k;
        o[pre + k] = (int64_t)tr * shape[k];
    }
    if (!swiglu_fc1 || split < 0)
        return read_region(r, key, tm, nd, g, o, z, dst);
    /* [gate; up] of the whole layer, each rank holding its rows of both halves */
    if (split != 0 || shape[0] % 2)
        return mc_error(MC_ERR_FORMAT, "%s: %s: SwiGLU fc1 is not split along its rows",
                        r->meta_path, key);
    int64_t half = shape[0] / 2, ghalf = g[pre] / 2;
    z[pre] = half;
    o[pre] = (int64_t)tr * half;
    mc_status st = read_region(r, key, tm, nd, g, o, z, dst);
    o[pre] = ghalf + (int64_t)tr * half;
    return st ? st : read_region(r, key, tm, nd, g, o, z, dst + numel / 2);
}

/* A float32 tensor of the local shape, read from the checkpoint, owned by the doc. */
static mc_status param_pk(mc_pk_doc *d, struct reader *r, const mc_gpt_model *m, const char *key,
                          long layer, const struct mc_param_view *p, struct mc_pk **out)
{
    float *tmp = mc_alloc((size_t)p->numel * sizeof(float) + 1);
    if (!tmp)
        return MC_ERR_NOMEM;
    mc_status st = read_param_tensor(r, m, key, layer, p->ndim, p->shape, p->numel, tmp);
    struct mc_pk *bytes = st ? NULL : mc_pk_bytes(d, tmp, (size_t)p->numel * sizeof(float));
    mc_free(tmp);
    if (st)
        return st;
    *out = bytes ? mc_pk_tensor(d, mc_pk_storage(d, MC_DTYPE_F32, p->numel, bytes->s), 0,
                                p->ndim, p->shape, NULL) : NULL;
    return *out ? MC_OK : MC_ERR_NOMEM;
}

/* Replaces (or adds) a key of a Namespace / dict. */
static mc_status put(mc_pk_doc *d, struct mc_pk *map, const char *key, struct mc_pk *v)
{
    for (int64_t i = 0; i + 1 < map->n; i += 2)
        if (map->items[i]->kind == MC_PK_STR && !strcmp(map->items[i]->s, key)) {
            map->items[i + 1] = v;
            return v ? MC_OK : MC_ERR_NOMEM;
        }
    return mc_pk_set(d, map, key, v);
}

static mc_status model_dict(mc_pk_doc *d, struct reader *r, const mc_gpt_model *m, struct mc_pk **out)
{
    struct mc_pk *od = mc_pk_new(d, MC_PK_ODICT);
    if (!od)
        return MC_ERR_NOMEM;
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
        struct mc_param_view p = mc_gpt_param(m, i);
        struct mc_dist_place pl;
        struct mc_pk *t;
        mc_status st = mc_dist_ckpt_place(m, p.name, &pl);
        if (st || (st = param_pk(d, r, m, pl.key, pl.layer, &p, &t)) || (st = mc_pk_set(d, od, p.name, t)))
            return st;
    }
    *out = od;
    return MC_OK;
}

/* The optimizer's state in torch's layout: index k -> {step, exp_avg, exp_avg_sq} (Adam) or
 * {momentum_buffer} (SGD), k numbered as the torch loader expects; "optimizer.state.<name>.<key>"
 * in the checkpoint, the step from common.pt's optimizer.state.common_step. */
static mc_status optimizer_dict(mc_pk_doc *d, struct reader *r, const struct mc_ckpt_state *s,
                                const struct mc_pk *common_opt, struct mc_pk **out)
{
    int64_t n = mc_ckpt_total_params(s), n_first;
    bool first_decay;
    int64_t *order = mc_alloc((size_t)n * 2 * sizeof(int64_t));
    if (!order)
        return MC_ERR_NOMEM;
    mc_ckpt_group_order(s, MC_SD_LOCAL, order, &n_first, &first_decay);
    const struct mc_pk *cstate = mc_pk_get(common_opt, "state");
    struct mc_pk *step = mc_pk_get(cstate, "common_step");
    bool adam = mc_opt_param_state(s->opt, 0).exp_avg != NULL;
    static const char *const adam_names[] = {"exp_avg", "exp_avg_sq", NULL};
    static const char *const sgd_names[] = {"momentum_buffer", NULL};
    const char *const *names = adam ? adam_names : sgd_names;
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT), *state = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *groups = mc_pk_new(d, MC_PK_LIST);
    mc_status st = o && state && groups ? MC_OK : MC_ERR_NOMEM;
    for (int64_t k = 0; !st && k < n; k++) {
        struct mc_param_view p = mc_ckpt_opt_param(s, order[k]);
        const mc_gpt_model *m = mc_ckpt_opt_param_model(s, order[k]);
        struct mc_dist_place pl;
        if ((st = mc_dist_ckpt_place(m, p.name, &pl)))
            break;
        char key[700];
        snprintf(key, sizeof(key), "optimizer.state.%s.%s", names[0], pl.key);
        int nd;
        int64_t g[MC_PK_MAX_DIM];
        if (!tensor_meta(r, key, &nd, g)) {
            if (k == 0)
                break; /* no state saved: torch keeps none before the first step */
            st = mc_error(MC_ERR_FORMAT, "%s: the checkpoint has no %s (an optimizer other than "
                          "--optimizer %s?)", r->meta_path, key, adam ? "adam" : "sgd");
            break;
        }
        struct mc_pk *ps = mc_pk_new(d, MC_PK_DICT);
        if (!ps) {
            st = MC_ERR_NOMEM;
            break;
        }
        if (adam && step)
            st = mc_pk_set(d, ps, "step", step);
        for (int j = 0; !st && names[j]; j++) {
            struct mc_pk *t;
            snprintf(key, sizeof(key), "optimizer.state.%s.%s", names[j], pl.key);
            st = param_pk(d, r, m, key, pl.layer, &p, &t);
            st = st ? st : mc_pk_set(d, ps, names[j], t);
        }
        if (!st && (st = mc_pk_append(d, state, mc_pk_int(d, k))) == MC_OK)
            st = mc_pk_append(d, state, ps);
    }
    /* param_groups numbered as the model's groups (common.pt holds rank 0's only) */
    for (int g = 0; !st && g < (n_first < n ? 2 : 1); g++) {
        struct mc_pk *pg = mc_pk_new(d, MC_PK_DICT), *params = mc_pk_new(d, MC_PK_LIST);
        for (int64_t k = g ? n_first : 0; pg && params && k < (g ? n : n_first); k++)
            if ((st = mc_pk_append(d, params, mc_pk_int(d, k))))
                break;
        st = st ? st : !pg || !params ? MC_ERR_NOMEM : mc_pk_set(d, pg, "params", params);
        st = st ? st : mc_pk_append(d, groups, pg);
    }
    st = st ? st : mc_pk_set(d, o, "state", state);
    st = st ? st : mc_pk_set(d, o, "param_groups", groups);
    mc_free(order);
    if (!st)
        *out = o;
    return st;
}

/* A --bf16 / --fp16 save's optimizer (Float16OptimizerWithFloat16Params.state_dict()): common.pt
 * holds {'optimizer': the torch optimizer's param_groups and common_step, 'grad_scaler' (with a
 * scaler)}; the fp32 main params are "optimizer.state.fp32_param.<key>", read back into
 * 'fp32_from_fp16_params' (a list per param group, in the groups' order) exactly. */
static mc_status float16_dict(mc_pk_doc *d, struct reader *r, const struct mc_ckpt_state *s,
                              const struct mc_pk *common_opt, struct mc_pk **out)
{
    struct mc_pk *inner, *o = mc_pk_new(d, MC_PK_DICT), *groups = mc_pk_new(d, MC_PK_LIST);
    mc_status st = o && groups ? optimizer_dict(d, r, s, mc_pk_get(common_opt, "optimizer"), &inner)
                               : MC_ERR_NOMEM;
    struct mc_pk *scaler = mc_pk_get(common_opt, "grad_scaler");
    st = st ? st : mc_pk_set(d, o, "optimizer", inner);
    if (!st && scaler)
        st = mc_pk_set(d, o, "grad_scaler", scaler);
    int64_t n = mc_ckpt_total_params(s), n_first;
    bool first_decay;
    int64_t *order = st ? NULL : mc_alloc((size_t)n * 2 * sizeof(int64_t));
    if (!st && !order)
        st = MC_ERR_NOMEM;
    if (!st)
        mc_ckpt_group_order(s, MC_SD_LOCAL, order, &n_first, &first_decay);
    for (int g = 0; !st && g < (n_first < n ? 2 : 1); g++) {
        struct mc_pk *list = mc_pk_new(d, MC_PK_LIST);
        st = list ? mc_pk_append(d, groups, list) : MC_ERR_NOMEM;
        for (int64_t k = g ? n_first : 0; !st && k < (g ? n : n_first); k++) {
            struct mc_param_view p = mc_ckpt_opt_param(s, order[k]);
            const mc_gpt_model *m = mc_ckpt_opt_param_model(s, order[k]);
            struct mc_dist_place pl;
            char key[700];
            int nd;
            int64_t gs[MC_PK_MAX_DIM];
            struct mc_pk *t;
            if ((st = mc_dist_ckpt_place(m, p.name, &pl)))
                break;
            snprintf(key, sizeof(key), "optimizer.state.fp32_param.%s", pl.key);
            if (!tensor_meta(r, key, &nd, gs))
                st = mc_error(MC_ERR_FORMAT, "%s: the checkpoint has no %s (the fp32 main params of a "
                              "--bf16/--fp16 save)", r->meta_path, key);
            st = st ? st : param_pk(d, r, m, key, pl.layer, &p, &t);
            st = st ? st : mc_pk_append(d, list, t);
        }
    }
    mc_free(order);
    st = st ? st : mc_pk_set(d, o, "fp32_from_fp16_params", groups);
    if (!st)
        *out = o;
    return st;
}

/* The step of a torch_dist save's optimizer: the distributed optimizer's param_groups carry it,
 * the ordinary one's common_step (a 0-dim tensor in common.pt). */
static bool saved_step(const struct mc_pk *groups, const struct mc_pk *torch_opt, double *step)
{
    if (groups && groups->kind == MC_PK_LIST && groups->n && mc_pk_number(mc_pk_get(groups->items[0], "step"), step))
        return true;
    const struct mc_pk *t = mc_pk_get(mc_pk_get(torch_opt, "state"), "common_step");
    if (!t || t->kind != MC_PK_TENSOR || mc_pk_tensor_numel(t) != 1 || t->storage->dtype != MC_DTYPE_F32)
        return false;
    *step = ((const float *)t->storage->data)[t->offset];
    return true;
}

/* The value of sharded object `fqn` (torch.save of [value] in a .distcp file), read into the
 * doc (the bytes are copied: the file mappings close before the state dict is used). NULL
 * *out when the checkpoint has no such object and !required. */
static mc_status read_object(mc_pk_doc *d, struct reader *r, const char *fqn, bool required,
                             struct mc_pk **out)
{
    *out = NULL;
    for (int64_t i = 0; i + 1 < r->storage->n; i += 2) {
        const struct mc_pk *f = mc_pk_get(r->storage->items[i], "fqn");
        if (!f || f->kind != MC_PK_STR || strcmp(f->s, fqn))
            continue;
        /* (find_storage matches chunk offsets; an object's MetadataIndex has offset None) */
        const struct dfile *df;
        uint64_t off, len;
        mc_status st;
        const struct mc_pk *info = r->storage->items[i + 1];
        const struct mc_pk *path = mc_pk_get(info, "relative_path");
        const struct mc_pk *bo = mc_pk_get(info, "offset"), *bl = mc_pk_get(info, "length");
        if (!path || path->kind != MC_PK_STR || !bo || bo->kind != MC_PK_INT || bo->i < 0 || !bl ||
            bl->kind != MC_PK_INT || bl->i < 0)
            return mc_error(MC_ERR_FORMAT, "%s: storage_data of %s is not (relative_path, offset, "
                            "length)", r->meta_path, fqn);
        if ((st = data_file(r, path->s, &df)))
            return st;
        off = (uint64_t)bo->i, len = (uint64_t)bl->i;
        if (off > df->size || len > df->size - off)
            return mc_error(MC_ERR_FORMAT, "%s/%s: the object %s at bytes [%llu, %llu) lies outside "
                            "the file (%zu bytes): truncated or not this checkpoint's file", r->dir,
                            path->s, fqn, (unsigned long long)off, (unsigned long long)(off + len),
                            df->size);
        uint8_t *copy = mc_pk_doc_alloc(d, len ? len : 1);
        struct mc_pk *list;
        char what[800];
        snprintf(what, sizeof(what), "%s/%s (object %s)", r->dir, path->s, fqn);
        if (!copy)
            return MC_ERR_NOMEM;
        memcpy(copy, df->map + off, len);
        if ((st = mc_torch_load_mem(d, what, copy, len, &list)))
            return st;
        if (list->kind != MC_PK_LIST || list->n != 1)
            return mc_error(MC_ERR_FORMAT, "%s: expected torch.save([value]) as Megatron's torch "
                            "strategy stores a sharded object", what);
        *out = list->items[0];
        return MC_OK;
    }
    if (required)
        return mc_error(MC_ERR_FORMAT, "%s: no sharded object %s (the distributed optimizer's "
                        "'dp_zero_gather_scatter' state of this model-parallel rank)", r->meta_path, fqn);
    return MC_OK;
}

/* Sharding type 'dp_zero_gather_scatter' (saved with --no-ckpt-fully-parallel-save): the
 * objects of this rank's model-parallel group (dp_group_idx = pp_rank * tp + tp_rank), as
 * DistributedOptimizer.load_state_dict takes them: {'optimizer': {'param_groups'}, 'grad_scaler',
 * 'param_state': the gathered buffers, 'param_state_sharding_type'}. Megatron scatters them from
 * data-parallel rank 0; here every rank reads them (the same values) and keeps its shard, so any
 * data-parallel size loads. Another tensor / pipeline layout cannot: the buffers are those of
 * the saving ranks' model chunks (Megatron refuses it, and so do we, with its message). */
static mc_status dp_zero_state(mc_pk_doc *d, struct reader *r, const struct mc_ckpt_state *s,
                               struct mc_pk **out)
{
    const struct mc_gpt_config *mc = mc_gpt_model_config(s->model);
    int64_t tp = mc->tensor_model_parallel_size > 1 ? mc->tensor_model_parallel_size : 1;
    if (tp != r->saved_tp || (mc->pipeline_model_parallel_size > 1 ? mc->pipeline_model_parallel_size : 1) != r->saved_pp)
        return mc_error(MC_ERR_INTERNAL, "%s: dp_zero_gather_scatter state at another layout "
                        "(checkpoint.c refuses it first)", r->dir);
    char key[160];
    long group = (long)(s->pp_rank * tp + s->tp_rank);
    struct mc_pk *opt, *scaler, *state, *o = mc_pk_new(d, MC_PK_DICT);
    if (!o)
        return MC_ERR_NOMEM;
    snprintf(key, sizeof(key), "optimizer.distributed.dp_group_idx_%ld.optimizer/shard_0_1", group);
    mc_status st = read_object(d, r, key, true, &opt);
    snprintf(key, sizeof(key), "optimizer.distributed.dp_group_idx_%ld.grad_scaler/shard_0_1", group);
    st = st ? st : read_object(d, r, key, false, &scaler);
    snprintf(key, sizeof(key), "optimizer.distributed.dp_group_idx_%ld.param_state/shard_0_1", group);
    st = st ? st : read_object(d, r, key, true, &state);
    if (!st && (!mc_pk_is_map(opt) || !mc_pk_get(opt, "param_groups")))
        st = mc_error(MC_ERR_FORMAT, "%s: optimizer.distributed.dp_group_idx_%ld.optimizer is not "
                      "{'param_groups': [...]}", r->meta_path, group);
    st = st ? st : mc_pk_set(d, o, "optimizer", opt);
    if (!st && scaler)
        st = mc_pk_set(d, o, "grad_scaler", scaler);
    st = st ? st : mc_pk_set(d, o, "param_state", state);
    st = st ? st : mc_pk_set(d, o, "param_state_sharding_type", mc_pk_str(d, "dp_zero_gather_scatter"));
    if (!st)
        *out = o;
    return st;
}

/* For a --use-distributed-optimizer run: DistributedOptimizer.state_dict()'s form with the
 * parameter state in model space, as checkpoint.c's load_distopt takes it:
 *   {'optimizer': {'param_groups': [... each with 'step']}, 'grad_scaler' (if saved),
 *    'param_state': {gi: {'exp_avg', 'exp_avg_sq' | 'momentum_buffer', ['fp32_param']}}}
 * gi the parameter's index over the model chunks, each tensor this rank's whole (tensor-
 * parallel) parameter; the loader keeps its data-parallel shard. Read from the distributed
 * optimizer's flattened state ('fully_sharded_model_space', any data-parallel size) or the
 * ordinary optimizer's (then fp32_param only with --bf16/--fp16: fp32 main params are the
 * model's weights). */
static mc_status distopt_state(mc_pk_doc *d, struct reader *r, const struct mc_ckpt_state *s,
                               const struct mc_pk *copt, struct mc_pk **out)
{
    const struct mc_pk *type = mc_pk_get(copt, "param_state_sharding_type");
    if (type && type->kind == MC_PK_STR && !strcmp(type->s, "dp_zero_gather_scatter"))
        return dp_zero_state(d, r, s, out);
    if (type && (type->kind != MC_PK_STR || strcmp(type->s, "fully_sharded_model_space")))
        return mc_error(MC_ERR_UNSUPPORTED, "%s/common.pt: distributed optimizer state of sharding "
                        "type '%s', which megatron.c does not read (only 'fully_sharded_model_space', "
                        "Megatron's default, and 'dp_zero_gather_scatter', of "
                        "--no-ckpt-fully-parallel-save); add --no-load-optim",
                        r->dir, type->kind == MC_PK_STR ? type->s : "?");
    /* the torch optimizer's dict: the distributed optimizer's and a --bf16/--fp16 save's under
     * 'optimizer', an fp32 ordinary optimizer's the dict itself */
    const struct mc_pk *torch = mc_pk_get(copt, "optimizer") ? mc_pk_get(copt, "optimizer") : copt;
    struct mc_pk *groups = mc_pk_get(torch, "param_groups");
    double step;
    if (!groups || groups->kind != MC_PK_LIST || !saved_step(groups, torch, &step))
        return mc_error(MC_ERR_FORMAT, "%s/common.pt: the optimizer has no param_groups with a step "
                        "(nor optimizer.state.common_step); specify --no-load-optim", r->dir);
    for (int64_t g = 0; g < groups->n; g++)
        if (!mc_pk_is_map(groups->items[g]) || put(d, groups->items[g], "step", mc_pk_float(d, step)))
            return MC_ERR_NOMEM;
    struct mc_pk *o = mc_pk_new(d, MC_PK_DICT), *inner = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *state = mc_pk_new(d, MC_PK_DICT);
    struct mc_pk *scaler = mc_pk_get(copt, "grad_scaler");
    mc_status st = o && inner && state ? MC_OK : MC_ERR_NOMEM;
    st = st ? st : mc_pk_set(d, inner, "param_groups", groups);
    st = st ? st : mc_pk_set(d, o, "optimizer", inner);
    if (!st && scaler)
        st = mc_pk_set(d, o, "grad_scaler", scaler);
    struct mc_distopt_shard sh;
    mc_distopt_shard(s->distopt, &sh);
    const char *names[3] = {"exp_avg", "exp_avg_sq", "fp32_param"};
    if (!sh.exp_avg)
        names[0] = "momentum_buffer", names[1] = NULL;
    int64_t n = mc_ckpt_total_params(s);
    for (int64_t gi = 0; !st && gi < n; gi++) {
        struct mc_param_view p = mc_ckpt_opt_param(s, gi);
        const mc_gpt_model *m = mc_ckpt_opt_param_model(s, gi);
        struct mc_dist_place pl;
        struct mc_pk *ps = mc_pk_new(d, MC_PK_DICT);
        if (!ps || (st = mc_dist_ckpt_place(m, p.name, &pl)))
            st = st ? st : MC_ERR_NOMEM;
        for (int j = 0; !st && j < 3; j++) {
            char key[700];
            int nd;
            int64_t gs[MC_PK_MAX_DIM];
            struct mc_pk *t;
            if (!names[j])
                continue;
            snprintf(key, sizeof(key), "optimizer.state.%s.%s", names[j], pl.key);
            if (!tensor_meta(r, key, &nd, gs)) {
                if (j == 2 && !type && s->params_dtype == MC_DTYPE_F32)
                    continue; /* an fp32 ordinary optimizer's main params are the weights */
                st = mc_error(MC_ERR_FORMAT, "%s: the checkpoint has no %s (saved with another "
                              "--optimizer or precision, or at iteration 0?); specify "
                              "--no-load-optim", r->meta_path, key);
                break;
            }
            st = param_pk(d, r, m, key, pl.layer, &p, &t);
            st = st ? st : mc_pk_set(d, ps, names[j], t);
        }
        if (!st && (st = mc_pk_append(d, state, mc_pk_int(d, gi))) == MC_OK)
            st = mc_pk_append(d, state, ps);
    }
    st = st ? st : mc_pk_set(d, o, "param_state", state);
    if (!st)
        *out = o;
    return st;
}

/* A distributed optimizer's state read by the ordinary optimizer: Megatron core_v0.12.1 fails
 * in its load planner (the optimizer.state tensors are stored flattened), and so do we. */
static mc_status distopt_saved(const struct reader *r, const struct mc_pk *type)
{
    if (type && type->kind == MC_PK_STR && !strcmp(type->s, "dp_zero_gather_scatter"))
        return mc_error(MC_ERR_CONFIG, "%s: the optimizer state was saved with "
                        "--use-distributed-optimizer --no-ckpt-fully-parallel-save (sharding type "
                        "'dp_zero_gather_scatter': no optimizer.state tensors, which the ordinary "
                        "optimizer loads); add --use-distributed-optimizer to load it, or "
                        "--no-load-optim", r->dir);
    return mc_error(MC_ERR_CONFIG, "%s: the optimizer state was saved with --use-distributed-optimizer "
                    "(flattened, 'fully_sharded_model_space'), which the ordinary optimizer does not "
                    "load (Megatron: CheckpointingException: Global shape mismatch for loaded ... and "
                    "expected ... tensor for key optimizer.state.exp_avg...); add "
                    "--use-distributed-optimizer to load it, or --no-load-optim", r->dir);
}

/* load_checkpoint requests this rank's rerun_state_machine_state object when common.pt has a
 * rerun_state_machine, the (TP, PP) is the saving run's and neither a release checkpoint nor
 * --finetune is loaded; Megatron's load fails without it. Its value is checked to be the
 * machine's dict and then ignored, as Megatron's disabled machine ignores it. */
static mc_status rerun_state(mc_pk_doc *d, struct reader *r, const struct mc_ckpt_state *s,
                             const struct mc_pk *common)
{
    const char *base = strrchr(r->dir, '/');
    base = base ? base + 1 : r->dir;
    int tp = s->tp_size > 1 ? s->tp_size : 1, pp = s->pp_size > 1 ? s->pp_size : 1;
    if (!mc_pk_get(common, "rerun_state_machine") || tp != r->saved_tp || pp != r->saved_pp ||
        !strcmp(base, "release") || s->opts.finetune)
        return MC_OK;
    char key[128];
    struct mc_pk *v;
    mc_dist_ckpt_rerun_key(key, sizeof(key), s->pp_rank, s->tp_rank, pp, tp);
    mc_status st = read_object(d, r, key, false, &v);
    if (!st && !v)
        st = mc_error(MC_ERR_FORMAT, "%s: no sharded object %s, which common.pt's "
                      "rerun_state_machine says the checkpoint holds (Megatron's load fails on "
                      "it too); --finetune loads without it", r->meta_path, key);
    if (!st && !mc_pk_is_map(v))
        st = mc_error(MC_ERR_FORMAT, "%s: the sharded object %s is not RerunStateMachine's "
                      "state dict", r->meta_path, key);
    return st;
}

/* ---- --dist-ckpt-strictness: Megatron's StrictHandling (dist_checkpointing/validation.py) ---- */
struct keyset {
    char (*k)[512];
    int64_t n, cap;
};

static bool ks_has(const struct keyset *ks, const char *key)
{
    for (int64_t i = 0; i < ks->n; i++)
        if (!strcmp(ks->k[i], key))
            return true;
    return false;
}

static mc_status ks_add(struct keyset *ks, const char *key)
{
    if (ks_has(ks, key))
        return MC_OK;
    if (ks->n == ks->cap) {
        int64_t cap = ks->cap ? 2 * ks->cap : 64;
        char (*k)[512] = mc_alloc((size_t)cap * sizeof(*k));
        if (!k)
            return MC_ERR_NOMEM;
        if (ks->n)
            memcpy(k, ks->k, (size_t)ks->n * sizeof(*k));
        mc_free(ks->k);
        ks->k = k, ks->cap = cap;
    }
    snprintf(ks->k[ks->n++], sizeof(ks->k[0]), "%s", key);
    return MC_OK;
}

static int ks_cmp(const void *a, const void *b) { return strcmp(a, b); }

/* A Python set's repr of the keys (sorted: Python's order is its hashing's). */
static void ks_repr(struct keyset *ks, char *out, size_t n)
{
    qsort(ks->k, (size_t)ks->n, sizeof(ks->k[0]), ks_cmp);
    size_t at = (size_t)snprintf(out, n, "{");
    for (int64_t i = 0; i < ks->n && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, "%s'%s'", i ? ", " : "", ks->k[i]);
    if (at < n)
        snprintf(out + at, n - at, "}");
}

/* The keys this run's sharded state dict requests over all its ranks (the model's are the same
 * global keys at every layout: this rank's, the embedding / final norm / output layer of the
 * other stages, the linear layers' _extra_state objects), and this rank's own parameters'. */
static mc_status requested_keys(const struct mc_ckpt_state *s, struct keyset *all, struct keyset *mine)
{
    int nc = s->n_chunks > 1 ? s->n_chunks : 1;
    mc_status st = MC_OK;
    for (int c = 0; !st && c < nc; c++) {
        const mc_gpt_model *m = nc > 1 ? s->chunks[c] : s->model;
        for (int64_t i = 0; !st && i < mc_gpt_num_params(m); i++) {
            struct mc_dist_place pl;
            st = mc_dist_ckpt_place(m, mc_gpt_param(m, i).name, &pl);
            st = st ? st : ks_add(all, pl.key);
            st = st ? st : ks_add(mine, pl.key);
            char *dot = strrchr(pl.key, '.');
            if (!st && pl.layer >= 0 && dot && strstr(pl.key, ".linear_")) {
                strcpy(dot, "._extra_state");
                st = ks_add(all, pl.key);
            }
        }
    }
    const struct mc_gpt_config *c = mc_gpt_model_config(s->model);
    st = st ? st : ks_add(all, "embedding.word_embeddings.weight");
    if (!st && c->position_embedding_type == MC_POS_LEARNED_ABSOLUTE)
        st = ks_add(all, "embedding.position_embeddings.weight");
    st = st ? st : ks_add(all, "decoder.final_layernorm.weight");
    if (!st && c->normalization == MC_NORM_LAYERNORM)
        st = ks_add(all, "decoder.final_layernorm.bias");
    if (!st && c->untie_embeddings_and_output_weights)
        st = ks_add(all, "output_layer.weight");
    return st;
}

/* Whether load_checkpoint requests the checkpoint's key `base` (a sharded object's without its
 * /shard_ suffix) beyond the model: the optimizer's state when it loads it, the rng_state and
 * rerun_state_machine_state objects when the layout is the saving one. */
static bool requested_extra(const struct reader *r, const struct mc_ckpt_state *s,
                            const struct mc_pk *common, const char *base)
{
    const struct mc_pk *args = mc_pk_get(common, "args");
    const char *dir = strrchr(r->dir, '/');
    bool release = !strcmp(dir ? dir + 1 : r->dir, "release");
    int tp = s->tp_size > 1 ? s->tp_size : 1, pp = s->pp_size > 1 ? s->pp_size : 1;
    bool same = tp == r->saved_tp && pp == r->saved_pp && !release && !s->opts.finetune;
    double v = 0;
    if (!strncmp(base, "optimizer.", 10))
        return !release && !s->opts.finetune && s->opts.load_optim && (s->opt || s->distopt) &&
               !(mc_pk_number(mc_pk_get(args, "no_save_optim"), &v) && v);
    if (!strcmp(base, "rng_state"))
        return same && s->opts.load_rng && !(mc_pk_number(mc_pk_get(args, "no_save_rng"), &v) && v);
    if (!strcmp(base, "rerun_state_machine_state"))
        return same && mc_pk_get(common, "rerun_state_machine");
    return false;
}

/* One warning as Megatron's logger prints it, in a write of its own (flushed before and after,
 * as its StreamHandler flushes each record). mpirun forwards it line by line, so another
 * rank's line can still fall between the two lines of a message (as under torchrun). */
static void warn_all(FILE *out, const char *msg)
{
    fflush(out);
    fprintf(out, "WARNING:megatron.core.dist_checkpointing.validation:%s\n", msg);
    fflush(out);
}

/* Megatron's validate_integrity_and_strict_load before the load: "unexpected" keys (this rank
 * requests them, the checkpoint lacks them) and, for the *_all modes, "missing" ones (the
 * checkpoint holds them, no rank requests them), raised or logged (by every rank, each with its
 * own unexpected keys, as Megatron's logger) with Megatron's message. The load then goes on as
 * Megatron's: an unexpected parameter still fails it (Megatron's model.load_state_dict is
 * strict), missing keys are not read. */
static mc_status strict_check(const struct reader *r, const struct mc_ckpt_state *s,
                              const struct mc_pk *common, FILE *log)
{
    const char *mode = s->opts.strictness ? s->opts.strictness : "assume_ok_unexpected";
    if (!strcmp(mode, "assume_ok_unexpected") || !strncmp(mode, "return_", 7) || !strcmp(mode, "ignore_all"))
        return MC_OK; /* nothing reported (the returned keys of return_* have no taker) */
    bool all_keys = !strcmp(mode, "log_all") || !strcmp(mode, "raise_all");
    bool raise = !strncmp(mode, "raise_", 6);
    struct keyset req = {0}, mine = {0}, unexpected = {0}, missing = {0};
    mc_status st = requested_keys(s, &req, &mine);
    for (int64_t i = 0; !st && i < mine.n; i++)
        if (!mc_pk_get(r->sdm, mine.k[i]))
            st = ks_add(&unexpected, mine.k[i]);
    for (int64_t i = 0; !st && all_keys && i + 1 < r->sdm->n; i += 2) {
        const struct mc_pk *k = r->sdm->items[i];
        char base[512];
        if (k->kind != MC_PK_STR)
            continue;
        snprintf(base, sizeof(base), "%s", k->s);
        char *sh = strstr(base, "/shard_");
        if (sh)
            *sh = 0;
        if (!ks_has(&req, base) && !requested_extra(r, s, common, base))
            st = ks_add(&missing, base);
    }
    if (!st && (missing.n || unexpected.n)) {
        size_t n = 65536;
        char *msg = mc_alloc(n), *a = mc_alloc(n / 2), *b = mc_alloc(n / 2);
        if (!msg || !a || !b) {
            st = MC_ERR_NOMEM;
        } else {
            ks_repr(&missing, a, n / 2);
            ks_repr(&unexpected, b, n / 2);
            size_t at = 0;
            if (missing.n)
                at += (size_t)snprintf(msg + at, n - at, "Some keys found in the checkpoint are "
                                       "missing in the provided sharded state dict. ");
            if (unexpected.n && at < n)
                at += (size_t)snprintf(msg + at, n - at, "Unexpected keys (not found in the "
                                       "checkpoint) encountered in the provided sharded state dict. ");
            if (at < n)
                at += (size_t)snprintf(msg + at, n - at, "\n");
            if (missing.n && at < n)
                at += (size_t)snprintf(msg + at, n - at, "Missing keys (for all ranks): %s. ", a);
            if (unexpected.n && at < n)
                snprintf(msg + at, n - at, "Unexpected keys (for this rank): %s. ", b);
            if (raise)
                st = mc_error(MC_ERR_FORMAT, "%s (--dist-ckpt-strictness %s): "
                              "CheckpointingException: %s", r->dir, mode, msg);
            else if (s->opts.strict_log || log)
                warn_all(s->opts.strict_log ? s->opts.strict_log : log, msg);
        }
        mc_free(msg), mc_free(a), mc_free(b);
    }
    mc_free(req.k), mc_free(mine.k), mc_free(unexpected.k), mc_free(missing.k);
    return st;
}

static mc_status read_metadata(mc_pk_doc *d, struct reader *r)
{
    struct mc_pk *meta;
    int fd = open(r->meta_path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        mc_status st = mc_error(MC_ERR_IO, "cannot open %s (the torch_dist checkpoint's DCP "
                                "metadata): %s", r->meta_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *buf = mc_alloc(n + 1);
    mc_status st = buf ? MC_OK : MC_ERR_NOMEM;
    if (!st && (size_t)read(fd, buf, n) != n)
        st = mc_error(MC_ERR_IO, "cannot read %s: %s", r->meta_path, strerror(errno));
    close(fd);
    /* the pickle's strings are copied into the doc, so buf can go */
    st = st ? st : mc_pk_load(d, buf, n, r->meta_path, NULL, NULL, &meta);
    mc_free(buf);
    if (st)
        return st;
    if (meta->kind != MC_PK_OBJECT || !strstr(meta->s, "checkpoint.metadata Metadata"))
        return mc_error(MC_ERR_FORMAT, "%s: not a torch.distributed.checkpoint Metadata pickle",
                        r->meta_path);
    r->sdm = mc_pk_get(meta, "state_dict_metadata");
    r->storage = mc_pk_get(meta, "storage_data");
    r->mcore = mc_pk_get(meta, "mcore_data");
    if (r->mcore && !mc_pk_is_map(r->mcore))
        r->mcore = NULL;
    if (!mc_pk_is_map(r->sdm) || !mc_pk_is_map(r->storage))
        return mc_error(MC_ERR_FORMAT, "%s: Metadata without state_dict_metadata / storage_data "
                        "dicts", r->meta_path);
    return MC_OK;
}

/* ---- whole global tensors, for readers without a model (the checkpoint converter) ---------- */
struct mc_dist_reader {
    struct reader r;
    char dir[4096];
    mc_pk_doc *doc; /* the .metadata pickle */
};

mc_status mc_dist_reader_open(const char *iter_dir, struct mc_dist_reader **out)
{
    struct mc_dist_reader *x = *out = mc_calloc(1, sizeof(*x));
    if (!x)
        return MC_ERR_NOMEM;
    snprintf(x->dir, sizeof(x->dir), "%s", iter_dir);
    x->r.dir = x->dir;
    snprintf(x->r.meta_path, sizeof(x->r.meta_path), "%s/.metadata", iter_dir);
    mc_status st = mc_pk_doc_init(&x->doc);
    return st ? st : read_metadata(x->doc, &x->r);
}

void mc_dist_reader_close(struct mc_dist_reader *x)
{
    if (!x)
        return;
    close_files(&x->r);
    if (x->doc)
        mc_pk_doc_free(x->doc);
    mc_free(x);
}

int64_t mc_dist_reader_count(const struct mc_dist_reader *x) { return x->r.sdm->n / 2; }

const char *mc_dist_reader_key(const struct mc_dist_reader *x, int64_t k, bool *tensor)
{
    const struct mc_pk *key = x->r.sdm->items[2 * k], *v = x->r.sdm->items[2 * k + 1];
    *tensor = v->kind == MC_PK_OBJECT && strstr(v->s, "TensorStorageMetadata");
    return key->kind == MC_PK_STR ? key->s : "";
}

bool mc_dist_reader_shape(const struct mc_dist_reader *x, const char *key, int *nd, int64_t *g)
{
    return tensor_meta(&x->r, key, nd, g) != NULL;
}

mc_status mc_dist_reader_read(struct mc_dist_reader *x, const char *key, const int64_t *o,
                              const int64_t *z, float *dst)
{
    int nd;
    int64_t g[MC_PK_MAX_DIM];
    const struct mc_pk *tm = tensor_meta(&x->r, key, &nd, g);
    if (!tm)
        return mc_error(MC_ERR_FORMAT, "%s: the checkpoint has no tensor %s", x->r.meta_path, key);
    for (int k = 0; k < nd; k++)
        if (o[k] < 0 || z[k] < 0 || o[k] > g[k] || z[k] > g[k] - o[k])
            return mc_error(MC_ERR_INTERNAL, "%s: a region outside %s", x->r.meta_path, key);
    return read_region(&x->r, key, tm, nd, g, o, z, dst);
}

mc_status mc_dist_ckpt_read(mc_pk_doc *d, const struct mc_ckpt_state *s, const char *iter_dir,
                            FILE *log, struct mc_pk **sd_out)
{
    struct reader *r = mc_calloc(1, sizeof(*r));
    if (!r)
        return MC_ERR_NOMEM;
    r->dir = iter_dir;
    snprintf(r->meta_path, sizeof(r->meta_path), "%s/.metadata", iter_dir);
    char common[4200];
    snprintf(common, sizeof(common), "%s/common.pt", iter_dir);
    struct mc_pk *c = NULL, *sd = mc_pk_new(d, MC_PK_DICT);
    mc_status st = sd ? read_metadata(d, r) : MC_ERR_NOMEM;
    st = st ? st : mc_torch_load(d, common, &c);
    if (!st && !mc_pk_is_map(c))
        st = mc_error(MC_ERR_FORMAT, "%s: not a dict", common);
    /* everything common.pt holds, as the torch format's file holds it */
    for (int64_t i = 0; !st && i + 1 < c->n; i += 2)
        if (c->items[i]->kind == MC_PK_STR && strcmp(c->items[i]->s, "optimizer"))
            st = mc_pk_set(d, sd, c->items[i]->s, c->items[i + 1]);
    /* layout-free: Megatron's check_checkpoint_args compares no parallel sizes with use_dist_ckpt */
    struct mc_pk *args = st ? NULL : mc_pk_get(sd, "args");
    r->saved_tp = r->saved_pp = 1;
    double sz;
    if (!st && args && mc_pk_number(mc_pk_get(args, "tensor_model_parallel_size"), &sz))
        r->saved_tp = (int64_t)sz;
    if (!st && args && mc_pk_number(mc_pk_get(args, "pipeline_model_parallel_size"), &sz))
        r->saved_pp = (int64_t)sz;
    if (!st && args && args->kind == MC_PK_NAMESPACE) {
        const struct mc_gpt_config *mc = mc_gpt_model_config(s->model);
        st = put(d, args, "tensor_model_parallel_size", mc_pk_int(d, mc->tensor_model_parallel_size > 1 ? mc->tensor_model_parallel_size : 1));
        st = st ? st : put(d, args, "pipeline_model_parallel_size",
                           mc_pk_int(d, mc->pipeline_model_parallel_size > 1 ? mc->pipeline_model_parallel_size : 1));
    }
    st = st ? st : strict_check(r, s, c, log);
    st = st ? st : rerun_state(d, r, s, c);
    int nc = s->n_chunks > 1 ? s->n_chunks : 1;
    for (int k = 0; !st && k < nc; k++) {
        char key[32];
        struct mc_pk *model;
        snprintf(key, sizeof(key), nc > 1 ? "model%d" : "model", k);
        st = model_dict(d, r, nc > 1 ? s->chunks[k] : s->model, &model);
        st = st ? st : mc_pk_set(d, sd, key, model);
    }
    const struct mc_pk *copt = st ? NULL : mc_pk_get(c, "optimizer");
    bool load = !st && copt && s->opts.load_optim && !s->opts.finetune;
    if (load && s->distopt) {
        struct mc_pk *o = NULL;
        st = distopt_state(d, r, s, copt, &o);
        /* the sharding type for the loader's log line (Megatron's load_state_dict logs it) */
        const struct mc_pk *type = mc_pk_get(copt, "param_state_sharding_type");
        if (!st && type && !mc_pk_get(o, "param_state_sharding_type"))
            st = mc_pk_set(d, o, "param_state_sharding_type", (struct mc_pk *)type);
        st = st ? st : mc_pk_set(d, sd, "optimizer", o);
    } else if (load && s->opt && mc_pk_get(copt, "param_state_sharding_type")) {
        st = distopt_saved(r, mc_pk_get(copt, "param_state_sharding_type"));
    } else if (load && s->opt) {
        struct mc_pk *o;
        st = mc_pk_get(copt, "optimizer") ? float16_dict(d, r, s, copt, &o) : optimizer_dict(d, r, s, copt, &o);
        st = st ? st : mc_pk_set(d, sd, "optimizer", o);
    }
    close_files(r);
    mc_free(r);
    if (!st)
        *sd_out = sd;
    return st;
}
