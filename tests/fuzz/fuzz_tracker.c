/* The tracker file latest_checkpointed_iteration.txt (src/checkpointing/checkpoint.c
 * read_tracker): the input is the file, in a --load directory that holds nothing else, read by
 * mc_train_ckpt_load (then mc_ckpt_load) as training does; an accepted iteration then fails on the missing checkpoint. */
#include "fuzz_common.h"
#include "megatron/checkpoint.h"
#include "training/checkpointing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[256];
    mc_fuzz_write("latest_checkpointed_iteration.txt", data, size, path, sizeof(path));
    char *argv[] = {"pretrain_gpt", "--load", (char *)mc_fuzz_dir(), NULL};
    struct mc_args *a;
    if (mc_args_init(&a) != MC_OK || mc_args_parse(a, 3, argv) != MC_OK)
        abort();
    struct mc_ckpt_state s;
    memset(&s, 0, sizeof(s));
    bool loaded = false;
    if (mc_train_ckpt_load(a, &s, NULL, &loaded) == MC_OK && loaded)
        abort(); /* there is no checkpoint to load */
    mc_fuzz_touch(mc_last_error(), strlen(mc_last_error()));
    mc_args_free(a);
    return 0;
}
