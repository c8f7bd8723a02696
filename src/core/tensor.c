/* Tensor views (include/megatron/tensor.h): construction and sizes. */
#include "megatron/tensor.h"

#include <stdio.h>
#include <string.h>

struct mc_tensor mc_tensor_view(void *data, enum mc_dtype dtype, int ndim, const int64_t *shape)
{
    MC_ASSERT(ndim >= 0 && ndim <= MC_TENSOR_MAX_DIMS && (unsigned)dtype < MC_DTYPE_COUNT);
    struct mc_tensor t;
    memset(&t, 0, sizeof(t));
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int k = 0; k < ndim; k++) {
        MC_ASSERT(shape[k] >= 0);
        t.shape[k] = shape[k];
    }
    return t;
}

int64_t mc_tensor_numel(const struct mc_tensor *t)
{
    int64_t n = 1;
    for (int k = 0; k < t->ndim; k++)
        n *= t->shape[k];
    return n;
}

size_t mc_tensor_nbytes(const struct mc_tensor *t)
{
    return (size_t)mc_tensor_numel(t) * mc_dtype_size(t->dtype);
}

bool mc_tensor_on_host(const struct mc_tensor *t) { return t->backend == NULL; }

bool mc_tensor_same_shape(const struct mc_tensor *a, const struct mc_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k])
            return false;
    return true;
}

const char *mc_tensor_str(const struct mc_tensor *t, char *buf, size_t n)
{
    size_t at = (size_t)snprintf(buf, n, "%s [", mc_dtype_name(t->dtype));
    for (int k = 0; k < t->ndim && at < n; k++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", k ? ", " : "", (long long)t->shape[k]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
    return buf;
}
