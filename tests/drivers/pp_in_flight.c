/* Prints mc_pp_in_flight for one stage: `pp_in_flight PP RANK VP M GROUP` -> the peak in-flight
 * micro-batches of each model chunk, space-separated (for tests/parallel/test_in_flight_golden.py,
 * which derives them from Megatron's own step order). */
#include "pipeline_parallel/in_flight.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: pp_in_flight PP RANK VP M GROUP\n");
        return 2;
    }
    int pp = atoi(argv[1]), rank = atoi(argv[2]), vp = atoi(argv[3]);
    int64_t m = atoll(argv[4]), group = atoll(argv[5]);
    int64_t per[64];
    if (vp < 1 || vp > 64 || mc_pp_in_flight(pp, rank, vp, m, group, per) != MC_OK) {
        fprintf(stderr, "pp_in_flight: %s\n", vp < 1 || vp > 64 ? "VP outside [1, 64]"
                                                                : mc_last_error());
        return 1;
    }
    for (int c = 0; c < vp; c++)
        printf("%s%lld", c ? " " : "", (long long)per[c]);
    printf("\n");
    return 0;
}
