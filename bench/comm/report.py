"""Reads one pretrain_gpt log written with MC_COMM_STATS=1 and prints, per rank and group,
the bytes sent per training step (measured by the communication wrappers' counters, wire
bytes under a ring algorithm) beside the theoretical minimum for the layout, and the median
step time. Used by bench/comm/run.sh; standard library only."""
import argparse
import re
import statistics
import sys

STAT = re.compile(r"comm-stats rank=(\d+) group=(\S+) op=(\S+) calls=(\d+) "
                  r"payload_bytes=(\d+) wire_bytes=(\d+)")
PARAMS = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank "
                    r"\((\d+), (\d+)\): (\d+)")
VPAD = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")
STEP = re.compile(r"elapsed time per iteration \(ms\): ([0-9.]+)")


def ring(n, s, allreduce=True):
    """Bytes one rank sends in a ring all-reduce (or reduce-scatter/all-gather) of s bytes."""
    return (2 if allreduce else 1) * (n - 1) / n * s if n > 1 else 0.0


def theory(a, t, p, params, vpad):
    """Minimum wire bytes per step (Megatron's schedule) for tensor rank t, pipeline stage p."""
    m = a.gbs // (a.mbs * a.dp)              # micro-batches per step on this rank
    act = a.seq * a.mbs * a.hidden * 4       # one s*b*h fp32 activation
    first, last = p == 0, p == a.pp - 1
    out = {}
    lp = a.layers // a.pp
    ce = 3 * ring(a.tp, a.seq * a.mbs * 4) if last else 0
    if a.tp > 1 and not a.sp:  # per layer 2 all-reduces forward + 2 backward; embedding fwd,
        n_ar = 4 * lp + first + last  # output bwd, and 3 s*b vocab-parallel CE ones
        out["tp"] = m * (n_ar * ring(a.tp, act) + ce)
    if a.tp > 1 and a.sp:  # sequence parallel: per layer forward 2 all-gathers + 2
        # reduce-scatters, backward 2 all-gathers of the row-parallel output grads, 2 re-gathers
        # of the column-parallel inputs, 2 reduce-scatters; embedding reduce-scatter + grad
        # all-gather; output layer all-gather (twice) + reduce-scatter; the loss's all-reduces;
        # once per step the norm / row-bias grads (6h per layer, 2h final norm) all-reduced
        n_agrs = 10 * lp + 2 * first + 3 * last
        sp_grads = (6 * a.hidden * lp + 2 * a.hidden * last) * 4
        out["tp"] = m * (n_agrs * ring(a.tp, act, False) + ce) + ring(a.tp, sp_grads)
    if a.pp > 1:  # s*b*h (s/tp*b*h with SP) per micro-batch per boundary each way
        out["pp"] = m * act // (a.tp if a.sp else 1) * ((not last) + (not first))
        if first or last:  # tied word embedding grads, V_pad*h/tp over the 2-rank group
            out["embedding"] = ring(2, vpad * a.hidden // a.tp * 4)
    if a.dp > 1 and params is not None:  # all grads (or RS + AG with the distributed optimizer)
        out["dp"] = ring(a.dp, params * 4)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    for k in ("tp", "pp", "dp", "iters", "layers", "hidden", "seq", "mbs", "gbs", "vocab"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--layout", required=True)
    ap.add_argument("--distopt", action="store_true")
    ap.add_argument("--sp", action="store_true", help="--sequence-parallel")
    a = ap.parse_args()
    text = open(a.log).read()
    stats, params = {}, {}
    for r, g, op, calls, pay, wire in STAT.findall(text):
        e = stats.setdefault((int(r), g), [0, 0, 0, set()])
        e[0] += int(calls); e[1] += int(pay); e[2] += int(wire); e[3].add(op)
    for t, p, n in PARAMS.findall(text):
        params[(int(t), int(p))] = int(n)
    steps = [float(x) for x in STEP.findall(text)]
    vp = VPAD.search(text)
    vpad = int(vp.group(1)) if vp else a.vocab
    world = a.tp * a.pp * a.dp
    if not steps or (not stats and world > 1):
        sys.exit(f"report.py: {a.log} has no comm-stats or iteration lines")
    warm = steps[1:] if len(steps) > 1 else steps
    if world == 1:  # the single-process baseline: no communication
        print(f"== {a.layout} (one process, no MPI): step time median "
              f"{statistics.median(warm):.0f} ms over iterations 2..{len(steps)}")
        return 0
    print(f"== {a.layout} (tp={a.tp} pp={a.pp} dp={a.dp}{' distopt' if a.distopt else ''}{' sp' if a.sp else ''}, "
          f"{a.tp * a.pp * a.dp} ranks on 2 cores): step time median {statistics.median(warm):.0f}"
          f" ms over iterations 2..{len(steps)}")
    print(f"   {'rank':>4} {'group':<10} {'ops':<34} {'calls/step':>10} {'payload MB/step':>15} "
          f"{'wire MB/step':>12} {'min MB/step':>11} {'ratio':>6}")
    worst = 0.0
    for r in range(world):
        t, p = r % a.tp, r // (a.tp * a.dp)   # Megatron's tp-cp-ep-dp-pp rank order
        th = theory(a, t, p, params.get((t, p)), vpad)
        for (rr, g), (calls, pay, wire, ops) in sorted(stats.items()):
            if rr != r:
                continue
            mn = th.get(g)
            w = wire / a.iters
            print(f"   {r:>4} {g:<10} {','.join(sorted(ops)):<34} {calls / a.iters:>10.1f} "
                  f"{pay / a.iters / 1e6:>15.3f} {w / 1e6:>12.3f} "
                  + (f"{mn / 1e6:>11.3f} {w / mn:>6.2f}" if mn else f"{'-':>11} {'-':>6}"))
            worst = max(worst, w / mn if mn else 0.0)
    print(f"   summary {a.layout}: {world} ranks, step {statistics.median(warm):.0f} ms, "
          f"largest measured/minimum ratio {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
