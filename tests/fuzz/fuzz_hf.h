/* Shared by the HF checkpoint targets: a directory laid out as a HuggingFace model and loaded
 * by the converter's hf loader (mc_cv_load_hf, tools/convert_checkpoint --loader hf). */
#ifndef MC_TESTS_FUZZ_HF_H
#define MC_TESTS_FUZZ_HF_H

#include "tools/checkpoint/convert.h"
#include "fuzz_common.h"

/* Copies tests/golden/convert/hf_llama/<name> (a real tiny Llama from transformers) into the
 * fuzzing directory. */
static void mc_fuzz_copy_golden(const char *name)
{
    char src[4096], dst[256];
    if (snprintf(src, sizeof(src), "%s/tests/golden/convert/hf_llama/%s", MC_FUZZ_SOURCE_DIR,
                 name) >= (int)sizeof(src))
        abort();
    FILE *f = fopen(src, "rb");
    if (!f)
        abort();
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof(buf), f);
    if (!feof(f))
        abort(); /* larger than the buffer */
    fclose(f);
    mc_fuzz_write(name, buf, n, dst, sizeof(dst));
}

static void mc_fuzz_load_hf_dir(void)
{
    struct mc_cv_options o = {.load_dir = mc_fuzz_dir(), .true_vocab_size = -1,
                              .make_vocab_size_divisible_by = -1, .hf_params_dtype = MC_DTYPE_F32,
                              .loader_impl = "local", .saver_impl = "local", .checking = true};
    struct mc_cv_model m;
    mc_cv_model_init(&m);
    if (mc_fuzz_report("hf load", mc_cv_load_hf(&m, &o)) == MC_OK)
        for (int64_t i = 0; i < m.n; i++)
            mc_fuzz_sink += m.t[i].data[0];
    else
        mc_fuzz_touch(mc_last_error(), strlen(mc_last_error()));
    mc_cv_model_free(&m);
}

#endif
