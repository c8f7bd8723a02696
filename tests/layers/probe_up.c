/* An upward arrow on purpose: built into the core layer's check (tests/layers/CMakeLists),
 * this call from core into training (src/training/args.c) must fail to link. Never part of the
 * library. */
#include "training/args.h"

void mc_layer_probe_up(void);
void mc_layer_probe_up(void)
{
    struct mc_args *a;
    if (mc_args_init(&a) == MC_OK)
        mc_args_free(a);
}
