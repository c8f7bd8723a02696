"""megatron.c writes and reads torch_dist checkpoints of --bf16 and --fp16 runs (the ordinary
optimizer, Megatron's Float16OptimizerWithFloat16Params), for the one-process GPT-2 style cases
gpt_bf16 and gpt_fp16_static of tests/mixed/megatron_mixed_cases.py:
- the layout is Megatron's: every key, dtype (the model in bfloat16 / float16, the optimizer's
  exp_avg, exp_avg_sq and fp32 main params "optimizer.state.fp32_param.<key>" in float32), global
  shape and chunk of Megatron's own torch_dist save of the case
  (tests/golden/checkpointing/dist_<case>/save), each chunk in the same file at the same place;
  common.pt's optimizer {'optimizer': ..., 'grad_scaler': ...} as Megatron's;
- Megatron loads ours (its default flags) and continues: iterations 4-6 within 2e-4 relative of ours
  (test_megatron_mixed.py's tolerance), the same learning rate, consumed samples and loss scale
  (Megatron live with MC_MEGATRON_ROOT and PyPI torch 2.x, MC_TORCH2_PYTHON; else its logged run,
  dist_<case>/megatron_loads_ours_log.txt);
- torch.distributed.checkpoint (torch 2.x) reads our tensors, and they equal exactly those of our
  torch-format save of the same run: the 16-bit weights bit for bit, the fp32 main params
  (fp32_from_fp16_params) and the moments;
- ours resumes from ours with the uninterrupted run's losses, and the resumed run's iteration-6
  data files equal the uninterrupted run's byte for byte (so the fp32 main params and moments were
  restored exactly);
- ours resumes from Megatron's own 16-bit torch_dist save and continues within 2e-4 of Megatron's
  own continuation from it (dist_<case>/megatron_log.txt)."""
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mixed"))
import megatron_mixed_cases as mx  # noqa: E402
mcs = mx.mcs
from mc_test import check, summary  # noqa: E402

DIST = ("--ckpt-format", "torch_dist", "--transformer-impl", "local")
REL = 2e-4  # test_megatron_mixed.py's tolerance for 16-bit runs
CASES = {"gpt_bf16": 29911, "gpt_fp16_static": 29913}
GOLDEN = os.path.join(mcs.GOLDEN, "dist_{}")


def close(a, b, tol):
    return abs(a - b) <= tol * abs(b)


def compare(case, what, mine, ref, tol):
    """Iterations 4-6 of `mine` against `ref`: lm loss within tol, the rest equal."""
    check(sorted(mine) == [4, 5, 6], f"{case} {what}: iterations {sorted(mine)}")
    worst = 0.0
    for it in sorted(mine):
        a, b = mx.fields(mine[it][1]), mx.fields(ref.get(it, ("", ""))[1])
        check(mine[it][0] == ref.get(it, ("?",))[0], f"{case} {what} {it}: consumed samples")
        for k in ("learning rate", "loss scale"):
            check(a.get(k) == b.get(k), f"{case} {what} {it}: {k} {a.get(k)} vs {b.get(k)}")
        la, lb = a.get("lm loss", float("nan")), b.get("lm loss", float("nan"))
        check(close(la, lb, tol), f"{case} {what} {it}: lm loss {la} vs {lb}")
        worst = max(worst, abs(la - lb) / abs(lb)) if lb == lb and la == la else worst
    print(f"{case} {what}, iterations 4-6 (this, reference):",
          [(mx.fields(mine[i][1]).get("lm loss"), mx.fields(ref.get(i, ("", ""))[1]).get("lm loss"))
           for i in sorted(mine)], f"largest relative difference {worst:.1e}")


LAYOUT = r'''
import pickle, sys, types, torch
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", "megatron.core.dist_checkpointing.strategies.torch"):
    sys.modules[n] = types.ModuleType(n)
sys.modules["megatron.core.dist_checkpointing.strategies.torch"].MCoreSavePlan = type("MCoreSavePlan", (), {})
def load(d, drop=()):
    m = pickle.load(open(d + "/.metadata", "rb"))
    md = {k: (type(v).__name__, str(getattr(getattr(v, "properties", None), "dtype", None)),
              tuple(getattr(v, "size", ()) or ()),
              sorted((tuple(c.offsets), tuple(c.sizes)) for c in getattr(v, "chunks", [])))
          for k, v in m.state_dict_metadata.items() if not k.startswith(drop)}
    files, rng = {}, {}  # rng_state: its writing rank
    for k, v in sorted(m.storage_data.items(), key=lambda kv: (kv[1].relative_path, kv[1].offset)):
        if k.fqn.startswith("rng_state/"):
            rng[k.fqn] = v.relative_path.split("_")[2]
        if not k.fqn.startswith(drop):
            files.setdefault(v.relative_path, []).append((k.fqn, tuple(k.offset) if k.offset is not None else None))
    return md, files, rng
ours, theirs = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in set(ours[0]) | set(theirs[0]) if ours[0].get(k) != theirs[0].get(k)]
print("keys", len(ours[0]), "differ", sorted(bad)[:5])
print("files", sorted(ours[1]) == sorted(theirs[1]) and all(ours[1][f] == theirs[1][f] for f in ours[1]))
print("rng_state by the same ranks", ours[2] == theirs[2] and len(ours[2]) > 0)
print("dtypes", sorted({v[1] for v in ours[0].values()}))
'''


def check_layout(case, save):
    py = mx.torch2_python()
    if not py:
        print(f"{case}: layout vs Megatron's save skipped (no torch 2 python: MC_TORCH2_PYTHON)")
        return
    gold = os.path.join(GOLDEN.format(case), "save", "iter_0000003")
    r = subprocess.run([py, "-W", "ignore", "-c", LAYOUT, os.path.join(save, "iter_0000003"), gold],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "differ []" in r.stdout and "files True" in r.stdout and
          "rng_state by the same ranks True" in r.stdout,
          f"{case}: layout as Megatron's: {r.stdout} {r.stderr[-600:]}")
    print(f"{case}: layout as Megatron's:", " / ".join(r.stdout.strip().splitlines()))


def common_optimizer(case, save):
    """common.pt's optimizer as Megatron's: {'optimizer': {state: common_step, param_groups},
    'grad_scaler' (fp16: the constant scaler's {}; none for bf16)}; no fp32_from_fp16_params."""
    import torch
    import torch_stubs
    torch_stubs.install()

    # the param groups without the keys torch 2's AdamW adds to them (ours writes torch 1.13's,
    # as for fp32 torch_dist saves; torch 2 fills them in on load)
    torch2_only = ("differentiable", "fused", "decoupled_weight_decay")

    def opt(d):
        o = torch.load(os.path.join(d, "iter_0000003", "common.pt"))["optimizer"]
        return (sorted(o), sorted(o["optimizer"]), sorted(o["optimizer"]["state"]), o.get("grad_scaler"),
                [sorted((k, v) for k, v in g.items() if k not in torch2_only)
                 for g in o["optimizer"]["param_groups"]])
    ours, theirs = opt(save), opt(os.path.join(GOLDEN.format(case), "save"))
    check(ours == theirs, f"{case}: common.pt's optimizer {ours[:4]} vs Megatron's {theirs[:4]}")
    print(f"{case}: common.pt's optimizer as Megatron's:", ours[:4])


def megatron_continues(case, save, ours, tmp):
    py = mx.torch2_python()
    gold = os.path.join(GOLDEN.format(case), "megatron_loads_ours_log.txt")
    if mcs.megatron_root() and py:
        rcs, out = mx.run_megatron(case, tmp, DIST + ("--load", save, "--ckpt-step", "3"),
                                   port=CASES[case])
        check(not any(rcs), f"{case}: Megatron loading ours: {rcs} {out[-800:]}")
        how = "live"
    else:
        out, how = open(gold).read(), "its logged run"
    compare(case, f"Megatron ({how}) from our torch_dist save", mx.train_lines(out), ours, REL)


DCP_READ = r'''
import sys, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
d = sys.argv[1]
md = FileSystemReader(d).read_metadata()
sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
      if type(v).__name__ == "TensorStorageMetadata"}
dcp.load(sd, storage_reader=FileSystemReader(d), no_dist=True)
torch.save(sd, sys.argv[2])
'''


def dcp_reads(case, save, tmp):
    """DCP's tensors equal our torch-format save's: weights (16-bit bits), main params, moments."""
    py = mx.torch2_python()
    if not py:
        print(f"{case}: DCP read skipped (no torch 2 python: MC_TORCH2_PYTHON)")
        return
    dump = os.path.join(tmp, f"dcp_{case}.pt")
    r = subprocess.run([py, "-W", "ignore", "-c", DCP_READ, os.path.join(save, "iter_0000003"), dump],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"{case}: DCP reads our checkpoint: {r.stderr[-800:]}")
    if r.returncode:
        return
    tsave = os.path.join(tmp, f"torch_{case}")
    # the TE names, as torch_dist; the unfused attention of the local-spec run being compared
    r2 = mx.run_ours(case, tmp, ("--ckpt-format", "torch", "--save", tsave,
                                 "--attention-backend", "unfused",
                                 "--save-interval", "3", "--exit-interval", "3"))
    check(r2.returncode == 0, f"{case}: torch-format save: {r2.stderr[-400:]}")
    import torch
    import torch_stubs
    torch_stubs.install()
    g = torch.load(dump)
    t = torch.load(os.path.join(tsave, "iter_0000003", "mp_rank_00", "model_optim_rng.pt"))
    want = torch.bfloat16 if "--bf16" in mx.CASES[case][2] else torch.float16
    keys, bad = [], []
    for name, v in t["model"].items():
        if name.endswith("_extra_state"):
            continue
        key, layer = name, None
        if name.startswith("decoder.layers."):
            parts = name.split(".")
            key, layer = ".".join(parts[:2] + parts[3:]), int(parts[2])
        keys.append((name, key, layer))
        full = g[key][layer] if layer is not None else g[key]
        if not (v.dtype == want == full.dtype and torch.equal(full.view(torch.int16), v.view(torch.int16))):
            bad.append(name)
    # the optimizer: torch state index k and fp32_from_fp16_params in the param groups' order
    o = t["optimizer"]
    order = [i for grp in o["optimizer"]["param_groups"] for i in grp["params"]]
    mains = [p for grp in o["fp32_from_fp16_params"] for p in grp]
    n_opt = 0
    for idx, main in zip(order, mains):
        st = o["optimizer"]["state"][idx]
        # the tensor of this index: the one of the same values among the fp32_param keys
        hits = []
        for k, v in g.items():
            if k.startswith("optimizer.state.fp32_param."):
                base = k[len("optimizer.state.fp32_param."):]
                for sub, x in ([(None, v)] if not base.startswith("decoder.layers.") else list(enumerate(v))):
                    if x.shape == main.shape and torch.equal(x, main):
                        hits.append((base, sub))
        ok = len(hits) >= 1 and main.dtype == torch.float32
        if ok:
            base, sub = hits[0]
            for m in ("exp_avg", "exp_avg_sq"):
                x = g[f"optimizer.state.{m}.{base}"]
                x = x[sub] if sub is not None else x
                ok = ok and torch.equal(x, st[m])
        n_opt += ok
    check(not bad and n_opt == len(mains) == len(keys),
          f"{case}: DCP's tensors equal our torch-format save's: weights differing {bad[:4]}, "
          f"{n_opt} of {len(mains)} main params with their moments")
    print(f"{case}: torch.distributed.checkpoint read {len(g)} tensors: {len(keys)} {want} weights bit-equal "
          f"to our torch-format save's, {n_opt} fp32 main params (with exp_avg, exp_avg_sq) equal exactly")


def resume_ours(case, save, ours, tmp):
    before = os.path.join(tmp, f"iter6_{case}")
    shutil.copytree(os.path.join(save, "iter_0000006"), before)
    r = mx.run_ours(case, tmp, DIST + ("--load", save, "--ckpt-step", "3", "--save", save, "--save-interval", "3"))
    check(r.returncode == 0, f"{case}: ours from ours: {r.stderr[-600:]}")
    compare(case, "ours from our torch_dist save", mx.train_lines(r.stdout), ours, 1e-7)
    after = os.path.join(save, "iter_0000006")
    names = sorted(n for n in os.listdir(before) if n != "common.pt")
    same = [n for n in names if filecmp.cmp(os.path.join(before, n), os.path.join(after, n), shallow=False)]
    check(names and same == names, f"{case}: byte-stable resumed save: {sorted(set(names) - set(same))} differ")
    print(f"{case}: iteration-6 files of the resumed and the uninterrupted run identical:", same)


def resume_megatron(case, tmp):
    gold = GOLDEN.format(case)
    save = os.path.join(tmp, f"megatron_{case}")
    shutil.copytree(os.path.join(gold, "save"), save)
    r = mx.run_ours(case, tmp, DIST + ("--load", save))
    check(r.returncode == 0, f"{case}: ours from Megatron's torch_dist save: {r.stderr[-600:]}")
    theirs = mx.train_lines(open(os.path.join(gold, "megatron_log.txt")).read())
    compare(case, "ours from Megatron's torch_dist save vs Megatron's own continuation",
            mx.train_lines(r.stdout), theirs, REL)


def main():
    tmp = tempfile.mkdtemp(prefix="mc_dist_mixed_")
    try:
        for case in CASES:
            save = os.path.join(tmp, f"ours_{case}")
            r = mx.run_ours(case, tmp, DIST + ("--save", save, "--save-interval", "3"))
            ours = mx.train_lines(r.stdout)
            check(r.returncode == 0 and sorted(ours) == [1, 2, 3, 4, 5, 6], f"{case}: our run: {r.stderr[-600:]}")
            if r.returncode:
                continue
            check(f"saving checkpoint at iteration       3 to {save} in torch_dist format" in r.stdout,
                  f"{case}: Megatron's torch_dist save line")
            check_layout(case, save)
            common_optimizer(case, save)
            megatron_continues(case, save, ours, tmp)
            dcp_reads(case, save, tmp)
            resume_ours(case, save, ours, tmp)
            resume_megatron(case, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt_mixed")


if __name__ == "__main__":
    sys.exit(main())
