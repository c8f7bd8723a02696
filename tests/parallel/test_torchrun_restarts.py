"""torchrun --max-restarts (torchrun's elastic semantics): a 2-rank run of a tiny model that
saves every 2 iterations is killed twice (kill -9 of one rank, chosen at random, at a random
iteration); each time mpirun stops the other rank, the launcher restarts the whole group, and
the run resumes from its last checkpoint (--load). The reference is a straight run of the same
job under plain mpirun: every [exact] line the restarted run prints (including the iterations
it redoes after a resume) must be bit-identical to the straight run's line for that iteration,
and the run must reach the last iteration, exit 0, and say it restarted twice.

Without restarts (--max-restarts 0) the first kill ends the run with a non-zero status."""
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, MPIRUN, PRETRAIN, check, parse_exact, run_cmd, summary  # noqa: E402

TORCHRUN = os.path.join(BUILD, "bin", "torchrun")
ITERS = 14


def args(tmp, ckpt):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
            "--global-batch-size", "4", "--train-iters", str(ITERS), "--lr", "1e-3",
            "--log-interval", "1", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--save", ckpt, "--load", ckpt,
            "--save-interval", "2", "--ckpt-format", "torch"]


def env():
    e = {k: v for k, v in os.environ.items()
         if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK") and not k.startswith("OMPI_")}
    e.update(MC_TEST_LOG_EXACT="1", OMP_NUM_THREADS="1")
    return e


def ranks_of(ckpt):
    """pids of the pretrain_gpt ranks whose command line names this checkpoint directory."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"pretrain_gpt") and ckpt.encode() in argv:
            pids.append(int(d))
    return pids


def killed_run(tmp, ckpt, restarts, kills, rng):
    """The launcher with --max-restarts restarts; kills one rank at a random iteration of each
    of the first `kills` attempts. Returns (rc, stdout, stderr, [(attempt, iteration)])."""
    out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
    with open(out_path, "w") as out, open(err_path, "w") as err:
        p = subprocess.Popen([TORCHRUN, "--nproc-per-node", "2", "--max-restarts",
                              str(restarts), "pretrain_gpt.py", *args(tmp, ckpt)],
                             stdout=out, stderr=err, env=env())
        done, target, seen = [], None, 0
        deadline = time.time() + 150
        while p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
            if len(done) >= kills:
                continue
            with open(out_path) as f:
                its = [int(m[0]) for m in parse_exact(f.read())]
            if len(its) <= seen:
                continue
            if target is None:  # a random iteration a little past where this attempt began
                target = rng.randint(its[seen] + 1, min(its[seen] + 4, ITERS - 2))
            if its[-1] >= target:
                pids = ranks_of(ckpt)
                if pids:
                    victim = rng.choice(pids)
                    os.kill(victim, signal.SIGKILL)
                    done.append((len(done), its[-1]))
                    while p.poll() is None and ranks_of(ckpt):  # the group is stopped
                        time.sleep(0.05)
                    with open(out_path) as f:
                        seen = len(parse_exact(f.read()))
                    target = None
        if p.poll() is None:
            p.kill()
        rc = p.wait()
    with open(out_path) as f, open(err_path) as g:
        return rc, f.read(), g.read(), done


def main():
    rng = random.Random(os.environ.get("MC_TEST_SEED") or time.time_ns())
    with tempfile.TemporaryDirectory() as tmp:
        ref = run_cmd([*MPIRUN, "-np", "2", "-x", "OMP_NUM_THREADS=1", "-x",
                       "MC_TEST_LOG_EXACT=1", PRETRAIN,
                       *args(tmp, os.path.join(tmp, "straight"))], env(), 120)
        straight = {m[0]: m for m in parse_exact(ref.stdout)}
        check(ref.returncode == 0 and len(straight) == ITERS,
              f"straight run (rc {ref.returncode}: {ref.stderr[-300:]})")

        rc, out, err, kills = killed_run(tmp, os.path.join(tmp, "restarted"), 3, 2, rng)
        got = parse_exact(out)
        print(f"killed at (attempt, iteration) {kills}; {len(got)} iteration lines")
        check(len(kills) == 2, f"two ranks killed ({kills})")
        check(rc == 0, f"restarted run exits 0 (rc {rc}: {err[-500:]})")
        check(err.count("worker group failed") == 2 and "restarting all 2 ranks" in err,
              "the launcher says it restarted twice")
        check(len(re.findall(r"loading checkpoint from .* at iteration", out)) >= 1 or
              "successfully loaded checkpoint" in out,
              "a restart resumed from a checkpoint")
        check(got and got[-1][0] == str(ITERS), f"reaches iteration {ITERS}")
        bad = [g for g in got if straight.get(g[0]) != g]
        check(not bad and {int(g[0]) for g in got} == set(range(1, ITERS + 1)),
              f"every iteration line (redone ones too) bit-identical to the straight run's "
              f"({len(bad)} differ: {bad[:2]})")

        rc, out, err, kills = killed_run(tmp, os.path.join(tmp, "norestart"), 0, 1, rng)
        check(rc not in (0, None) and "no restarts left" in err and kills,
              f"--max-restarts 0: the first kill ends the run (rc {rc})")
    return summary("test_torchrun_restarts")


if __name__ == "__main__":
    sys.exit(main())
