"""convert_checkpoint reads and writes torch_dist checkpoints (Megatron-LM core_v0.12.1's default
--ckpt-format), from Megatron's own torch_dist saves (tests/golden/checkpointing/dist_gpt_tp2pp2,
GPT-2 style tp2 x pp2, tied; dist_llama_tp2, Llama style tp2: GQA, SwiGLU, RMSNorm, untied):
- the loader detects the format as Megatron's load_checkpoint does (no option), and writes
  torch (Megatron's saver's only format) or, with --saver-ckpt-format torch_dist, torch_dist;
- (a) every tensor of the results equals the source's (also from a --bf16 save, in bfloat16): PyTorch's own DCP (torch 2.x,
  MC_TORCH2_PYTHON) reads the source and the converted torch_dist checkpoints, torch.load the
  converted torch files, bit for bit (exact equality);
- the torch_dist written at Megatron's layout (tp2 x pp2) has the keys, global shapes, chunks and
  objects of Megatron's own save of that layout (its optimizer and rng_state aside: the
  converter saves neither, as Megatron's saver);
- (b) pretrain_gpt continues from each converted checkpoint with the same next-iteration lm loss
  as from the source (weights only: --no-load-optim --no-load-rng on the source, as the
  converted ones hold no optimizer or RNG state);
- a truncated .distcp or an unknown directory: clear errors naming the file."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

CONVERT = os.path.join(mcs.BUILD, "bin", "convert_checkpoint")
PAD = ("--make-vocab-size-divisible-by", "128")  # the sources' 640 padded rows at tp1 too
mcs.ALL_CASES.setdefault("gpt_tp1pp2", (2, mcs.GPT2 + ("--pipeline-model-parallel-size", "2"),
                                        ("--data-path", mcs.CORPUS_A)))
mcs.ALL_CASES.setdefault("llama_tp1", (1, mcs.LLAMA, mcs.DIST_CASES["llama_tp2"][2]))
GPT_SRC = os.path.join(mcs.GOLDEN, "dist_gpt_tp2pp2", "save")
LLAMA_SRC = os.path.join(mcs.GOLDEN, "dist_llama_tp2", "save")
BF16_SRC = os.path.join(mcs.GOLDEN, "dist_gpt_bf16", "save")


def convert(src, dst, tp, pp, fmt=None, impl="local"):
    cmd = [CONVERT, "--model-type", "GPT", "--loader", "core", "--saver", "core", "--load-dir", src,
           "--save-dir", dst, "--target-tensor-parallel-size", str(tp),
           "--target-pipeline-parallel-size", str(pp), "--saver-transformer-impl", impl]
    if fmt:
        cmd += ["--saver-ckpt-format", fmt]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "Done!" in r.stdout, f"convert {src} -> {dst}: {r.stdout[-300:]} {r.stderr[-500:]}")
    return r


# torch 2: every model tensor of torch_dist checkpoints (DCP) and of torch ones (per-rank files,
# put at their global places: local names to the global TE keys, layers stacked, TP shards
# concatenated), compared exactly with the first (the source)
COMPARE = r'''
import os, sys, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
sys.path.insert(0, sys.argv[1])
import torch_stubs
torch_stubs.install()
import types
# Megatron's .metadata pickles its MCoreSavePlan objects (all_local_plans): a stand-in class
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", "megatron.core.dist_checkpointing.strategies.torch"):
    sys.modules.setdefault(n, types.ModuleType(n))
sys.modules["megatron.core.dist_checkpointing.strategies.torch"].MCoreSavePlan = type("MCoreSavePlan", (), {})
TE = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
      "input_layernorm.bias": "self_attention.linear_qkv.layer_norm_bias",
      "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
      "pre_mlp_layernorm.bias": "mlp.linear_fc1.layer_norm_bias"}
def dist(d):
    md = FileSystemReader(d).read_metadata()
    sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
          if type(v).__name__ == "TensorStorageMetadata" and not k.startswith("optimizer.")}
    dcp.load(sd, storage_reader=FileSystemReader(d), no_dist=True)
    return sd
REPLICATED = ("layer_norm_weight", "layer_norm_bias", "final_layernorm.weight", "final_layernorm.bias",
              "position_embeddings.weight", "linear_proj.bias", "linear_fc2.bias")
def torch_format(d, tp, pp, swiglu):
    parts = {}
    for p in range(pp):
        for t in range(tp):
            f = os.path.join(d, f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else ""), "model_optim_rng.pt")
            sd = torch.load(f, weights_only=False)
            n = sd["args"].num_layers // pp
            for name, v in sd["model"].items():
                if name.endswith("_extra_state"):
                    continue
                key, layer = name, None
                if name.startswith("decoder.layers."):
                    bits = name.split(".")
                    layer, rest = p * n + int(bits[2]), ".".join(bits[3:])
                    key = "decoder.layers." + TE.get(rest, rest)
                if key == "output_layer.weight" and not sd["args"].untie_embeddings_and_output_weights:
                    continue
                parts.setdefault((key, layer), {})[t] = v
    out = {}
    for (key, layer), shards in parts.items():
        vs = [shards[t] for t in sorted(shards)]
        if len(vs) == 1 or key.endswith(REPLICATED):
            full = vs[0] if all(torch.equal(vs[0], v) for v in vs) else None  # every rank's copy
        elif key.endswith(("linear_proj.weight", "linear_fc2.weight")):
            full = torch.cat(vs, 1)
        elif key.endswith("linear_fc1.weight") and swiglu:
            h = vs[0].shape[0] // 2
            full = torch.cat([v[:h] for v in vs] + [v[h:] for v in vs])
        else:
            full = torch.cat(vs, 0)
        out.setdefault(key, {})[layer] = full
    return {k: (None if any(x is None for x in v.values()) else
                torch.stack([v[l] for l in sorted(v)]) if None not in v else v[None]) for k, v in out.items()}
src = dist(sys.argv[2])
for spec in sys.argv[3:]:
    d, kind, tp, pp, swiglu = spec.split(",")
    got = dist(d) if kind == "dist" else torch_format(d, int(tp), int(pp), swiglu == "1")
    bad = [k for k in set(src) | set(got) if k not in src or k not in got or got[k] is None or src[k].dtype != got[k].dtype
           or src[k].shape != got[k].shape or not torch.equal(src[k], got[k])]
    print(os.path.basename(os.path.dirname(d)), kind, len(got), "tensors equal" if not bad else f"differ {sorted(bad)[:4]}")
'''

# torch 2: the converted tp2 x pp2 torch_dist layout against Megatron's own save of that layout
LAYOUT = r'''
import sys
from torch.distributed.checkpoint import FileSystemReader
import types
# Megatron's .metadata pickles its MCoreSavePlan objects (all_local_plans): a stand-in class
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", "megatron.core.dist_checkpointing.strategies.torch"):
    sys.modules.setdefault(n, types.ModuleType(n))
sys.modules["megatron.core.dist_checkpointing.strategies.torch"].MCoreSavePlan = type("MCoreSavePlan", (), {})
def meta(d, drop):
    md = FileSystemReader(d).read_metadata()
    return {k: (type(v).__name__, tuple(getattr(v, "size", ()) or ()),
                sorted((tuple(c.offsets), tuple(c.sizes)) for c in getattr(v, "chunks", [])))
            for k, v in md.state_dict_metadata.items() if not k.startswith(drop)}
ours = meta(sys.argv[1], ())
theirs = meta(sys.argv[2], ("optimizer.", "rng_state/"))
bad = [k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k)]
print("keys", len(ours), "of Megatron's", len(theirs), "differ", sorted(bad)[:6])
'''


def compare_tensors(src, specs):
    py = mcs.megatron_python(torch2=True)
    if not py:
        print("tensor comparison skipped (no torch 2 python: MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return
    r = subprocess.run([py, "-W", "ignore", "-c", COMPARE, os.path.dirname(os.path.abspath(__file__)), src] + specs,
                       capture_output=True, text=True, timeout=600)
    lines = r.stdout.strip().splitlines()
    check(r.returncode == 0 and len(lines) == len(specs) and all("tensors equal" in l for l in lines),
          f"tensors of the conversions of {src}: {r.stdout} {r.stderr[-800:]}")
    for l in lines:
        print(" ", l)


def compare_layout(ours, gold):
    py = mcs.megatron_python(torch2=True)
    if not py:
        return
    r = subprocess.run([py, "-W", "ignore", "-c", LAYOUT, ours, gold], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "differ []" in r.stdout, f"layout of the converted tp2 x pp2: {r.stdout} {r.stderr[-600:]}")
    print("converted torch_dist at tp2 x pp2 vs Megatron's save:", r.stdout.strip())


def next_loss(case, tmp, load, fmt, extra=()):
    """lm loss of iteration 4 after loading `load` (iteration 3) at `case`'s layout."""
    pad = () if "tp2" in case else PAD  # tp2 pads 513 to 640 with the cases' 64 already
    r = mcs.run_ours(case, tmp, ("--ckpt-format", fmt, "--load", load, "--no-load-optim", "--no-load-rng")
                     + pad + tuple(extra), iters=4)
    lines = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(lines) == [4], f"{case} from {load}: {r.stderr[-600:]}")
    return mcs.numbers(lines[4][1]).get("lm loss", float("nan")) if 4 in lines else float("nan")


def bad_input(tmp, src):
    broken = os.path.join(tmp, "broken")
    shutil.copytree(src, broken)
    f = os.path.join(broken, "iter_0000003", "__1_0.distcp")
    with open(f, "r+b") as h:
        h.truncate(os.path.getsize(f) // 2)
    r = subprocess.run([CONVERT, "--model-type", "GPT", "--loader", "core", "--saver", "core", "--load-dir", broken,
                        "--save-dir", os.path.join(tmp, "never")], capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and "__1_0.distcp" in r.stderr and "outside the file" in r.stderr and
          not os.path.exists(os.path.join(tmp, "never")), f"truncated .distcp: {r.returncode} {r.stderr[-400:]}")
    empty = os.path.join(tmp, "empty")
    os.makedirs(os.path.join(empty, "iter_0000003"))
    with open(os.path.join(empty, "latest_checkpointed_iteration.txt"), "w") as h:
        h.write("3")
    r = subprocess.run([CONVERT, "--model-type", "GPT", "--loader", "core", "--saver", "core", "--load-dir", empty,
                        "--save-dir", os.path.join(tmp, "never")], capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and "unknown checkpoint format in %s/iter_0000003" % empty in r.stderr,
          f"unknown format: {r.stderr[-300:]}")
    r = subprocess.run([CONVERT, "--model-type", "GPT", "--loader", "core", "--saver", "legacy", "--load-dir", src,
                        "--save-dir", os.path.join(tmp, "never"), "--saver-ckpt-format", "torch_dist"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 2 and "not supported in legacy models" in r.stderr, f"legacy torch_dist: {r.stderr[-300:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="mc_convert_dist_")
    try:
        g_torch, g_dist, g_same = (os.path.join(tmp, n) for n in ("gpt_torch_tp1", "gpt_dist_tp1pp2", "gpt_dist_tp2pp2"))
        r = convert(GPT_SRC, g_torch, 1, 1)
        check("loading Megatron distributed checkpoint" in r.stdout, "the loader detects torch_dist")
        convert(GPT_SRC, g_dist, 1, 2, "torch_dist")
        convert(GPT_SRC, g_same, 2, 2, "torch_dist", impl="local")
        l_dist, l_back = os.path.join(tmp, "llama_dist_tp1"), os.path.join(tmp, "llama_torch_tp2")
        convert(LLAMA_SRC, l_dist, 1, 1, "torch_dist")
        convert(l_dist, l_back, 2, 1)  # torch_dist -> torch, through our own torch_dist
        it = "iter_0000003"
        compare_tensors(os.path.join(GPT_SRC, it), [f"{g_torch}/{it},torch,1,1,0", f"{g_dist}/{it},dist,1,2,0",
                                                    f"{g_same}/{it},dist,2,2,0"])
        compare_tensors(os.path.join(LLAMA_SRC, it), [f"{l_dist}/{it},dist,1,1,1", f"{l_back}/{it},torch,2,1,1"])
        compare_layout(os.path.join(g_same, it), os.path.join(GPT_SRC, it))
        # a --bf16 save: the 16-bit weights come out bit for bit (widened and narrowed exactly)
        b_dist, b_torch = os.path.join(tmp, "bf16_dist_tp2"), os.path.join(tmp, "bf16_torch_tp1")
        convert(BF16_SRC, b_dist, 2, 1, "torch_dist")
        convert(BF16_SRC, b_torch, 1, 1)
        compare_tensors(os.path.join(BF16_SRC, it), [f"{b_dist}/{it},dist,2,1,0", f"{b_torch}/{it},torch,1,1,0"])
        # (b) the next iteration from the source and from each conversion
        src_gpt = next_loss("gpt_tp1", tmp, GPT_SRC, "torch_dist")
        runs = [("GPT torch tp1", next_loss("gpt_tp1", tmp, g_torch, "torch"), src_gpt),
                ("GPT torch_dist tp1 x pp2", next_loss("gpt_tp1pp2", tmp, g_dist, "torch_dist"), src_gpt)]
        src_llama = next_loss("llama_tp2", tmp, LLAMA_SRC, "torch_dist")
        runs += [("Llama torch_dist tp1", next_loss("llama_tp1", tmp, l_dist, "torch_dist"), src_llama),
                 ("Llama torch tp2", next_loss("llama_tp2", tmp, l_back, "torch"), src_llama)]
        for tag, got, want in runs:
            check(abs(got - want) <= 1e-6 * abs(want), f"{tag}: lm loss {got} vs {want} from the source")
        print("iteration-4 lm loss (converted, source):", [(t, g, w) for t, g, w in runs])
        bad_input(tmp, GPT_SRC)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_convert_dist")


if __name__ == "__main__":
    sys.exit(main())
