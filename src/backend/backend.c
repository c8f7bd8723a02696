/* Backend registry: chooses the active ops table once. MC_KERNELS=ref forces the scalar
 * references (GEMM included); otherwise the CPU dispatch picks (dispatch.c). The choice is
 * logged at debug level. */
#include "backend/backend_internal.h"
#include "megatron.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const struct mc_backend_ops *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void choose(void)
{
    const char *env = getenv("MC_KERNELS");
    if (env && strcmp(env, "ref") == 0)
        active = mc_backend_ref();
    else
        active = mc_cpu_backend_select();
    MC_ASSERT(active && active->version == MC_BACKEND_VERSION);
    mc_log(MC_LOG_DEBUG, "backend: %s", active->name);
}

const struct mc_backend_ops *mc_backend(void)
{
    pthread_once(&active_once, choose);
    return active;
}
