/* CPU dispatch: picks the ops table once (see backend.c for MC_KERNELS). For now the choice is
 * the references with BLAS GEMM; cpu_features.c will add the AVX-512 table. */
#include "backend/backend_internal.h"

const struct mc_backend_ops *mc_cpu_backend_select(void) { return mc_cpu_backend_ref_blas(); }
