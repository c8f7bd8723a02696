/* Test driver for tests/cli: runs pieces of the pretrain_gpt front end on a command line and
 * prints machine-readable results that the Python tests compare with Megatron's.
 *   cli_driver sched <megatron args>   LR/WD after every iteration of a simulated loop:
 *                                      "step <it> <num_micro> <consumed> <lr %.17g> <wd %.17g>"
 *   cli_driver logline k=v ...         one training log line (fields of mc_log_train_line)
 *   cli_driver valbox prefix name=value ...   the validation box
 *   cli_driver pyfloat x ...           Python repr of each double */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "training/args.h"
#include "training/log_format.h"
#include "training/microbatches.h"
#include "training/schedule_args.h"
#include "training/validate.h"

static int fail(const struct mc_args *a, const char *what)
{
    fprintf(stderr, "%s: %s | %s\n", what, a ? a->err : "", mc_last_error());
    return 1;
}

static int run_sched(int argc, char **argv)
{
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    struct mc_args *a;
    int rc = 1;
    if (mc_args_init(&a) != MC_OK)
        return fail(NULL, "init");
    if (mc_args_parse(a, argc, argv) != MC_OK || mc_args_validate(a, defaults, NULL, NULL) != MC_OK) {
        rc = fail(a, "args");
        goto out;
    }
    struct mc_microbatches mb;
    if (mc_microbatches_init_from_args(a, stdout, &mb) != MC_OK) {
        rc = fail(a, "microbatches");
        goto out;
    }
    struct mc_opt_sched_config c;
    struct mc_opt_sched s;
    memset(&c, 0, sizeof(c));
    if (mc_opt_sched_config_from_args(a, &mb, stdout, &c) != MC_OK || mc_opt_sched_init(&s, &c, stdout) != MC_OK) {
        rc = fail(a, "scheduler");
        goto out;
    }
    int64_t iters = mc_args_int(a, MC_A_train_iters), consumed = 0;
    int64_t mbdp = mc_args_int(a, MC_A_micro_batch_size) * mc_args_int(a, MC_A_data_parallel_size);
    for (int64_t it = 1; it <= iters && it <= 200; it++) {
        if (mc_microbatches_update(&mb, consumed, false) != MC_OK ||
            mc_microbatches_update(&mb, consumed, true) != MC_OK) {
            rc = fail(a, "update");
            goto out;
        }
        int64_t inc = mb.num_micro_batches * mbdp;
        mc_opt_sched_step(&s, inc);
        consumed += inc;
        printf("step %lld %lld %lld %.17g %.17g\n", (long long)it, (long long)mb.num_micro_batches,
               (long long)consumed, s.lr, s.wd);
    }
    rc = 0;
out:
    mc_args_free(a);
    return rc;
}

static const char *field(int argc, char **argv, const char *key)
{
    size_t n = strlen(key);
    for (int k = 0; k < argc; k++)
        if (!strncmp(argv[k], key, n) && argv[k][n] == '=')
            return argv[k] + n + 1;
    return NULL;
}

static double num(int argc, char **argv, const char *key, double dflt)
{
    const char *v = field(argc, argv, key);
    return v ? strtod(v, NULL) : dflt;
}

static int run_logline(int argc, char **argv)
{
    struct mc_log_train_line l;
    memset(&l, 0, sizeof(l));
    l.now = (time_t)num(argc, argv, "now", 1735732804.0);
    l.iteration = (int64_t)num(argc, argv, "iteration", 1);
    l.train_iters = (int64_t)num(argc, argv, "train_iters", 1);
    l.consumed_samples = (int64_t)num(argc, argv, "consumed", 0);
    l.skipped_samples = (int64_t)num(argc, argv, "skipped_samples", 0);
    l.elapsed_per_iter_s = num(argc, argv, "elapsed", 0);
    l.log_throughput = field(argc, argv, "throughput") != NULL;
    l.throughput = num(argc, argv, "throughput", 0);
    l.learning_rate = num(argc, argv, "lr", 0);
    l.has_decoupled_lr = field(argc, argv, "decoupled_lr") != NULL;
    l.decoupled_lr = num(argc, argv, "decoupled_lr", 0);
    l.batch_size = (int64_t)num(argc, argv, "batch", 0);
    const char *names[4] = {"lm loss", "load_balancing_loss", "z_loss", "mtp_1 loss"};
    float sums[4];
    int n = 0;
    char key[16];
    for (; n < 4; n++) {
        snprintf(key, sizeof(key), "loss%d", n);
        if (!field(argc, argv, key))
            break;
        sums[n] = strtof(field(argc, argv, key), NULL);
    }
    l.n_losses = n;
    l.loss_names = names;
    l.loss_sums = sums;
    l.advanced_iters = (int64_t)num(argc, argv, "advanced", 1);
    l.skipped_iters = (int64_t)num(argc, argv, "skipped", 0);
    l.nan_iters = (int64_t)num(argc, argv, "nan", 0);
    l.loss_scale = num(argc, argv, "loss_scale", 1.0);
    l.has_grad_norm = field(argc, argv, "grad_norm") != NULL;
    l.grad_norm = num(argc, argv, "grad_norm", 0);
    l.has_num_zeros = field(argc, argv, "num_zeros") != NULL;
    l.num_zeros = num(argc, argv, "num_zeros", 0);
    l.has_params_norm = field(argc, argv, "params_norm") != NULL;
    l.params_norm = num(argc, argv, "params_norm", 0);
    char buf[4096];
    size_t need = mc_log_format_train_line(buf, sizeof(buf), &l);
    if (need >= sizeof(buf))
        return 1;
    printf("%s\n", buf);
    return 0;
}

static int run_valbox(int argc, char **argv)
{
    const char *names[8];
    double vals[8];
    int n = 0;
    for (int k = 1; k < argc && n < 8; k++) {
        char *eq = strrchr(argv[k], '=');
        if (!eq)
            continue;
        *eq = '\0';
        names[n] = argv[k];
        vals[n++] = strtod(eq + 1, NULL);
    }
    char buf[8192];
    mc_log_format_validation(buf, sizeof(buf), argv[0], n, names, vals);
    fputs(buf, stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (!strcmp(argv[1], "sched"))
        return run_sched(argc - 1, argv + 1);
    if (!strcmp(argv[1], "logline"))
        return run_logline(argc - 2, argv + 2);
    if (!strcmp(argv[1], "valbox"))
        return run_valbox(argc - 2, argv + 2);
    if (!strcmp(argv[1], "pyfloat")) {
        for (int k = 2; k < argc; k++) {
            char b[64];
            mc_py_float_repr(b, sizeof(b), strtod(argv[k], NULL));
            printf("%s\n", b);
        }
        return 0;
    }
    return 2;
}
