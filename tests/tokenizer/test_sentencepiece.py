"""SentencePieceTokenizer, GPTSentencePieceTokenizer and Llama2Tokenizer vs Megatron-LM's own
classes (megatron/training/tokenizer/tokenizer.py) running the `sentencepiece` package, live
when both are available, else vs the committed golden spm_cases.json. Models (committed, made by
make_goldens.py): unigram with nmt_nfkc, Llama-2-like BPE with byte fallback, unigram with
user-defined/control symbols, a pad piece and a custom charsmap, BPE with whitespace as suffix
and no bos. Also vocab size, eod, pad, decode, and refusals with clear messages."""
import json
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokdriver as td  # noqa: E402

c = td.Counter("test_sentencepiece")
GOLD = os.path.join(td.SRC, "tests", "golden", "tokenizer")
golden = json.load(open(os.path.join(GOLD, "spm_cases.json"), encoding="utf-8"))
KINDS = ["SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"]
try:
    import sentencepiece
    mt = td.megatron_tokenizer_module()
except ImportError:
    mt = None
if mt is None:
    print("reference: golden spm_cases.json (sentencepiece or the Megatron source is missing)")
else:
    print("reference: Megatron-LM tokenizer classes with sentencepiece", sentencepiece.__version__)
    classes = dict(zip(KINDS, [mt._SentencePieceTokenizer, mt._GPTSentencePieceTokenizer, mt._Llama2Tokenizer]))

extra = [t for t in golden["texts"] if t not in td.NASTY][-9:]
texts_live = td.NASTY + td.random_strings(1200, seed=21) + td.license_lines(400) + extra
models = sorted({k.split("/")[0] for k in golden["cases"]})
for name in models:
    path = os.path.join(GOLD, "spm", name + ".model")
    for kind in KINDS:
        case = golden["cases"]["%s/%s" % (name, kind)]
        if mt is not None:
            ref = classes[kind](path)
            texts = texts_live
            want = [ref.tokenize(t) for t in texts]
            meta = (ref.vocab_size, ref.eod, ref.pad if kind != "Llama2Tokenizer" else -1)
        else:
            ref, texts, want = None, golden["texts"], case["ids"]
            meta = (case["vocab_size"], case["eod"], case["pad"])
        got = td.encode(texts, kind, model=path)
        for t, g, w in zip(texts, got, want):
            if kind == "Llama2Tokenizer" and w[:1] == [-1]:
                # no bos piece: Megatron silently emits id -1; megatron.c refuses (deliberate)
                c.check(isinstance(g, str) and "no bos piece" in g, "%s %s %r: %s" % (name, kind, t, g))
                continue
            c.check(g == w, "%s %s %r: got %s want %s" % (name, kind, t, g, w))
        rc, out = td.info(kind, model=path)
        c.check(out == "%d %d %d _%s" % (meta + (kind,)), "%s %s info: %s want %s" % (name, kind, out, meta))
        if ref is not None and not (kind == "Llama2Tokenizer" and ref.bos_id < 0):
            ids = want[:250]
            if kind == "SentencePieceTokenizer":
                ids = ids + [[ref.eod, 5, ref.eod], [ref.pad]]
            dec = td.decode(ids, kind, model=path)
            for i, d in zip(ids, dec):
                try:
                    w = ref.detokenize(i)
                except Exception as e:  # Megatron raises (e.g. an added id the model lacks)
                    w = "ERR"
                    c.check(d.startswith("ERR"), "%s %s decode %s should fail like Megatron (%s)" % (name, kind, i, e))
                    continue
                c.check(d == w, "%s %s decode %s: got %r want %r" % (name, kind, i, d, w))

# refusals and bad files
with tempfile.TemporaryDirectory() as d:
    def pb_field(num, wt, payload):
        key = bytes([num << 3 | wt])
        return key + (bytes([len(payload)]) + payload if wt == 2 else payload)
    piece = lambda s, t: pb_field(1, 2, pb_field(1, 2, s.encode()) + pb_field(3, 0, bytes([t])))
    word = piece("<unk>", 2) + piece("a", 1) + pb_field(2, 2, pb_field(3, 0, bytes([3])))
    p = os.path.join(d, "word.model")
    open(p, "wb").write(word)
    rc, out = td.info("GPTSentencePieceTokenizer", model=p)
    c.check(rc != 0 and "MC_ERR_UNSUPPORTED" in out and "WORD" in out, "WORD model: %s" % out)
    open(p, "wb").write(piece("a", 1))
    rc, out = td.info("GPTSentencePieceTokenizer", model=p)
    c.check(rc != 0 and "unk is not defined" in out, "no unk: %s" % out)
    open(p, "wb").write(b"\x0a\xff\xff")
    rc, out = td.info("Llama2Tokenizer", model=p)
    c.check(rc != 0 and "word.model" in out and "MC_ERR_FORMAT" in out, "garbage: %s" % out)
    open(p, "wb").write(piece("<unk>", 2) + piece("<0x41>", 6))
    rc, out = td.info("SentencePieceTokenizer", model=p)
    c.check(rc != 0 and "byte_fallback is false" in out, "byte piece: %s" % out)
    rc, out = td.info("SentencePieceTokenizer", model=os.path.join(d, "missing.model"))
    c.check(rc != 0 and "missing.model" in out and "MC_ERR_IO" in out, "missing: %s" % out)
    rc, out = td.info("Llama2Tokenizer")
    c.check(rc != 0 and "--tokenizer-model" in out, "no model: %s" % out)
    r = td.encode(["ok"], "Llama2Tokenizer", model=os.path.join(GOLD, "spm", "bpe_suffix.model"))
    c.check(isinstance(r[0], str) and "no bos" in r[0], "Llama2 without bos: %s" % r)

c.finish()
