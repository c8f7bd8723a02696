"""Megatron's grad-buffer index map (param start/end and bucket per parameter, bucket
boundaries, padded and unpadded sizes) as megatron.c computes it (tests/drivers/
distopt_map_driver, src/distributed/param_and_grad_buffer.c) against Megatron's own code:
the index-map part of _ParamAndGradBuffer.__init__ in
megatron/core/distributed/param_and_grad_buffer.py (core_v0.12.1), cut out of the source and
run live on stand-in parameters (only .data.nelement() and .shared_embedding are read), for a
GPT-2-style and a Llama-style model (and a tensor-parallel shard of it) at several dp sizes,
with and without the distributed optimizer, without buckets and with --overlap-grad-reduce
bucket sizes, plus random parameter lists with shared embeddings. When the Megatron checkout
(MEGATRON_REF, default /work/ref/Megatron-LM) is absent the committed golden
tests/golden/distopt/index_map.json (written by this script with --write-golden from that
same live code) is the reference instead; when both exist they must agree."""
import json
import math
import os
import random
import subprocess
import sys
import textwrap
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, SRC, check, gpt2, llama, summary  # noqa: E402

DRIVER = os.path.join(BUILD, "tests", "distopt_map_driver")
REF = os.environ.get("MEGATRON_REF", "/work/ref/Megatron-LM")
GOLDEN = os.path.join(SRC, "tests", "golden", "distopt", "index_map.json")

COMMON = ["--vocab-size", "4096", "--seq-length", "32", "--max-position-embeddings", "32",
          "--micro-batch-size", "2", "--make-vocab-size-divisible-by", "128"]
GPT2 = gpt2()
LLAMA = llama()
MODELS = {"gpt2": GPT2, "llama": LLAMA,
          "llama_tp2": LLAMA + ["--tensor-model-parallel-size", "2"]}
# (name, extra args, Megatron's DDP bucket_size for dp) -- None: one bucket
BUCKETS = [("none", [], lambda dp: None),
           ("overlap_default", ["--overlap-grad-reduce"], lambda dp: max(40000000, 1000000 * dp)),
           ("overlap_5000", ["--overlap-grad-reduce", "--ddp-bucket-size", "5000"],
            lambda dp: 5000),
           ("overlap_20000", ["--overlap-grad-reduce", "--ddp-bucket-size", "20000"],
            lambda dp: 20000),
           ("overlap_3000_busbw", ["--overlap-grad-reduce", "--ddp-bucket-size", "3000",
                                   "--ddp-pad-buckets-for-high-nccl-busbw"], lambda dp: 3000)]
DPS = [1, 2, 3, 4, 6, 8]


def megatron_layout_fn():
    """The index-map statements of _ParamAndGradBuffer.__init__, verbatim from Megatron's
    source (from 'self.buckets = []' through 'self.numel = bucket_end_index'), wrapped in a
    function of (self, params, bucket_size)."""
    path = os.path.join(REF, "megatron", "core", "distributed", "param_and_grad_buffer.py")
    lines = open(path).read().splitlines()
    cls = next(i for i, l in enumerate(lines) if l.startswith("class _ParamAndGradBuffer"))
    first = next(i for i in range(cls, len(lines)) if lines[i].strip() == "self.buckets = []")
    last = next(i for i in range(first, len(lines))
                if lines[i].strip() == "self.numel = bucket_end_index")
    body = textwrap.dedent("\n".join(lines[first:last + 1]))
    src = ("def layout(self, params, bucket_size):\n" + textwrap.indent(body, "    ") +
           "\n    return per_bucket_numel_unpadded\n")
    ns = {"math": math}
    exec(compile(src, path, "exec"), ns)
    return ns["layout"]


class Param:
    def __init__(self, numel, shared):
        self.data = types.SimpleNamespace(nelement=lambda: numel)
        if shared:
            self.shared_embedding = True


def megatron_map(layout, numels, shared, dp, distopt, bucket_size, busbw=False):
    self = types.SimpleNamespace(
        ddp_config=types.SimpleNamespace(use_distributed_optimizer=distopt,
                                         pad_buckets_for_high_nccl_busbw=busbw),
        data_parallel_world_size=dp)
    params = [Param(n, s) for n, s in zip(numels, shared)]
    unpadded = layout(self, params, bucket_size)
    return {"params": [list(self.param_index_map[p]) for p in params],
            "buckets": [[s, e, u] for (s, e), u in zip(self.bucket_indices, unpadded)],
            "numel": self.numel, "numel_unpadded": sum(unpadded)}


def parse(out):
    r = {"params": [], "buckets": [], "names": [], "numels": []}
    for line in out.splitlines():
        f = line.split()
        if f[0] == "param":
            r["names"].append(f[2])
            r["numels"].append(int(f[3]))
            r["params"].append([int(f[4]), int(f[5]), int(f[6])])
        elif f[0] == "bucket":
            r["buckets"].append([int(f[2]), int(f[3]), int(f[4])])
        elif f[0] == "numel":
            r["numel"], r["numel_unpadded"] = int(f[1]), int(f[2])
    return r


def ours(args):
    p = subprocess.run([DRIVER, *args], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"{DRIVER} {' '.join(args)}: {p.stderr}")
    return parse(p.stdout)


def cases():
    """Yields (key, driver args, numels-or-None, shared, dp, distopt, bucket_size, busbw)."""
    for model, margs in MODELS.items():
        for dp in DPS:
            for distopt in (False, True):
                for bname, bargs, bsize in BUCKETS:
                    if bname.endswith("busbw") and not distopt:
                        continue
                    key = f"{model}/dp{dp}/{'distopt' if distopt else 'ddp'}/{bname}"
                    extra = ["--use-distributed-optimizer"] if distopt else []
                    yield (key, ["model", str(dp), *COMMON, *margs, *bargs, *extra], None,
                           dp, distopt, bsize(dp) if bargs else None, "busbw" in bname)
    rng = random.Random(1234)
    for k in range(40):
        n = rng.randint(1, 12)
        numels = [rng.choice([1, 3, 64, 100, 127, 1000, rng.randint(1, 5000)]) for _ in range(n)]
        shared = [rng.random() < 0.15 for _ in range(n)]
        dp = rng.choice(DPS + [5, 16])
        distopt = rng.random() < 0.7
        bsize = rng.choice([None, 50, 500, 3000])
        spec = [f"{x}{'s' if s else ''}" for x, s in zip(numels, shared)]
        yield (f"raw{k}", ["raw", str(dp), str(int(distopt)), str(bsize or 0), *spec],
               (numels, shared), dp, distopt, bsize, False)


def main():
    write = "--write-golden" in sys.argv
    layout = megatron_layout_fn() if os.path.exists(REF) else None
    golden = None
    if os.path.exists(GOLDEN) and not write:
        golden = json.load(open(GOLDEN))
    if layout is None and golden is None:
        print(f"no reference: neither {REF} nor {GOLDEN}")
        sys.exit(1)
    new_golden = {}
    for key, args, raw, dp, distopt, bsize, busbw in cases():
        got = ours(args)
        numels, shared = raw if raw else (got["numels"], [False] * len(got["numels"]))
        refs = []
        if layout:
            live = megatron_map(layout, numels, shared, dp, distopt, bsize, busbw)
            live["input"] = [numels, shared]
            new_golden[key] = live
            refs.append(("live Megatron", live))
        if golden is not None:
            check(key in golden, f"{key}: in the golden")
            if key in golden:
                refs.append(("golden", golden[key]))
                check(golden[key]["input"] == [numels, shared], f"{key}: golden input sizes")
        for what, ref in refs:
            for field in ("params", "buckets", "numel", "numel_unpadded"):
                check(got[field] == ref[field],
                      f"{key} {field} vs {what}: ours {got[field]} expected {ref[field]}")
        if distopt:  # every bucket cuts into dp equal shards
            check(all((e - s) % dp == 0 for s, e, _ in got["buckets"]), f"{key}: dp-divisible")
        if key in ("gpt2/dp4/distopt/none", "llama/dp2/distopt/overlap_5000"):
            # the layouts the training test runs cut some parameters between two ranks
            split = 0
            for s, e, b in got["params"]:
                bs, be, _ = got["buckets"][b]
                edges = range(bs, be, (be - bs) // dp)
                split += any(s < x < e for x in edges)
            check(split > 0, f"{key}: some parameter spans two ranks' shards")
    if write:
        os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
        with open(GOLDEN + ".tmp", "w") as f:
            json.dump(new_golden, f, separators=(",", ":"), sort_keys=True)
        os.replace(GOLDEN + ".tmp", GOLDEN)
        print(f"wrote {GOLDEN} ({len(new_golden)} cases)")
    sys.exit(summary("test_distopt_buffer"))


if __name__ == "__main__":
    main()
