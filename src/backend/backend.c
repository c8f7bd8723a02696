/* Backend registry: creates a backend by name and lists the tables that ship. */
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/half_cpu.h"
#include "backend/sim/sim_backend.h"

#include <stdbool.h>
#include <string.h>

mc_status mc_backend_create(const char *name, struct mc_backend **out)
{
    if (!out)
        return mc_error(MC_ERR_CONFIG, "mc_backend_create: no output pointer");
    *out = NULL;
    mc_status st;
    if (!name || !strcmp(name, "cpu"))
        st = mc_cpu_backend_create(mc_cpu_kernels_select(), out);
    else if (!strcmp(name, "cpu-ref"))
        st = mc_cpu_backend_create(mc_cpu_kernels_ref(), out);
    else if (!strcmp(name, "cpu-sim"))
        st = mc_sim_backend_create(out);
    else
        return mc_error(MC_ERR_CONFIG, "unknown backend '%s' (expected cpu, cpu-ref or cpu-sim)",
                        name);
    /* cpu-sim says so in the log (the tests read it); the default stays quiet */
    bool sim = name && !strcmp(name, "cpu-sim");
    if (st == MC_OK)
        mc_cpu_scratch_hold();
    if (st == MC_OK)
        mc_log(sim ? MC_LOG_INFO : MC_LOG_DEBUG, "backend: %s (%s kernels, %d threads)",
               (*out)->ops->name, (*out)->name, (*out)->n_threads);
    return st;
}

void mc_backend_free(struct mc_backend *be)
{
    if (be)
        mc_cpu_scratch_unhold();
    if (be && be->ops == mc_sim_backend_ops())
        mc_sim_backend_destroy(be); /* it owns memory and counters of its own */
    else
        mc_free(be);
}

const struct mc_backend_ops *mc_backend_table(int i)
{
    static const struct mc_backend_ops *(*const tables[])(void) = {mc_cpu_backend_ops,
                                                                   mc_sim_backend_ops};
    return i >= 0 && i < (int)(sizeof tables / sizeof *tables) ? tables[i]() : NULL;
}
