"""--async-save (issue 13): torch_dist saves written by a background thread, finalized at iteration
starts, as Megatron-LM core_v0.12.1 does (megatron/training/checkpointing.py save_checkpoint with
args.async_save, megatron/training/async_utils.py, core/dist_checkpointing/strategies/
async_utils.py):
- an async run's checkpoints equal a synchronous run's byte for byte (every .distcp, .metadata,
  metadata.json and the tracker; common.pt equal once loaded, but for args.async_save itself), one
  process and two data-parallel ranks (with a slowed writer, so that saves are finalized
  iterations later and overlap), and the training losses are the same bits;
- the log lines are Megatron's: its format strings (read from Megatron's source when
  MC_MEGATRON_ROOT is set, else their copies below) filled in, in Megatron's order;
- kill -9 at random moments of an asynchronous save never damages the previous checkpoint: the
  tracker names a complete checkpoint, its files are untouched, and resuming from it gives the
  uninterrupted run's losses bit for bit;
- a writer that fails on one rank of two ends both ranks with the error named, no hang, the last
  good checkpoint untouched and no iteration directory left behind;
- --async-save with --ckpt-format torch is refused with Megatron's NotImplementedError text."""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import PRETRAIN, check, file_hashes, parse_exact, run_pretrain, summary  # noqa: E402

TRACKER = "latest_checkpointed_iteration.txt"
MEGATRON = os.environ.get("MC_MEGATRON_ROOT", "/work/ref/Megatron-LM")

# Megatron's lines (checkpointing.py, async_utils.py), used when its source is not at hand
FORMATS = {
    "saving": "saving checkpoint at iteration {:7d} to {} in {} format",
    "scheduled": "  scheduled an async checkpoint save at iteration {:7d} to {}",
    "success": "  successfully saved checkpoint from iteration {:7d} to {} [ t {}/{}, p {}/{} ]",
    "unfinalized": "Unfinalized async checkpoint saves. Finalizing them synchronously now.",
    "overlap": "WARNING: Starting a checkpoint save before previous has finished. Consider "
               "increasing the checkpoint interval.",
    "legacy": "Async checkpoint save not implemented for legacy checkpoints",
}


def megatron_formats():
    """FORMATS, checked against Megatron's source when it is there (the f-string of the success
    line rewritten as the str.format it is equivalent to)."""
    ck = os.path.join(MEGATRON, "megatron", "training", "checkpointing.py")
    au = os.path.join(MEGATRON, "megatron", "training", "async_utils.py")
    if not os.path.exists(ck):
        print("Megatron's source not found: its log formats as copied here")
        return FORMATS
    src = open(ck).read() + open(au).read()
    for key, needle in (("saving", "'saving checkpoint at iteration {:7d} to {} in {} format'"),
                        ("scheduled", "'  scheduled an async checkpoint save at iteration {:7d} to {}'"),
                        ("unfinalized", "'Unfinalized async checkpoint saves. Finalizing them synchronously now.'"),
                        ("overlap", "'WARNING: Starting a checkpoint save before previous has finished. "
                                    "Consider increasing the checkpoint interval.'"),
                        ("legacy", "'Async checkpoint save not implemented for legacy checkpoints'"),
                        ("success", "f'  successfully saved checkpoint from iteration {int(iteration):7d} to {args.save} '")):
        check(needle in src, f"Megatron's source has the {key} line {needle}")
    return FORMATS


def base(tmp, iters, save, extra=()):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2",
            "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
            "--global-batch-size", "4", "--train-iters", str(iters), "--lr", "1e-3",
            "--lr-decay-iters", "8", "--log-interval", "1", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--ckpt-format", "torch_dist",
            "--transformer-impl", "local", "--eval-iters", "0",
            *(("--save", save, "--save-interval", "2") if save else ()),
            "--override-opt_param-scheduler", *extra]




def common_equal(a, b):
    """common.pt of a and b equal, args.async_save aside."""
    import torch
    import torch_stubs
    torch_stubs.install()
    x, y = torch.load(a, weights_only=False), torch.load(b, weights_only=False)
    xa, ya = vars(x.pop("args")), vars(y.pop("args"))
    xa.pop("async_save"), ya.pop("async_save")
    return xa == ya and repr(x) == repr(y)


def same_checkpoints(name, sync_dir, async_dir):
    s, a = file_hashes(sync_dir), file_hashes(async_dir)
    check(sorted(s) == sorted(a), f"{name}: the same files: {sorted(set(s) ^ set(a))}")
    diff = [k for k in s if k in a and s[k] != a[k] and not k.endswith("common.pt")]
    check(not diff, f"{name}: byte-identical files, except {diff}")
    commons = [k for k in s if k.endswith("common.pt")]
    check(commons and all(common_equal(os.path.join(sync_dir, k), os.path.join(async_dir, k))
                          for k in commons), f"{name}: common.pt equal but for args.async_save")
    print(f"{name}: {len(s)} files, all equal")


def check_log(name, out, save, iters, tp_pp=(1, 1, 1, 1)):
    """Megatron's save lines in its order: every save's 'saving' then 'scheduled' lines, its
    'successfully saved' line later, the saves finalized in order, and the blocking finalize's
    line before the last ones when saves were pending at the end."""
    f = FORMATS
    # rank 0's save lines (other ranks' lines may come between them under mpirun)
    keep = ("saving checkpoint", "  scheduled an async", "  successfully saved", "WARNING: Starting",
            "Unfinalized async", "Storing distributed")
    lines = [line for line in out.splitlines() if line.startswith(keep)]
    pos = {}
    for it in iters:
        sv = f["saving"].format(it, save, "torch_dist")
        sc = f["scheduled"].format(it, save)
        su = f["success"].format(it, save, *tp_pp)
        ok = sv in lines and lines.index(sv) + 1 < len(lines) and lines[lines.index(sv) + 1] == sc
        check(ok, f"{name}: iteration {it}: '{sv}' then '{sc}'")
        check(lines.count(su) == 1 and sc in lines and lines.index(su) > lines.index(sc),
              f"{name}: iteration {it}: '{su}' once, after its scheduling")
        pos[it] = lines.index(su) if su in lines else -1
    check([pos[i] for i in iters] == sorted(pos[i] for i in iters), f"{name}: finalized in order")
    # the last save, at the last iteration, is pending at the end: the blocking call finalizes it
    check(f["unfinalized"] in lines and lines.index(f["unfinalized"]) < pos[iters[-1]],
          f"{name}: '{f['unfinalized']}' before the last save's line")
    sched = {j: lines.index(f["scheduled"].format(j, save)) if f["scheduled"].format(j, save) in lines
             else len(lines) for j in iters}
    for i, line in enumerate(lines):
        if line.startswith("saving checkpoint at iteration"):
            # a save while an earlier one is pending is announced with Megatron's warning
            pending = any(sched[j] < i < pos[j] for j in iters)
            check((lines[i - 1] == f["overlap"]) == pending,
                  f"{name}: the overlap warning before '{line}' exactly when a save is pending")


megatron_formats()
env = {"OMP_NUM_THREADS": "1"}
with tempfile.TemporaryDirectory() as tmp:
    # ---- one process: async == sync, byte for byte; Megatron's lines ----
    ck = os.path.join(tmp, "ck")
    r = run_pretrain(base(tmp, 6, ck), env=env)
    check(r.returncode == 0, f"sync run: {r.stderr[-400:]}")
    ref = parse_exact(r.stdout)
    shutil.move(ck, ck + "_sync")
    r = run_pretrain(base(tmp, 6, ck, ["--async-save"]), env=env)
    check(r.returncode == 0, f"async run: {r.stderr[-400:]}")
    check(parse_exact(r.stdout) == ref and len(ref) == 6, "async run: the same losses, bit for bit")
    check_log("async, 1 process", r.stdout, ck, [2, 4, 6])
    same_checkpoints("async, 1 process", ck + "_sync", ck)
    shutil.rmtree(ck + "_sync")
    # --use-persistent-ckpt-worker: the same saves (a thread either way)
    shutil.rmtree(ck)
    r = run_pretrain(base(tmp, 2, ck, ["--async-save", "--use-persistent-ckpt-worker"]), env=env)
    check(r.returncode == 0 and open(os.path.join(ck, TRACKER)).read() == "2",
          f"--use-persistent-ckpt-worker: {r.stderr[-300:]}")
    shutil.rmtree(ck)

    # ---- two data-parallel ranks, a slowed writer: saves finalized later, overlapping ----
    dp2 = os.path.join(tmp, "dp2")
    r = run_pretrain(base(tmp, 6, dp2), np=2, env=env)
    check(r.returncode == 0, f"dp2 sync: {r.stderr[-400:]}")
    ref2 = parse_exact(r.stdout)
    shutil.move(dp2, dp2 + "_sync")
    r = run_pretrain(base(tmp, 6, dp2, ["--async-save"]), np=2, env=dict(env, MC_TEST_SLOW_WRITE="40"),
                     timeout=300)
    check(r.returncode == 0, f"dp2 async: {r.stderr[-400:]}")
    check(parse_exact(r.stdout) == ref2 and len(ref2) == 6, "dp2 async: the same losses, bit for bit")
    check(FORMATS["overlap"] in r.stdout, "dp2 async with a slow writer: saves overlapped")
    check_log("async, dp2", r.stdout, dp2, [2, 4, 6])
    same_checkpoints("async, dp2", dp2 + "_sync", dp2)
    shutil.rmtree(dp2 + "_sync")
    shutil.rmtree(dp2)

    # ---- kill -9 in the middle of asynchronous saves ----
    ref8 = None
    r = run_pretrain(base(tmp, 8, os.path.join(tmp, "ref8")), env=env)
    check(r.returncode == 0, f"reference run: {r.stderr[-300:]}")
    ref8 = parse_exact(r.stdout)
    seed = int(os.environ.get("MC_TEST_SEED", time.time()))
    rng = random.Random(seed)
    print(f"kill -9 moments drawn with seed {seed} (MC_TEST_SEED)")
    for trial in range(3):
        # the good checkpoint: iteration 2 saved synchronously, or iteration 4 asynchronously
        kd = os.path.join(tmp, f"kill{trial}")
        first = 2 if trial == 0 else 4
        r = run_pretrain(base(tmp, first, kd, [] if trial == 0 else ["--async-save"]), env=env)
        check(r.returncode == 0, f"kill {trial}: first save: {r.stderr[-300:]}")
        good_dir = os.path.join(kd, "iter_%07d" % first)
        good = file_hashes(good_dir)
        log = os.path.join(tmp, f"kill{trial}.log")
        full = dict(os.environ, OMP_NUM_THREADS="1", MC_TEST_LOG_EXACT="1", MC_TEST_SLOW_WRITE="15")
        with open(log, "w") as out:
            p = subprocess.Popen([PRETRAIN, *base(tmp, 8, kd, ["--async-save", "--load", kd])],
                                 stdout=out, stderr=subprocess.STDOUT, env=full)
            deadline = time.time() + 120
            while "scheduled an async checkpoint save at iteration %7d" % (first + 2) not in open(log).read():
                check(p.poll() is None and time.time() < deadline, f"kill {trial}: the save starts")
                if p.poll() is not None or time.time() > deadline:
                    break
                time.sleep(0.02)
            delay = rng.uniform(0.0, 1.5)  # the saves take about 1.5 s here
            time.sleep(delay)
            p.send_signal(signal.SIGKILL)
            p.wait()
        entries = sorted(os.listdir(kd))
        it = int(open(os.path.join(kd, TRACKER)).read())
        print(f"kill {trial}: killed {delay:.2f} s into the save: tracker {it}, {entries}")
        check(it in (first, first + 2, first + 4, 8) and it <= 8,
              f"kill {trial}: the tracker names a saved iteration: {it}")
        check(os.path.exists(os.path.join(kd, "iter_%07d" % it, "metadata.json")),
              f"kill {trial}: the tracker's checkpoint is complete")
        check(file_hashes(good_dir) == good,
              f"kill {trial}: the previous checkpoint's files are untouched")
        r = run_pretrain(base(tmp, 8, kd, ["--load", kd]), env=env)
        check(r.returncode == 0, f"kill {trial}: resume from iteration {it}: {r.stderr[-300:]}")
        check(parse_exact(r.stdout) == ref8[it:], f"kill {trial}: resumed at {it}, the uninterrupted losses "
              f"bit for bit")
        shutil.rmtree(kd)

    # ---- a writer failing on one rank of two ----
    fd = os.path.join(tmp, "fail")
    r = run_pretrain(base(tmp, 2, fd), np=2, env=env)
    check(r.returncode == 0, f"failure case: first save: {r.stderr[-300:]}")
    good = file_hashes(os.path.join(fd, "iter_0000002"))
    t0 = time.time()
    try:
        # the other rank's writer is slowed so that the save at 6 is always queued behind the
        # failed one at 4 (found at the last finalize): its iter_0000006.tmp must go too
        r = run_pretrain(base(tmp, 6, fd, ["--async-save", "--load", fd]), np=2,
                         env=dict(env, MC_TEST_FAIL_WRITE_RANK="1", MC_TEST_SLOW_WRITE="150"),
                         timeout=120)
        hung = False
    except subprocess.TimeoutExpired:
        hung = True
    check(not hung, "a failing writer ends the run: no hang")
    if not hung:
        print(f"failing writer: exit {r.returncode} after {time.time() - t0:.1f} s")
        check(r.returncode != 0, "a failing writer: non-zero exit")
        check("rank 1's checkpoint writer failed" in r.stderr and "iter_0000004.tmp" in r.stderr,
              f"a failing writer: the error names the rank and the directory: {r.stderr[-600:]}")
        check("  successfully saved checkpoint from iteration       4" not in r.stdout,
              "a failing writer: no success line")
    check(open(os.path.join(fd, TRACKER)).read() == "2" and
          sorted(os.listdir(fd)) == ["iter_0000002", TRACKER] and
          file_hashes(os.path.join(fd, "iter_0000002")) == good,
          f"a failing writer: the last good checkpoint alone, untouched: {sorted(os.listdir(fd))}")

    # ---- the rules: Megatron refuses async saves of the torch format ----
    args = base(tmp, 2, os.path.join(tmp, "legacy"), ["--async-save"])
    args[args.index("torch_dist")] = "torch"
    r = run_pretrain(args, env=env)
    check(r.returncode != 0 and "NotImplementedError: " + FORMATS["legacy"] in r.stdout + r.stderr and
          not os.path.exists(os.path.join(tmp, "legacy")),
          f"--async-save --ckpt-format torch refused: {(r.stdout + r.stderr)[-300:]}")
    args = base(tmp, 2, None, ["--async-save"])
    args[args.index("torch_dist")] = "torch"
    r = run_pretrain(args, env=env)
    check(r.returncode == 0, f"--async-save --ckpt-format torch without --save trains (Megatron never "
          f"saves then): {r.stderr[-300:]}")
raise SystemExit(summary("test_async_save"))
