"""Helpers for the tokenizer tests: run build/tests/tok_driver on many strings at once, and
generate nasty Unicode test strings. Standard library only."""
import functools
import os
import random
import struct
import subprocess
import tempfile

SRC = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MC_BUILD_DIR", os.path.join(SRC, "build"))
DRIVER = os.path.join(BUILD, "tests", "tok_driver")
SHARED = os.path.join(SRC, "..", "..", "shared")  # worktree layout: /work/wt/<name>
for cand in (os.environ.get("MC_SHARED_DIR"), os.path.join(SRC, "shared"), os.path.join(SRC, "..", "shared"),
             SHARED, "/work/shared"):
    if cand and os.path.isdir(os.path.join(cand, "tokenizers")):
        SHARED = cand
        break
GPT2_DIR = os.path.join(SHARED, "tokenizers", "gpt2")
MEGATRON = os.environ.get("MC_MEGATRON_DIR", "/work/ref/Megatron-LM")


def _args(tok_type, vocab=None, merges=None, model=None, vocab_size=0):
    return [tok_type, vocab or "-", merges or "-", model or "-", str(vocab_size)]


def encode(texts, tok_type, **kw):
    """Encodes each str (or bytes) of texts; returns a list of id lists or 'ERR ...' strings."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.bin"), os.path.join(d, "out.txt")
        with open(inp, "wb") as f:
            for t in texts:
                b = t if isinstance(t, bytes) else t.encode("utf-8")
                f.write(struct.pack("<I", len(b)))
                f.write(b)
        r = subprocess.run([DRIVER, "encode"] + _args(tok_type, **kw) + [inp, out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("tok_driver failed: %s %s" % (r.stdout, r.stderr))
        with open(out, encoding="utf-8") as f:
            lines = f.read().split("\n")[:-1]
    res = []
    for line in lines:
        if line.startswith("ERR"):
            res.append(line)
        else:
            res.append([int(x) for x in line.split()] if line else [])
    return res


def decode(id_lists, tok_type, **kw):
    """Decodes each id list; returns str (or 'ERR ...') per list."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.txt"), os.path.join(d, "out.bin")
        with open(inp, "w") as f:
            for ids in id_lists:
                f.write(" ".join(map(str, ids)) + "\n")
        r = subprocess.run([DRIVER, "decode"] + _args(tok_type, **kw) + [inp, out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("tok_driver failed: %s %s" % (r.stdout, r.stderr))
        data = open(out, "rb").read()
    res, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if n == 0xFFFFFFFF:
            (m,) = struct.unpack_from("<I", data, pos)
            res.append("ERR " + data[pos + 4:pos + 4 + m].decode())
            pos += 4 + m
        else:
            res.append(data[pos:pos + n].decode("utf-8"))
            pos += n
    return res


def pretok(texts, kind, table="regex"):
    """Pieces of each text under megatron.c's pre-tokenizer KIND (gpt2, llama3, qwen2), as lists
    of str, or None where it reported an error."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
        enc = [t.encode("utf-8") for t in texts]
        with open(inp, "wb") as f:
            for b in enc:
                f.write(struct.pack("<I", len(b)))
                f.write(b)
        subprocess.run([DRIVER, "pretok", kind, table, inp, out], check=True)
        data = open(out, "rb").read()
    res, pos = [], 0
    for b in enc:
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if n == 0xFFFFFFFF:
            res.append(None)
            continue
        lens = struct.unpack_from("<%dI" % n, data, pos)
        pos += 4 * n
        pieces, off = [], 0
        for ln in lens:
            pieces.append(b[off:off + ln].decode("utf-8"))
            off += ln
        res.append(pieces)
    return res


def info(tok_type, **kw):
    r = subprocess.run([DRIVER, "info"] + _args(tok_type, **kw), capture_output=True, text=True)
    return r.returncode, r.stdout.strip()


# ---- test strings ---------------------------------------------------------------------------
NASTY = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "Hello world", "Hello  world", " leading", "trailing ",
    "it's", "it'S", "IT'S", "we've they're I'm you'll he'd don't", "'s", "''s", "!'s", "'red",
    "rock'n'roll", "  'll", "x 's", "<|endoftext|>", "a<|endoftext|>b",
    "a\n\n b", " \na", "Hello \n world", "a \t b", "line1\r\nline2\rline3\n", "\u00a0nbsp\u00a0",
    "tab\there", "many     spaces", "   ", "\n\n\n", " \n \n ", "x\u2028y\u2029z\u0085w",
    "\u001c\u001d\u001e\u001f sep", "\u000b\u000c vt ff", "\u200b zero width \ufeff bom \u180e",
    "nai\u0308ve", "e\u0301e\u0301", "\u0915\u094d\u0937", "\u0939\u093f\u0928\u094d\u0926\u0940",
    "\U0001F600\U0001F601 emoji", "\U0001F468\u200D\U0001F469\u200D\U0001F467 family",
    "\U0001F44D\U0001F3FD skin", "\U0001F1FA\U0001F1F8 flag", "東京都 中文测试 日本語のテキスト",
    "한국어 텍스트", "مرحبا بالعالم", "שלום עולם", "\u202eRTL override\u202c", "ไทย ภาษา",
    "Ελληνικά Кириллица", "123 4567 89.0 1,000,000", "٣٤٥ ۱۲۳ १२३ ０１２", "²³¹ ½ ¾ Ⅻ ⅷ",
    "$100 €50 £20 ¥1000", "C++ && || -> => != ==", "<html><body>x</body></html>",
    "def f(x):\n    return x**2\n", "{\"json\": [1, 2, {\"a\": null}]}", "\x00\x01\x02 ctrl",
    "\x7f\x80\x9f", "\ue000\uf8ff private", "\U0010FFFF\U000E0001\ufffe\uffff", "\U00020000\U0002A6DF",
    "ﬁ ﬂ ligatures", "ǅ title", "Ａ Ｚ ａ ｚ fullwidth", "ℌ ℍ ℕ math", "\U0001D400\U0001D7CE",
    "a" * 300, "ab" * 200 + " end", "x" + " " * 50 + "y", "\u3000\u3000ideographic", "1" * 40,
    "".join(chr(c) for c in range(0x20, 0x7f)), "'ve've've 'm'm 'd'd 'll'll",
    "ſ 'ſ 'K K", "İstanbul ı", "ß ẞ", "\u00ad soft\u00adhyphen", "a\u0300\u0301\u0302\u0303b",
]

POOL = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
    list(" " * 12) + list("'") * 4 + ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL"] +
    list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~") + ["\n", "\r\n", "\r", "\t", "\n\n", "  ", "   "] +
    list("\u00a0\u2000\u2003\u200a\u2028\u2029\u202f\u205f\u3000\u0085\u1680\u000b\u000c") +
    list("\u001c\u001d\u001e\u001f\u200b\u180e\ufeff\u00ad") +
    list("\u0300\u0301\u0308\u0327\u093f\u094d\u0e31\u05b0\u064b\u20dd\ufe0f\u200d") +
    list("éüñçøåßœæÉÜÑıİſ") + list("東京中文日本語テキストひらがな한국어") + list("مرحباשלוםไทยΕλληνКирилл") +
    list("٣۱१０²³¹½¾Ⅻⅷ①⓪") + ["\U0001F600", "\U0001F44D", "\U0001F3FD", "\U0001F468", "\U0001F1FA",
                             "\U0001D400", "\U00020000", "\U0010FFFF", "\U000E0001"] +
    list("€£¥©®™°±×÷§¶•…—–‘’“”«»¿¡")
)


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        k = rng.randint(1, 40)
        if i % 5 == 4:  # random code points from the whole range, no surrogates
            s = "".join(chr(c) for c in (rng.choice([rng.randint(0, 0x2FF), rng.randint(0, 0xFFFF),
                                                    rng.randint(0, 0x10FFFF)]) for _ in range(k))
                        if not 0xD800 <= c <= 0xDFFF)
        else:
            s = "".join(rng.choice(POOL) for _ in range(k))
        out.append(s)
    return out


def license_lines(limit=2000):
    d = "/usr/share/common-licenses"
    lines = []
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if os.path.isfile(p):
                with open(p, encoding="utf-8", errors="replace") as f:
                    lines.extend(f.read().split("\n"))
    return lines[:limit]


class Counter:
    def __init__(self, name):
        self.name, self.passed, self.failed, self.shown = name, 0, 0, 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            if self.shown < 15:
                print("FAIL:", what)
                self.shown += 1

    def finish(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, self.failed))
        raise SystemExit(1 if self.failed else 0)


def megatron_tokenizer_module():
    """Megatron's megatron/training/tokenizer/tokenizer.py, loaded without importing the whole
    megatron package (whose __init__ chain needs a newer torch): the package modules it needs
    are registered by hand and multimodal_tokenizer (unused here) is stubbed. None if the
    Megatron source is not there."""
    import importlib.util
    import sys
    import types
    root = MEGATRON
    tdir = os.path.join(root, "megatron", "training", "tokenizer")
    if not os.path.isdir(tdir):
        return None
    if "megatron.training.tokenizer.tokenizer" in sys.modules:
        return sys.modules["megatron.training.tokenizer.tokenizer"]
    for name, path in (("megatron", "megatron"), ("megatron.core", "megatron/core"),
                       ("megatron.core.datasets", "megatron/core/datasets"),
                       ("megatron.training", "megatron/training"),
                       ("megatron.training.tokenizer", "megatron/training/tokenizer")):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(root, path)]
        sys.modules[name] = m

    def load(name, path):
        spec = importlib.util.spec_from_file_location(name, os.path.join(root, path))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    load("megatron.core.datasets.megatron_tokenizer", "megatron/core/datasets/megatron_tokenizer.py")
    stub = types.ModuleType("megatron.training.tokenizer.multimodal_tokenizer")
    stub.MultimodalTokenizer = object
    sys.modules[stub.__name__] = stub
    # CustomTikTokenizer imports print_rank_0 from megatron.training and megatron.training.utils
    quiet = lambda *a, **k: None  # noqa: E731
    sys.modules["megatron.training"].print_rank_0 = quiet
    utils = types.ModuleType("megatron.training.utils")
    utils.print_rank_0 = quiet
    sys.modules[utils.__name__] = utils
    return load("megatron.training.tokenizer.tokenizer", "megatron/training/tokenizer/tokenizer.py")


@functools.lru_cache(maxsize=None)
def regex_class_mismatches():
    """Code points whose \\p{L}/\\p{N}/\\s class differs between the installed Python `regex`
    module and megatron.c's table (src/tokenizer/unicode_classes.c, regex 2022.10.31 /
    Unicode 15.0). Empty for that version; a newer `regex` knows newer Unicode, and texts with
    those code points cannot be compared with a live reference."""
    import re as _re
    import regex
    if regex.__version__ == "2.5.123":  # the version of Debian's python3-regex 2022.10.31
        return set()
    table = {}
    src = open(os.path.join(SRC, "src", "tokenizer", "unicode_classes.c"), encoding="utf-8").read()
    for lo, hi, cls in _re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+), MC_UNI_([LNS])\}", src):
        for cp in range(int(lo, 16), int(hi, 16) + 1):
            table[cp] = cls
    pats = [("L", regex.compile(r"\p{L}")), ("N", regex.compile(r"\p{N}")), ("S", regex.compile(r"\s"))]
    bad = set()
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        live = next((k for k, p in pats if p.match(ch)), None)
        if live != table.get(cp):
            bad.add(cp)
    print("note: Python regex %s differs from megatron.c's Unicode 15.0 table on %d code points; "
          "texts with them are skipped" % (regex.__version__, len(bad)))
    return bad


def without(texts, bad):
    return [t for t in texts if not any(ord(ch) in bad for ch in t)] if bad else texts


@functools.lru_cache(maxsize=None)
def onig_class_mismatches():
    """The same for the Oniguruma engine of HuggingFace `tokenizers` vs unicode_classes_onig.c
    (made with tokenizers 0.23.3)."""
    import re as _re
    import tokenizers
    from tokenizers import Regex, pre_tokenizers
    if tokenizers.__version__ == "0.23.3":
        return set()
    table = {}
    src = open(os.path.join(SRC, "src", "tokenizer", "unicode_classes_onig.c"), encoding="utf-8").read()
    for lo, hi, cls in _re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+), MC_UNI_([LNS])\}", src):
        for cp in range(int(lo, 16), int(hi, 16) + 1):
            table[cp] = cls
    live = {}
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for cls, pat in (("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")):
        split = pre_tokenizers.Split(Regex(pat), behavior="removed", invert=False)
        for i in range(0, len(cps), 50000):
            chunk = cps[i:i + 50000]
            kept = set()
            for _, (a, b) in split.pre_tokenize_str("".join(chr(c) for c in chunk)):
                kept.update(range(a, b))
            for k, c in enumerate(chunk):
                if k not in kept:
                    live[c] = cls
    bad = {c for c in cps if live.get(c) != table.get(c)}
    print("note: tokenizers %s differs from megatron.c's Oniguruma table on %d code points; "
          "texts with them are skipped" % (tokenizers.__version__, len(bad)))
    return bad
