/* The trainer: the state pretrain() builds and train() runs on, grouped by concern, and the
 * functions the files of the training loop call across (private to src/training/). The files
 * follow megatron/training/training.py's parts so a Megatron user finds each concept:
 *
 *   training.c        pretrain(), train(), checkpoint_and_decide_exit, the checkpoint calls
 *   initialize.c      initialize_megatron / set_global_variables: tokenizer, timers, writer,
 *                     parallel state and the collective watchdog
 *   setup_model.c     get_model + setup_model_and_optimizer: chunks, DDP, optimizer, pipeline
 *   train_step.c      train_step(): forward_backward_func, finalize grads, optimizer step
 *   forward_step.c    pretrain_gpt.py's get_batch / forward_step / loss_func as the schedule
 *                     callbacks (the same callbacks on every schedule, pp = 1 included)
 *   finalize_grads.c  core/distributed/finalize_model_grads.py
 *   evaluate.c        evaluate() + evaluate_and_print_results()
 *   training_log.c    training_log()'s printed line, the timers block
 *   tensorboard_log.c what training_log / evaluate / train() write to TensorBoard
 *   utils.c           training/utils.py: print_rank_0/last, calc_params_l2_norm, exit flags
 *   fault_injection.c the MC_TEST_* fault hooks of the failure tests */
#ifndef MC_TRAINING_TRAINER_H
#define MC_TRAINING_TRAINER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "megatron/tokenizer.h"
#include "backend/backend.h"
#include "distributed/ddp.h"
#include "distributed/distrib_optimizer.h"
#include "optimizer/lr_scheduler.h"
#include "parallel_state/parallel_state.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "training/args.h"
#include "training/log_format.h"
#include "training/microbatches.h"
#include "training/refusals.h"
#include "training/tensorboard.h"
#include "training/timers.h"
#include "training/train_data.h"

enum { MC_PP_MAX_SLOTS = 64 }; /* activation slots per stage (in-flight micro-batches) */
enum { MC_MAX_VP = MC_MAX_VP_CHUNKS }; /* model chunks per pipeline rank (refusals.h) */

/* get_model: the tokenizer the vocabulary comes from, and this rank's model chunks. */
struct trainer_model {
    mc_tokenizer *tok;
    int64_t padded_vocab;
    struct mc_backend *be;           /* the backend every model chunk runs on (created once) */
    mc_gpt_model *model;             /* chunks[0] */
    mc_gpt_model *chunks[MC_MAX_VP]; /* interleaved pipelining: vp model chunks, else model */
    int vp;                          /* model chunks on this rank (1 without interleaving) */
};

/* setup_model_and_optimizer: the optimizer (or distributed optimizer), the data-parallel grad
 * sync and the learning-rate scheduler. */
struct trainer_optim {
    mc_optimizer *opt;
    mc_distopt *dopt;             /* instead of opt with --use-distributed-optimizer: dopts[0] */
    mc_ddp *ddp;                  /* data-parallel grad sync: buckets, overlap; ddps[0] */
    mc_distopt *dopts[MC_MAX_VP]; /* one per model chunk (Megatron: one DDP buffer each) */
    mc_ddp *ddps[MC_MAX_VP];
    struct mc_opt_sched sched;
};

/* The batches: sizes, the datasets, the micro-batch and loss buffers, the samples consumed. */
struct trainer_data {
    struct mc_microbatches mb;
    mc_train_data *data;
    struct mc_micro_batch batch;
    float *loss, *dloss;          /* [mbs * seq], host: the model's loss out and dloss in */
    float *loss_be, *dloss_be, *mask_be; /* the same in backend memory, for the loss ops */
    int64_t mbs, seq, gbs;
    int64_t consumed_train, consumed_valid;
};

/* args.iteration and args.num_floating_point_operations_so_far, and where they started. */
struct trainer_progress {
    int64_t iteration;            /* args.iteration: iterations completed */
    int64_t start_iteration;      /* args.iteration: from --load, else 0 */
    double flops_per_sample;
    double flops_so_far;          /* num_floating_point_operations_so_far */
    double start_flops;           /* args.num_floating_point_operations_so_far after --load */
};

struct trainer_parallel {
    struct mc_parallel_state ps;
    int64_t dp, dp_rank;          /* data-parallel size and this rank's index */
};

/* The schedules' buffers (pp = 1 too: forward_backward_no_pipelining). */
struct trainer_pipeline {
    struct mc_pp_schedule pipe;     /* no pipelining and 1F1B */
    struct mc_pp_interleaved vpipe; /* vp > 1: the interleaved schedule's */
    void *embedding_group;          /* pp > 1, tied embeddings, first/last stage: comm.c handle */
};

/* training_log's accumulators, Megatron's Timers and the TensorBoard writer. */
struct trainer_logging {
    struct mc_log_accum acc;
    struct mc_timers timers;      /* Megatron's Timers at --timing-log-level */
    mc_tb_writer *tb;             /* --tensorboard-dir, on the last rank; NULL elsewhere */
};

struct trainer {
    struct mc_args *a;
    double t0;
    struct trainer_model m;
    struct trainer_optim o;
    struct trainer_data d;
    struct trainer_progress p;
    struct trainer_parallel par;
    struct trainer_pipeline pp;
    struct trainer_logging log;
    bool converted; /* --ckpt-convert-format: saved in setup, nothing more to run */
};

/* Timers(name, log_level): NULL (a no-op timer) above --timing-log-level. */
static inline struct mc_timer *timer(struct trainer *t, const char *name, int level)
{
    return mc_timers_get(&t->log.timers, name, level);
}

/* ---- utils.c ---------------------------------------------------------------------------- */
/* Megatron's print_rank_0 / print_rank_last: stdout on the world's first / last rank, NULL
 * elsewhere, and the MPI world (NULL for one process); process-wide as Megatron's are, set by
 * mc_train_setup_printing before anything is printed. */
extern FILE *mc_train_out_first, *mc_train_out_last;
extern void *mc_train_world_comm;
void mc_train_setup_printing(const struct mc_args *a);
__attribute__((format(printf, 1, 2))) void mc_print_rank_0(const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void mc_print_rank_last(const char *fmt, ...);
void mc_print_datetime(const char *what);
mc_status mc_train_params_norm(const struct trainer *t, double *norm);
mc_status mc_train_check_weight_hashes(struct trainer *t, int64_t iteration);
/* --test-mode (with --qk-layernorm): Megatron's run_realtime_tests, before the forwards of a
 * train step or an evaluation (the weights only change at the optimizer step between). */
mc_status mc_train_test_mode_check(struct trainer *t);
bool mc_train_on_any_rank(bool v);
bool mc_train_time_limit_reached(const struct trainer *t, double *minutes);

/* ---- initialize.c ----------------------------------------------------------------------- */
mc_status mc_train_check_supported(const struct mc_args *a);
mc_status mc_train_build_tokenizer(struct trainer *t);
mc_status mc_train_init_logging(struct trainer *t);
mc_status mc_train_setup_parallel_state(struct trainer *t);

/* ---- setup_model.c ---------------------------------------------------------------------- */
mc_status mc_train_build_model_and_optimizer(struct trainer *t);
struct mc_param_view mc_train_tied_embedding(const struct trainer *t);

/* ---- train_dump.c: --dump-dir (docs/alignment.md) ---------------------------------------- */
/* Checks the --dump-* options (before anything is built). */
mc_status mc_train_dump_setup(const struct mc_args *a);
/* Opens the recording of train step `iteration` when it and this rank are chosen (and records
 * the parameters); the rest do nothing outside a recorded step. */
mc_status mc_train_dump_begin(struct trainer *t, int64_t iteration); /* 1-based, as logged */
void mc_train_dump_batch(int64_t k, const struct mc_micro_batch *mb);
/* post_scale: what the step still multiplies the distributed optimizer's reduced grads by */
mc_status mc_train_dump_grads(struct trainer *t, const char *prefix, float post_scale);
/* After the optimizer step: the clipped grads, optimizer state, loss; writes the file. Returns
 * step_status when that is a failure (the recording is dropped). */
mc_status mc_train_dump_end(struct trainer *t, mc_status step_status, float lm_loss);

/* ---- train_step.c / forward_step.c / finalize_grads.c ----------------------------------- */
mc_status mc_train_step(struct trainer *t, int64_t iteration, float *lm_loss,
                        struct mc_opt_step_result *res);
/* optimizer.get_loss_scale(): what the loss gradient is multiplied by (1 without a scaler). */
double mc_train_loss_scale(const struct trainer *t);
/* --decoupled-lr: the lr of Megatron's is_decoupled_lr param group at the scheduler's current
 * step (its max --decoupled-lr, its min --decoupled-min-lr or --min-lr); false without. */
bool mc_train_decoupled_lr(const struct trainer *t, double *lr);
/* forward_backward_func over num_micro micro-batches of `split` from sample `consumed`: the
 * schedule of this layout (no pipelining, 1F1B or interleaved) driving the callbacks of
 * forward_step.c. The lm loss report is summed into *numer / *denom on the last stage. */
mc_status mc_train_forward_backward(struct trainer *t, int split, int64_t consumed,
                                    int64_t num_micro, int64_t iteration, bool forward_only,
                                    float *numer, float *denom);
mc_status mc_train_finalize_grads(struct trainer *t, bool per_token, float num_tokens);

/* ---- evaluate.c ------------------------------------------------------------------------- */
mc_status mc_train_evaluate_and_print(struct trainer *t, int split, const char *prefix,
                                      bool verbose, int64_t *consumed, bool *abandoned);

/* ---- training_log.c / tensorboard_log.c ------------------------------------------------- */
mc_status mc_train_log_timers(struct trainer *t, const char *const *names, int n,
                              double normalizer);
mc_status mc_train_print_training_line(struct trainer *t, int64_t iteration, double interval_s,
                                       const struct mc_opt_step_result *res,
                                       bool *report_memory);
/* --log-memory-estimate: the estimate beside the measured memory, by category (ours). */
mc_status mc_train_log_memory_estimate(struct trainer *t);
mc_status mc_train_tb_write_args(struct trainer *t);
/* moe_metrics.c: track_moe_metrics after each training iteration (every rank: the tracker is
 * summed over the pipeline group; the tensorboard rank adds the aux losses to the log line's
 * losses and writes them). No-op for a dense model. */
mc_status mc_train_moe_metrics(struct trainer *t, int64_t iteration);
mc_status mc_train_tb_training_log(struct trainer *t, int64_t iteration, float loss,
                                   const struct mc_opt_step_result *res);
mc_status mc_train_tb_interval_log(struct trainer *t, int64_t iteration, double interval_s);
mc_status mc_train_tb_validation(struct trainer *t, const char *key, double loss);

/* ---- fault_injection.c ------------------------------------------------------------------ */
void mc_train_perturb_for_test(const struct trainer *t, int64_t iteration);
mc_status mc_train_inject_test_failure(const struct trainer *t, int64_t iteration);

#endif /* MC_TRAINING_TRAINER_H */
