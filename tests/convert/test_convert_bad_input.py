"""convert_checkpoint on bad input: every failure exits non-zero with a message naming the
option / file / value, and leaves no output (neither SAVE_DIR nor its temporary SAVE_DIR.tmp.*):
missing or empty --load-dir, unknown --loader/--saver, missing required options, a target TP
that does not divide the heads, the query groups or the FFN size, a target PP that does not
divide the layers, a missing rank file, an existing non-empty --save-dir, bad integers; --help
lists every option of convert.py and its core/legacy loader and saver plugins."""
import os
import shutil
import tempfile

from common import CONVERT, GPT, LLAMA, PRETRAIN, Counter, convert, run, train_args

C = Counter("test_convert_bad_input")


def no_output(tmp, save, what):
    left = [f for f in os.listdir(os.path.dirname(save)) if f.startswith(os.path.basename(save))]
    C.check(not left, "%s: output left behind: %s" % (what, left))


def fails(tmp, what, args, needles, save=None):
    p = run([CONVERT, *args])
    ok = C.check(p.returncode != 0, "%s: exit status 0" % what)
    for n in needles:
        ok &= C.check(n in p.stderr, "%s: %r not in the message: %s" % (what, n, p.stderr.strip()))
    if save:
        no_output(tmp, save, what)
    return ok


def main():
    tmp = tempfile.mkdtemp(prefix="mc_convert_bad_")
    try:
        out = os.path.join(tmp, "out")
        base = ["--model-type", "GPT", "--save-dir", out]
        fails(tmp, "missing load dir", [*base, "--loader", "core", "--saver", "core",
                                        "--load-dir", os.path.join(tmp, "nope")],
              ["--load-dir", "nope", "no such directory"], out)
        os.makedirs(os.path.join(tmp, "empty"))
        fails(tmp, "no tracker", [*base, "--loader", "core", "--saver", "core",
                                  "--load-dir", os.path.join(tmp, "empty")],
              ["latest_checkpointed_iteration.txt"], out)
        fails(tmp, "unknown loader", [*base, "--loader", "foo", "--load-dir", tmp], ["loader plugin foo"], out)
        fails(tmp, "unknown saver", [*base, "--saver", "bar", "--load-dir", tmp], ["saver plugin bar"], out)
        fails(tmp, "missing --model-type", ["--load-dir", tmp, "--save-dir", out], ["--model-type"], out)
        fails(tmp, "BERT", ["--model-type", "BERT", "--load-dir", tmp, "--save-dir", out], ["BERT"], out)
        fails(tmp, "bad int", [*base, "--load-dir", tmp, "--target-tensor-parallel-size", "two"],
              ["--target-tensor-parallel-size", "'two'"], out)
        fails(tmp, "loader option", [*base, "--loader", "core", "--load-dir", tmp,
                                     "--make-vocab-size-divisible-by", "64"],
              ["--make-vocab-size-divisible-by", "hf"], out)
        fails(tmp, "hf loader option", [*base, "--loader", "core", "--load-dir", tmp, "--bf16"],
              ["--bf16", "hf"], out)
        fails(tmp, "bad choice", [*base, "--load-dir", tmp, "--saver-transformer-impl", "apex"],
              ["--saver-transformer-impl", "'apex'"], out)

        gpt = os.path.join(tmp, "gpt")
        p = run([PRETRAIN, *train_args(GPT, tmp, 1, extra=["--save", gpt, "--save-interval", "1"])])
        C.check(p.returncode == 0, "pretrain_gpt: " + p.stderr[-1000:])
        llama = os.path.join(tmp, "llama")
        p = run([PRETRAIN, *train_args(LLAMA, tmp, 1, extra=["--save", llama, "--save-interval", "1"])])
        C.check(p.returncode == 0, "pretrain_gpt llama: " + p.stderr[-1000:])
        core = ["--loader", "core", "--saver", "core"]
        fails(tmp, "tp 3 vs 4 heads", [*base, *core, "--load-dir", gpt, "--target-tensor-parallel-size", "3"],
              ["--target-tensor-parallel-size 3", "num_attention_heads 4"], out)
        fails(tmp, "tp 8 vs 4 query groups", [*base, *core, "--load-dir", llama, "--target-tensor-parallel-size", "8"],
              ["--target-tensor-parallel-size 8", "num_query_groups 4"], out)
        # a model whose FFN size alone is indivisible by the target TP
        odd = os.path.join(tmp, "odd")
        model = GPT[:-2] + ["--num-attention-heads", "4", "--ffn-hidden-size", "34"]
        p = run([PRETRAIN, *train_args(model, tmp, 1, extra=["--save", odd, "--save-interval", "1"])])
        if C.check(p.returncode == 0, "pretrain_gpt odd ffn: " + p.stderr[-1000:]):
            fails(tmp, "tp 4 vs ffn 34", [*base, *core, "--load-dir", odd, "--target-tensor-parallel-size", "4",
                                          "--true-vocab-size", "4097"],
                  ["--target-tensor-parallel-size 4", "ffn_hidden_size 34"], out)
        fails(tmp, "pp 3 vs 4 layers", [*base, *core, "--load-dir", gpt, "--target-pipeline-parallel-size", "3"],
              ["--target-pipeline-parallel-size 3", "num_layers 4"], out)
        # a tp2 checkpoint with one rank file missing
        tp2 = os.path.join(tmp, "tp2")
        p = convert(gpt, tp2, *core, "--target-tensor-parallel-size", "2", "--saver-transformer-impl", "local")
        if C.check(p.returncode == 0, "tp2 reshard: " + p.stderr):
            shutil.rmtree(os.path.join(tp2, "iter_0000001", "mp_rank_01"))
            fails(tmp, "missing rank", [*base, *core, "--load-dir", tp2, "--target-tensor-parallel-size", "1"],
                  ["tensor rank 1", "mp_rank_01", "missing"], out)
        # existing non-empty save dir: refused, left untouched
        os.makedirs(out)
        open(os.path.join(out, "keep"), "w").close()
        fails(tmp, "non-empty save dir", [*base, *core, "--load-dir", gpt], ["--save-dir", "not an empty directory"])
        C.check(os.listdir(out) == ["keep"], "non-empty save dir was modified")
        shutil.rmtree(out)

        p = run([CONVERT, "--help"])
        opts = ["--model-type", "--loader", "--saver", "--load-dir", "--save-dir", "--max-queue-size",
                "--no-checking", "--true-vocab-size", "--vocab-file", "--make-vocab-size-divisible-by",
                "--megatron-path", "--loader-transformer-impl", "--saver-transformer-impl",
                "--target-tensor-parallel-size", "--target-pipeline-parallel-size",
                "--target-expert-parallel-size", "--position-embedding-type", "--tokenizer-model",
                "--bf16", "--fp16", "--checkpoint-type", "--model-size"]
        C.check(p.returncode == 0 and all(o in p.stdout for o in opts),
                "--help lacks %s" % [o for o in opts if o not in p.stdout])
        # accepted-and-ignored options do not change the result
        a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        pa = convert(gpt, a, *core, "--saver-transformer-impl", "local")
        pb = convert(gpt, b, *core, "--saver-transformer-impl", "local", "--megatron-path", "/x",
                     "--max-queue-size", "7", "--loader-transformer-impl", "transformer_engine")
        C.check(pa.returncode == 0 and pb.returncode == 0, "ignored options: " + pa.stderr + pb.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    C.finish()


if __name__ == "__main__":
    main()
