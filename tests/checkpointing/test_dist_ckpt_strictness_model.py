"""--dist-ckpt-strictness with a model that differs from the checkpoint's (Megatron-LM
core_v0.12.1's StrictHandling, megatron/core/dist_checkpointing/validation.py), on megatron.c's
own torch_dist saves of the Llama-style tp2 case (2 ranks, no torch needed):
- saved without, loaded with --add-qkv-bias: the model requests
  decoder.layers.self_attention.linear_qkv.bias, which the checkpoint lacks (an "unexpected" key
  in Megatron's terms). raise_unexpected fails before reading anything with Megatron's message
  and the directory; log_unexpected prints Megatron's warning on every rank (its logger writes
  each rank's own keys to stdout) and the load still fails (Megatron's strict
  model.load_state_dict); the default fails, naming the key, without a warning;
- saved with, loaded without --add-qkv-bias: the checkpoint holds a key no rank requests
  ("missing"). The default and raise_unexpected load silently, log_all warns on every rank and
  loads, raise_all fails with Megatron's message."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

CASE = "llama_tp2"
BIAS = "decoder.layers.self_attention.linear_qkv.bias"
WARN = "WARNING:megatron.core.dist_checkpointing.validation:"
MISSING_MSG = ("Some keys found in the checkpoint are missing in the provided sharded state dict. \n"
               "Missing keys (for all ranks): {'%s'}. " % BIAS)
UNEXPECTED_MSG = ("Unexpected keys (not found in the checkpoint) encountered in the provided sharded "
                  "state dict. \nUnexpected keys (for this rank): {'%s'}. " % BIAS)


def on_both_ranks(out, msg):
    """msg (several lines) printed by each of the 2 ranks: mpirun forwards the ranks' output a
    line at a time, so one rank's lines can fall between the other's (seen: both first lines,
    then both second lines); each line must appear twice."""
    lines = out.splitlines()
    return all(sum(part in line for line in lines) == 2 for part in msg.split("\n"))


def save(tmp, name, extra=()):
    d = os.path.join(tmp, name)
    r = mcs.run_ours(CASE, tmp, ("--ckpt-format", "torch_dist", "--save", d, "--save-interval", "3") + extra,
                     iters=4)
    check(r.returncode == 0 and os.path.exists(os.path.join(d, "iter_0000003", "common.pt")),
          f"saving {name}: {r.stderr[-500:]}")
    return d


def load(tmp, ckpt, mode, extra=()):
    return mcs.run_ours(CASE, tmp, ("--ckpt-format", "torch_dist", "--load", ckpt,
                                    "--ckpt-step", "3", "--dist-ckpt-strictness", mode) + extra,
                        iters=4)


def main():
    tmp = tempfile.mkdtemp(prefix="mc_dist_strict_model_")
    try:
        plain, biased = save(tmp, "plain"), save(tmp, "biased", ("--add-qkv-bias",))
        it = os.path.join(plain, "iter_0000003")
        # the model requests a key the checkpoint lacks
        r = load(tmp, plain, "raise_unexpected", ("--add-qkv-bias",))
        check(r.returncode != 0 and it in r.stderr and "CheckpointingException: " + UNEXPECTED_MSG in r.stderr
              and "iteration        4/" not in r.stdout,
              f"unexpected key, raise_unexpected: Megatron's error, nothing trained: {r.stderr[-600:]}")
        r = load(tmp, plain, "log_unexpected", ("--add-qkv-bias",))
        check(r.returncode != 0 and on_both_ranks(r.stdout, WARN + UNEXPECTED_MSG) and BIAS in r.stderr,
              f"unexpected key, log_unexpected: the warning on both ranks, then the failed load: "
              f"{r.stdout[-600:]} {r.stderr[-400:]}")
        r = load(tmp, plain, "assume_ok_unexpected", ("--add-qkv-bias",))
        check(r.returncode != 0 and BIAS in r.stderr and WARN not in r.stdout,
              f"unexpected key, default: the failed load naming it: {r.stderr[-400:]}")
        # the checkpoint holds a key nothing requests
        for mode in ("assume_ok_unexpected", "raise_unexpected"):
            r = load(tmp, biased, mode)
            check(r.returncode == 0 and WARN not in r.stdout and "iteration        4/" in r.stdout,
                  f"missing key, {mode}: loads silently: {r.stdout[-300:]} {r.stderr[-400:]}")
        r = load(tmp, biased, "log_all")
        check(r.returncode == 0 and on_both_ranks(r.stdout, WARN + MISSING_MSG),
              f"missing key, log_all: the warning on both ranks, then trains: {r.stdout[-600:]} {r.stderr[-300:]}")
        r = load(tmp, biased, "raise_all")
        check(r.returncode != 0 and "CheckpointingException: " + MISSING_MSG in r.stderr,
              f"missing key, raise_all: Megatron's error: {r.stderr[-600:]}")
        print("strictness: model with an extra and a missing tensor as Megatron's modes")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt_strictness_model")


if __name__ == "__main__":
    sys.exit(main())
