/* The allowed direction: built into the training layer's check, this call from training down
 * into core (src/core/alloc.c) links. The control for probe_up.c: the same scheme, the arrow
 * reversed. Never part of the library. */
#include "megatron.h"

void mc_layer_probe_down(void);
void mc_layer_probe_down(void)
{
    void *p = mc_alloc(64);
    mc_free(p);
}
