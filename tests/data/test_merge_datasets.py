"""tools/merge_datasets and the indexed-dataset reader/builder against numpy.

numpy writes random datasets byte by byte from the format description (docs/formats/
indexed_dataset.md; Megatron's IndexedDatasetBuilder layout), merge_datasets (which opens
each input with the C reader and writes with the C builder) merges them, and numpy reads the
result back and compares it with the concatenation it expects. Also: Megatron's directory
rules, dtype mismatch, corrupt inputs, option errors (exit 2) and --multimodal refusal.
"""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

BUILD = os.environ.get("MC_BUILD_DIR", "build")
TOOL = os.path.join(BUILD, "bin", "merge_datasets")
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, file=sys.stderr)


def write_dataset(prefix, code, seqs, doc_idx):
    """Writes prefix.bin/.idx as Megatron does (pointers recomputed from lengths)."""
    dt = np.dtype(DTYPES[code])
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(np.asarray(s, dtype=dt).tobytes())
    lens = np.array([len(s) for s in seqs], dtype=np.int32)
    ptrs = np.zeros(len(seqs), dtype=np.int64)
    if len(seqs):
        ptrs[1:] = np.cumsum(lens[:-1].astype(np.int64) * dt.itemsize)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code))
        f.write(struct.pack("<Q", len(seqs)) + struct.pack("<Q", len(doc_idx)))
        f.write(lens.tobytes() + ptrs.tobytes() + np.asarray(doc_idx, np.int64).tobytes())


def read_dataset(prefix):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00" and struct.unpack("<Q", idx[9:17])[0] == 1
    code = idx[17]
    n, d = struct.unpack("<QQ", idx[18:34])
    lens = np.frombuffer(idx, np.int32, n, 34)
    ptrs = np.frombuffer(idx, np.int64, n, 34 + 4 * n)
    docs = np.frombuffer(idx, np.int64, d, 34 + 12 * n)
    assert len(idx) == 34 + 12 * n + 8 * d
    dt = np.dtype(DTYPES[code])
    data = open(prefix + ".bin", "rb").read()
    seqs = [np.frombuffer(data, dt, int(l), int(p)).tolist() for l, p in zip(lens, ptrs)]
    return code, seqs, docs.tolist()


def random_dataset(rng, code, n_docs):
    seqs, docs = [], [0]
    hi = {1: 255, 2: 127, 3: 30000, 4: 2**31 - 1, 5: 2**40, 6: 2**40, 7: 2**20, 8: 65535}[code]
    for _ in range(n_docs):
        for _ in range(int(rng.integers(0, 4))):  # 0 sequences = an empty document
            seqs.append(rng.integers(0 if code in (1, 8) else -hi, hi, int(rng.integers(0, 50))).tolist())
        docs.append(len(seqs))
    return seqs, docs


def run(args):
    return subprocess.run([TOOL] + args, capture_output=True, text=True)


def test_merge_every_dtype(tmp, rng):
    for code in DTYPES:
        d = os.path.join(tmp, "in%d" % code)
        os.makedirs(d)
        parts = {}
        for name in ["b", "a", "c_10", "c_9"]:  # merged in sorted order: a, b, c_10, c_9
            parts[name] = random_dataset(rng, code, int(rng.integers(0, 20)))
            write_dataset(os.path.join(d, name), code, *parts[name])
        out = os.path.join(tmp, "merged%d" % code)
        r = run(["--input", d, "--output-prefix", out])
        check(r.returncode == 0, "merge code %d: %s" % (code, r.stderr))
        want_seqs, want_docs = [], [0]
        for name in sorted(parts):
            seqs, docs = parts[name]
            base = len(want_seqs)
            want_seqs += seqs
            want_docs += [base + x for x in docs[1:]]
        got_code, got_seqs, got_docs = read_dataset(out)
        check(got_code == code, "dtype code %d kept" % code)
        check(got_seqs == want_seqs, "sequences of merged code %d" % code)
        check(got_docs == want_docs, "document indices of merged code %d" % code)
        check(not [f for f in os.listdir(tmp) if ".tmp." in f], "no temporaries left")


def expect_fail(args, rc, needle, what, tmp=None):
    r = run(args)
    check(r.returncode == rc and needle in r.stderr,
          "%s: rc %d (want %d), stderr %r" % (what, r.returncode, rc, r.stderr[-400:]))
    if tmp:
        check(not [f for f in os.listdir(tmp) if f.startswith("out")], what + ": no output left")


def test_errors(tmp, rng):
    d = os.path.join(tmp, "err")
    os.makedirs(d)
    write_dataset(os.path.join(d, "a"), 8, *random_dataset(rng, 8, 5))
    write_dataset(os.path.join(d, "b"), 4, *random_dataset(rng, 4, 5))
    out = os.path.join(tmp, "out")
    expect_fail(["--input", d, "--output-prefix", out], 1, "dtype", "dtype mismatch", tmp)
    os.remove(os.path.join(d, "b.idx"))
    expect_fail(["--input", d, "--output-prefix", out], 1, ".idx file not provided",
                "missing .idx", tmp)
    os.remove(os.path.join(d, "b.bin"))
    with open(os.path.join(d, "a.idx"), "r+b") as f:
        f.write(b"XX")
    expect_fail(["--input", d, "--output-prefix", out], 1, "bad magic", "corrupt magic", tmp)
    write_dataset(os.path.join(d, "a"), 8, [[1, 2, 3]], [0, 1])
    with open(os.path.join(d, "a.bin"), "r+b") as f:
        f.truncate(4)
    expect_fail(["--input", d, "--output-prefix", out], 1, "truncated .bin", "short bin", tmp)
    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    expect_fail(["--input", empty, "--output-prefix", out], 1, "no .bin/.idx", "empty dir", tmp)
    expect_fail(["--input", os.path.join(tmp, "nope"), "--output-prefix", out], 1,
                "not a directory", "missing dir", tmp)
    expect_fail(["--input", d, "--output-prefix", out, "--multimodal"], 1,
                "MC_ERR_UNSUPPORTED", "multimodal refused", tmp)
    expect_fail(["--input", d], 2, "required: --output-prefix", "missing option")
    expect_fail(["--input", d, "--output-prefix"], 2, "expected one argument", "no value")
    expect_fail(["--bogus", "--input", d, "--output-prefix", out], 2, "unrecognized", "unknown")
    # unambiguous abbreviations work as in argparse
    write_dataset(os.path.join(d, "a"), 8, [[1, 2, 3]], [0, 1])
    r = run(["--inp", d, "--output=" + out])
    check(r.returncode == 0 and read_dataset(out)[1] == [[1, 2, 3]], "abbreviated options")


def main():
    rng = np.random.default_rng(1234)
    with tempfile.TemporaryDirectory() as tmp:
        test_merge_every_dtype(tmp, rng)
    with tempfile.TemporaryDirectory() as tmp:
        test_errors(tmp, rng)
    print("test_merge_datasets: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
