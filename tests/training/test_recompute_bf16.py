"""test_recompute.py's bf16 subset (selective, full uniform 2, full block 1: bit-identical to
bf16 without recompute over 20 iterations, weights and optimizer state included, and the
activation memory table), a Llama-style fp32 model whose last uniform group is shorter, and
fp32 with --use-flash-attn (full recompute bit-identical; selective has nothing to do)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import test_recompute  # noqa: E402

if __name__ == "__main__":
    sys.argv[1:] = ["bf16"]
    sys.exit(test_recompute.main())
