"""--check-weight-hash-across-dp-replicas-interval N (Megatron core_v0.12.1: training.py's train()
before the first step and post_training_step_callbacks every N iterations call
megatron/core/utils.py's check_param_hashes_across_dp_replicas(cross_check=True)).

tp2 x dp2 (4 ranks), interval 2, 4 iterations:
  1. healthy replicas: rank 0 prints ">>> Weight hashes match after {0,2,4} iterations..." once
     each (tensor-parallel shards differ, so only the data-parallel group may be compared);
  2. one corrupted replica (test-only MC_TEST_PERTURB_WEIGHT_RANK=3 adds 1e-3 to one weight of
     world rank 3 just before the check of iteration 2): the run stops with Megatron's per-
     parameter log line and assertion text, after the check of iteration 0 passed;
  3. the same corruption without the option trains on to the end (what the check is for), its
     first two iterations equal to run 1's (the check itself changes nothing);
  4. an interval of 0 is refused at start-up (COMPATIBILITY.md)."""
import re

from mc_test import Checks, parse_exact, run_pretrain

A = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--mock-data",
     "--vocab-size", "4096", "--tokenizer-type", "NullTokenizer", "--seq-length", "16",
     "--max-position-embeddings", "16", "--micro-batch-size", "2", "--global-batch-size", "8",
     "--train-iters", "4", "--lr", "1e-3", "--tensor-model-parallel-size", "2",
     "--log-interval", "1"]
CHECK = ["--check-weight-hash-across-dp-replicas-interval", "2"]
BAD = {"MC_TEST_PERTURB_WEIGHT_RANK": "3", "MC_TEST_PERTURB_AT_ITER": "2"}
MATCH = ">>> Weight hashes match after %d iterations..."


def main():
    c = Checks("weight_hash")
    good = run_pretrain(A + CHECK, np=4)
    c.check(good.returncode == 0, "healthy run exits 0 (%d)\n%s" % (good.returncode,
                                                                   good.stderr[-2000:]))
    lines = good.stdout.split("\n")
    for it in (0, 2, 4):
        c.check(lines.count(MATCH % it) == 1, "one %r line (got %d)" % (MATCH % it,
                                                                        lines.count(MATCH % it)))
    c.check(not any(MATCH % it in good.stdout for it in (1, 3)), "no check at iterations 1, 3")
    c.check(len(parse_exact(good.stdout)) == 4, "4 iterations logged")

    bad = run_pretrain(A + CHECK, np=4, env=BAD)
    out = bad.stdout + bad.stderr
    c.check(bad.returncode != 0, "a corrupted replica stops the run (exit %d)" % bad.returncode)
    c.check("INFO:megatron.core.utils:[Rank 3] Hash not matching for "
            "embedding.word_embeddings.weight in model chunk0" in bad.stdout,
            "Megatron's log line names rank 3's parameter:\n" + bad.stdout[-1500:])
    c.check("AssertionError: Parameter hashes not matching across DP replicas" in bad.stderr,
            "Megatron's assertion text:\n" + bad.stderr[-1500:])
    c.check(MATCH % 0 in bad.stdout and MATCH % 2 not in out, "caught at iteration 2, not before")
    c.check(not re.search(r"Rank [012]\] Hash not matching", bad.stdout),
            "only the corrupted rank names a differing parameter")

    unchecked = run_pretrain(A, np=4, env=BAD)
    c.check(unchecked.returncode == 0 and len(parse_exact(unchecked.stdout)) == 4,
            "without the option the corruption goes unnoticed (exit %d)" % unchecked.returncode)
    c.check(parse_exact(unchecked.stdout)[:2] == parse_exact(good.stdout)[:2],
            "the check changes no value: iterations 1-2 equal with and without it")

    # Megatron's iteration % 0 dies after the first step: refused before any work instead.
    zero = run_pretrain(A[:-4] + ["--check-weight-hash-across-dp-replicas-interval", "0"])
    c.check(zero.returncode == 1 and "--check-weight-hash-across-dp-replicas-interval 0: "
            "expected a positive number of iterations" in zero.stderr,
            "interval 0 refused (exit %d): %s" % (zero.returncode, zero.stderr[-300:]))
    return c.summary()


if __name__ == "__main__":
    raise SystemExit(main())
