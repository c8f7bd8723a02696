/* A tensor view: what crosses a module boundary (a checkpoint reader handing tensors to the
 * converter, a dump handing them to a test, later the model handing them to a backend). It names
 * contiguous row-major memory: where it starts, its element type, its shape, and whose memory
 * it is (host memory, or a backend's: a device backend keeps tensors in its own memory and only
 * its copy ops may touch them). A view never owns memory: whoever made the data frees it, and
 * the view is valid as long as the data is. Counterparts: torch.Tensor's (data_ptr, dtype,
 * shape, device) for contiguous tensors, DLPack's DLTensor, ggml_tensor. */
#ifndef MEGATRON_TENSOR_H
#define MEGATRON_TENSOR_H

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_TENSOR_MAX_DIMS 8

struct mc_tensor {
    void *data;                        /* the first element (borrowed) */
    enum mc_dtype dtype;
    int ndim;                          /* 0 (a scalar: one element) .. MC_TENSOR_MAX_DIMS */
    int64_t shape[MC_TENSOR_MAX_DIMS]; /* outermost first, each >= 0; entries past ndim are 0 */
    const void *backend;               /* whose memory data is in: NULL = host memory, else the
                                          backend object that allocated it */
};

/* A host view of `data` [shape[0], .., shape[ndim-1]] (shape may be NULL when ndim is 0). A
 * negative dimension or ndim outside 0..MC_TENSOR_MAX_DIMS is a programmer error. */
MC_API struct mc_tensor mc_tensor_view(void *data, enum mc_dtype dtype, int ndim,
                                       const int64_t *shape);
/* Product of the shape (1 for a scalar, 0 when any dimension is 0). */
MC_API int64_t mc_tensor_numel(const struct mc_tensor *t);
/* numel * element size. */
MC_API size_t mc_tensor_nbytes(const struct mc_tensor *t);
MC_API bool mc_tensor_on_host(const struct mc_tensor *t);
/* Same ndim and dimensions (dtype and memory not compared). */
MC_API bool mc_tensor_same_shape(const struct mc_tensor *a, const struct mc_tensor *b);
/* "bf16 [256, 8, 768]" into buf (truncated to n bytes), for messages; returns buf. */
MC_API const char *mc_tensor_str(const struct mc_tensor *t, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_TENSOR_H */
