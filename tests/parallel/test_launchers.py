"""Launch paths of pretrain_gpt: the rank and world size come from MPI, and each launcher's
variables are only cross-checked. There is no Slurm or Hydra here, so their environments are
simulated under mpirun: each rank is started through `env -u OMPI_COMM_WORLD_*` with the
variables srun (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID), Hydra mpiexec (PMI_RANK /
PMI_SIZE / MPI_LOCALRANKID) or torchrun (RANK / WORLD_SIZE / LOCAL_RANK) would set, per rank
with mpirun's MPMD syntax. Checked: each path trains and prints the same [exact] curves as a
plain mpirun run; a variable that disagrees with MPI (every rank told RANK=0, swapped
SLURM_PROCID, a wrong LOCAL_RANK, SLURM_NTASKS=2 for a single process) is an error naming it,
and the job ends non-zero within seconds; Slurm variables left over from an allocation are
ignored under mpirun (its own variables are the closest launcher's); --dry-run takes
--local-rank's default from SLURM_LOCALID like from LOCAL_RANK."""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import MPIRUN as MPIRUN_BASE, PRETRAIN as EXE, check, run_cmd, summary  # noqa: E402

MPIRUN = [*MPIRUN_BASE, "-x", "OMP_NUM_THREADS=1", "-x", "MC_TEST_LOG_EXACT=1"]
UNSET_OMPI = ["env", "-u", "OMPI_COMM_WORLD_RANK", "-u", "OMPI_COMM_WORLD_SIZE", "-u",
              "OMPI_COMM_WORLD_LOCAL_RANK"]
EXACT = re.compile(r"^\[exact\] iteration .*$", re.M)


def args(tmp):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
            "--global-batch-size", "8", "--train-iters", "4", "--lr", "1e-3",
            "--log-interval", "1", "--mock-data", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
            "--tensor-model-parallel-size", "2"]


def run(cmd, env_extra=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK") and not k.startswith("SLURM_")}
    env.update(OMP_NUM_THREADS="1", MC_TEST_LOG_EXACT="1", **(env_extra or {}))
    t0 = time.time()
    try:
        p = run_cmd(cmd, env, 300)  # generous: a loaded 2-core machine runs MPI jobs slowly
    except subprocess.TimeoutExpired:
        return None, time.time() - t0, "", "timed out"
    if os.environ.get("MC_TEST_VERBOSE"):
        print(f"{time.time() - t0:.1f}s rc {p.returncode}: {' '.join(cmd)[:150]}")
    return p.returncode, time.time() - t0, p.stdout, p.stderr


def mpmd(tmp, per_rank, unset=True):
    """mpirun with one app context per rank; per_rank[r] = that rank's variables."""
    cmd = list(MPIRUN)
    for r, env in enumerate(per_rank):
        if r:
            cmd.append(":")
        cmd += ["-np", "1", *(UNSET_OMPI if unset else ["env"]),
                *[f"{k}={v}" for k, v in env.items()], EXE, *args(tmp)]
    return run(cmd)


def launcher_env(kind, rank, size, local):
    return {"slurm": {"SLURM_PROCID": rank, "SLURM_NTASKS": size, "SLURM_LOCALID": local},
            "hydra": {"PMI_RANK": rank, "PMI_SIZE": size, "MPI_LOCALRANKID": local},
            "torchrun": {"RANK": rank, "WORLD_SIZE": size, "LOCAL_RANK": local}}[kind]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rc, dt, out, err = run([*MPIRUN, "-np", "2", EXE, *args(tmp)])
        ref = EXACT.findall(out)
        check(rc == 0 and len(ref) == 4, f"plain mpirun -np 2 trains (rc {rc}: {err[-400:]})")
        for kind in ("slurm", "hydra", "torchrun"):
            rc, dt, out, err = mpmd(tmp, [launcher_env(kind, r, 2, r) for r in range(2)])
            check(rc == 0 and EXACT.findall(out) == ref,
                  f"{kind} environment: same curves as mpirun (rc {rc}: {err[-400:]})")
            check(out.count("using world size: 2,") == 1, f"{kind}: start-up printed once")
        # disagreements: an error naming the variable, the job down in seconds
        bad = [
            ("every rank told RANK=0", [{"RANK": 0}, {"RANK": 0}], False,
             "rank 1: the launcher's rank (RANK=0, torchrun-style) differs from MPI's (1)"),
            ("swapped SLURM_PROCID", [launcher_env("slurm", 1 - r, 2, 0) for r in range(2)],
             True, "the launcher's rank (SLURM_PROCID="),
            ("wrong LOCAL_RANK", [{"LOCAL_RANK": 5}, {"LOCAL_RANK": 1}], False,
             "rank 0: the launcher's local rank (LOCAL_RANK=5, torchrun-style) differs from "
             "MPI's (0)"),
            ("PMI_SIZE 4 for 2 ranks", [launcher_env("hydra", r, 4, r) for r in range(2)],
             True, "the launcher's world size (PMI_SIZE=4, PMI"),
        ]
        for name, per_rank, unset, msg in bad:
            rc, dt, out, err = mpmd(tmp, per_rank, unset)
            check(rc is not None and rc != 0 and dt < 30 and msg in err,
                  f"{name}: error naming the variable, non-zero exit in seconds "
                  f"(rc {rc}, {dt:.1f}s: {err[-500:]})")
            check("iteration " not in out, f"{name}: no training")
        rc, dt, out, err = run([EXE, *args(tmp)], {"SLURM_NTASKS": "2", "SLURM_PROCID": "0"})
        check(rc == 1 and "the launcher's world size (SLURM_NTASKS=2, Slurm srun) differs from "
              "MPI's (1)" in err, f"SLURM_NTASKS=2 for one process (rc {rc}: {err[-300:]})")
        # mpirun inside a Slurm allocation: the allocation's variables describe other tasks
        rc, dt, out, err = run([*MPIRUN, "-x", "SLURM_PROCID=0", "-x", "SLURM_NTASKS=1", "-x",
                                "SLURM_LOCALID=0", "-np", "2", EXE, *args(tmp)])
        check(rc == 0 and EXACT.findall(out) == ref,
              f"mpirun under stale Slurm variables trains (rc {rc}: {err[-300:]})")
        dry = [EXE, "--dry-run", *args(tmp)[:-2]]  # one process: no tensor parallelism
        rc, dt, out, err = run(dry, {"SLURM_LOCALID": "3"})
        check(rc == 0 and "  local_rank ...................................... 3" in out,
              f"--local-rank default from SLURM_LOCALID (rc {rc}: {err[-300:]})")
    return summary("test_launchers")


if __name__ == "__main__":
    sys.exit(main())
