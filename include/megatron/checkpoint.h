/* Checkpoints in Megatron's `--ckpt-format torch` (megatron/training/checkpointing.py,
 * save_checkpoint / load_checkpoint, Megatron-LM core_v0.12.1), for any tensor x pipeline x data
 * parallel layout:
 *   <dir>/latest_checkpointed_iteration.txt   the iteration, no newline (or "release")
 *   <dir>/iter_%07d/mp_rank_TT/model_optim_rng.pt          pipeline parallel size 1
 *   <dir>/iter_%07d/mp_rank_TT_PPP/model_optim_rng.pt      pipeline parallel size > 1
 *   .../distrib_optim.pt                                   --use-distributed-optimizer
 * model_optim_rng.pt is a torch.save (torch 1.13 layout) of the dict Megatron writes: args
 * (argparse.Namespace), checkpoint_version 3.0, iteration, model (this stage's state dict with
 * stage-local layer numbers, in the names of the run's model: mcore local or TE spec, or the
 * legacy model's nested dicts; `_extra_state: None`), optimizer (the fp32 torch Adam/SGD
 * state_dict; with the distributed optimizer only its param_groups, the moments going to
 * distrib_optim.pt), opt_param_scheduler,
 * rerun_state_machine, rng_state (unless --no-save-rng: the states Megatron's seeding gives
 * Python's, numpy's and torch's generators for this rank, src/checkpointing/rng_state.c; ours
 * draw nothing from them), num_floating_point_operations_so_far. Layout byte by byte:
 * docs/formats/checkpoint.md. */
#ifndef MEGATRON_CHECKPOINT_H
#define MEGATRON_CHECKPOINT_H

#include <stdio.h>

#include "megatron/gpt.h"
#include "megatron/optimizer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mc_opt_sched; /* src/optimizer/lr_scheduler.h */
struct mc_pk;        /* src/checkpointing/torch_pickle.h: one unpickled / to-be-pickled value */
struct mc_pk_doc;

/* What the format code is told: plain values, no command line. The training layer fills it
 * from the arguments (src/training/checkpointing.c, as Megatron's policy lives in
 * megatron/training/checkpointing.py); the args Namespace a checkpoint carries is the caller's
 * business too, through the two callbacks. */
struct mc_ckpt_options {
    const char *dir; /* the directory saved to (--save) or loaded from (--load) */
    /* saving */
    bool legacy_names;    /* --use-legacy-models: the legacy model's nested state dict */
    bool local_names;     /* --transformer-impl local (else Transformer Engine names) */
    bool save_optim;      /* not --no-save-optim: optimizer and opt_param_scheduler */
    bool adam;            /* --optimizer adam (else sgd): the param_groups' keys */
    bool save_dist;       /* --ckpt-format torch_dist: Megatron's distributed checkpoint
                             (src/checkpointing/dist_checkpoint_save.c) instead of torch */
    bool fully_parallel_save; /* --ckpt-fully-parallel-save (default on): torch_dist saves
                                 spread over the data-parallel ranks */
    /* not --no-save-rng: Megatron's rng_state (src/checkpointing/rng_state.c) as Megatron's
     * seeding leaves it for --seed (seed), --data-parallel-random-init (dp_random_init) and
     * --expert-tensor-parallel-size (expert_tp_size; 0: the tensor-parallel size) */
    bool save_rng;
    int64_t seed;
    bool dp_random_init;
    int expert_tp_size;
    double adam_beta1, adam_beta2, adam_eps, sgd_momentum, max_lr, min_lr;
    /* --decoupled-lr: the embedding / output params form their own param groups
     * (is_decoupled_lr) with max_lr decoupled_lr, min_lr decoupled_min_lr */
    bool decoupled;
    double decoupled_lr, decoupled_min_lr;
    /* loading */
    bool finetune;        /* --finetune: model only, iteration 0, no args check */
    bool load_optim;      /* not --no-load-optim */
    bool exit_on_missing; /* --exit-on-missing-checkpoint */
    const char *ckpt_format;   /* --ckpt-format, named in messages */
    bool read_dist;            /* --ckpt-format torch_dist or --auto-detect-ckpt-format */
    int64_t ckpt_step;         /* --ckpt-step, 0 for none */
    /* --dist-ckpt-strictness (NULL: assume_ok_unexpected): Megatron's StrictHandling for the
     * keys a torch_dist load requests but the checkpoint lacks ("unexpected") and those it holds
     * that no rank requests ("missing") */
    const char *strictness;
    /* Where the strictness warnings go on every rank (Megatron's validation logger prints on each
     * rank, its own unexpected keys); NULL: the load's log (rank 0's in pretrain_gpt) */
    FILE *strict_log;
    bool load_rng;             /* not --no-load-rng (which keys a torch_dist load requests) */
    /* The args Namespace to save (a new value in doc d), and the check of a loaded one
     * (check_checkpoint_args and the counters restored from it; `path` names the file in
     * messages). Either may be NULL: no args saved / none checked. */
    mc_status (*save_args)(void *ctx, struct mc_pk_doc *d, struct mc_pk **out);
    mc_status (*load_args)(void *ctx, const struct mc_pk *saved, const char *path);
    void *args_ctx;
};

/* What save_checkpoint needs beyond the model. opt/sched may be NULL without save_optim. */
struct mc_ckpt_state {
    struct mc_ckpt_options opts;
    mc_gpt_model *model;
    mc_optimizer *opt;
    struct mc_opt_sched *sched;
    int64_t iteration;
    double num_floating_point_operations_so_far;
    /* attributes Megatron adds to args at run time, saved with them (by opts.save_args):
     * args.iteration and args.num_floating_point_operations_so_far as they were after loading
     * (0 for a fresh run), do_train / do_valid / do_test (0 or 1) */
    int64_t args_iteration;
    double args_flops;
    int do_train, do_valid, do_test;
    bool in_setup; /* saved before the data and the training loop exist (--ckpt-convert-format):
                      the args have no do_train, do_valid, do_test, curr_iteration yet */
    /* Parallel layout (all zero = one process): this rank's tensor- and pipeline-parallel rank
     * and size pick mp_rank_%02d[_%03d]; only `writer` ranks (data-parallel rank 0) write their
     * files; `barrier` (if set) is called after the files are written, then the rank with
     * `write_tracker` (global rank 0) writes the tracker file. */
    int tp_rank, tp_size, pp_rank, pp_size;
    bool writer, write_tracker;
    int dp_rank, dp_size; /* the data-parallel group (torch_dist saves share the writing) */
    mc_status (*barrier)(void *ctx);
    void *barrier_ctx;
    /* Loading: every rank's outcome is combined (*ok becomes false on every rank if any rank
     * failed), so that a rank whose file is missing cannot leave the others waiting in training
     * collectives. NULL for one process. Uses barrier_ctx. */
    mc_status (*all_ok)(void *ctx, bool *ok);
    /* torch_dist saves: every rank's `n` bytes at `mine` gathered onto every rank in rank order:
     * *all (mc_alloc'ed, the caller frees) holds rank r's bytes at [(*offs)[r], (*offs)[r+1])
     * (*offs mc_alloc'ed, world + 1 entries). NULL for one process. Uses barrier_ctx. `rank`
     * is this rank's global rank (it names its .distcp files). */
    mc_status (*gather)(void *ctx, const void *mine, int64_t n, uint8_t **all, int64_t **offs,
                        int *world);
    int rank;
    /* --use-distributed-optimizer: the optimizer (then `opt` is NULL); its data-parallel group
     * gathers the moments onto data-parallel rank 0 for distrib_optim.pt. */
    struct mc_distopt *distopt;
    /* Interleaved pipelining (--num-virtual-stages-per-pipeline-rank V > 1): this rank's V
     * model chunks (chunks[0] == model; the optimizer `opt` holds them all, chunk 0's
     * parameters first) and, with the distributed optimizer, one per chunk (distopts[0] ==
     * distopt). Saved as Megatron does: model0 .. model{V-1} and one grad buffer per chunk in
     * distrib_optim.pt. n_chunks 0 or 1: `model` alone, saved as `model`. */
    int n_chunks;
    mc_gpt_model *const *chunks;
    struct mc_distopt *const *distopts;
    /* Mixed precision (--bf16 / --fp16): the run's params_dtype (F32 = 0: fp32, the files as
     * before). 16-bit: the model tensors are saved in it (the fp32 main params rounded to
     * nearest even, which the model's 16-bit weights are), the optimizer as Megatron's
     * Float16OptimizerWithFloat16Params.state_dict() with the exact main params in
     * 'fp32_from_fp16_params'; loading widens a checkpoint's model tensors through this dtype
     * (Megatron's param.copy_) before the main params overwrite them. */
    enum mc_dtype params_dtype;
    /* The main grads' dtype Megatron would have (distrib_optim.pt's buffer key (params_dtype,
     * grad dtype)): float32 (F32 = 0) with --accumulate-allreduce-grads-in-fp32 (forced on by
     * --bf16), else params_dtype (--fp16 alone). */
    enum mc_dtype grad_dtype;
    /* The grad scaler Megatron's optimizer saves as optimizer['grad_scaler'] (a constant
     * --loss-scale: {}; the dynamic fp16 scaler: scale, growth_tracker, hysteresis_tracker).
     * The caller fills it before a save; a load sets `loaded` when the checkpoint's state was
     * restored into it (the caller then hands it to the optimizer). */
    struct mc_ckpt_scaler {
        enum { MC_CKPT_SCALER_NONE = 0, MC_CKPT_SCALER_CONSTANT, MC_CKPT_SCALER_DYNAMIC } kind;
        double scale;
        int64_t growth_tracker, hysteresis_tracker;
        bool loaded;
    } scaler;
};

/* save_checkpoint: writes iter_%07d/mp_rank_00/model_optim_rng.pt under opts.dir through a
 * temporary name (fsync, rename), then the tracker file the same way. Prints Megatron's
 * "saving checkpoint at iteration ..." and "  successfully saved checkpoint from iteration ..."
 * lines to `log`. */
MC_API mc_status mc_ckpt_save(const struct mc_ckpt_state *s, FILE *log);

/* save_checkpoint with --async-save (torch_dist only; a torch-format state is refused with
 * Megatron's NotImplementedError text): prints the lines above up to "  scheduled an async
 * checkpoint save ...", writes iter_%07d.tmp/common.pt, copies the state to write (a host copy
 * of this rank's share of the checkpoint, held until the save is finalized) and hands the
 * .distcp files to a writer thread of queue q (struct mc_async_queue, src/checkpointing/
 * async_utils.h). The save completes in mc_async_queue_maybe_finalize: the metadata, the rename
 * to iter_%07d, the tracker and the "successfully saved" line. Every rank calls it. */
struct mc_async_queue;
MC_API mc_status mc_ckpt_save_async(const struct mc_ckpt_state *s, FILE *log, struct mc_async_queue *q);

/* load_checkpoint from opts.dir: the tracker (or ckpt_step) picks the iteration; hands the
 * saved args to opts.load_args (unless finetune), loads the model strictly, the optimizer and
 * scheduler (unless finetune / !load_optim / release). Sets s->iteration (0 for finetune and
 * release) and the FLOPs counter. *loaded is false when there is no tracker file (Megatron's
 * warning is printed and training starts from scratch). */
MC_API mc_status mc_ckpt_load(struct mc_ckpt_state *s, FILE *log, bool *loaded);

/* iter_%07d/mp_rank_%02d/model_optim_rng.pt under dir (mp_rank_%02d_%03d with pp_size > 1; or
 * release/...); returns snprintf's count. */
MC_API int mc_ckpt_name(char *buf, size_t n, const char *dir, int64_t iteration, bool release,
                        int tp_rank, int pp_rank, int pp_size);

#ifdef __cplusplus
}
#endif

#endif /* MEGATRON_CHECKPOINT_H */
