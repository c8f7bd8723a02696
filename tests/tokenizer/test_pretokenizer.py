"""The pre-tokenizer matchers against the regex engines they stand for, piece by piece:
the GPT-2, Llama-3 and Qwen2 patterns vs Python's `regex` module (GPT-2 with it is exactly what
Megatron's GPT2Tokenizer runs) with its Unicode tables, and vs HuggingFace `tokenizers`
(Oniguruma, Unicode 16 tables) when installed.
Strings: nasty Unicode, random code points, digit runs, contractions in all cases, whitespace
mixes, license text."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokdriver as td  # noqa: E402

import regex  # python3-regex, which Megatron's GPT2 tokenizer needs

c = td.Counter("test_pretokenizer")
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
L3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
      r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN = L3.replace(r"\p{N}{1,3}", r"\p{N}")

rng = random.Random(3)
extra = []
for _ in range(1500):  # dense in the characters the patterns care about (case for tiktoken v2)
    extra.append("".join(rng.choice(["'", "s", "S", "t", "T", "re", "RE", "vE", "m", "LL", "d", "1", "22",
                                     "\u0663", "\u00b2", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0",
                                     "\u3000", "a", "\u00e9", "\u6771", "!", "?!", ".", "\u0308", "_",
                                     "\U0001F600", "\u2028", "\u0085", "\u000b", "x", "\u017f", "\u212a", "\u0130",
                                     "A", "\u01c5", "\u02b0", "\u0391", "\u03b3", "/", "//"])
                         for _ in range(rng.randint(1, 25))))
texts = td.NASTY + td.random_strings(3000, seed=11) + extra + td.license_lines(1000)

texts_all = texts
texts = td.without(texts, td.regex_class_mismatches())
got = td.pretok(texts, "gpt2")
pat = regex.compile(GPT2)
for t, g in zip(texts, got):
    w = pat.findall(t)
    c.check(g == w, "gpt2 %r: got %r want %r" % (t, g, w))

try:
    from tokenizers import Regex, pre_tokenizers
except ImportError:
    pre_tokenizers = None
    print("SKIP Llama-3/Qwen2 patterns vs Oniguruma: python package `tokenizers` not installed")
if pre_tokenizers is not None:
    TIKTOKEN_V2 = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
                   "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
                   "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    for kind, p in (("gpt2", GPT2), ("llama3", L3), ("qwen2", QWEN), ("tiktoken_v2", TIKTOKEN_V2)):
        split = pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False)
        texts_onig = td.without(texts_all, td.onig_class_mismatches())
        got = td.pretok(texts_onig, kind, "onig")
        for t, g in zip(texts_onig, got):
            w = [s for s, _ in split.pre_tokenize_str(t)]
            c.check(g == w, "%s %r: got %r want %r" % (kind, t, g, w))
# the Llama-3, Qwen2 and tiktoken v1 patterns with Python regex's Unicode tables, too
TIKTOKEN_V1 = r"[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"
for kind, p in (("llama3", L3), ("qwen2", QWEN), ("tiktoken_v1", TIKTOKEN_V1)):
    pat = regex.compile(p)
    got = td.pretok(texts, kind, "regex")
    for t, g in zip(texts, got):
        c.check(g == pat.findall(t), "%s vs regex %r: got %r want %r" % (kind, t, g, pat.findall(t)))

c.finish()
