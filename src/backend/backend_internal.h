/* Backend registry internals shared by backend.c and the CPU dispatch. */
#ifndef MC_BACKEND_INTERNAL_H
#define MC_BACKEND_INTERNAL_H

#include "backend/backend.h"

/* The CPU table chosen for this machine (dispatch.c). Called once. */
const struct mc_backend_ops *mc_cpu_backend_select(void);
/* The references with GEMM through BLAS (ref_table.c). */
const struct mc_backend_ops *mc_cpu_backend_ref_blas(void);

#endif
