"""The layout matrix: pretrain_gpt under mpirun (--oversubscribe, OMP_NUM_THREADS=1, up to 8
ranks) for every tensor x pipeline x data-parallel product of at most 8 ranks with each factor
in {1, 2, 4}, the distributed optimizer on and off wherever dp > 1, for a GPT-2-style model
(LayerNorm, GeLU, learned positions, tied embeddings, biases) and a Llama-style one (RMSNorm,
SwiGLU, RoPE, grouped-query attention 8 heads / 4 groups, no biases, untied). Every row runs
20 iterations and must print, once, the same 'lm loss', 'grad norm' and 'params norm' at every
iteration, and the same validation and test losses, as ONE single-process run per model style
(run first, shared by all rows), within 1e-5 relative, read from the full-precision [exact]
lines of MC_TEST_LOG_EXACT=1. Some 8-rank rows are run twice and must be bit-identical.

Coverage: all 17 tp x pp x dp products (16 parallel layouts), every layout with dp > 1 both
with and without --use-distributed-optimizer: 25 rows, each run with one model style; the
styles alternate so that each meets tp, pp and dp of 1, 2 and 4 and both optimizers
(MC_TEST_MATRIX_FULL=1 runs every row with both styles). Five
sequence-parallel rows (SP_ROWS) and five virtual-pipeline rows (VPP_ROWS) run too.

The model is tiny (4 layers, hidden 32, seq 32, vocab 4096 mock data, micro-batch 1, global
batch 8) so that a whole row costs about start-up time; the summary line prints the wall time."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import (check, gpt2, llama, parse_exact, parse_valid, rel, run_pretrain,  # noqa: E402
                     summary)

ITERS = 20

STYLES = {"gpt2": gpt2(4), "llama": llama(4)}

# One row per run: (tp, pp, dp, vpp, sp, distopt, style). vpp = virtual stages per pipeline
# rank (1 = no interleaving), sp = --sequence-parallel, distopt = --use-distributed-optimizer.
# Each layout runs once with one model style; the styles alternate so that each meets every
# pipeline, tensor and data-parallel degree and both optimizers. MC_TEST_MATRIX_FULL=1 runs
# every row with both styles (twice the time).
ROWS = [
    # tp pp dp vpp sp     distopt style
    (1, 1, 2, 1, False, False, "gpt2"),
    (1, 1, 2, 1, False, True, "llama"),
    (1, 1, 4, 1, False, False, "llama"),
    (1, 1, 4, 1, False, True, "gpt2"),
    (1, 2, 1, 1, False, False, "gpt2"),
    (1, 2, 2, 1, False, False, "llama"),
    (1, 2, 2, 1, False, True, "gpt2"),
    (1, 2, 4, 1, False, False, "gpt2"),
    (1, 2, 4, 1, False, True, "llama"),
    (1, 4, 1, 1, False, False, "llama"),
    (1, 4, 2, 1, False, False, "gpt2"),
    (1, 4, 2, 1, False, True, "llama"),
    (2, 1, 1, 1, False, False, "llama"),
    (2, 1, 2, 1, False, False, "llama"),
    (2, 1, 2, 1, False, True, "gpt2"),
    (2, 1, 4, 1, False, False, "gpt2"),
    (2, 1, 4, 1, False, True, "llama"),
    (2, 2, 1, 1, False, False, "gpt2"),
    (2, 2, 2, 1, False, False, "llama"),
    (2, 2, 2, 1, False, True, "gpt2"),
    (2, 4, 1, 1, False, False, "llama"),
    (4, 1, 1, 1, False, False, "gpt2"),
    (4, 1, 2, 1, False, False, "llama"),
    (4, 1, 2, 1, False, True, "gpt2"),
    (4, 2, 1, 1, False, False, "llama"),
]

# Sequence parallelism (tp > 1), alone and with the other dimensions.
SP_ROWS = [
    (2, 1, 1, 1, True, False, "llama"),
    (4, 1, 2, 1, True, True, "gpt2"),
    (2, 2, 2, 1, True, False, "llama"),
    (2, 4, 1, 1, True, False, "gpt2"),
    (2, 1, 4, 1, True, True, "llama"),
]

# interleaved 1F1B (4 layers = 2 stages x 2 virtual chunks of one
# layer), alone and with tp, dp, sp and the distributed optimizer.
VPP_ROWS = [
    (1, 2, 1, 2, False, False, "gpt2"),
    (1, 2, 2, 2, False, True, "llama"),
    (2, 2, 2, 2, False, False, "gpt2"),
    (1, 2, 4, 2, False, True, "llama"),
    (2, 2, 2, 2, True, True, "llama"),
]
ENABLED_ROWS = ROWS + SP_ROWS + VPP_ROWS

# 8-rank rows run a second time: the curves must be bit-identical (tp, pp, dp, distopt, style)
RERUN = {(1, 2, 4, True, "llama"), (2, 2, 2, True, "gpt2"), (4, 2, 1, False, "llama"),
         (2, 1, 4, False, "gpt2")}


def row_args(style, tmp, tp=1, pp=1, vpp=1, sp=False, distopt=False):
    layers = int(STYLES[style][STYLES[style].index("--num-layers") + 1])
    extra = ["--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
             "--make-vocab-size-divisible-by", str(128 // tp)]
    if vpp > 1:
        extra += ["--num-layers-per-virtual-pipeline-stage", str(layers // (pp * vpp))]
    if sp:
        extra += ["--sequence-parallel"]
    if distopt:
        extra += ["--use-distributed-optimizer"]
    return [*STYLES[style], "--mock-data", "--vocab-size", "4096", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "1",
            "--global-batch-size", "8", "--train-iters", str(ITERS), "--lr", "1e-3",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--weight-decay", "0.1",
            "--clip-grad", "0.5", "--log-params-norm", "--log-interval", "1",
            "--eval-interval", "10", "--eval-iters", "1", "--tokenizer-type", "NullTokenizer",
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
            "--hidden-dropout", "0", "--seed", "1234", *extra]


def run(args, np):
    t0 = time.time()
    try:  # run_pretrain sends stdout to a file (see there)
        p = run_pretrain(args, np, timeout=180)
    except subprocess.TimeoutExpired:
        return None, [], [], time.time() - t0
    return p, parse_exact(p.stdout), parse_valid(p.stdout), time.time() - t0


def check_layout(name, out, tp, pp, dp, distopt):
    """The run really used the layout: Megatron's start-up line, printed once by rank 0."""
    want = (f"using world size: {tp * pp * dp}, data-parallel size: {dp}, context-parallel "
            f"size: 1, hierarchical context-parallel sizes: None, tensor-model-parallel size: "
            f"{tp}, encoder-tensor-model-parallel size: 0, pipeline-model-parallel size: {pp},")
    check(out.count(want) == 1, f"{name}: start-up line names the layout, once")
    check((" > distributed optimizer: " in out) == distopt, f"{name}: distributed optimizer "
                                                           f"{'on' if distopt else 'off'}")


def compare(name, ref, got):
    """Largest relative difference of the row's curves from the single-process run's."""
    p, exact, evals, _ = got
    if p is None:
        check(False, f"{name}: finished within 180 s")
        return float("inf")
    check(p.returncode == 0, f"{name}: exit 0 (got {p.returncode}: {p.stderr[-800:]})")
    check(len(exact) == ITERS, f"{name}: {ITERS} [exact] lines, printed once (got {len(exact)})")
    if len(exact) != ITERS:  # show what mpirun delivered, to tell a lost line from a merged one
        print("\n".join(l for l in p.stdout.splitlines() if "iteration" in l)[-6000:])
    check(len(evals) == len(ref[2]) == 4, f"{name}: 4 evaluation lines (got {len(evals)})")
    worst = 0.0
    for (i, *vals), (ri, *rvals) in zip(exact, ref[1]):
        d = max(rel(v, r) for v, r in zip(vals, rvals))
        check(i == ri and d <= 1e-5, f"{name} iteration {i}: lm loss / grad norm / params "
                                     f"norm {vals}, single process {rvals}")
        worst = max(worst, d)
    for (w, v), (rw, rv) in zip(evals, ref[2]):
        check(w == rw and rel(v, rv) <= 1e-5, f"{name} evaluation at {w}: {v} vs {rv}")
        worst = max(worst, rel(v, rv))
    return worst


def expand(rows):
    """(tp, pp, dp, vpp, sp, distopt, style) runs of the table."""
    full = os.environ.get("MC_TEST_MATRIX_FULL", "") not in ("", "0")
    for tp, pp, dp, vpp, sp, distopt, style in rows:
        assert tp * pp * dp <= 8 and {tp, pp, dp} <= {1, 2, 4}
        for st in (STYLES if full else (style,)):
            yield tp, pp, dp, vpp, sp, distopt, st


def main():
    t_start = time.time()
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        refs = {}
        for style in STYLES:
            refs[style] = run(row_args(style, tmp), 1)
            ok = refs[style][0] is not None and refs[style][0].returncode == 0
            check(ok and len(refs[style][1]) == ITERS and len(refs[style][2]) == 4,
                  f"{style}: the single-process reference runs")
            if not ok:
                print(refs[style][0].stderr[-800:] if refs[style][0] else "timed out")
                return 1
        seen = set()
        for tp, pp, dp, vpp, sp, d, style in expand(ENABLED_ROWS):
            key = (tp, pp, dp, vpp, sp, d, style)
            check(key not in seen, f"row {key} listed once")
            seen.add(key)
            name = (f"{style} tp{tp} pp{pp} dp{dp}" + (f" vpp{vpp}" if vpp > 1 else "") +
                    (" sp" if sp else "") + (" distopt" if d else ""))
            args = row_args(style, tmp, tp, pp, vpp, sp, d)
            got = run(args, tp * pp * dp)
            worst = compare(name, refs[style], got)
            if got[0] is not None:
                check_layout(name, got[0].stdout, tp, pp, dp, d)
            line = f"{name}: max rel diff {worst:.1e}, {got[3]:.1f} s"
            if (tp, pp, dp, d, style) in RERUN:
                again = run(args, tp * pp * dp)
                check(again[1] == got[1] and again[2] == got[2] and len(got[1]) == ITERS,
                      f"{name}: rerun bit-identical")
                line += ", rerun bit-identical" if again[1] == got[1] else ", RERUN DIFFERS"
            report.append(line)
        layouts = {(tp, pp, dp) for tp, pp, dp, *_ in seen}
        want = {(t, p, d) for t in (1, 2, 4) for p in (1, 2, 4) for d in (1, 2, 4)
                if t * p * d <= 8 and t * p * d > 1}
        check(layouts >= want, f"every tp x pp x dp <= 8 covered (missing {want - layouts})")
        check(RERUN <= {(t, p, d, o, s) for t, p, d, _, _, o, s in seen},
              "every rerun row is in the table")
        for style in STYLES:  # each style meets every degree and both optimizers
            mine = [r for r in seen if r[6] == style]
            check({r[0] for r in mine} >= {1, 2, 4} and {r[1] for r in mine} >= {1, 2, 4} and
                  {r[2] for r in mine} >= {1, 2, 4} and {r[5] for r in mine} == {False, True},
                  f"{style}: rows with tp, pp, dp of 1, 2 and 4 and both optimizers")
        check(all((t, p, d, o) in {(r[0], r[1], r[2], r[5]) for r in seen}
                  for t, p, d in want for o in ((False, True) if d > 1 else (False,))),
              "every layout with dp > 1 runs with and without the distributed optimizer")
    print("\n".join(report))
    return summary("test_layout_matrix", f"({len(report)} runs, {time.time() - t_start:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
