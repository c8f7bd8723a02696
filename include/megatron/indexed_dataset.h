/* Megatron's .bin/.idx indexed dataset (megatron/core/datasets/indexed_dataset.py):
 * a read-only mmap reader and a builder. Format: docs/formats/indexed_dataset.md. */
#ifndef MEGATRON_INDEXED_DATASET_H
#define MEGATRON_INDEXED_DATASET_H

#include "megatron.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mc_indexed_dataset mc_indexed_dataset;

/* Opens prefix.idx and prefix.bin (mmap), checking magic, version, dtype code and every
 * offset and length against the file sizes; errors name the file and the field. */
MC_API mc_status mc_ds_open(const char *path_prefix, mc_indexed_dataset **out);
MC_API void mc_ds_close(mc_indexed_dataset *ds);

MC_API int64_t mc_ds_num_sequences(const mc_indexed_dataset *ds);
MC_API int64_t mc_ds_num_documents(const mc_indexed_dataset *ds); /* len(document_indices) - 1 */
MC_API int mc_ds_dtype_code(const mc_indexed_dataset *ds);        /* Megatron's DType code */
MC_API size_t mc_ds_dtype_bytes(const mc_indexed_dataset *ds);
/* Borrowed arrays, valid until mc_ds_close. */
MC_API const int32_t *mc_ds_sequence_lengths(const mc_indexed_dataset *ds); /* [num_sequences] */
MC_API const int64_t *mc_ds_sequence_pointers(const mc_indexed_dataset *ds);/* byte offsets */
MC_API const int64_t *mc_ds_document_indices(const mc_indexed_dataset *ds); /* [num_documents+1] */
/* Copies tokens [offset, offset+length) of sequence idx into out as int64 (any on-disk dtype). */
MC_API mc_status mc_ds_get(const mc_indexed_dataset *ds, int64_t idx, int64_t offset,
                           int64_t length, int64_t *out);

typedef struct mc_ds_builder mc_ds_builder;
/* Writes prefix.bin/.idx under temporary names; renamed into place by mc_ds_builder_finalize. */
MC_API mc_status mc_ds_builder_init(const char *path_prefix, int dtype_code, mc_ds_builder **out);
MC_API mc_status mc_ds_builder_add_item(mc_ds_builder *b, const int64_t *tokens, int64_t n);
MC_API mc_status mc_ds_builder_end_document(mc_ds_builder *b);
MC_API mc_status mc_ds_builder_add_index(mc_ds_builder *b, const char *other_prefix); /* merge */
MC_API mc_status mc_ds_builder_finalize(mc_ds_builder *b); /* writes .idx, renames, frees b */
MC_API void mc_ds_builder_abort(mc_ds_builder *b);         /* removes temporaries, frees b */
/* Megatron's choice: uint16 when vocab_size < 65500, else int32 (DType.optimal_dtype). */
MC_API int mc_ds_optimal_dtype_code(int64_t vocab_size);

#ifdef __cplusplus
}
#endif

#endif
