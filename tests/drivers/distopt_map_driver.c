/* Test driver for tests/parallel/test_distopt_buffer.py: prints Megatron's grad-buffer index
 * map (param_and_grad_buffer.c) so the test can compare it with Megatron's own code.
 *   distopt_map_driver model <dp> <megatron args>
 *       builds the model the args describe (tensor-parallel rank 0, the bucket size and
 *       --use-distributed-optimizer as pretrain_gpt takes them) and lays it out for dp ranks
 *   distopt_map_driver raw <dp> <distopt 0|1> <bucket_size, 0 = none> <numel>[s] ...
 *       lays out the given sizes (forward order; a trailing 's' marks a shared embedding)
 * Output: "param <index> <name> <numel> <start> <end> <bucket>" (forward order), then
 * "bucket <id> <start> <end> <numel_unpadded>", then "numel <numel> <numel_unpadded>". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/distrib_optimizer.h"
#include "megatron/gpt.h"
#include "training/args.h"
#include "training/dry_run.h"
#include "training/model_config.h"
#include "training/validate.h"

static void print_map(const struct mc_pgb_map *m, const mc_gpt_model *model)
{
    for (int64_t i = 0; i < m->n_params; i++)
        printf("param %lld %s %lld %lld %lld %lld\n", (long long)i,
               model ? mc_gpt_param(model, i).name : "-",
               (long long)(m->param[i].end - m->param[i].start), (long long)m->param[i].start,
               (long long)m->param[i].end, (long long)m->param[i].bucket);
    for (int64_t b = 0; b < m->n_buckets; b++)
        printf("bucket %lld %lld %lld %lld\n", (long long)b, (long long)m->bucket[b].start,
               (long long)m->bucket[b].end, (long long)m->bucket[b].numel_unpadded);
    printf("numel %lld %lld\n", (long long)m->numel, (long long)m->numel_unpadded);
}

static int run_raw(int argc, char **argv)
{
    if (argc < 4)
        return fprintf(stderr, "raw: need dp distopt bucket_size numel...\n"), 2;
    struct mc_pgb_config c = {atoi(argv[0]), atoi(argv[1]) != 0, atoll(argv[2]), false};
    int64_t n = argc - 3;
    int64_t *numel = calloc((size_t)n, sizeof(int64_t));
    bool *shared = calloc((size_t)n, sizeof(bool));
    struct mc_pgb_map m;
    int rc = 1;
    if (!numel || !shared)
        goto out;
    for (int64_t i = 0; i < n; i++) {
        char *end;
        numel[i] = strtoll(argv[3 + i], &end, 10);
        shared[i] = *end == 's';
    }
    if (mc_pgb_map_init(&c, n, numel, shared, &m) != MC_OK) {
        fprintf(stderr, "raw: %s\n", mc_last_error());
        goto out;
    }
    print_map(&m, NULL);
    mc_pgb_map_free(&m);
    rc = 0;
out:
    free(numel);
    free(shared);
    return rc;
}

static int run_model(int argc, char **argv)
{
    static const char *const defaults[] = {"tokenizer_type", "NullTokenizer", NULL};
    struct mc_args *a = NULL;
    mc_gpt_model *model = NULL;
    struct mc_gpt_config cfg;
    struct mc_pgb_map m;
    int rc = 1, dp = atoi(argv[0]); /* argv[0] stands in for the program name */
    bool ok = mc_args_init(&a) == MC_OK && mc_args_parse(a, argc, argv) == MC_OK;
    if (ok) { /* the world this layout belongs to: tp x dp ranks */
        mc_args_set_int(a, MC_A_world_size, dp * mc_args_int(a, MC_A_tensor_model_parallel_size));
        ok = mc_args_validate(a, defaults, NULL, NULL) == MC_OK;
    }
    if (!ok) {
        fprintf(stderr, "args: %s | %s\n", a ? a->err : "", mc_last_error());
        goto out;
    }
    int64_t vocab = mc_args_int(a, MC_A_vocab_size);
    int64_t padded = mc_vocab_padded(vocab, mc_args_int(a, MC_A_make_vocab_size_divisible_by),
                                     mc_args_int(a, MC_A_tensor_model_parallel_size));
    if (mc_gpt_config_from_args(a, vocab, padded, 0, &cfg) != MC_OK ||
        mc_gpt_model_init(&cfg, &model) != MC_OK) {
        fprintf(stderr, "model: %s\n", mc_last_error());
        goto out;
    }
    int64_t bucket = mc_args_is_none(a, MC_A_ddp_bucket_size) ? 0
                                                             : mc_args_int(a, MC_A_ddp_bucket_size);
    struct mc_pgb_config c = {
        dp, mc_args_bool(a, MC_A_use_distributed_optimizer),
        mc_pgb_bucket_size(mc_args_bool(a, MC_A_overlap_grad_reduce), bucket, dp, 0),
        mc_args_bool(a, MC_A_ddp_pad_buckets_for_high_nccl_busbw)};
    if (mc_distopt_map_init(mc_gpt_param_set(model), &c, &m) != MC_OK) {
        fprintf(stderr, "map: %s\n", mc_last_error());
        goto out;
    }
    print_map(&m, model);
    mc_pgb_map_free(&m);
    rc = 0;
out:
    mc_gpt_model_free(model);
    mc_args_free(a);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "raw"))
        return run_raw(argc - 2, argv + 2);
    if (argc >= 3 && !strcmp(argv[1], "model"))
        return run_model(argc - 2, argv + 2);
    fprintf(stderr, "usage: distopt_map_driver raw|model <dp> ...\n");
    return 2;
}
