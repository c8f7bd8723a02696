"""MindSpeed-LLM's ALiBi through pretrain_gpt (Baichuan2's --position-embedding-type alibi
--square-alibi-mask --fill-neg-inf; a small Llama-style model with 6 heads, not a power of two,
seq 48, fp32, 3 iterations):
- trains, and its losses differ from the same model without positions (--position-embedding-
  type none): the bias is there;
- --use-flash-attn trains to the unfused attention's losses (1e-6 relative), square and row
  forms (the op pairs are checked against PyTorch in tests/backend/test_alibi.py, the model
  against the PyTorch twin in tests/parity, configs alibi_*);
- --fill-neg-inf changes no number (the same bits);
- the row form ([1, s], no --square-alibi-mask) within 1e-5 of the square form (softmax ignores a
  row's constant; only rounding differs);
- tensor parallel 2 under mpirun (3 heads a rank, each rank taking its global heads' slopes)
  trains to the single process's losses (1e-5);
- the dry run says what ALiBi does; the checkpoint has no position embedding; HF export and
  text generation of the ALiBi model are refused by name (export tested here); --sliding-window with ALiBi is
  refused by name."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import mc_test  # noqa: E402
from mc_test import check, summary  # noqa: E402

BUILD = os.environ.get("MC_BUILD_DIR", "build")
ALIBI = ["--position-embedding-type", "alibi", "--square-alibi-mask", "--fill-neg-inf"]


def args(tmp, extra):
    return ["--num-layers", "2", "--hidden-size", "48", "--num-attention-heads", "6",
            "--group-query-attention", "--num-query-groups", "2", "--ffn-hidden-size", "64",
            "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear",
            "--untie-embeddings-and-output-weights",
            "--seq-length", "48", "--max-position-embeddings", "48",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "3",
            "--lr", "1e-3", "--log-interval", "1", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4095",  # + EOD = 4096: the same padding at tp 1 and 2
           
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
            "--hidden-dropout", "0", "--init-method-std", "0.1",
            "--attention-backend", "unfused", *extra]  # the reference; --use-flash-attn: flash


def losses(tmp, extra, np=1):
    p = mc_test.run_pretrain(args(tmp, extra), np=np)
    check(p.returncode == 0, "%s np %d: rc %d %s" % (extra, np, p.returncode, p.stderr[-600:]))
    got = mc_test.parse_exact(p.stdout)
    check(len(got) == 3, "%s np %d: 3 iterations logged" % (extra, np))
    return got


def values(runs):
    """lm loss and grad norm of each iteration"""
    return [float(x) for r in runs for x in (r[1], r[2])]


def worst(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b)) if a and b and len(a) == len(b) else 1.0


def main():
    with tempfile.TemporaryDirectory() as tmp:
        square = losses(tmp, ALIBI)
        none = losses(tmp, ["--position-embedding-type", "none"])
        check(values(square) != values(none) and values(square)[0] != values(none)[0],
              "ALiBi losses %s differ from no positions %s" % (values(square), values(none)))
        print("alibi square + fill-neg-inf: %s\nno positions: %s" % (values(square), values(none)))
        check(losses(tmp, ALIBI[:3]) == square, "--fill-neg-inf changes no number")
        row = losses(tmp, ALIBI[:2])
        w = worst(values(row), values(square))
        check(w <= 1e-5, "row form %s within 1e-5 of the square form (worst %.1e)" % (values(row), w))
        print("row form vs square form: worst %.1e" % w)
        for form, ref in (("square", square), ("row", row)):
            extra = ALIBI if form == "square" else ALIBI[:2]
            flash = losses(tmp, extra + ["--use-flash-attn"])
            w = worst(values(flash), values(ref))
            check(w <= 1e-6, "%s form: flash %s = unfused %s (worst %.1e)" % (
                form, values(flash), values(ref), w))
            print("%s form, flash vs unfused: worst %.1e" % (form, w))
        # the same initial weights at tp 1 and 2 (Megatron's CPU initialization, then split)
        tp1 = losses(tmp, ALIBI + ["--use-cpu-initialization"])
        tp2 = losses(tmp, ALIBI + ["--use-cpu-initialization", "--tensor-model-parallel-size", "2"],
                     np=2)
        w = worst(values(tp2), values(tp1))
        check(w <= 1e-5, "tp2 %s = single process %s (worst %.1e)" % (values(tp2), values(tp1), w))
        print("tp2 vs single process: worst %.1e" % w)

        # the dry run tells what it does
        p = mc_test.run_pretrain(args(tmp, ALIBI + ["--dry-run"]))
        check(p.returncode == 0 and "ALiBi attention (MindSpeed-LLM): no position embedding, each "
              "of the 6 heads adds slope x (key - query) to its scores" in p.stdout,
              "dry run line: %s" % p.stdout[-400:])
        for dry in ([], ["--dry-run"]):
            p = mc_test.run_pretrain(args(tmp, ALIBI + ["--sliding-window", "8"] + dry))
            check(p.returncode != 0 and "--sliding-window with --position-embedding-type alibi" in
                  p.stdout + p.stderr, "sliding window refused %s: %s" % (dry, p.stderr[-300:]))

        # a checkpoint: no position embedding; HF export and generation refused by name
        ck = os.path.join(tmp, "ck")
        p = mc_test.run_pretrain(args(tmp, ALIBI + ["--save", ck, "--save-interval", "3",
                                                    "--ckpt-format", "torch"]))
        check(p.returncode == 0, "save: rc %d %s" % (p.returncode, p.stderr[-300:]))
        import torch
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "checkpointing"))
        import torch_stubs  # Megatron's classes in the pickle
        torch_stubs.install()
        sd = torch.load(os.path.join(ck, "iter_0000003", "mp_rank_00", "model_optim_rng.pt"))
        keys = list(sd["model"].keys())
        check(sd["args"].position_embedding_type == "alibi" and sd["args"].square_alibi_mask and
              "embedding.word_embeddings.weight" in keys and
              not any("position_embeddings" in k for k in keys),
              "checkpoint: args alibi, no position embedding: %s" % keys[:4])
        conv = os.path.join(BUILD, "bin", "convert_checkpoint")
        p = subprocess.run([conv, "--model-type", "GPT", "--loader", "core", "--saver", "hf",
                            "--load-dir", ck, "--save-dir", os.path.join(tmp, "hf")],
                           capture_output=True, text=True)
        check(p.returncode != 0 and "ALiBi" in p.stdout + p.stderr,
              "HF export refused by name: rc %d %s" % (p.returncode, (p.stdout + p.stderr)[-300:]))
        check(not os.path.exists(os.path.join(tmp, "hf", "model.safetensors")),
              "HF export wrote no model file")
    return summary("test_alibi_train")


if __name__ == "__main__":
    sys.exit(main())
