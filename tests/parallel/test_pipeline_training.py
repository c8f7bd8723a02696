"""pretrain_gpt with pipeline parallelism under mpirun (oversubscribed, OMP_NUM_THREADS=1):
for a GPT-2-style model (tied embeddings: the last stage's output_layer.weight copy, its grad
summed over the embedding group) and a Llama-style one (SwiGLU, RMSNorm, RoPE, GQA, untied),
4 layers, pp=2 and pp=4 (1F1B with 4 micro-batches: warmup 0..3), pp2 x dp2 and pp2 x tp2
print the same 'lm loss', 'grad norm' and 'params norm' at each of 12 iterations, and the same
validation/test losses, as the single-process run with the same global batch (within 1e-5
relative, from the full-precision [exact] lines of MC_TEST_LOG_EXACT=1). Also: with dropout on
(each in-flight micro-batch keeps its own masks in its activation slot), with --calculate-per-token-loss (token count from the last stage), reruns are
bit-identical, the training line is printed once (by the last rank), and configurations
Megatron refuses are refused with its message. A pp2 x dp2 run on a real indexed dataset with
--eod-mask-loss, --reset-attention-mask and --reset-position-ids matches too."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import (SRC, check, compare_curves, gpt2, llama, parse_exact, parse_train,  # noqa: E402
                     parse_valid, run_pretrain, summary)

GPT2 = gpt2(4)
LLAMA = llama(4)
NO_DROPOUT = ["--attention-dropout", "0", "--hidden-dropout", "0"]
MOCK = ["--mock-data", "--vocab-size", "4096", "--seq-length", "32",
        "--max-position-embeddings", "32"]
# a real indexed dataset with EOD-reset attention masks and position ids: every stage needs the
# micro-batch's mask, the first its position ids, the last its loss mask
REAL = ["--data-path", os.path.join(SRC, "tests", "golden", "data", "null_eod_uint16",
                                    "text_document"),
        "--split", "80,10,10", "--vocab-size", "500", "--eod-mask-loss", "--reset-attention-mask",
        "--reset-position-ids", "--seq-length", "16", "--max-position-embeddings", "16"]


def run(model, tmp, np=1, tp=1, pp=1, extra=NO_DROPOUT, data=MOCK):
    args = [*model, *data, "--micro-batch-size", "2",
            "--global-batch-size", "8", "--train-iters", "12", "--lr", "1e-3",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--weight-decay", "0.1",
            "--clip-grad", "0.5", "--log-params-norm", "--log-interval", "1",
            "--eval-interval", "6", "--eval-iters", "2", "--tokenizer-type", "NullTokenizer",
            "--make-vocab-size-divisible-by", str(128 // tp),
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            "--data-cache-path", os.path.join(tmp, "cache"), *extra]
    p = run_pretrain(args, np, timeout=240)
    return p, parse_exact(p.stdout), parse_valid(p.stdout), parse_train(p.stdout)


def compare(name, ref, got):
    p, exact, valid, train = got
    check(p.returncode == 0, f"{name}: exit 0 (got {p.returncode}: {p.stderr[-800:]})")
    check(len(exact) == 12, f"{name}: 12 [exact] lines, printed once (got {len(exact)})")
    check(train == ref[3], f"{name}: one training line per iteration, same consumed samples")
    check(len(valid) == len(ref[2]) == 4, f"{name}: 4 validation lines (got {len(valid)})")
    return compare_curves(name, exact, ref[1], valid, ref[2])


def refused(tmp, np, pp, extra, message):
    p = run(GPT2, tmp, np, 1, pp, [*NO_DROPOUT, *extra])[0]
    check(p.returncode != 0 and message in p.stdout + p.stderr,
          f"pp{pp} {extra}: refused with '{message}' (rc {p.returncode}: "
          f"{(p.stdout + p.stderr)[-600:]})")


def main():
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        for mname, model in (("gpt2", GPT2), ("llama-gqa", LLAMA)):
            ref = run(model, tmp)
            check(ref[0].returncode == 0 and len(ref[1]) == 12,
                  f"{mname} single process runs ({ref[0].stderr[-800:]})")
            for np, tp, pp in ((2, 1, 2), (4, 1, 4), (4, 1, 2), (4, 2, 2)):
                name = f"{mname} pp{pp} tp{tp} dp{np // (tp * pp)}"
                got = run(model, tmp, np, tp, pp)
                report.append(f"{name}: max rel diff {compare(name, ref, got):.1e}")
                if (np, pp) == (4, 4):
                    again = run(model, tmp, np, tp, pp)
                    check(again[1] == got[1] and again[2] == got[2],
                          f"{name}: rerun bit-identical")
                    out = got[0].stdout
                    check(out.count("> initialized pipeline model parallel with size 4") == 1,
                          f"{name}: rank 0 prints the start-up lines once")
                    check(all(out.count(f"model parallel rank (0, {s})") == 1 for s in range(4)),
                          f"{name}: each stage prints its parameter count")
        dropout = ["--attention-dropout", "0.1", "--hidden-dropout", "0.1"]
        ref = run(GPT2, tmp, extra=dropout)
        got = run(GPT2, tmp, 4, 1, 4, dropout)
        report.append(f"gpt2 pp4 with dropout: max rel diff {compare('gpt2 pp4 dropout', ref, got):.1e}")
        per_token = [*NO_DROPOUT, "--calculate-per-token-loss"]
        ref = run(GPT2, tmp, extra=per_token)
        got = run(GPT2, tmp, 4, 1, 2, per_token)
        report.append("gpt2 pp2 dp2 per-token loss: max rel diff "
                      f"{compare('gpt2 pp2 dp2 per-token', ref, got):.1e}")
        ref = run(GPT2, os.path.join(tmp, "real-ref"), data=REAL)
        got = run(GPT2, os.path.join(tmp, "real"), 4, 1, 2, data=REAL)
        report.append("gpt2 pp2 dp2 indexed dataset, reset masks: max rel diff "
                      f"{compare('gpt2 pp2 dp2 indexed dataset', ref, got):.1e}")
        refused(tmp, 2, 2, ["--num-layers", "3"], "divisible")
    print("\n".join(report))
    return summary("test_pipeline_training")


if __name__ == "__main__":
    sys.exit(main())
