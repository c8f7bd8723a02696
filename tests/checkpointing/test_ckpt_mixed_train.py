"""pretrain_gpt --bf16 / --fp16 checkpoints against Megatron-LM core_v0.12.1's own (the goldens of
tests/golden/checkpointing/mixed_bf16, mixed_fp16: the gpt_tp1 case after 2 iterations):
  - our save of the same run has Megatron's keys, types, dtypes and shapes everywhere and the same
    args values (bf16 / fp16 / params_dtype / accumulate_allreduce_grads_in_fp32 ...);
  - resuming from Megatron's checkpoint, iteration 3's lm loss is Megatron's own continuation's
    (megatron_continue_log.txt) to bf16 / fp16 accuracy, so the 16-bit weights the first forward
    reads are the loaded ones (a stale or unrefreshed copy gives another loss).
Skipped (with a line saying so) while this build still refuses --bf16 / --fp16."""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mc  # noqa: E402
import test_ckpt_mixed as tm  # noqa: E402
from mc_test import check, summary  # noqa: E402

GOLD = os.path.join(mc.SRC, "tests", "golden", "checkpointing")
FILE = os.path.join("iter_0000002", "mp_rank_00", "model_optim_rng.pt")
LOCAL = ("--transformer-impl", "local")
# args Megatron's CPU run sets otherwise (paths, its CPU-only options), as test_checkpoint.py
SKIP = {"save", "load", "data_cache_path", "rank", "local_rank", "world_size", "distributed_backend",
        "transformer_impl", "gradient_accumulation_fusion", "persist_layer_norm", "use_cpu_initialization",
        "no_persist_layer_norm", "exit_interval", "masked_softmax_fusion", "save_interval", "data_path"}
# fp16: megatron.c accumulates grads in fp32 only (it refuses --fp16 without the option); the
# golden is Megatron's default fp16 run, so that one arg differs (the forward, the loss of the
# resumed iteration and the checkpoint layout of a non-distributed run do not depend on it)
PRECISIONS = {"bf16": ("--bf16",),
              "fp16": ("--fp16", "--initial-loss-scale", "4096", "--accumulate-allreduce-grads-in-fp32")}
ARG_DIFF = {"bf16": set(), "fp16": {"accumulate_allreduce_grads_in_fp32"}}


def refused(out):
    return "mixed precision is not available in megatron.c yet" in out


def test_save_vs_megatron(tmp, prec):
    out = os.path.join(tmp, f"save_{prec}")
    r = mc.run_ours("gpt_tp1", tmp, PRECISIONS[prec] + LOCAL + ("--save", out, "--save-interval", "2"), iters=2)
    check(r.returncode == 0, f"{prec} save run: {r.stderr[-400:]}")
    if r.returncode:
        return
    ours, gold = tm.load(os.path.join(out, FILE)), tm.load(os.path.join(GOLD, f"mixed_{prec}", "save", FILE))
    check(list(ours) == list(gold), f"{prec} top-level keys {list(ours)}")
    bad = tm.same_structure(ours["model"], gold["model"], "model") + \
        tm.same_structure(ours["optimizer"]["fp32_from_fp16_params"], gold["optimizer"]["fp32_from_fp16_params"], "fp32") + \
        tm.same_structure(ours["optimizer"].get("grad_scaler"), gold["optimizer"].get("grad_scaler"), "grad_scaler")
    check(list(ours["optimizer"]) == list(gold["optimizer"]) and not bad,
          f"{prec} model and optimizer as Megatron's: {list(ours['optimizer'])} {bad[:4]}")
    if prec == "fp16":
        check(str(ours["optimizer"]["grad_scaler"]) == str(gold["optimizer"]["grad_scaler"]),
              f"fp16 dynamic scaler after 2 clean steps: {ours['optimizer']['grad_scaler']}")
    va, vg = vars(ours["args"]), vars(gold["args"])
    check(sorted(va) == sorted(vg), f"{prec} args attributes: missing {[k for k in vg if k not in va]}, "
                                    f"extra {[k for k in va if k not in vg]}")
    diff = [(k, va[k], vg[k]) for k in vg if k in va and k not in SKIP | ARG_DIFF[prec] and
            (type(va[k]) is not type(vg[k]) or va[k] != vg[k])]
    check(not diff, f"{prec} args values differ from Megatron's: {diff[:6]}")


LOSS = re.compile(r"lm loss: ([\d.E+-]+)")


def test_resume_megatron(tmp, prec):
    gold_dir = os.path.join(GOLD, f"mixed_{prec}")
    log = os.path.join(gold_dir, "megatron_continue_log.txt")
    if not os.path.exists(log):
        return
    want = float(LOSS.search(open(log).read()).group(1))
    load = os.path.join(tmp, f"load_{prec}")
    shutil.copytree(os.path.join(gold_dir, "save"), load)
    r = mc.run_ours("gpt_tp1", tmp, PRECISIONS[prec] + LOCAL + ("--load", load, "--use-checkpoint-opt_param-scheduler"),
                    iters=3)
    lines = mc.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(lines) == [3], f"{prec}: resumed at iteration 3: {r.stderr[-300:]}")
    if 3 in lines:
        got = float(LOSS.search(lines[3][1]).group(1))
        check(abs(got - want) <= 2e-4 * abs(want), f"{prec}: iteration 3 lm loss {got} vs Megatron's {want}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        probe = mc.run_ours("gpt_tp1", tmp, ("--bf16",) + LOCAL, iters=1)
        if refused(probe.stdout + probe.stderr):
            print("SKIP test_ckpt_mixed_train: this build refuses --bf16 (mixed precision not enabled)")
            return 0
        for prec in PRECISIONS:
            test_save_vs_megatron(tmp, prec)
            test_resume_megatron(tmp, prec)
    return summary("test_ckpt_mixed_train")


if __name__ == "__main__":
    sys.exit(main())
