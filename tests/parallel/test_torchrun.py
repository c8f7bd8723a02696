"""build/bin/torchrun, the torchrun-shaped launcher (tools/torchrun). Checked against plain
mpirun (the reference: the same job started by hand):
- a torchrun line (Megatron's DISTRIBUTED_ARGS shape) starts a 4-rank tp2 x dp2 run with the
  same [exact] curve as `mpirun -np 4`, and every rank saw torchrun's variables (RANK,
  LOCAL_RANK, WORLD_SIZE, GROUP_RANK, ...: pretrain_gpt cross-checks them against MPI, so a
  wrong one is an error);
- two launcher invocations (node_rank 0 and 1, --nproc_per_node 2 --nnodes 2) form one 4-rank
  job with the same curve: node 1's launcher runs under `unshare --uts` with a host name of its
  own, as a second machine would have (Open MPI tells nodes apart by host name); a node with
  node 0's host name is refused with a message saying so;
- the threads line: without OMP_NUM_THREADS each of 4 ranks takes cores // 4 threads (at least
  1) and says so; a rank under mpirun's default binding (one core for -np 1) takes that core,
  and OMP_NUM_THREADS above its cores gives a warning;
- bad input: an unknown script, a bad --nproc-per-node, an elastic --nnodes range, a refused
  option (--tee 3), a node rank out of range: argparse-style errors, exit status 2, nothing run."""
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import (BUILD, MPIRUN, PRETRAIN, check, parse_exact, run_cmd,  # noqa: E402
                     summary)

TORCHRUN = os.path.join(BUILD, "bin", "torchrun")
PORT = 29000 + os.getpid() % 3000


def args(tmp):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
            "--global-batch-size", "8", "--train-iters", "3", "--lr", "1e-3",
            "--log-interval", "1", "--eval-iters", "1", "--eval-interval", "3", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--tensor-model-parallel-size", "2"]


def env(omp=None):
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMP_NUM_THREADS")
         and not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    e["MC_TEST_LOG_EXACT"] = "1"
    if omp:
        e["OMP_NUM_THREADS"] = omp
    return e


def run(cmd, omp=None, timeout=150):
    try:
        return run_cmd(cmd, env(omp), timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, None, e.stdout or "", "timed out")


def dist(nproc, nnodes, rank):
    return ["--nproc_per_node", str(nproc), "--nnodes", str(nnodes), "--node_rank", str(rank),
            "--master_addr", "127.0.0.1", "--master_port", str(PORT)]


def two_nodes(tmp, node1_host):
    """node 1's launcher in the background (its own UTS namespace, host name node1_host), node
    0's in the foreground; returns both CompletedProcesses."""
    script = ["pretrain_gpt.py", *args(tmp)]
    inner = " ".join([f"hostname {node1_host};", "exec", TORCHRUN, *dist(2, 2, 1), *script])
    box = {}
    t = threading.Thread(target=lambda: box.setdefault(
        "p", run(["unshare", "--uts", "sh", "-c", inner])))
    t.start()
    p0 = run([TORCHRUN, *dist(2, 2, 0), *script])
    t.join()
    return p0, box["p"]


def threads_lines(err):
    return re.findall(r"(?:\[rank (\d+)\]|megatron\.c) info: threads: (\d+) OpenMP threads? "
                      r"on cores (\S+)", err)


def main():
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        ref = run([*MPIRUN, "-np", "4", "--bind-to", "none", "-x", "OMP_NUM_THREADS=1", "-x",
                   "MC_TEST_LOG_EXACT=1", PRETRAIN, *args(tmp)])
        want = parse_exact(ref.stdout)
        check(ref.returncode == 0 and len(want) == 3,
              f"mpirun -np 4 reference trains (rc {ref.returncode}: {ref.stderr[-400:]})")

        p = run([TORCHRUN, *dist(4, 1, 0), "pretrain_gpt.py", *args(tmp)])
        check(p.returncode == 0 and parse_exact(p.stdout) == want,
              f"torchrun --nproc_per_node 4: tp2 x dp2, same curve as mpirun -np 4 "
              f"(rc {p.returncode}: {p.stderr[-600:]})")
        check("using world size: 4, data-parallel size: 2" in p.stdout, "world 4, dp 2, tp 2")
        lines = threads_lines(p.stderr)
        check(sorted(r for r, _, _ in lines) == ["0", "1", "2", "3"] and
              all(int(n) == max(1, cores // 4) for _, n, _ in lines),
              f"every rank: {max(1, cores // 4)} thread(s), its share of {cores} cores "
              f"({lines})")

        env_dump = run([TORCHRUN, "--nproc-per-node=2", "--rdzv-id=job7", "--no-python",
                        "/usr/bin/env"])
        for var in ("RANK=0", "RANK=1", "LOCAL_RANK=1", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2",
                    "GROUP_RANK=0", "ROLE_RANK=1", "ROLE_NAME=default", "GROUP_WORLD_SIZE=1",
                    "MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500",
                    "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_MAX_RESTARTS=0",
                    "TORCHELASTIC_RUN_ID=job7"):
            check(re.search(f"^{var}$", env_dump.stdout, re.M),
                  f"a rank's environment has {var} (rc {env_dump.returncode})")

        # inside a Slurm allocation: srun. No Slurm here: a stand-in srun records its options
        # and runs the tasks one after another with SLURM_PROCID set, as srun would
        fake = os.path.join(tmp, "fake-bin")
        os.makedirs(fake)
        with open(os.path.join(fake, "srun"), "w") as f:
            f.write('#!/bin/sh\necho "srun $*" > "$SRUN_LOG"\nn=${1#--ntasks=}\n'
                    'shift 4\ni=0\nwhile [ $i -lt $n ]; do SLURM_PROCID=$i "$@" || exit; '
                    'i=$((i + 1)); done\n')
        os.chmod(os.path.join(fake, "srun"), 0o755)
        e = env()
        e.update(PATH=fake + ":" + e["PATH"], SLURM_JOB_ID="42", SRUN_LOG=os.path.join(tmp, "s"))
        p = run_cmd([TORCHRUN, "--nproc-per-node", "2", "--no-python", "/usr/bin/env"], e, 30)
        with open(os.path.join(tmp, "s")) as f:
            srun_line = f.read()
        check(p.returncode == 0 and srun_line.startswith(
            "srun --ntasks=2 --nodes=1 --kill-on-bad-exit=1 --cpu-bind=none sh -c") and
            re.search("^RANK=1$", p.stdout, re.M) and re.search("^LOCAL_RANK=1$", p.stdout, re.M),
            f"in a Slurm allocation the ranks start through srun ({srun_line}, rc {p.returncode})")

        if run(["unshare", "--uts", "true"]).returncode != 0:
            print("SKIP: unshare --uts is not permitted here: no 2-node run")
        else:
            p0, p1 = two_nodes(tmp, "mc-test-node1")
            check(p0.returncode == 0 and p1.returncode == 0 and
                  parse_exact(p0.stdout) == want,
                  f"2 nodes x 2 ranks (two launchers): same curve as mpirun -np 4 "
                  f"(rc {p0.returncode}/{p1.returncode}: {p0.stderr[-600:]} | "
                  f"{p1.stderr[-300:]})")
            check(sorted(r for r, _, _ in threads_lines(p0.stderr)) == ["0", "1", "2", "3"],
                  "2 nodes: all 4 ranks report their threads")
            p0, p1 = two_nodes(tmp, socket.gethostname())
            check(p0.returncode == 1 and "its host name" in p0.stderr and p1.returncode != 0,
                  f"a node with node 0's host name: refused, naming why "
                  f"(rc {p0.returncode}/{p1.returncode}: {p0.stderr[-300:]})")

        # mpirun's default binding: one core for -np 1; the rank takes that one core
        one = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4",
               "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size",
               "1", "--global-batch-size", "1", "--train-iters", "1", "--lr", "1e-3",
               "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "512",
               "--eval-iters", "0", "--data-cache-path", os.path.join(tmp, "cache1")]
        if cores > 1:
            p = run([*MPIRUN, "-np", "1", "--bind-to", "core", PRETRAIN, *one])
            lines = threads_lines(p.stderr)
            check(p.returncode == 0 and len(lines) == 1 and lines[0][1] == "1" and
                  "all the cores this rank is bound to" in p.stderr,
                  f"mpirun -np 1 --bind-to core: 1 thread on its one core ({p.stderr[-300:]})")
            p = run([*MPIRUN, "-np", "1", "--bind-to", "core", "-x", f"OMP_NUM_THREADS={cores}",
                     PRETRAIN, *one], omp=str(cores))
            check(p.returncode == 0 and f"warning: {cores} OpenMP threads but this rank may "
                  "run on 1 core only" in p.stderr,
                  f"OMP_NUM_THREADS={cores} on one core: a warning ({p.stderr[-300:]})")

        bad = [
            (["nosuch.py"], "training script 'nosuch.py' has no megatron.c program"),
            (["--nproc_per_node", "two", "pretrain_gpt.py"],
             "argument --nproc-per-node: invalid int value: 'two'"),
            (["--nproc_per_node", "0", "pretrain_gpt.py"],
             "argument --nproc-per-node: 0 is out of range"),
            (["--nnodes", "1:4", "pretrain_gpt.py"],
             "--nnodes 1:4: elastic node ranges (MIN:MAX)"),
            (["--tee", "3", "pretrain_gpt.py"], "--tee is not supported"),
            (["--nnodes", "2", "--node_rank", "2", "pretrain_gpt.py"],
             "--node-rank 2 is out of range for --nnodes 2"),
            (["--nproc_per_node", "2"], "the following arguments are required: "
                                        "training_script"),
            (["--bogus", "pretrain_gpt.py"], "unrecognized option: --bogus"),
        ]
        for argv, msg in bad:
            p = run([TORCHRUN, *argv], timeout=30)
            check(p.returncode == 2 and f"torchrun: error: {msg}" in p.stderr and
                  not p.stdout, f"{' '.join(argv)}: clear error, exit 2 "
                  f"(rc {p.returncode}: {p.stderr[-300:]})")
        p = run([TORCHRUN, "--help"], timeout=30)
        check(p.returncode == 0 and "--max-restarts" in p.stdout, "torchrun --help")
    return summary("test_torchrun")


if __name__ == "__main__":
    sys.exit(main())
