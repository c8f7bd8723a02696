"""Failure handling of pretrain_gpt under mpirun: a rank that fails (forced error in the
middle of a step via MC_TEST_FAIL_RANK / MC_TEST_FAIL_AT_ITER, a missing --data-path on one
rank, a rank that kills itself with SIGKILL, crashes with SIGSEGV or abort() mid-step with
MC_TEST_FAIL_MODE=sigkill/segv/abort, at 4 and 8 ranks over tp x pp x dp) brings every rank
down within seconds with a non-zero exit and the error printed once; a rank that hangs
(MC_TEST_FAIL_MODE=hang) is caught by the other ranks' collective watchdog once one wait
exceeds the distributed timeout (--distributed-timeout-minutes, replaced by
MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS=5 here), which names the rank and the call and aborts
the job; a short timeout does not fire in a healthy run; unsupported
parallelism (interleaved pipelining, context parallel) is refused by name; a
WORLD_SIZE that disagrees with MPI's is an error, not a hang."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import MPIRUN as MPIRUN_BASE, PRETRAIN as EXE, check, run_cmd, summary  # noqa: E402

MPIRUN = [*MPIRUN_BASE, "-x", "OMP_NUM_THREADS=1"]
LIMIT = 60  # seconds; every failure must end the whole job well within this


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
        p = run_cmd(cmd, env, LIMIT)
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


LAYOUT8 = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
           "--use-distributed-optimizer"]


def fail_env(rank, it, mode=None, timeout=None):
    xs = ["-x", f"MC_TEST_FAIL_RANK={rank}", "-x", f"MC_TEST_FAIL_AT_ITER={it}"]
    if mode:
        xs += ["-x", f"MC_TEST_FAIL_MODE={mode}"]
    if timeout:
        xs += ["-x", f"MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS={timeout}"]
    return xs


def test_forced_error_8(tmp):
    rc, dt, out, err = run([*MPIRUN, "-np", "8", *fail_env(5, 2), EXE, *args(tmp, LAYOUT8)])
    name = "forced error on rank 5 of 8 (tp2 pp2 dp2 distopt) at iteration 2"
    check(rc is not None and rc != 0 and dt < 30, f"{name}: non-zero exit in seconds "
                                                  f"(rc {rc}, {dt:.1f}s)")
    check(err.count("pretrain_gpt: rank ") == 1 and "forced failure on rank 5 at iteration 2"
          in err, f"{name}: the error is printed once ({err[-600:]})")
    check(len(iterations_printed(out)) == 1, f"{name}: iteration 1 logged")


def test_crash(tmp, np, rank, mode, signo, signame, extra=()):
    rc, dt, out, err = run([*MPIRUN, "-np", str(np), *fail_env(rank, 3, mode), EXE,
                            *args(tmp, extra)])
    name = f"{mode} on rank {rank} of {np}"
    check(rc is not None and rc != 0, f"{name}: job ends non-zero (rc {rc})")
    check(dt < 30, f"{name}: every rank is gone within seconds ({dt:.1f}s)")
    notice = f"process rank {rank} with PID"
    check(err.count(notice) == 1 and f"signal {signo} ({signame})" in err,
          f"{name}: mpirun names the rank and the signal once ({err[-500:]})")
    check("pretrain_gpt: rank" not in err, f"{name}: no other rank reports an error")
    check(len(iterations_printed(out)) == 2, f"{name}: two iterations logged before it")


def test_hang(tmp, np, rank, extra, waits):
    timeout = 5
    rc, dt, out, err = run([*MPIRUN, "-np", str(np), *fail_env(rank, 3, "hang", timeout), EXE,
                            *args(tmp, extra)])
    name = f"rank {rank} of {np} hangs at iteration 3"
    check(rc is not None and rc != 0, f"{name}: job ends non-zero (rc {rc}, {dt:.1f}s)")
    check(timeout <= dt < timeout + 25, f"{name}: ended by the watchdog after the timeout "
                                        f"({dt:.1f}s, timeout {timeout}s)")
    lines = [l for l in err.splitlines() if "longer than the distributed timeout "
             f"(MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS={timeout})" in l]
    check(lines and all(f"rank {rank}:" not in l for l in lines),
          f"{name}: waiting ranks (not the hung one) report the timeout ({err[-800:]})")
    check(any(w in l for l in lines for w in waits),
          f"{name}: the message names the call waited on ({waits}: {lines})")
    check(len(iterations_printed(out)) == 2, f"{name}: two iterations logged before it")


def test_timeout_quiet(tmp):
    """A short timeout does not fire when every wait is short."""
    rc, dt, out, err = run([*MPIRUN, "-np", "4", "-x", "MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS=5",
                            EXE, *args(tmp, ["--pipeline-model-parallel-size", "2"])])
    check(rc == 0 and len(iterations_printed(out)) == 6 and "distributed timeout" not in err,
          f"healthy pp2 dp2 run with a 5 s timeout completes (rc {rc}: {err[-400:]})")
    rc, dt, out, err = run([*MPIRUN, "-np", "2", EXE,
                            *args(tmp, ["--distributed-timeout-minutes", "0"])])
    check(rc == 1 and "--distributed-timeout-minutes 0: expected a positive number" in err,
          f"--distributed-timeout-minutes 0 is refused by name (rc {rc}: {err[-300:]})")


def test_refusals(tmp):
    # (with --num-experts: validate_args requires it for expert parallelism, and Megatron's own
    # checks come before megatron.c's refusals)
    for extra, what in ((["--expert-model-parallel-size", "2", "--num-experts", "2"],
                         "--expert-model-parallel-size"),
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
        test_forced_error_8(tmp)
        test_crash(tmp, 8, 6, "segv", 11, "Segmentation fault", LAYOUT8)
        test_crash(tmp, 4, 1, "abort", 6, "Aborted", ["--tensor-model-parallel-size", "2"])
        test_hang(tmp, 4, 1, ["--tensor-model-parallel-size", "2"],
                  ["tensor-parallel all-reduce", "data-parallel loss all-reduce"])
        test_hang(tmp, 8, 2, LAYOUT8, ["pipeline send/recv", "distributed-optimizer",
                                       "all-reduce"])
        test_timeout_quiet(tmp)
        test_refusals(tmp)
    return summary("test_parallel_failures")


if __name__ == "__main__":
    sys.exit(main())
