"""--overlap-grad-reduce and --overlap-param-gather (pretrain_gpt under mpirun, oversubscribed,
OMP_NUM_THREADS=1): at dp2, dp4, tp2 x dp2, pp2 x dp2 and tp2 x dp2 --sequence-parallel, with
and without
--use-distributed-optimizer, the overlapped run (non-blocking per-bucket collectives started by
backward, --ddp-bucket-size 5000) prints 'lm loss' / 'grad norm' / 'params norm' of every
iteration and the validation losses bit-identical ([exact] lines of MC_TEST_LOG_EXACT=1) to
the non-overlapped run (one bucket) and to the same buckets with blocking collectives
(MC_DDP_BLOCKING=1), and within 1e-5 of the single process. The per-bucket collectives counted
by MC_COMM_STATS=1 (all-reduce, or reduce-scatter + all-gather with the distributed optimizer)
equal iterations x Megatron's bucket count for each rank's parameters, which this test gets by
running the bucketing statements of _ParamAndGradBuffer.__init__ (Megatron-LM core_v0.12.1,
via test_distopt_buffer.py) on the parameter sizes of that rank (checked against the count
pretrain_gpt prints); tests/golden/overlap/bucket_counts.json holds those counts (written by
this script with --write-golden) for when the checkout is absent, and must agree with it. Also: --check-for-nan-in-loss-and-grad (default on) stops a
diverging run with Megatron's messages, and --no-check-for-nan-in-loss-and-grad lets it go
on; a checkpoint saved while the param all-gathers are in flight resumes bit-exactly;
--ddp-average-in-collective equals the default (NCCL's float AVG is a pre-multiplied sum)
and is refused with --calculate-per-token-loss."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, close, parse_exact, parse_valid, run_pretrain, summary  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_distopt_buffer as tdb  # noqa: E402

L, H, S, V, ITERS, BUCKET = 2, 32, 32, 4096, 6, 5000
GPT2 = ["--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", "4"]
OVERLAP = ["--overlap-grad-reduce", "--ddp-bucket-size", str(BUCKET)]
DISTOPT = ["--use-distributed-optimizer"]
STAT = re.compile(r"comm-stats rank=(\d+) group=(\S+) op=(\S+) calls=(\d+) "
                  r"payload_bytes=(\d+) wire_bytes=(\d+)")
NPARAM = re.compile(r"number of parameters on \(tensor, pipeline\) model parallel rank "
                    r"\((\d+), (\d+)\): (\d+)")


def run(tmp, np=1, tp=1, pp=1, extra=(), env_extra=None, iters=ITERS, model=GPT2,
        pnorm=True):
    args = [*model, "--mock-data", "--vocab-size", str(V), "--seq-length", str(S),
            "--max-position-embeddings", str(S), "--micro-batch-size", "2",
            "--global-batch-size", "8", "--train-iters", str(iters), "--lr", "1e-3",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--weight-decay", "0.1",
            "--clip-grad", "0.5", "--log-params-norm", "--log-interval", "1",
            "--eval-interval", "3", "--eval-iters", "1", "--tokenizer-type", "NullTokenizer",
            "--make-vocab-size-divisible-by", str(128 // tp),
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
            "--hidden-dropout", "0", *extra]
    if not pnorm:
        args.remove("--log-params-norm")
    p = run_pretrain(args, np, timeout=240,
                     env={"MC_COMM_STATS": "1", "MC_DDP_BLOCKING": None, **(env_extra or {})})
    stats = {}
    for r, g, op, calls, pay, wire in STAT.findall(p.stdout):
        stats[(int(r), g, op)] = (int(calls), int(pay))
    return {"p": p, "exact": parse_exact(p.stdout), "valid": parse_valid(p.stdout),
            "stats": stats, "nparam": {(int(t), int(s)): int(n)
                                       for t, s, n in NPARAM.findall(p.stdout)}}


def ok(name, r):
    check(r["p"].returncode == 0 and len(r["exact"]) == ITERS and len(r["valid"]) >= 2,
          f"{name}: exit 0 with {ITERS} iterations (got {r['p'].returncode}, "
          f"{len(r['exact'])}): {r['p'].stderr[-600:]}")


def vs_single(name, ref, r):
    worst = 0.0
    for (i, *v), (_, *w) in zip(r["exact"], ref["exact"]):
        check(all(close(a, b) for a, b in zip(v, w)), f"{name} iteration {i}: {v} vs {w}")
        worst = max([worst] + [abs(float(a) / float(b) - 1) for a, b in zip(v, w)])
    for (w, v), (rw, rv) in zip(r["valid"], ref["valid"]):
        check(w == rw and close(v, rv), f"{name} validation at {w}: {v} vs {rv}")
    return worst


def stage_numels(tp, stage, pp):
    """GPT-2-style parameter sizes of one (tp rank, pp stage), forward (state_dict) order,
    and which are Megatron's shared embeddings (tied, pp > 1)."""
    vp = (V + 1 + 127) // 128 * 128 // tp  # NullTokenizer: V + 1 (EOD), padded to 128
    first, last = stage == 0, stage == pp - 1
    per = L // pp
    numel, shared = [], []
    if first:
        numel += [vp * H, S * H]
        shared += [pp > 1, False]
    layer = [H, H, H * H // tp, H, 3 * H // tp * H, 3 * H // tp, H, H, 4 * H // tp * H,
             4 * H // tp, H * 4 * H // tp, H]
    numel += layer * per
    shared += [False] * len(layer) * per
    if last:
        numel += [H, H] + ([vp * H] if pp > 1 else [])
        shared += [False, False] + ([True] if pp > 1 else [])
    return numel, shared


GOLDEN = os.path.join(tdb.SRC, "tests", "golden", "overlap", "bucket_counts.json")
golden = {}      # key -> Megatron's bucket count (committed; written with --write-golden)
live_counts = {}


def megatron_buckets(layout, tp, stage, pp, dp, distopt, num_buckets=None):
    """Megatron's bucket count for this rank's parameters: its code run live when the checkout
    is there (and compared with the golden), else the golden."""
    numel, shared = stage_numels(tp, stage, pp)
    bucket = BUCKET if num_buckets is None else sum(numel) // num_buckets  # get_model
    bucket = bucket if stage == 0 else None  # DDP: no bucketing on stages after the first
    key = f"tp{tp}/stage{stage}of{pp}/dp{dp}/{'distopt' if distopt else 'ddp'}/bucket{bucket}"
    if layout is None:
        return golden.get(key, -1), numel
    n = len(tdb.megatron_map(layout, numel, shared, dp, distopt, bucket)["buckets"])
    live_counts[key] = n
    if key in golden:
        check(golden[key] == n, f"{key}: golden bucket count {golden[key]} == live {n}")
    return n, numel


def count_check(name, layout, r, np, tp, pp, distopt, report, num_buckets=None):
    dp = np // (tp * pp)
    for rank in range(np):
        t, stage = rank % tp, rank // (tp * dp)
        nb, numel = megatron_buckets(layout, tp, stage, pp, dp, distopt, num_buckets)
        check(r["nparam"].get((t, stage)) == sum(numel),
              f"{name}: parameter sizes of rank ({t}, {stage}) {sum(numel)} match "
              f"pretrain_gpt's {r['nparam'].get((t, stage))}")
        if distopt:
            rs = r["stats"].get((rank, "dp", "reduce-scatter"), (0, 0))[0]
            ag = r["stats"].get((rank, "dp", "all-gather"), (0, 0))[0]
            check(rs == ITERS * nb and ag == ITERS * nb,
                  f"{name} rank {rank}: {rs} reduce-scatters, {ag} all-gathers == "
                  f"{ITERS} x {nb} Megatron buckets")
        else:  # the dp all-reduces are the buckets plus the 8-byte loss reports
            calls, pay = r["stats"].get((rank, "dp", "all-reduce"), (0, 0))
            reports = (pay - ITERS * 4 * sum(numel)) // 8
            check(calls - reports == ITERS * nb,
                  f"{name} rank {rank}: {calls - reports} bucket all-reduces == {ITERS} x "
                  f"{nb} Megatron buckets")
        if rank == 0:
            report.append(f"{name}: rank 0 {nb} buckets (Megatron's count) x {ITERS} "
                          f"iterations counted")


def main():
    import json
    write = "--write-golden" in sys.argv
    layout = tdb.megatron_layout_fn() if os.path.exists(tdb.REF) else None
    if os.path.exists(GOLDEN) and not write:
        golden.update(json.load(open(GOLDEN)))
    check(layout is not None or golden, "Megatron checkout or golden bucket counts present")
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        ref = run(tmp)
        ok("single process", ref)
        for np, tp, pp, sp in ((2, 1, 1, False), (4, 1, 1, False), (4, 2, 1, False),
                               (4, 1, 2, False), (4, 2, 1, True)):
            for distopt in (False, True):
                name = f"tp{tp} pp{pp} dp{np // tp // pp}" + (" sp" if sp else "") + \
                       (" distopt" if distopt else "")
                base_args = (DISTOPT if distopt else []) + (["--sequence-parallel"] if sp else [])
                ov_args = base_args + OVERLAP + (["--overlap-param-gather"] if distopt else [])
                base = run(tmp, np, tp, pp, base_args)
                ov = run(tmp, np, tp, pp, ov_args)
                blk = run(tmp, np, tp, pp, ov_args, {"MC_DDP_BLOCKING": "1"})
                for n, r in (("base", base), ("overlap", ov), ("blocking", blk)):
                    ok(f"{name} {n}", r)
                if distopt:  # the grad norm sums each rank's shard: it moves with the cut
                    d = max(abs(float(a) / float(b) - 1) for x, y in zip(ov["exact"],
                                                                         base["exact"])
                            for a, b in zip(x[1:], y[1:]))
                    check(d <= 1e-6, f"{name}: overlapped ~ non-overlapped (rel {d:.1e})")
                else:
                    check(ov["exact"] == base["exact"] and ov["valid"] == base["valid"],
                          f"{name}: overlapped == non-overlapped, bit for bit")
                check(ov["exact"] == blk["exact"] and ov["valid"] == blk["valid"],
                      f"{name}: overlapped == blocking with the same buckets, bit for bit")
                worst = vs_single(name, ref, ov)
                same = [ov["exact"] == x["exact"] and ov["valid"] == x["valid"]
                        for x in (base, blk)]
                report.append(f"{name} overlap: bit-identical to non-overlapped {same[0]}, "
                              f"to blocking {same[1]}; max rel diff vs single process "
                              f"{worst:.1e}")
                count_check(name, layout, ov, np, tp, pp, distopt, report)
        # --ddp-num-buckets: bucket size = this rank's parameters // n, as get_model sets it
        nbk = run(tmp, 2, extra=["--overlap-grad-reduce", "--ddp-num-buckets", "3"])
        ok("--ddp-num-buckets 3", nbk)
        count_check("dp2 --ddp-num-buckets 3", layout, nbk, 2, 1, 1, False, report, 3)
        both = run(tmp, 2, extra=OVERLAP + ["--ddp-num-buckets", "3"])
        check(both["p"].returncode != 0 and "cannot specify both" in both["p"].stderr,
              f"--ddp-num-buckets with --ddp-bucket-size refused ({both['p'].stderr[-300:]})")
        # a checkpoint saved right after a step whose all-gathers are still in flight
        # (--exit-interval) resumes bit-exactly: the save waits for them, as Megatron's
        # disable_forward_pre_hook does
        # (no evaluation and no --log-params-norm, which would wait for them first)
        ck = DISTOPT + OVERLAP + ["--overlap-param-gather", "--ckpt-format", "torch",
                                  "--eval-interval", "100"]
        whole = run(tmp, 2, extra=ck, pnorm=False)
        first = run(tmp, 2, extra=ck + ["--save", os.path.join(tmp, "ck"), "--save-interval",
                                        "100", "--exit-interval", "3"], pnorm=False)
        resumed = run(tmp, 2, extra=ck + ["--load", os.path.join(tmp, "ck")], pnorm=False)
        check(first["p"].returncode == 0 and resumed["p"].returncode == 0 and
              len(resumed["exact"]) == ITERS - 3 and resumed["exact"] == whole["exact"][3:],
              f"distopt --overlap-param-gather save at 3 / resume: {resumed['exact']} vs "
              f"{whole['exact'][3:]} ({resumed['p'].stderr[-300:]})")
        # --ddp-average-in-collective: the same numbers; refused with per-token loss
        avg = run(tmp, 2, extra=OVERLAP + ["--ddp-average-in-collective"])
        base = run(tmp, 2)
        check(avg["exact"] == base["exact"], "--ddp-average-in-collective == default")
        bad = run(tmp, 2, extra=["--ddp-average-in-collective", "--calculate-per-token-loss"])
        check(bad["p"].returncode != 0 and "--ddp-average-in-collective with "
              "--calculate-per-token-loss" in bad["p"].stderr,
              f"average in collective + per-token loss refused ({bad['p'].stderr[-300:]})")
        # --check-for-nan-in-loss-and-grad: Megatron's messages, fatal; off: the run goes on.
        # Where a diverging run first meets a NaN (the forward loss or a gradient bucket)
        # depends on the CPU's GEMM kernels, so a ladder of learning rates is run and each of
        # Megatron's two messages must be met on at least one rung.
        msgs = ("found NaN in local grad norm for bucket #0 in backward pass "
                "before data-parallel communication collective",
                "found NaN in local forward loss calculation")
        seen = set()
        for lr in ("1e2", "1e3", "1e4", "1e5", "1e8"):
            div = ["--lr", lr, "--clip-grad", "0", "--optimizer", "sgd", "--lr-decay-style",
                   "linear", "--lr-warmup-iters", "0", "--weight-decay", "0.01"]
            r = run(tmp, extra=div, iters=8)
            hit = [m for m in msgs if m in r["p"].stderr]
            seen.update(hit)
            check(r["p"].returncode != 0 and hit,
                  f"lr {lr}: stops with one of Megatron's NaN messages ({r['p'].stderr[-300:]})")
            r = run(tmp, extra=div + ["--no-check-for-nan-in-loss-and-grad"], iters=8)
            check(r["p"].returncode == 0 and len(r["exact"]) == 8,
                  f"lr {lr} with --no-check-for-nan-in-loss-and-grad runs on "
                  f"({r['p'].stderr[-300:]})")
        for m in msgs:
            check(m in seen, f"some diverging run stops with '{m}'")
    if write and layout:
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN + ".tmp", "w") as f:
            json.dump(dict(sorted(live_counts.items())), f, indent=1)
        os.replace(GOLDEN + ".tmp", GOLDEN)
    print("\n".join(report))
    return summary("test_overlap_training")


if __name__ == "__main__":
    sys.exit(main())
