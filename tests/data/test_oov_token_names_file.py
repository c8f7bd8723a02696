"""A .bin holding token ids beyond the model's (padded) vocabulary, e.g. data made with GPT-2's
tokenizer trained with a 1000-token NullTokenizer: pretrain_gpt stops with the id, the vocabulary
bound and the data file it came from (the forward pass alone could not name the file; issue 15)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
from mc_test import BUILD, PRETRAIN, check, run_cmd, summary  # noqa: E402
from tokdriver import GPT2_DIR  # noqa: E402

if not os.path.exists(os.path.join(GPT2_DIR, "vocab.json")):
    print("test_oov_token_names_file: SKIP: GPT-2 vocab not found in", GPT2_DIR)
    raise SystemExit(0)
with tempfile.TemporaryDirectory() as d:
    inp = os.path.join(d, "c.jsonl")
    with open(inp, "w") as f:
        for i in range(200):
            f.write(json.dumps({"text": "The quick brown fox number %d jumps over the lazy dog." % i}) + "\n")
    prefix = os.path.join(d, "gpt2data")
    r = subprocess.run([os.path.join(BUILD, "bin", "preprocess_data"), "--input", inp, "--output-prefix",
                        prefix, "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file",
                        os.path.join(GPT2_DIR, "vocab.json"), "--merge-file",
                        os.path.join(GPT2_DIR, "merges.txt"), "--workers", "1", "--append-eod"],
                       capture_output=True, text=True)
    check(r.returncode == 0, "preprocess: %s" % r.stderr[-300:])
    data = prefix + "_text_document"
    cmd = [PRETRAIN, "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2",
           "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
           "--global-batch-size", "2", "--train-iters", "2", "--lr", "1e-3", "--data-path", data,
           "--split", "1,0,0", "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000",
           "--data-cache-path", os.path.join(d, "cache"), "--transformer-impl", "local",
           "--eval-iters", "0"]
    r = run_cmd(cmd, dict(os.environ, OMP_NUM_THREADS="1"), 120)
    check(r.returncode != 0 and data + ".bin" in r.stderr and "outside the model's padded vocabulary [0, 1024)"
          in r.stderr, "out-of-vocabulary id names the data file: %s" % r.stderr[-400:])
raise SystemExit(summary("test_oov_token_names_file"))
