"""tools/preprocess_data against Megatron's tools/preprocess_data.py.

1. Byte identity: every case of tests/golden/data/cases.json (Megatron's outputs, see the
   README there) is rerun with our tool, with the case's --workers and with another count.
2. Bad input: malformed JSON, missing key, invalid UTF-8, wrong value types, blank line,
   missing file -> exit 1, an error naming the file and line, and no output left behind.
3. Command line: argparse-style errors with exit 2; --split-sentences refused.
4. Progress lines in Megatron's layout.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MC_BUILD_DIR", "build")
TOOL = os.path.join(BUILD, "bin", "preprocess_data")
GOLDEN = os.path.join(SRC, "tests", "golden", "data")
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, file=sys.stderr)


def gpt2_dir():
    """The canonical GPT-2 vocab/merges live in shared/tokenizers/gpt2 beside the checkout."""
    cands = [os.environ.get("MC_GPT2_DIR", ""),
             os.path.join(SRC, "..", "shared", "tokenizers", "gpt2"),
             "/work/shared/tokenizers/gpt2"]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "vocab.json")):
            return os.path.abspath(c)
    sys.exit("test_preprocess_data: GPT-2 vocab.json/merges.txt not found (set MC_GPT2_DIR); "
             "looked in %s" % cands)


def run(args, cwd):
    return subprocess.run([os.path.abspath(TOOL)] + args, cwd=cwd, capture_output=True,
                          text=True)


def read(p):
    if not os.path.exists(p):
        return None
    with open(p, "rb") as f:
        return f.read()


def with_workers(args, w):
    args = list(args)
    i = args.index("--workers")
    args[i + 1] = str(w)
    if "--partitions" in args:
        p = int(args[args.index("--partitions") + 1])
        args[i + 1] = str(p * w)
    return args


def test_goldens(gpt2):
    with open(os.path.join(GOLDEN, "cases.json")) as f:
        cases = json.load(f)
    for case in cases:
        tokgold = os.path.join(SRC, "tests", "golden", "tokenizer")
        args = [a.replace("{GPT2}", gpt2).replace("{TOKGOLD}", tokgold) for a in case["args"]]
        for w in (None, 3):
            a = args if w is None else with_workers(args, w)
            with tempfile.TemporaryDirectory() as tmp:
                shutil.copy(os.path.join(GOLDEN, "inputs", case["input"]), tmp)
                r = run(["--input", case["input"], "--output-prefix", "out"] + a, tmp)
                tag = "%s (workers %s)" % (case["name"], a[a.index("--workers") + 1])
                check(r.returncode == 0, "%s: exit %d: %s" % (tag, r.returncode, r.stderr[-500:]))
                for o in case["outputs"]:
                    got = os.path.join(tmp, "out_" + o)
                    want = os.path.join(GOLDEN, case["name"], o)
                    check(os.path.exists(got) and read(got) == read(want),
                          "%s: %s differs from Megatron's" % (tag, o))
                if case["name"] == "gpt2_text_title_eod":
                    # the .idx Megatron forgets; compare with the single-key run
                    check(read(os.path.join(tmp, "out_text_document.idx")) ==
                          read(os.path.join(GOLDEN, "gpt2_text_eod", "text_document.idx")),
                          "%s: text .idx (every key gets one)" % tag)
                check(not [f for f in os.listdir(tmp) if ".tmp." in f],
                      "%s: temporaries left" % tag)
                if case["name"] == "gpt2_text_eod" and w is None:
                    test_progress(r.stderr)


def test_progress(stderr):
    lines = [l for l in stderr.splitlines() if l.startswith("Processed")]
    check(len(lines) == 0, "no progress line below --log-interval 1000")


def test_progress_lines(gpt2):
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(GOLDEN, "inputs", "many.jsonl"), tmp)
        r = run(["--input", "many.jsonl", "--output-prefix", "o", "--tokenizer-type",
                 "GPT2BPETokenizer", "--vocab-file", gpt2 + "/vocab.json", "--merge-file",
                 gpt2 + "/merges.txt", "--workers", "2", "--log-interval", "25"], tmp)
        lines = [l for l in r.stderr.splitlines() if l.startswith("Processed")]
        pat = re.compile(r"^Processed (\d+) documents \([0-9.e+]+ docs/s, [0-9.e+]+ MB/s\)\.$")
        check([int(pat.match(l).group(1)) if pat.match(l) else -1 for l in lines] ==
              [25, 50, 75, 100], "progress lines: %r" % lines)
        check("Opening many.jsonl" in r.stdout, "Opening line")


BAD = [
    ("malformed", b'{"text": "1 2"}\n{"text": "3 unterminated}\n', 2),
    ("trailing comma", b'{"text": "1"}\n{"text": "2",}\n', 2),
    ("missing key", b'{"text": "1"}\n{"text": "2"}\n{"title": "3"}\n', 3),
    ("invalid utf-8", b'{"text": "1"}\n{"text": "2 \xff"}\n', 2),
    ("overlong utf-8", b'{"text": "\xc0\xaf"}\n', 1),
    ("encoded surrogate", b'{"text": "1"}\n{"text": "\xed\xa0\x80"}\n', 2),
    ("lone surrogate escape", b'{"text": "1"}\n{"text": "\\ud800"}\n', 2),
    ("blank line", b'{"text": "1"}\n\n{"text": "2"}\n', 2),
    ("number value", b'{"text": 5}\n', 1),
    ("list of numbers", b'{"text": ["1", 5]}\n', 1),
    ("not an object", b'{"text": "1"}\n["text"]\n', 2),
    ("crlf line numbers", b'{"text": "1"}\r\n{"text": "2"}\r\n{"txt": "3"}\r\n', 3),
    ("lone cr line numbers", b'{"text": "1"}\r{"txt": "3"}\r\n', 2),
]


def test_bad_inputs(gpt2):
    toks = [["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", gpt2 + "/vocab.json",
             "--merge-file", gpt2 + "/merges.txt"],
            ["--tokenizer-type", "NullTokenizer", "--vocab-size", "100"]]
    for tok in toks:
        tok = tok + ["--workers", "2", "--append-eod"]
        cases = BAD + ([("null: two spaces", b'{"text": "1"}\n{"text": "1  2"}\n', 2),
                        ("null: empty text", b'{"text": ""}\n', 1)]
                       if "NullTokenizer" in tok else [])
        for name, data, line in cases:
            name = "%s %s" % (tok[1], name)
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "in.jsonl"), "wb") as f:
                    f.write(data)
                r = run(["--input", "in.jsonl", "--output-prefix", "o"] + tok, tmp)
                msg = r.stderr
                check(r.returncode == 1 and ("in.jsonl:%d" % line) in msg,
                      "%s: exit %d, want 1 and 'in.jsonl:%d' in %r" % (name, r.returncode, line,
                                                                        msg[-300:]))
                check(os.listdir(tmp) == ["in.jsonl"], "%s: output left behind: %s" %
                      (name, os.listdir(tmp)))
        with tempfile.TemporaryDirectory() as tmp:
            # an error many batches in: the earlier batches were written, yet nothing is left
            with open(os.path.join(tmp, "in.jsonl"), "w") as f:
                for i in range(10000):
                    f.write('{"text": "%d 7"}\n' % i)
                f.write('{"text": "1"\n')
            r = run(["--input", "in.jsonl", "--output-prefix", "o"] + tok, tmp)
            check(r.returncode == 1 and "in.jsonl:10001" in r.stderr,
                  "late error: %d %r" % (r.returncode, r.stderr[-300:]))
            check(os.listdir(tmp) == ["in.jsonl"], "late error: output left behind")
            r = run(["--input", "missing.jsonl", "--output-prefix", "o"] + tok, tmp)
            check(r.returncode == 1 and "missing.jsonl" in r.stderr, "missing input file")
            check(os.listdir(tmp) == ["in.jsonl"], "missing input: output left behind")
            r = run(["--input", "in.jsonl", "--output-prefix", "nodir/o"] + tok, tmp)
            check(r.returncode == 1 and "nodir/o" in r.stderr, "unwritable output prefix")


def test_options(gpt2):
    tok = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", gpt2 + "/vocab.json",
           "--merge-file", gpt2 + "/merges.txt"]
    cases = [
        ([], 2, "required: --input, --output-prefix, --workers"),
        (["--input", "x", "--output-prefix", "o"] + tok, 2, "required: --workers"),
        (["--input", "x", "--output-prefix", "o", "--workers", "two"] + tok, 2,
         "invalid int value: 'two'"),
        (["--input", "x", "--output-prefix", "o", "--workers", "1", "--tokenizer-type", "Foo"],
         2, "invalid choice: 'Foo'"),
        (["--input", "x", "--output-prefix", "o", "--workers", "1", "--bogus"] + tok, 2,
         "unrecognized arguments: --bogus"),
        (["--input", "x", "--output-prefix", "o", "--workers", "3", "--partitions", "2"] + tok,
         2, "not divisible"),
        (["--input", "x", "--output-prefix", "o", "--workers", "1", "--json-keys"] + tok, 2,
         "expected at least one argument"),
        (["--input", "x", "--output-prefix", "o", "--workers", "1", "--split-sentences"] + tok,
         1, "MC_ERR_UNSUPPORTED"),
        (["--input", "x", "--output-prefix", "o", "--workers", "1", "--tokenizer-type",
          "GPT2BPETokenizer", "--vocab-file", "/nonexistent/vocab.json", "--merge-file",
          gpt2 + "/merges.txt"], 1, "vocab.json"),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for args, rc, needle in cases:
            r = run(args, tmp)
            check(r.returncode == rc and needle in r.stderr,
                  "options %r: exit %d (want %d), stderr %r" % (args[-3:], r.returncode, rc,
                                                                r.stderr[-300:]))
            if rc == 2:
                check(r.stderr.startswith("usage: preprocess_data"), "usage line for %r" % args)
        check(os.listdir(tmp) == [], "option errors leave nothing behind")
        r = run(["-h"], tmp)
        check(r.returncode == 0 and "--json-keys" in r.stdout, "-h")


def test_partitions_glob(gpt2):
    """--partitions over a glob of several files: documents in Megatron's order (files in
    Python glob order, lines dealt round-robin, partitions concatenated), checked against a
    one-file run of the lines in that order."""
    import glob
    tok = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", gpt2 + "/vocab.json",
           "--merge-file", gpt2 + "/merges.txt", "--append-eod"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, n in (("p_b.jsonl", 5), ("p_a.jsonl", 7), ("p_c.jsonl", 1)):
            with open(os.path.join(tmp, name), "w") as f:
                for i in range(n):
                    f.write(json.dumps({"text": "doc %s %d" % (name, i)}) + "\n")
        lines = []
        for name in glob.glob(os.path.join(tmp, "p_*.jsonl")):
            with open(name) as f:
                lines += f.readlines()
        for seq in (False, True):
            order = lines if seq else [l for p in range(3) for l in lines[p::3]]
            with open(os.path.join(tmp, "want.jsonl"), "w") as f:
                f.writelines(order)
            r1 = run(["--input", "want.jsonl", "--output-prefix", "want", "--workers", "1"]
                     + tok, tmp)
            extra = ["--keep-sequential-samples"] if seq else []
            r2 = run(["--input", "p_*.jsonl", "--output-prefix", "got", "--workers", "3",
                      "--partitions", "3"] + extra + tok, tmp)
            check(r1.returncode == 0 and r2.returncode == 0, "partition runs: %s %s" %
                  (r1.stderr[-300:], r2.stderr[-300:]))
            for ext in (".bin", ".idx"):
                check(read(os.path.join(tmp, "got_text_document" + ext)) ==
                      read(os.path.join(tmp, "want_text_document" + ext)),
                      "partitions over a glob (sequential=%s): %s" % (seq, ext))
        r = run(["--input", "nomatch_*.jsonl", "--output-prefix", "x", "--workers", "2",
                 "--partitions", "2"] + tok, tmp)
        check(r.returncode == 1 and "no file matches" in r.stderr, "glob without match")


def test_interrupt(gpt2):
    """SIGINT while the tool waits for input (a FIFO): exit 130, temporaries removed."""
    import signal
    import time
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "in.jsonl")
        os.mkfifo(fifo)
        p = subprocess.Popen([os.path.abspath(TOOL), "--input", "in.jsonl", "--output-prefix",
                              "o", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file",
                              gpt2 + "/vocab.json", "--merge-file", gpt2 + "/merges.txt",
                              "--workers", "2"], cwd=tmp, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        with open(fifo, "w") as f:
            for i in range(3000):  # more than one batch
                f.write('{"text": "doc %d"}\n' % i)
            f.flush()
            deadline = time.time() + 20
            while time.time() < deadline and not [x for x in os.listdir(tmp) if ".tmp." in x]:
                time.sleep(0.05)
            time.sleep(0.3)
            p.send_signal(signal.SIGINT)
            err = p.communicate(timeout=30)[1]
        check(p.returncode == 130 and "interrupted" in err,
              "SIGINT: exit %s, stderr %r" % (p.returncode, err[-300:]))
        check(sorted(os.listdir(tmp)) == ["in.jsonl"], "SIGINT left %s" % os.listdir(tmp))


def main():
    gpt2 = gpt2_dir()
    test_interrupt(gpt2)
    test_partitions_glob(gpt2)
    test_goldens(gpt2)
    test_progress_lines(gpt2)
    test_bad_inputs(gpt2)
    test_options(gpt2)
    print("test_preprocess_data: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
