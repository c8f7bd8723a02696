#!/usr/bin/env python3
"""Training throughput with and without --async-save, saving a torch_dist checkpoint every few
iterations (issue 13). Three runs of build/bin/pretrain_gpt on the same model and data: no save,
synchronous saves, --async-save. Each run's training phase is timed from the line "training ..."
to "[after training is done]" as they reach this script (so the asynchronous run's wait for its
last writer at the end of train() is counted), and iterations/s is train_iters over that.

Usage: bench/checkpoint/async_save.py [--layers 2] [--hidden 512] [--iters 24] [--every 4]
(env: BUILD=build, CKPT_DIR, OMP_NUM_THREADS default 2). The writer thread needs a core of its
own to overlap with training: on a small, busy machine compare OMP_NUM_THREADS=1 and 2. The state saved per checkpoint is the
fp32 model and its Adam moments (12 bytes per parameter): printed with the timings."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
PRETRAIN = os.path.join(BUILD, "bin", "pretrain_gpt")


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def run(args, extra, work):
    """Seconds of the training phase, and the log."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    cmd = [PRETRAIN, *args, *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         cwd=work)
    t0 = t1 = None
    log = []
    for line in p.stdout:
        log.append(line)
        if line.startswith("training ..."):
            t0 = time.monotonic()
        elif line.startswith("[after training is done]"):
            t1 = time.monotonic()
    if p.wait() or t0 is None or t1 is None:
        sys.exit("async_save.py: the run failed:\n" + "".join(log[-30:]))
    return t1 - t0, "".join(log)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--iters", type=int, default=24)
    ap.add_argument("--every", type=int, default=4)
    o = ap.parse_args()
    work = tempfile.mkdtemp(dir=os.environ.get("CKPT_DIR"), prefix="bench-async-")
    save = os.path.join(work, "ck")
    args = ["--num-layers", str(o.layers), "--hidden-size", str(o.hidden),
            "--num-attention-heads", "8", "--seq-length", "128", "--max-position-embeddings", "128",
            "--micro-batch-size", "2", "--global-batch-size", "2", "--train-iters", str(o.iters),
            "--lr", "1e-4", "--log-interval", "1", "--mock-data", "--tokenizer-type",
            "NullTokenizer", "--vocab-size", "32000", "--data-cache-path", os.path.join(work, "cache"),
            "--ckpt-format", "torch_dist", "--transformer-impl", "local", "--eval-iters", "0"]
    saving = ["--save", save, "--save-interval", str(o.every)]
    print(f"CPU: {cpu_name()}; {os.cpu_count()} cores; OMP_NUM_THREADS "
          f"{os.environ.get('OMP_NUM_THREADS', '2')}; load average before: "
          f"{open('/proc/loadavg').read().split()[:3]}")
    try:
        t_none, _ = run(args, [], work)  # builds the index cache before "training ..."
        t_sync, log = run(args, saving, work)
        params = next(int(line.split(":")[-1]) for line in log.splitlines()
                      if "number of parameters on" in line)
        shutil.rmtree(save)
        t_async, log = run(args, saving + ["--async-save"], work)
        overlap = log.count("WARNING: Starting a checkpoint save before previous has finished")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = o.iters
    saves = n // o.every
    print(f"model: {o.layers} layers, hidden {o.hidden}: {params} parameters; "
          f"{params * 12 / 1e6:.0f} MB saved per checkpoint (fp32 weights + Adam moments), "
          f"{saves} saves in {n} iterations (--save-interval {o.every})")
    for what, t in (("no save", t_none), ("sync save", t_sync), ("--async-save", t_async)):
        print(f"{what:13s}: {t:7.2f} s training, {n / t:6.2f} iterations/s")
    print(f"save cost per checkpoint: sync {(t_sync - t_none) / saves:.2f} s, "
          f"async {(t_async - t_none) / saves:.2f} s (async saves overlapping an earlier one: "
          f"{overlap})")
    print(f"throughput ratio async / sync: {t_sync / t_async:.2f}x")
    print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
