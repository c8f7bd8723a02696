"""Megatron end to end in bf16 and fp16 (issue 11), against Megatron-LM core_v0.12.1 itself
(megatron_mixed_cases.py; goldens in tests/golden/mixed/<case>/, README there):
- Megatron -> megatron.c: pretrain_gpt loads Megatron's iteration-3 checkpoint of each case
  (bf16: one process GPT-2 and Llama style, tp2, pp2, dp2 with the distributed optimizer; fp16:
  Megatron's default dynamic loss scale, whose first iterations overflow and are skipped, and a
  static --loss-scale) and trains iterations 4-6 with the same arguments: lm loss within 2e-4
  relative of Megatron's own at every iteration (absent on the same skipped iterations), the
  same learning rate, consumed samples, loss scale and numbers of skipped and nan iterations, the
  grad norm to the last of the 3 decimals Megatron prints (one step of it allowed). Four cases
  again with --rounding-points torch-cpu: the same checks, and iteration 4's lm loss equal to
  Megatron's printed value. fp16 also with
  Megatron's default fp16 gradient buffer (no --accumulate-allreduce-grads-in-fp32): one process,
  dp 2, dp 2 with the distributed optimizer, a dynamic scale that grows and backs off (the fp16
  buffer overflows where fp32 accumulation does not: with fp32 grads these cases fail).
- megatron.c -> Megatron (live, only with MC_MEGATRON_ROOT set and PyPI torch 2.x installed,
  MC_TORCH2_PYTHON): megatron.c trains 3 iterations and saves; Megatron loads that
  checkpoint and trains 4-6; its lines match megatron.c's own 6-iteration run the same way."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_mixed_cases as mx  # noqa: E402
mcs = mx.mcs
from mc_test import check, summary  # noqa: E402  (megatron_cases put tests/ on sys.path)

REL = 2e-4
GRAD_NORM_ABS = 1e-3  # Megatron prints the grad norm with 3 decimals: one step of the last digit
LOCAL = ("--transformer-impl", "local")  # the layer names Megatron's local spec wrote
# continued again with --rounding-points torch-cpu (Megatron's rounding points on a CPU, where
# the goldens were made)
TORCH_CPU_CASES = ("gpt_bf16", "llama_bf16", "gpt_tp2_bf16", "gpt_fp16_static")


def compare(case, ours, theirs, what, iters=(4, 5, 6)):
    """Iterations `iters` of `ours` against `theirs` (iteration -> (consumed samples, rest of line))."""
    check(tuple(sorted(ours)) == iters, f"{case} {what}: iterations {sorted(ours)}, want {iters}")
    for it in sorted(ours):
        if it not in theirs:
            check(False, f"{case} {what} {it}: no reference line")
            continue
        a, b = mx.fields(ours[it][1]), mx.fields(theirs[it][1])
        where = f"{case} {what} iteration {it}"
        check(ours[it][0] == theirs[it][0], f"{where}: consumed samples {ours[it][0]} vs {theirs[it][0]}")
        for k in ("learning rate", "loss scale", "number of skipped iterations", "number of nan iterations"):
            check(a.get(k) == b.get(k), f"{where}: {k} {a.get(k)} vs {b.get(k)}")
        # Megatron prints no lm loss on an iteration it skipped (the interval's mean over 0 steps)
        check(("lm loss" in a) == ("lm loss" in b), f"{where}: lm loss printed {'lm loss' in a} vs {'lm loss' in b}")
        if "lm loss" in a and "lm loss" in b:
            la, lb = a["lm loss"], b["lm loss"]
            check(abs(la - lb) <= REL * abs(lb), f"{where}: lm loss {la} vs {lb} (rel {abs(la - lb) / abs(lb):.2e})")
        check(("grad norm" in a) == ("grad norm" in b), f"{where}: grad norm printed {'grad norm' in a} vs {'grad norm' in b}")
        if "grad norm" in a and "grad norm" in b:
            ga, gb = a["grad norm"], b["grad norm"]
            check(abs(ga - gb) <= GRAD_NORM_ABS + 1e-9, f"{where}: grad norm {ga} vs {gb}")
    print(f"{case} {what}, iterations {iters[0]}-{iters[-1]} (ours, reference, loss scale):",
          [(mx.fields(ours[i][1]).get("lm loss", "skipped"), mx.fields(theirs.get(i, ("", ""))[1]).get("lm loss", "skipped"),
            mx.fields(ours[i][1]).get("loss scale")) for i in sorted(ours)])


def test_continue_megatron(case, tmp, rounding=None):
    gold = os.path.join(mx.GOLDEN, case)
    save = os.path.join(tmp, f"golden_{case}_{rounding}")
    if not os.path.isdir(os.path.join(gold, "save")):
        check(False, f"{case}: no golden at {gold} (tests/mixed/make_megatron_mixed_goldens.py makes it)")
        return
    shutil.copytree(os.path.join(gold, "save"), save)
    theirs = mx.train_lines(open(os.path.join(gold, "megatron_log.txt")).read())
    extra = ("--rounding-points", rounding) if rounding else ()
    r = mx.run_ours(case, tmp, LOCAL + ("--load", save) + extra)
    check(r.returncode == 0, f"{case}: megatron.c from Megatron's checkpoint: rc {r.returncode}: {r.stderr[-800:]}")
    what = "Megatron -> megatron.c" + (f" --rounding-points {rounding}" if rounding else "")
    ours = mx.train_lines(r.stdout)
    compare(case, ours, theirs, what)
    if rounding == "torch-cpu" and 4 in ours and 4 in theirs:
        # the first continued forward runs from the same weights: with Megatron's CPU rounding
        # points its lm loss is Megatron's to the last printed digit (fused: 2.7e-6 relative
        # away for gpt_bf16)
        la, lb = mx.fields(ours[4][1]).get("lm loss"), mx.fields(theirs[4][1]).get("lm loss")
        check(la == lb, f"{case} {what} iteration 4: lm loss {la} vs Megatron's {lb}, want equal")


def test_megatron_continues_ours(case, tmp, port):
    mine = os.path.join(tmp, f"ours_{case}")
    r1 = mx.run_ours(case, tmp, LOCAL + ("--save", mine, "--save-interval", "3", "--exit-interval", "3"))
    r2 = mx.run_ours(case, tmp, LOCAL)
    check(r1.returncode == 0 and r2.returncode == 0, f"{case}: our runs: {r1.stderr[-400:]} {r2.stderr[-400:]}")
    if r1.returncode or r2.returncode:
        return
    rcs, out = mx.run_megatron(case, tmp, ("--load", mine, "--ckpt-step", "3"), port=port)
    check(not any(rcs), f"{case}: Megatron from megatron.c's checkpoint {rcs}: {out[-1000:]}")
    compare(case, mx.train_lines(out), mx.train_lines(r2.stdout), "megatron.c -> Megatron")


def main():
    if not shutil.which("mpirun"):
        print("test_megatron_mixed: skipped (no mpirun)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in mx.CASES:
            test_continue_megatron(case, tmp)
        for case in TORCH_CPU_CASES:
            test_continue_megatron(case, tmp, "torch-cpu")
        if mcs.megatron_root():
            for i, case in enumerate(mx.CASES):
                if mx.python_for(case) is None:
                    print(f"{case}: megatron.c -> Megatron skipped (the references need PyPI torch 2.x: MC_TORCH2_PYTHON)")
                else:
                    test_megatron_continues_ours(case, tmp, 29900 + 2 * i)
        else:
            print("megatron.c -> Megatron: skipped (set MC_MEGATRON_ROOT)")
    return summary("test_megatron_mixed")


if __name__ == "__main__":
    sys.exit(main())
