/* pretrain() / train() / train_step() / evaluate() of megatron/training/training.py with the
 * model, get_batch and loss_func of pretrain_gpt.py (Megatron-LM core_v0.12.1), for a single
 * process. The messages and the training line are Megatron's, so log parsers keep working
 * (spec: megatron-training-cli.md sections 4-6 and 10). */
#include "training/training.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "megatron/checkpoint.h"
#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "megatron/tokenizer.h"
#include "backend/backend.h"
#include "distributed/ddp.h"
#include "distributed/distrib_optimizer.h"
#include "models/gpt/gpt_model.h"
#include "optimizer/lr_scheduler.h"
#include "parallel_state/parallel_state.h"
#include "pipeline_parallel/in_flight.h"
#include "pipeline_parallel/pipeline_parallel.h"
#include "training/checkpointing.h"
#include "training/dry_run.h"
#include "training/flops.h"
#include "training/log_format.h"
#include "training/model_config.h"
#include "training/param_hashes.h"
#include "training/microbatches.h"
#include "training/schedule_args.h"
#include "training/tensorboard.h"
#include "training/timers.h"
#include "training/refusals.h"
#include "training/train_data.h"

enum { MC_PP_MAX_SLOTS = 64 }; /* activation slots per stage (in-flight micro-batches) */
enum { MC_MAX_VP = MC_MAX_VP_CHUNKS }; /* model chunks per pipeline rank (refusals.h) */

struct trainer {
    struct mc_args *a;
    double t0;
    mc_tokenizer *tok;
    int64_t padded_vocab;
    struct mc_backend *be;        /* the backend every model chunk runs on (created once) */
    mc_gpt_model *model;          /* chunks[0] */
    mc_gpt_model *chunks[MC_MAX_VP]; /* interleaved pipelining: vp model chunks, else model */
    int vp;                       /* model chunks on this rank (1 without interleaving) */
    mc_optimizer *opt;
    mc_distopt *dopt;             /* instead of opt with --use-distributed-optimizer: dopts[0] */
    mc_ddp *ddp;                  /* data-parallel grad sync: buckets, overlap; ddps[0] */
    mc_distopt *dopts[MC_MAX_VP]; /* one per model chunk (Megatron: one DDP buffer each) */
    mc_ddp *ddps[MC_MAX_VP];
    struct mc_microbatches mb;
    struct mc_opt_sched sched;
    mc_train_data *data;
    struct mc_micro_batch batch;
    float *loss, *dloss;          /* [mbs * seq] */
    int64_t mbs, seq, gbs;
    int64_t consumed_train, consumed_valid;
    double flops_per_sample;
    double flops_so_far;          /* num_floating_point_operations_so_far */
    int64_t start_iteration;      /* args.iteration: from --load, else 0 */
    double start_flops;           /* args.num_floating_point_operations_so_far after --load */
    struct mc_log_accum acc;
    struct mc_parallel_state ps;
    int64_t dp, dp_rank;          /* data-parallel size and this rank's index */
    struct mc_timers timers;      /* Megatron's Timers at --timing-log-level */
    mc_tb_writer *tb;             /* --tensorboard-dir, on the last rank; NULL elsewhere */
    int64_t iteration;            /* args.iteration: iterations completed */
    struct mc_pp_schedule pipe;   /* pp > 1: the 1F1B schedule's buffers */
    struct mc_pp_interleaved vpipe; /* vp > 1: the interleaved schedule's */
    void *embedding_group;        /* pp > 1, tied embeddings, first/last stage: MPI_Comm * */
};

static volatile sig_atomic_t got_sigterm;
static void on_sigterm(int sig) { (void)sig; got_sigterm = 1; }

/* Megatron's print_rank_0 / print_rank_last: stdout on the world's first / last rank, NULL
 * elsewhere (set by setup_printing before anything is printed). */
static FILE *out_first, *out_last;
static void *world_comm; /* the MPI world (NULL for one process) */

static void setup_printing(const struct mc_args *a)
{
    int64_t rank = mc_args_int(a, MC_A_rank), world = mc_args_int(a, MC_A_world_size);
    out_first = rank == 0 ? stdout : NULL;
    out_last = rank == world - 1 ? stdout : NULL;
    world_comm = mc_comm_world_handle();
}

static void vprint_to(FILE *f, const char *fmt, va_list ap)
{
    if (!f)
        return;
    vfprintf(f, fmt, ap);
    fflush(f);
}

__attribute__((format(printf, 1, 2))) static void print_rank_0(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_to(out_first, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 1, 2))) static void print_rank_last(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_to(out_last, fmt, ap);
    va_end(ap);
}

double mc_time_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void print_datetime(const char *what)
{
    char buf[256];
    mc_log_format_datetime(buf, sizeof(buf), what, 0);
    print_rank_0("%s\n", buf);
}

/* Timers(name, log_level): NULL (a no-op timer) above --timing-log-level. */
static struct mc_timer *timer(struct trainer *t, const char *name, int level)
{
    return mc_timers_get(&t->timers, name, level);
}

/* The all-gather of Timers._get_elapsed_time_all_ranks: each rank fills its row of a zeroed
 * [world, n] float32 table, and a sum over the world assembles it. */
static mc_status gather_timers(void *ctx, const float *local, int n, float *all, int max_world,
                               int *world)
{
    const struct trainer *t = ctx;
    int w = t->ps.world > 0 ? t->ps.world : 1, r = t->ps.world > 0 ? t->ps.rank : 0;
    if (w > max_world)
        return mc_error(MC_ERR_UNSUPPORTED, "timers: %d ranks, at most %d are reported", w,
                        max_world);
    memset(all, 0, sizeof(float) * (size_t)n * (size_t)w);
    memcpy(all + (size_t)r * (size_t)n, local, sizeof(float) * (size_t)n);
    *world = w;
    return mc_comm_all_reduce(world_comm, all, (int64_t)n * w, MC_DTYPE_F32, MC_COMM_SUM,
                              "timers all-gather");
}

/* timers.log(names, normalizer) on every rank (a collective): the last rank prints the block
 * (nothing when no timer measured anything); the timers read are reset. */
static mc_status log_timers(struct trainer *t, const char *const *names, int n, double normalizer)
{
    char buf[8192];
    size_t len = 0;
    mc_status st = mc_timers_log_string(&t->timers, names, n, normalizer, true, gather_timers, t,
                                        buf, sizeof(buf), &len);
    if (!st && len > 0)
        print_rank_last("%s\n", buf);
    return st;
}

/* What this build cannot do yet fails loudly, before any work is done: the first entry of the
 * refusal list (pretrain_gpt prints all of them and stops before it gets here). */
static mc_status check_supported(const struct mc_args *a)
{
    static struct mc_refusals r;
    mc_args_refusals(a, &r);
    return r.n ? mc_error(MC_ERR_UNSUPPORTED, "%s", r.msg[0]) : MC_OK;
}

static mc_status build_tokenizer(struct trainer *t)
{
    const struct mc_args *a = t->a;
    struct mc_tokenizer_args ta;
    mc_tokenizer_args_from(a, &ta);
    FILE *log = out_first;
    mc_tokenizer_print_building(log, a);
    if (ta.tokenizer_type && !strcmp(ta.tokenizer_type, "PretrainedFromHF") &&
        mc_args_int(a, MC_A_vocab_extra_ids) > 0)
        return mc_error(MC_ERR_UNSUPPORTED, "--vocab-extra-ids %lld with --tokenizer-type "
                        "PretrainedFromHF: the <extra_id_N> tokens MindSpeed-LLM adds are not "
                        "implemented yet", (long long)mc_args_int(a, MC_A_vocab_extra_ids));
    mc_status st = mc_tok_init(&ta, &t->tok);
    if (st)
        return st;
    st = mc_vocab_padded_from_args(a, mc_tok_vocab_size(t->tok), log, &t->padded_vocab);
    if (log)
        fflush(log);
    return st;
}

/* The distributed optimizer over Megatron's grad-buffer layout; prints the per-rank optimizer
 * state against the non-distributed optimizer's (megatron.c's line, not Megatron's). */
/* DistributedDataParallel's bucket_size on this rank (mc_pgb_bucket_size); get_model's
 * --ddp-num-buckets turns into this rank's parameter count / buckets (at least 1, since
 * Megatron's 0 also makes one bucket per parameter). */
static mc_status ddp_bucket_size(const struct trainer *t, int chunk, int64_t *out)
{
    const struct mc_args *a = t->a;
    int64_t bucket = mc_args_is_none(a, MC_A_ddp_bucket_size) ? 0 : mc_args_int(a, MC_A_ddp_bucket_size);
    if (!mc_args_is_none(a, MC_A_ddp_num_buckets)) {
        int64_t n = mc_args_int(a, MC_A_ddp_num_buckets);
        if (!mc_args_is_none(a, MC_A_ddp_bucket_size))
            return mc_error(MC_ERR_CONFIG, "--ddp-num-buckets %lld with --ddp-bucket-size: "
                            "cannot specify both", (long long)n);
        if (n <= 0)
            return mc_error(MC_ERR_CONFIG, "--ddp-num-buckets %lld: must be greater than 0",
                            (long long)n);
        bucket = mc_gpt_num_elements(t->chunks[chunk]) / n;
        bucket = bucket > 0 ? bucket : 1;
    }
    *out = mc_pgb_bucket_size(mc_args_bool(a, MC_A_overlap_grad_reduce), bucket,
                              mc_ps_size(&t->ps, MC_PS_DP_CP), mc_ps_rank(&t->ps, MC_PS_PP));
    if (chunk > 0) /* get_model: disable_bucketing for every chunk after the first */
        *out = 0;
    return MC_OK;
}

/* DistributedDataParallel: the grad buckets and the hooks that overlap their collectives
 * with backward (and the param all-gathers with forward). MC_DDP_BLOCKING=1 keeps the
 * overlap's buckets and call points but makes every collective blocking (for comparisons). */
static mc_status build_ddp(struct trainer *t)
{
    const struct mc_args *a = t->a;
    bool per_token = mc_args_bool(a, MC_A_calculate_per_token_loss);
    if (per_token && mc_args_bool(a, MC_A_ddp_average_in_collective))
        return mc_error(MC_ERR_CONFIG, "--ddp-average-in-collective with "
                        "--calculate-per-token-loss: cannot average in collective when "
                        "calculating per-token loss");
    const char *blocking = getenv("MC_DDP_BLOCKING");
    struct mc_ddp_config dc = {
        .overlap_grad_reduce = mc_args_bool(a, MC_A_overlap_grad_reduce),
        .overlap_param_gather = mc_args_bool(a, MC_A_overlap_param_gather),
        .check_for_nan_in_grad = mc_args_bool(a, MC_A_check_for_nan_in_loss_and_grad),
        .blocking = blocking && strcmp(blocking, "0") && *blocking,
        .grad_scale = mc_ddp_grad_scale(&t->ps, per_token),
    };
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++) /* one DDP per model chunk, as get_model */
        if (!(st = ddp_bucket_size(t, v, &dc.bucket_size)))
            st = mc_ddp_init(&dc, mc_gpt_param_set(t->chunks[v]), &t->ps, t->dopts[v],
                             &t->ddps[v]);
    t->ddp = t->ddps[0];
    if (st)
        return st;
    if (dc.overlap_grad_reduce)
        print_rank_0(" > data-parallel grad sync: %lld bucket(s) on this rank, collectives "
                     "%s\n", (long long)mc_ddp_num_buckets(t->ddp),
                     dc.blocking ? "blocking (MC_DDP_BLOCKING)" : "overlapped with backward");
    return MC_OK;
}

static mc_status build_distopt(struct trainer *t, const struct mc_optimizer_config *oc)
{
    const struct mc_args *a = t->a;
    int64_t bucket;
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++) /* one per chunk: its own buffer and shards */
        if (!(st = ddp_bucket_size(t, v, &bucket)))
            st = mc_distopt_init(oc, mc_gpt_param_set(t->chunks[v]), &t->ps, world_comm, bucket,
                                 mc_args_bool(a, MC_A_ddp_pad_buckets_for_high_nccl_busbw),
                                 &t->dopts[v]);
    t->dopt = t->dopts[0];
    if (st)
        return st;
    int64_t sharded = 0, full = 0, buckets = 0, numel = 0, unpadded = 0;
    for (int c = 0; c < t->vp; c++) {
        int64_t sh, fu;
        mc_distopt_state_numel(t->dopts[c], &sh, &fu);
        sharded += sh;
        full += fu;
        const struct mc_pgb_map *map = mc_distopt_map(t->dopts[c]);
        buckets += map->n_buckets;
        numel += map->numel;
        unpadded += map->numel_unpadded;
    }
    print_rank_0(" > distributed optimizer: %lld buckets, buffer %lld elements (%lld unpadded); "
                 "optimizer state on this rank: %lld elements (%.3f MB) of %lld (%.3f MB) "
                 "without it\n", (long long)buckets, (long long)numel,
                 (long long)unpadded, (long long)sharded,
                 (double)sharded * 4 / 1048576.0, (long long)full, (double)full * 4 / 1048576.0);
    return MC_OK;
}

/* The tied word embeddings with pp > 1: the first stage's embedding.word_embeddings.weight
 * (in chunk 0) and the last stage's output_layer.weight copy (in chunk vp - 1). */
static struct mc_param_view tied_embedding(const struct trainer *t)
{
    bool first = mc_ps_is_pipeline_first_stage(&t->ps);
    const mc_gpt_model *m = t->chunks[first ? 0 : t->vp - 1];
    int64_t i = mc_gpt_param_index(m, first ? "embedding.word_embeddings.weight"
                                            : "output_layer.weight");
    MC_ASSERT(i >= 0);
    return mc_gpt_param(m, i);
}

/* finalize_model_grads' _allreduce_word_embedding_grads: the tied embedding's grad is summed
 * over the embedding group (first and last stage), after the data-parallel reduction (with
 * the distributed optimizer only the shard this rank owns, the part its step reads; Megatron
 * all-reduces the whole main_grad of the embedding). */
static mc_status pp_embedding_grad_sync(struct trainer *t)
{
    if (!t->embedding_group)
        return MC_OK;
    struct mc_param_view v = tied_embedding(t);
    float *g = v.grad;
    int64_t n = v.numel;
    int c = mc_ps_is_pipeline_first_stage(&t->ps) ? 0 : t->vp - 1; /* the chunk holding it */
    if (t->dopt) /* after the reduce-scatter: this rank's shard (same range on both stages) */
        mc_distopt_param_main_grad(t->dopts[c], mc_gpt_param_index(t->chunks[c], v.name), &g,
                                   &n);
    return mc_comm_all_reduce(t->embedding_group, g, n, MC_DTYPE_F32, MC_COMM_SUM,
                              "embedding-group word-embedding grad all-reduce");
}

/* The memory the activation slots of one rank may take: MC_ACTIVATION_MEMORY_LIMIT_MB, else
 * half the machine's memory shared by the ranks on it (the launcher's local size, else the
 * world size). */
static double activation_memory_limit(const struct trainer *t)
{
    const char *env = getenv("MC_ACTIVATION_MEMORY_LIMIT_MB");
    if (env && *env)
        return strtod(env, NULL) * 1048576.0;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local || !*local)
        local = getenv("MPI_LOCALNRANKS");
    long ranks = local && *local ? strtol(local, NULL, 10) : t->ps.world;
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    return phys / 2.0 / (double)(ranks > 0 ? ranks : 1);
}

/* Megatron keeps the autograd graph of every in-flight micro-batch: on stage `rank`
 * min(pp - rank, M) in 1F1B, per model chunk what the interleaved order leaves in flight
 * (mc_pp_in_flight). Each chunk gets as many activation slots, so no forward runs twice; where
 * they would pass the memory limit (or cannot be allocated) every chunk keeps one and the
 * schedule recomputes, said once in the log. */
static mc_status pp_activation_slots(struct trainer *t)
{
    const struct mc_args *a = t->a;
    int rank = mc_ps_rank(&t->ps, MC_PS_PP);
    int64_t in_flight[MC_MAX_VP], max_micro = t->gbs / (t->mbs * t->dp), most = 0, total = 0;
    int64_t group = t->vp > 1 && !mc_args_is_none(a, MC_A_microbatch_group_size_per_vp_stage)
                        ? mc_args_int(a, MC_A_microbatch_group_size_per_vp_stage) : 0;
    mc_status st = mc_pp_in_flight(t->ps.pp, rank, t->vp, max_micro > 0 ? max_micro : 1, group,
                                   in_flight);
    if (st)
        return st;
    double need = 0, mask = (double)(t->mbs * t->seq * t->seq); /* a slot's mask copy */
    for (int v = 0; v < t->vp; v++) {
        if (in_flight[v] > MC_PP_MAX_SLOTS)
            in_flight[v] = MC_PP_MAX_SLOTS;
        if (in_flight[v] < 1)
            in_flight[v] = 1;
        size_t per = mc_gpt_slot_activation_bytes(t->chunks[v]);
        need += (double)(mc_gpt_activation_bytes(t->chunks[v]) - per) +
                (double)in_flight[v] * ((double)per + mask);
        most = in_flight[v] > most ? in_flight[v] : most;
        total += in_flight[v];
    }
    if (most <= 1)
        return MC_OK;
    double limit = activation_memory_limit(t);
    st = need <= limit ? MC_OK : MC_ERR_NOMEM;
    for (int v = 0; v < t->vp && !st; v++)
        st = mc_gpt_set_activation_slots(t->chunks[v], (int)in_flight[v]);
    if (st != MC_ERR_NOMEM)
        return st;
    for (int v = 0; v < t->vp; v++) /* back to one slot each (a smaller block) */
        if ((st = mc_gpt_set_activation_slots(t->chunks[v], 1)))
            return st;
    if (mc_ps_rank(&t->ps, MC_PS_TP) != 0 || t->dp_rank != 0)
        return MC_OK;
    printf(" > pipeline stage %d: the activations of %lld in-flight micro-batches need "
           "%.1f MiB (limit %.1f MiB, MC_ACTIVATION_MEMORY_LIMIT_MB%s): keeping one and "
           "recomputing each forward before its backward\n", rank, (long long)total,
           need / 1048576.0, limit / 1048576.0, need <= limit ? "; allocation failed" : "");
    fflush(stdout);
    return MC_OK;
}

/* --num-virtual-stages-per-pipeline-rank: the interleaved schedule with
 * --microbatch-group-size-per-virtual-pipeline-stage (default pp) and overlap_p2p_comm. */
static mc_status interleaved_init(struct trainer *t, const struct mc_pp_p2p *p)
{
    const struct mc_args *a = t->a;
    int64_t group = mc_args_is_none(a, MC_A_microbatch_group_size_per_vp_stage)
                        ? 0 : mc_args_int(a, MC_A_microbatch_group_size_per_vp_stage);
    return mc_pp_interleaved_init(&t->vpipe, p, t->vp, group,
                                  mc_args_bool(a, MC_A_overlap_p2p_comm));
}

/* Pipeline stages (pp > 1): the grad norm over the model-parallel group, the 1F1B buffers,
 * and with tied embeddings the embedding group, over which the last stage's copy starts as
 * zeros all-reduced with the first stage's weights (so the copies are equal, as Megatron's
 * LanguageModule.setup_embeddings_and_output_layer makes them). */
static mc_status pp_setup(struct trainer *t)
{
    if (t->ps.pp == 1)
        return MC_OK;
    const struct mc_gpt_config *c = mc_gpt_model_config(t->model);
    struct mc_pp_p2p p = {t->ps.group[MC_PS_PP].comm, t->ps.pp, mc_ps_rank(&t->ps, MC_PS_PP),
                          t->seq * t->mbs * c->hidden_size /
                              (c->sequence_parallel ? c->tensor_model_parallel_size : 1),
                          NULL, NULL, false}; /* [s/tp, b, h] with --sequence-parallel */
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++)
        st = mc_gpt_set_mp_comm(t->chunks[v], t->ps.group[MC_PS_MP].comm);
    if (st || (st = t->vp > 1 ? interleaved_init(t, &p) : mc_pp_schedule_init(&t->pipe, &p)) ||
        (st = pp_activation_slots(t)))
        return st;
    if (c->untie_embeddings_and_output_weights)
        return MC_OK;
    if ((st = mc_pp_embedding_group_init(&p, &t->embedding_group)) || !t->embedding_group)
        return st;
    struct mc_param_view v = tied_embedding(t);
    if (mc_ps_is_pipeline_last_stage(&t->ps))
        memset(v.data, 0, sizeof(float) * (size_t)v.numel);
    return mc_comm_all_reduce(t->embedding_group, v.data, v.numel, MC_DTYPE_F32, MC_COMM_SUM,
                              "embedding-group word-embedding weight all-reduce");
}

/* set_global_variables' _set_timers and _set_tensorboard_writer: only the last rank writes. */
static mc_status init_logging(struct trainer *t)
{
    const struct mc_args *a = t->a;
    mc_status st = mc_timers_init(&t->timers, (int)mc_args_int(a, MC_A_timing_log_level),
                                  mc_args_str(a, MC_A_timing_log_option));
    bool tb = !mc_args_is_none(a, MC_A_tensorboard_dir);
    if (st || (!tb && !mc_args_bool(a, MC_A_log_timers_to_tensorboard)))
        return st;
    int64_t every = mc_args_int(a, MC_A_tensorboard_log_interval);
    if (every <= 0) /* Megatron would divide by it and fail mid-run */
        return mc_error(MC_ERR_CONFIG, "--tensorboard-log-interval %lld: expected a positive "
                        "number of iterations", (long long)every);
    if (!tb || !out_last)
        return MC_OK;
    print_rank_last("> setting tensorboard ...\n");
    return mc_tb_open(mc_args_str(a, MC_A_tensorboard_dir),
                      mc_args_int(a, MC_A_tensorboard_queue_size), &t->tb);
}

static mc_status ckpt_barrier(void *ctx)
{
    (void)ctx;
    int64_t x = 0;
    return mc_comm_all_reduce(world_comm, &x, 1, MC_DTYPE_I64, MC_COMM_MAX, "checkpoint barrier");
}

/* Every rank's outcome of a checkpoint step: ok on all ranks or on none. */
static mc_status ckpt_all_ok(void *ctx, bool *ok)
{
    (void)ctx;
    int64_t failed = !*ok;
    mc_status st = mc_comm_all_reduce(world_comm, &failed, 1, MC_DTYPE_I64, MC_COMM_MAX,
                                      "checkpoint outcome");
    *ok = !failed;
    return st;
}

/* One file per (tensor, pipeline) rank, written by data-parallel rank 0 (distrib_optim.pt
 * gathered over the data-parallel group first); global rank 0 writes the tracker after every
 * file is on disk. */
static void ckpt_layout(const struct trainer *t, struct mc_ckpt_state *s)
{
    s->tp_rank = mc_ps_rank(&t->ps, MC_PS_TP);
    s->tp_size = mc_ps_size(&t->ps, MC_PS_TP);
    s->pp_rank = mc_ps_rank(&t->ps, MC_PS_PP);
    s->pp_size = mc_ps_size(&t->ps, MC_PS_PP);
    s->writer = t->dp_rank == 0;
    s->write_tracker = t->ps.rank == 0;
    s->barrier = t->ps.world > 1 ? ckpt_barrier : NULL;
    s->all_ok = t->ps.world > 1 ? ckpt_all_ok : NULL;
    s->distopt = t->dopt;
    s->n_chunks = t->vp; /* interleaved: model0, model1, ... and one distopt buffer per chunk */
    s->chunks = t->chunks;
    s->distopts = t->dopt ? t->dopts : NULL;
}

/* setup_model_and_optimizer's load_checkpoint: resumes the iteration, the consumed samples,
 * the model, the optimizer and the scheduler from --load. */
static mc_status load_checkpoint(struct trainer *t)
{
    if (mc_args_is_none(t->a, MC_A_load))
        return MC_OK;
    struct mc_ckpt_state s = {.model = t->model, .opt = t->opt, .sched = &t->sched};
    ckpt_layout(t, &s);
    bool loaded;
    mc_status st = mc_train_ckpt_load(t->a, &s, out_first, &loaded);
    if (st || !loaded)
        return st;
    t->start_iteration = s.iteration;
    t->flops_so_far = t->start_flops = s.num_floating_point_operations_so_far;
    t->consumed_train = mc_args_int(t->a, MC_A_consumed_train_samples);
    t->consumed_valid = mc_args_int(t->a, MC_A_consumed_valid_samples);
    /* build_train_valid_test_data_iterators: checkpoints without sample counters */
    const struct mc_args *a = t->a;
    if (t->start_iteration > 0 && t->consumed_train == 0 && mc_args_is_none(a, MC_A_train_samples))
        t->consumed_train = t->start_iteration * t->gbs;
    if (t->start_iteration > 0 && t->consumed_valid == 0 && !mc_args_is_none(a, MC_A_eval_interval) &&
        mc_args_int(a, MC_A_eval_interval) > 0)
        t->consumed_valid = t->start_iteration / mc_args_int(a, MC_A_eval_interval) *
                            mc_args_int(a, MC_A_eval_iters) * t->gbs;
    return MC_OK;
}

/* save_checkpoint_and_time: the save, its timer line, and the time kept out of the interval. */
static mc_status save_checkpoint(struct trainer *t, int64_t iteration)
{
    /* checkpoint time is kept out of the iteration time, as Megatron does */
    struct mc_timer *interval = timer(t, "interval-time", 0), *tm = timer(t, "save-checkpoint", 0);
    bool timing = interval && interval->started;
    if (timing)
        mc_timer_stop(interval);
    mc_timer_start(tm);
    /* Megatron disables the forward pre-hook (forcing the param all-gather) before saving */
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++)
        st = mc_ddp_finish_param_sync(t->ddps[v]);
    if (st)
        return st;
    mc_args_set_int(t->a, MC_A_consumed_train_samples, t->consumed_train);
    mc_args_set_int(t->a, MC_A_consumed_valid_samples, t->consumed_valid);
    struct mc_ckpt_state s = {.model = t->model, .opt = t->opt, .sched = &t->sched,
                              .iteration = iteration,
                              .num_floating_point_operations_so_far = t->flops_so_far,
                              .args_iteration = t->start_iteration, .args_flops = t->start_flops,
                              .do_train = mc_train_data_has(t->data, MC_TRAIN_SPLIT_TRAIN) &&
                                          mc_args_int(t->a, MC_A_train_iters) > 0,
                              .do_valid = mc_train_data_has(t->data, MC_TRAIN_SPLIT_VALID) &&
                                          mc_args_int(t->a, MC_A_eval_iters) > 0,
                              .do_test = mc_train_data_has(t->data, MC_TRAIN_SPLIT_TEST) &&
                                         mc_args_int(t->a, MC_A_eval_iters) > 0};
    ckpt_layout(t, &s);
    st = mc_train_ckpt_save(t->a, &s, out_first);
    if (st)
        return st;
    mc_timer_stop(tm);
    static const char *const names[] = {"save-checkpoint"};
    if ((st = log_timers(t, names, 1, 1.0)))
        return st;
    fflush(stdout);
    if (timing)
        mc_timer_start(interval);
    return MC_OK;
}

static mc_status build_model_and_optimizer(struct trainer *t)
{
    const struct mc_args *a = t->a;
    struct mc_gpt_config c;
    int tp_rank = mc_ps_rank(&t->ps, MC_PS_TP);
    mc_status st = mc_gpt_config_from_args(a, mc_tok_vocab_size(t->tok), t->padded_vocab, tp_rank, &c);
    c.pipeline_model_parallel_size = t->ps.pp;
    c.pipeline_model_parallel_rank = mc_ps_rank(&t->ps, MC_PS_PP);
    bool vpp = !mc_args_is_none(a, MC_A_virtual_pipeline_model_parallel_size);
    t->vp = vpp ? (int)mc_args_int(a, MC_A_virtual_pipeline_model_parallel_size) : 1;
    c.virtual_pipeline_model_parallel_size = vpp ? t->vp : 0;
    int64_t n_params = 0;
    if (!st)
        st = mc_backend_create(NULL, &t->be);
    /* get_model: one model per chunk, built with the virtual rank set to the chunk */
    for (int v = 0; v < t->vp && !st; v++) {
        c.virtual_pipeline_model_parallel_rank = v;
        if ((st = mc_gpt_model_init_backend(&c, t->be, &t->chunks[v])))
            break;
        if (mc_ps_size(&t->ps, MC_PS_TP) > 1)
            st = mc_gpt_set_tp_comm(t->chunks[v], t->ps.group[MC_PS_TP].comm);
        n_params += mc_gpt_num_elements(t->chunks[v]);
    }
    t->model = t->chunks[0];
    if (st || (st = pp_setup(t)))
        return st;
    if (t->dp_rank == 0) { /* Megatron prints this on every data-parallel rank 0 */
        printf(" > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %lld\n",
               tp_rank, mc_ps_rank(&t->ps, MC_PS_PP), (long long)n_params);
        fflush(stdout);
    }
    struct mc_optimizer_config oc;
    mc_opt_config_from_args(a, &oc);
    const struct mc_param_set *sets[MC_MAX_VP];
    for (int v = 0; v < t->vp; v++)
        sets[v] = mc_gpt_param_set(t->chunks[v]);
    st = mc_args_bool(a, MC_A_use_distributed_optimizer)
             ? build_distopt(t, &oc) : mc_opt_init_chunks(&oc, sets, t->vp, &t->opt);
    if (st || (st = build_ddp(t)))
        return st;
    struct mc_opt_sched_config sc;
    if ((st = mc_opt_sched_config_from_args(t->a, &t->mb, out_first, &sc)))
        return st;
    if ((st = mc_opt_sched_init(&t->sched, &sc, out_first)))
        return st;
    return load_checkpoint(t);
}

/* loss_func's --check-for-nan-in-loss-and-grad: the local sum of masked losses is finite. */
static mc_status check_loss(const struct trainer *t, double sum)
{
    if (isfinite(sum) || !mc_args_bool(t->a, MC_A_check_for_nan_in_loss_and_grad))
        return MC_OK;
    return mc_error(MC_ERR_INTERNAL, "found %s in local forward loss calculation (rank %d; "
                    "--no-check-for-nan-in-loss-and-grad skips this check)",
                    isnan(sum) ? "NaN" : "Inf", t->ps.rank);
}

/* One micro-batch through the model: loss_func's (sum of masked losses, number of tokens), and
 * with backward the gradient of loss/num_tokens/num_micro (or of the plain sum with
 * --calculate-per-token-loss, normalised after all micro-batches). */
static mc_status micro_step(struct trainer *t, int split, int64_t first, int64_t num_micro,
                            bool backward, double *num, double *den)
{
    struct mc_micro_batch *mb = &t->batch;
    struct mc_timer *fwd = timer(t, "forward-compute", 2), *bg = timer(t, "batch-generator", 2);
    mc_timer_start(fwd);
    mc_timer_start(bg);
    mc_status st = mc_train_data_get(t->data, split, first, mb);
    mc_timer_stop(bg);
    if (st)
        return st;
    struct mc_gpt_batch gb = {.b = mb->b, .s = mb->s, .tokens = mb->tokens, .labels = mb->labels,
                              .position_ids = mb->position_ids,
                              .attention_mask = mb->attention_mask};
    if ((st = mc_gpt_forward(t->model, &gb, backward, t->loss)))
        return st;
    int64_t n = mb->b * mb->s;
    double s, d;
    t->be->ops->masked_loss(t->be, MC_DTYPE_F32, &s, &d, t->loss, mb->loss_mask, n);
    *num = s;
    *den = d;
    if ((st = check_loss(t, s)))
        return st;
    if (!backward) {
        mc_timer_stop(fwd);
        return MC_OK;
    }
    bool per_token = mc_args_bool(t->a, MC_A_calculate_per_token_loss);
    float scale = per_token ? 1.0f : (float)(1.0 / d / (double)num_micro);
    t->be->ops->masked_loss_bwd(t->be, t->dloss, mb->loss_mask, scale, n);
    mc_timer_stop(fwd);
    struct mc_timer *bwd = timer(t, "backward-compute", 2);
    mc_timer_start(bwd);
    st = mc_gpt_backward(t->model, t->dloss);
    mc_timer_stop(bwd);
    return st;
}

/* finalize_model_grads' _allreduce_layernorm_grads (--sequence-parallel): after the
 * data-parallel reduction. With the distributed optimizer the reduced grads are this rank's
 * main_grad shards, so those are summed over the tensor-parallel group (every tp rank of a
 * data-parallel rank has the same buffer layout, hence the same shard ranges); Megatron
 * all-reduces the whole main_grad of these params. */
static mc_status sp_grad_sync_chunk(struct trainer *t, mc_gpt_model *m, mc_distopt *dopt)
{
    if (!dopt || !mc_gpt_model_config(m)->sequence_parallel)
        return mc_gpt_sequence_parallel_grad_sync(m);
    int64_t total = 0, n;
    float *g;
    for (int64_t i = 0; i < mc_gpt_num_params(m); i++)
        if (mc_gpt_param(m, i).sequence_parallel) {
            mc_distopt_param_main_grad(dopt, i, &g, &n);
            total += n;
        }
    float *tmp = mc_alloc((size_t)(total > 0 ? total : 1) * sizeof(float));
    if (!tmp)
        return MC_ERR_NOMEM;
    for (int pass = 0; pass < 2; pass++) { /* gather, all-reduce, scatter back */
        int64_t off = 0;
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
            if (!mc_gpt_param(m, i).sequence_parallel)
                continue;
            mc_distopt_param_main_grad(dopt, i, &g, &n);
            memcpy(pass ? g : tmp + off, pass ? tmp + off : g, (size_t)n * sizeof(float));
            off += n;
        }
        mc_status st = pass ? MC_OK : mc_comm_all_reduce(t->ps.group[MC_PS_TP].comm, tmp, total,
                                                         MC_DTYPE_F32, MC_COMM_SUM,
                                                         "sequence-parallel grad all-reduce");
        if (st) {
            mc_free(tmp);
            return st;
        }
    }
    mc_free(tmp);
    return MC_OK;
}

/* Megatron collects these grads of every model chunk; the sums are per element, so chunk by
 * chunk is the same. */
static mc_status sp_grad_sync(struct trainer *t)
{
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++)
        st = sp_grad_sync_chunk(t, t->chunks[v], t->dopt ? t->dopts[v] : NULL);
    return st;
}

/* finalize_model_grads: the data-parallel all-reduce, then the sequence-parallel layernorm
 * all-reduce over the tensor-parallel group (--sequence-parallel) and the pipeline
 * embedding all-reduce (tied embeddings with pp > 1), each under Megatron's timer, then the
 * per-token loss normalisation. */
static mc_status finalize_grads(struct trainer *t, bool per_token, float num_tokens)
{
    struct mc_timer *sync = timer(t, "all-grads-sync", 1);
    mc_timer_start(sync);
    /* the distributed optimizer reduce-scatters (and scales) the grads in its own step */
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++) /* each chunk's DDP, in chunk order */
        st = mc_ddp_grad_sync(t->ddps[v]);
    mc_timer_stop(sync);
    if (st)
        return st;
    static const char *const others[] = {"layernorm-grads-all-reduce",
                                         "embedding-grads-all-reduce"};
    for (int k = 0; k < 2; k++) {
        struct mc_timer *tm = timer(t, others[k], 1);
        mc_timer_start(tm);
        st = k == 1 ? pp_embedding_grad_sync(t) : sp_grad_sync(t);
        mc_timer_stop(tm);
        if (st)
            return st;
    }
    /* num_tokens is already the token count of the whole data-parallel step */
    for (int v = 0; v < t->vp && per_token && !t->dopt; v++)
        mc_ddp_scale_grads(mc_gpt_param_set(t->chunks[v]), 1.0f / num_tokens);
    return MC_OK;
}

/* optimizer.step(): with the distributed optimizer also the grad reduce-scatter (scaled by
 * 1/dp, then by 1/num_tokens with --calculate-per-token-loss) and the param all-gather. */
static mc_status optimizer_step(struct trainer *t, bool per_token, float num_tokens,
                                struct mc_opt_step_result *res)
{
    if (t->dopt)
        return mc_distopt_step_chunks(t->dopts, t->vp, mc_ddp_grad_scale(&t->ps, per_token),
                               per_token ? 1.0f / num_tokens : 1.0f, (float)t->sched.lr,
                               (float)t->sched.wd, res);
    return mc_opt_step(t->opt, (float)t->sched.lr, (float)t->sched.wd, res);
}

/* calc_params_l2_norm: tensor-parallel duplicates counted once, summed over the
 * model-parallel group. */
static mc_status params_norm(const struct trainer *t, double *norm)
{
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++) /* --overlap-param-gather */
        st = mc_ddp_finish_param_sync(t->ddps[v]);
    if (st)
        return st;
    int tp_rank = mc_ps_rank(&t->ps, MC_PS_TP);
    double ss = 0;
    for (int v = 0; v < t->vp; v++) {
        const mc_gpt_model *m = t->chunks[v];
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++) {
            struct mc_param_view p = mc_gpt_param(m, i);
            if ((!p.tensor_parallel && tp_rank != 0) || p.shared)
                continue;
            for (int64_t k = 0; k < p.numel; k++)
                ss += (double)p.data[k] * p.data[k];
        }
    }
    st = mc_comm_all_reduce(t->ps.group[MC_PS_MP].comm, &ss, 1, MC_DTYPE_F64, MC_COMM_SUM,
                            "params-norm all-reduce");
    *norm = sqrt(ss);
    return st;
}

/* MC_TEST_PERTURB_WEIGHT_RANK=r with MC_TEST_PERTURB_AT_ITER=i (test only, docs/parallelism.md):
 * world rank r adds 1e-3 to the first value of its first parameter once iteration i is done,
 * a silent corruption of one replica for the weight-hash tests to catch. */
static void perturb_for_test(const struct trainer *t, int64_t iteration)
{
    const char *r = getenv("MC_TEST_PERTURB_WEIGHT_RANK"), *it = getenv("MC_TEST_PERTURB_AT_ITER");
    if (!r || !it || atoll(r) != (long long)t->ps.rank || atoll(it) != (long long)iteration)
        return;
    struct mc_param_view p = mc_gpt_param(t->chunks[0], 0);
    p.data[0] += 1e-3f;
}

/* --check-weight-hash-across-dp-replicas-interval: Megatron's check in train() (before the
 * first step) and post_training_step_callbacks (every interval iterations): the parameters of
 * every data-parallel replica must hash alike, else AssertionError. */
static mc_status check_weight_hashes(struct trainer *t, int64_t iteration)
{
    mc_status st = MC_OK;
    for (int v = 0; v < t->vp && !st; v++) /* --overlap-param-gather: params complete first */
        st = mc_ddp_finish_param_sync(t->ddps[v]);
    if (st)
        return st;
    bool match = false;
    if ((st = mc_param_hashes_match(t->chunks, t->vp, &t->ps.group[MC_PS_DP], t->ps.rank,
                                    &match)))
        return st;
    if (!match)
        return mc_error(MC_ERR_INTERNAL, "AssertionError: Parameter hashes not matching across "
                                         "DP replicas");
    if ((st = mc_comm_barrier(mc_comm_world_handle())))
        return st;
    print_rank_0(">>> Weight hashes match after %lld iterations...\n", (long long)iteration);
    return MC_OK;
}

/* MegatronPretrainingSampler: each step's samples are cut into micro-batches of mbs * dp
 * consecutive samples, and data-parallel rank d takes [d * mbs, (d + 1) * mbs) of each. */
static int64_t sample_index(const struct trainer *t, int64_t consumed, int64_t micro)
{
    return consumed + (micro * t->dp + t->dp_rank) * t->mbs;
}

/* The dropout stream of micro-batch k of an iteration: its index in the single-process order
 * (micro-batch k of data-parallel rank d holds the samples of micro-batch k * dp + d of the
 * global batch, see sample_index), so every data-parallel size draws the masks one process
 * draws for the same samples. */
static int64_t dropout_step(const struct trainer *t, int64_t iteration, int64_t num_micro,
                            int64_t k)
{
    return (iteration * num_micro + k) * t->dp + t->dp_rank;
}

/* loss_func's 'lm loss' report: [sum of masked losses, token count] summed over the
 * data-parallel group (float32, as Megatron all-reduces the reporting tensor), then added to
 * the iteration's totals. */
static mc_status add_loss_report(const struct trainer *t, double num, double den, float *numer,
                                 float *denom)
{
    float rep[2] = {(float)num, (float)den};
    mc_status st = mc_comm_all_reduce(t->ps.group[MC_PS_DP].comm, rep, 2, MC_DTYPE_F32,
                                      MC_COMM_SUM, "data-parallel loss all-reduce");
    *numer += rep[0];
    *denom += rep[1];
    return st;
}

/* Fault injection for the failure tests (documented in docs/parallelism.md): with
 * MC_TEST_FAIL_RANK=r and MC_TEST_FAIL_AT_ITER=i, world rank r fails in the middle of
 * iteration i (after its first micro-batch) with an error, or, by MC_TEST_FAIL_MODE, kills
 * itself (sigkill), crashes (segv: SIGSEGV, abort: abort()) or hangs (hang: sleeps until the
 * other ranks' watchdog ends the job). */
static mc_status inject_test_failure(const struct trainer *t, int64_t iteration)
{
    const char *r = getenv("MC_TEST_FAIL_RANK"), *it = getenv("MC_TEST_FAIL_AT_ITER");
    if (!r || !it || atoll(r) != (long long)t->ps.rank || atoll(it) != (long long)iteration + 1)
        return MC_OK;
    const char *mode = getenv("MC_TEST_FAIL_MODE");
    fflush(stdout);
    if (mode && !strcmp(mode, "sigkill"))
        raise(SIGKILL);
    if (mode && !strcmp(mode, "segv"))
        raise(SIGSEGV);
    if (mode && !strcmp(mode, "abort"))
        abort();
    while (mode && !strcmp(mode, "hang"))
        sleep(1);
    if (mode && strcmp(mode, "error"))
        return mc_error(MC_ERR_CONFIG, "MC_TEST_FAIL_MODE=%s: expected error, sigkill, segv, "
                        "abort or hang", mode);
    return mc_error(MC_ERR_INTERNAL, "forced failure on rank %s at iteration %s "
                    "(MC_TEST_FAIL_RANK / MC_TEST_FAIL_AT_ITER are set)", r, it);
}

/* ---- pipeline parallelism (pp > 1): the step callbacks of the schedules -------------------
 * pretrain_gpt's forward_step and loss_func on one model chunk: the first (virtual) stage embeds
 * the tokens, the others take the previous stage's activations, the last computes the loss and
 * reports it. Each chunk keeps each in-flight micro-batch's activations in its own slot
 * (pp_activation_slots sizes them as Megatron keeps its in-flight autograd graphs). Where the
 * slots were too many for the memory limit a chunk has one, and a backward whose micro-batch
 * is no longer in a slot runs that chunk's forward again first (same input, same dropout
 * masks, so the same numbers): the order of steps and exchanges is Megatron's either way. */
struct pp_pass {
    struct trainer *t;
    int split;
    int64_t consumed, num_micro, iteration;
    bool training;
    int64_t held[MC_MAX_VP][MC_PP_MAX_SLOTS]; /* micro-batch in each chunk's slots, -1 = none */
    int64_t in_batch;     /* micro-batch held in t->batch, -1 = none */
    float *numer, *denom; /* the lm loss report, summed on the last stage */
};

static void pp_pass_init(struct pp_pass *r, struct trainer *t, int split, int64_t consumed,
                         int64_t num_micro, int64_t iteration, bool training, float *numer,
                         float *denom)
{
    *r = (struct pp_pass){.t = t, .split = split, .consumed = consumed, .num_micro = num_micro,
                          .iteration = iteration, .training = training, .in_batch = -1,
                          .numer = numer, .denom = denom};
    for (int v = 0; v < MC_MAX_VP; v++)
        for (int i = 0; i < MC_PP_MAX_SLOTS; i++)
            r->held[v][i] = -1;
}

/* Virtual stages: chunk 0 of the first pipeline stage embeds, chunk vp - 1 of the last has the
 * loss (Megatron's is_pipeline_first/last_stage with the virtual rank set). */
static bool pp_first(const struct trainer *t, int chunk)
{
    return chunk == 0 && mc_ps_is_pipeline_first_stage(&t->ps);
}

static bool pp_last(const struct trainer *t, int chunk)
{
    return chunk == t->vp - 1 && mc_ps_is_pipeline_last_stage(&t->ps);
}

/* Micro-batch k in t->batch (chunks of one rank share it; every stage reads it: attention
 * masks are needed by all layers). */
static mc_status pp_get_batch(struct pp_pass *r, int64_t k)
{
    if (r->in_batch == k)
        return MC_OK;
    r->in_batch = -1;
    mc_status st = mc_train_data_get(r->t->data, r->split, sample_index(r->t, r->consumed, k),
                                     &r->t->batch);
    if (!st)
        r->in_batch = k;
    return st;
}

/* The slot of `chunk` holding micro-batch k, or -1. */
static int pp_slot_of(const struct pp_pass *r, int chunk, int64_t k)
{
    int n = mc_gpt_activation_slots(r->t->chunks[chunk]);
    for (int i = 0; i < n; i++)
        if (r->held[chunk][i] == k)
            return i;
    return -1;
}

/* A slot for a forward of k: a free one, else (one slot: recomputation) k's own position. */
static int pp_slot_for(const struct pp_pass *r, int chunk, int64_t k)
{
    int n = mc_gpt_activation_slots(r->t->chunks[chunk]);
    for (int i = 0; i < n; i++)
        if (r->held[chunk][i] < 0)
            return i;
    return (int)(k % n);
}

static mc_status pp_run_forward(struct pp_pass *r, int chunk, int64_t k, const float *input)
{
    struct trainer *t = r->t;
    struct mc_micro_batch *mb = &t->batch;
    mc_gpt_model *m = t->chunks[chunk];
    bool first = pp_first(t, chunk), last = pp_last(t, chunk);
    int slot = pp_slot_for(r, chunk, k);
    r->held[chunk][slot] = -1;
    mc_status st = pp_get_batch(r, k);
    if (st || (st = mc_gpt_use_slot(m, slot)))
        return st;
    if (r->training)
        mc_gpt_set_step(m, dropout_step(t, r->iteration, r->num_micro, k));
    struct mc_timer *fwd = timer(t, "forward-compute", 2);
    struct mc_gpt_batch gb = {.b = mb->b, .s = mb->s, .tokens = first ? mb->tokens : NULL,
                              .labels = last ? mb->labels : NULL,
                              .position_ids = mb->position_ids,
                              .attention_mask = mb->attention_mask, .hidden_in = input};
    mc_timer_start(fwd);
    st = mc_gpt_forward(m, &gb, r->training, last ? t->loss : NULL);
    mc_timer_stop(fwd);
    /* forward-only passes (evaluation) take no backward: their slot is free again */
    r->held[chunk][slot] = st || !r->training ? -1 : k;
    return st;
}

/* loss_func: the sum of the masked per-token losses and the token count of the batch held */
static void pp_masked_loss(const struct trainer *t, double *num, double *den)
{
    const struct mc_micro_batch *mb = &t->batch;
    t->be->ops->masked_loss(t->be, MC_DTYPE_F32, num, den, t->loss, mb->loss_mask, mb->b * mb->s);
}

static mc_status pp_chunk_forward(void *ctx, int chunk, int64_t k, const float *input,
                                  const float **output)
{
    struct pp_pass *r = ctx;
    mc_status st = pp_run_forward(r, chunk, k, input);
    if (st)
        return st;
    *output = mc_gpt_stage_output(r->t->chunks[chunk]);
    if (!pp_last(r->t, chunk))
        return MC_OK;
    double num, den;
    pp_masked_loss(r->t, &num, &den);
    if ((st = check_loss(r->t, num)))
        return st;
    return add_loss_report(r->t, num, den, r->numer, r->denom);
}

static mc_status pp_chunk_backward(void *ctx, int chunk, int64_t k, const float *input,
                                   const float *output_grad, const float **input_grad)
{
    struct pp_pass *r = ctx;
    struct trainer *t = r->t;
    mc_gpt_model *m = t->chunks[chunk];
    mc_status st = pp_slot_of(r, chunk, k) >= 0 ? MC_OK : pp_run_forward(r, chunk, k, input);
    int slot = pp_slot_of(r, chunk, k);
    /* backward reads micro-batch k's loss mask on the last stage, and another chunk may have
     * read a later micro-batch since this chunk's forward */
    if (st || (st = pp_get_batch(r, k)) || (st = mc_gpt_use_slot(m, slot)))
        return st;
    r->held[chunk][slot] = -1; /* one backward per forward */
    /* Megatron's no_sync: a chunk's grads sync from its last micro-batch's backward on */
    mc_ddp_set_last_microbatch(t->ddps[chunk], k == r->num_micro - 1);
    struct mc_timer *bwd = timer(t, "backward-compute", 2);
    mc_timer_start(bwd);
    if (pp_last(t, chunk)) {
        double num, den;
        pp_masked_loss(t, &num, &den);
        bool per_token = mc_args_bool(t->a, MC_A_calculate_per_token_loss);
        float scale = per_token ? 1.0f : (float)(1.0 / den / (double)r->num_micro);
        t->be->ops->masked_loss_bwd(t->be, t->dloss, t->batch.loss_mask, scale,
                                    t->batch.b * t->batch.s);
        st = mc_gpt_backward(m, t->dloss);
    } else {
        st = mc_gpt_backward_stage(m, output_grad);
    }
    mc_timer_stop(bwd);
    *input_grad = mc_gpt_stage_input_grad(m);
    return st;
}

/* The 1F1B schedule's callbacks: the one model chunk. */
static mc_status pp_forward(void *ctx, int64_t k, const float *input, const float **output)
{
    return pp_chunk_forward(ctx, 0, k, input, output);
}

static mc_status pp_backward(void *ctx, int64_t k, const float *input, const float *output_grad,
                             const float **input_grad)
{
    return pp_chunk_backward(ctx, 0, k, input, output_grad, input_grad);
}

/* forward_backward_func: the interleaved schedule with vp chunks, else 1F1B. */
static mc_status pp_run_schedule(struct trainer *t, struct pp_pass *r, bool forward_only)
{
    if (t->vp > 1) {
        struct mc_pp_chunk_ops ops = {r, pp_chunk_forward, pp_chunk_backward};
        return mc_pp_forward_backward_pipelining_with_interleaving(&t->vpipe, &ops, r->num_micro,
                                                                   forward_only);
    }
    struct mc_pp_step_ops ops = {r, pp_forward, pp_backward};
    return mc_pp_forward_backward_pipelining_without_interleaving(&t->pipe, &ops, r->num_micro,
                                                                  forward_only);
}

/* The end of train_step on every path: the timed optimizer step, then the scheduler advances
 * by the iteration's samples. */
static mc_status step_optimizer(struct trainer *t, bool per_token, float denom,
                                int64_t num_micro, struct mc_opt_step_result *res)
{
    struct mc_timer *opt = timer(t, "optimizer", 1);
    mc_timer_start(opt);
    mc_status st = optimizer_step(t, per_token, denom, res);
    mc_timer_stop(opt);
    if (st)
        return st;
    mc_opt_sched_step(&t->sched, num_micro * t->mbs * t->dp);
    return MC_OK;
}

/* The lm loss report and token count live on the last stage; Megatron broadcasts the token
 * count over the pipeline for --calculate-per-token-loss. Here both go to every stage (a sum
 * with zeros from the other stages, so the value is exact) and every rank logs the same. */
static mc_status pp_share_loss(const struct trainer *t, float *numer, float *denom)
{
    float v[2] = {*numer, *denom};
    if (!mc_ps_is_pipeline_last_stage(&t->ps))
        v[0] = v[1] = 0;
    mc_status st = mc_comm_all_reduce(t->ps.group[MC_PS_PP].comm, v, 2, MC_DTYPE_F32,
                                      MC_COMM_SUM, "pipeline loss broadcast");
    *numer = v[0];
    *denom = v[1];
    return st;
}

static mc_status train_step_pipelined(struct trainer *t, int64_t iteration, float *lm_loss,
                                      struct mc_opt_step_result *res)
{
    float numer = 0, denom = 0;
    struct pp_pass r;
    pp_pass_init(&r, t, MC_TRAIN_SPLIT_TRAIN, t->consumed_train, t->mb.num_micro_batches,
                 iteration, true, &numer, &denom);
    bool per_token = mc_args_bool(t->a, MC_A_calculate_per_token_loss);
    for (int v = 0; v < t->vp; v++)
        mc_gpt_zero_grad(t->chunks[v]);
    struct mc_timer *fb = timer(t, "forward-backward", 1);
    mc_timer_start(fb);
    mc_status st = pp_run_schedule(t, &r, false);
    if (!st && !(st = inject_test_failure(t, iteration)) &&
        !(st = pp_share_loss(t, &numer, &denom)))
        st = finalize_grads(t, per_token, denom);
    mc_timer_stop(fb);
    if (st || (st = step_optimizer(t, per_token, denom, r.num_micro, res)))
        return st;
    *lm_loss = numer / denom;
    return MC_OK;
}

/* One evaluation iteration through the pipeline (forward only); the report is summed into
 * *numer / *denom on the last stage, which prints it. */
static mc_status evaluate_pipelined(struct trainer *t, int split, int64_t consumed,
                                    int64_t num_micro, float *numer, float *denom)
{
    struct pp_pass r;
    pp_pass_init(&r, t, split, consumed, num_micro, 0, false, numer, denom);
    return pp_run_schedule(t, &r, true);
}

/* train_step: forward/backward over the micro-batches, optimizer, scheduler. */
static mc_status train_step(struct trainer *t, int64_t iteration, float *lm_loss,
                            struct mc_opt_step_result *res)
{
    if (t->ps.pp > 1)
        return train_step_pipelined(t, iteration, lm_loss, res);
    int64_t num_micro = t->mb.num_micro_batches;
    float numer = 0, denom = 0; /* Megatron sums the reports in float32 */
    mc_gpt_zero_grad(t->model);
    struct mc_timer *fb = timer(t, "forward-backward", 1);
    mc_timer_start(fb);
    for (int64_t k = 0; k < num_micro; k++) {
        double num, den;
        mc_gpt_set_step(t->model, dropout_step(t, iteration, num_micro, k));
        mc_ddp_set_last_microbatch(t->ddp, k == num_micro - 1); /* Megatron's no_sync */
        mc_status st = micro_step(t, MC_TRAIN_SPLIT_TRAIN, sample_index(t, t->consumed_train, k),
                                  num_micro, true, &num, &den);
        if (st || (st = add_loss_report(t, num, den, &numer, &denom)))
            return st;
        if (k == 0 && (st = inject_test_failure(t, iteration)))
            return st;
    }
    bool per_token = mc_args_bool(t->a, MC_A_calculate_per_token_loss);
    mc_status st = finalize_grads(t, per_token, denom);
    mc_timer_stop(fb);
    if (st || (st = step_optimizer(t, per_token, denom, num_micro, res)))
        return st;
    *lm_loss = numer / denom;
    return MC_OK;
}

/* True on every rank when it is true on any (Megatron all-reduces exit conditions with MAX so
 * that the ranks stop together). A failed reduction counts as true: stop rather than hang. */
static bool on_any_rank(bool v)
{
    int64_t x = v;
    if (mc_comm_all_reduce(world_comm, &x, 1, MC_DTYPE_I64, MC_COMM_MAX, "exit-flag all-reduce"))
        return true;
    return x != 0;
}

static bool time_limit_reached(const struct trainer *t, double *minutes)
{
    if (mc_args_is_none(t->a, MC_A_exit_duration_in_mins))
        return false;
    *minutes = (mc_time_now() - t->t0) / 60.0;
    return on_any_rank(*minutes > (double)mc_args_int(t->a, MC_A_exit_duration_in_mins));
}

/* ---- TensorBoard: what training_log / evaluate_and_print_results / train() write --------- */

/* `tag` at the iteration and `tag vs samples` at the consumed training samples. */
static mc_status tb_pair(struct trainer *t, const char *tag, double value, int64_t iteration)
{
    char vs[128];
    snprintf(vs, sizeof(vs), "%s vs samples", tag);
    mc_status st = mc_tb_add_scalar(t->tb, tag, value, iteration);
    return st ? st : mc_tb_add_scalar(t->tb, vs, value, t->consumed_train);
}

/* write_args_to_tensorboard: str() of every argument as text, at the start iteration. Megatron
 * writes vars(args); we write the arguments of the dump plus the attributes setup adds. */
static mc_status tb_write_args(struct trainer *t)
{
    char buf[4096];
    mc_status st = MC_OK;
    for (int id = 0; id < MC_A_FIRST_EXTENSION && !st; id++) {
        if (t->a->deleted[id])
            continue;
        size_t need = mc_py_str(NULL, 0, &t->a->v[id]) + 1; /* long --data-path lists */
        char *text = need <= sizeof(buf) ? buf : mc_alloc(need);
        if (!text)
            return MC_ERR_NOMEM;
        mc_py_str(text, need, &t->a->v[id]);
        st = mc_tb_add_text(t->tb, mc_arg_defs[id].dest, text, t->iteration);
        if (text != buf)
            mc_free(text);
    }
    snprintf(buf, sizeof(buf), "%lld", (long long)t->padded_vocab);
    if (!st)
        st = mc_tb_add_text(t->tb, "padded_vocab_size", buf, t->iteration);
    snprintf(buf, sizeof(buf), "%lld", (long long)t->iteration);
    if (!st)
        st = mc_tb_add_text(t->tb, "iteration", buf, t->iteration);
    return st ? st : mc_tb_flush(t->tb);
}

/* Timers.write(names, writer, iteration, normalizer) on every rank (a collective):
 * "<name>-time" = the maximum over the ranks in seconds per iteration (float32, as Megatron's
 * gathered tensor), for the timers that measured something; reset even without a writer. */
static mc_status tb_write_timers(struct trainer *t, int64_t iteration, double normalizer)
{
    float s[MC_TIMERS_MAX];
    int n = mc_training_log_timers_count;
    MC_ASSERT(n <= MC_TIMERS_MAX);
    for (int k = 0; k < n; k++) {
        struct mc_timer *tm = NULL;
        for (int j = 0; j < t->timers.n && !tm; j++)
            if (!strcmp(t->timers.t[j].name, mc_training_log_timers[k]))
                tm = &t->timers.t[j];
        s[k] = (float)mc_timer_elapsed(tm, true);
    }
    mc_status st = mc_comm_all_reduce(world_comm, s, n, MC_DTYPE_F32, MC_COMM_MAX,
                                      "timers max-reduce");
    for (int k = 0; k < n && !st && t->tb; k++) {
        if (!(s[k] > 0.0f))
            continue;
        char tag[MC_TIMER_NAME_MAX + 8];
        snprintf(tag, sizeof(tag), "%s-time", mc_training_log_timers[k]);
        st = mc_tb_add_scalar(t->tb, tag, (double)s[k] / normalizer, iteration);
    }
    return st;
}

/* training_log's per-iteration part (every --tensorboard-log-interval): this iteration's
 * values, not the interval averages of the printed line. Every rank comes here, for the
 * collectives (timers, params norm); only the writer writes. */
static mc_status tb_training_log(struct trainer *t, int64_t iteration, float loss,
                                 const struct mc_opt_step_result *res)
{
    const struct mc_args *a = t->a;
    bool timers_to_tb = mc_args_bool(a, MC_A_log_timers_to_tensorboard);
    bool tb_run = !mc_args_is_none(a, MC_A_tensorboard_dir);
    if ((!tb_run && !timers_to_tb) || iteration % mc_args_int(a, MC_A_tensorboard_log_interval))
        return MC_OK;
    mc_status st = MC_OK;
    double iters = (double)(t->acc.advanced + t->acc.skipped); /* Megatron's total_iterations */
    if (timers_to_tb && (st = tb_write_timers(t, iteration, iters)))
        return st;
    double pnorm = 0;
    bool with_pnorm = tb_run && mc_args_bool(a, MC_A_log_params_norm);
    if (with_pnorm && (st = params_norm(t, &pnorm)))
        return st;
    if (!t->tb)
        return MC_OK;
    if ((st = tb_pair(t, "learning-rate", (double)(float)t->sched.lr, iteration)) ||
        (st = tb_pair(t, "batch-size", (double)t->mb.running, iteration)) ||
        (st = tb_pair(t, "lm loss", (double)loss, iteration)))
        return st;
    if (mc_args_bool(a, MC_A_log_loss_scale_to_tensorboard) &&
        (st = tb_pair(t, "loss-scale", 1.0, iteration)))
        return st;
    if (mc_args_bool(a, MC_A_log_world_size_to_tensorboard) &&
        (st = tb_pair(t, "world-size", (double)mc_args_int(a, MC_A_world_size), iteration)))
        return st;
    if ((st = tb_pair(t, "grad-norm", (double)res->grad_norm, iteration)) ||
        (st = tb_pair(t, "num-zeros", (double)res->num_zeros, iteration)))
        return st;
    return with_pnorm ? tb_pair(t, "params-norm", pnorm, iteration) : MC_OK;
}

/* training_log at a --log-interval with --log-timers-to-tensorboard: seconds per iteration and
 * (with --log-throughput) TFLOP/s per GPU; then the queued events go to the file. */
static mc_status tb_interval_log(struct trainer *t, int64_t iteration, double interval_s)
{
    if (!t->tb)
        return MC_OK;
    const struct mc_args *a = t->a;
    mc_status st = MC_OK;
    if (mc_args_bool(a, MC_A_log_timers_to_tensorboard)) {
        int64_t iters = t->acc.advanced + t->acc.skipped;
        double per_iter = interval_s / (double)(iters ? iters : 1);
        st = mc_tb_add_scalar(t->tb, "iteration-time", per_iter, iteration);
        double flops = t->flops_per_sample * (double)t->gbs;
        if (!st && mc_args_bool(a, MC_A_log_throughput))
            st = mc_tb_add_scalar(t->tb, "throughput",
                                  mc_log_throughput(flops, per_iter, t->ps.world), iteration);
    }
    return st ? st : mc_tb_flush(t->tb);
}

/* evaluate_and_print_results: "<key> validation" (and its ppl with
 * --log-validation-ppl-to-tensorboard), each with its "vs samples" twin. */
static mc_status tb_validation(struct trainer *t, const char *key, double loss)
{
    if (!t->tb)
        return MC_OK;
    char tag[96];
    snprintf(tag, sizeof(tag), "%s validation", key);
    mc_status st = tb_pair(t, tag, (double)(float)loss, t->iteration);
    if (!st && mc_args_bool(t->a, MC_A_log_validation_ppl_to_tensorboard)) {
        snprintf(tag, sizeof(tag), "%s validation ppl", key);
        st = tb_pair(t, tag, exp(fmin(20.0, (double)(float)loss)), t->iteration);
    }
    return st ? st : mc_tb_flush(t->tb);
}

/* evaluate + evaluate_and_print_results. *abandoned is set when the time limit stops it. */
static mc_status evaluate_and_print(struct trainer *t, int split, const char *prefix, bool verbose,
                                    int64_t *consumed, bool *abandoned)
{
    int64_t eval_iters = mc_args_int(t->a, MC_A_eval_iters);
    int64_t eval_micro = t->gbs / (t->mbs * t->dp);
    struct mc_timer *ev = timer(t, "evaluate", 0), *fb = timer(t, "forward-backward", 1);
    mc_timer_start(ev);
    float numer = 0, denom = 0;
    *abandoned = false;
    if (verbose)
        print_rank_0("Evaluating on %lld samples\n", (long long)(eval_iters * t->gbs));
    for (int64_t it = 1; it <= eval_iters; it++) {
        if (verbose)
            print_rank_0("Evaluating iter %lld/%lld\n", (long long)it, (long long)eval_iters);
        mc_timer_start(fb); /* forward_backward_func runs (forward only) under its timer */
        if (t->ps.pp > 1) {
            mc_status st = evaluate_pipelined(t, split, *consumed, eval_micro, &numer, &denom);
            if (st)
                return st;
        }
        for (int64_t k = 0; k < eval_micro && t->ps.pp == 1; k++) {
            double num, den;
            mc_status st = micro_step(t, split, sample_index(t, *consumed, k), eval_micro, false,
                                      &num, &den);
            if (st || (st = add_loss_report(t, num, den, &numer, &denom)))
                return st;
        }
        mc_timer_stop(fb);
        *consumed += t->gbs;
        double minutes;
        if (time_limit_reached(t, &minutes)) {
            print_rank_0("Exiting during evaluation, timelimit reached\n");
            mc_timer_stop(ev);
            *abandoned = true;
            return MC_OK;
        }
    }
    mc_timer_stop(ev);
    static const char *const ev_names[] = {"evaluate"};
    mc_status st = log_timers(t, ev_names, 1, 1.0);
    static const char *const names[] = {"lm loss"};
    double value = (double)(numer / denom);
    /* the final evaluations of a --skip-train run do not write to TensorBoard */
    if (!st && (!verbose || !mc_args_bool(t->a, MC_A_skip_train)))
        st = tb_validation(t, names[0], value);
    char buf[1024];
    mc_log_format_validation(buf, sizeof(buf), prefix, 1, names, &value);
    print_rank_last("%s", buf);
    return st;
}

static mc_status print_training_line(struct trainer *t, int64_t iteration, double interval_s,
                                     const struct mc_opt_step_result *res, bool *report_memory)
{
    const struct mc_args *a = t->a;
    struct mc_log_train_line l = {0};
    const char *names[MC_LOG_MAX_LOSSES];
    l.iteration = iteration;
    l.train_iters = mc_args_int(a, MC_A_train_iters);
    l.consumed_samples = t->consumed_train;
    int64_t iters = t->acc.advanced + t->acc.skipped;
    l.elapsed_per_iter_s = interval_s / (double)(iters ? iters : 1);
    l.log_throughput = mc_args_bool(a, MC_A_log_throughput);
    l.throughput = mc_log_throughput(t->flops_per_sample * (double)t->gbs, l.elapsed_per_iter_s,
                                     t->ps.world);
    l.learning_rate = t->sched.lr;
    l.batch_size = t->mb.running;
    mc_log_accum_fill(&t->acc, names, &l);
    l.loss_scale = 1.0;
    l.has_grad_norm = true;
    l.grad_norm = res->grad_norm;
    l.has_num_zeros = true;
    l.num_zeros = (double)res->num_zeros;
    l.has_params_norm = mc_args_bool(a, MC_A_log_params_norm);
    mc_status st = l.has_params_norm ? params_norm(t, &l.params_norm) : MC_OK;
    if (st)
        return st;
    char buf[2048];
    mc_log_format_train_line(buf, sizeof(buf), &l);
    print_rank_last("%s\n", buf);
    if (getenv("MC_TEST_LOG_EXACT")) /* full-precision values for the parallel tests */
        print_rank_last("[exact] iteration %lld | lm loss: %.9e | grad norm: %.9e | "
                        "params norm: %.9e\n", (long long)iteration,
                        l.n_losses ? (double)l.loss_sums[0] /
                            (double)(l.advanced_iters > 0 ? l.advanced_iters : 1) : 0.0,
                        (double)res->grad_norm, l.has_params_norm ? l.params_norm : 0.0);
    mc_log_accum_reset(&t->acc);
    if (*report_memory) {
        /* Megatron reports the CUDA allocator; we report megatron.c's counted allocations. */
        double mb = 1024.0 * 1024.0;
        char name[64];
        snprintf(name, sizeof(name), "(after %lld iterations)", (long long)iteration);
        mc_log_format_memory(buf, sizeof(buf), t->ps.rank, name, (double)mc_alloc_live_bytes() / mb,
                             (double)mc_alloc_peak_bytes() / mb, (double)mc_alloc_live_bytes() / mb,
                             (double)mc_alloc_peak_bytes() / mb);
        if (t->dp_rank == 0) /* Megatron's report_memory prints on data-parallel rank 0 */
            printf("%s\n", buf);
        *report_memory = false;
    }
    fflush(stdout);
    return MC_OK;
}

static int64_t save_interval(const struct mc_args *a)
{
    return mc_args_is_none(a, MC_A_save_interval) ? 0 : mc_args_int(a, MC_A_save_interval);
}

/* checkpoint_and_decide_exit: saves at --save-interval, and before an exit (SIGTERM,
 * --exit-duration-in-mins, --exit-interval) unless this iteration was just saved. */
static mc_status decide_exit(struct trainer *t, int64_t iteration, bool *exit)
{
    char what[128];
    bool save = !mc_args_is_none(t->a, MC_A_save), saved = false;
    mc_status st;
    *exit = true;
    if (mc_args_bool(t->a, MC_A_exit_signal_handler) && on_any_rank(got_sigterm)) {
        if (save && (st = save_checkpoint(t, iteration)))
            return st;
        print_datetime("exiting program after receiving SIGTERM.");
        return MC_OK;
    }
    int64_t every_save = save_interval(t->a);
    if (save && every_save && iteration % every_save == 0) {
        if ((st = save_checkpoint(t, iteration)))
            return st;
        saved = true;
    }
    double minutes;
    if (time_limit_reached(t, &minutes)) {
        if (save && !saved && (st = save_checkpoint(t, iteration)))
            return st;
        char rep[40];
        mc_py_float_repr(rep, sizeof(rep), minutes);
        snprintf(what, sizeof(what), "exiting program after %s minutes", rep);
        print_datetime(what);
        return MC_OK;
    }
    int64_t every = mc_args_is_none(t->a, MC_A_exit_interval) ? 0 : mc_args_int(t->a, MC_A_exit_interval);
    if (every && iteration % every == 0) {
        if (save && !saved && (st = save_checkpoint(t, iteration)))
            return st;
        snprintf(what, sizeof(what), "exiting program at iteration %lld", (long long)iteration);
        print_datetime(what);
        return MC_OK;
    }
    *exit = false;
    return MC_OK;
}

/* train(): returns the last iteration; *exited when an exit condition ended the run. */
static mc_status train(struct trainer *t, int64_t *iteration, bool *exited)
{
    const struct mc_args *a = t->a;
    int64_t train_iters = mc_args_int(a, MC_A_train_iters);
    int64_t log_interval = mc_args_int(a, MC_A_log_interval);
    int64_t eval_interval = mc_args_is_none(a, MC_A_eval_interval) ? 0 : mc_args_int(a, MC_A_eval_interval);
    bool do_valid = mc_train_data_has(t->data, MC_TRAIN_SPLIT_VALID) && mc_args_int(a, MC_A_eval_iters) > 0;
    bool report_memory = true;
    static const char *const lm[] = {"lm loss"};
    mc_log_accum_init(&t->acc);
    t->iteration = *iteration;
    mc_status tb_st = t->tb ? tb_write_args(t) : MC_OK;
    if (tb_st)
        return tb_st;
    struct mc_timer *interval = timer(t, "interval-time", 0);
    mc_timer_start(interval);
    print_datetime("before the start of training step");
    int hash_id = MC_A_check_weight_hash_across_dp_replicas_interval;
    bool hash_check = !mc_args_is_none(a, hash_id);
    int64_t hash_interval = hash_check ? mc_args_int(a, hash_id) : 0;
    if (hash_check) {
        mc_status st = check_weight_hashes(t, *iteration);
        if (st)
            return st;
    }
    *exited = false;
    while (*iteration < train_iters) {
        mc_status st = mc_microbatches_update(&t->mb, t->consumed_train, true);
        if (st)
            return st;
        float loss;
        struct mc_opt_step_result res;
        if ((st = train_step(t, *iteration, &loss, &res)))
            return st;
        t->iteration = ++*iteration;
        perturb_for_test(t, *iteration);
        t->consumed_train += t->mb.num_micro_batches * t->mbs * t->dp;
        t->flops_so_far += t->flops_per_sample * (double)(t->mb.num_micro_batches * t->mbs * t->dp);
        if ((st = mc_log_accum_add(&t->acc, 1, lm, &loss, false)))
            return st;
        if ((st = tb_training_log(t, *iteration, loss, &res)))
            return st;
        if (*iteration % log_interval == 0) {
            double interval_s = mc_timer_elapsed(interval, true);
            if ((st = tb_interval_log(t, *iteration, interval_s)) ||
                (st = print_training_line(t, *iteration, interval_s, &res, &report_memory)) ||
                (st = log_timers(t, mc_training_log_timers, mc_training_log_timers_count,
                                 (double)log_interval)))
                return st;
        }
        if (eval_interval && *iteration % eval_interval == 0 && do_valid) {
            struct mc_timer *eval_time = timer(t, "eval-time", 0);
            mc_timer_stop(interval);
            mc_timer_start(eval_time);
            char prefix[64];
            bool abandoned;
            snprintf(prefix, sizeof(prefix), "iteration %lld", (long long)*iteration);
            if ((st = evaluate_and_print(t, MC_TRAIN_SPLIT_VALID, prefix, false, &t->consumed_valid,
                                         &abandoned)))
                return st;
            mc_timer_stop(eval_time);
            mc_timer_start(interval); /* evaluation is not iteration time */
        }
        if (hash_check && *iteration % hash_interval == 0 &&
            (st = check_weight_hashes(t, *iteration)))
            return st;
        if ((st = decide_exit(t, *iteration, exited)))
            return st;
        if (*exited)
            break;
    }
    return t->tb ? mc_tb_flush(t->tb) : MC_OK;
}

/* --distributed-timeout-minutes: torch.distributed's collective timeout, here the watchdog of
 * parallel_state/watchdog.c. MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS replaces it in the failure
 * tests, which cannot wait a whole minute. */
static mc_status start_watchdog(const struct trainer *t)
{
    long long minutes = (long long)mc_args_int(t->a, MC_A_distributed_timeout_minutes);
    const char *test = getenv("MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS");
    char source[96];
    double seconds = 60.0 * (double)minutes;
    if (test && *test) {
        char *end;
        seconds = strtod(test, &end);
        if (*end || !(seconds > 0))
            return mc_error(MC_ERR_CONFIG, "MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS=%s: expected a "
                            "positive number of seconds", test);
        snprintf(source, sizeof(source), "MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS=%s", test);
    } else {
        snprintf(source, sizeof(source), "--distributed-timeout-minutes %lld", minutes);
        if (minutes <= 0)
            return mc_error(MC_ERR_CONFIG, "--distributed-timeout-minutes %lld: expected a "
                            "positive number of minutes", minutes);
    }
    return mc_comm_watchdog_start(t->ps.rank, seconds, source);
}

/* initialize_model_parallel over the MPI world (tensor x data parallel; the rest refused). */
static mc_status setup_parallel_state(struct trainer *t)
{
    const struct mc_args *a = t->a;
    struct mc_ps_config pc = {
        .tensor_model_parallel_size = (int)mc_args_int(a, MC_A_tensor_model_parallel_size),
        .pipeline_model_parallel_size = (int)mc_args_int(a, MC_A_pipeline_model_parallel_size),
        .context_parallel_size = (int)mc_args_int(a, MC_A_context_parallel_size),
        .expert_model_parallel_size = (int)mc_args_int(a, MC_A_expert_model_parallel_size),
    };
    mc_status st = mc_ps_init(&t->ps, world_comm, &pc);
    if (st)
        return st;
    if (t->ps.world != mc_args_int(a, MC_A_world_size))
        return mc_error(MC_ERR_COMM, "world size %lld (WORLD_SIZE/OMPI_COMM_WORLD_SIZE) but %d "
                        "MPI processes: launch several ranks with mpirun",
                        (long long)mc_args_int(a, MC_A_world_size), t->ps.world);
    t->dp = mc_ps_size(&t->ps, MC_PS_DP);
    t->dp_rank = mc_ps_rank(&t->ps, MC_PS_DP);
    if (world_comm && (st = start_watchdog(t)))
        return st;
    print_rank_0("> initialized tensor model parallel with size %d\n", t->ps.tp);
    print_rank_0("> initialized pipeline model parallel with size %d\n", t->ps.pp);
    return MC_OK;
}

/* The datasets are built by rank 0 first (it writes the index caches), then by the other
 * ranks, which load them, as Megatron's BlendedMegatronDatasetBuilder does. */
static mc_status build_train_data(struct trainer *t)
{
    mc_status st = MC_OK;
    if (t->ps.rank == 0)
        st = mc_train_data_init(t->a, mc_tok_eod(t->tok), mc_tok_pad(t->tok), out_first, &t->data);
    if (st)
        return st;
    if ((st = mc_comm_barrier(world_comm)))
        return st;
    if (t->ps.rank != 0)
        st = mc_train_data_init(t->a, mc_tok_eod(t->tok), mc_tok_pad(t->tok), NULL, &t->data);
    if (!st)
        mc_train_data_set_token_limit(t->data, t->padded_vocab);
    return st;
}

static mc_status setup(struct trainer *t)
{
    const struct mc_args *a = t->a;
    mc_status st;
    setup_printing(a);
    if ((st = check_supported(a)))
        return st;
    if ((st = mc_microbatches_init_from_args(a, out_first, &t->mb)))
        return st;
    if ((st = build_tokenizer(t)) || (st = init_logging(t)))
        return st;
    print_rank_0("> initializing torch distributed ...\n");
    if ((st = setup_parallel_state(t)))
        return st;
    print_rank_0("> setting random seeds to %lld ...\n", (long long)mc_args_int(a, MC_A_seed));
    print_rank_0("time to initialize megatron (seconds): %.3f\n", mc_time_now() - t->t0);
    print_datetime("after megatron is initialized");
    static const char *const names[] = {"model-and-optimizer-setup",
                                        "train/valid/test-data-iterators-setup"};
    struct mc_timer *model_tm = timer(t, names[0], 0), *data_tm = timer(t, names[1], 0);
    mc_timer_start(model_tm);
    if ((st = build_model_and_optimizer(t)))
        return st;
    mc_timer_stop(model_tm);
    print_datetime("after model, optimizer, and learning rate scheduler are built");
    mc_timer_start(data_tm);
    if ((st = build_train_data(t)))
        return st;
    mc_timer_stop(data_tm);
    print_datetime("after dataloaders are built");
    print_rank_0("done with setup ...\n");
    if ((st = log_timers(t, names, 2, 1.0)))
        return st;
    double flops;
    if ((st = mc_flops_per_iteration(a, t->padded_vocab, 1, &flops)))
        return st;
    t->flops_per_sample = flops;
    bool with_mask = mc_args_bool(a, MC_A_reset_attention_mask);
    if ((st = mc_micro_batch_init(&t->batch, t->mbs, t->seq, with_mask)))
        return st;
    t->loss = mc_alloc((size_t)(t->mbs * t->seq) * sizeof(float));
    t->dloss = mc_alloc((size_t)(t->mbs * t->seq) * sizeof(float));
    return t->loss && t->dloss ? MC_OK : MC_ERR_NOMEM;
}

static void teardown(struct trainer *t)
{
    mc_pp_group_free(t->embedding_group);
    mc_pp_schedule_free(&t->pipe);
    mc_pp_interleaved_free(&t->vpipe);
    mc_free(t->dloss);
    mc_free(t->loss);
    mc_micro_batch_free(&t->batch);
    mc_train_data_free(t->data);
    for (int v = 0; v < MC_MAX_VP; v++)
        mc_ddp_free(t->ddps[v]);
    mc_opt_free(t->opt);
    for (int v = 0; v < MC_MAX_VP; v++)
        mc_distopt_free(t->dopts[v]);
    for (int v = 0; v < t->vp; v++)
        mc_gpt_model_free(t->chunks[v]);
    mc_backend_free(t->be);
    mc_tok_free(t->tok);
}

mc_status mc_pretrain_gpt(struct mc_args *a, double t0)
{
    struct trainer t = {.a = a, .t0 = t0};
    t.mbs = mc_args_int(a, MC_A_micro_batch_size);
    t.seq = mc_args_int(a, MC_A_seq_length);
    t.gbs = mc_args_int(a, MC_A_global_batch_size);
    if (mc_args_bool(a, MC_A_exit_signal_handler))
        signal(SIGTERM, on_sigterm);
    mc_status st = setup(&t);
    if (st)
        goto out;
    int64_t iteration = t.start_iteration;
    bool exited = false;
    char prefix[96];
    if (!mc_args_bool(a, MC_A_skip_train)) {
        print_rank_0("training ...\n");
        if (mc_train_data_has(t.data, MC_TRAIN_SPLIT_TRAIN) && mc_args_int(a, MC_A_train_iters) > 0)
            if ((st = train(&t, &iteration, &exited)))
                goto out;
        if (exited)
            goto out; /* Megatron's sys.exit(0): no final evaluation */
        print_datetime("after training is done");
        int64_t every_save = save_interval(a);
        if (!mc_args_is_none(a, MC_A_save) && iteration != 0 && (!every_save || iteration % every_save))
            if ((st = save_checkpoint(&t, iteration)))
                goto out;
    } else {
        print_rank_0("skipping training (--skip-train is on) ...\n");
    }
    bool abandoned = false;
    t.iteration = iteration;
    if (mc_train_data_has(t.data, MC_TRAIN_SPLIT_VALID) && mc_args_int(a, MC_A_eval_iters) > 0) {
        snprintf(prefix, sizeof(prefix), "iteration %lld on validation set", (long long)iteration);
        if ((st = evaluate_and_print(&t, MC_TRAIN_SPLIT_VALID, prefix, true, &t.consumed_valid, &abandoned)))
            goto out;
    }
    if (!abandoned && mc_train_data_has(t.data, MC_TRAIN_SPLIT_TEST) && mc_args_int(a, MC_A_eval_iters) > 0) {
        int64_t consumed_test = 0;
        snprintf(prefix, sizeof(prefix), "iteration %lld on test set", (long long)iteration);
        st = evaluate_and_print(&t, MC_TRAIN_SPLIT_TEST, prefix, true, &consumed_test, &abandoned);
    }
out:
    fflush(stdout);
    mc_status tb_st = mc_tb_close(t.tb);
    if (!st)
        st = tb_st;
    teardown(&t);
    mc_ps_free(&t.ps);
    return st;
}
