/* Test-only fault hooks of the failure and weight-hash tests (documented in
 * docs/parallelism.md): nothing happens unless their MC_TEST_* variables are set. */
#include "training/trainer.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* MC_TEST_PERTURB_WEIGHT_RANK=r with MC_TEST_PERTURB_AT_ITER=i (test only, docs/parallelism.md):
 * world rank r adds 1e-3 to the first value of its first parameter once iteration i is done,
 * a silent corruption of one replica for the weight-hash tests to catch (MC_TEST_PERTURB_PARAM:
 * the named parameter of chunk 0 instead, e.g. a q_layernorm weight for --test-mode). */
void mc_train_perturb_for_test(const struct trainer *t, int64_t iteration)
{
    const char *r = getenv("MC_TEST_PERTURB_WEIGHT_RANK"), *it = getenv("MC_TEST_PERTURB_AT_ITER");
    if (!r || !it || atoll(r) != (long long)t->par.ps.rank || atoll(it) != (long long)iteration)
        return;
    const char *name = getenv("MC_TEST_PERTURB_PARAM");
    int64_t i = name ? mc_gpt_param_index(t->m.chunks[0], name) : 0;
    if (i < 0)
        return;
    struct mc_param_view p = mc_gpt_param(t->m.chunks[0], i);
    p.data[0] += 1e-3f;
}

/* Fault injection for the failure tests (documented in docs/parallelism.md): with
 * MC_TEST_FAIL_RANK=r and MC_TEST_FAIL_AT_ITER=i, world rank r fails in the middle of
 * iteration i (after its first micro-batch) with an error, or, by MC_TEST_FAIL_MODE, kills
 * itself (sigkill), crashes (segv: SIGSEGV, abort: abort()) or hangs (hang: sleeps until the
 * other ranks' watchdog ends the job). */
mc_status mc_train_inject_test_failure(const struct trainer *t, int64_t iteration)
{
    const char *r = getenv("MC_TEST_FAIL_RANK"), *it = getenv("MC_TEST_FAIL_AT_ITER");
    if (!r || !it || atoll(r) != (long long)t->par.ps.rank || atoll(it) != (long long)iteration + 1)
        return MC_OK;
    const char *mode = getenv("MC_TEST_FAIL_MODE");
    fflush(stdout);
    if (mode && !strcmp(mode, "sigkill"))
        raise(SIGKILL);
    if (mode && !strcmp(mode, "segv"))
        raise(SIGSEGV);
    if (mode && !strcmp(mode, "abort"))
        abort();
    while (mode && !strcmp(mode, "hang"))
        sleep(1);
    if (mode && strcmp(mode, "error"))
        return mc_error(MC_ERR_CONFIG, "MC_TEST_FAIL_MODE=%s: expected error, sigkill, segv, "
                        "abort or hang", mode);
    return mc_error(MC_ERR_INTERNAL, "forced failure on rank %s at iteration %s "
                    "(MC_TEST_FAIL_RANK / MC_TEST_FAIL_AT_ITER are set)", r, it);
}
