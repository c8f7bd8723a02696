"""Activation recompute in the pipeline schedules under mpirun (2 ranks): 1F1B on pp2 (2 layers
per stage; stage 0 keeps both micro-batches in flight) and interleaved pp2 x vpp2 (2 layers per
model chunk, Megatron counts --recompute-num-layers per chunk), with dropout: selective and full
(uniform and block; selective on 1F1B) print bit-identical [exact] lines over 20 iterations and save bit-identical
weights and optimizer state to the same layout without recompute; every rank keeps less per
in-flight micro-batch, and its activation block shrinks by that times its slots. The table
(per rank) is printed beside Megatron's formula."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "training"))
import mc_test  # noqa: E402
from recompute_cases import NONE, SELECTIVE, compare, full, megatron_formula, run  # noqa: E402

S, B, H, A = 64, 2, 32, 4
DATA = ["--mock-data", "--vocab-size", "4096", "--seq-length", str(S),
        "--max-position-embeddings", str(S), "--micro-batch-size", str(B),
        "--global-batch-size", "4", "--lr", "1e-3", "--log-params-norm", "--log-interval", "1",
        "--attention-dropout", "0.1", "--hidden-dropout", "0.1", "--eval-iters", "0",
        "--tokenizer-type", "NullTokenizer",
        "--attention-backend", "unfused"]  # the probabilities selective recompute drops
LAYOUTS = [
    ("pp2 1F1B", [*mc_test.gpt2(4), "--pipeline-model-parallel-size", "2"], 2,
     [("selective", SELECTIVE), ("full uniform 1", full("uniform", 1)),
      ("full block 1", full("block", 1))]),
    ("pp2 x vpp2", [*mc_test.gpt2(8), "--pipeline-model-parallel-size", "2",
                    "--num-virtual-stages-per-pipeline-rank", "2"], 2,
     [("full uniform 2", full("uniform", 2)), ("full block 1", full("block", 1))]),
]


def print_table(label, layers, rows, act_bytes=4, tp=1):
    print(f"\n{label}: activation bytes per rank (tensor, pipeline): total = shared + slots x "
          f"per micro-batch (per chunk); peak = the allocator's activations peak "
          f"(--log-memory-estimate, MB); formula = "
          f"Megatron's for one micro-batch of {layers} layers")
    for name, extra, r in rows:
        f = megatron_formula(S, B, H, A, 4 * H, layers, extra, act_bytes, tp) / 2**20
        for key in sorted(r["act"]):
            total, chunks = r["act"][key]
            cs = ", ".join(f"{sh} + {n} x {per}" for sh, n, per in chunks)
            rank = key[1] * tp + key[0]  # world rank (order tp-cp-ep-dp-pp, dp 1)
            print(f"  {name:<16} rank {key}: {total / 2**20:8.3f} MiB = {cs}; peak "
                  f"{r['act_peak'].get(rank, float('nan')):.3f} MB; formula {f:.3f} MiB")


def check_less(c, label, base, r, name):
    for key, (total, chunks) in base["act"].items():
        got = r["act"].get(key)
        ok = got is not None and all(g[2] < b[2] for g, b in zip(got[1], chunks))
        c.check(ok, f"{label} {name} rank {key}: every chunk keeps less per micro-batch "
                f"({got} vs {(total, chunks)})")
        if got and c.check(len(got[1]) == len(chunks), f"{label} {name}: same chunks"):
            saved = sum(n * (b[2] - g[2]) - (g[0] - b[0]) for g, b, n in
                        zip(got[1], chunks, (x[1] for x in chunks)))
            c.check(total - got[0] == saved, f"{label} {name} rank {key}: the block shrinks "
                    f"by the slots' savings less the work area ({total - got[0]} vs {saved})")


def main():
    c = mc_test.CHECKS
    with tempfile.TemporaryDirectory() as tmp:
        for label, model, np, cases in LAYOUTS:
            base = run(model + DATA, NONE, tmp, label + " none", np=np)
            c.check(base["rc"] == 0 and len(base["exact"]) == 20 and base["hash"],
                    f"{label} baseline: 20 iterations and a checkpoint: {base['err']}")
            rows = [("none", NONE, base)]
            for name, extra in cases:
                r = run(model + DATA, extra, tmp, f"{label} {name}", np=np)
                if compare(c, base, r, f"{label} {name}"):
                    check_less(c, label, base, r, name)
                    rows.append((name, extra, r))
            layers = 2
            print_table(label, layers, rows)
    return mc_test.summary("test_recompute_pipeline")


if __name__ == "__main__":
    sys.exit(main())
