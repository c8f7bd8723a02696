/* Dataset-cache .npy files (src/datasets/npy.c: document_index.npy, sample_index.npy,
 * shuffle_index.npy, dataset_index.npy, ...): the input is mapped as numpy.load(mmap_mode='r')
 * does on a cache hit and also read into memory, then every element is read as int64. (The
 * cache's description.txt is written, never parsed: a hit is found by the MD5 in the names.) */
#include "fuzz_common.h"
#include "megatron/gpt_dataset.h"

static void read_all(struct mc_npy *a)
{
    int64_t n = mc_npy_count(a);
    for (int64_t i = 0; i < n && i < (1 << 20); i++)
        mc_fuzz_sink += (unsigned)mc_npy_get(a, i);
    mc_fuzz_touch(a->descr, strlen(a->descr));
    mc_npy_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[256];
    mc_fuzz_write("cache.npy", data, size, path, sizeof(path));
    struct mc_npy a;
    memset(&a, 0, sizeof(a));
    if (mc_fuzz_report("mc_npy_map", mc_npy_map(path, &a)) == MC_OK)
        read_all(&a);
    memset(&a, 0, sizeof(a));
    if (mc_npy_load(path, &a) == MC_OK)
        read_all(&a);
    return 0;
}
