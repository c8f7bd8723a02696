"""Shared by test_recompute.py and tests/parallel/test_recompute_parallel.py: one pretrain_gpt
run with a recompute setting, read back as (the [exact] lines, a hash of the saved weights and
optimizer state, the model's activation byte counts from its ' > activation memory' line, the
allocator's peak: in total from Megatron's memory line, of the activations category from
--log-memory-estimate), and the activation memory that Megatron's
formulas give, to print beside the measured numbers.

Megatron's formula: megatron/training/theoretical_memory_usage.py counts s b h (18 + 4 F / h)
bytes per layer and micro-batch (16-bit activations, with sequence parallelism and selective
recompute; divided by tp). It has no term for the others, so the table uses the paper it comes
from (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models"): no recompute adds the 5 a s^2 b of the attention probabilities and their dropout
mask per layer; full recompute keeps 2 s b h per checkpointed group input and rebuilds one
group at a time. Values are scaled by the activation bytes (4 in fp32) / 2."""
import glob
import hashlib
import os
import re
import sys

import mc_test

ACT = re.compile(r" > activation memory on \(tensor, pipeline\) model parallel rank \((\d+), "
                 r"(\d+)\): (\d+) bytes \([^)]*\) = (.*); activation recompute: (.*)$")
CHUNK = re.compile(r"(\d+) shared \+ (\d+) x (\d+) per micro-batch")
# --log-memory-estimate's table: the allocator's peak of the activations category (MB)
ACT_PEAK = re.compile(r"\[Rank (\d+)\]   activations +\S+ +(\S+) ")
PEAK = re.compile(r"\[Rank (\d+)\] \(after 1 iterations\) memory \(MB\) \| allocated: \S+ \| "
                  r"max allocated: (\S+)")

# the settings of the table: name -> extra arguments
NONE = []
SELECTIVE = ["--recompute-granularity", "selective"]


def full(method, k):
    return ["--recompute-granularity", "full", "--recompute-method", method,
            "--recompute-num-layers", str(k)]


def weights_hash(save):
    """sha256 over every tensor of every saved .pt (model and optimizer; not args or RNG)."""
    sys.path.insert(0, os.path.join(mc_test.SRC, "tests", "checkpointing"))
    import torch
    import torch_stubs
    torch_stubs.install()
    h = hashlib.sha256()

    def walk(prefix, obj):
        if isinstance(obj, torch.Tensor):
            h.update(f"{prefix} {obj.dtype} {tuple(obj.shape)}".encode())
            h.update(obj.contiguous().view(torch.uint8).numpy().tobytes()
                     if obj.dtype == torch.bfloat16 else obj.contiguous().numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                if k not in ("args", "rng_state"):
                    walk(f"{prefix}.{k}", obj[k])
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(f"{prefix}[{i}]", v)

    files = sorted(glob.glob(os.path.join(save, "iter_*", "*", "*.pt")))
    for f in files:
        walk(os.path.relpath(f, save), torch.load(f, map_location="cpu"))
    return h.hexdigest() if files else None


def run(base, extra, tmp, name, np=1, iters=20):
    """One run: dict with exact, hash, act {(tp, pp): (total, [(shared, slots, per)])},
    peak {rank: MB}, what (the recompute description), rc, err."""
    save = os.path.join(tmp, "save_" + re.sub(r"\W+", "_", name))
    args = [*base, *extra, "--train-iters", str(iters), "--save", save, "--save-interval",
            str(iters), "--ckpt-format", "torch", "--log-memory-estimate", "--data-cache-path",
            os.path.join(tmp, "cache")]
    p = mc_test.run_pretrain(args, np, timeout=240, env={"MC_LOG_ACTIVATIONS": "1"})
    r = {"rc": p.returncode, "err": p.stderr[-800:] + p.stdout[-400:],
         "exact": mc_test.parse_exact(p.stdout), "act": {}, "peak": {}, "act_peak": {},
         "what": None}
    for line in p.stdout.splitlines():
        m = ACT.search(line)
        if m:
            chunks = [tuple(map(int, c)) for c in CHUNK.findall(m.group(4))]
            r["act"][(int(m.group(1)), int(m.group(2)))] = (int(m.group(3)), chunks)
            r["what"] = m.group(5)
        m = ACT_PEAK.search(line)
        if m:
            r["act_peak"][int(m.group(1))] = float(m.group(2))
        m = PEAK.search(line)
        if m:
            r["peak"][int(m.group(1))] = float(m.group(2))
    r["hash"] = weights_hash(save) if p.returncode == 0 else None
    return r


def per_slot(r):
    """The largest per-micro-batch bytes of any chunk of any rank."""
    return max((c[2] for _, cs in r["act"].values() for c in cs), default=None)


def megatron_formula(s, b, h, a, F, L, extra, act_bytes, tp=1):
    """Activation bytes of the L layers of one stage for one micro-batch (module docstring)."""
    scale = act_bytes / 2.0
    layer = s * b * h * (18 + 4 * F / h)  # theoretical_memory_usage.py (selective)
    if extra == NONE:
        return scale * L * (layer + 5 * a * s * s * b) / tp
    if extra == SELECTIVE:
        return scale * L * layer / tp
    method, k = extra[3], int(extra[5])
    if method == "uniform":
        groups = -(-L // k)
        return scale * (groups * 2 * s * b * h + min(k, L) * (layer + 5 * a * s * s * b)) / tp
    kept = min(k, L)  # block: k checkpointed layers rebuilt one at a time, the rest stored
    return scale * (kept * 2 * s * b * h + (L - kept + (1 if kept else 0)) *
                    (layer + 5 * a * s * s * b)) / tp


def compare(c, base, r, name):
    """The run's numbers equal the baseline's bit for bit."""
    ok = c.check(r["rc"] == 0 and len(r["exact"]) > 0, f"{name}: exits 0 ({r['rc']}): "
                 f"{r['err']}")
    if not ok:
        return False
    c.check(r["exact"] == base["exact"], f"{name}: [exact] losses, grad norms, params norms "
            f"bit-identical to no recompute\n  {r['exact'][-1:]}\n  {base['exact'][-1:]}")
    c.check(r["hash"] is not None and r["hash"] == base["hash"],
            f"{name}: saved weights and optimizer state bit-identical to no recompute")
    return True
