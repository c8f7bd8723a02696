/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c): a private temporary directory for the
 * parsers that take a path, writing the input (or one part of it) there, splitting one input
 * into several files, and a sink that keeps reads of parsed data from being optimized away.
 * Every target is built with ASan + UBSan (tests/fuzz/CMakeLists.txt) and run by
 * tests/fuzz/run_target.sh; an error status from a parser is the expected outcome for most
 * inputs, only a crash, a sanitizer report, a leak or a timeout is a finding. */
#ifndef MC_TESTS_FUZZ_COMMON_H
#define MC_TESTS_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "megatron.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile unsigned mc_fuzz_sink;

/* Parts of a multi-file input are separated by this marker (the last part runs to the end);
 * seeds are written with it by tests/fuzz/make_corpus.sh. */
#define MC_FUZZ_SEP "\n#MCFUZZ#\n"

static char mc_fuzz_dir_path[64];

static void mc_fuzz_cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", mc_fuzz_dir_path);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", mc_fuzz_dir_path);
}

/* /tmp/mc_fuzz.<pid>: created on first use, removed at exit. */
static const char *mc_fuzz_dir(void)
{
    if (!mc_fuzz_dir_path[0]) {
        snprintf(mc_fuzz_dir_path, sizeof(mc_fuzz_dir_path), "/tmp/mc_fuzz.%d", (int)getpid());
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", mc_fuzz_dir_path);
        if (system(cmd) != 0)
            abort();
        atexit(mc_fuzz_cleanup);
    }
    return mc_fuzz_dir_path;
}

/* Writes data[0..size) to <dir>/<name>; the path goes to out[n]. */
static void mc_fuzz_write(const char *name, const void *data, size_t size, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", mc_fuzz_dir(), name);
    FILE *f = fopen(out, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f))
        abort();
}

/* Removes <dir>/<name> (a file the previous input wrote and this one does not). */
static void mc_fuzz_unlink(const char *name)
{
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", mc_fuzz_dir(), name);
    unlink(p);
}

/* Splits the input at MC_FUZZ_SEP into at most n parts; returns how many there are. */
static size_t mc_fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len,
                            size_t n)
{
    const size_t sl = sizeof(MC_FUZZ_SEP) - 1;
    size_t k = 0;
    while (k + 1 < n) {
        const uint8_t *s = memmem(data, size, MC_FUZZ_SEP, sl);
        if (!s)
            break;
        part[k] = data;
        len[k++] = (size_t)(s - data);
        size -= (size_t)(s - data) + sl;
        data = s + sl;
    }
    part[k] = data;
    len[k++] = size;
    return k;
}

/* MC_FUZZ_VERBOSE=1: says whether the parser accepted the input (to check that seeds load). */
static mc_status mc_fuzz_report(const char *what, mc_status st)
{
    if (getenv("MC_FUZZ_VERBOSE"))
        fprintf(stderr, "%s: %s\n", what, st ? mc_last_error() : "accepted");
    return st;
}

static void mc_fuzz_touch(const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        mc_fuzz_sink += s[i];
}

#endif
