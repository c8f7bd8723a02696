/* Launchers: where a rank learns its rank, world size and local rank. Megatron reads RANK,
 * WORLD_SIZE and LOCAL_RANK (torchrun sets them; initialize.py / arguments.py). megatron.c
 * ranks are MPI processes started by mpirun, srun, mpiexec (Hydra) or torchrun-style
 * wrappers, so the values come from MPI itself (the world's rank and size, and the rank among
 * the ranks sharing this node for the local rank: comm.c), and the launcher's environment
 * is only a cross-check: a variable that disagrees with MPI is an error naming it.
 *
 * Before MPI is initialised the environment is all there is: mc_launch_env gives the world
 * size that decides whether to start MPI at all (a single process never touches MPI). */
#include "parallel_state/parallel_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct family {
    const char *name;
    const char *var[MC_LAUNCH_NUM_VARS]; /* rank, world size, local rank (NULL: none) */
};

/* torchrun's variables first (what Megatron reads), then the process managers, in the order
 * in which the closest one wins: Open MPI's mpirun, PMI (MPICH / Intel MPI Hydra, srun
 * --mpi=pmi2), MVAPICH2, Slurm's srun, PMIx (srun --mpi=pmix, prterun). */
static const struct family families[] = {
    {"torchrun-style", {"RANK", "WORLD_SIZE", "LOCAL_RANK"}},
    {"Open MPI mpirun", {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK"}},
    {"PMI (Hydra mpiexec, srun --mpi=pmi2)", {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"}},
    {"MVAPICH2", {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"}},
    {"Slurm srun", {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}},
    {"PMIx", {"PMIX_RANK", NULL, NULL}},
};
enum { NUM_FAMILIES = sizeof(families) / sizeof(families[0]) };

static bool present(const struct family *f)
{
    for (int v = 0; v < MC_LAUNCH_NUM_VARS; v++)
        if (f->var[v] && getenv(f->var[v]))
            return true;
    return false;
}

const char *mc_launch_env(enum mc_launch_var v, const char **name)
{
    for (int k = 0; k < NUM_FAMILIES; k++) {
        const char *var = families[k].var[v];
        const char *s = var ? getenv(var) : NULL;
        if (s) {
            if (name)
                *name = var;
            return s;
        }
    }
    if (name)
        *name = NULL;
    return NULL;
}

static const char *const what[MC_LAUNCH_NUM_VARS] = {"rank", "world size", "local rank"};

/* One variable against MPI's value. */
static mc_status check_var(const struct family *f, int v, int mpi_value, int mpi_rank)
{
    const char *s = f->var[v] ? getenv(f->var[v]) : NULL;
    if (!s)
        return MC_OK;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || errno)
        return mc_error(MC_ERR_CONFIG, "rank %d: %s=%s (%s) is not an integer", mpi_rank,
                        f->var[v], s, f->name);
    if (x == mpi_value)
        return MC_OK;
    if (v == MC_LAUNCH_WORLD_SIZE)
        return mc_error(MC_ERR_COMM, "the launcher's world size (%s=%s, %s) differs from "
                        "MPI's (%d): start every rank with the launcher (mpirun -np N, srun "
                        "-n N), or unset the variable for a single process", f->var[v], s,
                        f->name, mpi_value);
    return mc_error(MC_ERR_COMM, "rank %d: the launcher's %s (%s=%s, %s) differs from MPI's "
                    "(%d); megatron.c takes ranks from MPI, so fix or unset %s", mpi_rank,
                    what[v], f->var[v], s, f->name, mpi_value, f->var[v]);
}

mc_status mc_launch_check(const int mpi[MC_LAUNCH_NUM_VARS])
{
    /* torchrun-style variables are always checked (Megatron would use them); of the process
     * managers only the closest: an outer launcher's variables (Slurm's, when mpirun runs
     * inside an allocation) describe its own tasks, not these ranks. */
    bool pm_seen = false;
    for (int k = 0; k < NUM_FAMILIES; k++) {
        const struct family *f = &families[k];
        if (!present(f))
            continue;
        if (k > 0) {
            if (pm_seen)
                continue;
            pm_seen = true;
        }
        for (int v = 0; v < MC_LAUNCH_NUM_VARS; v++) {
            mc_status st = check_var(f, v, mpi[v], mpi[MC_LAUNCH_RANK]);
            if (st)
                return st;
        }
    }
    return MC_OK;
}

mc_status mc_comm_launch_info(void *world_comm, int out[MC_LAUNCH_NUM_VARS])
{
    mc_status st = mc_comm_size_rank(world_comm, &out[MC_LAUNCH_WORLD_SIZE],
                                     &out[MC_LAUNCH_RANK]);
    if (!st)
        st = mc_comm_node_rank(world_comm, &out[MC_LAUNCH_LOCAL_RANK]);
    return st;
}
