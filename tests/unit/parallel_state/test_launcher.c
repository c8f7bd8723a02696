/* parallel_state/launcher.c and watchdog.c without MPI ranks: which launcher variable
 * mc_launch_env picks, which families mc_launch_check compares with MPI's values and the
 * errors it gives; the watchdog ends a process stuck in one wait longer than the timeout
 * (in a forked child, exit status 1 within a fraction of a second more than the timeout),
 * and stays quiet for short waits. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parallel_state/parallel_state.h"
#include "test.h"

static const char *const all_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID",
    "SLURM_NTASKS", "SLURM_LOCALID", "PMIX_RANK", NULL};

static void clear_env(void)
{
    for (int i = 0; all_vars[i]; i++)
        unsetenv(all_vars[i]);
}

static void test_env_order(void)
{
    clear_env();
    const char *name = "x";
    CHECK(mc_launch_env(MC_LAUNCH_WORLD_SIZE, &name) == NULL && name == NULL);
    setenv("SLURM_NTASKS", "8", 1);
    CHECK(!strcmp(mc_launch_env(MC_LAUNCH_WORLD_SIZE, &name), "8") &&
          !strcmp(name, "SLURM_NTASKS"));
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1); /* mpirun inside an allocation: mpirun's wins */
    CHECK(!strcmp(mc_launch_env(MC_LAUNCH_WORLD_SIZE, &name), "4") &&
          !strcmp(name, "OMPI_COMM_WORLD_SIZE"));
    setenv("WORLD_SIZE", "2", 1); /* torchrun-style first, as Megatron reads it */
    CHECK(!strcmp(mc_launch_env(MC_LAUNCH_WORLD_SIZE, NULL), "2"));
    setenv("SLURM_LOCALID", "3", 1);
    CHECK(!strcmp(mc_launch_env(MC_LAUNCH_LOCAL_RANK, &name), "3") &&
          !strcmp(name, "SLURM_LOCALID"));
    setenv("MPI_LOCALRANKID", "1", 1);
    CHECK(!strcmp(mc_launch_env(MC_LAUNCH_LOCAL_RANK, &name), "1") &&
          !strcmp(name, "MPI_LOCALRANKID"));
    clear_env();
}

static void test_check(void)
{
    int mpi[MC_LAUNCH_NUM_VARS] = {1, 2, 1}; /* rank 1 of 2, local rank 1 */
    clear_env();
    CHECK(mc_launch_check(mpi) == MC_OK);
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_LOCALID", "1", 1);
    CHECK(mc_launch_check(mpi) == MC_OK);
    setenv("SLURM_PROCID", "0", 1);
    CHECK(mc_launch_check(mpi) == MC_ERR_COMM &&
          strstr(mc_last_error(), "rank 1: the launcher's rank (SLURM_PROCID=0, Slurm srun) "
                                  "differs from MPI's (1)"));
    /* under mpirun the (stale) Slurm variables are not the closest launcher's */
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    CHECK(mc_launch_check(mpi) == MC_OK);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    CHECK(mc_launch_check(mpi) == MC_ERR_COMM &&
          strstr(mc_last_error(), "world size (OMPI_COMM_WORLD_SIZE=3, Open MPI mpirun) "
                                  "differs from MPI's (2)"));
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "0", 1); /* torchrun-style variables are always checked */
    CHECK(mc_launch_check(mpi) == MC_ERR_COMM &&
          strstr(mc_last_error(), "local rank (LOCAL_RANK=0, torchrun-style) differs from "
                                  "MPI's (1)"));
    setenv("LOCAL_RANK", "one", 1);
    CHECK(mc_launch_check(mpi) == MC_ERR_CONFIG &&
          strstr(mc_last_error(), "LOCAL_RANK=one (torchrun-style) is not an integer"));
    clear_env();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* In a child: waits `hold` seconds inside one bracketed "MPI call" under a 0.3 s timeout.
 * Returns the child's exit status and the time it took. */
static int run_child(double hold, double *took)
{
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        if (mc_comm_watchdog_start(0, 0.3, "test timeout 0.3 s") != MC_OK)
            _exit(3);
        for (int i = 0; i < 5; i++) { /* short waits never fire */
            mc_comm_wait_begin("short wait");
            usleep(20000);
            mc_comm_wait_end();
        }
        mc_comm_wait_begin("unit-test all-reduce");
        usleep((useconds_t)(hold * 1e6));
        mc_comm_wait_end();
        mc_comm_watchdog_stop();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    *took = now_s() - t0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_watchdog(void)
{
    double took;
    CHECK(run_child(0.05, &took) == 0);  /* the wait ends in time: normal exit */
    int rc = run_child(5.0, &took);      /* stuck: the watchdog ends it after ~0.3 s */
    CHECK(rc == 1);
    CHECK(took > 0.3 && took < 3.0);
    CHECK(mc_comm_watchdog_start(0, 0, "zero") == MC_ERR_CONFIG);
    mc_comm_watchdog_stop(); /* not running: nothing to do */
}

int main(void)
{
    test_env_order();
    test_check();
    test_watchdog();
    return test_summary("test_launcher");
}
