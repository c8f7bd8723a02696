"""--dist-ckpt-strictness on a torch_dist load, as Megatron-LM core_v0.12.1's StrictHandling
(megatron/core/dist_checkpointing/validation.py), on Megatron's own GPT-2 tp1 save
(tests/golden/checkpointing/dist_gpt_tp1) and two edits of it made with PyTorch's DCP classes
(torch 2, MC_TORCH2_PYTHON):
- untouched: every mode loads it without a word (no false "missing" key: the optimizer state,
  rng_state, rerun_state_machine_state and _extra_state objects are all requested, as Megatron's
  load requests them);
- an extra key (a tensor no rank requests, "missing" in Megatron's terms): ignored by default and
  by the *_unexpected modes; log_all warns with Megatron's message and loads, raise_all fails with
  it;
- a key the model needs removed (decoder.final_layernorm.bias, "unexpected"): raise_unexpected
  fails with Megatron's message naming it; log_unexpected warns with it and the load still fails
  (Megatron's strict model.load_state_dict), as does the default;
- without its rerun_state_machine_state object (which Megatron's load requests) the load is
  refused, naming the object."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

SRC = os.path.join(mcs.GOLDEN, "dist_gpt_tp1", "save")
EXTRA, GONE = "decoder.layers.self_attention.extra_weight", "decoder.final_layernorm.bias"
MISSING_MSG = ("Some keys found in the checkpoint are missing in the provided sharded state dict. \n"
               "Missing keys (for all ranks): {'%s'}. " % EXTRA)
UNEXPECTED_MSG = ("Unexpected keys (not found in the checkpoint) encountered in the provided sharded "
                  "state dict. \nUnexpected keys (for this rank): {'%s'}. " % GONE)

EDIT = r'''
import copy, pickle, sys, types
mod = "megatron.core.dist_checkpointing.strategies.torch"
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", mod):
    sys.modules[n] = types.ModuleType(n)
plan = type("MCoreSavePlan", (), {})
plan.__module__ = mod
sys.modules[mod].MCoreSavePlan = plan
path, what = sys.argv[1] + "/.metadata", sys.argv[2]
m = pickle.load(open(path, "rb"))
if what == "extra":  # a second key over the chunks of decoder.layers.mlp.linear_fc2.weight
    src = "decoder.layers.mlp.linear_fc2.weight"
    m.state_dict_metadata[sys.argv[3]] = copy.deepcopy(m.state_dict_metadata[src])
    for k, v in list(m.storage_data.items()):
        if k.fqn == src:
            m.storage_data[type(k)(fqn=sys.argv[3], offset=k.offset, index=k.index)] = v
else:  # the key removed
    del m.state_dict_metadata[sys.argv[3]]
    m.storage_data = {k: v for k, v in m.storage_data.items() if k.fqn != sys.argv[3]}
pickle.dump(m, open(path, "wb"))
'''


def edited(tmp, what, key, name=None):
    d = os.path.join(tmp, name or what)
    shutil.copytree(SRC, d)
    r = subprocess.run([mcs.megatron_python(torch2=True), "-c", EDIT, os.path.join(d, "iter_0000003"), what, key],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"editing the checkpoint ({what}): {r.stderr[-500:]}")
    return d


def load(tmp, ckpt, mode):
    return mcs.run_ours("gpt_tp1", tmp, ("--ckpt-format", "torch_dist", "--load", ckpt, "--ckpt-step", "3",
                                         "--dist-ckpt-strictness", mode))


def main():
    if not mcs.megatron_python(torch2=True):
        print("test_dist_ckpt_strictness skipped: no torch 2 python (MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return summary("test_dist_ckpt_strictness")
    tmp = tempfile.mkdtemp(prefix="mc_dist_strict_")
    try:
        for mode in ("raise_all", "log_all"):
            r = load(tmp, SRC, mode)
            check(r.returncode == 0 and "WARNING:megatron.core.dist_checkpointing" not in r.stdout,
                  f"Megatron's own checkpoint with {mode}: {r.stdout[-300:]} {r.stderr[-500:]}")
        extra = edited(tmp, "extra", EXTRA)
        for mode in ("assume_ok_unexpected", "raise_unexpected", "log_unexpected"):
            r = load(tmp, extra, mode)
            check(r.returncode == 0 and "WARNING:megatron.core.dist_checkpointing" not in r.stdout,
                  f"an extra key, {mode}: loads silently: {r.stderr[-400:]}")
        r = load(tmp, extra, "log_all")
        check(r.returncode == 0 and "WARNING:megatron.core.dist_checkpointing.validation:" + MISSING_MSG in r.stdout,
              f"an extra key, log_all: Megatron's warning: {r.stdout[-600:]} {r.stderr[-300:]}")
        r = load(tmp, extra, "raise_all")
        check(r.returncode != 0 and "CheckpointingException: " + MISSING_MSG in r.stderr,
              f"an extra key, raise_all: Megatron's error: {r.stderr[-600:]}")
        gone = edited(tmp, "gone", GONE)
        r = load(tmp, gone, "raise_unexpected")
        check(r.returncode != 0 and "CheckpointingException: " + UNEXPECTED_MSG in r.stderr,
              f"a removed key, raise_unexpected: Megatron's error: {r.stderr[-600:]}")
        r = load(tmp, gone, "log_unexpected")
        check(r.returncode != 0 and "WARNING:megatron.core.dist_checkpointing.validation:" + UNEXPECTED_MSG in r.stdout
              and GONE in r.stderr, f"a removed key, log_unexpected: warning, then the failed load: "
              f"{r.stdout[-400:]} {r.stderr[-400:]}")
        r = load(tmp, gone, "assume_ok_unexpected")
        check(r.returncode != 0 and GONE in r.stderr and "WARNING:megatron.core.dist" not in r.stdout,
              f"a removed key, default: the failed load: {r.stderr[-400:]}")
        # the rerun state: Megatron requests this rank's object when common.pt has a rerun_state_machine
        rerun = "rerun_state_machine_state/shard_0.0_1.1"
        no_rerun = edited(tmp, "gone", rerun, "no_rerun")
        r = load(tmp, no_rerun, "assume_ok_unexpected")
        check(r.returncode != 0 and "no sharded object " + rerun in r.stderr,
              f"no rerun_state_machine_state object: refused by name: {r.stderr[-400:]}")
        print("strictness: untouched, extra-key and removed-key checkpoints as Megatron's modes")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt_strictness")


if __name__ == "__main__":
    sys.exit(main())
