"""Whole-model training with flash attention (--use-flash-attn) equals the unfused
DotProductAttention path (--attention-backend unfused) within 1e-6 in fp32 over 20 steps: lm loss and
grad norm of every iteration ([exact] lines), for a GPT-2-style model (MHA, learned
positions), a Llama-style one (GQA, RoPE, SwiGLU) and the GPT-2 style with
--reset-attention-mask (the explicit-mask path), with attention and hidden dropout on (the
same keep masks in both paths), at a sequence length (96) that leaves a partial tile; and
the kernel each --transformer-impl / --attention-backend pair gets (the default
transformer_engine + auto: flash attention; --attention-backend unfused and --transformer-impl
local: the unfused op) gives that kernel's numbers bit for bit and is named by the dry run, whose
activation estimate follows it. (The flash path's activation accounting:
tests/unit/models/test_gpt_flash_bytes.c.)"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mc_test  # noqa: E402
from mc_test import check, summary  # noqa: E402

STEPS = 20


def args(tmp, model, extra=()):
    return [*model, "--seq-length", "96", "--max-position-embeddings", "96",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(STEPS),
            "--lr", "1e-3", "--min-lr", "1e-4", "--lr-decay-style", "cosine",
            "--log-interval", "1", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"),
            "--attention-dropout", "0.1", "--hidden-dropout", "0.1", *extra]


def main():
    models = (("gpt2", mc_test.gpt2(2), []), ("llama", mc_test.llama(2), []),
              ("gpt2 reset-attention-mask", mc_test.gpt2(2), ["--reset-attention-mask"]))
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, extra in models:
            base = mc_test.run_pretrain(args(tmp, model, extra + ["--attention-backend", "unfused"]))
            flash = mc_test.run_pretrain(args(tmp, model, extra + ["--use-flash-attn"]))
            check(base.returncode == 0 and flash.returncode == 0,
                  "%s runs: %s %s" % (name, base.stderr[-400:], flash.stderr[-400:]))
            a, b = mc_test.parse_exact(base.stdout), mc_test.parse_exact(flash.stdout)
            check(len(a) == STEPS and len(b) == STEPS,
                  "%s: %d and %d [exact] lines, want %d" % (name, len(a), len(b), STEPS))
            worst = {"lm loss": 0.0, "grad norm": 0.0}
            for x, y in zip(a, b):
                worst["lm loss"] = max(worst["lm loss"], mc_test.rel(x[1], y[1]))
                worst["grad norm"] = max(worst["grad norm"], mc_test.rel(x[2], y[2]))
            print("%-26s %d steps: lm loss worst relative difference %.2e, grad norm %.2e"
                  % (name, len(b), worst["lm loss"], worst["grad norm"]))
            for k, v in worst.items():
                check(v <= 1e-6, "%s: %s differs from the unfused path by %.2e > 1e-6"
                      % (name, k, v))
            if name == "gpt2":
                same_numbers(tmp, model, a, b)
        dry_run_lines(tmp)
    return summary("test_flash_training")


# Which kernel each --transformer-impl / --attention-backend pair gets (mc_attention_from_args,
# as Megatron maps them: docs/flash-attention.md): True = flash attention, False = unfused.
KERNELS = (
    ([], True),  # transformer_engine + auto: TE's first choice
    (["--attention-backend", "flash"], True),
    (["--attention-backend", "fused"], True),
    (["--attention-backend", "unfused"], False),
    (["--transformer-impl", "local"], False),  # the local spec's DotProductAttention
    (["--transformer-impl", "local", "--attention-backend", "flash"], False),
    (["--transformer-impl", "local", "--use-flash-attn"], True),
    (["--attention-backend", "unfused", "--use-flash-attn"], True),
    (["--use-legacy-models", "--ckpt-format", "torch", "--transformer-impl", "local"], False),
    (["--use-legacy-models", "--ckpt-format", "torch"], True),  # TE's TransformerLayer
)


def same_numbers(tmp, model, unfused, flash):
    """The default (transformer_engine, auto) and the other flash choices give --use-flash-attn's
    numbers bit for bit; --transformer-impl local gives the unfused ones."""
    for extra, is_flash in KERNELS[:6]:
        if extra == ["--attention-backend", "unfused"]:
            continue  # the reference run itself
        c = mc_test.run_pretrain(args(tmp, model, extra))
        check(mc_test.parse_exact(c.stdout) == (flash if is_flash else unfused),
              "%s gives the numbers of %s" % (extra or "the default", "--use-flash-attn"
                                              if is_flash else "--attention-backend unfused"))


def dry_run_lines(tmp):
    """The dry run names the kernel and its activation estimate follows it."""
    per = {}
    for extra, is_flash in KERNELS:
        p = mc_test.run_pretrain(args(tmp, mc_test.gpt2(2), extra + ["--dry-run"]))
        line = [x for x in p.stdout.splitlines() if "megatron.c dry run: attention: " in x]
        want = "flash attention, no [b, heads, s, s]" if is_flash else "unfused DotProductAttention"
        check(p.returncode == 0 and len(line) == 1 and want in line[0],
              "dry run %s: %s (%s)" % (extra, line or p.stdout[-300:], want))
        kept = [x for x in p.stdout.splitlines() if "activations kept by one model chunk" in x]
        per.setdefault(is_flash, set()).update(kept)
    check(len(per[True]) == 1 and len(per[False]) == 1 and per[True] != per[False],
          "one activation estimate per kernel, and they differ: %s" % per)


if __name__ == "__main__":
    sys.exit(main())
