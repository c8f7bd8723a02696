/* libFuzzer harness for the checkpoint reader: every input is written to a file and read by
 * mc_torch_load (the torch.load counterpart that mc_ckpt_load calls for model_optim_rng.pt),
 * then the returned tree is walked and each tensor's first and last element is touched, so a
 * view the reader accepted but that reaches past its storage shows up under ASan. Built by
 * tests/fuzz/run.sh with clang -fsanitize=fuzzer,address,undefined; not part of the CMake
 * build. The same walk replays the kept corpus in tests/unit/checkpointing/test_fuzz_corpus.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpointing/torch_pickle.h"
#include "fuzz_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof(path), "/tmp/mc_fuzz_torch_load.%d.pt", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    if (fclose(f))
        abort();
    mc_fuzz_load_file(path);
    return 0;
}
