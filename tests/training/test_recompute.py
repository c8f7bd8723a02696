"""Activation recompute (--recompute-granularity full with --recompute-method uniform / block
and every --recompute-num-layers of a 4-layer model, and selective) on one process: 20
training iterations with attention and hidden dropout print bit-identical [exact] losses, grad
norms and params norms to the same run without recompute, and save bit-identical weights and
optimizer state (fp32; bf16 for a subset; a Llama-style model with a uniform group size that
does not divide the layers). The memory really goes down: the model's activation bytes per
micro-batch (its ' > activation memory' line) are smaller than without recompute for every
setting, and the allocator's peak of the activations category (--log-memory-estimate, mc_alloc.c's
counters) moves by what the model stopped keeping (the total peak of Megatron's memory line is
printed too; it also holds the data and checkpoint I/O, which vary from run to run). Printed beside Megatron's formula (recompute_cases.py)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import mc_test  # noqa: E402
from recompute_cases import (NONE, SELECTIVE, compare, full, megatron_formula,  # noqa: E402
                             per_slot, run)

S, B, H, A, L = 64, 2, 32, 4, 4
BASE = [*mc_test.gpt2(L), "--mock-data", "--vocab-size", "4096", "--seq-length", str(S),
        "--max-position-embeddings", str(S), "--micro-batch-size", str(B),
        "--global-batch-size", "4", "--lr", "1e-3", "--log-params-norm", "--log-interval", "1",
        "--attention-dropout", "0.1", "--hidden-dropout", "0.1", "--eval-iters", "0",
        "--tokenizer-type", "NullTokenizer",
        "--attention-backend", "unfused"]  # the probabilities recompute drops (flash: below)
FP32 = [("selective", SELECTIVE)] + [(f"full uniform {k}", full("uniform", k))
                                     for k in range(1, L + 1)] + \
       [(f"full block {k}", full("block", k)) for k in range(1, L + 1)]
BF16 = [("selective", SELECTIVE), ("full uniform 2", full("uniform", 2)),
        ("full block 1", full("block", 1))]


def table(c, label, base, runs, act_bytes):
    print(f"\n{label}: activation memory of one micro-batch ({L} layers, s {S}, b {B}, h {H}, "
          f"a {A}), MiB")
    print(f"{'setting':<18} {'kept/micro-batch':>16} {'model total':>12} "
          f"{'activations peak (MB)':>22} {'total peak (MB)':>16} {'Megatron formula':>17}")
    b_total = base["act"][(0, 0)][0]
    for name, extra, r in [("none", NONE, base)] + runs:
        if not r["act"]:
            continue
        total = r["act"][(0, 0)][0]
        f = megatron_formula(S, B, H, A, 4 * H, L, extra, act_bytes)
        print(f"{name:<18} {per_slot(r) / 2**20:>16.3f} {total / 2**20:>12.3f} "
              f"{r['act_peak'].get(0, float('nan')):>22.3f} "
              f"{r['peak'].get(0, float('nan')):>16.3f} {f / 2**20:>17.3f}")
        if extra is NONE:
            continue
        c.check(per_slot(r) < per_slot(base), f"{label} {name}: keeps less per micro-batch "
                f"({per_slot(r)}) than without recompute ({per_slot(base)})")
        # the allocator's activations peak follows the model's block (printed in MB with 2
        # decimals: 0.01 MB of slack)
        d_peak = (base["act_peak"][0] - r["act_peak"][0]) * 2**20
        c.check(abs(d_peak - (b_total - total)) <= 0.011 * 2**20,
                f"{label} {name}: the allocator's activations peak moves by the model's "
                f"activation bytes ({d_peak:.0f} vs {b_total - total})")


def one_dtype(c, tmp, label, dtype, cases, act_bytes):
    base = run(BASE + dtype, NONE, tmp, "none " + label)
    c.check(base["rc"] == 0 and len(base["exact"]) == 20 and base["hash"],
            f"{label} baseline: 20 iterations and a checkpoint: {base['err']}")
    c.check("none" in (base["what"] or ""), f"{label}: the log says no recompute")
    runs = []
    for name, extra in cases:
        r = run(BASE + dtype, extra, tmp, f"{name} {label}")
        if compare(c, base, r, f"{label} {name}"):
            c.check(r["what"] and r["what"].startswith(extra[1]),
                    f"{label} {name}: the log says what recompute does: {r['what']}")
            runs.append((name, extra, r))
    table(c, label, base, runs, act_bytes)


def refusals(c, tmp):
    """TransformerConfig's recompute rules, and the selective modules megatron.c lacks."""
    for extra, want in (
            (["--recompute-granularity", "full"], 'recompute_method must be "block" or '
                                                   '"uniform"'),
            (["--recompute-granularity", "full", "--recompute-method", "block"],
             "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 4"),
            (SELECTIVE + ["--recompute-num-layers", "2"], "recompute_num_layers must be None"),
            (SELECTIVE + ["--recompute-modules", "mlp"], "mlp is not supported yet")):
        p = mc_test.run_pretrain(BASE + extra + ["--train-iters", "1", "--data-cache-path",
                                                 os.path.join(tmp, "cache")])
        c.check(p.returncode != 0 and want in p.stderr, f"{extra} refused with '{want}' "
                f"(rc {p.returncode}): {p.stderr[-300:]}")


def main():
    """fp32: every setting; with --bf16: a subset, the Llama-style model and flash attention
    (test_recompute_bf16.py runs this file with that argument)."""
    c = mc_test.CHECKS
    bf16 = sys.argv[1:] == ["bf16"]
    with tempfile.TemporaryDirectory() as tmp:
        if not bf16:
            one_dtype(c, tmp, "fp32", [], FP32, 4)
            refusals(c, tmp)
            return mc_test.summary("test_recompute")
        one_dtype(c, tmp, "bf16", ["--bf16"], BF16, 2)
        # Llama-style (RoPE, GQA, SwiGLU, RMSNorm): a last group shorter than the others
        llama = [*mc_test.llama(L), *BASE[len(mc_test.gpt2(L)):]]
        base = run(llama, NONE, tmp, "llama none")
        r = run(llama, full("uniform", 3), tmp, "llama uniform 3")
        compare(c, base, r, "llama fp32 full uniform 3 (groups of 3 and 1)")
        # flash attention keeps no probabilities: full recompute reruns it, selective has
        # nothing to recompute (and says so)
        flash = BASE + ["--use-flash-attn"]
        base = run(flash, NONE, tmp, "flash none")
        compare(c, base, run(flash, full("uniform", 2), tmp, "flash uniform 2"),
                "flash fp32 full uniform 2")
        r = run(flash, SELECTIVE, tmp, "flash selective")
        if compare(c, base, r, "flash fp32 selective"):
            c.check("nothing (flash attention" in (r["what"] or "") and
                    per_slot(r) == per_slot(base), f"flash selective: nothing recomputed, the "
                    f"same bytes kept ({r['what']}; {per_slot(r)} vs {per_slot(base)})")
    return mc_test.summary("test_recompute_bf16")


if __name__ == "__main__":
    sys.exit(main())
