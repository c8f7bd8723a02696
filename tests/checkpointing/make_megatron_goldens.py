"""Writes tests/golden/checkpointing/<case>/ for every case of megatron_cases.py with Megatron-LM
core_v0.12.1 itself (MC_MEGATRON_ROOT: a core_v0.12.1 checkout with its dataset helpers built):
save/ (the iteration-3 checkpoint of a 6-iteration run, rng_state included) and megatron_log.txt
(Megatron's training lines of iterations 1-6); for the torch_dist cases (megatron_cases.DIST_CASES,
named on the command line) dist_<case>/ with Megatron under PyPI's torch 2.x. Usage:
  MC_MEGATRON_ROOT=... /usr/bin/python3 tests/checkpointing/make_megatron_goldens.py [case ...]"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402


def make(case, port):
    dist = case in mcs.DIST_CASES  # torch_dist: PyPI torch 2.x (bench/setup_torch.sh)
    with tempfile.TemporaryDirectory() as tmp:
        save = os.path.join(tmp, "save")
        extra = ("--ckpt-format", "torch_dist") if dist else ()
        rcs, out = mcs.run_megatron(case, tmp, extra + ("--save", save, "--save-interval", str(mcs.SAVE_AT)),
                                    port=port, python=mcs.megatron_python(dist))
        lines = [l for l in out.splitlines() if mcs.TRAIN.match(l)]
        if any(rcs) or len(lines) != mcs.ITERS:
            print(out[-3000:])
            raise SystemExit(f"{case}: Megatron failed {rcs}")
        dst = os.path.join(mcs.GOLDEN, ("dist_" if dist else "") + case)
        shutil.rmtree(dst, ignore_errors=True)
        mcs.copy_checkpoint(save, os.path.join(dst, "save"), mcs.SAVE_AT)
        with open(os.path.join(dst, "megatron_log.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(case, "ok:", *lines, sep="\n  ")


if __name__ == "__main__":
    if not mcs.megatron_root():
        raise SystemExit("set MC_MEGATRON_ROOT")
    for i, case in enumerate(sys.argv[1:] or mcs.CASES):  # DIST_CASES by name
        make(case, 29610 + i)
