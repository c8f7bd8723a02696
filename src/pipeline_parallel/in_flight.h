/* How many micro-batches a pipeline stage has in flight (forward run, backward not yet) per
 * model chunk under Megatron's schedules (core_v0.12.1): the number of activation sets each
 * chunk must keep so that no forward is recomputed. Private header. */
#ifndef MC_PP_IN_FLIGHT_H
#define MC_PP_IN_FLIGHT_H

#include <stdint.h>

#include "megatron.h"

/* Peak in-flight micro-batches of each of the vp model chunks of stage `rank` of pp, for M
 * micro-batches: 1F1B (vp = 1) min(pp - rank, M); interleaved (vp > 1) by walking
 * forward_backward_pipelining_with_interleaving's order (warmup (pp - rank - 1) * 2 +
 * (vp - 1) * group forwards, then one forward and one backward per step, then the backwards;
 * the chunk of virtual micro-batch j from get_schedule_table with `group` =
 * microbatch_group_size_per_vp_stage, 0 = pp; a backward runs the chunks in reverse).
 * Training only (forward-only passes keep nothing). per_chunk has vp entries. */
mc_status mc_pp_in_flight(int pp, int rank, int vp, int64_t num_microbatches, int64_t group,
                          int64_t *per_chunk);

#endif /* MC_PP_IN_FLIGHT_H */
