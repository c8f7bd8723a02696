"""MindSpeed options that change no number in megatron.c, checked against what MindSpeed's code
does with them:
* --reuse-fp32-param (mindspeed/core/memory/reuse_param): the bf16 weights are kept inside the
  fp32 main weights' storage (fp32 = bf16 + a 16-bit residual); the update is the ordinary one,
  and MindSpeed's own test (test_reuse_optimizer.py) asserts bit-equal weights with
  --npu-deterministic. Here: a bf16 run with it trains bit for bit as without it (ordinary and
  distributed optimizer), prints its note, and fp32 is refused with MindSpeed's assertion.
* --spec mindspeed_llm.tasks.models.spec.qwen3_spec layer_spec: that spec is Megatron's local
  spec with PTNorm norms (and per-head q/k norms with --qk-layernorm), so with
  --transformer-impl local the run is bit for bit the run without --spec; other specs, and the
  combinations the spec builds differently, are refused by name in the dry run and the real run."""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import mc_test  # noqa: E402
from mc_test import check, summary  # noqa: E402

QWEN3 = ["--spec", "mindspeed_llm.tasks.models.spec.qwen3_spec", "layer_spec"]


def args(tmp, extra):
    return [*mc_test.llama(2), "--seq-length", "32", "--max-position-embeddings", "32",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3",
            "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
            "--hidden-dropout", "0", *extra]


def losses(tmp, extra, what):
    p = mc_test.run_pretrain(args(tmp, extra))
    check(p.returncode == 0, "%s: rc %d %s" % (what, p.returncode, p.stderr[-400:]))
    return p, mc_test.parse_exact(p.stdout)


def check_reuse(tmp):
    for opt in ([], ["--use-distributed-optimizer"]):
        _, base = losses(tmp, ["--bf16"] + opt, "bf16 %s" % opt)
        p, reuse = losses(tmp, ["--bf16", "--reuse-fp32-param"] + opt, "bf16 reuse %s" % opt)
        check(len(base) == 3 and reuse == base, "--reuse-fp32-param %s: same losses %s %s"
              % (opt, reuse, base))
        check("note: --reuse-fp32-param accepted: MindSpeed memory saving" in p.stdout + p.stderr,
              "--reuse-fp32-param note")
    p = mc_test.run_pretrain(args(tmp, ["--reuse-fp32-param"]))
    check(p.returncode == 1 and "AssertionError: --reuse-fp32-param only support for `bf16`"
          in p.stderr, "fp32 --reuse-fp32-param refused: rc %d %s" % (p.returncode, p.stderr[-300:]))


def check_spec(tmp):
    local = ["--transformer-impl", "local", "--qk-layernorm"]
    _, base = losses(tmp, local, "local spec")
    _, spec = losses(tmp, local + QWEN3, "qwen3 spec")
    check(len(base) == 3 and spec == base, "qwen3 spec = local spec: %s %s" % (spec, base))
    for extra, want in (
            (QWEN3, "with --transformer-impl transformer_engine is not supported"),
            (local + QWEN3 + ["--apply-layernorm-1p"], "with --apply-layernorm-1p is not supported"),
            (local + ["--spec", "my.module", "my_spec"], "--spec my.module my_spec is not supported "
             "by megatron.c (it builds its own layers")):
        for dry in ([], ["--dry-run"]):
            p = mc_test.run_pretrain(args(tmp, extra + dry))
            check(p.returncode == 1 and want in p.stdout + p.stderr, "%s %s refused: rc %d %s" % (
                extra, dry, p.returncode, (p.stdout + p.stderr)[-300:]))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_reuse(tmp)
        check_spec(tmp)
    return summary("test_mindspeed_options")


if __name__ == "__main__":
    sys.exit(main())
