"""HuggingFaceTokenizer vs the HuggingFace `tokenizers` package, run live when installed, else
vs the committed golden tests/golden/tokenizer/hf_cases.json (made by make_goldens.py with the
same package). Models: small byte-level BPEs trained on the license texts with the pipelines
of GPT-2 (with and without add_prefix_space), Llama-3 (Split regex, ignore_merges, BOS
template, special tokens) and Qwen2 (NFC, its own regex). Also vocab size, eod, decode and the
refusal of pipelines megatron.c does not implement."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokdriver as td  # noqa: E402

c = td.Counter("test_hf_tokenizer")
GOLD = os.path.join(td.SRC, "tests", "golden", "tokenizer")
golden = json.load(open(os.path.join(GOLD, "hf_cases.json"), encoding="utf-8"))["cases"]
try:
    import tokenizers
    print("reference: tokenizers", tokenizers.__version__, "(live)")
except ImportError:
    tokenizers = None
    print("reference: golden hf_cases.json (python package `tokenizers` not installed)")

ONIG_BAD = td.onig_class_mismatches() if tokenizers is not None else set()
texts_live = td.NASTY + td.random_strings(2000, seed=77) + td.license_lines(800) + [
    "", " ", "  two  spaces ", "<s>x</s>y", "a<unk>b", "\u2581already", "<|endoftext|>a<|endoftext|>",
    "<|begin_of_text|>x", "\u6771\u4eac\u00e9\u0001\U0001F600 rare chars \u0f00\u0f01"]
for name, case in golden.items():
    model = os.path.join(GOLD, name)
    if tokenizers is not None:
        ref = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        texts = [t for t in texts_live if name != "hf_qwen2" or all(ord(ch) < 0x300 for ch in t)]
        texts = td.without(texts, ONIG_BAD)
        want = [ref.encode(t).ids for t in texts]
        vocab_size = ref.get_vocab_size(with_added_tokens=True)
    else:
        ref, texts, want, vocab_size = None, case["texts"], case["ids"], case["vocab_size"]
    got = td.encode(texts, "HuggingFaceTokenizer", model=model)
    for t, g, w in zip(texts, got, want):
        c.check(g == w, "%s encode %r: got %s want %s" % (name, t, g, w))
    rc, out = td.info("HuggingFaceTokenizer", model=model)
    c.check(out == "%d %d -1 _HuggingFaceTokenizer" % (vocab_size, case["eod"]), "%s info %s" % (name, out))
    # a tokenizer.json path works as well as its directory
    g2 = td.encode(texts[:50], "HuggingFaceTokenizer", model=os.path.join(model, "tokenizer.json"))
    c.check(g2 == got[:50], "%s via file path" % name)
    if ref is not None:
        ids = [w for w in want[:300]] + [[5, 300, 7], [0], [170, 171], [1, 3 + 0xE6, 3 + 0x9D, 3 + 0xB1, 3 + 0x41],
                                         [3 + 0xE6, 3 + 0x9D, 9], [3 + 0xFF]]
        dec = td.decode(ids, "HuggingFaceTokenizer", model=model)
        for i, d in zip(ids, dec):
            w = ref.decode(i, skip_special_tokens=False)
            c.check(d == w, "%s decode %s: got %r want %r" % (name, i, d, w))
    if name == "hf_qwen2":
        r = td.encode(["caf\u00e9 ok", "e\u0301", "\u6771\u4eac"], "HuggingFaceTokenizer", model=model)
        c.check(isinstance(r[0], list), "NFC: Latin-1 is fine")
        c.check(all(isinstance(x, str) and "NFC" in x for x in r[1:]), "NFC beyond U+0300 refused: %s" % r[1:])

# unknown characters without byte fallback: fused into one <unk> or one <unk> each (live only)
if tokenizers is not None:
    base2 = json.load(open(os.path.join(GOLD, "hf_llama2", "tokenizer.json"), encoding="utf-8"))
    texts = [t for t in texts_live if t][:1500]
    for fuse in (True, False):
        with tempfile.TemporaryDirectory() as d:
            j = json.loads(json.dumps(base2))
            j["model"]["byte_fallback"] = False
            j["model"]["fuse_unk"] = fuse
            json.dump(j, open(os.path.join(d, "tokenizer.json"), "w"))
            ref = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            got = td.encode(texts, "HuggingFaceTokenizer", model=d)
            n_unk = 0
            for t, g in zip(texts, got):
                w = ref.encode(t).ids
                n_unk += w.count(0)
                c.check(g == w, "unk fuse=%s %r: got %s want %s" % (fuse, t, g, w))
            c.check(n_unk > 100, "unknowns exercised (%d)" % n_unk)

# pipelines that are refused with a message naming what is unsupported
base = json.load(open(os.path.join(GOLD, "hf_llama3", "tokenizer.json"), encoding="utf-8"))
bad_cases = [
    ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\w+|[^\\w\\s]+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
     "\\w+|[^\\w\\s]+"),
    ("pre_tokenizer", {"type": "Metaspace", "replacement": "\u2581", "split": True}, "Metaspace"),
    ("pre_tokenizer", {"type": "Whitespace"}, "Whitespace"),
    ("decoder", {"type": "WordPiece"}, "WordPiece"),
    ("normalizer", {"type": "NFKC"}, "NFKC"),
    ("post_processor", {"type": "RobertaProcessing"}, "RobertaProcessing"),
    ("model", dict(base["model"], type="WordPiece"), "WordPiece"),
    ("model", dict(base["model"], byte_fallback=True), "byte_fallback"),
    ("added_tokens", [dict(base["added_tokens"][0], lstrip=True)], "lstrip"),
]
with tempfile.TemporaryDirectory() as d:
    for key, value, needle in bad_cases:
        j = dict(base)
        j[key] = value
        json.dump(j, open(os.path.join(d, "tokenizer.json"), "w"))
        rc, out = td.info("HuggingFaceTokenizer", model=d)
        c.check(rc != 0 and "MC_ERR_UNSUPPORTED" in out and needle in out, "refuse %s: %s" % (needle, out))
    # a merge whose product (or part) is missing from the vocab is refused, as HF's BPE
    # builder does (MergeTokenOutOfVocabulary); without the check it would encode as unk
    m0 = base["model"]["merges"][0]
    pa, pb = m0 if isinstance(m0, list) else m0.split(" ")
    for gone, where in ((pa + pb, "the product"), (pa, "the first part")):
        j = json.loads(json.dumps(base))
        del j["model"]["vocab"][gone]
        json.dump(j, open(os.path.join(d, "tokenizer.json"), "w"))
        rc, out = td.info("HuggingFaceTokenizer", model=d)
        c.check(rc != 0 and "MC_ERR_FORMAT" in out and "merge 0 (%s %s)" % (pa, pb) in out and
                where in out and "tokenizer.json" in out, "merge token out of vocab: %s" % out)
        if tokenizers is not None:
            try:
                tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
                c.check(False, "HF accepted a merge token out of vocabulary")
            except Exception as e:  # noqa: BLE001 -- tokenizers raises a plain Exception
                c.check("vocabulary" in str(e).lower(), "HF refuses too: %s" % e)
    json.dump(base, open(os.path.join(d, "tokenizer.json"), "w"))
    json.dump({"tokenizer_class": "LlamaTokenizerFast", "eos_token": "<|end_of_text|>",
               "add_eos_token": True}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    rc, out = td.info("HuggingFaceTokenizer", model=d)
    c.check(rc != 0 and "add_eos_token=true" in out and "MC_ERR_UNSUPPORTED" in out, "add_eos: %s" % out)
    json.dump({"tokenizer_class": "LlamaTokenizerFast", "eos_token": "<nope>"},
              open(os.path.join(d, "tokenizer_config.json"), "w"))
    rc, out = td.info("HuggingFaceTokenizer", model=d)
    c.check(rc != 0 and "eos_token <nope>" in out, "bad eos: %s" % out)
    os.remove(os.path.join(d, "tokenizer_config.json"))
    rc, out = td.info("HuggingFaceTokenizer", model=d)
    c.check(rc == 0 and out.split()[1] == "-1", "no config: eod -1: %s" % out)
    open(os.path.join(d, "tokenizer.json"), "w").write('{"model": [1, 2')
    rc, out = td.info("HuggingFaceTokenizer", model=d)
    c.check(rc != 0 and "tokenizer.json:1:16" in out, "bad JSON: %s" % out)
    rc, out = td.info("HuggingFaceTokenizer", model=os.path.join(d, "nope"))
    c.check(rc != 0 and "does not exist" in out, "missing: %s" % out)
    rc, out = td.info("HuggingFaceTokenizer")
    c.check(rc != 0 and "--tokenizer-model" in out, "no model: %s" % out)

c.finish()
