/* torch_dist checkpoints (src/checkpointing/dist_checkpoint.c, with torch_pickle.c reading the
 * DCP .metadata pickle and torch_zip.c the chunks): the input is the iteration directory's
 * .metadata, then (each after MC_FUZZ_SEP, all optional) fuzz.distcp, a data file of the
 * input's own that the metadata may name, __0_0.distcp and __0_1.distcp. Parts the input lacks,
 * common.pt and metadata.json are Megatron's files of the golden
 * tests/golden/checkpointing/dist_gpt_tp1. mc_ckpt_load reads the directory as pretrain_gpt
 * --ckpt-format torch_dist does, into that golden's model (4 layers, hidden 16, NullTokenizer's
 * 512 + 1 tokens padded to 576) with its Adam optimizer (both built once) and scheduler, so every
 * offset, chunk and shape the reader accepts is copied into the parameters and moments; the
 * loaded weights are then summed. Seeds: tests/fuzz/make_seeds.py (the golden .metadata as
 * Megatron wrote it, and cut down with a few chunks moved into fuzz.distcp). */
#include <limits.h>
#include <sys/stat.h>

#include "fuzz_common.h"

#include "megatron/checkpoint.h"
#include "megatron/gpt.h"
#include "megatron/optimizer.h"
#include "optimizer/lr_scheduler.h"
#include "training/args.h"
#include "training/checkpointing.h"
#include "training/dry_run.h"
#include "training/microbatches.h"
#include "training/model_config.h"
#include "training/schedule_args.h"
#include "training/validate.h"

#define GOLDEN MC_FUZZ_SOURCE_DIR "/tests/golden/checkpointing/dist_gpt_tp1/save/iter_0000003"

/* the input's parts; the golden has no fuzz.distcp (none unless the input brings one) */
static const char *const data_files[] = {".metadata", "fuzz.distcp", "__0_0.distcp",
                                         "__0_1.distcp"};
#define NPARTS 4

static struct mc_args *args;
static mc_gpt_model *model;
static mc_optimizer *opt;
static struct mc_opt_sched_config sched_cfg;
static char iter_dir[128];

/* The golden's arguments (tests/checkpointing/megatron_cases.py, case gpt_tp1). */
static void setup(void)
{
    const char *dir = mc_fuzz_dir();
    char p[PATH_MAX], src[PATH_MAX];
    snprintf(iter_dir, sizeof(iter_dir), "%s/iter_0000003", dir);
    if (mkdir(iter_dir, 0700))
        abort();
    static const char *const fixed[] = {"common.pt", "metadata.json"};
    for (int k = 0; k < 2; k++) {
        /* links, not shell copies: the source path may be long or hold quotes (a CI checkout) */
        if (snprintf(p, sizeof(p), "%s/%s", iter_dir, fixed[k]) >= (int)sizeof(p) ||
            snprintf(src, sizeof(src), "%s/%s", GOLDEN, fixed[k]) >= (int)sizeof(src) ||
            symlink(src, p))
            abort();
    }
    mc_fuzz_write("latest_checkpointed_iteration.txt", "3", 1, p, sizeof(p));
    char *argv[] = {"pretrain_gpt", "--num-layers", "4", "--hidden-size", "16",
                    "--num-attention-heads", "4", "--seq-length", "16",
                    "--max-position-embeddings", "16", "--micro-batch-size", "2",
                    "--global-batch-size", "8", "--train-iters", "6", "--lr", "1e-2",
                    "--lr-decay-style", "cosine", "--lr-warmup-iters", "1", "--lr-decay-iters", "8",
                    "--split", "100,0,0", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512",
                    "--make-vocab-size-divisible-by", "64", "--attention-dropout", "0",
                    "--hidden-dropout", "0", "--use-cpu-initialization", "--ckpt-format",
                    "torch_dist", "--seed", "1234", "--load", (char *)dir, NULL};
    int argc = (int)(sizeof(argv) / sizeof(argv[0])) - 1;
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    struct mc_gpt_config c;
    struct mc_optimizer_config oc;
    struct mc_microbatches mb;
    if (mc_args_init(&args) || mc_args_parse(args, argc, argv) ||
        mc_args_validate(args, defaults, NULL, NULL) ||
        mc_microbatches_init_from_args(args, NULL, &mb) ||
        mc_opt_sched_config_from_args(args, &mb, NULL, &sched_cfg) ||
        mc_gpt_config_from_args(args, 513, mc_vocab_padded(513, 64, 1), 0, &c) ||
        mc_gpt_model_init(&c, &model))
        abort();
    mc_opt_config_from_args(args, &oc);
    if (mc_opt_init(&oc, mc_gpt_param_set(model), &opt))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!args)
        setup();
    const uint8_t *part[NPARTS];
    size_t len[NPARTS];
    size_t n = mc_fuzz_split(data, size, part, len, NPARTS);
    for (size_t k = 0; k < NPARTS; k++) {
        char name[64], p[PATH_MAX], src[PATH_MAX];
        snprintf(name, sizeof(name), "iter_0000003/%s", data_files[k]);
        if (k < n) {
            mc_fuzz_unlink(name); /* a link to the golden file: write a file of its own */
            mc_fuzz_write(name, part[k], len[k], p, sizeof(p));
            continue;
        }
        snprintf(p, sizeof(p), "%s/%s", iter_dir, data_files[k]);
        snprintf(src, sizeof(src), "%s/%s", GOLDEN, data_files[k]);
        unlink(p);
        if (k != 1 && symlink(src, p))
            abort();
    }
    struct mc_opt_sched sched;
    if (mc_opt_sched_init(&sched, &sched_cfg, NULL))
        abort();
    struct mc_ckpt_state s = {.model = model, .opt = opt, .sched = &sched};
    bool loaded = false;
    mc_status st = mc_fuzz_report("dist_ckpt", mc_train_ckpt_load(args, &s, NULL, &loaded));
    if (!st && loaded) /* touch every loaded weight */
        for (int64_t i = 0; i < mc_gpt_num_params(model); i++) {
            struct mc_param_view v = mc_gpt_param(model, i);
            mc_fuzz_touch(v.data, (size_t)v.numel * sizeof(float));
        }
    mc_fuzz_touch(mc_last_error(), strlen(mc_last_error()));
    return 0;
}
