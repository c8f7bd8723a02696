"""torch_dist checkpoints with the distributed optimizer (--use-distributed-optimizer --ckpt-format
torch_dist, Megatron-LM core_v0.12.1's 'fully_sharded_model_space' state of the default
--ckpt-fully-parallel-save), GPT-2 style, dp2, fp32:
- the layout is Megatron's: every key, global shape and chunk (the optimizer state as each
  data-parallel rank's flattened ranges), each chunk in the same __<rank>_<k>.distcp at the same
  place in the file's order (the writing spread over the data-parallel ranks as Megatron's
  FullyParallelSaveStrategyWrapper spreads it), mcore_data's nd_reformulated_orig_global_shape,
  and common.pt's optimizer (param_state, param_state_sharding_type): compared with Megatron's own
  save, tests/golden/checkpointing/dist_gpt_dp2_distopt/save (needs torch 2: MC_TORCH2_PYTHON);
- ours resumes from Megatron's save at dp2 and dp1 with Megatron's own next losses (its logged
  run, megatron_train.json) within 1e-5 relative;
- ours resumes from our dp2 save at dp2, dp1 and dp4 with the uninterrupted run's losses
  (1e-6 relative: the state reshards over the data-parallel ranks), and from our tp2 x dp2 and
  pp2 x vpp2 x dp2 saves at tp1 x dp1 (1e-5);
- the ordinary optimizer refuses the distributed optimizer's state (as Megatron does);
- Megatron loads our save and continues with our losses (live with MC_MEGATRON_ROOT and
  MC_TORCH2_PYTHON, with the megatron-cpu shim's fixload workaround for Megatron's own failure
  to load any torch_dist distributed-optimizer state; else its logged continuation,
  megatron_loads_ours_log.txt);
- PyTorch's torch.distributed.checkpoint reads our save: every tensor, and each fp32_param,
  unflattened, equals the model weight it is the main copy of."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

DIST = ("--ckpt-format", "torch_dist")
DISTOPT = ("--use-distributed-optimizer",)
GOLD = os.path.join(mcs.GOLDEN, "dist_gpt_dp2_distopt")
for n in (1, 2, 4):
    mcs.ALL_CASES.setdefault(f"gpt_dp{n}", (n, mcs.GPT2, ("--data-path", mcs.CORPUS_A)))


def losses(lines):
    return {it: mcs.numbers(rest).get("lm loss", float("nan")) for it, (_, rest) in lines.items()}


def close(a, b, tol):
    return abs(a - b) <= tol * abs(b)


def resume(case, load, want, tmp, tag, tol, extra=()):
    """Ours loads iteration 3 of `load` with the distributed optimizer and continues; lm loss of
    iterations 4-6 against want[it]."""
    r = mcs.run_ours(case, tmp, DIST + DISTOPT + ("--load", load, "--ckpt-step", "3") + tuple(extra))
    mine = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(mine) == [4, 5, 6], f"{tag}: resumed: {r.stderr[-600:]}")
    lm = losses(mine)
    for it in sorted(mine):
        check(close(lm[it], want[it], tol), f"{tag} {it}: lm loss {lm[it]} vs {want[it]}")
    print(f"{tag}: iterations 4-6 (resumed, reference):", [(lm[i], want[i]) for i in sorted(mine)])


TORCH2_LAYOUT = r'''
import pickle, sys, types, torch
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", "megatron.core.dist_checkpointing.strategies.torch"):
    sys.modules[n] = types.ModuleType(n)
sys.modules["megatron.core.dist_checkpointing.strategies.torch"].MCoreSavePlan = type("MCoreSavePlan", (), {})
drop = ()  # every key, the rerun_state_machine_state and rng_state objects included
def load(d):
    m = pickle.load(open(d + "/.metadata", "rb"))
    md = {k: (type(v).__name__, tuple(getattr(v, "size", ()) or ()),
              sorted((tuple(c.offsets), tuple(c.sizes)) for c in getattr(v, "chunks", [])))
          for k, v in m.state_dict_metadata.items() if not k.startswith(drop)}
    files, rng = {}, {}  # rng_state: its writing rank
    for k, v in sorted(m.storage_data.items(), key=lambda kv: (kv[1].relative_path, kv[1].offset)):
        if k.fqn.startswith("rng_state/"):
            rng[k.fqn] = v.relative_path.split("_")[2]
        if not k.fqn.startswith(drop):
            files.setdefault(v.relative_path, []).append((k.fqn, tuple(k.offset) if k.offset is not None else None))
    mc = {k: v for k, v in m.mcore_data.items() if not k.startswith(drop)}
    o = torch.load(d + "/common.pt", weights_only=False)["optimizer"]
    common = (sorted(o), o["param_state_sharding_type"], {i: {k: float(v) for k, v in e.items()} for i, e in o["param_state"].items()},
              [g["step"] for g in o["optimizer"]["param_groups"]])
    return md, files, mc, common, rng
ours, theirs = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in set(ours[0]) | set(theirs[0]) if ours[0].get(k) != theirs[0].get(k)]
print("keys", len(ours[0]), "flattened", sum(1 for v in ours[2].values() if v), "differ", sorted(bad)[:5])
print("files", sorted(ours[1]) == sorted(theirs[1]) and all(ours[1][f] == theirs[1][f] for f in ours[1]),
      "per rank", {f: len(v) for f, v in sorted(ours[1].items())})
print("mcore_data", ours[2] == theirs[2])
print("common", ours[3] == theirs[3], ours[3][:2], len(ours[3][2]))
print("rng_state by the same ranks", ours[4] == theirs[4] and len(ours[4]) > 0)
'''


def check_layout(save, tmp):
    py = mcs.megatron_python(torch2=True)
    if not py:
        print("layout vs Megatron's save skipped (no torch 2 python: MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return
    with open(os.path.join(tmp, "layout.py"), "w") as f:
        f.write(TORCH2_LAYOUT)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))  # torch_stubs
    r = subprocess.run([py, "-W", "ignore", "-c", "import torch_stubs; torch_stubs.install(); "
                        "exec(open(%r).read())" % os.path.join(tmp, "layout.py"),
                        os.path.join(save, "iter_0000003"), os.path.join(GOLD, "save", "iter_0000003")],
                       capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout
    check(r.returncode == 0 and "differ []" in out and "files True" in out and "mcore_data True" in out
          and "rng_state by the same ranks True" in out
          and "common True" in out, f"layout as Megatron's: {out} {r.stderr[-800:]}")
    print("layout as Megatron's save:", out.replace("\n", "; "))


TORCH2_READ = r'''
import sys, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
d = sys.argv[1]
md = FileSystemReader(d).read_metadata()
sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
      if type(v).__name__ == "TensorStorageMetadata"}
dcp.load(sd, storage_reader=FileSystemReader(d), no_dist=True)
bad, n = [], 0
for k, v in sd.items():
    if not k.startswith("optimizer.state.fp32_param."):
        continue
    shape = md.mcore_data[k]["nd_reformulated_orig_global_shape"]
    frag = v.shape[:-1]
    local = [s // f for s, f in zip(shape, frag)]
    # block (i, j, ...) of the original tensor is row (i, j, ...) of the reformulated one
    full = v.reshape(*frag, *local)
    nd = len(shape)
    full = full.permute(*[x for k in range(nd) for x in (k, nd + k)]).reshape(shape)
    n += 1
    if not torch.equal(full, sd[k[len("optimizer.state.fp32_param."):]]):
        bad.append(k)
moments = [k for k in sd if k.startswith("optimizer.state.exp_avg")]
print("read", len(sd), "tensors;", n, "fp32_param equal to the weights; differing", bad[:4], "moments", len(moments),
      "finite", all(torch.isfinite(sd[k]).all().item() for k in moments))
'''


def dcp_reads(save, tmp):
    py = mcs.megatron_python(torch2=True)
    if not py:
        print("DCP read skipped (no torch 2 python: MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return
    r = subprocess.run([py, "-W", "ignore", "-c", TORCH2_READ, os.path.join(save, "iter_0000003")],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "differing []" in r.stdout and " 0 fp32_param" not in r.stdout and "finite True" in r.stdout,
          f"DCP reads our save: {r.stdout} {r.stderr[-800:]}")
    print("torch.distributed.checkpoint:", r.stdout.strip())


def main():
    tmp = tempfile.mkdtemp(prefix="mc_dist_distopt_")
    try:
        save = os.path.join(tmp, "ours")
        r = mcs.run_ours("gpt_dp2", tmp, DIST + DISTOPT + ("--save", save, "--save-interval", str(mcs.SAVE_AT)))
        ours = mcs.train_lines(r.stdout)
        check(r.returncode == 0 and sorted(ours) == [1, 2, 3, 4, 5, 6], f"our dp2 run: {r.stderr[-800:]}")
        check("Storing distributed optimizer sharded state of type fully_sharded_model_space" in r.stdout,
              "Megatron's 'Storing distributed optimizer' line")
        if r.returncode:
            return summary("test_dist_ckpt_distopt")
        it3 = os.path.join(save, "iter_0000003")
        check(sorted(n for n in os.listdir(it3) if n.endswith(".distcp")) ==
              ["__0_0.distcp", "__0_1.distcp", "__1_0.distcp", "__1_1.distcp"],
              f"both data-parallel ranks write: {sorted(os.listdir(it3))}")
        check_layout(save, tmp)
        # ours from Megatron's save: Megatron's own next losses
        theirs = {t["iteration"]: t["lm loss"] for t in json.load(open(os.path.join(GOLD, "megatron_train.json")))}
        gold = os.path.join(GOLD, "save")
        resume("gpt_dp2", gold, theirs, tmp, "Megatron's dp2 save at dp2", 1e-5)
        resume("gpt_dp1", gold, theirs, tmp, "Megatron's dp2 save at dp1", 1e-5)
        # ours from ours, resharded over data-parallel sizes
        lo = losses(ours)
        for n in (2, 1, 4):
            resume(f"gpt_dp{n}", save, lo, tmp, f"our dp2 save at dp{n}", 1e-6)
        # other tensor x pipeline layouts: tp2 x dp2 and pp2 x vpp2 x dp2 saves load at tp1 x dp1
        for case, extra in (("gpt_tp2dp2_distopt", ("--make-vocab-size-divisible-by", "128")),
                            ("gpt_dp2pp2vpp2_distopt", ())):
            other = os.path.join(tmp, case)
            r = mcs.run_ours(case, tmp, DIST + ("--save", other, "--save-interval", "3"))
            check(r.returncode == 0, f"{case}: our run: {r.stderr[-600:]}")
            resume("gpt_dp1", other, losses(mcs.train_lines(r.stdout)), tmp, f"our {case} save at tp1 x dp1",
                   1e-5, ("--data-path", mcs.ALL_CASES[case][2][1]) + extra)
        # the ordinary optimizer refuses it, as Megatron does
        r = mcs.run_ours("gpt_dp1", tmp, DIST + ("--load", save, "--ckpt-step", "3"))
        check(r.returncode != 0 and "saved with --use-distributed-optimizer" in r.stderr and
              "Global shape mismatch" in r.stderr, f"ordinary optimizer refuses: {r.stderr[-400:]}")
        print("without --use-distributed-optimizer:", r.stderr.strip().splitlines()[-1][:200])
        mcs.megatron_continues("gpt_dp2", save, ours, tmp, DIST + DISTOPT, 29887,
                               os.path.join(GOLD, "megatron_loads_ours_log.txt"),
                               "distributed-optimizer torch_dist save", check, every=False)
        dcp_reads(save, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt_distopt")


if __name__ == "__main__":
    sys.exit(main())
