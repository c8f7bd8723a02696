"""torch_dist with the distributed optimizer and --no-ckpt-fully-parallel-save: Megatron-LM
core_v0.12.1's 'dp_zero_gather_scatter' sharding type (DistributedOptimizer.
sharded_param_state_dp_zero), GPT-2 style, dp2, fp32:
- the layout is Megatron's, compared with its own save (tests/golden/checkpointing/
  dist_gpt_dp2_dp_zero/save, needs torch 2: MC_TORCH2_PYTHON): every key and chunk, each item in
  the same __<rank>_<k>.distcp at the same place in the file's order, only data-parallel rank 0
  writing (__0_*.distcp alone); the sharded objects optimizer.distributed.dp_group_idx_0.optimizer
  (param_groups with the step) and .param_state (the state gathered on data-parallel rank 0:
  {'buckets_coalesced': True, 0: {(torch.float32, torch.float32): {param, exp_avg, exp_avg_sq,
  numel_unpadded}}}, each world tensor as long as Megatron's with its zero gaps at the same
  places); common.pt's optimizer {'param_state_sharding_type': 'dp_zero_gather_scatter'} and
  args.ckpt_fully_parallel_save False (which Megatron's loader reads the sharding type from);
  Megatron's 'Storing distributed optimizer sharded state of type dp_zero_gather_scatter' line;
  and the keys, file places and common.pt of Megatron's tp2 x dp2 (dp_group_idx_0 and _1) and
  --fp16 (grad_scaler object) saves (layout_tp2dp2/, layout_fp16/: .metadata and common.pt);
- a missing object and a truncated data file: errors naming them;
- ours resumes from Megatron's save at dp2 and dp1 with Megatron's own next losses
  (megatron_train.json) within 1e-5 relative;
- ours resumes from our save at dp2, dp1 and dp4 with the uninterrupted run's losses (1e-6);
- at another tensor / pipeline layout the state is refused with Megatron's message (its
  buffers are those of the saving layout's model chunks), and loads with --no-load-optim;
- Megatron loads our save and continues with our losses (live with MC_MEGATRON_ROOT and
  MC_TORCH2_PYTHON and the megatron-cpu shim's fixload workaround, without which Megatron
  core_v0.12.1 loads no torch_dist distributed-optimizer state; else its logged continuation,
  megatron_loads_ours_log.txt)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402
from test_dist_ckpt_distopt import DIST, DISTOPT, losses, resume  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

NOFPS = ("--no-ckpt-fully-parallel-save",)
LOCAL = ("--transformer-impl", "local")  # as Megatron's reference run: the buffers follow the impl
GOLD = os.path.join(mcs.GOLDEN, "dist_gpt_dp2_dp_zero")
mcs.ALL_CASES.setdefault("gpt_tp2", (2, mcs.GPT2 + ("--tensor-model-parallel-size", "2"), ("--data-path", mcs.CORPUS_A)))

TORCH2_LAYOUT = r'''
import io, pickle, sys, types, torch
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", "megatron.core.dist_checkpointing.strategies.torch"):
    sys.modules[n] = types.ModuleType(n)
sys.modules["megatron.core.dist_checkpointing.strategies.torch"].MCoreSavePlan = type("MCoreSavePlan", (), {})
drop = ("rng_state/",)  # (its own test: test_rng_state.py)
def load(d):
    m = pickle.load(open(d + "/.metadata", "rb"))
    md = {k: (type(v).__name__, tuple(getattr(v, "size", ()) or ()),
              sorted((tuple(c.offsets), tuple(c.sizes)) for c in getattr(v, "chunks", [])))
          for k, v in m.state_dict_metadata.items() if not k.startswith(drop)}
    files, objs = {}, {}
    for k, v in sorted(m.storage_data.items(), key=lambda kv: (kv[1].relative_path, kv[1].offset)):
        if k.fqn.startswith(drop):
            continue
        files.setdefault(v.relative_path, []).append((k.fqn, tuple(k.offset) if k.offset is not None else None))
        if k.fqn.startswith("optimizer.distributed."):
            raw = open(d + "/" + v.relative_path, "rb").read()[v.offset:v.offset + v.length]
            objs[k.fqn] = torch.load(io.BytesIO(raw), weights_only=False)
    c = torch.load(d + "/common.pt", weights_only=False)
    return md, files, objs, c["optimizer"], c["args"].ckpt_fully_parallel_save, m.mcore_data
ours, theirs = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in set(ours[0]) | set(theirs[0]) if ours[0].get(k) != theirs[0].get(k)]
print("keys", len(ours[0]), "differ", sorted(bad)[:5])
print("files", sorted(ours[1]) == sorted(theirs[1]) and all(ours[1][f] == theirs[1][f] for f in ours[1]),
      "per file", {f: len(v) for f, v in sorted(ours[1].items())})
print("common", ours[3] == theirs[3], ours[3], "args.ckpt_fully_parallel_save", ours[4], theirs[4],
      "mcore_data flattened", sum(1 for v in ours[5].values() if v), sum(1 for v in theirs[5].values() if v))
k = "optimizer.distributed.dp_group_idx_0."
go, gt = ours[2][k + "optimizer/shard_0_1"], theirs[2][k + "optimizer/shard_0_1"]
# torch 2's AdamW adds param-group keys torch 1.13 has not (differentiable, decoupled_weight_decay)
groups = (len(go) == len(gt) == 1 and list(go[0]) == list(gt[0]) == ["param_groups"] and
          len(go[0]["param_groups"]) == len(gt[0]["param_groups"]) and
          all(a[x] == b[x] for a, b in zip(go[0]["param_groups"], gt[0]["param_groups"]) for x in a if x != "lr"))
so, st = ours[2][k + "param_state/shard_0_1"], theirs[2][k + "param_state/shard_0_1"]
def shape(s):
    s = s[0]
    return sorted(map(str, s)), s["buckets_coalesced"], {
        str(b): {str(dt): {n: (tuple(t.shape), t.dtype, (t == 0).nonzero().flatten().tolist()) if torch.is_tensor(t) else t
                           for n, t in e.items()} for dt, e in v.items()} for b, v in s.items() if b != "buckets_coalesced"}
print("objects", sorted(ours[2]) == sorted(theirs[2]), "param_groups", groups, "param_state", shape(so) == shape(st),
      shape(so)[0], {b: {dt: e["numel_unpadded"] for dt, e in v.items()} for b, v in shape(so)[2].items()})
'''


def check_layout(save, tmp):
    py = mcs.megatron_python(torch2=True)
    if not py:
        print("layout vs Megatron's save skipped (no torch 2 python: MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))  # torch_stubs
    r = subprocess.run([py, "-W", "ignore", "-c", "import torch_stubs; torch_stubs.install(); exec(%r)" % TORCH2_LAYOUT,
                        os.path.join(save, "iter_0000003"), os.path.join(GOLD, "save", "iter_0000003")],
                       capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout
    check(r.returncode == 0 and "differ []" in out and "files True" in out and "common True" in out and
          "args.ckpt_fully_parallel_save False False" in out and "flattened 0 0" in out and
          "objects True param_groups True param_state True" in out,
          f"dp_zero_gather_scatter layout as Megatron's: {out} {r.stderr[-800:]}")
    print("layout as Megatron's save:", out.replace("\n", "; "))


# .metadata and common.pt of Megatron's saves of two more cases (3 iterations, layout only):
# tp2 x dp2 (two model-parallel groups, dp_group_idx_0 and _1, in __0_* and __1_*) and --fp16
# (a grad_scaler object; the buffers keyed (torch.float16, torch.float32))
LAYOUT_CASES = {
    "tp2dp2": ("gpt_tp2dp2", ()),
    "fp16": ("gpt_dp2", ("--fp16", "--no-masked-softmax-fusion", "--loss-scale", "4096")),
}
mcs.ALL_CASES.setdefault("gpt_tp2dp2", (4, mcs.GPT2 + ("--tensor-model-parallel-size", "2"), ("--data-path", mcs.CORPUS_A)))
TORCH2_KEYS = TORCH2_LAYOUT.split("ours, theirs =")[0].replace(
    'raw = open(d + "/" + v.relative_path, "rb").read()[v.offset:v.offset + v.length]', 'pass').replace(
    'objs[k.fqn] = torch.load(io.BytesIO(raw), weights_only=False)', 'pass') + r'''
ours, theirs = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in set(ours[0]) | set(theirs[0]) if ours[0].get(k) != theirs[0].get(k)]
print("keys", len(ours[0]), "differ", sorted(bad)[:5], "files", ours[1] == theirs[1], "common", ours[3] == theirs[3],
      sorted(ours[1]))
'''


def check_more_layouts(tmp):
    py = mcs.megatron_python(torch2=True)
    if not py:
        print("tp2 x dp2 and fp16 layouts skipped (no torch 2 python)")
        return
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    for tag, (case, extra) in LAYOUT_CASES.items():
        save = os.path.join(tmp, f"layout_{tag}")
        r = mcs.run_ours(case, tmp, DIST + DISTOPT + NOFPS + LOCAL + extra + ("--save", save, "--save-interval", "3"),
                         iters=3)
        check(r.returncode == 0, f"{tag}: our save: {r.stderr[-400:]}")
        r = subprocess.run([py, "-W", "ignore", "-c", "import torch_stubs; torch_stubs.install(); exec(%r)" % TORCH2_KEYS,
                            os.path.join(save, "iter_0000003"), os.path.join(GOLD, f"layout_{tag}")],
                           capture_output=True, text=True, timeout=300, env=env)
        check(r.returncode == 0 and "differ [] files True common True" in r.stdout,
              f"{tag}: layout as Megatron's: {r.stdout} {r.stderr[-600:]}")
        print(f"{tag}: layout as Megatron's save:", r.stdout.strip())


def main():
    tmp = tempfile.mkdtemp(prefix="mc_dist_dp_zero_")
    try:
        save = os.path.join(tmp, "ours")
        r = mcs.run_ours("gpt_dp2", tmp, DIST + DISTOPT + NOFPS + LOCAL + ("--save", save, "--save-interval", str(mcs.SAVE_AT)))
        ours = mcs.train_lines(r.stdout)
        check(r.returncode == 0 and sorted(ours) == [1, 2, 3, 4, 5, 6], f"our dp2 run: {r.stderr[-800:]}")
        check("Storing distributed optimizer sharded state of type dp_zero_gather_scatter" in r.stdout,
              "Megatron's 'Storing distributed optimizer' line")
        check("Warning: With non-parallel ckpt save and DistributedOptimizer, it will be impossible to resume "
              "training with different parallelism. Consider removing flag --no-ckpt-fully-parallel-save."
              in r.stdout + r.stderr, "Megatron's validate_args warning")
        if r.returncode:
            return summary("test_dist_ckpt_dp_zero")
        it3 = os.path.join(save, "iter_0000003")
        check(sorted(n for n in os.listdir(it3) if n.endswith(".distcp")) == ["__0_0.distcp", "__0_1.distcp"],
              f"data-parallel rank 0 alone writes: {sorted(os.listdir(it3))}")
        check_layout(save, tmp)
        check_more_layouts(tmp)
        # ours from Megatron's save: Megatron's own next losses
        theirs = {t["iteration"]: t["loss"]["lm loss"]
                  for t in json.load(open(os.path.join(GOLD, "megatron_train.json")))["train"]}
        gold = os.path.join(tmp, "megatron")
        shutil.copytree(os.path.join(GOLD, "save"), gold)
        for n in (2, 1):
            resume(f"gpt_dp{n}", gold, theirs, tmp, f"Megatron's dp2 dp_zero_gather_scatter save at dp{n}", 1e-5)
        # broken input: the object missing from .metadata, a truncated data file
        bad = os.path.join(tmp, "noobject")
        shutil.copytree(gold, bad)
        m = os.path.join(bad, "iter_0000003", ".metadata")
        data = open(m, "rb").read()
        check(data.count(b"param_state/shard_0_1") == 2, ".metadata names the param_state object")
        open(m, "wb").write(data.replace(b"param_state/shard_0_1", b"param_statX/shard_0_1"))
        r = mcs.run_ours("gpt_dp2", tmp, DIST + DISTOPT + ("--load", bad, "--ckpt-step", "3"), timeout=120)
        check(r.returncode != 0 and "no sharded object optimizer.distributed.dp_group_idx_0.param_state/shard_0_1"
              in r.stderr, f"a missing param_state object is named: {r.stderr[-400:]}")
        bad = os.path.join(tmp, "truncated")
        shutil.copytree(gold, bad)
        f = os.path.join(bad, "iter_0000003", "__0_1.distcp")
        with open(f, "r+b") as fh:
            fh.truncate(os.path.getsize(f) // 2)
        r = mcs.run_ours("gpt_dp2", tmp, DIST + DISTOPT + ("--load", bad, "--ckpt-step", "3"), timeout=120)
        check(r.returncode != 0 and "__0_1.distcp" in r.stderr and "outside the file" in r.stderr,
              f"a truncated data file is named: {r.stderr[-400:]}")
        # ours from ours, over other data-parallel sizes
        lo = losses(ours)
        for n in (2, 1, 4):
            resume(f"gpt_dp{n}", save, lo, tmp, f"our dp2 dp_zero_gather_scatter save at dp{n}", 1e-6)
        # the buffers of a --transformer-impl transformer_engine run (megatron.c's default, as
        # Megatron's) are in that model's parameter order (norms fused into the linears): the
        # loader takes the order from the saved args, not from the torch_dist names
        te = os.path.join(tmp, "ours_te")
        r = mcs.run_ours("gpt_dp2", tmp, DIST + DISTOPT + NOFPS + ("--save", te, "--save-interval", "3"))
        check(r.returncode == 0, f"our transformer_engine-impl save: {r.stderr[-400:]}")
        resume("gpt_dp2", te, lo, tmp, "our transformer_engine-impl dp_zero_gather_scatter save at dp2 (local impl)",
               1e-6, LOCAL)
        resume("gpt_dp1", te, lo, tmp, "our transformer_engine-impl dp_zero_gather_scatter save at dp1", 1e-6)
        # the ordinary optimizer: refused, naming the option that loads it
        r = mcs.run_ours("gpt_dp1", tmp, DIST + ("--load", save, "--ckpt-step", "3"), timeout=120)
        check(r.returncode != 0 and "'dp_zero_gather_scatter'" in r.stderr and "add --use-distributed-optimizer"
              in r.stderr, f"the ordinary optimizer refuses it: {r.stderr[-400:]}")
        # another tensor-parallel layout: Megatron's refusal; the weights alone load
        r = mcs.run_ours("gpt_tp2", tmp, DIST + DISTOPT + ("--load", save, "--ckpt-step", "3",
                                                           "--make-vocab-size-divisible-by", "32"), timeout=120)
        check(r.returncode != 0 and "mismatch after resume ((2, 1, 0, 0) vs (1, 1, 0, 0) from checkpoint): not "
              "supported for DistributedOptimizer with sharding type dp_zero_gather_scatter" in r.stderr,
              f"tp2 refuses the dp2 dp_zero_gather_scatter state: {r.stderr[-500:]}")
        check("(TP, PP, encoder TP, encoder PP) mismatch after resume ((2, 1, 0, 0) vs (1, 1, 0, 0) from "
              "checkpoint): RNG state will be ignored" in r.stdout and " loading distributed checkpoint" not in r.stdout,
              "Megatron's RNG line, then the refusal before loading")
        print("at tp2:", [l for l in r.stderr.splitlines() if "mismatch after resume" in l][:1])
        r = mcs.run_ours("gpt_tp2", tmp, DIST + DISTOPT + ("--load", save, "--ckpt-step", "3", "--no-load-optim",
                                                           "--make-vocab-size-divisible-by", "32"))
        check(r.returncode == 0 and sorted(mcs.train_lines(r.stdout)) == [4, 5, 6], f"tp2 --no-load-optim: {r.stderr[-400:]}")
        mcs.megatron_continues("gpt_dp2", save, ours, tmp, DIST + DISTOPT + NOFPS + ("--no-load-rng",), 29981,
                               os.path.join(GOLD, "megatron_loads_ours_log.txt"),
                               "dp_zero_gather_scatter save", check)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt_dp_zero")


if __name__ == "__main__":
    sys.exit(main())
