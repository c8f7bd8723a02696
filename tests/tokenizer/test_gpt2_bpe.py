"""GPT2BPETokenizer vs Megatron-LM's own GPT2Tokenizer, run live (needs only python3-regex):
thousands of strings (nasty Unicode, random code points, license text), decode (including
byte sequences that are not UTF-8), vocab size, eod, and loading quirks of the merges file.
Without Megatron's source (MC_MEGATRON_DIR) it compares with the committed golden
tests/golden/tokenizer/gpt2_cases.json, made by make_goldens.py from the same reference."""
import importlib.util
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokdriver as td  # noqa: E402

c = td.Counter("test_gpt2_bpe")
VOCAB = os.path.join(td.GPT2_DIR, "vocab.json")
MERGES = os.path.join(td.GPT2_DIR, "merges.txt")
if not os.path.exists(VOCAB):
    print("test_gpt2_bpe: SKIP: GPT-2 vocab not found (looked in %s)" % td.GPT2_DIR)
    raise SystemExit(0)
GOLDEN = os.path.join(td.SRC, "tests", "golden", "tokenizer", "gpt2_cases.json")


def megatron_gpt2(vocab, merges):
    path = os.path.join(td.MEGATRON, "megatron", "training", "tokenizer", "gpt2_tokenization.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("mg_gpt2_tokenization", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.GPT2Tokenizer(vocab, merges, errors="replace", special_tokens=[], max_len=None)


ref = megatron_gpt2(VOCAB, MERGES)
# long pieces take the O(n log n) merge path (over 64 bytes): letters, digits, symbols, CJK
rng = random.Random(9)
long_words = ["".join(rng.choice(alpha) for _ in range(rng.randint(65, 1500)))
              for alpha in ("abcdefghijklmnopqrstuvwxyz", "etaoinshr", "ab", "0123456789", "=-_*#",
                            "\u6771\u4eac\u90fd\u4e2d", "aAbBcC\u00e9\u00fc") for _ in range(6)]
texts = td.NASTY + td.random_strings(3000, seed=1234) + td.license_lines(1500) + long_words
if ref is not None:
    texts = td.without(texts, td.regex_class_mismatches())
    want = [ref.encode(t) for t in texts]
    print("reference: Megatron-LM GPT2Tokenizer from", td.MEGATRON)
else:
    g = json.load(open(GOLDEN, encoding="utf-8"))
    texts, want = g["texts"], g["ids"]
    print("reference: golden", GOLDEN, "(Megatron source not found)")

got = td.encode(texts, "GPT2BPETokenizer", vocab=VOCAB, merges=MERGES)
for t, g_, w in zip(texts, got, want):
    c.check(g_ == w, "encode %r: got %s want %s" % (t, g_, w))
c.check(len(got) == len(texts), "one result per text")

# vocab size, eod, padding class name
rc, out = td.info("GPT2BPETokenizer", vocab=VOCAB, merges=MERGES)
c.check(rc == 0 and out == "50257 50256 -1 _GPT2BPETokenizer", "info: %s" % out)

# decode: round trips, and byte sequences that are not valid UTF-8 (errors='replace')
rng = random.Random(7)
id_lists = [w for w in want[:400]] + [[rng.randrange(50257) for _ in range(rng.randint(0, 30))]
                                       for _ in range(300)]
id_lists += [[171, 120], [447], [447, 247], [127, 226, 254], [20543, 20543, 171]]
dec = td.decode(id_lists, "GPT2BPETokenizer", vocab=VOCAB, merges=MERGES)
for ids, d in zip(id_lists, dec):
    if ref is not None:
        c.check(d == ref.decode(ids), "decode %s: got %r want %r" % (ids, d, ref.decode(ids)))
for t, d in zip(texts[:400], dec[:400]):
    if ref is not None:
        c.check(d == t, "round trip %r -> %r" % (t, d))
bad = td.decode([[50257], [-1]], "GPT2BPETokenizer", vocab=VOCAB, merges=MERGES)
c.check(all(b.startswith("ERR") and "token id" in b for b in bad), "decode of unknown ids: %s" % bad)

# invalid UTF-8 input fails loudly (Megatron only ever sees str)
r = td.encode([b"ok \xff bad", b"\xe2\x82"], "GPT2BPETokenizer", vocab=VOCAB, merges=MERGES)
c.check(all(isinstance(x, str) and "not valid UTF-8" in x for x in r), "invalid UTF-8: %s" % r)

# merges-file quirks on a tiny hand-made vocabulary, checked against Megatron's loader
with tempfile.TemporaryDirectory() as d:
    vocab = {"a": 0, "b": 1, "aa": 2, "ab": 3, "aab": 4, "Ġ": 5, "Ġa": 6, "<|endoftext|>": 7,
             "c": 8, "\u0100": 9}
    # every byte symbol, or the vocab is refused (below): the rest of GPT-2's byte alphabet
    for tok in json.load(open(VOCAB, encoding="utf-8")):
        if len(tok) == 1 and tok not in vocab:
            vocab[tok] = len(vocab)
    vp, mp = os.path.join(d, "v.json"), os.path.join(d, "m.txt")
    json.dump(vocab, open(vp, "w"))
    cases = {
        "normal": "#version: 0.2\na a\na b\naa b\nĠ a\n",
        "no_final_newline": "#version: 0.2\na a\na b\naa b",      # last merge is dropped
        "junk_lines": "#version: 0.2\n\na a x\na a\n  a   b  \n\u3000aa\u2003b\nĠ a\n",
        "duplicate": "#version: 0.2\na b\na a\na b\n",            # (a, b) keeps the last rank
        "no_version_line": "a a\na b\n",
    }
    strs = ["aaab", "aab aaaa", "ab ab a", "aaaaa", "b", " a", "ccc cc", "ba", "\u00ff", "xyz"]
    for name, text in cases.items():
        open(mp, "w", encoding="utf-8").write(text)
        got = td.encode(strs, "GPT2BPETokenizer", vocab=vp, merges=mp)
        if ref is not None:
            m = megatron_gpt2(vp, mp)
            for s, g_ in zip(strs, got):
                c.check(g_ == m.encode(s), "merges %s, %r: got %s want %s" % (name, s, g_, m.encode(s)))
    # vocab and merges that do not belong together are refused (Megatron writes id 0 for the
    # missing token, silently): a merge product, a merge part, a byte symbol
    refusals = [("#version: 0.2\na a\nc c\n", vocab, '"cc", the product of the merge "c c" (line 3'),
                ("#version: 0.2\naa xy\n", vocab, '"xy", the second part of the merge "aa xy" (line 2'),
                ("#version: 0.2\na a\n", dict((k, v) for k, v in vocab.items() if k != "Ġ"),
                 '"Ġ" for the byte 0x20'),
                # ids far past the entry count (a fuzz input asked for a 5 GB decode table)
                ("#version: 0.2\na a\n", dict(vocab, zz=666666668),
                 "largest id is 666666668 but it has only %d entries" % (len(vocab) + 1))]
    for merges, voc, needle in refusals:
        open(mp, "w", encoding="utf-8").write(merges)
        json.dump(voc, open(vp, "w"))
        rc, out = td.info("GPT2BPETokenizer", vocab=vp, merges=mp)
        c.check(rc != 0 and "MC_ERR_FORMAT" in out and needle in out and "v.json" in out,
                "refused %r: %s" % (needle, out))
    # the issue's case: GPT-2's own files with "Ġthe" deleted from the vocab
    full = json.load(open(VOCAB, encoding="utf-8"))
    del full["\u0120the"]
    json.dump(full, open(vp, "w"))
    rc, out = td.info("GPT2BPETokenizer", vocab=vp, merges=MERGES)
    c.check(rc != 0 and '"\u0120the", the product of the merge "\u0120t he" (line 8 of' in out,
            "GPT-2 without \u0120the: %s" % out)
    # a vocab without <|endoftext|> is refused (Megatron raises KeyError)
    json.dump({"a": 0}, open(vp, "w"))
    rc, out = td.info("GPT2BPETokenizer", vocab=vp, merges=mp)
    c.check(rc != 0 and "<|endoftext|>" in out, "no eod: %s" % out)
    open(vp, "w").write('{"a": 0,}')
    rc, out = td.info("GPT2BPETokenizer", vocab=vp, merges=mp)
    c.check(rc != 0 and "v.json:1:9" in out and "trailing comma" in out, "bad json: %s" % out)
    rc, out = td.info("GPT2BPETokenizer", vocab=os.path.join(d, "missing.json"), merges=mp)
    c.check(rc != 0 and "missing.json" in out and "MC_ERR_IO" in out, "missing file: %s" % out)
    rc, out = td.info("GPT2BPETokenizer", vocab=vp)
    c.check(rc != 0 and "--merge-file" in out, "missing option: %s" % out)

c.finish()
