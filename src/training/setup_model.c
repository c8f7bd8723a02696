/* get_model and setup_model_and_optimizer of megatron/training/training.py (core_v0.12.1):
 * this rank's model chunks, DistributedDataParallel or the distributed optimizer, the
 * optimizer and scheduler, and for pipeline stages the schedules' buffers, activation slots
 * and the embedding group. */
#include "training/trainer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline_parallel/in_flight.h"
#include "training/model_config.h"
#include "training/schedule_args.h"

/* The distributed optimizer over Megatron's grad-buffer layout; prints the per-rank optimizer
 * state against the non-distributed optimizer's (megatron.c's line, not Megatron's). */
/* DistributedDataParallel's bucket_size on this rank (mc_pgb_bucket_size); get_model's
 * --ddp-num-buckets turns into this rank's parameter count / buckets (at least 1, since
 * Megatron's 0 also makes one bucket per parameter). */
static mc_status ddp_bucket_size(const struct trainer *t, int chunk, int64_t *out)
{
    const struct mc_args *a = t->a;
    int64_t bucket = mc_args_is_none(a, MC_A_ddp_bucket_size)
                         ? 0 : mc_args_int(a, MC_A_ddp_bucket_size);
    if (!mc_args_is_none(a, MC_A_ddp_num_buckets)) {
        int64_t n = mc_args_int(a, MC_A_ddp_num_buckets);
        if (!mc_args_is_none(a, MC_A_ddp_bucket_size))
            return mc_error(MC_ERR_CONFIG, "--ddp-num-buckets %lld with --ddp-bucket-size: "
                            "cannot specify both", (long long)n);
        if (n <= 0)
            return mc_error(MC_ERR_CONFIG, "--ddp-num-buckets %lld: must be greater than 0",
                            (long long)n);
        bucket = mc_gpt_num_elements(t->m.chunks[chunk]) / n;
        bucket = bucket > 0 ? bucket : 1;
    }
    *out = mc_pgb_bucket_size(mc_args_bool(a, MC_A_overlap_grad_reduce), bucket,
                              mc_ps_size(&t->par.ps, MC_PS_DP_CP),
                              mc_ps_rank(&t->par.ps, MC_PS_PP));
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
        .grad_scale = mc_ddp_grad_scale(&t->par.ps, per_token),
    };
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++) /* one DDP per model chunk, as get_model */
        if (!(st = ddp_bucket_size(t, v, &dc.bucket_size)))
            st = mc_ddp_init(&dc, mc_gpt_param_set(t->m.chunks[v]), &t->par.ps, t->o.dopts[v],
                             &t->o.ddps[v]);
    t->o.ddp = t->o.ddps[0];
    if (st)
        return st;
    if (dc.overlap_grad_reduce)
        mc_print_rank_0(" > data-parallel grad sync: %lld bucket(s) on this rank, collectives "
                     "%s\n", (long long)mc_ddp_num_buckets(t->o.ddp),
                     dc.blocking ? "blocking (MC_DDP_BLOCKING)" : "overlapped with backward");
    return MC_OK;
}

static mc_status build_distopt(struct trainer *t, const struct mc_optimizer_config *oc)
{
    const struct mc_args *a = t->a;
    int64_t bucket;
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++) /* one per chunk: its own buffer and shards */
        if (!(st = ddp_bucket_size(t, v, &bucket)))
            st = mc_distopt_init(oc, mc_gpt_param_set(t->m.chunks[v]), &t->par.ps,
                                 mc_train_world_comm, bucket,
                                 mc_args_bool(a, MC_A_ddp_pad_buckets_for_high_nccl_busbw),
                                 &t->o.dopts[v]);
    t->o.dopt = t->o.dopts[0];
    if (st)
        return st;
    int64_t sharded = 0, full = 0, buckets = 0, numel = 0, unpadded = 0;
    for (int c = 0; c < t->m.vp; c++) {
        int64_t sh, fu;
        mc_distopt_state_numel(t->o.dopts[c], &sh, &fu);
        sharded += sh;
        full += fu;
        const struct mc_pgb_map *map = mc_distopt_map(t->o.dopts[c]);
        buckets += map->n_buckets;
        numel += map->numel;
        unpadded += map->numel_unpadded;
    }
    mc_print_rank_0(" > distributed optimizer: %lld buckets, buffer %lld elements (%lld unpadded); "
                 "optimizer state on this rank: %lld elements (%.3f MB) of %lld (%.3f MB) "
                 "without it\n", (long long)buckets, (long long)numel,
                 (long long)unpadded, (long long)sharded,
                 (double)sharded * 4 / 1048576.0, (long long)full, (double)full * 4 / 1048576.0);
    return MC_OK;
}

/* The tied word embeddings with pp > 1: the first stage's embedding.word_embeddings.weight
 * (in chunk 0) and the last stage's output_layer.weight copy (in chunk vp - 1). */
struct mc_param_view mc_train_tied_embedding(const struct trainer *t)
{
    bool first = mc_ps_is_pipeline_first_stage(&t->par.ps);
    const mc_gpt_model *m = t->m.chunks[first ? 0 : t->m.vp - 1];
    int64_t i = mc_gpt_param_index(m, first ? "embedding.word_embeddings.weight"
                                            : "output_layer.weight");
    MC_ASSERT(i >= 0);
    return mc_gpt_param(m, i);
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
    long ranks = local && *local ? strtol(local, NULL, 10) : t->par.ps.world;
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
    int rank = mc_ps_rank(&t->par.ps, MC_PS_PP);
    int64_t in_flight[MC_MAX_VP], most = 0, total = 0;
    int64_t max_micro = t->d.gbs / (t->d.mbs * t->par.dp);
    int64_t group = t->m.vp > 1 && !mc_args_is_none(a, MC_A_microbatch_group_size_per_vp_stage)
                        ? mc_args_int(a, MC_A_microbatch_group_size_per_vp_stage) : 0;
    mc_status st = mc_pp_in_flight(t->par.ps.pp, rank, t->m.vp, max_micro > 0 ? max_micro : 1,
                                   group, in_flight);
    if (st)
        return st;
    double need = 0; /* a slot's bytes include its mask copy where it has one */
    for (int v = 0; v < t->m.vp; v++) {
        if (in_flight[v] > MC_PP_MAX_SLOTS)
            in_flight[v] = MC_PP_MAX_SLOTS;
        if (in_flight[v] < 1)
            in_flight[v] = 1;
        size_t per = mc_gpt_slot_activation_bytes(t->m.chunks[v]);
        need += (double)(mc_gpt_activation_bytes(t->m.chunks[v]) - per) +
                (double)in_flight[v] * (double)per;
        most = in_flight[v] > most ? in_flight[v] : most;
        total += in_flight[v];
    }
    if (most <= 1)
        return MC_OK;
    double limit = activation_memory_limit(t);
    st = need <= limit ? MC_OK : MC_ERR_NOMEM;
    for (int v = 0; v < t->m.vp && !st; v++)
        st = mc_gpt_set_activation_slots(t->m.chunks[v], (int)in_flight[v]);
    if (st != MC_ERR_NOMEM)
        return st;
    for (int v = 0; v < t->m.vp; v++) /* back to one slot each (a smaller block) */
        if ((st = mc_gpt_set_activation_slots(t->m.chunks[v], 1)))
            return st;
    if (mc_ps_rank(&t->par.ps, MC_PS_TP) != 0 || t->par.dp_rank != 0)
        return MC_OK;
    printf(" > pipeline stage %d: the activations of %lld in-flight micro-batches need "
           "%.1f MiB (limit %.1f MiB, MC_ACTIVATION_MEMORY_LIMIT_MB%s): keeping one and "
           "recomputing each forward before its backward\n", rank, (long long)total,
           need / 1048576.0, limit / 1048576.0, need <= limit ? "; allocation failed" : "");
    fflush(stdout);
    return MC_OK;
}

/* What this rank keeps for backward (megatron.c's line, not Megatron's): printed with
 * activation recompute on, or with MC_LOG_ACTIVATIONS=1. Every chunk: its shared part (scratch
 * and the full-recompute work area) and its slots. */
static void log_activations(const struct trainer *t)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(t->m.model);
    const char *env = getenv("MC_LOG_ACTIVATIONS");
    if ((c->recompute_granularity == MC_RECOMPUTE_NONE && !(env && !strcmp(env, "1"))) ||
        t->par.dp_rank != 0)
        return;
    char what[512], chunks[512] = "";
    size_t total = 0, used = 0;
    for (int v = 0; v < t->m.vp; v++) {
        const mc_gpt_model *m = t->m.chunks[v];
        size_t per = mc_gpt_slot_activation_bytes(m), all = mc_gpt_activation_bytes(m);
        int slots = mc_gpt_activation_slots(m);
        total += all;
        int w = snprintf(chunks + used, sizeof(chunks) - used, "%s%zu shared + %d x %zu per "
                         "micro-batch", v ? ", " : "", all - (size_t)slots * per, slots, per);
        used += w > 0 && (size_t)w < sizeof(chunks) - used ? (size_t)w : 0;
    }
    int64_t layers, offset; /* chunk 0 of this stage (uneven stages: Megatron's split) */
    mc_gpt_stage_layers(c, c->pipeline_model_parallel_rank, 0, &layers, &offset);
    mc_recompute_describe(c, layers, what, sizeof(what));
    printf(" > activation memory on (tensor, pipeline) model parallel rank (%d, %d): %zu bytes "
           "(%.3f MiB) = %s; activation recompute: %s\n", mc_ps_rank(&t->par.ps, MC_PS_TP),
           mc_ps_rank(&t->par.ps, MC_PS_PP), total, (double)total / 1048576.0, chunks, what);
    fflush(stdout);
}

/* --num-virtual-stages-per-pipeline-rank: the interleaved schedule with
 * --microbatch-group-size-per-virtual-pipeline-stage (default pp) and overlap_p2p_comm. */
static mc_status interleaved_init(struct trainer *t, const struct mc_pp_p2p *p)
{
    const struct mc_args *a = t->a;
    int64_t group = mc_args_is_none(a, MC_A_microbatch_group_size_per_vp_stage)
                        ? 0 : mc_args_int(a, MC_A_microbatch_group_size_per_vp_stage);
    return mc_pp_interleaved_init(&t->pp.vpipe, p, t->m.vp, group,
                                  mc_args_bool(a, MC_A_overlap_p2p_comm));
}

/* The schedule's state; for pipeline stages (pp > 1) also the grad norm over the
 * model-parallel group, the 1F1B buffers, and with tied embeddings the embedding group, over
 * which the last stage's copy starts as zeros all-reduced with the first stage's weights (so
 * the copies are equal, as Megatron's LanguageModule.setup_embeddings_and_output_layer makes
 * them). */
static mc_status pp_setup(struct trainer *t)
{
    const struct mc_gpt_config *c = mc_gpt_model_config(t->m.model);
    /* the messages: the model's stage tensor of a full micro-batch ([s/tp, b, h] with
     * --sequence-parallel; Megatron's pipeline_dtype, fp32 with --fp32-residual-connection) */
    struct mc_pp_p2p p = {.comm = t->par.ps.group[MC_PS_PP].comm, .size = t->par.ps.pp,
                          .rank = mc_ps_rank(&t->par.ps, MC_PS_PP),
                          .msg = mc_gpt_stage_tensor(t->m.model, t->d.mbs, t->d.seq)};
    if (t->par.ps.pp == 1) /* forward_backward_no_pipelining: no buffers, no exchanges */
        return mc_pp_schedule_init(&t->pp.pipe, &p);
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++)
        st = mc_gpt_set_mp_comm(t->m.chunks[v], t->par.ps.group[MC_PS_MP].comm);
    if (st || (st = t->m.vp > 1 ? interleaved_init(t, &p) : mc_pp_schedule_init(&t->pp.pipe, &p)) ||
        (st = pp_activation_slots(t)))
        return st;
    if (c->untie_embeddings_and_output_weights)
        return MC_OK;
    if ((st = mc_pp_embedding_group_init(&p, &t->pp.embedding_group)) || !t->pp.embedding_group)
        return st;
    struct mc_param_view v = mc_train_tied_embedding(t);
    if (mc_ps_is_pipeline_last_stage(&t->par.ps))
        memset(v.data, 0, sizeof(float) * (size_t)v.numel);
    return mc_comm_all_reduce(t->pp.embedding_group, v.data, v.numel, MC_DTYPE_F32, MC_COMM_SUM,
                              "embedding-group word-embedding weight all-reduce");
}

/* The backend's measured choices that change the numbers (backend.h: measure, adopt), made
 * alike on every rank: each rank measures, the world takes the largest of each value, and
 * every rank adopts that (any rule every rank applies to the same numbers would do).
 * Collective over the world. */
static mc_status agree_backend_measures(struct mc_backend *be)
{
    double m[MC_BACKEND_MEASURES];
    be->ops->measure(be, m);
    mc_status st = mc_comm_all_reduce(mc_train_world_comm, m, MC_BACKEND_MEASURES, MC_DTYPE_F64,
                                      MC_COMM_MAX, "backend measurements all-reduce");
    if (!st)
        be->ops->adopt(be, m);
    return st;
}

/* MC_BACKEND names the backend (backend.h: cpu, cpu-ref, cpu-sim); unset or empty: "cpu". */
static const char *backend_name(void)
{
    const char *e = getenv("MC_BACKEND");
    return e && *e ? e : NULL;
}

/* --rounding-points (backend.h, enum mc_rounding): before the model's first op */
static mc_status set_rounding_points(struct mc_backend *be, const struct mc_args *a)
{
    const char *v = mc_args_str(a, MC_A_rounding_points);
    enum mc_rounding r = v && !strcmp(v, "torch-cpu") ? MC_ROUNDING_TORCH_CPU : MC_ROUNDING_FUSED;
    if (!be->ops->set_rounding(be, r))
        return mc_error(MC_ERR_CONFIG, "--rounding-points %s: backend %s does not implement it",
                        v, be->name);
    return MC_OK;
}

mc_status mc_train_build_model_and_optimizer(struct trainer *t)
{
    const struct mc_args *a = t->a;
    struct mc_gpt_config c;
    int tp_rank = mc_ps_rank(&t->par.ps, MC_PS_TP);
    mc_status st = mc_gpt_config_from_args(a, mc_tok_vocab_size(t->m.tok), t->m.padded_vocab,
                                           tp_rank, &c);
    c.pipeline_model_parallel_size = t->par.ps.pp;
    c.pipeline_model_parallel_rank = mc_ps_rank(&t->par.ps, MC_PS_PP);
    bool vpp = !mc_args_is_none(a, MC_A_virtual_pipeline_model_parallel_size);
    t->m.vp = vpp ? (int)mc_args_int(a, MC_A_virtual_pipeline_model_parallel_size) : 1;
    c.virtual_pipeline_model_parallel_size = vpp ? t->m.vp : 0;
    int64_t n_params = 0;
    if (!st)
        st = mc_backend_create(backend_name(), &t->m.be);
    if (!st)
        st = agree_backend_measures(t->m.be);
    if (!st)
        st = set_rounding_points(t->m.be, a);
    /* get_model: one model per chunk, built with the virtual rank set to the chunk */
    for (int v = 0; v < t->m.vp && !st; v++) {
        c.virtual_pipeline_model_parallel_rank = v;
        if ((st = mc_gpt_model_init_backend(&c, t->m.be, &t->m.chunks[v])))
            break;
        if (mc_ps_size(&t->par.ps, MC_PS_TP) > 1)
            st = mc_gpt_set_tp_comm(t->m.chunks[v], t->par.ps.group[MC_PS_TP].comm);
        n_params += mc_gpt_num_elements(t->m.chunks[v]);
    }
    t->m.model = t->m.chunks[0];
    if (st || (st = pp_setup(t)))
        return st;
    log_activations(t);
    if (t->par.dp_rank == 0) { /* Megatron prints this on every data-parallel rank 0 */
        printf(" > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %lld\n",
               tp_rank, mc_ps_rank(&t->par.ps, MC_PS_PP), (long long)n_params);
        fflush(stdout);
    }
    struct mc_optimizer_config oc;
    mc_opt_config_from_args(a, &oc);
    const struct mc_param_set *sets[MC_MAX_VP];
    for (int v = 0; v < t->m.vp; v++)
        sets[v] = mc_gpt_param_set(t->m.chunks[v]);
    st = mc_args_bool(a, MC_A_use_distributed_optimizer)
             ? build_distopt(t, &oc) : mc_opt_init_chunks(&oc, sets, t->m.vp, &t->o.opt);
    if (st || (st = build_ddp(t)))
        return st;
    struct mc_opt_sched_config sc;
    if ((st = mc_opt_sched_config_from_args(t->a, &t->d.mb, mc_train_out_first, &sc)))
        return st;
    return mc_opt_sched_init(&t->o.sched, &sc, mc_train_out_first);
}
