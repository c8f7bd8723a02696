/* pretrain_gpt: Megatron-LM's pretrain_gpt.py (core_v0.12.1). Parses and validates the
 * arguments exactly as Megatron does, refuses the options megatron.c does not implement (all of
 * them, printed once by rank 0; the same list --dry-run reports, training/refusals.h), then
 * trains (src/training/training.c). With --dry-run it prints the start-up report instead
 * (layout, arguments dump, micro-batches, vocab padding, initialization lines), the theoretical
 * memory per rank and the FLOPs per iteration, without MPI.
 *
 * Exit statuses follow Megatron: 2 for command-line errors, 1 for failed checks, 0 otherwise.
 *
 * Under a launcher that starts several processes (mpirun, srun, mpiexec: its world-size
 * variable > 1, see parallel_state/launcher.c) MPI is initialised right after parsing, and
 * the rank and world size are MPI's (the launcher's variables are cross-checked); a rank that
 * fails prints its error and brings every rank down with MPI_Abort (exit status 1, or 2 for a
 * command-line error), so a failure never leaves the other ranks waiting in a collective. A
 * single process, and --dry-run, never touch MPI. Without OMP_NUM_THREADS each rank runs its
 * share of its cores (parallel_state/threads.c); build/bin/torchrun starts ranks from a
 * torchrun command line (tools/torchrun). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_state/parallel_state.h"
#include "training/args.h"
#include "training/dry_run.h"
#include "training/refusals.h"
#include "training/training.h"
#include "training/validate.h"
#include "training/yaml_cfg.h"

/* argparse's prog is the script's basename; users' log tooling expects "pretrain_gpt.py". */
static void prog_name(char *buf, size_t n, const char *argv0)
{
    const char *s = strrchr(argv0, '/');
    s = s ? s + 1 : argv0;
    size_t len = strlen(s);
    snprintf(buf, n, "%s%s", s, len > 3 && !strcmp(s + len - 3, ".py") ? "" : ".py");
}

/* Python prints "Kind: message", or just "Kind" for a bare assertion. */
static void print_failure(const struct mc_args *a, const char *prog)
{
    if (!a->err_kind) {
        mc_args_print_usage(stderr, prog);
        /* The hint before argparse's own line, which stays the last one, as in Megatron. */
        for (const char *h = a->hint; *h;) {
            size_t n = strcspn(h, "\n");
            fprintf(stderr, "%s: hint: %.*s\n", prog, (int)n, h);
            h += n + (h[n] == '\n');
        }
        fprintf(stderr, "%s: error: %s\n", prog, a->err);
    } else if (a->err[0]) {
        fprintf(stderr, "%s: %s\n", a->err_kind, a->err);
    } else {
        fprintf(stderr, "%s\n", a->err_kind);
    }
}

/* No option at all (--dry-run aside): Megatron would stop on a bare AssertionError about the
 * micro-batch size; name what a run needs instead, in argparse's words for required options. */
static bool nothing_given(const struct mc_args *a)
{
    for (int id = 0; id < MC_A_COUNT; id++)
        if (a->given[id] && id != MC_A_dry_run)
            return false;
    return true;
}

static void print_required(const char *prog)
{
    mc_args_print_usage(stderr, prog);
    fprintf(stderr, "%s: error: the following arguments are required: --num-layers, --hidden-size, "
            "--num-attention-heads, --max-position-embeddings, --seq-length, --micro-batch-size, "
            "--train-iters (or --train-samples); %s --help describes every option\n", prog, prog);
}

/* MPI when the launcher started several processes (mpi[] gets MPI's rank, world size and
 * local rank, the launcher's variables cross-checked against them). */
static mc_status start_mpi(struct mc_args *a, int *argc, char ***argv, void **world,
                           int mpi[MC_LAUNCH_NUM_VARS])
{
    mc_status st = mc_comm_init(argc, argv, mc_args_int(a, MC_A_world_size), world);
    return st ? st : mc_comm_launch_info(*world, mpi);
}

/* The rank and world size are MPI's, whatever the environment said. */
static void adopt_mpi(struct mc_args *a, const int mpi[MC_LAUNCH_NUM_VARS])
{
    mc_args_set_int(a, MC_A_rank, mpi[MC_LAUNCH_RANK]);
    mc_args_set_int(a, MC_A_world_size, mpi[MC_LAUNCH_WORLD_SIZE]);
}

int main(int argc, char **argv)
{
    double t0 = mc_time_now(); /* Megatron's _TRAIN_START_TIME */
    char prog[256];
    prog_name(prog, sizeof(prog), argv[0]);
    static const char *const defaults[] = {"tokenizer_type", "GPT2BPETokenizer", NULL};
    struct mc_args *a = NULL;
    void *world = NULL;
    int rc = 1, mpi[MC_LAUNCH_NUM_VARS];
    bool all_stop = false; /* every rank fails the same way: finalize instead of aborting */
    if (mc_args_init(&a) != MC_OK) {
        fprintf(stderr, "pretrain_gpt: %s\n", mc_last_error());
        return 1;
    }
    if (mc_args_parse(a, argc, argv) != MC_OK) {
        print_failure(a, prog);
        rc = a->exit_code;
        goto out;
    }
    if (a->help) {
        mc_args_print_help(stdout, prog);
        rc = 0;
        goto out;
    }
    if (nothing_given(a)) {
        print_required(prog);
        rc = 2;
        goto out;
    }
    if (!mc_args_bool(a, MC_A_dry_run) && start_mpi(a, &argc, &argv, &world, mpi) != MC_OK) {
        fprintf(stderr, "pretrain_gpt: %s\n", mc_last_error());
        rc = 1;
        goto out;
    }
    if (world)
        adopt_mpi(a, mpi);
    if (mc_yaml_cfg_apply(&a, stdout) != MC_OK) { /* --yaml-cfg replaces the namespace */
        fflush(stdout);
        print_failure(a, prog);
        rc = a->exit_code ? a->exit_code : 1;
        goto out;
    }
    if (world)
        adopt_mpi(a, mpi);
    bool rank0 = mc_args_int(a, MC_A_rank) == 0;
    if (rank0 && a->notes[0])
        fputs(a->notes, stdout);
    bool dry = mc_args_bool(a, MC_A_dry_run);
    if (mc_args_validate(a, defaults, rank0 ? stdout : NULL, stderr) != MC_OK) {
        fflush(stdout);
        if (a->exit_code && rank0)
            print_failure(a, prog);
        rc = a->exit_code;
        /* The same arguments fail the same way on every rank: rank 0's line once, then all
         * ranks stop together. */
        if (world && mc_comm_barrier(world) == MC_OK)
            all_stop = true;
        goto out;
    }
    /* Megatron's own checks first (above), then what this build refuses: the same list for
     * the dry run and the real run, printed whole, once, by rank 0. */
    static struct mc_refusals refused;
    mc_args_refusals(a, &refused);
    if (dry) {
        rc = mc_dry_run_report(a, rank0 ? stdout : NULL, t0) == MC_OK ? 0 : 1;
        fflush(stdout);
        if (rc)
            print_failure(a, prog);
        else if (refused.n && rank0)
            mc_refusals_print(stderr, &refused);
        if (refused.n)
            rc = 1;
        goto out;
    }
    if (refused.n) {
        fflush(stdout);
        if (rank0)
            mc_refusals_print(stderr, &refused);
        fflush(stderr);
        /* Every rank found the same list: no rank waits on another, so all of them stop
         * together after rank 0's lines, with no MPI_Abort. */
        if (world && mc_comm_barrier(world) == MC_OK)
            all_stop = true;
        rc = 1;
        goto out;
    }
    if (world) { /* whole lines, so the ranks' output does not interleave mid-line */
        setvbuf(stdout, NULL, _IOLBF, 0);
        mc_log_set_rank((int)mc_args_int(a, MC_A_rank));
    }
    mc_launch_set_threads(); /* every rank says how many threads on which cores */
    if (world && !rank0) /* info once, from rank 0 (Megatron's log_single_rank); warnings from all */
        mc_log_set_level(MC_LOG_WARN);
    if (mc_pretrain_gpt(a, t0) != MC_OK) {
        fflush(stdout);
        if (world)
            fprintf(stderr, "pretrain_gpt: rank %lld: %s\n",
                    (long long)mc_args_int(a, MC_A_rank), mc_last_error());
        else
            fprintf(stderr, "pretrain_gpt: %s\n", mc_last_error());
        rc = 1;
        goto out;
    }
    rc = 0;
out:
    fflush(stdout);
    if (rc && !all_stop) { /* the other ranks may be waiting for this one: bring them down too */
        fflush(stderr);
        mc_comm_abort(rc);
    }
    mc_comm_finalize();
    mc_args_free(a);
    return rc;
}
