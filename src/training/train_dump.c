/* pretrain_gpt --dump-dir (megatron.c's own options, docs/alignment.md): the tensors of chosen
 * iterations on chosen ranks, named by Megatron's module and parameter names with global layer
 * numbers, so that a dump of Megatron-LM itself (tools/megatron_dump_hooks.py) or of another
 * layout lines up name by name (tools/compare_dumps.c). The model reports its forward and
 * backward points through mc_dump_point (src/debug/dump.c); this file opens the recording for
 * an iteration, adds the batch, the parameters, their grads at three moments, the optimizer
 * state and the loss, and writes DIR/iter_NNNNNNN/rank_NNNNN.dump (temp name + rename).
 * With tensor parallelism every tensor is dumped whole, as a tp 1 run holds it: the shards are
 * all-gathered over the tensor-parallel group (parameters by their partition dim, SwiGLU's
 * [gate; up] halves each; activations along the sequence under --sequence-parallel; logits
 * along the vocabulary), so the names and shapes line up with a tp 1 dump. With the distributed
 * optimizer the reduced (then clipped) grads and the optimizer state are its data-parallel
 * shards: all-gathered over the data-parallel group and read out at the buffer's param ranges
 * (mc_distopt_gather_whole), so they are the tensors a run without it dumps. */
#include "training/trainer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "megatron/dump.h"

enum { MAX_RANGES = 64 };

struct ranges {
    int n; /* 0 = every value */
    int64_t lo[MAX_RANGES], hi[MAX_RANGES];
};

static struct {
    bool on;         /* --dump-dir given */
    bool recording;  /* inside a dumped train step */
    bool write;      /* this rank is among --dump-ranks (with tp > 1 every rank records:
                        the shards are gathered by the whole tensor-parallel group) */
    char dir[4096];
    struct ranges iters, ranks;
    unsigned points;
    int64_t iteration, batches; /* the step being dumped; micro-batches recorded so far */
    bool dp_gather;  /* --use-distributed-optimizer with the grads or optimizer point: every
                        rank records (the shards are gathered over the data-parallel group) */
} dump;

/* "1,3,5-7" into ranges; MC_ERR_CONFIG naming the option and the bad part. */
static mc_status parse_ranges(const char *opt, const char *s, struct ranges *r)
{
    r->n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long long lo = strtoll(p, &end, 10), hi = lo;
        if (end == p || errno || lo < 0)
            goto bad;
        if (*end == '-') {
            p = end + 1;
            hi = strtoll(p, &end, 10);
            if (end == p || errno || hi < lo)
                goto bad;
        }
        if (r->n == MAX_RANGES)
            return mc_error(MC_ERR_CONFIG, "%s %s: at most %d numbers or ranges", opt, s,
                            MAX_RANGES);
        r->lo[r->n] = lo;
        r->hi[r->n++] = hi;
        if (*end == 0)
            break;
        if (*end != ',')
            goto bad;
        p = end + 1;
        if (*p == 0)
            goto bad;
    }
    if (r->n == 0)
        goto bad;
    return MC_OK;
bad:
    return mc_error(MC_ERR_CONFIG, "%s '%s': expected numbers and ranges such as 1,3 or 1-2 "
                    "(non-negative, low-high with low <= high)", opt, s);
}

static bool in_ranges(const struct ranges *r, int64_t v)
{
    if (r->n == 0)
        return true;
    for (int i = 0; i < r->n; i++)
        if (v >= r->lo[i] && v <= r->hi[i])
            return true;
    return false;
}

static mc_status parse_points(const char *s, unsigned *out)
{
    *out = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf)
        return mc_error(MC_ERR_CONFIG, "--dump-points: list too long");
    strcpy(buf, s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        unsigned found = strcmp(tok, "all") == 0 ? MC_DUMP_POINT_ALL : 0;
        for (unsigned p = 1; !found && p < MC_DUMP_POINT_ALL; p <<= 1)
            if (strcmp(tok, mc_dump_point_name((enum mc_dump_point)p)) == 0)
                found = p;
        if (!found)
            return mc_error(MC_ERR_CONFIG, "--dump-points '%s': unknown point '%s' (expected a "
                            "comma list of batch, forward, backward, params, grads, optimizer, "
                            "loss, or all)", s, tok);
        *out |= found;
    }
    if (!*out)
        return mc_error(MC_ERR_CONFIG, "--dump-points '%s': no point named", s);
    return MC_OK;
}

mc_status mc_train_dump_setup(const struct mc_args *a)
{
    memset(&dump, 0, sizeof dump);
    static const enum mc_arg_id deps[] = {MC_A_dump_iters, MC_A_dump_ranks, MC_A_dump_points};
    static const char *const dep_names[] = {"--dump-iters", "--dump-ranks", "--dump-points"};
    const char *dir = mc_args_str(a, MC_A_dump_dir);
    for (int i = 0; i < 3; i++)
        if (!dir && !mc_args_is_none(a, deps[i]))
            return mc_error(MC_ERR_CONFIG, "%s needs --dump-dir", dep_names[i]);
    if (!dir)
        return MC_OK;
    if (!*dir || strlen(dir) >= sizeof dump.dir - 64)
        return mc_error(MC_ERR_CONFIG, "--dump-dir '%s': expected a directory path", dir);
    /* what the dump names cannot express yet: refused rather than dumped half */
    if (mc_args_int(a, MC_A_tensor_model_parallel_size) > 1 && !mc_args_is_none(a, MC_A_num_experts) &&
        mc_args_int(a, MC_A_num_experts) > 0)
        return mc_error(MC_ERR_UNSUPPORTED, "--dump-dir with --tensor-model-parallel-size %lld "
                        "and --num-experts: not implemented yet (the experts' shards are not "
                        "gathered); run the alignment of an MoE model at tensor parallel size 1",
                        (long long)mc_args_int(a, MC_A_tensor_model_parallel_size));
    if (mc_args_int(a, MC_A_context_parallel_size) > 1)
        return mc_error(MC_ERR_UNSUPPORTED, "--dump-dir with --context-parallel-size > 1: not "
                        "implemented yet");
    const char *it = mc_args_str(a, MC_A_dump_iters), *rk = mc_args_str(a, MC_A_dump_ranks);
    const char *pt = mc_args_str(a, MC_A_dump_points);
    mc_status st = parse_ranges("--dump-iters", it ? it : "1", &dump.iters);
    if (!st && rk)
        st = parse_ranges("--dump-ranks", rk, &dump.ranks);
    if (!st)
        st = parse_points(pt ? pt : "all", &dump.points);
    if (st)
        return st;
    /* the distributed optimizer's shards are all-gathered: every data-parallel rank records */
    dump.dp_gather = mc_args_bool(a, MC_A_use_distributed_optimizer) &&
                     (dump.points & (MC_DUMP_POINT_GRADS | MC_DUMP_POINT_OPTIMIZER));
    strcpy(dump.dir, dir);
    dump.on = true;
    return MC_OK;
}

/* The parameter's name with its global layer number (Megatron's chunks, like ours, name their
 * layers from 0; the dumps number them as the whole model does). */
static void global_name(const mc_gpt_model *m, const char *name, char *out, size_t size)
{
    const char *pre = "decoder.layers.";
    size_t n = strlen(pre);
    const struct mc_gpt_config *cfg = mc_gpt_model_config(m);
    if (strncmp(name, pre, n) != 0) {
        snprintf(out, size, "%s", name);
        return;
    }
    char *rest;
    long long l = strtoll(name + n, &rest, 10);
    int64_t layers, offset;
    mc_gpt_stage_layers(cfg, cfg->pipeline_model_parallel_rank,
                        cfg->virtual_pipeline_model_parallel_rank, &layers, &offset);
    snprintf(out, size, "%s%lld%s", pre, l + (long long)offset, rest);
}

/* ---- tensor parallelism: the shards put together ------------------------------------------ */

/* full = the tp ranks' x, each viewed as [outer, local, inner] elements of esize bytes,
 * concatenated along the middle dimension in rank order: [outer, tp * local, inner]. tmp holds
 * tp * outer * local * inner elements. Collective over the tensor-parallel group. */
static mc_status gather_mid(struct trainer *t, void *full, const void *x, int64_t outer,
                            int64_t local, int64_t inner, size_t esize, void *tmp)
{
    int tp = t->par.ps.tp;
    int64_t n = outer * local * inner;
    mc_status st = mc_comm_all_gather(t->par.ps.group[MC_PS_TP].comm, tmp, x, n * (int64_t)esize,
                                      MC_DTYPE_U8, "dump: tensor-parallel gather");
    if (st)
        return st;
    size_t row = (size_t)(local * inner) * esize;
    for (int r = 0; r < tp; r++)
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)full + (size_t)(o * tp + r) * row,
                   (const char *)tmp + (size_t)(r * outer + o) * row, row);
    return MC_OK;
}

/* Records one f32 parameter-shaped tensor x of p (its data, grad or optimizer state) whole.
 * Sharded: gathered along its partition dim (SwiGLU's fc1 rows [gate_r; up_r] per rank: the
 * gate halves, then the up halves, as tp 1 holds them). Replicated: this rank's copy, except a
 * sequence-parallel parameter's grad before finalize_model_grads (sum_partial), which holds
 * this rank's sequence shard's part only: the sum over the group, as tp 1 computes it. */
static mc_status record_whole(struct trainer *t, const mc_gpt_model *m, enum mc_dump_point pt,
                              const char *prefix, const char *name,
                              const struct mc_param_view *p, const float *x, bool sum_partial)
{
    int tp = t->par.ps.tp;
    bool split = tp > 1 && p->partition_dim >= 0 && p->partition_dim < p->ndim;
    if (!split && !(tp > 1 && sum_partial && p->sequence_parallel)) {
        mc_dump_point(pt, prefix, name, MC_DTYPE_F32, p->ndim, p->shape, x);
        return MC_OK;
    }
    size_t n = (size_t)p->numel;
    float *full = mc_alloc(n * (size_t)tp * sizeof(float));
    float *tmp = full ? mc_alloc(n * (size_t)tp * sizeof(float)) : NULL;
    if (!tmp) {
        mc_free(full);
        return mc_error(MC_ERR_NOMEM, "dump %s%s: out of memory gathering its shards", prefix, name);
    }
    int64_t shape[2] = {p->shape[0], p->ndim > 1 ? p->shape[1] : 1};
    mc_status st;
    if (!split) {
        memcpy(full, x, n * sizeof(float));
        st = mc_comm_all_reduce(t->par.ps.group[MC_PS_TP].comm, full, (int64_t)n, MC_DTYPE_F32,
                                MC_COMM_SUM, "dump: sequence-parallel grad sum");
    } else {
        bool gated = p->partition_dim == 0 && mc_gpt_model_config(m)->activation == MC_ACT_SWIGLU &&
                     strstr(p->name, ".mlp.linear_fc1.") != NULL;
        int64_t outer = p->partition_dim == 0 ? (gated ? 2 : 1) : shape[0];
        int64_t local = p->partition_dim == 0 ? shape[0] / outer : shape[1];
        int64_t inner = p->partition_dim == 0 ? shape[1] : 1;
        st = gather_mid(t, full, x, outer, local, inner, sizeof(float), tmp);
        shape[p->partition_dim] *= tp;
    }
    if (!st)
        mc_dump_point(pt, prefix, name, MC_DTYPE_F32, p->ndim, shape, full);
    mc_free(tmp);
    mc_free(full);
    return st;
}

/* The recorded forward and backward activations of this step whole (the rest is recorded
 * whole already): under --sequence-parallel every [s/tp, b, h] point gathered along the
 * sequence, and the logits [s, b, V/tp] along the vocabulary. Every rank of the group recorded
 * the same names in the same order (the same code ran). A rank whose recording failed makes
 * all of them skip the gathers (agreed first): its close reports its failure, the others fail
 * with this one rather than write shards under whole names. */
static mc_status gather_activations(struct trainer *t)
{
    int tp = t->par.ps.tp;
    const mc_dump *d = mc_dump_points_recording();
    float ok = d ? 0.0f : 1.0f;
    mc_status st = mc_comm_all_reduce(t->par.ps.group[MC_PS_TP].comm, &ok, 1, MC_DTYPE_F32,
                                      MC_COMM_MAX, "dump: recording state");
    if (st || !d)
        return st;
    if (ok != 0.0f)
        return mc_error(MC_ERR_INTERNAL, "dump: the recording of another tensor-parallel rank "
                        "failed (its message says why); this rank's is dropped");
    bool sp = mc_gpt_model_config(t->m.chunks[0])->sequence_parallel;
    mc_dump *out;
    if ((st = mc_dump_init(&out)))
        return st;
    for (int64_t i = 0; !st && i < mc_dump_count(d); i++) {
        const struct mc_dump_tensor *x = mc_dump_get(d, i);
        bool act = x->ndim == 3 && (!strncmp(x->name, "forward.", 8) ||
                                    !strncmp(x->name, "backward.", 9));
        bool logits = act && !strncmp(x->name, "forward.output_layer.output", 27);
        if (!act || (!sp && !logits)) {
            st = mc_dump_add(out, x->name, x->dtype, x->ndim, x->shape, x->data);
            continue;
        }
        size_t es = mc_dtype_size(x->dtype), n = (size_t)x->numel * (size_t)tp * es;
        void *full = mc_alloc(n), *tmp = full ? mc_alloc(n) : NULL;
        int64_t shape[3] = {x->shape[0], x->shape[1], x->shape[2]};
        if (!tmp)
            st = mc_error(MC_ERR_NOMEM, "dump %s: out of memory gathering its shards", x->name);
        else if (logits) /* [s, b, V/tp]: the vocabulary shards */
            st = gather_mid(t, full, x->data, shape[0] * shape[1], shape[2], 1, es, tmp);
        else /* [s/tp, b, h]: the sequence shards */
            st = gather_mid(t, full, x->data, 1, shape[0], shape[1] * shape[2], es, tmp);
        shape[logits ? 2 : 0] *= tp;
        if (!st)
            st = mc_dump_add(out, x->name, x->dtype, 3, shape, full);
        mc_free(tmp);
        mc_free(full);
    }
    if (st)
        mc_dump_free(out);
    else
        mc_dump_points_replace(out);
    return st;
}

/* ---- the distributed optimizer: the shards put together ------------------------------------ */

/* Chunk v's distributed-optimizer array (main_grad: the reduced, later clipped grads; or a
 * state block) whole in the param set's layout, [n_elements] (NULL without the distributed
 * optimizer). The reduced grads before the step are multiplied by post_scale as the step
 * multiplies them (1/num_tokens with --calculate-per-token-loss: finalize_model_grads' scale,
 * which our step applies to the shards). Collective over the data-parallel group. */
static mc_status gather_dist(struct trainer *t, int v, enum mc_distopt_array which,
                             float post_scale, float **out)
{
    *out = NULL;
    if (!t->o.dopt)
        return MC_OK;
    const struct mc_param_set *set = mc_gpt_param_set(t->m.chunks[v]);
    float *x = mc_alloc((size_t)set->n_elements * sizeof(float));
    if (!x)
        return mc_error(MC_ERR_NOMEM, "dump: out of memory gathering the distributed optimizer's "
                        "shards");
    mc_status st = mc_distopt_gather_whole(t->o.dopts[v], which, x);
    if (!st && post_scale != 1.0f) {
        for (int64_t k = 0; k < set->n_elements; k++)
            x[k] *= post_scale;
        st = mc_ddp_round_grads(set, x, set->n_elements); /* an fp16 buffer's product */
    }
    if (st)
        mc_free(x);
    else
        *out = x;
    return st;
}

/* Every parameter of every chunk under prefix: its data (which = 0), its main grad (1), or the
 * optimizer state (2: each state tensor the optimizer keeps). The last stage's copy of a tied
 * embedding is left out: it is the first stage's parameter (Megatron's shared flag). The
 * condition is the configured points, not the recording's state: with tp > 1 every rank of the
 * group must take part in each gather. With the distributed optimizer the grads after the
 * reduction and the optimizer state are its shards, all-gathered first (gather_dist). */
static mc_status record_params(struct trainer *t, const char *prefix, int which,
                               float post_scale)
{
    static const enum mc_dump_point point[3] = {MC_DUMP_POINT_PARAMS, MC_DUMP_POINT_GRADS,
                                                MC_DUMP_POINT_OPTIMIZER};
    if (!(dump.points & (unsigned)point[which]))
        return MC_OK;
    bool partial = which == 1 && strcmp(prefix, "grad.") == 0; /* before finalize_model_grads */
    char name[MC_DUMP_MAX_NAME];
    int64_t index = 0;
    mc_status st = MC_OK;
    for (int v = 0; v < t->m.vp && !st; v++) {
        mc_gpt_model *m = t->m.chunks[v];
        const struct mc_param_set *set = mc_gpt_param_set(m);
        float *dist[3] = {NULL, NULL, NULL}; /* main grad, or the two state blocks */
        struct mc_distopt_shard sh = {0};
        if (t->o.dopt)
            mc_distopt_shard(t->o.dopts[v], &sh);
        bool adam = sh.exp_avg != NULL;
        if (which == 1 && !partial)
            st = gather_dist(t, v, MC_DISTOPT_MAIN_GRAD, post_scale, &dist[0]);
        else if (which == 2 && adam) {
            st = gather_dist(t, v, MC_DISTOPT_EXP_AVG, 1.0f, &dist[0]);
            if (!st)
                st = gather_dist(t, v, MC_DISTOPT_EXP_AVG_SQ, 1.0f, &dist[1]);
        } else if (which == 2 && sh.momentum)
            st = gather_dist(t, v, MC_DISTOPT_MOMENTUM, 1.0f, &dist[2]);
        for (int64_t i = 0; !st && i < mc_gpt_num_params(m); i++, index++) {
            struct mc_param_view p = mc_gpt_param(m, i);
            if (p.shared)
                continue;
            global_name(m, p.name, name, sizeof name);
            int64_t at = set->params[i].offset;
            if (which < 2) {
                const float *x = which == 0 ? p.data : dist[0] ? dist[0] + at : p.grad;
                st = record_whole(t, m, point[which], prefix, name, &p, x, partial);
                continue;
            }
            struct mc_opt_param_state s = {0};
            if (!t->o.dopt)
                s = mc_opt_param_state(t->o.opt, index);
            const char *key[3] = {"exp_avg.", "exp_avg_sq.", "momentum_buffer."};
            const float *val[3] = {s.exp_avg, s.exp_avg_sq, s.momentum_buffer};
            for (int k = 0; t->o.dopt && k < 3; k++)
                val[k] = dist[k] ? dist[k] + at : NULL;
            char full[MC_DUMP_MAX_NAME];
            for (int k = 0; !st && k < 3; k++) {
                if (!val[k])
                    continue;
                snprintf(full, sizeof full, "%s%s", key[k], name);
                st = record_whole(t, m, MC_DUMP_POINT_OPTIMIZER, prefix, full, &p, val[k], false);
            }
            if (!st)
                st = record_whole(t, m, MC_DUMP_POINT_OPTIMIZER, "optimizer.param.", name, &p,
                                  p.data, false);
        }
        for (int k = 0; k < 3; k++)
            mc_free(dist[k]);
    }
    return st;
}

mc_status mc_train_dump_begin(struct trainer *t, int64_t iteration)
{
    if (!dump.on || !in_ranges(&dump.iters, iteration))
        return MC_OK;
    int size = 1, rank = 0;
    mc_status st = mc_train_world_comm ? mc_comm_size_rank(mc_train_world_comm, &size, &rank)
                                       : MC_OK;
    dump.write = in_ranges(&dump.ranks, rank);
    if (st || (!dump.write && t->par.ps.tp == 1 && !dump.dp_gather))
        return st;
    if ((st = mc_dump_points_open(dump.points)))
        return st;
    dump.recording = true;
    dump.iteration = iteration;
    dump.batches = 0;
    return record_params(t, "param.", 0, 1.0f);
}

void mc_train_dump_batch(int64_t k, const struct mc_micro_batch *mb)
{
    if (!dump.recording || k != dump.batches) /* each micro-batch once, when first fetched */
        return;
    dump.batches++;
    int64_t shape[2] = {mb->b, mb->s};
    /* get_batch's order: tokens, labels, loss_mask, (attention_mask), position_ids */
    if (mb->tokens)
        mc_dump_point(MC_DUMP_POINT_BATCH, "batch.", "tokens", MC_DTYPE_I64, 2, shape, mb->tokens);
    if (mb->labels)
        mc_dump_point(MC_DUMP_POINT_BATCH, "batch.", "labels", MC_DTYPE_I64, 2, shape, mb->labels);
    if (mb->loss_mask)
        mc_dump_point(MC_DUMP_POINT_BATCH, "batch.", "loss_mask", MC_DTYPE_F32, 2, shape,
                      mb->loss_mask);
    if (mb->position_ids)
        mc_dump_point(MC_DUMP_POINT_BATCH, "batch.", "position_ids", MC_DTYPE_I64, 2, shape,
                      mb->position_ids);
}

mc_status mc_train_dump_grads(struct trainer *t, const char *prefix, float post_scale)
{
    return dump.recording ? record_params(t, prefix, 1, post_scale) : MC_OK;
}

/* Creates dir and its parents (mkdir -p). */
static mc_status make_dirs(char *path)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != 0)
            continue;
        char c = *p;
        *p = 0;
        int rc = mkdir(path, 0777), err = errno;
        if (rc != 0 && err != EEXIST)
            return mc_error(MC_ERR_IO, "--dump-dir: cannot create directory %s: %s", path,
                            strerror(err)); /* (path ends at the failing part) */
        *p = c;
        if (!c)
            return MC_OK;
    }
}

mc_status mc_train_dump_end(struct trainer *t, mc_status step_status, float lm_loss)
{
    if (!dump.recording)
        return step_status;
    dump.recording = false;
    if (step_status) { /* the step failed: its half recording is dropped */
        mc_dump_points_close(NULL);
        return step_status;
    }
    /* the step clips them in place (the distributed optimizer: its main_grad shards) */
    mc_status st = record_params(t, "grad_clipped.", 1, 1.0f);
    if (!st)
        st = record_params(t, "optimizer.", 2, 1.0f);
    if (!st && t->par.ps.tp > 1)
        st = gather_activations(t);
    if (!st && mc_ps_is_pipeline_last_stage(&t->par.ps))
        mc_dump_point(MC_DUMP_POINT_LOSS, "", "loss", MC_DTYPE_F32, 0, NULL, &lm_loss);
    if (st || !dump.write) {
        mc_dump_points_close(NULL);
        return st;
    }
    int size = 1, rank = 0;
    st = mc_train_world_comm ? mc_comm_size_rank(mc_train_world_comm, &size, &rank) : MC_OK;
    char path[sizeof dump.dir + 64];
    snprintf(path, sizeof path, "%s/iter_%07lld", dump.dir, (long long)dump.iteration);
    if (!st)
        st = make_dirs(path);
    snprintf(path + strlen(path), 64, "/rank_%05d.dump", rank);
    mc_status cst = mc_dump_points_close(st ? NULL : path);
    return st ? st : cst;
}
