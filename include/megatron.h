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

/* What a block of memory is for, so a run can report its peak by category (the memory line,
 * --log-memory-to-tensorboard, --log-memory-estimate). Blocks allocated outside any scope are
 * MC_MEM_OTHER. The numbers are reported by name: new categories go before MC_MEM_COUNT. */
enum mc_mem_category {
    MC_MEM_OTHER = 0,   /* bookkeeping, tokenizer, datasets, checkpoint I/O, ... */
    MC_MEM_PARAMS,      /* parameters: fp32 master and 16-bit compute weights */
    MC_MEM_GRADS,       /* gradient buffers and weight-grad temporaries */
    MC_MEM_OPTIMIZER,   /* optimizer state (Adam moments, distributed-optimizer shards) */
    MC_MEM_ACTIVATIONS, /* activations saved for backward, per-step inputs and losses */
    MC_MEM_COMM,        /* communication buffers: p2p, all-reduce/all-gather staging */
    MC_MEM_WORKSPACE,   /* backend scratch and host staging */
    MC_MEM_COUNT
};
/* Lower-case name of a category ("optimizer state"); "invalid" outside the enum. */
MC_API const char *mc_mem_category_name(enum mc_mem_category c);
/* Scopes on the calling thread (nest up to 16 deep): mc_alloc inside push/pop counts the
 * block under c. mc_free credits the category the block was allocated under. */
MC_API void mc_mem_push(enum mc_mem_category c);
MC_API void mc_mem_pop(void);
/* mc_mem_pop() returning its argument, for MC_MEM_AS: one-line tagging of an allocation. */
MC_API void *mc_mem_pop_ptr(void *p);
MC_API mc_status mc_mem_pop_status(mc_status s);
/* `x = MC_MEM_AS(MC_MEM_GRADS, be->ops->alloc(be, n));` (the comma operator orders the push
 * before the call); MC_MEM_AS_ST for a call that allocates and returns an mc_status. */
#define MC_MEM_AS(c, ptr_expr) (mc_mem_push(c), mc_mem_pop_ptr(ptr_expr))
#define MC_MEM_AS_ST(c, status_expr) (mc_mem_push(c), mc_mem_pop_status(status_expr))

/* A consistent snapshot of the counters (taken under the allocator's lock). */
struct mc_mem_stats {
    size_t live_bytes, peak_bytes;       /* all categories; peak since start or the last reset */
    size_t live_count;                   /* blocks currently allocated */
    size_t current[MC_MEM_COUNT];        /* live bytes by category: they sum to live_bytes */
    size_t peak[MC_MEM_COUNT];           /* each category's own high-water mark */
    size_t at_peak[MC_MEM_COUNT];        /* by category at the moment of peak_bytes: sum = peak */
};
MC_API void mc_mem_get_stats(struct mc_mem_stats *s);
/* Restarts the peaks from the live numbers (Megatron's reset_peak_memory_stats). */
MC_API void mc_mem_reset_peaks(void);
/* What the process holds from the operating system: resident set size now and its high-water
 * mark (Linux /proc/self/statm and getrusage ru_maxrss); 0 where the system does not say. */
MC_API size_t mc_mem_rss_bytes(void);
MC_API size_t mc_mem_peak_rss_bytes(void);

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
