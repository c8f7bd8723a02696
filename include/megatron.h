/* megatron.c public API: status codes, memory accounting, and the umbrella over the module
 * headers in include/megatron/. Mirrors the package layout of megatron/core so that someone
 * who knows Megatron finds their way: models/gpt -> megatron/gpt.h, optimizer -> optimizer.h. */
#ifndef MEGATRON_H
#define MEGATRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MC_BUILDING_LIBRARY)
#define MC_API __attribute__((visibility("default")))
#else
#define MC_API
#endif

#define MC_VERSION_MAJOR 0
#define MC_VERSION_MINOR 1
#define MC_VERSION_PATCH 0
MC_API const char *mc_version(void);

/* ---- status ------------------------------------------------------------------------------ */
typedef enum mc_status {
    MC_OK = 0,
    MC_ERR_NOMEM,       /* an allocation failed */
    MC_ERR_IO,          /* open/read/write/rename failed */
    MC_ERR_FORMAT,      /* a file's bytes are not what its format says */
    MC_ERR_CONFIG,      /* a configuration Megatron would refuse */
    MC_ERR_SHAPE,       /* tensor shapes do not agree */
    MC_ERR_COMM,        /* an MPI call failed */
    MC_ERR_UNSUPPORTED, /* valid, but not implemented by megatron.c yet */
    MC_ERR_INTERNAL,    /* a bug */
} mc_status;

/* Name of a status code ("MC_ERR_CONFIG"). */
MC_API const char *mc_status_str(mc_status s);
/* The detail of the last error set on this thread, "file.c:123: message"; "" if none. */
MC_API const char *mc_last_error(void);
/* Sets the thread's last error and returns s, so callers write `return mc_error(...)`. */
MC_API mc_status mc_error_at(mc_status s, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define mc_error(s, ...) mc_error_at((s), __FILE__, __LINE__, __VA_ARGS__)
MC_API void mc_clear_error(void);

/* Programmer errors: print file:line and abort. Kept on in release builds. */
MC_API void mc_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define MC_ASSERT(x) ((x) ? (void)0 : mc_assert_fail(#x, __FILE__, __LINE__))

/* ---- memory: 64-byte aligned, counted so tests can assert no leaks ------------------------ */
MC_API void *mc_alloc(size_t bytes);          /* NULL on failure (and sets the last error) */
MC_API void *mc_calloc(size_t n, size_t size); /* zeroed */
MC_API void mc_free(void *p);                  /* mc_free(NULL) does nothing */
MC_API size_t mc_alloc_live_bytes(void);       /* bytes currently held through mc_alloc */
MC_API size_t mc_alloc_peak_bytes(void);

/* ---- dtypes ------------------------------------------------------------------------------ */
/* The one element-type enum of the project. The numbers are stored in dump files
 * (docs/formats/dump.md): new types are appended, never inserted. Each file format keeps its own
 * spelling in a table keyed by this enum (safetensors "BF16", torch "BFloat16Storage"). */
enum mc_dtype {
    MC_DTYPE_F32 = 0, MC_DTYPE_BF16, MC_DTYPE_F16, MC_DTYPE_I32, MC_DTYPE_I64, MC_DTYPE_U8,
    MC_DTYPE_F64, MC_DTYPE_I16, MC_DTYPE_I8, MC_DTYPE_BOOL, MC_DTYPE_COUNT
};
/* Bytes per element; 0 for a value outside the enum. */
MC_API size_t mc_dtype_size(enum mc_dtype t);
/* torch's name without "torch." ("float32", "bfloat16", "bool"); "invalid" outside the enum. */
MC_API const char *mc_dtype_name(enum mc_dtype t);

/* ---- log: rank-tagged lines on stderr --------------------------------------------------- */
enum mc_log_level { MC_LOG_ERROR = 0, MC_LOG_WARN, MC_LOG_INFO, MC_LOG_DEBUG };
MC_API void mc_log_set_rank(int rank);
MC_API void mc_log_set_level(enum mc_log_level lvl);
MC_API void mc_log(enum mc_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_H */
