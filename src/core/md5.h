/* MD5 (RFC 1321): Megatron names its dataset cache files by the MD5 of the dataset
 * description (megatron_dataset.py: hashlib.md5(description).hexdigest()). */
#ifndef MC_CORE_MD5_H
#define MC_CORE_MD5_H

#include <stddef.h>
#include <stdint.h>

#include "megatron.h"

/* Lowercase hex digest of data[0..len), NUL-terminated. */
MC_API void mc_md5_hex(const void *data, size_t len, char out[33]);
MC_API void mc_md5(const void *data, size_t len, uint8_t digest[16]);

#endif
