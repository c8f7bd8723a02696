"""tools/train_tokenizer: trains a small byte-level BPE on the license texts, then checks that
the files it writes load in Megatron's GPT2Tokenizer (live) and in HuggingFace `tokenizers`
(when installed) and tokenize exactly like megatron.c's GPT2BPETokenizer; that training is
deterministic; that the merges reduce the token count; and that bad options fail clearly."""
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokdriver as td  # noqa: E402

c = td.Counter("test_train_tokenizer")
TOOL = os.path.join(td.BUILD, "bin", "train_tokenizer")
LIC = "/usr/share/common-licenses"
with tempfile.TemporaryDirectory() as d:
    corpus = os.path.join(d, "corpus.txt")
    if os.path.isdir(LIC):
        files = [os.path.join(LIC, n) for n in sorted(os.listdir(LIC))
                 if os.path.isfile(os.path.join(LIC, n))]
    else:  # keep the test meaningful on machines without the Debian license texts
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(td.random_strings(3000, seed=5)) * 3)
        files = [corpus]
    out1, out2 = os.path.join(d, "a"), os.path.join(d, "b")
    r1 = subprocess.run([TOOL, "--input"] + files + ["--vocab-size", "2000", "--output-dir", out1],
                        capture_output=True, text=True)
    c.check(r1.returncode == 0, "train: %s %s" % (r1.stdout, r1.stderr))
    print(r1.stdout.strip())
    r2 = subprocess.run([TOOL, "--input"] + files + ["--vocab-size", "2000", "--output-dir", out2],
                        capture_output=True, text=True)
    for name in ("vocab.json", "merges.txt", "tokenizer.json"):
        h = [hashlib.sha256(open(os.path.join(o, name), "rb").read()).hexdigest() for o in (out1, out2)]
        c.check(h[0] == h[1], "deterministic %s" % name)

    vocab_p, merges_p = os.path.join(out1, "vocab.json"), os.path.join(out1, "merges.txt")
    vocab = json.load(open(vocab_p))
    c.check(len(vocab) == 2000, "vocab size %d" % len(vocab))
    c.check(vocab.get("<|endoftext|>") == 1999, "eod last")
    c.check(sorted(vocab.values()) == list(range(2000)), "ids are 0..N-1")
    merges = open(merges_p, encoding="utf-8").read().split("\n")
    c.check(merges[0] == "#version: 0.2" and merges[-1] == "" and len(merges) == 2000 - 256 - 1 + 2,
            "merges file layout (%d lines)" % len(merges))

    texts = td.license_lines(1500) + td.NASTY + td.random_strings(500, seed=99)
    got = td.encode(texts, "GPT2BPETokenizer", vocab=vocab_p, merges=merges_p)
    n_bytes = sum(len(t.encode()) for t in texts)
    n_tok = sum(len(g) for g in got if isinstance(g, list))
    c.check(n_tok < 0.5 * n_bytes, "compression: %d tokens for %d bytes" % (n_tok, n_bytes))
    print("trained tokenizer: %d tokens for %d bytes" % (n_tok, n_bytes))

    path = os.path.join(td.MEGATRON, "megatron", "training", "tokenizer", "gpt2_tokenization.py")
    if os.path.exists(path):
        spec = importlib.util.spec_from_file_location("mg_gpt2_tokenization", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        ref = mod.GPT2Tokenizer(vocab_p, merges_p, errors="replace", special_tokens=[], max_len=None)
        bad = td.regex_class_mismatches()
        for t, g in zip(texts, got):
            if td.without([t], bad) != [t]:
                continue
            c.check(g == ref.encode(t), "Megatron on trained files, %r: got %s want %s" % (t, g, ref.encode(t)))
    else:
        print("Megatron source not found: skipping the Megatron comparison")
    try:
        import tokenizers
    except ImportError:
        tokenizers = None
        print("SKIP HF check: python package `tokenizers` is not installed")
    if tokenizers is not None:
        hf = tokenizers.Tokenizer.from_file(os.path.join(out1, "tokenizer.json"))
        for t, g in zip(texts, got):
            if "<|endoftext|>" in t:
                continue  # special to HF (an added token), plain text to GPT2BPETokenizer
            w = hf.encode(t, add_special_tokens=False).ids
            c.check(g == w, "HF on trained tokenizer.json, %r: got %s want %s" % (t, g, w))
        c.check(hf.get_vocab_size() == 2000, "HF vocab size")
        c.check(hf.token_to_id("<|endoftext|>") == 1999, "HF special token")
    # megatron.c's HuggingFaceTokenizer on the output directory: <|endoftext|> is special there
    got_hf = td.encode(texts, "HuggingFaceTokenizer", model=out1)
    for t, g, g2 in zip(texts, got, got_hf):
        if "<|endoftext|>" not in t:
            c.check(g == g2, "HuggingFaceTokenizer on trained dir, %r: %s vs %s" % (t, g2, g))
        elif tokenizers is not None:
            c.check(g2 == hf.encode(t).ids, "HuggingFaceTokenizer special %r" % t)
    rc, out = td.info("HuggingFaceTokenizer", model=out1)
    c.check(out == "2000 1999 -1 _HuggingFaceTokenizer", "HF info on trained dir: %s" % out)

    # JSONL input with --json-keys, and errors that name what is wrong
    jl = os.path.join(d, "in.jsonl")
    with open(jl, "w") as f:
        f.write(json.dumps({"text": "hello hello hello world"}) + "\n" + json.dumps({"x": 1}) + "\n")
    r = subprocess.run([TOOL, "--input", jl, "--json-keys", "text", "--vocab-size", "300",
                        "--output-dir", os.path.join(d, "j")], capture_output=True, text=True)
    c.check(r.returncode != 0 and "in.jsonl:2" in r.stderr and "\"text\" is missing" in r.stderr,
            "missing key: %s" % r.stderr)
    r = subprocess.run([TOOL, "--input", corpus if os.path.exists(corpus) else files[0],
                        "--vocab-size", "100", "--output-dir", os.path.join(d, "s")],
                       capture_output=True, text=True)
    c.check(r.returncode != 0 and "--vocab-size 100" in r.stderr, "too small: %s" % r.stderr)
    bad = os.path.join(d, "bad.txt")
    open(bad, "wb").write(b"abc \xff def")
    r = subprocess.run([TOOL, "--input", bad, "--vocab-size", "300", "--output-dir", os.path.join(d, "x")],
                       capture_output=True, text=True)
    c.check(r.returncode != 0 and "bad.txt" in r.stderr and "UTF-8" in r.stderr, "bad utf8: %s" % r.stderr)
    r = subprocess.run([TOOL, "--vocab-size", "300"], capture_output=True, text=True)
    c.check(r.returncode == 2 and "required" in r.stderr, "usage: %s" % r.stderr)

c.finish()
