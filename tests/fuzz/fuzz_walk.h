/* Shared by the libFuzzer harness and the corpus replay test: load one file with
 * mc_torch_load and walk what it returns, reading every tensor's first and last element
 * (through the storage mapping the reader validated), so an accepted but out-of-range view
 * faults under ASan. Returns the reader's status; never exits on bad input. */
#ifndef MC_TESTS_FUZZ_WALK_H
#define MC_TESTS_FUZZ_WALK_H

#include "checkpointing/torch_pickle.h"

static volatile unsigned mc_fuzz_sink;

static void mc_fuzz_walk(const struct mc_pk *v, int depth)
{
    if (!v || depth > 10000)
        return;
    if (v->kind == MC_PK_STR || v->kind == MC_PK_BYTES)
        for (size_t i = 0; i < v->len; i++)
            mc_fuzz_sink += (unsigned char)v->s[i];
    if (v->kind == MC_PK_TENSOR && v->storage && mc_pk_tensor_numel(v) > 0) {
        const unsigned char *p = v->storage->data;
        size_t es = mc_dtype_size(v->storage->dtype);
        int64_t last = v->offset;
        for (int k = 0; k < v->ndim; k++)
            last += (v->shape[k] - 1) * v->stride[k];
        mc_fuzz_sink += p[(size_t)v->offset * es] + p[(size_t)last * es + es - 1];
    }
    if (v->kind == MC_PK_STORAGE && v->numel > 0) {
        const unsigned char *p = v->data;
        mc_fuzz_sink += p[0] + p[(size_t)v->numel * mc_dtype_size(v->dtype) - 1];
    }
    for (int64_t i = 0; i < v->n; i++)
        mc_fuzz_walk(v->items[i], depth + 1);
}

static mc_status mc_fuzz_load_file(const char *path)
{
    mc_pk_doc *d;
    struct mc_pk *v = NULL;
    mc_status st = mc_pk_doc_init(&d);
    if (st)
        return st;
    st = mc_torch_load(d, path, &v);
    if (!st)
        mc_fuzz_walk(v, 0);
    mc_pk_doc_free(d);
    return st;
}

#endif
