"""build/bin/generate against HuggingFace transformers (4.44.2 in build/hf-venv, made by
scripts/setup_hf_venv.sh) on the same weights.

A GPT-2-style model (LayerNorm, learned positions, tanh-GELU, biases, tied embeddings) and a
Llama-style one (RMSNorm, RoPE base 5e5 with Llama-3 scaling, SwiGLU, GQA 8 heads / 4 groups,
no biases, untied) are trained for 2 iterations by pretrain_gpt (--init-method-std 0.3, so the
logits are far apart and greedy choices are not near-ties), saved --ckpt-format torch and
exported with convert_checkpoint --saver hf. Checks:
  - greedy tokens of a ragged batch of 3 prompts (lengths 1, 4, 9) are identical to
    transformers' greedy generate of each prompt alone (stopping at the EOD token both ways);
  - the logits of every token of a prompt are within 1e-5 of max |logit| of transformers'
    (over the true vocabulary);
  - the same tokens without the KV cache (--no-kv-cache), and for each prompt alone;
  - the same tokens from the checkpoint resharded to TP 2 / PP 2 (loaded in one process);
  - the exported HuggingFace directory generated at TP 2 under mpirun (its 4097-row
    vocabulary split unevenly): transformers' tokens, logits within 1e-5 of max |logit|;
  - sampling (temperature + top-k, and top-p) gives the same tokens for the same seed, run
    twice, and other tokens for another seed.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, Checks, gpt2, llama, mpirun_cmd, run_cmd  # noqa: E402

C = Checks("test_generate_hf")
PRETRAIN = os.path.join(BUILD, "bin", "pretrain_gpt")
CONVERT = os.path.join(BUILD, "bin", "convert_checkpoint")
GENERATE = os.path.join(BUILD, "bin", "generate")
VENV_PY = os.path.join(BUILD, "hf-venv", "bin", "python")
HF_SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_generate.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1")
LLAMA = llama(2) + ["--rotary-base", "500000", "--use-rope-scaling"]
PROMPTS = [[17], [5, 900, 33, 4000], [1, 2, 3, 4, 5, 6, 7, 8, 9]]
EOD = 4096  # NullTokenizer --vocab-size 4096: eod is the last id


def run(cmd, timeout=300):
    return run_cmd(cmd, ENV, timeout)


def train(tmp, label, model):
    save = os.path.join(tmp, label)
    p = run([PRETRAIN, *model, "--seq-length", "32", "--max-position-embeddings", "32",
             "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2",
             "--lr", "1e-3", "--mock-data", "--tokenizer-type", "NullTokenizer",
             "--vocab-size", "4096", "--data-cache-path", os.path.join(tmp, "cache"),
             "--attention-dropout", "0", "--hidden-dropout", "0", "--init-method-std", "0.3",
             "--ckpt-format", "torch", "--transformer-impl", "local", "--eval-iters", "0",
             "--save", save, "--save-interval", "2"])
    return save if C.check(p.returncode == 0, "pretrain_gpt %s: %s" % (label, p.stderr[-2000:])) else None


def generate(ckpt, prompts, *extra):
    cmd = [GENERATE, "--load", ckpt, "--output-format", "json", "--max-tokens", "12"]
    for p in prompts:
        cmd += ["--prompt", " ".join(map(str, p))]
    p = run(cmd + list(extra))
    if not C.check(p.returncode == 0, "generate %s: %s" % (" ".join(extra), p.stderr[-2000:])):
        return None
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    for r, want in zip(rows, prompts):
        C.check(r["prompt_tokens"] == want, "prompt tokens %s, want %s" % (r["prompt_tokens"], want))
    return [r["generated_tokens"] for r in rows]


def hf_generate(tmp, hf_dir, prompts):
    spec, out, logits = (os.path.join(tmp, n) for n in ("hf_in.json", "hf_out.json", "hf_logits.npy"))
    json.dump({"prompts": prompts, "max_new_tokens": 12, "eos": EOD, "threads": 1}, open(spec, "w"))
    p = run([VENV_PY, HF_SIDE, hf_dir, spec, out, logits])
    if not C.check(p.returncode == 0, "hf_generate: %s" % p.stderr[-3000:]):
        return None, None
    return json.load(open(out)), np.load(logits)


def case(tmp, label, model):
    ckpt = train(tmp, label, model)
    if not ckpt:
        return
    hf_dir = ckpt + "_hf"
    q = run([CONVERT, "--model-type", "GPT", "--loader", "core", "--saver", "hf",
             "--load-dir", ckpt, "--save-dir", hf_dir])
    if not C.check(q.returncode == 0, "%s export: %s" % (label, q.stderr[-2000:])):
        return
    want, want_logits = hf_generate(tmp, hf_dir, PROMPTS)
    if want is None:
        return
    got = generate(ckpt, PROMPTS, "--greedy")
    print("  %s: ours %s\n  %s: transformers %s" % (label, got, label, want["tokens"]))
    C.check(got == want["tokens"], "%s: greedy tokens differ from transformers'" % label)
    C.check(any(len(t) > 0 for t in want["tokens"]), "%s: nothing generated" % label)
    dump = os.path.join(tmp, label + "_logits.npy")
    got2 = generate(ckpt, PROMPTS[:1], "--greedy", "--dump-logits", dump)
    if got2 is not None:
        ours = np.load(dump)[:, :want_logits.shape[1]]
        err = np.abs(ours.astype(np.float64) - want_logits).max() / np.abs(want_logits).max()
        print("  %s: logits max |diff| / max |logit| = %.2e" % (label, err))
        C.check(ours.shape == want_logits.shape and err <= 1e-5,
                "%s: logits rel err %.2e (shape %s vs %s)" % (label, err, ours.shape, want_logits.shape))
    C.check(generate(ckpt, PROMPTS, "--greedy", "--no-kv-cache") == got,
            "%s: --no-kv-cache changed the tokens" % label)
    alone = [generate(ckpt, [p], "--greedy") for p in PROMPTS]
    C.check(alone == [[t] for t in got], "%s: a prompt alone gives other tokens than in the batch: "
            "%s vs %s" % (label, alone, got))
    tp2_logits = os.path.join(tmp, label + "_tp2_logits.npy")
    cmd = [GENERATE, "--load", hf_dir, "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
           "--output-format", "json", "--max-tokens", "12", "--greedy", "--dump-logits", tp2_logits,
           "--tensor-model-parallel-size", "2", *sum((["--prompt", " ".join(map(str, p))] for p in PROMPTS), [])]
    q = run(mpirun_cmd(2, cmd, ("OMP_NUM_THREADS=1",)))
    if C.check(q.returncode == 0, "%s HF directory at TP 2: %s" % (label, q.stderr[-2000:])):
        rows = [json.loads(x)["generated_tokens"] for x in q.stdout.splitlines() if x.startswith("{")]
        C.check(rows == want["tokens"], "%s TP 2: tokens %s, transformers %s" % (label, rows, want["tokens"]))
        ours = np.load(tp2_logits)[:, :want_logits.shape[1]]
        err = np.abs(ours.astype(np.float64) - want_logits).max() / np.abs(want_logits).max()
        print("  %s TP 2 from the HF directory: logits max |diff| / max |logit| = %.2e" % (label, err))
        C.check(ours.shape == want_logits.shape and err <= 1e-5, "%s TP 2: logits rel err %.2e" % (label, err))
    resharded = ckpt + "_tp2pp2"
    q = run([CONVERT, "--model-type", "GPT", "--loader", "core", "--saver", "core",
             "--saver-transformer-impl", "local", "--target-tensor-parallel-size", "2",
             "--target-pipeline-parallel-size", "2", "--load-dir", ckpt, "--save-dir", resharded])
    if C.check(q.returncode == 0, "%s reshard: %s" % (label, q.stderr[-2000:])):
        C.check(generate(resharded, PROMPTS, "--greedy") == got,
                "%s: the TP2/PP2 checkpoint gives other tokens" % label)
    for sampling in (["--temperature", "0.8", "--top-k", "50"], ["--top-p", "0.9"]):
        a = generate(ckpt, PROMPTS, *sampling, "--seed", "7")
        b = generate(ckpt, PROMPTS, *sampling, "--seed", "7")
        c = generate(ckpt, PROMPTS, *sampling, "--seed", "8")
        C.check(a is not None and a == b, "%s %s: seed 7 twice: %s vs %s" % (label, sampling, a, b))
        C.check(a != c, "%s %s: seeds 7 and 8 gave the same tokens %s" % (label, sampling, a))


def main():
    if not os.path.exists(VENV_PY):
        print("test_generate_hf: no %s: run scripts/setup_hf_venv.sh %s" % (VENV_PY, BUILD))
        sys.exit(1)
    with tempfile.TemporaryDirectory() as tmp:
        case(tmp, "gpt2", gpt2(2))
        case(tmp, "llama", LLAMA)
    sys.exit(C.summary())


if __name__ == "__main__":
    main()
