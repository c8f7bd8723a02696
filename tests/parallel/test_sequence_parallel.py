"""--sequence-parallel under mpirun (oversubscribed, OMP_NUM_THREADS=1): for a GPT-2-style and a
Llama-style (SwiGLU, RMSNorm, RoPE, GQA, untied) model, tp2+SP, tp4+SP and tp2+SP x pp2 with
dropout ON (masks are drawn by global sequence position, so they do not depend on the tensor-
or sequence-parallel layout), and tp2+SP x dp2 with the distributed optimizer with dropout off
(a data-parallel rank draws its masks by its own micro-batch count, as without SP), print the
same 'lm loss', 'grad norm' and 'params norm' at each of 20 iterations, and the same
validation/test losses, as the single-process run with the same dropout
(within 1e-5 relative, from the [exact] lines of MC_TEST_LOG_EXACT=1); reruns (tp2+SP x pp2,
tp4+SP) are bit-identical; --sequence-parallel with tp1 is switched off with Megatron's warning, and a
--seq-length not divisible by the tensor-parallel size is refused with a message naming both."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import (check, compare_curves, gpt2, llama, parse_exact, parse_valid, run_pretrain,  # noqa: E402
                     summary)

ITERS = 20

GPT2 = gpt2()
LLAMA = llama()


def run(model, tmp, np=1, tp=1, pp=1, extra=(), seq=32):
    args = [*model, "--mock-data", "--vocab-size", "4096", "--seq-length", str(seq),
            "--max-position-embeddings", str(seq), "--micro-batch-size", "2",
            "--global-batch-size", "8", "--train-iters", str(ITERS), "--lr", "1e-3",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--weight-decay", "0.1",
            "--clip-grad", "0.5", "--log-params-norm", "--log-interval", "1",
            "--eval-interval", "10", "--eval-iters", "2", "--tokenizer-type", "NullTokenizer",
            "--make-vocab-size-divisible-by", str(128 // tp),
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            "--data-cache-path", os.path.join(tmp, "cache"), *extra]
    p = run_pretrain(args, np, timeout=300)
    return p, parse_exact(p.stdout), parse_valid(p.stdout)


def compare(name, ref, got):
    p, exact, valid = got
    check(p.returncode == 0, f"{name}: exit 0 (got {p.returncode}: {p.stderr[-800:]})")
    check(len(exact) == ITERS, f"{name}: {ITERS} [exact] lines (got {len(exact)})")
    check(len(valid) == len(ref[2]) == 4, f"{name}: 4 validation/test lines (got {len(valid)})")
    return compare_curves(name, exact, ref[1], valid, ref[2])


NO_DROPOUT = ("--hidden-dropout", "0", "--attention-dropout", "0")
LAYOUTS = (  # name, np, tp, pp, extra (also given to the single-process reference)
    ("tp2+SP", 2, 2, 1, ()),
    ("tp4+SP", 4, 4, 1, ()),
    ("tp2+SP x pp2", 4, 2, 2, ()),
    ("tp2+SP x dp2 distopt", 4, 2, 1, ("--use-distributed-optimizer", *NO_DROPOUT)),
)


def errors(tmp):
    p, exact, _ = run(GPT2, tmp, extra=["--sequence-parallel", "--train-iters", "1",
                                         "--lr-warmup-iters", "0"])
    check(p.returncode == 0 and len(exact) == 1 and
          "Disabling sequence parallelism because tensor model parallelism is disabled"
          in p.stdout + p.stderr, f"tp1 --sequence-parallel runs with the warning: {p.stderr[-400:]}")
    p, _, _ = run(GPT2, tmp, 2, 2, extra=["--sequence-parallel"], seq=31)
    msg = p.stdout + p.stderr
    check(p.returncode != 0 and "--seq-length 31" in msg and
          "--tensor-model-parallel-size 2" in msg and "Traceback" not in msg,
          f"--seq-length 31 with tp2 SP is refused clearly: {msg[-600:]}")


def main():
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        for mname, model in (("gpt2", GPT2), ("llama-gqa", LLAMA)):
            refs = {}
            for lname, np, tp, pp, extra in LAYOUTS:
                name = f"{mname} {lname}"
                dropout = "on" if "--hidden-dropout" not in extra else "off"
                if dropout not in refs:
                    refs[dropout] = run(model, tmp, extra=[e for e in extra if "distrib" not in e])
                    check(refs[dropout][0].returncode == 0 and len(refs[dropout][1]) == ITERS,
                          f"{mname} single process runs ({refs[dropout][0].stderr[-800:]})")
                ref = refs[dropout]
                got = run(model, tmp, np, tp, pp, ["--sequence-parallel", *extra])
                report.append(f"{name}: max rel diff {compare(name, ref, got):.1e}")
                if lname == "tp2+SP x pp2" or (lname, mname) == ("tp4+SP", "gpt2"):
                    again = run(model, tmp, np, tp, pp, ["--sequence-parallel", *extra])
                    check(again[1] == got[1] and again[2] == got[2],
                          f"{name}: rerun bit-identical")
        errors(tmp)
    print("\n".join(report))
    return summary("test_sequence_parallel")


if __name__ == "__main__":
    sys.exit(main())
