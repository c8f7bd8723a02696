"""Bit-identity of fp32 training across engine refactors (issue 10: "fp32 results are
bit-identical to before the change"). A fixed set of short runs covering every code path that
the engine seams touch (GPT-2 and Llama styles, hidden and attention dropout on, tensor +
sequence parallel, pipeline with virtual stages, data parallel with the distributed optimizer;
the unfused attention and the default flash attention),
with the scalar reference kernels (MC_KERNELS=ref: built with -ffp-contract=off and no -march,
so the bits are the same on every x86-64 machine with this toolchain). Each run prints its
full-precision [exact] lines (loss, grad norm, params norm at every iteration) and saves a torch
checkpoint; the test compares the lines and a SHA-256 over every tensor of the checkpoint
(weights and Adam moments, read back with torch.load) with tests/golden/engine/ref.txt, made
before the engine refactor (python3 tests/training/test_engine_golden.py --update rewrites it;
only ever do that for a change that is meant to change numbers, and say so in the commit)."""
import hashlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import CHECKS, check, gpt2, llama, parse_exact, run_pretrain, summary  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "golden", "engine", "ref.txt")
ITERS = 4

# name: (ranks, model style, extra arguments). The first five run the unfused attention (the
# default before flash attention became the transformer_engine default: their lines are the
# pre-refactor ones); the _flash runs are the default (flash attention), added with that switch.
UNFUSED = ["--attention-backend", "unfused"]
PP2_VPP2 = ["--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1"]
RUNS = {
    "gpt2_dropout": (1, gpt2(2), UNFUSED),
    "llama_dropout": (1, llama(2), UNFUSED),
    "gpt2_tp2_sp": (2, gpt2(2), UNFUSED + ["--tensor-model-parallel-size", "2",
                                           "--sequence-parallel"]),
    "llama_pp2_vpp2": (2, llama(4), UNFUSED + PP2_VPP2),
    "llama_dp2_distopt": (2, llama(2), UNFUSED + ["--use-distributed-optimizer"]),
    "gpt2_dropout_flash": (1, gpt2(2), []),
    "llama_dropout_flash": (1, llama(2), []),
    "llama_pp2_vpp2_flash": (2, llama(4), PP2_VPP2),
}


def run_args(style, extra, tmp):
    return [*style, "--mock-data", "--vocab-size", "4096", "--seq-length", "32",
            "--max-position-embeddings", "32", "--micro-batch-size", "2",
            "--global-batch-size", "8", "--train-iters", str(ITERS), "--lr", "1e-3",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", "1", "--weight-decay", "0.1",
            "--clip-grad", "1.0", "--log-params-norm", "--log-interval", "1",
            "--eval-interval", "1000", "--eval-iters", "0", "--tokenizer-type", "NullTokenizer",
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0.1",
            "--hidden-dropout", "0.1", "--seed", "1234", "--save", os.path.join(tmp, "ckpt"),
            "--save-interval", str(ITERS), "--ckpt-format", "torch", *extra]


def tensor_digest(ckpt):
    """SHA-256 over (name, dtype, shape, bytes) of every tensor in every rank's checkpoint file,
    in sorted order."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "checkpointing"))
    import torch_stubs  # Megatron's enum classes named in the pickle
    torch_stubs.install()
    h = hashlib.sha256()
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(ckpt) for f in fs
                   if f.endswith(".pt"))

    def walk(prefix, obj):
        if isinstance(obj, torch.Tensor):
            h.update(f"{prefix} {obj.dtype} {tuple(obj.shape)}".encode())
            h.update(obj.contiguous().numpy().tobytes())
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                if k not in ("args", "rng_state"):
                    walk(f"{prefix}.{k}", obj[k])
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(f"{prefix}[{i}]", v)

    for f in files:
        walk(os.path.relpath(f, ckpt), torch.load(f, map_location="cpu"))
    return h.hexdigest(), len(files)


def run_one(name, tmp):
    np_, style, extra = RUNS[name]
    d = os.path.join(tmp, name)
    os.makedirs(d)
    p = run_pretrain(run_args(style, extra, d), np_, env={"MC_KERNELS": "ref"})
    if not check(p.returncode == 0, f"{name}: exit 0 (got {p.returncode}: {p.stderr[-800:]})"):
        return []
    exact = parse_exact(p.stdout)
    check(len(exact) == ITERS, f"{name}: {ITERS} [exact] lines (got {len(exact)})")
    digest, n = tensor_digest(os.path.join(d, "ckpt"))
    check(n > 0, f"{name}: the checkpoint has .pt files")
    return [f"{name} exact {' '.join(e)}" for e in exact] + [f"{name} tensors {digest}"]


def main():
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in RUNS:
            lines += run_one(name, tmp)
    if "--update" in sys.argv and CHECKS.failed == 0:
        with open(GOLDEN, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {GOLDEN}")
        return 0
    with open(GOLDEN) as f:
        want = f.read().splitlines()
    for w in want:
        check(w in lines, f"golden line not reproduced bit for bit: {w}")
    check(len(lines) == len(want), f"{len(lines)} lines, golden has {len(want)}")
    return summary("test_engine_golden")


if __name__ == "__main__":
    sys.exit(main())
