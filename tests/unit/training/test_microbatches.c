/* Micro-batch calculator (src/training/microbatches.c) against the spec's Megatron fixtures:
 * ramp 8/8/4000 with gbs 32, mbs 2, dp 2 over 24000 samples takes 931 iterations. */
#include <string.h>

#include "test.h"
#include "training/microbatches.h"

int main(void)
{
    struct mc_microbatches m;
    const char *ramp[] = {"8", "8", "4000"};
    CHECK(mc_microbatches_init(&m, ramp, 3, 32, 2, 2, false, NULL) == MC_OK);
    CHECK(m.current == 8 && m.num_micro_batches == 2);
    CHECK(mc_microbatches_train_iters(&m, 24000) == 931);
    CHECK(m.current == 8); /* reset to the start after counting */
    /* per increment 4000/3 samples: 1333 -> still 8, 1334 -> 16 (float division) */
    CHECK(mc_microbatches_update(&m, 1333, true) == MC_OK && m.current == 8);
    CHECK(mc_microbatches_update(&m, 1334, true) == MC_OK && m.current == 16 && m.num_micro_batches == 4);
    CHECK(mc_microbatches_update(&m, 4000, true) == MC_OK && m.current == 32);
    CHECK(mc_microbatches_update(&m, 4001, true) == MC_OK && m.current == 32);

    CHECK(mc_microbatches_init(&m, NULL, 0, 30, 4, 2, false, NULL) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "global batch size (30) is not divisible by micro batch size (4) "
                                  "times data parallel size (2)") != NULL);
    FILE *log = tmpfile();
    CHECK(mc_microbatches_init(&m, NULL, 0, 70, 2, 4, true, log) == MC_OK);
    CHECK(m.running == 64 && m.num_micro_batches == 8);
    rewind(log);
    char line[256] = {0};
    CHECK(fgets(line, sizeof(line), log) != NULL);
    CHECK(!strcmp(line, "INFO:megatron.core.num_microbatches_calculator:decreasing batch size from "
                        "70 to 64 to keep divisibility by micro_batch_size=2 * data_parallel_size=4\n"));
    fclose(log);
    const char *bad_inc[] = {"16", "10", "100"};
    CHECK(mc_microbatches_init(&m, bad_inc, 3, 64, 1, 1, false, NULL) == MC_ERR_CONFIG);
    CHECK(strstr(mc_last_error(), "expected global batch size interval (48) to be divisible by "
                                  "global batch size increment (10)") != NULL);
    const char *too_big[] = {"128", "16", "100"};
    CHECK(mc_microbatches_init(&m, too_big, 3, 64, 1, 1, false, NULL) == MC_ERR_CONFIG);
    const char *two[] = {"16", "16"};
    CHECK(mc_microbatches_init(&m, two, 2, 64, 1, 1, false, NULL) == MC_ERR_CONFIG);
    /* GPT-3 175B: 16 -> 1536 by 16 over 5859375 samples, mbs 1, dp 8 */
    const char *g3[] = {"16", "16", "5859375"};
    CHECK(mc_microbatches_init(&m, g3, 3, 1536, 1, 8, false, NULL) == MC_OK);
    CHECK(m.num_micro_batches == 2);
    CHECK(mc_microbatches_update(&m, 61677, true) == MC_OK && m.current == 16);
    CHECK(mc_microbatches_update(&m, 61678, true) == MC_OK && m.current == 32); /* 5859375/95 = 61677.6 */
    return test_summary("test_microbatches");
}
