"""Reads the four logs of one bench/overlap/run.sh layout (modes none, blocking, overlap,
noprog, written with MC_DDP_TRACE=1) and prints per mode the median step time (iterations
after the first), the grad-sync time on the critical path per step (max over ranks of the
blocking collectives plus the wait in finish_grad_sync: for overlap, what it did not hide) and, for the blocking mode, each bucket's collective time on rank 0 (what an
overlapped bucket has to hide behind the backward of the layers after it). Standard library."""
import argparse
import re
import statistics

STEP = re.compile(r"elapsed time per iteration \(ms\): ([0-9.]+)")
BUCKET = re.compile(r"ddp-trace rank=(\d+) bucket=(\d+) elements=(\d+) call_ms=([0-9.]+) "
                    r"start_before_last_ms=([0-9.]+)")
WAIT = re.compile(r"ddp-trace rank=(\d+) steps=(\d+) buckets=(\d+) wait_ms=([0-9.]+)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("logs", nargs=4)
    a = ap.parse_args()
    print(f"== {a.layout}: step time and exposed grad-sync wait per mode")
    print("   mode       buckets  step ms (median)  grad sync on the critical path ms/step")
    for mode, path in zip(("none", "blocking", "overlap", "noprog"), a.logs):
        text = open(path).read()
        steps = [float(x) for x in STEP.findall(text)][1:]
        per_rank = {}
        for r, _, nb, w in WAIT.findall(text):
            per_rank[int(r)] = [int(nb), float(w)]
        for r, b, n, call, lag in BUCKET.findall(text):
            if mode in ("none", "blocking"):  # there the calls are the collectives
                per_rank[int(r)][1] += float(call)
        nb = next(iter(per_rank.values()))[0] if per_rank else 0
        crit = max(v[1] for v in per_rank.values()) if per_rank else float("nan")
        med = statistics.median(steps) if steps else float("nan")
        print(f"   {mode:10s} {nb:7d}  {med:16.1f}  {crit:12.1f}")
        if mode == "blocking":
            rows = [m for m in BUCKET.findall(text) if m[0] == "0"]
            for _, b, n, call, lag in rows:
                print(f"      bucket {b}: {int(n):9d} elements, blocking collective "
                      f"{float(call):7.2f} ms/step, started {float(lag):7.2f} ms before "
                      f"the last bucket")


if __name__ == "__main__":
    main()
