/* Tensor dumps: a small self-describing file of named tensors (magic, version, count, then per
 * tensor name/dtype/ndim/shape/data; byte layout in docs/formats/dump.md). Used to hand weights
 * and batches to test drivers, to record activations and grads at fixed hook points, and for
 * small goldens, so that one reader (C here, tests/reference/mcdump.py in Python) serves all.
 * Megatron has no counterpart; names inside a dump are Megatron's parameter names. */
#ifndef MEGATRON_DUMP_H
#define MEGATRON_DUMP_H

#include "megatron.h"
#include "megatron/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_DUMP_VERSION 1
#define MC_DUMP_MAX_DIMS 8
#define MC_DUMP_MAX_NAME 1024

/* One tensor of a dump. Owned by the dump: valid until mc_dump_free. */
struct mc_dump_tensor {
    char *name;                       /* NUL-terminated */
    enum mc_dtype dtype;
    int ndim;                         /* 0 (scalar) .. MC_DUMP_MAX_DIMS */
    int64_t shape[MC_DUMP_MAX_DIMS];
    int64_t numel;                    /* product of shape (1 for a scalar) */
    void *data;                       /* numel * mc_dtype_size(dtype) bytes, row-major */
};

typedef struct mc_dump mc_dump;

/* An empty dump. Free with mc_dump_free. */
MC_API mc_status mc_dump_init(mc_dump **out);
MC_API void mc_dump_free(mc_dump *d);
/* Appends a copy of `data` [shape] under `name`. Names must be unique (MC_ERR_CONFIG otherwise). */
MC_API mc_status mc_dump_add(mc_dump *d, const char *name, enum mc_dtype dtype, int ndim,
                             const int64_t *shape, const void *data);
/* Convenience for f32 / i64 tensors and scalars. */
MC_API mc_status mc_dump_add_f32(mc_dump *d, const char *name, int ndim, const int64_t *shape,
                                 const float *data);
MC_API mc_status mc_dump_add_scalar_f32(mc_dump *d, const char *name, float v);
MC_API mc_status mc_dump_add_scalar_i64(mc_dump *d, const char *name, int64_t v);

MC_API int64_t mc_dump_count(const mc_dump *d);
/* The i-th tensor in file order (0 <= i < count). */
MC_API const struct mc_dump_tensor *mc_dump_get(const mc_dump *d, int64_t i);
/* The named tensor, or NULL. */
MC_API const struct mc_dump_tensor *mc_dump_find(const mc_dump *d, const char *name);
/* The tensor as a host view (valid until mc_dump_free). */
MC_API struct mc_tensor mc_dump_view(const struct mc_dump_tensor *t);
/* A scalar (or one-element tensor) of any numeric dtype as double/int64: MC_ERR_FORMAT naming the
 * tensor when it is missing or has more than one element. */
MC_API mc_status mc_dump_get_f64(const mc_dump *d, const char *name, double *out);
MC_API mc_status mc_dump_get_i64(const mc_dump *d, const char *name, int64_t *out);

/* Writes `path` (via path.tmp + rename, so a reader never sees half a file). */
MC_API mc_status mc_dump_write(const mc_dump *d, const char *path);
/* Reads a whole dump; MC_ERR_IO / MC_ERR_FORMAT naming the path, the tensor and what was wrong. */
MC_API mc_status mc_dump_read(const char *path, mc_dump **out);

/* ---- debug hooks: named activations at fixed points, for aligning with the twin -------- *
 * Off by default; costs one branch per hook when off. mc_dump_hooks_enable(path) (or the
 * environment variable MC_DUMP_HOOKS=path, read by the first mc_dump_hooks_active call) starts
 * recording: every mc_dump_hook call copies its tensor into an in-memory dump; a name seen
 * again gets "@1", "@2", ... appended. mc_dump_hooks_flush writes the dump to the path and
 * clears it. Call hooks from one thread, outside parallel regions.
 * Hook point names (tests/reference/gpt_twin.py records the same, docs/formats/dump.md):
 *   embedding.output [s, b, h], decoder.layers.<i>.output [s, b, h],
 *   decoder.final_layernorm.output [s, b, h], output_layer.output [s, b, V/tp]. */
MC_API bool mc_dump_hooks_active(void);
MC_API mc_status mc_dump_hooks_enable(const char *path);
/* Records a copy when hooks are active; an allocation failure turns hooks off and is reported
 * by the next mc_dump_hooks_flush. */
MC_API void mc_dump_hook(const char *name, enum mc_dtype dtype, int ndim, const int64_t *shape,
                         const void *data);
/* Writes what was recorded (even if nothing) and clears it; hooks stay enabled. */
MC_API mc_status mc_dump_hooks_flush(void);
/* Stops recording and drops anything not flushed. */
MC_API void mc_dump_hooks_disable(void);

/* ---- run dumps: the points of a training iteration (pretrain_gpt --dump-dir) ----------- *
 * The trainer (src/training/train_dump.c) opens a recording for a chosen iteration with the
 * points it wants; the model and the trainer report each point through mc_dump_point, which
 * costs one branch while no recording is open. A name seen again in the same recording (the
 * next micro-batch) gets "@1", "@2", ... appended, as with the debug hooks. Names and shapes of
 * every point: docs/formats/dump.md. */
enum mc_dump_point {
    MC_DUMP_POINT_BATCH = 1 << 0,     /* batch.tokens, .labels, .loss_mask, .position_ids */
    MC_DUMP_POINT_FORWARD = 1 << 1,   /* forward.<module>.input / .output */
    MC_DUMP_POINT_BACKWARD = 1 << 2,  /* backward.<module>.output / .input: grads flowing back */
    MC_DUMP_POINT_PARAMS = 1 << 3,    /* param.<name> before the step */
    MC_DUMP_POINT_GRADS = 1 << 4,     /* grad., grad_reduced., grad_clipped.<name> */
    MC_DUMP_POINT_OPTIMIZER = 1 << 5, /* optimizer.<state>.<name>, optimizer.param.<name> */
    MC_DUMP_POINT_LOSS = 1 << 6,      /* loss */
    MC_DUMP_POINT_ALL = (1 << 7) - 1
};
/* The point's name as --dump-points spells it ("batch", "forward", ...), NULL when unknown. */
MC_API const char *mc_dump_point_name(enum mc_dump_point p);
/* Opens a recording of the points in the mask `points` (any open one is dropped). */
MC_API mc_status mc_dump_points_open(unsigned points);
/* True while a recording that includes `point` is open. */
MC_API bool mc_dump_point_on(enum mc_dump_point point);
/* Records a copy of `data` as prefix + name (either may be ""); does nothing unless
 * mc_dump_point_on(point). A failure stops the recording and is reported by the close. */
MC_API void mc_dump_point(enum mc_dump_point point, const char *prefix, const char *name,
                          enum mc_dtype dtype, int ndim, const int64_t *shape, const void *data);
/* The open recording (borrowed: valid until the next open, replace or close); NULL when none
 * is open or a failure stopped it. */
MC_API const mc_dump *mc_dump_points_recording(void);
/* Replaces the open recording with d (taken: the close writes and frees it); the old one is
 * freed. The trainer puts the tensor-parallel shards of its points together this way. */
MC_API void mc_dump_points_replace(mc_dump *d);
/* Closes the recording, writing it to `path` (temp name + rename) unless path is NULL. */
MC_API mc_status mc_dump_points_close(const char *path);

/* Tests of the alignment tools only: true for the global layer that the environment variable
 * MC_TEST_PERTURB_LN_EPS=decoder.layers.<i> names (read once), whose norms the model then runs
 * with epsilon x 1e4, a wrong-epsilon bug that tools/compare_dumps must locate. */
MC_API bool mc_dump_test_perturbed_layer(int64_t layer);

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_DUMP_H */
