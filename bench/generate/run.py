#!/usr/bin/env python3
"""Generation speed: build/bin/generate beside HuggingFace transformers' generate on the same
model and thread count, in the same run (not a test; docs/generation.md has the numbers).

A GPT-2-style model (12 layers, hidden 768, 12 heads: GPT-2 small's shape, with a 4097-token
NullTokenizer vocabulary) and a Llama-style one (GQA, SwiGLU, RMSNorm, RoPE) are initialized
by pretrain_gpt (Megatron's init, std 0.02; 1 iteration), saved, exported with convert_checkpoint --saver hf, then each
side generates greedily for one prompt of --prompt-len tokens, --new-tokens new tokens, batch 1,
both warmed up first: prefill tokens/s (the prompt's forward) and decode tokens/s (one token at a
time with the KV cache). The CPU model, its load average and the thread count are printed.

  /usr/bin/python3 bench/generate/run.py [--threads 1,2] [--prompt-len 128] [--new-tokens 64]
  needs build/ (make) and build/hf-venv (scripts/setup_hf_venv.sh build)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("MC_BUILD_DIR", os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "bin")
VENV_PY = os.path.join(BUILD, "hf-venv", "bin", "python")
HF_SIDE = os.path.join(ROOT, "tests", "inference", "hf_generate.py")

MODELS = {
    "gpt2-small-shape": ["--num-layers", "12", "--hidden-size", "768", "--num-attention-heads", "12"],
    "llama-style": ["--num-layers", "8", "--hidden-size", "512", "--num-attention-heads", "8",
                    "--group-query-attention", "--num-query-groups", "2", "--ffn-hidden-size", "1408",
                    "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
                    "--disable-bias-linear", "--untie-embeddings-and-output-weights"],
}


def sh(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr[-3000:]))
    return p


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def make_model(tmp, label, model, seq):
    ck = os.path.join(tmp, label)
    sh([os.path.join(BIN, "pretrain_gpt"), *model, "--seq-length", str(seq), "--max-position-embeddings",
        str(seq), "--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "1",
        "--lr", "1e-4", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
        "--data-cache-path", os.path.join(tmp, "cache"),
        "--ckpt-format", "torch", "--transformer-impl", "local", "--eval-iters", "0",
        "--save", ck, "--save-interval", "1"], dict(os.environ, OMP_NUM_THREADS="2"))
    sh([os.path.join(BIN, "convert_checkpoint"), "--model-type", "GPT", "--loader", "core",
        "--saver", "hf", "--load-dir", ck, "--save-dir", ck + "_hf"])
    return ck, ck + "_hf"


def ours(ck, prompt, new, threads):
    p = sh([os.path.join(BIN, "generate"), "--load", ck, "--prompt", " ".join(map(str, prompt)),
            "--max-tokens", str(new), "--greedy", "--warmup", "--output-format", "json"],
           dict(os.environ, OMP_NUM_THREADS=str(threads)))
    m = re.search(r"prefill (\d+) tokens in ([0-9.]+) s .*decode (\d+) tokens in ([0-9.]+) s", p.stderr)
    row = json.loads(p.stdout.splitlines()[0])
    return int(m.group(1)) / float(m.group(2)), int(m.group(3)) / float(m.group(4)), row["generated_tokens"]


def hf(tmp, hf_dir, prompt, new, threads):
    spec, out = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
    json.dump({"prompts": [prompt], "max_new_tokens": new, "eos": 4096, "threads": threads,
               "warmup": True}, open(spec, "w"))
    sh([VENV_PY, HF_SIDE, hf_dir, spec, out], dict(os.environ, OMP_NUM_THREADS=str(threads),
                                                    TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1"))
    r = json.load(open(out))
    return (r["prefill_tokens"] / r["prefill_s"], r["decode_tokens"] / max(r["decode_s"], 1e-9),
            r["tokens"][0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    a = ap.parse_args()
    if not os.path.exists(VENV_PY):
        sys.exit("no %s: run scripts/setup_hf_venv.sh %s" % (VENV_PY, BUILD))
    prompt = [(i * 37 + 11) % 4000 for i in range(a.prompt_len)]
    print("CPU: %s, %d cores; load average %s" % (cpu_name(), os.cpu_count(),
                                                   " ".join(open("/proc/loadavg").read().split()[:3])))
    print("batch 1, prompt %d tokens, %d new tokens, greedy, fp32\n" % (a.prompt_len, a.new_tokens))
    print("%-18s %7s | %14s %14s | %14s %14s | %s" % ("model", "threads", "ours prefill", "HF prefill",
                                                     "ours decode", "HF decode", "same tokens"))
    with tempfile.TemporaryDirectory() as tmp:
        for label, model in MODELS.items():
            ck, hf_dir = make_model(tmp, label, model, a.prompt_len + a.new_tokens)
            for t in [int(x) for x in a.threads.split(",")]:
                op, od, ot = ours(ck, prompt, a.new_tokens, t)
                hp, hd, ht = hf(tmp, hf_dir, prompt, a.new_tokens, t)
                print("%-18s %7d | %10.0f t/s %10.0f t/s | %10.1f t/s %10.1f t/s | %s"
                      % (label, t, op, hp, od, hd, "yes" if ot == ht else "NO"), flush=True)
    print("\nload average after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
