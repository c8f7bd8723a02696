"""Preprocessing throughput: megatron.c's preprocess_data beside Megatron's
tools/preprocess_data.py and HuggingFace `tokenizers` (GPT-2 BPE from the same vocab/merges,
ByteLevel pre-tokenizer), on one JSONL corpus, same machine, same run. Prints MB/s and
tokens/s per core and the ratios, and checks that megatron.c's output is byte-identical to
Megatron's.

usage: MEGATRON_ROOT=... /usr/bin/python3 bench_preprocess.py CORPUS.jsonl BUILD_DIR SHARED_DIR
       [WORKERS...]   (default workers: 1 2)
"""
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def timed(cmd, cwd):
    """(wall seconds, CPU seconds of the child and its workers)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.time()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.time() - t, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def count_tokens(prefix):
    idx = open(prefix + ".idx", "rb").read()
    n = int.from_bytes(idx[18:26], "little")
    return int(np.frombuffer(idx, np.int32, n, 34).astype(np.int64).sum())


def hf_run(corpus, gpt2, workers):
    """HuggingFace tokenizers in a child process: ((wall, cpu), tokens)."""
    here = os.path.dirname(os.path.abspath(__file__))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.time()
    out = subprocess.run([sys.executable, os.path.join(here, "bench_hf.py"), corpus, gpt2,
                          str(workers)], check=True, capture_output=True, text=True).stdout
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return (time.time() - t, cpu), int(out.split()[-1])


def main():
    corpus, build, shared = (os.path.abspath(x) for x in sys.argv[1:4])
    workers = [int(w) for w in sys.argv[4:]] or [1, 2]
    gpt2 = os.path.join(shared, "tokenizers", "gpt2")
    mb = os.path.getsize(corpus) / 2**20
    tok_args = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", gpt2 + "/vocab.json",
                "--merge-file", gpt2 + "/merges.txt", "--append-eod", "--log-interval",
                "100000000"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in workers:
            c = timed([os.path.join(build, "bin", "preprocess_data"), "--input", corpus,
                       "--output-prefix", "c%d" % w, "--workers", str(w)] + tok_args, tmp)
            ntok = count_tokens(os.path.join(tmp, "c%d_text_document" % w))
            m = timed([sys.executable, os.path.join(shared, "megatron-cpu", "run_preprocess.py"),
                       "--input", corpus, "--output-prefix", "m%d" % w, "--workers", str(w)]
                      + tok_args, tmp)
            same = all(open(os.path.join(tmp, "c%d_text_document%s" % (w, e)), "rb").read() ==
                       open(os.path.join(tmp, "m%d_text_document%s" % (w, e)), "rb").read()
                       for e in (".bin", ".idx"))
            h, hf_tok = hf_run(corpus, gpt2, w)
            rows.append((w, c, m, h, ntok, hf_tok, same))
    print("corpus: %s, %.1f MB; per-core rates divide by CPU seconds (user+sys of all "
          "workers), so a busy machine does not skew them" % (corpus, mb))
    print("%-8s %-28s %9s %9s %11s %15s" % ("workers", "tool", "wall s", "cpu s", "MB/s/core",
                                            "tokens/s/core"))
    for w, c, m, h, ntok, hf_tok, same in rows:
        for name, (wall, cpu), n in (("megatron.c preprocess_data", c, ntok),
                                     ("Megatron preprocess_data.py", m, ntok),
                                     ("HF tokenizers encode_batch", h, hf_tok)):
            print("%-8d %-28s %9.2f %9.2f %11.2f %15.0f" % (w, name, wall, cpu, mb / cpu,
                                                            n / cpu))
        print("workers %d: per core, megatron.c is %.1fx Megatron and %.2fx HF tokenizers "
              "(wall: %.1fx, %.2fx); output byte-identical to Megatron: %s" % (
                  w, m[1] / c[1], h[1] / c[1], m[0] / c[0], h[0] / c[0], same))

if __name__ == "__main__":
    main()
