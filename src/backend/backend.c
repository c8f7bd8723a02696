/* Backend registry: chooses the active ops table once, through the CPU dispatch (select.c),
 * which also honours MC_KERNELS=ref (the scalar references, GEMM included) and logs the choice. */
#include "backend/backend_internal.h"
#include "megatron.h"

#include <pthread.h>

static const struct mc_backend_ops *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void choose(void)
{
    active = mc_cpu_backend_select();
    MC_ASSERT(active && active->version == MC_BACKEND_VERSION);
    mc_log(MC_LOG_DEBUG, "backend: %s", active->name);
}

const struct mc_backend_ops *mc_backend(void)
{
    pthread_once(&active_once, choose);
    return active;
}
