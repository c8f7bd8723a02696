"""Activation recompute with tensor parallelism under mpirun (2 ranks): tp2 with
--sequence-parallel (selective, full uniform, full block) and tp2 without it with
--distribute-saved-activations (each rank keeps 1/2 of every checkpointed group input and
all-gathers it before the rerun, as Megatron's CheckpointFunction does): bit-identical [exact]
lines over 20 iterations and saved weights and optimizer state to tp2 without recompute; the
distributed checkpoints keep less than the same recompute without distributing; and
--distribute-saved-activations with --sequence-parallel is refused with Megatron's message."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "training"))
import mc_test  # noqa: E402
from recompute_cases import NONE, SELECTIVE, compare, full, per_slot, run  # noqa: E402
from test_recompute_pipeline import DATA, check_less, print_table  # noqa: E402

TP2 = [*mc_test.gpt2(4), "--tensor-model-parallel-size", "2", "--make-vocab-size-divisible-by",
       "64"]
SP = ["--sequence-parallel"]
DIST = ["--distribute-saved-activations"]


def main():
    c = mc_test.CHECKS
    with tempfile.TemporaryDirectory() as tmp:
        for label, model, cases in (
                ("tp2 + SP", TP2 + SP, [("selective", SELECTIVE),
                                        ("full uniform 2", full("uniform", 2)),
                                        ("full block 1", full("block", 1))]),
                ("tp2", TP2, [("full uniform 2", full("uniform", 2)),
                              ("full uniform 2 distributed", full("uniform", 2) + DIST)])):
            base = run(model + DATA, NONE, tmp, label + " none", np=2)
            c.check(base["rc"] == 0 and len(base["exact"]) == 20 and base["hash"],
                    f"{label} baseline: 20 iterations and a checkpoint: {base['err']}")
            rows, by = [("none", NONE, base)], {}
            for name, extra in cases:
                r = run(model + DATA, extra, tmp, f"{label} {name}", np=2)
                if compare(c, base, r, f"{label} {name}"):
                    check_less(c, label, base, r, name)
                    rows.append((name, extra[:6], r))
                    by[name] = r
            if "full uniform 2 distributed" in by:
                d, u = by["full uniform 2 distributed"], by["full uniform 2"]
                c.check("1/2 of every kept input" in (d["what"] or ""),
                        f"tp2: the log says the inputs are distributed: {d['what']}")
                c.check(per_slot(d) < per_slot(u), f"tp2: distributing the checkpoints keeps "
                        f"less per micro-batch ({per_slot(d)} vs {per_slot(u)})")
            print_table(label, 4, rows, tp=2)
        p = mc_test.run_pretrain(TP2 + SP + DATA + full("uniform", 2) + DIST +
                                 ["--train-iters", "1"], 2)
        c.check(p.returncode != 0 and "must be false when sequence parallel is enabled" in
                p.stdout + p.stderr, f"--distribute-saved-activations with "
                f"--sequence-parallel refused (rc {p.returncode}): {p.stderr[-400:]}")
    return mc_test.summary("test_recompute_tp")


if __name__ == "__main__":
    sys.exit(main())
