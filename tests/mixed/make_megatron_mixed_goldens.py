"""Writes tests/golden/mixed/<case>/ for the cases of megatron_mixed_cases.py with Megatron-LM
core_v0.12.1 itself (MC_MEGATRON_ROOT: a core_v0.12.1 checkout with its dataset helpers built;
fp16 cases need PyPI torch 2.x, MC_TORCH2_PYTHON):
  save/                 the iteration-3 checkpoint of a 6-iteration run (rng_state included)
  megatron_log.txt      Megatron's training lines of iterations 1-6
  megatron_fp32_log.txt the same run without --bf16/--fp16 (the bf16/fp16 vs fp32 difference)
and prints, per iteration, the relative lm-loss difference 16-bit vs fp32 (and for llama_bf16 the
shared shim's bf16-internal RMSNorm vs the fp32-internal one the goldens use). Usage:
  MC_MEGATRON_ROOT=... /usr/bin/python3 tests/mixed/make_megatron_mixed_goldens.py [case ...]"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_mixed_cases as mx  # noqa: E402
mcs = mx.mcs


def run(case, tmp, extra, port, **kw):
    t = time.time()
    rcs, out = mx.run_megatron(case, tmp, extra, port=port, **kw)
    lines = [l for l in out.splitlines() if mcs.TRAIN.match(l)]
    if any(rcs) or len(lines) != mcs.ITERS:
        print(out[-3000:])
        raise SystemExit(f"{case} {kw}: Megatron failed {rcs}")
    print(f"{case} {kw or ''}: {time.time() - t:.1f} s")
    return lines


def losses(lines):
    """lm loss per iteration; None where the iteration was skipped (Megatron prints none)"""
    return [mx.fields(rest).get("lm loss") for _, rest in mx.train_lines("\n".join(lines)).values()]


def rel(a, b):
    return ["skipped" if x is None or y is None else "%.2e" % (abs(x - y) / abs(y)) for x, y in zip(a, b)]


def make(case, port):
    with tempfile.TemporaryDirectory() as tmp:
        save = os.path.join(tmp, "save")
        lines = run(case, os.path.join(tmp, "a"), ("--save", save, "--save-interval", str(mcs.SAVE_AT)), port)
        fp32 = run(case, os.path.join(tmp, "b"), (), port + 1, fp32=True)
        dst = os.path.join(mx.GOLDEN, case)
        shutil.rmtree(dst, ignore_errors=True)
        mcs.copy_checkpoint(save, os.path.join(dst, "save"), mcs.SAVE_AT)
        for name, ls in (("megatron_log.txt", lines), ("megatron_fp32_log.txt", fp32)):
            with open(os.path.join(dst, name), "w") as f:
                f.write("\n".join(ls) + "\n")
        print(case, "ok:", *lines, sep="\n  ")
        print(f"{case}: lm loss 16-bit vs fp32, relative, iterations 1-6:", rel(losses(lines), losses(fp32)))
        if "--normalization" in mx.CASES[case][1]:
            shim = run(case, os.path.join(tmp, "c"), (), port + 2, rmsnorm="shim")
            print(f"{case}: lm loss with the shim's bf16-internal RMSNorm vs fp32-internal, relative:",
                  rel(losses(shim), losses(lines)))


if __name__ == "__main__":
    if not mcs.megatron_root():
        raise SystemExit("set MC_MEGATRON_ROOT")
    for i, case in enumerate(sys.argv[1:] or mx.CASES):
        if mx.python_for(case) is None:
            raise SystemExit(f"{case}: needs PyPI torch 2.x (MC_TORCH2_PYTHON)")
        make(case, 29810 + 4 * list(mx.CASES).index(case))
