"""pretrain_gpt under mpirun (oversubscribed, OMP_NUM_THREADS=1): for a GPT-2-style and a
Llama-style (SwiGLU, RMSNorm, RoPE, GQA, untied) model, data parallel 2 and 4, tensor parallel
2 and 4, and tp2 x dp2 print the same 'lm loss', 'grad norm' and 'params norm' at every one
of 12 iterations,
and the same validation/test losses, as the single-process run with the same global batch
(within 1e-5 relative, read from the full-precision [exact] lines that MC_TEST_LOG_EXACT=1
adds); reruns are bit-identical; the training line is printed once (by the last rank), the
start-up lines once (by rank 0); --calculate-per-token-loss (grads summed over DP, scaled by
the global token count) matches too, and so does a tp2 x dp2 run on a real indexed dataset
(train/valid/test split, --eod-mask-loss) whose index caches rank 0 builds first, and dp2,
tp2 x dp2 and pp2 x dp2 runs with dropout on (the masks follow the samples, not the rank). Tensor-parallel runs pad the vocabulary like the
single-process run (--make-vocab-size-divisible-by 128/tp) so the models are the same."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import (SRC, check, compare_curves, gpt2, llama, parse_exact, parse_train,  # noqa: E402
                     parse_valid, run_pretrain, summary)

GPT2 = gpt2()
LLAMA = llama()
MOCK = ["--mock-data", "--vocab-size", "4096", "--seq-length", "32",
        "--max-position-embeddings", "32"]
# a real indexed dataset (preprocess_data golden, NullTokenizer vocab 500, EOD appended),
# train/valid/test split, EOD tokens masked out of the loss
REAL = ["--data-path", os.path.join(SRC, "tests", "golden", "data", "null_eod_uint16",
                                    "text_document"),
        "--split", "80,10,10", "--vocab-size", "500", "--eod-mask-loss", "--seq-length", "16",
        "--max-position-embeddings", "16"]


def run(model, tmp, np=1, tp=1, extra=(), data=MOCK):
    args = [*model, *data, "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "12",
            "--lr", "1e-3", "--lr-decay-style", "cosine", "--lr-warmup-iters", "2",
            "--weight-decay", "0.1", "--clip-grad", "0.5", "--log-params-norm",
            "--log-interval", "1", "--eval-interval", "6", "--eval-iters", "2",
            "--tokenizer-type", "NullTokenizer",
            "--make-vocab-size-divisible-by", str(128 // tp),
            "--tensor-model-parallel-size", str(tp), "--data-cache-path",
            os.path.join(tmp, "cache"), "--attention-dropout", "0", "--hidden-dropout", "0",
            *extra]
    p = run_pretrain(args, np, timeout=240)
    return p, parse_exact(p.stdout), parse_valid(p.stdout), parse_train(p.stdout)


def compare(name, ref, got):
    p, exact, valid, train = got
    check(p.returncode == 0, f"{name}: exit 0 (got {p.returncode}: {p.stderr[-800:]})")
    check(len(exact) == 12, f"{name}: 12 [exact] lines, printed once (got {len(exact)})")
    check(train == ref[3], f"{name}: one training line per iteration, same consumed samples "
          f"(got {train}, one process {ref[3]}; stdout tail: {p.stdout[-600:]!r})")
    check(len(valid) == len(ref[2]) == 4, f"{name}: 4 validation lines (got {len(valid)})")
    return compare_curves(name, exact, ref[1], valid, ref[2])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        report = []
        for mname, model in (("gpt2", GPT2), ("llama-gqa", LLAMA)):
            ref = run(model, tmp)
            check(ref[0].returncode == 0 and len(ref[1]) == 12,
                  f"{mname} single process runs ({ref[0].stderr[-800:]})")
            for np, tp in ((2, 1), (4, 1), (2, 2), (4, 4), (4, 2)):
                name = f"{mname} tp{tp} dp{np // tp}"
                got = run(model, tmp, np, tp)
                worst = compare(name, ref, got)
                report.append(f"{name}: max rel diff {worst:.1e}")
                if (np, tp) == (4, 2):
                    again = run(model, tmp, np, tp)
                    check(again[1] == got[1] and again[2] == got[2],
                          f"{name}: rerun bit-identical")
                    out = got[0].stdout
                    check(out.count("> initialized tensor model parallel with size 2") == 1,
                          f"{name}: rank 0 prints the start-up lines once")
                    check(out.count("model parallel rank (0, 0)") == 1 and
                          out.count("model parallel rank (1, 0)") == 1,
                          f"{name}: parameter counts printed by each data-parallel rank 0")
        per_token = ["--calculate-per-token-loss"]
        ref = run(GPT2, tmp, extra=per_token)
        got = run(GPT2, tmp, 4, 1, per_token)
        worst = compare("gpt2 dp4 --calculate-per-token-loss", ref, got)
        report.append(f"gpt2 dp4 per-token loss: max rel diff {worst:.1e}")
        # dropout on: data-parallel rank d draws the masks of micro-batch k * dp + d of the
        # single-process run (the same samples), so the curves still match
        drop = ["--attention-dropout", "0.1", "--hidden-dropout", "0.1"]
        ref = run(GPT2, tmp, extra=drop)
        for np, tp, pp in ((2, 1, 1), (4, 2, 1), (4, 1, 2)):
            name = f"gpt2 tp{tp} pp{pp} dp{np // tp // pp} with dropout"
            got = run(GPT2, tmp, np, tp, [*drop, "--pipeline-model-parallel-size", str(pp)])
            worst = compare(name, ref, got)
            report.append(f"{name}: max rel diff {worst:.1e}")
        real_tmp = os.path.join(tmp, "real")  # a fresh cache: rank 0 builds it under mpirun
        ref = run(GPT2, os.path.join(tmp, "real-ref"), data=REAL)
        got = run(GPT2, real_tmp, 4, 2, data=REAL)
        worst = compare("gpt2 tp2 dp2 indexed dataset --eod-mask-loss", ref, got)
        report.append(f"gpt2 tp2 dp2 on an indexed dataset: max rel diff {worst:.1e}")
        print("\n".join(report))
    return summary("test_parallel_training")


if __name__ == "__main__":
    sys.exit(main())
