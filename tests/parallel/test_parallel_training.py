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
import re
import subprocess
import sys
import tempfile

BUILD = os.environ.get("MC_BUILD_DIR", "build")
EXE = os.path.join(BUILD, "bin", "pretrain_gpt")
passed = failed = 0

GPT2 = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4"]
LLAMA = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "8",
         "--group-query-attention", "--num-query-groups", "4", "--ffn-hidden-size", "64",
         "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
         "--disable-bias-linear", "--untie-embeddings-and-output-weights"]

EXACT = re.compile(r"^\[exact\] iteration (\d+) \| lm loss: (\S+) \| grad norm: (\S+) \| "
                   r"params norm: (\S+)$")
VALID = re.compile(r"^ validation loss at (.*) \| lm loss value: (\S+) \|")
TRAIN = re.compile(r"^ \[.*\] iteration +\d+/ +\d+ \| consumed samples: +(\d+) \|")


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


SRC = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
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
    env = dict(os.environ, OMP_NUM_THREADS="1", MC_TEST_LOG_EXACT="1")
    if np == 1:
        cmd = [EXE, *args]
    else:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np), "-x",
               "OMP_NUM_THREADS=1", "-x", "MC_TEST_LOG_EXACT=1", EXE, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    lines = p.stdout.splitlines()
    exact = [m.groups() for m in map(EXACT.match, lines) if m]
    valid = [m.groups() for m in map(VALID.match, lines) if m]
    train = [m.group(1) for m in map(TRAIN.match, lines) if m]
    return p, exact, valid, train


def close(a, b, rel=1e-5):
    return abs(float(a) - float(b)) <= rel * max(abs(float(a)), abs(float(b)))


def compare(name, ref, got):
    p, exact, valid, train = got
    check(p.returncode == 0, f"{name}: exit 0 (got {p.returncode}: {p.stderr[-800:]})")
    check(len(exact) == 12, f"{name}: 12 [exact] lines, printed once (got {len(exact)})")
    check(train == ref[3], f"{name}: one training line per iteration, same consumed samples")
    check(len(valid) == len(ref[2]) == 4, f"{name}: 4 validation lines (got {len(valid)})")
    worst = 0.0
    for (i, l, g, pn), (ri, rl, rg, rpn) in zip(exact, ref[1]):
        ok = i == ri and close(l, rl) and close(g, rg) and close(pn, rpn)
        check(ok, f"{name} iteration {i}: lm loss {l} grad norm {g} params norm {pn}, "
                  f"single process {rl} {rg} {rpn}")
        worst = max(worst, abs(float(l) / float(rl) - 1), abs(float(g) / float(rg) - 1),
                    abs(float(pn) / float(rpn) - 1))
    for (w, v), (rw, rv) in zip(valid, ref[2]):
        check(w == rw and close(v, rv), f"{name} validation at {w}: {v} vs {rv}")
    return worst


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
    print(f"test_parallel_training: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
