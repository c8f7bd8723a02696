/* FLOPs per iteration and theoretical memory against the spec's worked values (Megatron
 * fixtures, §6.2 and §7): GPT-2 small, Llama-2-7B with and without GQA. */
#include <string.h>

#include "test.h"
#include "training/args.h"
#include "training/flops.h"
#include "training/theoretical_memory.h"
#include "training/validate.h"

static struct mc_args *config(int n, const char **argv)
{
    struct mc_args *a;
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    MC_ASSERT(mc_args_init(&a) == MC_OK);
    MC_ASSERT(mc_args_parse(a, n, (char **)argv) == MC_OK);
    MC_ASSERT(mc_args_validate(a, defaults, NULL, NULL) == MC_OK);
    return a;
}
#define CONFIG(...) config((int)(sizeof((const char *[]){"p", __VA_ARGS__}) / sizeof(char *)), \
                           (const char *[]){"p", __VA_ARGS__})

int main(void)
{
    double f;
    struct mc_args *a = CONFIG("--num-layers", "12", "--hidden-size", "768", "--num-attention-heads",
                               "12", "--seq-length", "1024", "--max-position-embeddings", "1024",
                               "--micro-batch-size", "1", "--train-iters", "1");
    CHECK(mc_flops_per_iteration(a, 50304, 1, &f) == MC_OK && f == 8.17184636928e11);
    CHECK(mc_flops_per_iteration(a, 50304, 512, &f) == MC_OK && f == 4.18398534107136e14);
    struct mc_memory_estimate e;
    CHECK(mc_memory_estimate(a, 50304, 1, &e) == MC_OK);
    FILE *out = tmpfile();
    mc_memory_report(out, a, &e);
    rewind(out);
    char text[1024] = {0};
    CHECK(fread(text, 1, sizeof(text) - 1, out) > 0);
    CHECK(!strcmp(text, "Number of parameters in transformer block in billions:  0.08\n"
                        "Number of parameters in embedding layers in billions: 0.04\n"
                        "Total number of parameters in billions: 0.12\n"
                        "Number of parameters in most loaded shard in billions: 0.1236\n"
                        "Theoretical memory footprints: weight and optimizer=2121.85 MB\n"));
    fclose(out);
    mc_args_free(a);

    a = CONFIG("--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
               "--ffn-hidden-size", "11008", "--swiglu", "--seq-length", "4096",
               "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--train-iters", "1");
    CHECK(mc_flops_per_iteration(a, 32000, 1, &f) == MC_OK && f == 1.75569673125888e14);
    mc_args_free(a);
    a = CONFIG("--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
               "--ffn-hidden-size", "11008", "--swiglu", "--seq-length", "4096",
               "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--train-iters", "1",
               "--group-query-attention", "--num-query-groups", "8");
    CHECK(mc_flops_per_iteration(a, 32000, 1, &f) == MC_OK && f == 1.5577846382592e14);
    mc_args_free(a);
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_flops_memory");
}
