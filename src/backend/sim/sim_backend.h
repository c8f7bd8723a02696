/* The "cpu-sim" backend (sim_backend.c): reference kernels on memory of its own, every tensor
 * argument checked to be its memory. Private to src/backend. */
#ifndef MC_SIM_BACKEND_H
#define MC_SIM_BACKEND_H

#include "backend/backend.h"

mc_status mc_sim_backend_create(struct mc_backend **out);
/* Logs its counters (allocations, bytes through each copy op) and frees it. */
void mc_sim_backend_destroy(struct mc_backend *be);
const struct mc_backend_ops *mc_sim_backend_ops(void);

#endif /* MC_SIM_BACKEND_H */
