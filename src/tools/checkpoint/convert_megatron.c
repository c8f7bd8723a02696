/* Megatron torch-format checkpoints in the converter: loader_core.py / loader_legacy.py (read
 * every (tp, pp[, vp]) file, merge the shards into full tensors) and saver_core.py /
 * saver_legacy.py (split for the target TP/PP and write one checkpoint per rank), as
 * tools/checkpoint/{loader_base,saver_base,schema_core,utils}.py of Megatron-LM core_v0.12.1 do.
 * Keys of the three layouts (mcore local spec, mcore Transformer-Engine spec, legacy model) are
 * translated to and from the local spec by the shared table of state_dict_names.h; the table
 * below says which converter tensor each local-spec parameter is and how TP shards it. */
#include "tools/checkpoint/convert.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/checkpoint/convert_args.h"
#include "checkpointing/checkpoint_internal.h"
#include "checkpointing/dist_checkpoint.h"
#include "checkpointing/state_dict_names.h"
#include "core/dtype.h"

/* How a tensor is sharded over tensor-parallel ranks (schema_core / utils.chunk_weight). */
enum split {
    SPLIT_REP = MC_CV_SPLIT_REP,     /* replicated: norms, row-parallel biases, position
                                      * embeddings (rank 0's) */
    SPLIT_COL = MC_CV_SPLIT_COL,     /* dim 0 (qkv by whole query groups, fc1, vocabulary rows) */
    SPLIT_ROW = MC_CV_SPLIT_ROW,     /* dim 1 (linear_proj, fc2 weights) */
    SPLIT_GATED = MC_CV_SPLIT_GATED, /* SwiGLU fc1: each rank holds [gate_r; up_r] */
};

/* A per-layer parameter of the local spec (name relative to "decoder.layers.N."), in state_dict
 * order with its module's _extra_state (what == NULL) after each linear layer. */
struct layer_param {
    const char *name;
    const char *what; /* converter name: "layer N <what>" */
    enum split split;
};

static const struct layer_param layer_params[] = {
    {"input_layernorm.weight", "input norm weight", SPLIT_REP},
    {"input_layernorm.bias", "input norm bias", SPLIT_REP},
    {"self_attention.linear_proj.weight", "dense weight", SPLIT_ROW},
    {"self_attention.linear_proj.bias", "dense bias", SPLIT_REP},
    {"self_attention.linear_proj._extra_state", NULL, SPLIT_REP},
    {"self_attention.linear_qkv.weight", "qkv weight", SPLIT_COL},
    {"self_attention.linear_qkv.bias", "qkv bias", SPLIT_COL},
    {"self_attention.linear_qkv._extra_state", NULL, SPLIT_REP},
    {"pre_mlp_layernorm.weight", "post norm weight", SPLIT_REP},
    {"pre_mlp_layernorm.bias", "post norm bias", SPLIT_REP},
    {"mlp.linear_fc1.weight", "mlp l0 weight", SPLIT_COL},
    {"mlp.linear_fc1.bias", "mlp l0 bias", SPLIT_COL},
    {"mlp.linear_fc1._extra_state", NULL, SPLIT_REP},
    {"mlp.linear_fc2.weight", "mlp l1 weight", SPLIT_ROW},
    {"mlp.linear_fc2.bias", "mlp l1 bias", SPLIT_REP},
    {"mlp.linear_fc2._extra_state", NULL, SPLIT_REP},
};
#define N_LAYER_PARAMS ((int)(sizeof(layer_params) / sizeof(*layer_params)))

/* Model-level parameters of the local spec. */
enum { MP_WORD, MP_POS, MP_FINAL_W, MP_FINAL_B, MP_OUTPUT, N_MODEL_PARAMS };
static const struct layer_param model_params[N_MODEL_PARAMS] = {
    {"embedding.word_embeddings.weight", "word embeddings", SPLIT_COL},
    {"embedding.position_embeddings.weight", "position embeddings", SPLIT_REP},
    {"decoder.final_layernorm.weight", "final norm weight", SPLIT_REP},
    {"decoder.final_layernorm.bias", "final norm bias", SPLIT_REP},
    {"output_layer.weight", "output layer weight", SPLIT_COL},
};

static bool is_gated(const struct mc_cv_meta *md, const char *what)
{
    return md->swiglu && what && !strncmp(what, "mlp l0", 6);
}

/* ================================================================================================
 * Loading
 * ============================================================================================= */

struct src {
    const struct mc_cv_options *o;
    struct mc_cv_model *m;
    char iter_dir[4096];
    int tp, pp, vp;
    bool release;
    enum mc_sd_scheme scheme;
};

static const char *pk_str(const struct mc_pk *v) { return v && v->kind == MC_PK_STR ? v->s : NULL; }

static int64_t arg_int(const struct mc_pk *ns, const char *key, int64_t dflt)
{
    double v;
    return mc_pk_number(mc_pk_get(ns, key), &v) ? (int64_t)v : dflt;
}

static double arg_float(const struct mc_pk *ns, const char *key, double dflt)
{
    double v;
    return mc_pk_number(mc_pk_get(ns, key), &v) ? v : dflt;
}

static bool arg_bool(const struct mc_pk *ns, const char *key, bool dflt)
{
    const struct mc_pk *v = mc_pk_get(ns, key);
    double x;
    return v && v->kind != MC_PK_NONE && mc_pk_number(v, &x) ? x != 0 : dflt;
}

static void arg_str(const struct mc_pk *ns, const char *key, char *buf, size_t n)
{
    const struct mc_pk *v = mc_pk_get(ns, key);
    if (v && v->kind == MC_PK_STR)
        snprintf(buf, n, "%s", v->s);
}

static mc_status read_tracker(const char *dir, int64_t *iteration, bool *release)
{
    char path[4200], buf[64] = {0};
    snprintf(path, sizeof(path), "%s/latest_checkpointed_iteration.txt", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return mc_error(MC_ERR_IO, "--load-dir %s: no Megatron checkpoint there (cannot open %s: %s)",
                        dir, path, strerror(errno));
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    char *s = buf, *e = buf + n, *end;
    while (s < e && strchr(" \t\r\n", *s)) s++;
    while (e > s && strchr(" \t\r\n", e[-1])) *--e = 0;
    *release = !strcmp(s, "release");
    *iteration = *release ? 0 : strtoll(s, &end, 10);
    if (!*release && (end == s || *end || *iteration < 0))
        return mc_error(MC_ERR_FORMAT, "%s: '%s' is neither an iteration nor 'release'", path, s);
    return MC_OK;
}

static void rank_file(char *buf, size_t n, const char *iter_dir, int tp_rank, int pp_rank, int pp)
{
    if (pp > 1)
        snprintf(buf, n, "%s/mp_rank_%02d_%03d/model_optim_rng.pt", iter_dir, tp_rank, pp_rank);
    else
        snprintf(buf, n, "%s/mp_rank_%02d/model_optim_rng.pt", iter_dir, tp_rank);
}

/* find_checkpoint_rank_0 */
static mc_status first_file(struct src *s, char *path, size_t n)
{
    rank_file(path, n, s->iter_dir, 0, 0, 1);
    if (!access(path, R_OK))
        return MC_OK;
    rank_file(path, n, s->iter_dir, 0, 0, 2);
    if (!access(path, R_OK))
        return MC_OK;
    return mc_error(MC_ERR_IO, "--load-dir %s: neither %s/mp_rank_00/model_optim_rng.pt nor "
                    "%s/mp_rank_00_000/model_optim_rng.pt exists", s->o->load_dir, s->iter_dir,
                    s->iter_dir);
}

static mc_status refuse_arg(const char *dir, const char *tool, const struct mc_pk *ck,
                            const char *key, const char *what)
{
    const struct mc_pk *v = mc_pk_get(ck, key);
    double x = 0;
    bool set = v && v->kind != MC_PK_NONE && (!mc_pk_number(v, &x) || x != 0);
    if (set)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: the checkpoint was trained with %s (args.%s); %s",
                        dir, what, key, tool);
    return MC_OK;
}

static mc_status check_supported(const char *dir, const char *tool, const struct mc_pk *ck)
{
    static const char *const refused[][2] = {
        {"num_experts", "mixture of experts"},
        {"qk_layernorm", "--qk-layernorm"},
        {"decoder_first_pipeline_num_layers", "an uneven pipeline split"},
        {"decoder_last_pipeline_num_layers", "an uneven pipeline split"},
        {"account_for_embedding_in_pipeline_split", "an uneven pipeline split"},
        {"account_for_loss_in_pipeline_split", "an uneven pipeline split"},
        {"multi_latent_attention", "multi-latent attention"},
        {"mtp_num_layers", "multi-token prediction"},
        {NULL, NULL},
    };
    for (size_t k = 0; refused[k][1]; k++) {
        mc_status st = refuse_arg(dir, tool, ck, refused[k][0], refused[k][1]);
        if (st)
            return st;
    }
    if (arg_int(ck, "expert_model_parallel_size", 1) > 1)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: an expert-parallel checkpoint "
                        "(args.expert_model_parallel_size > 1); %s", dir, tool);
    return MC_OK;
}

static mc_status params_dtype(const struct mc_pk *ck, enum mc_dtype *t)
{
    const struct mc_pk *v = mc_pk_get(ck, "params_dtype");
    *t = MC_DTYPE_F32;
    if (v && v->kind == MC_PK_GLOBAL) {
        if (!strcmp(v->s, "torch bfloat16"))
            *t = MC_DTYPE_BF16;
        else if (!strcmp(v->s, "torch float16"))
            *t = MC_DTYPE_F16;
    } else if (arg_bool(ck, "bf16", false)) {
        *t = MC_DTYPE_BF16;
    } else if (arg_bool(ck, "fp16", false)) {
        *t = MC_DTYPE_F16;
    }
    return MC_OK;
}

/* build_checkpoint_metadata from the saved args */
static mc_status read_meta(struct src *s, const struct mc_pk *sd)
{
    struct mc_cv_meta *md = &s->m->md;
    const struct mc_pk *ck = mc_pk_get(sd, "args");
    if (!ck || ck->kind != MC_PK_NAMESPACE)
        return mc_error(MC_ERR_FORMAT, "--load-dir %s: the checkpoint has no 'args' Namespace "
                        "(Checkpoint does not specify argument ...)", s->o->load_dir);
    static const char *const required[] = {"tensor_model_parallel_size", "pipeline_model_parallel_size",
                                           "num_layers", "hidden_size", "num_attention_heads",
                                           "max_position_embeddings", NULL};
    for (int k = 0; required[k]; k++)
        if (!mc_pk_get(ck, required[k]))
            return mc_error(MC_ERR_FORMAT, "--load-dir %s: Checkpoint does not specify argument %s.",
                            s->o->load_dir, required[k]);
    char dir[4300];
    snprintf(dir, sizeof(dir), "--load-dir %s", s->o->load_dir);
    mc_status st = mc_cv_meta_from_args(md, ck, dir, "convert_checkpoint does not convert it");
    if (st)
        return st;
    s->tp = (int)md->previous_tp, s->pp = (int)md->previous_pp;
    s->vp = (int)arg_int(ck, "virtual_pipeline_model_parallel_size", 1);
    double it = 0;
    md->iteration = mc_pk_number(mc_pk_get(sd, "iteration"), &it) ? (int64_t)it : 0;
    if (s->tp < 1 || s->pp < 1 || s->vp < 1 || md->num_layers % (s->pp * s->vp))
        return mc_error(MC_ERR_FORMAT, "--load-dir %s: args say tp %d, pp %d, vp %d with %lld layers",
                        s->o->load_dir, s->tp, s->pp, s->vp, (long long)md->num_layers);
    return MC_OK;
}

mc_status mc_cv_meta_from_args(struct mc_cv_meta *md, const struct mc_pk *ck, const char *dir,
                               const char *refusal)
{
    mc_status st = check_supported(dir, refusal, ck);
    if (st)
        return st;
    md->checkpoint_args = (struct mc_pk *)ck;
    md->previous_tp = arg_int(ck, "tensor_model_parallel_size", 1);
    md->previous_pp = arg_int(ck, "pipeline_model_parallel_size", 1);
    md->num_layers = arg_int(ck, "num_layers", 0);
    md->hidden_size = arg_int(ck, "hidden_size", 0);
    md->num_attention_heads = arg_int(ck, "num_attention_heads", 0);
    md->num_query_groups = arg_bool(ck, "group_query_attention", false)
                               ? arg_int(ck, "num_query_groups", md->num_attention_heads)
                               : md->num_attention_heads;
    md->kv_channels = arg_int(ck, "kv_channels", md->hidden_size / md->num_attention_heads);
    md->ffn_hidden_size = arg_int(ck, "ffn_hidden_size", 4 * md->hidden_size);
    md->seq_length = arg_int(ck, "seq_length", 0);
    md->max_position_embeddings = arg_int(ck, "max_position_embeddings", 0);
    arg_str(ck, "position_embedding_type", md->position_embedding_type, sizeof(md->position_embedding_type));
    arg_str(ck, "normalization", md->normalization, sizeof(md->normalization));
    arg_str(ck, "tokenizer_type", md->tokenizer_type, sizeof(md->tokenizer_type));
    md->norm_epsilon = arg_float(ck, "norm_epsilon", arg_float(ck, "layernorm_epsilon", 1e-5));
    md->swiglu = arg_bool(ck, "swiglu", false);
    md->linear_bias = arg_bool(ck, "add_bias_linear", !arg_bool(ck, "disable_bias_linear", false));
    md->qkv_bias = arg_bool(ck, "add_qkv_bias", false);
    md->untied = arg_bool(ck, "untie_embeddings_and_output_weights", false);
    md->gelu_tanh = arg_bool(ck, "bias_gelu_fusion", true) && md->linear_bias && !md->swiglu;
    md->rotary_base = arg_float(ck, "rotary_base", 10000);
    md->rotary_percent = arg_float(ck, "rotary_percent", 1.0);
    md->rotary_interleaved = arg_bool(ck, "rotary_interleaved", false);
    md->use_rope_scaling = arg_bool(ck, "use_rope_scaling", false);
    md->rope_scaling_factor = arg_float(ck, "rope_scaling_factor", 8.0);
    md->make_vocab_size_divisible_by = arg_int(ck, "make_vocab_size_divisible_by", 128);
    md->consumed_train_samples = arg_int(ck, "consumed_train_samples", 0);
    md->consumed_valid_samples = arg_int(ck, "consumed_valid_samples", 0);
    params_dtype(ck, &md->params_dtype);
    if (md->num_attention_heads <= 0 || md->num_query_groups <= 0 ||
        md->num_attention_heads % md->num_query_groups)
        return mc_error(MC_ERR_FORMAT, "%s: bad head counts in args", dir);
    return MC_OK;
}

/* Flattens a legacy nested state dict ({'language_model': {'embedding': {...}}}) to dotted keys,
 * appended as key/value pairs to the ODICT `out`. */
static mc_status flatten(mc_pk_doc *d, struct mc_pk *out, const struct mc_pk *v, const char *prefix)
{
    for (int64_t i = 0; i < v->n; i += 2) {
        const char *k = pk_str(v->items[i]);
        if (!k)
            continue;
        char key[512];
        snprintf(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", k);
        struct mc_pk *x = v->items[i + 1];
        mc_status st = mc_pk_is_map(x) ? flatten(d, out, x, key) : mc_pk_set(d, out, key, x);
        if (st)
            return st;
    }
    return MC_OK;
}

/* Which naming scheme a (flattened) model dict uses. */
static enum mc_sd_scheme detect_scheme(const struct mc_pk *model)
{
    bool legacy = false, te = false;
    for (int64_t i = 0; i < model->n; i += 2) {
        const char *k = pk_str(model->items[i]);
        if (!k)
            continue;
        legacy |= !strncmp(k, "language_model.", 15) || !strncmp(k, "word_embeddings_for_head.", 25);
        te |= strstr(k, ".layer_norm_weight") != NULL || strstr(k, "core_attention._extra_state") != NULL;
    }
    return legacy ? MC_SD_LEGACY : te ? MC_SD_TE : MC_SD_LOCAL;
}

/* One rank's shard of a parameter, placed into the full tensor (created on first sight). */
struct shard {
    const struct mc_pk *t;
    const char *key, *path;
    int tp_rank, tp;
};

static mc_status shard_ok(const struct shard *sh)
{
    const struct mc_pk *t = sh->t;
    if (!t || t->kind != MC_PK_TENSOR || t->ndim < 1 || t->ndim > 2)
        return mc_error(MC_ERR_FORMAT, "%s: '%s' is not a 1-D or 2-D tensor", sh->path, sh->key);
    if (t->dtype != MC_DTYPE_F32 && t->dtype != MC_DTYPE_BF16 && t->dtype != MC_DTYPE_F16)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: '%s' is torch.%s (float32/bfloat16/float16 only)",
                        sh->path, sh->key, mc_dtype_name(t->dtype));
    if (!mc_pk_tensor_contiguous(t))
        return mc_error(MC_ERR_UNSUPPORTED, "%s: '%s' is a non-contiguous view", sh->path, sh->key);
    return MC_OK;
}

/* Copies rows [r0, r0+nr) x cols [c0, c0+nc) of a [R, C] block. */
static void copy_block(uint8_t *dst, int64_t dst_cols, int64_t dr, int64_t dc, const uint8_t *src,
                       int64_t src_cols, int64_t sr, int64_t sc, int64_t nr, int64_t nc, size_t es)
{
    for (int64_t r = 0; r < nr; r++)
        memcpy(dst + ((size_t)(dr + r) * (size_t)dst_cols + (size_t)dc) * es,
               src + ((size_t)(sr + r) * (size_t)src_cols + (size_t)sc) * es, (size_t)nc * es);
}

static mc_status place(struct src *s, const struct shard *sh, const char *what, enum split split)
{
    mc_status st = shard_ok(sh);
    if (st)
        return st;
    const struct mc_pk *t = sh->t;
    int64_t r = t->shape[0], c = t->ndim > 1 ? t->shape[1] : 1;
    int tp = sh->tp;
    if (split == SPLIT_REP && sh->tp_rank > 0)
        return MC_OK; /* the loaders take replicated tensors from TP rank 0 */
    int64_t fr = split == SPLIT_COL || split == SPLIT_GATED ? r * tp : r;
    int64_t fc = split == SPLIT_ROW ? c * tp : c;
    struct mc_cv_tensor *full = mc_cv_get(s->m, "%s", what);
    if (!full && (st = mc_cv_add(s->m, &full, t->dtype, t->ndim, fr, fc, "%s", what)))
        return st;
    if (full->shape[0] != fr || full->shape[1] != fc || full->dtype != t->dtype)
        return mc_error(MC_ERR_SHAPE, "%s: '%s' has shape [%lld, %lld] (torch.%s); other ranks give "
                        "a full tensor [%lld, %lld] (torch.%s)", sh->path, sh->key, (long long)r,
                        (long long)c, mc_dtype_name(t->dtype), (long long)full->shape[0],
                        (long long)full->shape[1], mc_dtype_name(full->dtype));
    size_t es = mc_dtype_size(t->dtype);
    const uint8_t *src = (const uint8_t *)t->storage->data + (size_t)t->offset * es;
    int k = sh->tp_rank;
    if (split == SPLIT_COL)
        copy_block(full->data, fc, k * r, 0, src, c, 0, 0, r, c, es);
    else if (split == SPLIT_ROW)
        copy_block(full->data, fc, 0, k * c, src, c, 0, 0, r, c, es);
    else if (split == SPLIT_GATED) { /* [gate_k; up_k] -> rows of [gate; up] */
        int64_t half = r / 2;
        copy_block(full->data, fc, k * half, 0, src, c, 0, 0, half, c, es);
        copy_block(full->data, fc, tp * half + k * half, 0, src, c, half, 0, half, c, es);
    } else
        memcpy(full->data, src, (size_t)(r * c) * es);
    return MC_OK;
}

static int match(const struct layer_param *table, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(name, table[k].name))
            return k;
    return -1;
}

/* Global layer number of local layer `l` of chunk `chunk` on stage `pp_rank`. */
static int64_t global_layer(const struct src *s, int64_t l, int chunk, int pp_rank)
{
    int64_t per_chunk = s->m->md.num_layers / (s->pp * s->vp);
    return ((int64_t)chunk * s->pp + pp_rank) * per_chunk + l;
}

static mc_status take_key(struct src *s, struct shard *sh, int chunk, int pp_rank)
{
    const struct mc_cv_meta *md = &s->m->md;
    char local[512];
    bool absent = false;
    mc_status st = mc_sd_name_map(s->scheme, MC_SD_LOCAL, sh->key, !md->untied, local,
                                  sizeof(local), &absent);
    if (st)
        return mc_error(st, "%s: %s", sh->path, mc_last_error());
    size_t n = strlen(local), e = strlen("._extra_state");
    if (absent || (n > e && !strcmp(local + n - e, "._extra_state")))
        return MC_OK;
    int k = match(model_params, N_MODEL_PARAMS, local);
    if (k == MP_OUTPUT && !md->untied) /* the tied model's copy of the embedding on the last stage */
        return MC_OK;
    if (k >= 0)
        return place(s, sh, model_params[k].what, model_params[k].split);
    static const char pre[] = "decoder.layers.";
    char *end;
    int64_t l = strtoll(local + sizeof(pre) - 1, &end, 10);
    int p = strncmp(local, pre, sizeof(pre) - 1) || *end != '.' ? -1
            : match(layer_params, N_LAYER_PARAMS, end + 1);
    if (p < 0 || !layer_params[p].what)
        return mc_error(MC_ERR_UNSUPPORTED, "%s: '%s' is not a parameter convert_checkpoint converts "
                        "(GPT without q/k layernorm or experts)", sh->path, sh->key);
    char what[64];
    snprintf(what, sizeof(what), "layer %lld %s", (long long)global_layer(s, l, chunk, pp_rank),
             layer_params[p].what);
    return place(s, sh, what, is_gated(md, layer_params[p].what) ? SPLIT_GATED : layer_params[p].split);
}

static mc_status load_rank(struct src *s, int tp_rank, int pp_rank)
{
    char path[4200];
    rank_file(path, sizeof(path), s->iter_dir, tp_rank, pp_rank, s->pp);
    mc_pk_doc *d;
    mc_status st = mc_pk_doc_init(&d);
    if (st)
        return st;
    struct mc_pk *sd;
    if (access(path, R_OK)) {
        st = mc_error(MC_ERR_IO, "--load-dir %s: the checkpoint of tensor rank %d, pipeline rank %d "
                      "(%s) is missing: %s", s->o->load_dir, tp_rank, pp_rank, path, strerror(errno));
        goto out;
    }
    if ((st = mc_torch_load(d, path, &sd)))
        goto out;
    for (int chunk = 0; chunk < s->vp; chunk++) {
        char name[16];
        snprintf(name, sizeof(name), s->vp > 1 ? "model%d" : "model", chunk);
        const struct mc_pk *model = mc_pk_get(sd, name);
        if (!model || !mc_pk_is_map(model)) {
            st = mc_error(MC_ERR_FORMAT, "%s: no '%s' state dict", path, name);
            goto out;
        }
        struct mc_pk *flat = mc_pk_new(d, MC_PK_ODICT);
        if (!flat || (st = flatten(d, flat, model, ""))) {
            st = st ? st : MC_ERR_NOMEM;
            goto out;
        }
        s->scheme = detect_scheme(flat);
        for (int64_t i = 0; !st && i < flat->n; i += 2) {
            struct shard sh = {.t = flat->items[i + 1], .key = flat->items[i]->s, .path = path,
                               .tp_rank = tp_rank, .tp = s->tp};
            st = take_key(s, &sh, chunk, pp_rank);
        }
    }
out:
    mc_pk_doc_free(d);
    return st;
}

/* _get_checkpoint_format of Megatron's load_checkpoint, which the loaders call: torch_dist when
 * the directory is a distributed checkpoint (metadata.json), torch when it holds an mp_rank_0*
 * entry, torch_dcp (refused: not Megatron's torch_dist) when only a DCP .metadata is there. */
static mc_status checkpoint_format(const struct src *s, bool *dist)
{
    char probe[4200];
    *dist = mc_dist_ckpt_is(s->iter_dir);
    if (*dist)
        return MC_OK;
    DIR *dir = opendir(s->iter_dir);
    if (!dir)
        return mc_error(MC_ERR_IO, "--load-dir %s: cannot open %s: %s", s->o->load_dir, s->iter_dir,
                        strerror(errno));
    bool torch = false;
    for (struct dirent *e; !torch && (e = readdir(dir));)
        torch = !strncmp(e->d_name, "mp_rank_0", 9);
    closedir(dir);
    snprintf(probe, sizeof(probe), "%s/.metadata", s->iter_dir);
    if (!torch && !access(probe, F_OK))
        return mc_error(MC_ERR_UNSUPPORTED, "--load-dir %s: %s is a torch_dcp checkpoint "
                        "(--ckpt-format torch_dcp), which megatron.c does not read", s->o->load_dir,
                        s->iter_dir);
    if (!torch)
        return mc_error(MC_ERR_FORMAT, "--load-dir %s: unknown checkpoint format in %s (neither "
                        "metadata.json of a torch_dist checkpoint nor mp_rank_* of a torch one)",
                        s->o->load_dir, s->iter_dir);
    return MC_OK;
}

/* The local-spec name of a torch_dist global key ("decoder.layers.mlp.linear_fc1.layer_norm_weight"
 * -> "decoder.layers.0.pre_mlp_layernorm.weight" with *layered), "" for one without a converter
 * tensor (the TE core attention's). */
static mc_status dist_local_name(const struct src *s, const char *key, char *local, size_t n,
                                 bool *layered)
{
    static const char pre[] = "decoder.layers.";
    char te[600];
    bool absent = false;
    *layered = !strncmp(key, pre, sizeof(pre) - 1);
    if (*layered)
        snprintf(te, sizeof(te), "%s0.%s", pre, key + sizeof(pre) - 1);
    else
        snprintf(te, sizeof(te), "%s", key);
    mc_status st = mc_sd_name_map(MC_SD_TE, MC_SD_LOCAL, te, !s->m->md.untied, local, n, &absent);
    if (st)
        return mc_error(st, "%s/.metadata: %s", s->iter_dir, mc_last_error());
    if (absent)
        *local = 0;
    return MC_OK;
}

/* The converter tensor `what` (layer `layer`, or -1) from region [o, o+z) of the global tensor
 * `key` (its dims after the layer axis: ndim of shape), in the model's dtype. */
static mc_status dist_take(struct src *s, struct mc_dist_reader *r, const char *key, long layer,
                           int ndim, const int64_t *shape, const char *what)
{
    int64_t o[MC_PK_MAX_DIM] = {0}, z[MC_PK_MAX_DIM], numel = 1;
    int pre = layer >= 0;
    if (pre)
        o[0] = layer, z[0] = 1;
    for (int k = 0; k < ndim; k++)
        z[pre + k] = shape[k], numel *= shape[k];
    if (ndim < 1 || ndim > 2)
        return mc_error(MC_ERR_UNSUPPORTED, "%s/.metadata: %s is not a 1-D or 2-D parameter",
                        s->iter_dir, key);
    float *tmp = mc_alloc((size_t)numel * sizeof(float) + 1);
    if (!tmp)
        return MC_ERR_NOMEM;
    mc_status st = mc_dist_reader_read(r, key, o, z, tmp);
    struct mc_cv_tensor *t = NULL;
    enum mc_dtype dt = s->m->md.params_dtype;
    st = st ? st : mc_cv_add(s->m, &t, dt, ndim, shape[0], ndim > 1 ? shape[1] : 1, "%s", what);
    if (!st) /* 16-bit weights were widened exactly: narrowing gives the stored bits back */
        mc_dtype_from_f32(t->data, dt, tmp, numel);
    mc_free(tmp);
    return st;
}

/* One global tensor of a torch_dist checkpoint: every layer of a stacked key, or the whole. */
static mc_status dist_key(struct src *s, struct mc_dist_reader *r, const char *key)
{
    char local[600];
    bool layered;
    int nd;
    int64_t g[MC_PK_MAX_DIM];
    if (!strncmp(key, "optimizer.", 10))
        return MC_OK; /* the loaders read no optimizer state (--no-load-optim) */
    mc_status st = dist_local_name(s, key, local, sizeof(local), &layered);
    if (st || !*local || !mc_dist_reader_shape(r, key, &nd, g))
        return st;
    const struct mc_cv_meta *md = &s->m->md;
    if (!layered) {
        int k = match(model_params, N_MODEL_PARAMS, local);
        if (k < 0 || (k == MP_OUTPUT && !md->untied))
            return mc_error(MC_ERR_UNSUPPORTED, "%s/.metadata: '%s' is not a parameter "
                            "convert_checkpoint converts (GPT without q/k layernorm or experts)",
                            s->iter_dir, key);
        return dist_take(s, r, key, -1, nd, g, model_params[k].what);
    }
    int p = match(layer_params, N_LAYER_PARAMS, local + strlen("decoder.layers.0."));
    if (p < 0 || !layer_params[p].what)
        return mc_error(MC_ERR_UNSUPPORTED, "%s/.metadata: '%s' is not a parameter "
                        "convert_checkpoint converts (GPT without q/k layernorm or experts)",
                        s->iter_dir, key);
    if (nd < 2 || g[0] != md->num_layers)
        return mc_error(MC_ERR_FORMAT, "%s/.metadata: %s stacks %lld layers; the args say "
                        "num_layers %lld", s->iter_dir, key, nd ? (long long)g[0] : 0LL,
                        (long long)md->num_layers);
    for (long l = 0; !st && l < md->num_layers; l++) {
        char what[64];
        snprintf(what, sizeof(what), "layer %ld %s", l, layer_params[p].what);
        st = dist_take(s, r, key, l, nd - 1, g + 1, what);
    }
    return st;
}

/* A torch_dist checkpoint: its keys are global (layers stacked, TP shards as chunks), so the
 * full tensors are read directly, whatever the saving layout. */
static mc_status load_dist(struct src *s)
{
    struct mc_cv_model *m = s->m;
    char path[4200];
    snprintf(path, sizeof(path), "%s/common.pt", s->iter_dir);
    struct mc_pk *sd;
    mc_status st = mc_pk_doc_init(&m->md.doc);
    st = st ? st : mc_torch_load(m->md.doc, path, &sd);
    if (!st && !mc_pk_is_map(sd))
        st = mc_error(MC_ERR_FORMAT, "%s: not a checkpoint dict", path);
    st = st ? st : read_meta(s, sd);
    if (st)
        return st;
    m->md.release = s->release;
    if ((st = mc_cv_true_vocab(s->o, &m->md.true_vocab_size)))
        return st;
    if (s->o->log)
        fprintf(s->o->log, "loading Megatron distributed checkpoint %s: saved at tp %d, pp %d, %lld "
                "layers, iteration %lld%s\n", s->iter_dir, s->tp, s->pp, (long long)m->md.num_layers,
                (long long)m->md.iteration, s->release ? " (release)" : "");
    struct mc_dist_reader *r;
    st = mc_dist_reader_open(s->iter_dir, &r);
    for (int64_t k = 0; !st && k < mc_dist_reader_count(r); k++) {
        bool tensor;
        const char *key = mc_dist_reader_key(r, k, &tensor);
        if (tensor)
            st = dist_key(s, r, key);
    }
    mc_dist_reader_close(r);
    s->scheme = MC_SD_TE; /* the global keys carry TE names whatever the saving spec */
    return st ? st : mc_cv_check(m, s->o->load_dir);
}

static void note_impl(const struct src *s)
{
    const char *impl = s->o->loader_impl;
    const char *found = mc_sd_scheme_name(s->scheme);
    if (s->o->log && impl && s->scheme != MC_SD_LEGACY && strcmp(impl, found))
        fprintf(s->o->log, "note: --loader-transformer-impl %s, but the checkpoint holds %s parameter "
                "names; reading them as %s\n", impl, found, found);
}

mc_status mc_cv_load_megatron(struct mc_cv_model *m, const struct mc_cv_options *o)
{
    struct src s = {.o = o, .m = m};
    struct stat sb;
    if (stat(o->load_dir, &sb) || !S_ISDIR(sb.st_mode))
        return mc_error(MC_ERR_IO, "--load-dir %s: no such directory", o->load_dir);
    int64_t iteration = 0;
    mc_status st = read_tracker(o->load_dir, &iteration, &s.release);
    if (st)
        return st;
    if (s.release)
        snprintf(s.iter_dir, sizeof(s.iter_dir), "%s/release", o->load_dir);
    else
        snprintf(s.iter_dir, sizeof(s.iter_dir), "%s/iter_%07lld", o->load_dir, (long long)iteration);
    char path[4200];
    bool dist;
    if ((st = checkpoint_format(&s, &dist)))
        return st;
    if (dist)
        return load_dist(&s);
    if ((st = first_file(&s, path, sizeof(path))))
        return st;
    if ((st = mc_pk_doc_init(&m->md.doc)))
        return st;
    struct mc_pk *sd;
    if ((st = mc_torch_load(m->md.doc, path, &sd)))
        return st;
    if (!mc_pk_is_map(sd))
        return mc_error(MC_ERR_FORMAT, "%s: not a checkpoint dict", path);
    if ((st = read_meta(&s, sd)))
        return st;
    m->md.release = s.release;
    if ((st = mc_cv_true_vocab(o, &m->md.true_vocab_size)))
        return st;
    if (o->log)
        fprintf(o->log, "loading Megatron checkpoint %s: tp %d, pp %d%s%.0d, %lld layers, iteration %lld%s\n",
                s.iter_dir, s.tp, s.pp, s.vp > 1 ? ", vp " : "", s.vp > 1 ? s.vp : 0,
                (long long)m->md.num_layers, (long long)m->md.iteration, s.release ? " (release)" : "");
    for (int p = 0; !st && p < s.pp; p++)
        for (int t = 0; !st && t < s.tp; t++)
            st = load_rank(&s, t, p);
    if (st)
        return st;
    note_impl(&s);
    return mc_cv_check(m, o->load_dir);
}

/* ================================================================================================
 * Saving
 * ============================================================================================= */

struct dst {
    const struct mc_cv_options *o;
    const struct mc_cv_model *m;
    int tp, pp;
    enum mc_sd_scheme scheme;
    int64_t padded_vocab;
    struct mc_cv_tensor *word, *output; /* padded for the target */
};

/* saver_base.pad_weight: truncate to, or pad by repeating the last row up to, the target's
 * padded vocabulary; without a true vocabulary size the table is kept as it is. */
static mc_status pad_vocab(struct dst *d, struct mc_cv_model *tmp, const struct mc_cv_tensor *src,
                           struct mc_cv_tensor **out)
{
    int64_t v = d->padded_vocab, h = src->shape[1];
    mc_status st = mc_cv_add(tmp, out, src->dtype, 2, v, h, "%s", src->name);
    if (st)
        return st;
    size_t row = (size_t)h * mc_dtype_size(src->dtype);
    for (int64_t r = 0; r < v; r++) {
        int64_t from = r < src->shape[0] ? r : src->shape[0] - 1;
        memcpy((*out)->data + (size_t)r * row, src->data + (size_t)from * row, row);
    }
    return MC_OK;
}

static mc_status check_target(const struct dst *d)
{
    const struct mc_cv_meta *md = &d->m->md;
    if (md->num_attention_heads % d->tp)
        return mc_error(MC_ERR_CONFIG, "--target-tensor-parallel-size %d does not divide "
                        "num_attention_heads %lld", d->tp, (long long)md->num_attention_heads);
    if (md->num_query_groups % d->tp)
        return mc_error(MC_ERR_CONFIG, "--target-tensor-parallel-size %d does not divide "
                        "num_query_groups %lld (tensor parallelism splits whole query groups)",
                        d->tp, (long long)md->num_query_groups);
    if (md->ffn_hidden_size % d->tp)
        return mc_error(MC_ERR_CONFIG, "--target-tensor-parallel-size %d does not divide "
                        "ffn_hidden_size %lld", d->tp, (long long)md->ffn_hidden_size);
    if (md->num_layers % d->pp)
        return mc_error(MC_ERR_CONFIG, "--target-pipeline-parallel-size %d does not divide "
                        "num_layers %lld", d->pp, (long long)md->num_layers);
    if (d->padded_vocab % d->tp)
        return mc_error(MC_ERR_CONFIG, "--target-tensor-parallel-size %d does not divide the vocabulary "
                        "table's %lld rows; give --true-vocab-size or --vocab-file so that it can "
                        "be re-padded for the target", d->tp, (long long)d->padded_vocab);
    return MC_OK;
}

/* The shard of `t` for TP rank `k` as a tensor over freshly allocated bytes owned by `pool`. */
static struct mc_pk *shard_tensor(mc_pk_doc *doc, struct mc_cv_model *pool,
                                  const struct mc_cv_tensor *t, enum split split, int k, int tp)
{
    int64_t sr = split == SPLIT_COL || split == SPLIT_GATED ? t->shape[0] / tp : t->shape[0];
    int64_t sc = split == SPLIT_ROW ? t->shape[1] / tp : t->shape[1];
    struct mc_cv_tensor *o;
    if (mc_cv_add(pool, &o, t->dtype, t->ndim, sr, sc, "shard"))
        return NULL;
    mc_cv_shard_copy(o->data, t, (enum mc_cv_split)split, k, tp, &sr, &sc);
    int64_t shape[2] = {sr, sc};
    enum mc_dtype dt = t->dtype;
    struct mc_pk *st = mc_pk_storage(doc, dt, sr * sc, o->data);
    return st ? mc_pk_tensor(doc, st, 0, t->ndim, shape, NULL) : NULL;
}

void mc_cv_shard_copy(uint8_t *dst, const struct mc_cv_tensor *t, enum mc_cv_split split, int k,
                      int tp, int64_t *rows, int64_t *cols)
{
    int64_t r = t->shape[0], c = t->ndim > 1 ? t->shape[1] : 1;
    int64_t sr = split == MC_CV_SPLIT_COL || split == MC_CV_SPLIT_GATED ? r / tp : r;
    int64_t sc = split == MC_CV_SPLIT_ROW ? c / tp : c;
    size_t es = mc_dtype_size(t->dtype);
    if (split == MC_CV_SPLIT_COL)
        copy_block(dst, sc, 0, 0, t->data, c, k * sr, 0, sr, c, es);
    else if (split == MC_CV_SPLIT_ROW)
        copy_block(dst, sc, 0, 0, t->data, c, 0, k * sc, r, sc, es);
    else if (split == MC_CV_SPLIT_GATED) {
        int64_t half = sr / 2, ffn = r / 2;
        copy_block(dst, sc, 0, 0, t->data, c, k * half, 0, half, c, es);
        copy_block(dst, sc, half, 0, t->data, c, ffn + k * half, 0, half, c, es);
    } else
        memcpy(dst, t->data, (size_t)(r * c) * es);
    *rows = sr, *cols = sc;
}

enum mc_cv_split mc_cv_split_of(const struct mc_cv_meta *md, const char *what)
{
    for (int k = 0; k < N_MODEL_PARAMS; k++)
        if (!strcmp(what, model_params[k].what))
            return (enum mc_cv_split)model_params[k].split;
    long l;
    int used = 0;
    if (sscanf(what, "layer %ld %n", &l, &used) != 1 || !used)
        return MC_CV_SPLIT_REP;
    for (int k = 0; k < N_LAYER_PARAMS; k++)
        if (layer_params[k].what && !strcmp(what + used, layer_params[k].what))
            return is_gated(md, layer_params[k].what) ? MC_CV_SPLIT_GATED
                                                      : (enum mc_cv_split)layer_params[k].split;
    return MC_CV_SPLIT_REP;
}

/* One rank's entries, collected under the target's names, then ordered as its state_dict(). */
struct entry {
    char key[256];
    long order;
    int64_t seq;
    struct mc_pk *v;
};

struct rank_ctx {
    struct dst *d;
    mc_pk_doc *doc;
    struct mc_cv_model *pool;
    int k, p;
    struct entry *e;
    int64_t n, cap;
};

static mc_status add_entry(struct rank_ctx *c, const char *key, struct mc_pk *v)
{
    if (!v)
        return MC_ERR_NOMEM;
    if (c->n == c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 64;
        struct entry *e = mc_calloc((size_t)cap, sizeof(*e));
        if (!e)
            return MC_ERR_NOMEM;
        if (c->n)
            memcpy(e, c->e, (size_t)c->n * sizeof(*e));
        mc_free(c->e);
        c->e = e, c->cap = cap;
    }
    struct entry *e = &c->e[c->n];
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->order = mc_sd_name_order(c->d->scheme, key);
    e->seq = c->n++;
    e->v = v;
    return MC_OK;
}

/* A local-spec key with its shard of `t` (NULL: the None of an _extra_state), renamed for the
 * target scheme (skipped where the scheme has no such entry). */
static mc_status put(struct rank_ctx *c, const char *local, const struct mc_cv_tensor *t, enum split split)
{
    char key[256];
    bool absent = false;
    mc_status st = mc_sd_name_map(MC_SD_LOCAL, c->d->scheme, local, !c->d->m->md.untied, key,
                                  sizeof(key), &absent);
    if (st || absent)
        return st;
    struct mc_pk *v = t ? shard_tensor(c->doc, c->pool, t, split, c->k, c->d->tp) : mc_pk_none(c->doc);
    return add_entry(c, key, v);
}

static mc_status put_layer(struct rank_ctx *c, int64_t local, int64_t global)
{
    const struct mc_cv_model *m = c->d->m;
    mc_status st = MC_OK;
    char key[256];
    for (int p = 0; !st && p < N_LAYER_PARAMS; p++) {
        const struct layer_param *lp = &layer_params[p];
        const struct mc_cv_tensor *t = lp->what ? mc_cv_get(m, "layer %lld %s", (long long)global, lp->what) : NULL;
        if (lp->what && !t)
            continue; /* absent bias / norm bias */
        snprintf(key, sizeof(key), "decoder.layers.%lld.%s", (long long)local, lp->name);
        st = put(c, key, t, is_gated(&m->md, lp->what) ? SPLIT_GATED : lp->split);
    }
    const char *const *extra = mc_sd_layer_extras(c->d->scheme); /* TE core attention */
    for (int k = 0; !st && extra && extra[k]; k++) {
        snprintf(key, sizeof(key), "decoder.layers.%lld.%s", (long long)local, extra[k]);
        st = add_entry(c, key, mc_pk_none(c->doc));
    }
    return st;
}

static mc_status model_entries(struct rank_ctx *c)
{
    struct dst *d = c->d;
    const struct mc_cv_model *m = d->m;
    bool first = c->p == 0, last = c->p == d->pp - 1;
    int64_t per = m->md.num_layers / d->pp;
    mc_status st = MC_OK;
    if (first) {
        const struct mc_cv_tensor *pos = mc_cv_get(m, "position embeddings");
        st = put(c, model_params[MP_WORD].name, d->word, SPLIT_COL);
        if (!st && pos)
            st = put(c, model_params[MP_POS].name, pos, SPLIT_REP);
    }
    for (int64_t l = 0; !st && l < per; l++)
        st = put_layer(c, l, c->p * per + l);
    if (st || !last)
        return st;
    for (int w = MP_FINAL_W; !st && w <= MP_FINAL_B; w++) {
        const struct mc_cv_tensor *t = mc_cv_get(m, "%s", model_params[w].what);
        if (t)
            st = put(c, model_params[w].name, t, SPLIT_REP);
    }
    if (!st && (m->md.untied || d->pp > 1)) /* tied with pp > 1: the last stage's copy */
        st = put(c, model_params[MP_OUTPUT].name, m->md.untied ? d->output : d->word, SPLIT_COL);
    return st ? st : put(c, "output_layer._extra_state", NULL, SPLIT_REP);
}

static int entry_cmp(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static struct mc_pk *level(mc_pk_doc *doc, struct mc_pk *parent, const char *key, size_t len)
{
    char k[256];
    snprintf(k, sizeof(k), "%.*s", (int)len, key);
    struct mc_pk *v = mc_pk_get(parent, k);
    if (v)
        return v;
    v = mc_pk_new(doc, MC_PK_ODICT);
    return v && !mc_pk_set(doc, parent, k, v) ? v : NULL;
}

/* The entries as the model dict: flat (mcore), or nested dict levels (legacy). */
static mc_status build_model(struct rank_ctx *c, struct mc_pk *model)
{
    qsort(c->e, (size_t)c->n, sizeof(*c->e), entry_cmp);
    for (int64_t i = 0; i < c->n; i++) {
        struct mc_pk *node = model;
        const char *key = c->e[i].key;
        int depth = c->d->scheme == MC_SD_LEGACY ? mc_sd_legacy_depth(key) : 0;
        for (int l = 0; node && l < depth; l++) {
            const char *dot = strchr(key, '.');
            if (!dot)
                break;
            node = level(c->doc, node, key, (size_t)(dot - key));
            key = dot + 1;
        }
        if (!node || mc_pk_set(c->doc, node, key, c->e[i].v))
            return MC_ERR_NOMEM;
    }
    return MC_OK;
}

static mc_status write_rank(struct dst *d, const char *iter_dir, int k, int p, struct mc_pk *args)
{
    mc_pk_doc *doc;
    mc_status st = mc_pk_doc_init(&doc);
    if (st)
        return st;
    struct mc_cv_model pool;
    mc_cv_model_init(&pool);
    struct rank_ctx c = {.d = d, .doc = doc, .pool = &pool, .k = k, .p = p};
    struct mc_pk *sd = mc_pk_new(doc, MC_PK_DICT);
    struct mc_pk *model = mc_pk_new(doc, MC_PK_ODICT);
    if (!sd || !model) {
        st = MC_ERR_NOMEM;
        goto out;
    }
    if ((st = model_entries(&c)) || (st = build_model(&c, model)))
        goto out;
    st = mc_cv_state_dict(doc, sd, args, model, d->m->md.iteration);
    char dir[4600], path[4700];
    if (d->pp > 1)
        snprintf(dir, sizeof(dir), "%s/mp_rank_%02d_%03d", iter_dir, k, p);
    else
        snprintf(dir, sizeof(dir), "%s/mp_rank_%02d", iter_dir, k);
    snprintf(path, sizeof(path), "%s/model_optim_rng.pt", dir);
    st = st ? st : mc_cv_mkdirs(dir);
    st = st ? st : mc_torch_save(doc, sd, path);
out:
    mc_free(c.e);
    mc_cv_model_free(&pool);
    mc_pk_doc_free(doc);
    return st;
}

static mc_status write_tracker(const char *dir, int64_t iteration, bool release)
{
    char path[4300];
    snprintf(path, sizeof(path), "%s/latest_checkpointed_iteration.txt", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return mc_error(MC_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    if (release)
        fprintf(f, "release");
    else
        fprintf(f, "%lld", (long long)iteration);
    if (fclose(f))
        return mc_error(MC_ERR_IO, "writing %s failed: %s", path, strerror(errno));
    return MC_OK;
}

static mc_status prepare(struct dst *d, struct mc_cv_model *padded)
{
    const struct mc_cv_model *m = d->m;
    const struct mc_cv_tensor *word = mc_cv_get(m, "word embeddings");
    const struct mc_cv_tensor *out = mc_cv_get(m, "output layer weight");
    d->padded_vocab = m->md.true_vocab_size >= 0
                          ? mc_cv_padded_vocab(m->md.true_vocab_size, m->md.make_vocab_size_divisible_by, d->tp)
                          : word->shape[0];
    if (m->md.true_vocab_size < 0 && d->o->log)
        fprintf(d->o->log, "Original vocab size not specified, leaving embedding table as-is. If "
                "you've changed the tensor parallel size this could cause problems.\n");
    mc_status st = check_target(d);
    st = st ? st : pad_vocab(d, padded, word, &d->word);
    if (!st && out)
        st = pad_vocab(d, padded, out, &d->output);
    return st;
}

/* ---- torch_dist: every target rank's plan written by this one process ---------------------- */
struct dist_rank {
    struct dst *d;
    struct mc_dist_ckpt_plan *plan;
    struct mc_cv_model *pool; /* the shards' bytes, until the rank's files are written */
    int k, p;
};

/* The global key of a local-spec name and its layer on the prepended axis (-1: none). */
static mc_status dist_global(const struct dst *d, const char *local, char *key, size_t n, long *layer)
{
    char te[600];
    bool absent = false;
    mc_status st = mc_sd_name_map(MC_SD_LOCAL, MC_SD_TE, local, !d->m->md.untied, te, sizeof(te), &absent);
    if (st || absent)
        return st ? st : mc_error(MC_ERR_INTERNAL, "%s has no TE-spec name", local);
    int used = 0;
    *layer = -1;
    if (sscanf(te, "decoder.layers.%ld.%n", layer, &used) == 1 && used)
        snprintf(key, n, "decoder.layers.%s", te + used);
    else
        snprintf(key, n, "%s", te), *layer = -1;
    return MC_OK;
}

/* Rank (k, p)'s chunk(s) of the converter tensor t under the local-spec name `local` (global layer
 * `glayer` for a layer's): replicated tensors from tensor-parallel rank 0 only, SwiGLU's fc1 as
 * its [gate; up] halves, as Megatron's sharded_state_dict gives them. */
static mc_status dist_put(struct dist_rank *c, const char *local, const struct mc_cv_tensor *t,
                          enum split split)
{
    int tp = c->d->tp;
    if (split == SPLIT_REP && c->k > 0)
        return MC_OK;
    char key[600];
    long layer;
    mc_status st = dist_global(c->d, local, key, sizeof(key), &layer);
    struct mc_cv_tensor *sh = NULL;
    int64_t rows, cols;
    int64_t r = t->shape[0], cl = t->ndim > 1 ? t->shape[1] : 1;
    int64_t sr = split == SPLIT_COL || split == SPLIT_GATED ? r / tp : r;
    int64_t sc = split == SPLIT_ROW ? cl / tp : cl;
    st = st ? st : mc_cv_add(c->pool, &sh, t->dtype, t->ndim, sr, sc, "shard");
    if (st)
        return st;
    mc_cv_shard_copy(sh->data, t, (enum mc_cv_split)split, c->k, tp, &rows, &cols);
    int halves = split == SPLIT_GATED ? 2 : 1, pre = layer >= 0;
    size_t es = mc_dtype_size(t->dtype);
    for (int h = 0; !st && h < halves; h++) {
        int64_t g[MC_PK_MAX_DIM], off[MC_PK_MAX_DIM], sz[MC_PK_MAX_DIM];
        if (pre)
            g[0] = c->d->m->md.num_layers, off[0] = layer, sz[0] = 1;
        int64_t part = sr / halves;
        g[pre] = r, sz[pre] = part;
        off[pre] = split == SPLIT_COL ? c->k * sr
                   : split == SPLIT_GATED ? h * (r / 2) + c->k * part : 0;
        if (t->ndim > 1) {
            g[pre + 1] = cl, sz[pre + 1] = sc;
            off[pre + 1] = split == SPLIT_ROW ? c->k * sc : 0;
        }
        const uint8_t *data = sh->data + (size_t)(h * part * sc) * es;
        st = mc_dist_ckpt_plan_chunk(c->plan, key, t->ndim + pre, g, off, sz, data, t->dtype);
    }
    return st;
}

/* The sharded object `<module>._extra_state/shard_<layer>_<L>` of a layer's module (None: no
 * Transformer Engine fp8 state), from tensor-parallel rank 0. */
static mc_status dist_extra(struct dist_rank *c, const char *local_param, int64_t glayer)
{
    if (c->k > 0)
        return MC_OK;
    char key[600], fqn[700];
    long layer;
    mc_status st = dist_global(c->d, local_param, key, sizeof(key), &layer);
    char *dot = st ? NULL : strrchr(key, '.');
    if (dot)
        *dot = 0;
    snprintf(fqn, sizeof(fqn), "%s._extra_state/shard_%lld_%lld", key, (long long)glayer,
             (long long)c->d->m->md.num_layers);
    return st ? st : mc_dist_ckpt_plan_object(c->plan, fqn, NULL);
}

static mc_status dist_layer(struct dist_rank *c, int64_t local, int64_t global)
{
    const struct mc_cv_model *m = c->d->m;
    mc_status st = MC_OK;
    char name[256];
    if (c->d->scheme == MC_SD_TE && c->k == 0) { /* TE's core attention: its module comes first */
        char fqn[160];
        snprintf(fqn, sizeof(fqn), "decoder.layers.self_attention.core_attention._extra_state/shard_%lld_%lld",
                 (long long)global, (long long)m->md.num_layers);
        st = mc_dist_ckpt_plan_object(c->plan, fqn, NULL);
    }
    char prev[256] = ""; /* the last parameter of the module an _extra_state follows */
    for (int p = 0; !st && p < N_LAYER_PARAMS; p++) {
        const struct layer_param *lp = &layer_params[p];
        if (!lp->what) { /* the module's _extra_state, after its parameters */
            if (*prev)
                st = dist_extra(c, prev, global);
            *prev = 0;
            continue;
        }
        const struct mc_cv_tensor *t = mc_cv_get(m, "layer %lld %s", (long long)global, lp->what);
        if (!t)
            continue; /* absent bias / norm bias */
        /* named with the global layer: its number is the chunk's place on the layer axis */
        snprintf(name, sizeof(name), "decoder.layers.%lld.%s", (long long)global, lp->name);
        st = dist_put(c, name, t, is_gated(&m->md, lp->what) ? SPLIT_GATED : lp->split);
        if (strstr(lp->name, "linear_"))
            snprintf(prev, sizeof(prev), "%s", name);
    }
    (void)local;
    return st;
}

/* Rank (k, p)'s sharded state dict: its stage's model (no optimizer, no RNG: --no-save-optim
 * --no-save-rng), then its rerun_state_machine_state object. */
static mc_status dist_rank_plan(struct dist_rank *c, mc_pk_doc *objs)
{
    struct dst *d = c->d;
    const struct mc_cv_model *m = d->m;
    bool first = c->p == 0, last = c->p == d->pp - 1;
    int64_t per = m->md.num_layers / d->pp;
    mc_status st = mc_dist_ckpt_plan_new(&c->plan);
    if (!st && first) {
        const struct mc_cv_tensor *pos = mc_cv_get(m, "position embeddings");
        st = dist_put(c, model_params[MP_WORD].name, d->word, SPLIT_COL);
        if (!st && pos)
            st = dist_put(c, model_params[MP_POS].name, pos, SPLIT_REP);
    }
    for (int64_t l = 0; !st && l < per; l++)
        st = dist_layer(c, l, c->p * per + l);
    for (int w = MP_FINAL_W; !st && last && w <= MP_FINAL_B; w++) {
        const struct mc_cv_tensor *t = mc_cv_get(m, "%s", model_params[w].what);
        if (t)
            st = dist_put(c, model_params[w].name, t, SPLIT_REP);
    }
    if (!st && last && m->md.untied) /* a tied head is the word embedding's key: not written again */
        st = dist_put(c, model_params[MP_OUTPUT].name, d->output, SPLIT_COL);
    char fqn[128];
    mc_dist_ckpt_rerun_key(fqn, sizeof(fqn), c->p, c->k, d->pp, d->tp);
    struct mc_pk *rerun = st ? NULL : mc_ckpt_rerun_state(objs, -1);
    if (!st)
        st = rerun ? mc_dist_ckpt_plan_object(c->plan, fqn, mc_pk_get(rerun, "sharded")) : MC_ERR_NOMEM;
    return st ? st : mc_dist_ckpt_plan_seal(c->plan);
}

/* Every target rank's files (global rank pp_rank * tp + tp_rank: Megatron's tp-fastest order
 * at one data-parallel replica), then .metadata, common.pt and metadata.json. */
static mc_status write_dist(struct dst *d, const char *iter_dir, struct mc_pk *args, mc_pk_doc *doc)
{
    int world = d->tp * d->pp;
    struct mc_dist_ckpt_plan **plans = mc_calloc((size_t)world, sizeof(*plans));
    struct mc_pk *common = mc_pk_new(doc, MC_PK_DICT);
    mc_status st = plans && common ? mc_cv_mkdirs(iter_dir) : MC_ERR_NOMEM;
    for (int rank = 0; !st && rank < world; rank++) {
        struct mc_cv_model pool;
        mc_cv_model_init(&pool);
        struct dist_rank c = {.d = d, .pool = &pool, .k = rank % d->tp, .p = rank / d->tp};
        st = dist_rank_plan(&c, doc);
        plans[rank] = c.plan;
        st = st ? st : mc_dist_ckpt_plan_write(c.plan, iter_dir, rank);
        mc_cv_model_free(&pool);
    }
    /* common.pt: save_checkpoint's state dict without its sharded parts */
    st = st ? st : mc_pk_set(doc, common, "args", args);
    st = st ? st : mc_pk_set(doc, common, "checkpoint_version", mc_pk_float(doc, 3.0));
    st = st ? st : mc_pk_set(doc, common, "iteration", mc_pk_int(doc, d->m->md.iteration));
    st = st ? st : mc_pk_set(doc, common, "rerun_state_machine", mc_ckpt_rerun_common(doc));
    st = st ? st : mc_pk_set(doc, common, "num_floating_point_operations_so_far", mc_pk_int(doc, 0));
    char final_dir[4400];
    snprintf(final_dir, sizeof(final_dir), "%s/%s", d->o->save_dir, strrchr(iter_dir, '/') + 1);
    st = st ? st : mc_dist_ckpt_write_metadata(plans, world, iter_dir, final_dir, doc, common);
    for (int rank = 0; plans && rank < world; rank++)
        mc_dist_ckpt_plan_free(plans[rank]);
    mc_free(plans);
    return st;
}

mc_status mc_cv_save_megatron(const struct mc_cv_model *m, const struct mc_cv_options *o)
{
    struct dst d = {.o = o, .m = m, .tp = o->target_tp ? o->target_tp : (int)m->md.previous_tp,
                    .pp = o->target_pp ? o->target_pp : (int)m->md.previous_pp};
    d.scheme = o->legacy_saver ? MC_SD_LEGACY
               : (o->saver_impl && !strcmp(o->saver_impl, "local")) ? MC_SD_LOCAL : MC_SD_TE;
    struct mc_cv_model padded;
    mc_cv_model_init(&padded);
    mc_pk_doc *adoc = NULL;
    char tmp[4200], iter_dir[4400];
    mc_status st = prepare(&d, &padded);
    st = st ? st : mc_pk_doc_init(&adoc);
    struct mc_pk *args = NULL;
    if (!st)
        st = mc_cv_target_args(adoc, m, o, d.tp, d.pp, d.padded_vocab, &args);
    st = st ? st : mc_cv_begin_output(o->save_dir, tmp, sizeof(tmp));
    if (st)
        goto out;
    /* Deliberate difference: Megatron's saver writes a release source as iter_0000000 with the
     * tracker "0", which its own read_metadata refuses; we keep it a release checkpoint. */
    if (m->md.release)
        snprintf(iter_dir, sizeof(iter_dir), "%s/release", tmp);
    else
        snprintf(iter_dir, sizeof(iter_dir), "%s/iter_%07lld", tmp, (long long)m->md.iteration);
    if (o->dist_saver)
        st = write_dist(&d, iter_dir, args, adoc);
    for (int p = 0; !st && !o->dist_saver && p < d.pp; p++)
        for (int k = 0; !st && k < d.tp; k++)
            st = write_rank(&d, iter_dir, k, p, args);
    st = st ? st : write_tracker(tmp, m->md.iteration, m->md.release);
    st = st ? st : mc_cv_finish_output(o->save_dir, tmp);
    if (st)
        mc_cv_abort_output(tmp);
    else if (o->log)
        fprintf(o->log, "saved %s: %s, tp %d, pp %d, %s names, padded vocab %lld, iteration %lld\n",
                o->save_dir, o->dist_saver ? "torch_dist" : "torch", d.tp, d.pp,
                mc_sd_scheme_name(d.scheme), (long long)d.padded_vocab,
                (long long)m->md.iteration);
out:
    if (adoc)
        mc_pk_doc_free(adoc);
    mc_cv_model_free(&padded);
    return st;
}
