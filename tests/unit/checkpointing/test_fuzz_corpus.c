/* Replays fuzz_torch_load's libFuzzer corpus (tests/fuzz/corpus/torch_load/, kept by
 * tests/fuzz/make_corpus.sh) through the torch.load-equivalent reader with the normal build:
 * every file must come back as MC_OK or an error status with a message, never a crash (this
 * also runs under ASan/UBSan), and accepted files are walked, touching every tensor's first and
 * last element. The corpus holds real torch.save files (torch 1.13 and ours) and their
 * mutations, so both outcomes occur. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "fuzz/fuzz_walk.h"
#include "test.h"

/* Views whose extent arithmetic overflows int64 (found by reading rebuild_tensor while
 * fuzzing): (3-1)*2^62 used to wrap negative and pass the bounds check, and a huge shape with
 * zero strides overflowed the element count. Both must now be format errors. */
static void check_forged_views(void)
{
    static float w[4] = {1, 2, 3, 4};
    const int64_t shapes[2][2] = {{3, 1}, {1LL << 40, 1LL << 40}};
    const int64_t strides[2][2] = {{1LL << 62, 1}, {0, 0}};
    char path[64];
    snprintf(path, sizeof(path), "/tmp/mc_test_fuzz_forged.%d.pt", (int)getpid());
    for (int k = 0; k < 2; k++) {
        mc_pk_doc *d;
        CHECK(mc_pk_doc_init(&d) == MC_OK);
        struct mc_pk *root = mc_pk_new(d, MC_PK_DICT);
        struct mc_pk *s = mc_pk_storage(d, MC_DTYPE_F32, 4, w);
        mc_pk_set(d, root, "v", mc_pk_tensor(d, s, 0, 2, shapes[k], strides[k]));
        CHECK(mc_torch_save(d, root, path) == MC_OK);
        mc_pk_doc_free(d);
        mc_clear_error();
        CHECK(mc_fuzz_load_file(path) == MC_ERR_FORMAT);
        CHECK(strstr(mc_last_error(), "tensor size or stride too large") != NULL);
    }
    unlink(path);
}

int main(void)
{
    check_forged_views();
    const char *src = getenv("MC_SOURCE_DIR");
    char dir[4096], path[4400];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/torch_load", src ? src : "..");
    DIR *dp = opendir(dir);
    CHECK(dp != NULL);
    int files = 0, ok = 0, errors = 0;
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        mc_clear_error();
        mc_status st = mc_fuzz_load_file(path);
        files++;
        if (st == MC_OK)
            ok++;
        else {
            errors++;
            CHECK(mc_last_error()[0] != '\0');
        }
    }
    if (dp)
        closedir(dp);
    printf("test_fuzz_corpus: %d files replayed, %d loaded, %d rejected with an error\n", files,
           ok, errors);
    CHECK(files >= 10);
    CHECK(ok > 0 && errors > 0);
    return test_summary("test_fuzz_corpus");
}
