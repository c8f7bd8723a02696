/* RankGenerator and initialize_model_parallel of megatron/core/parallel_state.py
 * (core_v0.12.1) over MPI: the group lists are Megatron's mixed-radix arithmetic, and each
 * group becomes one split of the world (mc_comm_split: color = the group's index, key = the
 * member's position), so communicator ranks follow Megatron's member order. */
#include "parallel_state/parallel_state.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int dim_index(const struct mc_rank_gen *g, const char *name, size_t len)
{
    for (int i = 0; i < g->ndims; i++)
        if (strlen(g->names[i]) == len && !strncmp(g->names[i], name, len))
            return i;
    return -1;
}

/* Splits "a-b-c" into tokens; calls back with each (pointer, length). */
static int next_token(const char **s, size_t *len)
{
    if (!**s)
        return 0;
    const char *dash = strchr(*s, '-');
    *len = dash ? (size_t)(dash - *s) : strlen(*s);
    return 1;
}

static mc_status parse_order(struct mc_rank_gen *g, const char *order, const int size_of[5])
{
    static const char *const all[5] = {"tp", "pp", "dp", "ep", "cp"};
    const char *s = order;
    size_t len;
    g->ndims = 0;
    while (next_token(&s, &len)) {
        int k = -1;
        for (int i = 0; i < 5; i++)
            if (strlen(all[i]) == len && !strncasecmp(all[i], s, len))
                k = i;
        if (k < 0 || dim_index(g, all[k], 2) >= 0)
            return mc_error(MC_ERR_CONFIG, "parallel order '%s': token '%.*s' is %s (expected "
                            "each of tp, pp, dp, ep, cp at most once, separated by '-')",
                            order, (int)len, s, k < 0 ? "unknown" : "repeated");
        memcpy(g->names[g->ndims], all[k], 3);
        g->sizes[g->ndims++] = size_of[k];
        s += len + (s[len] == '-');
    }
    for (int k = 0; k < 5; k++) {
        if (dim_index(g, all[k], 2) >= 0)
            continue;
        if (size_of[k] != 1)
            return mc_error(MC_ERR_CONFIG, "parallel order '%s' does not name %s, whose size "
                            "is %d (every dimension larger than 1 must appear in the order)",
                            order, all[k], size_of[k]);
        memcpy(g->names[g->ndims], all[k], 3);
        g->sizes[g->ndims++] = 1;
    }
    return MC_OK;
}

mc_status mc_rank_gen_init(struct mc_rank_gen *g, int tp, int ep, int dp, int pp, int cp,
                           const char *order, int rank_offset)
{
    memset(g, 0, sizeof(*g));
    if (tp < 1 || ep < 1 || dp < 1 || pp < 1 || cp < 1)
        return mc_error(MC_ERR_CONFIG, "parallel sizes must be >= 1 (tp %d, ep %d, dp %d, pp %d, "
                        "cp %d)", tp, ep, dp, pp, cp);
    if (ep != 1 && cp != 1)
        return mc_error(MC_ERR_CONFIG, "expert (%d) and context (%d) parallel sizes cannot both "
                        "be > 1 in one rank generator", ep, cp);
    const int size_of[5] = {tp, pp, dp, ep, cp};
    g->world = tp * ep * dp * pp * cp;
    g->rank_offset = rank_offset;
    return parse_order(g, order ? order : "tp-cp-ep-dp-pp", size_of);
}

mc_status mc_rank_gen_get_ranks(const struct mc_rank_gen *g, const char *token, int *ranks,
                                int *num_groups, int *group_size)
{
    bool mask[MC_RANK_GEN_DIMS] = {false};
    const char *s = token;
    size_t len;
    while (next_token(&s, &len)) {
        int k = dim_index(g, s, len);
        if (k < 0)
            return mc_error(MC_ERR_CONFIG, "rank group '%s': unknown dimension '%.*s'", token,
                            (int)len, s);
        mask[k] = true;
        s += len + (s[len] == '-');
    }
    int stride[MC_RANK_GEN_DIMS], gsize = 1;
    for (int i = 0, p = 1; i < g->ndims; p *= g->sizes[i], i++) {
        stride[i] = p;
        if (mask[i])
            gsize *= g->sizes[i];
    }
    int ngroups = g->world / gsize;
    for (int grp = 0; grp < ngroups; grp++) {
        int base = 0, rest = grp; /* the group index's digits over the unmasked dims */
        for (int i = 0; i < g->ndims; i++)
            if (!mask[i]) {
                base += (rest % g->sizes[i]) * stride[i];
                rest /= g->sizes[i];
            }
        for (int m = 0; m < gsize; m++) {
            int r = base, left = m; /* the member's digits over the masked dims */
            for (int i = 0; i < g->ndims; i++)
                if (mask[i]) {
                    r += (left % g->sizes[i]) * stride[i];
                    left /= g->sizes[i];
                }
            ranks[grp * gsize + m] = r + g->rank_offset;
        }
    }
    *num_groups = ngroups;
    *group_size = gsize;
    return MC_OK;
}

static const char *const group_token[MC_PS_NUM_GROUPS] = {
    [MC_PS_DP] = "dp",       [MC_PS_DP_CP] = "dp-cp",       [MC_PS_CP] = "cp",
    [MC_PS_MP] = "tp-pp",    [MC_PS_TP] = "tp",             [MC_PS_PP] = "pp",
    [MC_PS_TP_DP_CP] = "tp-dp-cp", [MC_PS_TP_DP] = "tp-dp", [MC_PS_TP_CP] = "tp-cp",
};

static mc_status check_sizes(const struct mc_ps_config *c, int world)
{
    int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    int cp = c->context_parallel_size, ep = c->expert_model_parallel_size;
    if (tp < 1 || pp < 1 || cp < 1 || ep < 1)
        return mc_error(MC_ERR_CONFIG, "initialize_model_parallel: sizes must be >= 1 "
                        "(--tensor-model-parallel-size %d, --pipeline-model-parallel-size %d, "
                        "--context-parallel-size %d, --expert-model-parallel-size %d)",
                        tp, pp, cp, ep);
    if (world % (tp * pp * cp))
        return mc_error(MC_ERR_CONFIG, "world_size (%d) is not divisible by "
                        "tensor_model_parallel_size (%d) x pipeline_model_parallel_size (%d) x "
                        "context_parallel_size (%d)", world, tp, pp, cp);
    if (ep != 1)
        return mc_error(MC_ERR_UNSUPPORTED, "--expert-model-parallel-size %d: expert "
                        "(MoE) parallel groups are not built by megatron.c", ep);
    return MC_OK;
}

/* Finds this rank's group among ranks[ngroups * gsize] and makes its communicator. */
static mc_status make_group(struct mc_ps_comm *pc, void *world_comm, int me, const int *ranks,
                            int ngroups, int gsize, const char *token)
{
    int color = -1, key = -1;
    for (int grp = 0; grp < ngroups && color < 0; grp++)
        for (int m = 0; m < gsize; m++)
            if (ranks[grp * gsize + m] == me) {
                color = grp;
                key = m;
                break;
            }
    if (color < 0)
        return mc_error(MC_ERR_INTERNAL, "rank %d is in no '%s' group", me, token);
    pc->size = gsize;
    pc->rank = key;
    pc->ranks = mc_alloc(sizeof(int) * (size_t)gsize);
    if (!pc->ranks)
        return MC_ERR_NOMEM;
    memcpy(pc->ranks, ranks + color * gsize, sizeof(int) * (size_t)gsize);
    if (!world_comm)
        return MC_OK;
    /* split is collective over the world: every rank calls it, even for a size-1 group */
    char what[64];
    snprintf(what, sizeof(what), "creating the '%s' process group", token);
    return mc_comm_split(world_comm, color, key, &pc->comm, what);
}

mc_status mc_ps_init(struct mc_parallel_state *ps, void *world_comm, const struct mc_ps_config *c)
{
    memset(ps, 0, sizeof(*ps));
    int world = 1, me = 0;
    mc_status st = mc_comm_world(world_comm, &world, &me);
    if (st || (st = check_sizes(c, world)))
        return st;
    ps->world = world;
    ps->rank = me;
    ps->tp = c->tensor_model_parallel_size;
    ps->pp = c->pipeline_model_parallel_size;
    ps->cp = c->context_parallel_size;
    ps->ep = c->expert_model_parallel_size;
    ps->dp = world / (ps->tp * ps->pp * ps->cp);
    struct mc_rank_gen g;
    if ((st = mc_rank_gen_init(&g, ps->tp, 1, ps->dp, ps->pp, ps->cp, c->order, 0)))
        return st;
    int *ranks = mc_alloc(sizeof(int) * (size_t)world);
    if (!ranks)
        return MC_ERR_NOMEM;
    for (int k = 0; k < MC_PS_NUM_GROUPS && !st; k++) {
        int ng, gs;
        st = mc_rank_gen_get_ranks(&g, group_token[k], ranks, &ng, &gs);
        if (!st)
            st = make_group(&ps->group[k], world_comm, me, ranks, ng, gs, group_token[k]);
        if (!st) /* file each group's bytes under its kind for MC_COMM_STATS */
            mc_comm_stats_register(ps->group[k].comm,
                                   k == MC_PS_TP ? MC_COMM_KIND_TP
                                   : k == MC_PS_PP ? MC_COMM_KIND_PP
                                   : k == MC_PS_MP ? MC_COMM_KIND_MP
                                   : k == MC_PS_DP || k == MC_PS_DP_CP ? MC_COMM_KIND_DP
                                                                       : MC_COMM_KIND_OTHER);
    }
    mc_free(ranks);
    if (st)
        mc_ps_free(ps);
    return st;
}

void mc_ps_free(struct mc_parallel_state *ps)
{
    for (int k = 0; k < MC_PS_NUM_GROUPS; k++) {
        struct mc_ps_comm *pc = &ps->group[k];
        mc_comm_free(pc->comm);
        mc_free(pc->ranks);
        pc->comm = NULL;
        pc->ranks = NULL;
    }
}
