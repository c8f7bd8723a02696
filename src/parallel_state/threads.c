/* OpenMP threads per rank. torchrun sets OMP_NUM_THREADS=1 for every worker when the user did
 * not; mpirun and srun set nothing, and OpenMP then starts one thread per core in every rank,
 * so N ranks on a node run N x cores threads (a 4-rank run on 2 cores: 8 threads fighting for
 * 2 cores, several times slower than 1 thread each). Without OMP_NUM_THREADS each rank takes
 * its share of the cores it may run on instead: all of its affinity mask when the launcher
 * bound it to a subset of the node (mpirun's default binding, srun --cpu-bind, --map-by
 * slot:PE=N), else the node's cores divided by the ranks on this node, at least one. The
 * choice is logged on every rank, with the cores it may run on; a rank given more threads
 * than it has cores (OMP_NUM_THREADS set too high, or a one-core binding) gets a warning. */
#include "parallel_state/parallel_state.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

/* Ranks on this node, from the first launcher variable that says (1 when none does). Slurm's
 * SLURM_TASKS_PER_NODE reads like "2(x3)": the leading count is this node's when uniform. */
static int local_world_size(void)
{
    static const char *const vars[] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                       "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                                       "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *s = getenv(vars[i]);
        long n = s ? strtol(s, NULL, 10) : 0;
        if (n > 0)
            return (int)n;
    }
    return 1;
}

/* "0-3,6,8-9": the CPUs of set, as ranges. */
static void format_cpus(char *buf, size_t n, const cpu_set_t *set)
{
    size_t len = 0;
    buf[0] = 0;
    for (int c = 0; c < CPU_SETSIZE && len + 24 < n; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        len += (size_t)snprintf(buf + len, n - len, e > c ? "%s%d-%d" : "%s%d", len ? "," : "",
                                c, e);
        c = e;
    }
}

void mc_launch_set_threads(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int mask = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        mask = CPU_COUNT(&set);
    } else { /* no mask to read: every online core */
        for (long c = 0; c < online && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, &set);
        mask = CPU_COUNT(&set);
    }
    if (mask < 1)
        mask = 1;
    char cpus[256];
    format_cpus(cpus, sizeof(cpus), &set);
    int local = local_world_size(), threads;
    const char *env = getenv("OMP_NUM_THREADS");
#if defined(_OPENMP)
    if (env && *env) {
        threads = omp_get_max_threads();
        mc_log(MC_LOG_INFO, "threads: %d OpenMP thread%s (OMP_NUM_THREADS=%s) on cores %s",
               threads, threads == 1 ? "" : "s", env, cpus);
    } else {
        bool bound = online > 0 && mask < online;
        threads = bound ? mask : mask / local;
        if (threads < 1)
            threads = 1;
        omp_set_num_threads(threads);
        mc_log(MC_LOG_INFO, "threads: %d OpenMP thread%s on cores %s (%s; OMP_NUM_THREADS "
               "not set)", threads, threads == 1 ? "" : "s", cpus,
               bound ? "all the cores this rank is bound to"
                     : local > 1 ? "its share of the node's cores among the ranks on this node"
                                 : "every core of the node");
    }
#else
    (void)env;
    (void)local;
    threads = 1;
    mc_log(MC_LOG_INFO, "threads: 1 (built without OpenMP) on cores %s", cpus);
#endif
    if (threads > mask)
        mc_log(MC_LOG_WARN, "%d OpenMP threads but this rank may run on %d core%s only (%s): "
               "the threads take turns; lower OMP_NUM_THREADS or bind the rank to more cores "
               "(mpirun --bind-to none, or --map-by slot:PE=%d)", threads, mask,
               mask == 1 ? "" : "s", cpus, threads);
}
