/* pretrain_gpt --dump-dir (megatron.c's own options, docs/alignment.md): the tensors of chosen
 * iterations on chosen ranks, named by Megatron's module and parameter names with global layer
 * numbers, so that a dump of Megatron-LM itself (tools/megatron_dump_hooks.py) or of another
 * layout lines up name by name (tools/compare_dumps.c). The model reports its forward and
 * backward points through mc_dump_point (src/debug/dump.c); this file opens the recording for
 * an iteration, adds the batch, the parameters, their grads at three moments, the optimizer
 * state and the loss, and writes DIR/iter_NNNNNNN/rank_NNNNN.dump (temp name + rename). */
#include "training/trainer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "megatron/dump.h"

enum { MAX_RANGES = 64 };

struct ranges {
    int n; /* 0 = every value */
    int64_t lo[MAX_RANGES], hi[MAX_RANGES];
};

static struct {
    bool on;         /* --dump-dir given */
    bool recording;  /* inside a dumped train step */
    char dir[4096];
    struct ranges iters, ranks;
    unsigned points;
    int64_t iteration, batches; /* the step being dumped; micro-batches recorded so far */
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
    if (mc_args_int(a, MC_A_tensor_model_parallel_size) > 1)
        return mc_error(MC_ERR_UNSUPPORTED, "--dump-dir with --tensor-model-parallel-size %lld: "
                        "not implemented yet (the dumps would hold tensor-parallel shards); run "
                        "the alignment at tensor parallel size 1",
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
    if (mc_args_bool(a, MC_A_use_distributed_optimizer) &&
        (dump.points & (MC_DUMP_POINT_GRADS | MC_DUMP_POINT_OPTIMIZER)))
        return mc_error(MC_ERR_UNSUPPORTED, "--dump-dir with --use-distributed-optimizer: the "
                        "grads and optimizer points are not implemented yet (each rank holds a "
                        "shard of them); pass --dump-points without grads and optimizer");
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

/* Every parameter of every chunk under prefix: its data (which = 0), its main grad (1), or the
 * optimizer state (2: each state tensor the optimizer keeps). The last stage's copy of a tied
 * embedding is left out: it is the first stage's parameter (Megatron's shared flag). */
static void record_params(struct trainer *t, const char *prefix, int which)
{
    static const enum mc_dump_point point[3] = {MC_DUMP_POINT_PARAMS, MC_DUMP_POINT_GRADS,
                                                MC_DUMP_POINT_OPTIMIZER};
    if (!mc_dump_point_on(point[which])) /* (no optimizer state to read with the distributed one) */
        return;
    char name[MC_DUMP_MAX_NAME];
    int64_t index = 0;
    for (int v = 0; v < t->m.vp; v++) {
        mc_gpt_model *m = t->m.chunks[v];
        for (int64_t i = 0; i < mc_gpt_num_params(m); i++, index++) {
            struct mc_param_view p = mc_gpt_param(m, i);
            if (p.shared)
                continue;
            global_name(m, p.name, name, sizeof name);
            if (which < 2) {
                mc_dump_point(which ? MC_DUMP_POINT_GRADS : MC_DUMP_POINT_PARAMS, prefix, name,
                              MC_DTYPE_F32, p.ndim, p.shape, which ? p.grad : p.data);
                continue;
            }
            struct mc_opt_param_state s = mc_opt_param_state(t->o.opt, index);
            const char *key[3] = {"exp_avg.", "exp_avg_sq.", "momentum_buffer."};
            float *val[3] = {s.exp_avg, s.exp_avg_sq, s.momentum_buffer};
            char full[MC_DUMP_MAX_NAME];
            for (int k = 0; k < 3; k++) {
                if (!val[k])
                    continue;
                snprintf(full, sizeof full, "%s%s", key[k], name);
                mc_dump_point(MC_DUMP_POINT_OPTIMIZER, prefix, full, MC_DTYPE_F32, p.ndim, p.shape,
                              val[k]);
            }
            mc_dump_point(MC_DUMP_POINT_OPTIMIZER, "optimizer.param.", name, MC_DTYPE_F32, p.ndim,
                          p.shape, p.data);
        }
    }
}

mc_status mc_train_dump_begin(struct trainer *t, int64_t iteration)
{
    if (!dump.on || !in_ranges(&dump.iters, iteration))
        return MC_OK;
    int size = 1, rank = 0;
    mc_status st = mc_train_world_comm ? mc_comm_size_rank(mc_train_world_comm, &size, &rank)
                                       : MC_OK;
    if (st || !in_ranges(&dump.ranks, rank))
        return st;
    if ((st = mc_dump_points_open(dump.points)))
        return st;
    dump.recording = true;
    dump.iteration = iteration;
    dump.batches = 0;
    record_params(t, "param.", 0);
    return MC_OK;
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

void mc_train_dump_grads(struct trainer *t, const char *prefix)
{
    if (dump.recording)
        record_params(t, prefix, 1);
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
    record_params(t, "grad_clipped.", 1); /* the step clips the main grads in place */
    record_params(t, "optimizer.", 2);
    if (mc_ps_is_pipeline_last_stage(&t->par.ps))
        mc_dump_point(MC_DUMP_POINT_LOSS, "", "loss", MC_DTYPE_F32, 0, NULL, &lm_loss);
    int size = 1, rank = 0;
    mc_status st = mc_train_world_comm ? mc_comm_size_rank(mc_train_world_comm, &size, &rank)
                                       : MC_OK;
    char path[sizeof dump.dir + 64];
    snprintf(path, sizeof path, "%s/iter_%07lld", dump.dir, (long long)dump.iteration);
    if (!st)
        st = make_dirs(path);
    snprintf(path + strlen(path), 64, "/rank_%05d.dump", rank);
    mc_status cst = mc_dump_points_close(st ? NULL : path);
    return st ? st : cst;
}
