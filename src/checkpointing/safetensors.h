/* The safetensors file format (huggingface/safetensors, what transformers' save_pretrained writes
 * as model.safetensors): an 8-byte little-endian header length N, N bytes of JSON
 * {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}}
 * padded with spaces, then the raw little-endian tensor bytes (offsets relative to the end of the
 * header). Used by the HuggingFace loader/saver of convert_checkpoint; Megatron has no
 * counterpart (its llama_mistral loader reads safetensors through transformers).
 * Private header of src/checkpointing/. */
#ifndef MC_CHECKPOINTING_SAFETENSORS_H
#define MC_CHECKPOINTING_SAFETENSORS_H

#include "megatron.h"

#include "core/dtype.h"
#include "megatron/tensor.h"

/* safetensors' name of a dtype ("F32", "BF16", "BOOL"). */
const char *mc_st_dtype_name(enum mc_dtype t);

#define MC_ST_MAX_DIM 8

struct mc_st_tensor {
    char *name;
    enum mc_dtype dtype;
    int ndim;
    int64_t shape[MC_ST_MAX_DIM];
    int64_t numel;
    const uint8_t *data; /* into the file mapping */
};

/* A safetensors file mapped read-only. */
struct mc_st_file {
    char *path;
    const uint8_t *map;
    const uint8_t *data0; /* start of the data area (data_offsets count from here) */
    size_t size;
    struct mc_st_tensor *t;
    int64_t n;
};

/* Maps the file and checks the header: length within the file, JSON object, known dtypes, shapes,
 * offsets inside the data area and matching numel x itemsize. MC_ERR_FORMAT naming the file;
 * on any failure f is left closed (mc_st_close on it is a no-op). */
mc_status mc_st_open(struct mc_st_file *f, const char *path);
void mc_st_close(struct mc_st_file *f);
const struct mc_st_tensor *mc_st_find(const struct mc_st_file *f, const char *name);
/* The tensor as a host view (read-only memory: the file mapping; valid until mc_st_close). */
struct mc_tensor mc_st_view(const struct mc_st_tensor *t);
/* Converts any floating (or integer) dtype to float32: dst[numel]. */
void mc_st_to_f32(const struct mc_st_tensor *t, float *dst);

/* One tensor to write: float32 data converted to the file's dtype on writing. */
struct mc_st_item {
    const char *name;
    int ndim;
    int64_t shape[MC_ST_MAX_DIM];
    const float *data;
};
/* Writes the items (in the order given) as `dtype` (F32, F16 or BF16, round to nearest even as
 * torch converts) with metadata {"format": "pt"}, through path.tmp, fsync'ed and renamed. */
mc_status mc_st_write(const char *path, const struct mc_st_item *items, int64_t n,
                      enum mc_dtype dtype);

#endif
