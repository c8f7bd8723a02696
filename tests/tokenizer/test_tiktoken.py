"""TikTokenizer (patterns v1 and v2) vs Megatron-LM's own CustomTikTokenizer running `tiktoken`, live
when both are available, else vs the committed golden tiktoken_cases.json. Vocab: the committed
tiktoken_vocab.json (made by make_goldens.py). Two special-token configurations; encode, decode,
vocab size, eod, and refusals (bad files and options)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokdriver as td  # noqa: E402

c = td.Counter("test_tiktoken")
GOLD = os.path.join(td.SRC, "tests", "golden", "tokenizer")
VOCAB = os.path.join(GOLD, "tiktoken_vocab.json")
golden = json.load(open(os.path.join(GOLD, "tiktoken_cases.json"), encoding="utf-8"))
try:
    import tiktoken  # noqa: F401
    mt = td.megatron_tokenizer_module()
except ImportError:
    mt = None
print("reference:", "golden tiktoken_cases.json (tiktoken or the Megatron source is missing)"
      if mt is None else "Megatron-LM CustomTikTokenizer with tiktoken %s" % tiktoken.__version__)


def env_for(ns, sp, pattern="v1"):
    e = dict(os.environ, MC_TIKTOKEN_PATTERN=pattern, MC_TIKTOKEN_NUM_SPECIAL=str(ns))
    if sp:
        e["MC_TIKTOKEN_SPECIAL"] = " ".join(sp)
    else:
        e.pop("MC_TIKTOKEN_SPECIAL", None)
    return e


def with_env(env, fn, *a, **kw):
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return fn(*a, **kw)
    finally:
        os.environ.clear()
        os.environ.update(old)


if mt is not None:  # the matcher tested in test_pretokenizer.py is Megatron's v1 pattern
    c.check(mt.PATTERN_TIKTOKEN == r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|"
            r"\s*[\r\n]|\s+(?!\S)|\s+", "PATTERN_TIKTOKEN is the v1 pattern megatron.c implements")
    c.check(mt.PATTERN_TIKTOKEN_V2 == (
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
        "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
        "PATTERN_TIKTOKEN_V2 is the v2 pattern megatron.c implements")
texts_live = td.NASTY + td.random_strings(1500, seed=31) + td.license_lines(600) + [
    "<s>x</s>", "<|endoftext|>", "<SPECIAL_7>", "it's IT'S 'll", "123456 7.5", "a\r\n\r\n b",
    "CamelCaseWords HTTPServer iPhone \u01c4\u01c5\u01c6 \u02b0ab \u4e2d\u6587x e\u0301E\u0301 a/b//\n"]
for case in golden["cases"]:
    vs, ns, sp = case["vocab_size"], case["num_special_tokens"], case["special_tokens"]
    env = env_for(ns, sp, case["pattern"])
    if mt is not None:
        pat = mt.PATTERN_TIKTOKEN if case["pattern"] == "v1" else mt.PATTERN_TIKTOKEN_V2
        ref = mt.CustomTikTokenizer(VOCAB, pat, vs, ns, sp)
        texts = texts_live
        want = [ref.tokenize(t) for t in texts]
        eod = ref.eod
    else:
        ref, texts, want, eod = None, golden["texts"], case["ids"], case["eod"]
    got = with_env(env, td.encode, texts, "TikTokenizer", model=VOCAB, vocab_size=vs)
    for t, g, w in zip(texts, got, want):
        c.check(g == w, "%s vocab %d %r: got %s want %s" % (case["pattern"], vs, t, g, w))
    rc, out = with_env(env, td.info, "TikTokenizer", model=VOCAB, vocab_size=vs)
    c.check(out == "%d %d -1 CustomTikTokenizer" % (vs, eod), "info %s" % out)
    if ref is not None:
        ids = want[:300] + [[0, 1, 2, ns - 1, ns, vs - 1], [ns + 0xE6, ns + 0x9D]]
        dec = with_env(env, td.decode, ids, "TikTokenizer", model=VOCAB, vocab_size=vs)
        for i, d in zip(ids, dec):
            c.check(d == ref.detokenize(i), "decode %s: got %r want %r" % (i, d, ref.detokenize(i)))

# refusals
with tempfile.TemporaryDirectory() as d:
    def info(path, vs=900, **envkw):
        return with_env(env_for(100, None, **envkw), td.info, "TikTokenizer", model=path, vocab_size=vs)
    rc, out = info(VOCAB, pattern="v3")
    c.check(rc != 0 and "--tiktoken-pattern" in out, "bad pattern: %s" % out)
    rc, out = info(VOCAB, vs=5000)
    c.check(rc != 0 and "--vocab-size" in out, "vocab too large for the file: %s" % out)
    vocab = json.load(open(VOCAB))
    bad = os.path.join(d, "v.json")
    json.dump(vocab[:300] + [dict(vocab[300], token_bytes=vocab[299]["token_bytes"])] + vocab[301:], open(bad, "w"))
    rc, out = info(bad)
    c.check(rc != 0 and "repeat rank 299" in out, "duplicate: %s" % out)
    json.dump([dict(vocab[0], token_bytes="!!")] + vocab[1:], open(bad, "w"))
    rc, out = info(bad)
    c.check(rc != 0 and "base64" in out, "base64: %s" % out)
    json.dump([dict(vocab[0], rank=5)] + vocab[1:], open(bad, "w"))
    rc, out = info(bad)
    c.check(rc != 0 and "entry 0" in out, "rank order: %s" % out)
    rc, out = with_env(dict(env_for(100, ["<s>", "</s>"])), td.info, "TikTokenizer", model=VOCAB, vocab_size=900)
    c.check(rc != 0 and "<unk>" in out, "specials without <unk>: %s" % out)
c.finish()
