/* Unit tests of the pretrain_gpt parser (src/training/args.c): argparse semantics, Python
 * value formatting, moe_freq_type lists, validate_args derived values, and no leaks. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "training/args.h"
#include "training/validate.h"

static struct mc_args *parse(int n, const char **argv, mc_status *st)
{
    struct mc_args *a = NULL;
    MC_ASSERT(mc_args_init(&a) == MC_OK);
    *st = mc_args_parse(a, n, (char **)argv);
    return a;
}

#define ARGV(...) ((const char *[]){"pretrain_gpt.py", __VA_ARGS__})
#define NARGS(...) ((int)(sizeof((const char *[]){"p", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(st, ...) parse(NARGS(__VA_ARGS__), ARGV(__VA_ARGS__), &(st))

static void test_values(void)
{
    mc_status st;
    struct mc_args *a = PARSE(st, "--hidden-size=32", "--hidden-size", " 1_28 ", "--lr", ".5e-3",
                              "--data-path", "0.3", "a", "-0.5", "b", "--bf16", "--onnx-safe", "False",
                              "--attention-backend", "flash", "--moe-layer-freq", "([1]*3+[0]*1)*3",
                              "--inference-batch-times-seqlen-threshold", "-7", "--cp-comm-type=a2a");
    CHECK(st == MC_OK);
    CHECK(mc_args_int(a, MC_A_hidden_size) == 128);
    CHECK(mc_args_float(a, MC_A_lr) == 0.5e-3);
    CHECK(a->v[MC_A_data_path].kind == MC_V_LIST && a->v[MC_A_data_path].n == 4);
    CHECK(!strcmp(a->v[MC_A_data_path].items[2].s, "-0.5"));
    CHECK(mc_args_bool(a, MC_A_bf16));
    CHECK(mc_args_bool(a, MC_A_onnx_safe)); /* type=bool: any non-empty string is True */
    CHECK(!strcmp(mc_args_str(a, MC_A_attention_backend), "AttnBackend.flash"));
    const struct mc_val *f = &a->v[MC_A_moe_layer_freq];
    CHECK(f->kind == MC_V_LIST && f->n == 12 && f->items[3].i == 0 && f->items[4].i == 1);
    CHECK(mc_args_int(a, MC_A_inference_batch_times_seqlen_threshold) == -7);
    char buf[128];
    mc_py_str(buf, sizeof(buf), &a->v[MC_A_cp_comm_type]);
    CHECK(!strcmp(buf, "['a2a']"));
    mc_py_str(buf, sizeof(buf), &a->v[MC_A_moe_layer_freq]);
    CHECK(!strcmp(buf, "[1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0]"));
    CHECK(a->given[MC_A_hidden_size] && !a->given[MC_A_num_layers]);
    mc_args_free(a);
}

static void expect_error(int code, const char *msg, int n, const char **argv)
{
    mc_status st;
    struct mc_args *a = parse(n, argv, &st);
    CHECK(st != MC_OK);
    CHECK(a->exit_code == code);
    if (strcmp(a->err, msg)) {
        fprintf(stderr, "got  %s\nwant %s\n", a->err, msg);
        CHECK(0);
    }
    mc_args_free(a);
}
#define ERR(code, msg, ...) expect_error(code, msg, NARGS(__VA_ARGS__), ARGV(__VA_ARGS__))

static void test_errors(void)
{
    ERR(2, "unrecognized arguments: --hidden 3 x", "--hidden", "3", "--lr", "1", "x");
    ERR(2, "unrecognized arguments: -- --lr 1", "--num-layers", "1", "--", "--lr", "1");
    ERR(2, "argument --lr: invalid float value: '-'", "--lr", "-");
    ERR(2, "argument --num-layers: invalid int value: '2.5'", "--num-layers", "2.5");
    ERR(2, "argument --num-layers: invalid int value: '1__0'", "--num-layers", "1__0");
    ERR(2, "argument --num-layers: invalid int value: '0x10'", "--num-layers", "0x10");
    ERR(2, "argument --lr: invalid float value: '0x1p3'", "--lr", "0x1p3");
    ERR(2, "argument --lr: expected one argument", "--lr", "-1e-3");
    ERR(2, "argument --lr: expected one argument", "--lr");
    ERR(2, "argument --fp16: ignored explicit argument ''", "--fp16=");
    ERR(2, "argument --save-interval/--persistent-save-interval: invalid int value: 'x'",
        "--persistent-save-interval", "x");
    ERR(2, "argument --profile-ranks: expected at least one argument", "--profile-ranks");
    ERR(2, "argument --optimizer: invalid choice: 'lamb' (choose from 'adam', 'sgd')",
        "--optimizer", "lamb");
    ERR(2, "argument --empty-unused-memory-level: invalid choice: 3 (choose from 0, 1, 2)",
        "--empty-unused-memory-level", "3");
    ERR(1, "'bogus'", "--attention-backend", "bogus");
    ERR(2, "--first-k-dense-replace is a MindSpeed option that megatron.c does not support yet",
        "--first-k-dense-replace", "1");
    ERR(2, "argument --moe-layer-freq: invalid moe_freq_type value: '[1]*'", "--moe-layer-freq", "[1]*");
    /* A value after a bad one is never reached; the first error wins. */
    ERR(2, "argument --lr: invalid float value: 'a'", "--unknown", "--lr", "a", "--num-layers", "x");
}

static void test_float_repr(void)
{
    static const struct { double x; const char *s; } cases[] = {
        {1e-5, "1e-05"}, {1e-4, "0.0001"}, {0.1, "0.1"}, {4294967296.0, "4294967296.0"},
        {1e16, "1e+16"}, {1.5e16, "1.5e+16"}, {123.0, "123.0"}, {2.5e-4, "0.00025"},
        {6e-05, "6e-05"}, {-0.0, "-0.0"}, {0.30000000000000004, "0.30000000000000004"},
        {1e22, "1e+22"}, {5e-324, "5e-324"}, {9999999999999998.0, "9999999999999998.0"},
    };
    char b[64];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        mc_py_float_repr(b, sizeof(b), cases[k].x);
        if (strcmp(b, cases[k].s))
            fprintf(stderr, "repr %.17g: got %s want %s\n", cases[k].x, b, cases[k].s);
        CHECK(!strcmp(b, cases[k].s));
    }
}

static void test_validate(void)
{
    mc_status st;
    setenv("WORLD_SIZE", "8", 1);
    struct mc_args *a = PARSE(st, "--num-layers", "4", "--hidden-size", "4096", "--num-attention-heads",
                              "32", "--seq-length", "128", "--max-position-embeddings", "128",
                              "--micro-batch-size", "2", "--swiglu", "--tensor-model-parallel-size", "2",
                              "--pipeline-model-parallel-size", "2", "--bf16", "--train-iters", "3");
    unsetenv("WORLD_SIZE");
    CHECK(st == MC_OK);
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    FILE *out = tmpfile();
    CHECK(mc_args_validate(a, defaults, out, NULL) == MC_OK);
    CHECK(mc_args_int(a, MC_A_data_parallel_size) == 2);
    CHECK(mc_args_int(a, MC_A_global_batch_size) == 4);
    CHECK(mc_args_int(a, MC_A_ffn_hidden_size) == 10880); /* int((4*4096*2/3)/64)*64 */
    CHECK(mc_args_int(a, MC_A_kv_channels) == 128);
    CHECK(mc_args_bool(a, MC_A_accumulate_allreduce_grads_in_fp32));
    CHECK(!strcmp(mc_args_str(a, MC_A_params_dtype), "torch.bfloat16"));
    CHECK(!strcmp(mc_args_str(a, MC_A_tokenizer_type), "GPT2BPETokenizer"));
    CHECK(a->deleted[MC_A_batch_size] && !a->deleted[MC_A_data_parallel_size]);
    rewind(out);
    char line[512];
    int found = 0, n = 0;
    while (fgets(line, sizeof(line), out)) {
        n++;
        found += !strcmp(line, "  ffn_hidden_size ................................. 10880\n");
        found += !strcmp(line, "  params_dtype .................................... torch.bfloat16\n");
        found += !strcmp(line, "accumulate and all-reduce gradients in fp32 for bfloat16 data type.\n");
    }
    CHECK(found == 3);
    CHECK(n > 460);
    fclose(out);
    mc_args_free(a);
}

int main(void)
{
    test_values();
    test_errors();
    test_float_repr();
    test_validate();
    CHECK(mc_alloc_live_bytes() == 0);
    return test_summary("test_args");
}
