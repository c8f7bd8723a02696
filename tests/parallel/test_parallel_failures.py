"""Failure handling of pretrain_gpt under mpirun: a rank that fails (forced error in the
middle of a step via MC_TEST_FAIL_RANK / MC_TEST_FAIL_AT_ITER, a missing --data-path on one
rank, a rank that kills itself with SIGKILL mid-step with MC_TEST_FAIL_MODE=sigkill) brings
every rank down within seconds with a non-zero exit and the error printed once; unsupported
parallelism (interleaved pipelining, context parallel) is refused by name; a
WORLD_SIZE that disagrees with MPI's is an error, not a hang."""
import os
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("MC_BUILD_DIR", "build")
EXE = os.path.join(BUILD, "bin", "pretrain_gpt")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "OMP_NUM_THREADS=1"]
LIMIT = 60  # seconds; every failure must end the whole job well within this
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def args(tmp, extra=(), data=("--mock-data",)):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
            "--global-batch-size", "8", "--train-iters", "6", "--lr", "1e-3",
            "--log-interval", "1", *data, "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"), *extra]


def run(cmd, env_extra=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=LIMIT)
    except subprocess.TimeoutExpired as e:
        return None, time.time() - t0, str(e.stdout), str(e.stderr)
    return p.returncode, time.time() - t0, p.stdout, p.stderr


def iterations_printed(out):
    return [l for l in out.splitlines() if l.startswith(" [") and "iteration " in l]


def test_forced_error(tmp, np, rank, it):
    xs = ["-x", f"MC_TEST_FAIL_RANK={rank}", "-x", f"MC_TEST_FAIL_AT_ITER={it}"]
    rc, dt, out, err = run([*MPIRUN, "-np", str(np), *xs, EXE, *args(tmp)])
    name = f"forced error on rank {rank} of {np} at iteration {it}"
    check(rc is not None and rc != 0, f"{name}: non-zero exit, no hang (rc {rc}, {dt:.1f}s)")
    msg = f"pretrain_gpt: rank {rank}: "
    check(err.count(msg) == 1 and f"forced failure on rank {rank} at iteration {it}" in err,
          f"{name}: the error is printed once ({err[-600:]})")
    check(len(iterations_printed(out)) == it - 1, f"{name}: iterations before {it} logged")


def test_missing_data(tmp):
    bad = args(tmp, data=("--data-path", os.path.join(tmp, "no-such-dataset")))
    rc, dt, out, err = run([*MPIRUN, "-np", "1", EXE, *args(tmp), ":", "-np", "1", EXE, *bad])
    check(rc is not None and rc != 0, f"missing data path on rank 1: non-zero exit (rc {rc})")
    check(err.count("pretrain_gpt: rank 1: ") == 1 and "no-such-dataset" in err,
          f"missing data path: rank 1's error names the path, once ({err[-600:]})")
    check("pretrain_gpt: rank 0" not in err, "missing data path: rank 0 reports nothing")


def test_sigkill(tmp):
    xs = ["-x", "MC_TEST_FAIL_RANK=2", "-x", "MC_TEST_FAIL_AT_ITER=3", "-x",
          "MC_TEST_FAIL_MODE=sigkill"]
    rc, dt, out, err = run([*MPIRUN, "-np", "4", *xs, EXE, *args(tmp)])
    check(rc is not None and rc != 0, f"SIGKILL of rank 2 mid-step: job ends non-zero (rc {rc})")
    check(dt < 30, f"SIGKILL: every rank is gone within seconds ({dt:.1f}s)")
    check("signal 9" in err or "Killed" in err, f"SIGKILL: mpirun names the signal ({err[-400:]})")
    check(len(iterations_printed(out)) == 2, "SIGKILL: two iterations logged before it")


def test_refusals(tmp):
    for extra, what in ((["--expert-model-parallel-size", "2"], "--expert-model-parallel-size"),
                        (["--context-parallel-size", "2"], "--context-parallel-size 2")):
        rc, dt, out, err = run([*MPIRUN, "-np", "2", EXE, *args(tmp, extra)])
        check(rc is not None and rc != 0 and what in err and ("not implemented" in err or "not supported" in err),
              f"{what} refused by name (rc {rc}: {err[-500:]})")
    rc, dt, out, err = run([EXE, *args(tmp)], {"WORLD_SIZE": "2", "RANK": "0"})
    check(rc == 1 and "differs from MPI's (1)" in err,
          f"WORLD_SIZE=2 without mpirun is an error (rc {rc}: {err[-300:]})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_forced_error(tmp, 2, 1, 3)
        test_forced_error(tmp, 4, 0, 2)
        test_missing_data(tmp)
        test_sigkill(tmp)
        test_refusals(tmp)
    print(f"test_parallel_failures: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
