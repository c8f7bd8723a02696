"""MindSpeed-LLM's --sliding-window W through pretrain_gpt (a small Llama, seq 64, fp32):
the unfused attention (attention.c's band mask) and --use-flash-attn (the flash op's window)
train to the same losses (1e-6 relative: the two are checked against PyTorch in
tests/backend/test_sliding_window.py and tests/parity, configs sliding_window*); a window of
seq - 1 keys or more trains bit for bit as causal attention, a narrower one does not; with
--reset-attention-mask documents too; a window below 1 is refused by name in the dry run and
the real run; the dry run says what the window does."""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import mc_test  # noqa: E402
from mc_test import check, summary  # noqa: E402


def args(tmp, extra):
    return [*mc_test.llama(2), "--seq-length", "64", "--max-position-embeddings", "64",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3",
            "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
            "--hidden-dropout", "0", "--attention-backend", "unfused",  # --use-flash-attn: flash
            *extra]


def losses(tmp, extra):
    p = mc_test.run_pretrain(args(tmp, extra))
    check(p.returncode == 0, "%s: rc %d %s" % (extra, p.returncode, p.stderr[-400:]))
    got = mc_test.parse_exact(p.stdout)
    check(len(got) == 3, "%s: 3 iterations logged" % extra)
    return got


def loss_values(runs):
    """lm loss and grad norm of each iteration"""
    return [float(x) for r in runs for x in (r[1], r[2])]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        causal = losses(tmp, [])
        for docs in ([], ["--reset-attention-mask", "--eod-mask-loss"]):
            unfused = losses(tmp, docs + ["--sliding-window", "8"])
            flash = losses(tmp, docs + ["--sliding-window", "8", "--use-flash-attn"])
            a, b = loss_values(unfused), loss_values(flash)
            worst = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and b else 1.0
            check(len(a) == 6 and worst <= 1e-6, "%s window 8: unfused %s = flash %s (worst %.1e)"
                  % (docs, a, b, worst))
            print("window 8 %s: unfused %s flash %s" % (docs, a, b))
        check(losses(tmp, ["--sliding-window", "63"]) == causal, "window 63 of 64 = causal")
        check(losses(tmp, ["--sliding-window", "63", "--use-flash-attn"]) ==
              losses(tmp, ["--use-flash-attn"]), "flash: window 63 of 64 = causal")
        check(losses(tmp, ["--sliding-window", "62"]) != causal, "window 62 of 64 differs")
        for dry in ([], ["--dry-run"]):
            p = mc_test.run_pretrain(args(tmp, ["--sliding-window", "0"] + dry))
            check(p.returncode == 1 and "--sliding-window 0: expected a positive number of keys"
                  in p.stdout + p.stderr, "window 0 refused %s: %s" % (dry, p.stderr[-300:]))
        p = mc_test.run_pretrain(args(tmp, ["--sliding-window", "8", "--dry-run"]))
        check(p.returncode == 0 and "sliding-window attention: each query sees itself and the 8 "
              "keys before it" in p.stdout, "dry run line: %s" % p.stdout[-300:])
    return summary("test_sliding_window_train")


if __name__ == "__main__":
    sys.exit(main())
