/* The weights for generation, read by the checkpoint converter's loaders
 * (src/tools/checkpoint/): a Megatron --ckpt-format torch checkpoint (megatron.c's or Megatron's,
 * any tensor / pipeline / virtual-pipeline layout, local, Transformer Engine or legacy names,
 * fp32 / bf16 / fp16), merged into full tensors, with the model arguments saved in it; or a
 * HuggingFace GPT2LMHeadModel / LlamaForCausalLM directory, read as convert_checkpoint
 * --loader hf reads it; or a torch_dist checkpoint (load_dist.c). Under tensor parallelism a
 * torch_dist checkpoint, or a torch one saved at the same size, is read shard by shard
 * (load_dist.c); the others whole, each rank then keeping its shard. Megatron's run_text_generation_server.py loads with load_checkpoint
 * into the model built from the command line; here the checkpoint's own arguments build it
 * (what --use-checkpoint-args does), so a checkpoint of any layout loads in one process. */
#include "inference/inference.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/checkpoint/convert.h"

static bool exists(const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* torch_dist: metadata.json in the iteration directory the tracker names (into iter_dir). */
static bool is_torch_dist(const char *dir, char *iter_dir, size_t cap)
{
    char p[4300], it[64] = "";
    snprintf(p, sizeof(p), "%s/latest_checkpointed_iteration.txt", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return false;
    bool ok = fgets(it, sizeof(it), f) != NULL;
    fclose(f);
    if (!ok)
        return false;
    it[strcspn(it, " \r\n")] = 0;
    if (!strcmp(it, "release"))
        snprintf(iter_dir, cap, "%s/release", dir);
    else
        snprintf(iter_dir, cap, "%s/iter_%07ld", dir, strtol(it, NULL, 10));
    snprintf(p, sizeof(p), "%s/metadata.json", iter_dir);
    return access(p, F_OK) == 0;
}

mc_status mc_inf_load_checkpoint(struct mc_inf_load_options *o, struct mc_cv_model **out)
{
    *out = NULL;
    struct stat sb;
    if (!o->load || stat(o->load, &sb) || !S_ISDIR(sb.st_mode))
        return mc_error(MC_ERR_IO, "--load %s: no such directory", o->load ? o->load : "(none)");
    bool hf = exists(o->load, "config.json");
    if (!hf && !exists(o->load, "latest_checkpointed_iteration.txt"))
        return mc_error(MC_ERR_IO, "--load %s: neither a Megatron checkpoint (no "
                        "latest_checkpointed_iteration.txt) nor a HuggingFace model directory "
                        "(no config.json)", o->load);
    char iter_dir[4200] = "";
    bool dist = !hf && is_torch_dist(o->load, iter_dir, sizeof(iter_dir));
    /* a torch checkpoint saved at this tensor-parallel size: each rank reads its own file */
    bool own_file = !hf && !dist && iter_dir[0] && mc_inf_torch_shard_layout(iter_dir, o->tp);
    struct mc_cv_model *cv = mc_calloc(1, sizeof(*cv));
    if (!cv)
        return MC_ERR_NOMEM;
    mc_cv_model_init(cv);
    struct mc_cv_options co = {
        .load_dir = o->load,
        .true_vocab_size = -1, /* the table as saved: Megatron's log probs span its padding */
        /* HF: no padding rows (the vocabulary is config.json's); Megatron: as saved */
        .make_vocab_size_divisible_by = hf ? 1 : -1,
        .hf_params_dtype = MC_DTYPE_F32,
        .checking = true,
        .log = o->log,
    };
    o->shard = false;
    mc_status st = hf     ? mc_cv_load_hf(cv, &co)
                   : dist ? mc_inf_load_dist_shard(o->load, iter_dir, cv, o->log, o->tp,
                                                   o->tp_rank, &o->shard)
                   : own_file ? mc_inf_load_torch_shard(o->load, iter_dir, cv, o->log, o->tp,
                                                        o->tp_rank, &o->shard)
                              : mc_cv_load_megatron(cv, &co);
    if (st) {
        mc_inf_cv_free(cv);
        return st;
    }
    *out = cv;
    return MC_OK;
}

void mc_inf_cv_free(struct mc_cv_model *cv)
{
    if (!cv)
        return;
    mc_cv_model_free(cv);
    mc_free(cv);
}

const char *mc_inf_cv_tokenizer_type(const struct mc_cv_model *cv) { return cv->md.tokenizer_type; }
