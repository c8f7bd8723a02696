/* Replays the libFuzzer corpus (tests/fuzz/corpus/, kept by tests/fuzz/run.sh) through the
 * torch.load-equivalent reader with the normal build: every file must come back as MC_OK or
 * an error status with a message, never a crash (this also runs under ASan/UBSan), and
 * accepted files are walked, touching every tensor's first and last element. The corpus holds
 * real torch.save files (torch 1.13 and ours) and their mutations, so both outcomes occur. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_walk.h"
#include "test.h"

int main(void)
{
    const char *src = getenv("MC_SOURCE_DIR");
    char dir[4096], path[4400];
    snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus", src ? src : "..");
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
