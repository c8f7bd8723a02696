/* .idx/.bin (src/datasets/indexed_dataset.c, Megatron's MMapIndexedDataset layout): the input
 * is <prefix>.idx, MC_FUZZ_SEP, <prefix>.bin; mc_ds_open checks the index against the data
 * file, then every sequence is read back through mc_ds_get (each dtype's conversion to int64). */
#include "fuzz_common.h"
#include "megatron/indexed_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[2];
    size_t len[2];
    char path[256];
    size_t n = mc_fuzz_split(data, size, part, len, 2);
    mc_fuzz_write("ds.idx", part[0], len[0], path, sizeof(path));
    if (n > 1)
        mc_fuzz_write("ds.bin", part[1], len[1], path, sizeof(path));
    else
        mc_fuzz_unlink("ds.bin");
    snprintf(path, sizeof(path), "%s/ds", mc_fuzz_dir());
    mc_indexed_dataset *ds;
    if (mc_fuzz_report("mc_ds_open", mc_ds_open(path, &ds)) != MC_OK)
        return 0;
    const int32_t *lens = mc_ds_sequence_lengths(ds);
    const int64_t *docs = mc_ds_document_indices(ds);
    int64_t total = 0;
    for (int64_t i = 0; i <= mc_ds_num_documents(ds); i++)
        mc_fuzz_sink += (unsigned)docs[i];
    for (int64_t i = 0; i < mc_ds_num_sequences(ds) && total < (1 << 20); i++) {
        int64_t *tok = malloc(((size_t)lens[i] + 1) * sizeof(int64_t));
        if (mc_ds_get(ds, i, 0, lens[i], tok) == MC_OK)
            mc_fuzz_touch(tok, (size_t)lens[i] * sizeof(int64_t));
        free(tok);
        total += lens[i];
    }
    mc_ds_close(ds);
    return 0;
}
