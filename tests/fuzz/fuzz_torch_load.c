/* torch.save files (src/checkpointing/torch_zip.c, torch_pickle.c, torch_serialization.c): the
 * input is read by mc_torch_load (the torch.load counterpart that mc_ckpt_load calls for
 * model_optim_rng.pt), then the returned tree is walked and each tensor's first and last
 * element is touched, so a view the reader accepted but that reaches past its storage shows up
 * under ASan. The same walk replays this target's corpus in the normal build
 * (tests/unit/checkpointing/test_fuzz_corpus.c). */
#include "fuzz_common.h"
#include "fuzz_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[256];
    mc_fuzz_write("model_optim_rng.pt", data, size, path, sizeof(path));
    mc_fuzz_load_file(path);
    return 0;
}
