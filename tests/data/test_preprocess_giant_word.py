"""preprocess_data on one giant word (a 4 MB run of letters is a single pre-tokenized piece that
BPE must merge as a whole): peak memory stays a small multiple of the document. It was about 30x
(50 MB took 2 GB, issue 15 finding 3); now the BPE's working set is about 12 bytes per byte. The
ids themselves are checked against Megatron's tokenizer on long words by
tests/tokenizer/test_gpt2_bpe.py."""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from mc_test import BUILD, check, summary  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
from tokdriver import GPT2_DIR as GPT2  # noqa: E402
EXE = os.path.join(BUILD, "bin", "preprocess_data")
if not os.path.exists(os.path.join(GPT2, "vocab.json")):
    print("test_preprocess_giant_word: SKIP: GPT-2 vocab not found in", GPT2)
    raise SystemExit(0)
MEASURE = ("import resource, subprocess, sys\n"
           "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
           "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
           "sys.stderr.write(r.stderr.decode()[-2000:])")


def peak(inp, prefix):
    """(exit status, peak resident bytes) of one preprocess_data run in its own process"""
    r = subprocess.run([sys.executable, "-c", MEASURE, EXE, "--input", inp, "--output-prefix", prefix,
                        "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file",
                        os.path.join(GPT2, "vocab.json"), "--merge-file", os.path.join(GPT2, "merges.txt"),
                        "--workers", "1", "--append-eod"], capture_output=True, text=True)
    rc, rss = r.stdout.split()
    return int(rc), int(rss), r.stderr


with tempfile.TemporaryDirectory() as d:
    rng = random.Random(15)
    n = 4 << 20
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    big, tiny = os.path.join(d, "big.jsonl"), os.path.join(d, "tiny.jsonl")
    with open(big, "w") as f:
        f.write(json.dumps({"text": word}) + "\n")
    with open(tiny, "w") as f:
        f.write(json.dumps({"text": "a few words"}) + "\n")
    rc0, base, err0 = peak(tiny, os.path.join(d, "t"))
    rc1, rss, err1 = peak(big, os.path.join(d, "b"))
    check(rc0 == 0 and rc1 == 0, "runs: %s %s" % (err0, err1))
    ratio = (rss - base) / n
    print("peak RSS: %.1f MB for a %.1f MB word (%.1f MB for a tiny input): %.1fx the word"
          % (rss / 2**20, n / 2**20, base / 2**20, ratio))
    check(ratio < 16, "memory beyond the tokenizer's fixed tables is %.1fx the word (want < 16x)" % ratio)
    first = open(os.path.join(d, "b_text_document.bin"), "rb").read()
    check(len(first) > n // 8 * 2 and len(first) % 2 == 0, "uint16 ids written: %d bytes" % len(first))
raise SystemExit(0)
MEASURE = ("import resource, subprocess, sys\n"
           "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
           "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
           "sys.stderr.write(r.stderr.decode()[-2000:])")


def peak(inp, prefix):
    """(exit status, peak resident bytes) of one preprocess_data run in its own process"""
    r = subprocess.run([sys.executable, "-c", MEASURE, EXE, "--input", inp, "--output-prefix", prefix,
                        "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file",
                        os.path.join(GPT2, "vocab.json"), "--merge-file", os.path.join(GPT2, "merges.txt"),
                        "--workers", "1", "--append-eod"], capture_output=True, text=True)
    rc, rss = r.stdout.split()
    return int(rc), int(rss), r.stderr


with tempfile.TemporaryDirectory() as d:
    rng = random.Random(15)
    n = 4 << 20
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    big, tiny = os.path.join(d, "big.jsonl"), os.path.join(d, "tiny.jsonl")
    with open(big, "w") as f:
        f.write(json.dumps({"text": word}) + "\n")
    with open(tiny, "w") as f:
        f.write(json.dumps({"text": "a few words"}) + "\n")
    rc0, base, err0 = peak(tiny, os.path.join(d, "t"))
    rc1, rss, err1 = peak(big, os.path.join(d, "b"))
    check(rc0 == 0 and rc1 == 0, "runs: %s %s" % (err0, err1))
    ratio = (rss - base) / n
    print("peak RSS: %.1f MB for a %.1f MB word (%.1f MB for a tiny input): %.1fx the word"
          % (rss / 2**20, n / 2**20, base / 2**20, ratio))
    check(ratio < 16, "memory beyond the tokenizer's fixed tables is %.1fx the word (want < 16x)" % ratio)
    first = open(os.path.join(d, "b_text_document.bin"), "rb").read()
    check(len(first) > n // 8 * 2 and len(first) % 2 == 0, "uint16 ids written: %d bytes" % len(first))
raise SystemExit(summary("test_preprocess_giant_word"))
