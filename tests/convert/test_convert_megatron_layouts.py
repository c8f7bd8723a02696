"""convert_checkpoint on checkpoints Megatron-LM core_v0.12.1 wrote itself in parallel layouts
(tests/golden/checkpointing/<case>/save, made by the checkpointing tests' make_megatron_goldens.py:
GPT pp2, Llama tp2 x pp2, GPT dp2 x pp2 with the distributed optimizer, legacy-model GPT pp2):
each converts to tp1 (local names) and to tp2 (transformer_engine names); the full model merged
independently here (test_convert_reshard.full_model) equals the source's, and pretrain_gpt
continuing from the tp1 conversion prints the same loss at the next iteration as pretrain_gpt
continuing from Megatron's files at their own layout (both without optimizer state)."""
import os
import shutil
import tempfile

from common import PRETRAIN, SRC, Counter, convert, run
import test_convert_reshard as R

C = R.C
C.name = "test_convert_megatron_layouts"
GOLDEN = os.path.join(SRC, "tests", "golden", "checkpointing")
CORPUS = os.path.join(SRC, "tests", "golden", "data", "null_eod_uint16", "text_document")
CORPUS_B = os.path.join(GOLDEN, "corpus_b", "text_document")
GPT2 = ["--num-layers", "4", "--hidden-size", "16", "--num-attention-heads", "4"]
LLAMA = ["--num-layers", "4", "--hidden-size", "16", "--num-attention-heads", "4",
         "--group-query-attention", "--num-query-groups", "2", "--ffn-hidden-size", "40",
         "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
         "--disable-bias-linear", "--untie-embeddings-and-output-weights"]
# case -> (model, tp, pp, extra arguments of the original run, corpus)
CASES = {"gpt_pp2": (GPT2, 1, 2, [], CORPUS),
         "llama_tp2pp2": (LLAMA, 2, 2, [], CORPUS),
         "gpt_dp2pp2_distopt": (GPT2, 1, 2, [], CORPUS_B),
         "gpt_legacy_pp2": (GPT2, 1, 2, ["--use-legacy-models"], CORPUS)}


def continue_run(tmp, model, load, tp, pp, extra, corpus, div=64):
    args = [*model, "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
            "--global-batch-size", "8", "--train-iters", "4", "--lr", "1e-2", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "1", "--lr-decay-iters", "8", "--log-interval", "1", "--eval-interval",
            "100", "--eval-iters", "0", "--split", "100,0,0", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "512", "--make-vocab-size-divisible-by", str(div), "--data-cache-path",
            os.path.join(tmp, "cache"), "--attention-dropout", "0", "--hidden-dropout", "0",
            "--ckpt-format", "torch", "--seed", "1234", "--data-path", corpus, "--load", load,
            "--no-load-optim", "--no-load-rng", "--exit-on-missing-checkpoint",
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp), *extra]
    return run([PRETRAIN, *args], np=tp * pp)


def main():
    tmp = tempfile.mkdtemp(prefix="mc_convert_layouts_")
    try:
        for case, (model, tp, pp, extra, corpus) in CASES.items():
            src = os.path.join(GOLDEN, case, "save")
            want, _ = R.full_model(src)
            ours = os.path.join(tmp, case + "_tp1")
            p = convert(src, ours, "--loader", "legacy" if extra else "core", "--saver", "core",
                        "--saver-transformer-impl", "local", "--target-tensor-parallel-size", "1",
                        "--target-pipeline-parallel-size", "1")
            if not C.check(p.returncode == 0, "%s -> tp1: %s" % (case, p.stderr)):
                continue
            got, _ = R.full_model(ours)
            R.same_full(want, got, "%s -> tp1" % case)
            te = os.path.join(tmp, case + "_tp2te")
            q = convert(src, te, "--loader", "mcore", "--saver", "mcore", "--target-tensor-parallel-size", "2")
            if C.check(q.returncode == 0, "%s -> tp2 TE: %s" % (case, q.stderr)):
                R.same_full(want, R.full_model(te)[0], "%s -> tp2 TE" % case)
            # the table keeps the source's padding (64 x source TP) when converted without a true
            # vocabulary size, so the tp1 run pads the same way
            a = continue_run(tmp, model, ours, 1, 1, [], corpus, div=64 * tp)
            b = continue_run(tmp, model, src, tp, pp, extra, corpus)
            la, lb = R.loss_at(a, 4), R.loss_at(b, 4)
            C.check(la is not None and lb is not None and abs(la - lb) <= 1e-5 * abs(lb),
                    "%s: next-step loss %s (converted, tp1) vs %s (Megatron's files, tp%d pp%d): %s" %
                    (case, la, lb, tp, pp, (a.stderr + b.stderr)[-1500:]))
            print("%s: loss at iteration 4: %.9g converted tp1, %.9g Megatron's tp%d pp%d files" %
                  (case, la or 0, lb or 0, tp, pp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    C.finish()


if __name__ == "__main__":
    main()
