"""src/core/json.c vs Python's json module (what Megatron uses for vocab.json, tokenizer.json
and JSONL): random documents must parse to the same value (re-serialized canonically by
build/tests/json_driver), and random corruptions must be accepted or refused exactly when
json.loads accepts or refuses them (except lone surrogate escapes, which megatron.c refuses
on purpose)."""
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokdriver as td  # noqa: E402

c = td.Counter("test_json_python")
DRIVER = os.path.join(td.BUILD, "tests", "json_driver")
rng = random.Random(2024)


def rand_str():
    pool = ["a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\u00e9", "\u6771", "\U0001F600", "\x00", "\x1f",
            "\u2028", "\ufeff", "'", "{", "]"]
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, 8)))


def rand_value(depth=0):
    k = rng.randint(0, 9 if depth < 4 else 5)
    if k == 0: return None
    if k == 1: return rng.choice([True, False])
    if k == 2: return rng.randint(-10**20, 10**20) if rng.random() < 0.2 else rng.randint(-1000, 1000)
    if k == 3: return rng.choice([0.5, -1e-7, 1e300, 3.14159, 1/3, 1e16, 123456.789, float("nan"),
                                  float("inf"), -float("inf"), rng.uniform(-1e6, 1e6), -0.0])
    if k in (4, 5): return rand_str()
    if k in (6, 7): return [rand_value(depth + 1) for _ in range(rng.randint(0, 4))]
    return {rand_str(): rand_value(depth + 1) for _ in range(rng.randint(0, 4))}


def has_surrogate(v):
    if isinstance(v, str):
        return any(0xD800 <= ord(ch) <= 0xDFFF for ch in v)
    if isinstance(v, list):
        return any(has_surrogate(x) for x in v)
    if isinstance(v, dict):
        return any(has_surrogate(k) or has_surrogate(x) for k, x in v.items())
    return False


def canon(v):
    return json.dumps(v, ensure_ascii=True, separators=(",", ":"), allow_nan=True)


docs = []
for _ in range(1500):
    v = rand_value()
    style = rng.randint(0, 2)
    text = json.dumps(v, ensure_ascii=bool(style == 0), indent=(2 if style == 1 else None))
    docs.append(text)
docs += ['{"k": 1, "k": 2, "j": [1, 2], "k": 3}', '  [1e5, 1E-5, -0, 0.0e0, 1.5e+3]  ',
         '"\\ud83d\\ude00 \\u00e9"', '[NaN, Infinity, -Infinity]', '123456789012345678901234567890',
         '{"a":{"b":{"c":[[[[]]]]}}}', '""', '[]', '{}', 'null', '-1', '1e999']
# corruptions: delete / insert / replace one character
for text in list(docs[:1200]):
    t = list(text)
    i = rng.randrange(len(t) + 1)
    op = rng.randint(0, 2)
    ch = rng.choice(list(",:[]{}\"\\ 0e.-+tfnNI\u00e9\x01") + ["\\u12", "\\ud800", "//", "\ufeff"])
    if op == 0 and i < len(t):
        del t[i]
    elif op == 1:
        t.insert(i, ch)
    elif i < len(t):
        t[i] = ch
    docs.append("".join(t))

with tempfile.TemporaryDirectory() as d:
    inp, out = os.path.join(d, "in.bin"), os.path.join(d, "out.txt")
    with open(inp, "wb") as f:
        for t in docs:
            b = t.encode("utf-8", "surrogatepass")
            f.write(struct.pack("<I", len(b)))
            f.write(b)
    subprocess.run([DRIVER, inp, out], check=True)
    got = open(out, encoding="utf-8").read().split("\n")[:-1]

n_err = 0
for t, g in zip(docs, got):
    try:
        v = json.loads(t)
        want = None if has_surrogate(v) else canon(v)  # lone surrogates: refused on purpose
    except (ValueError, RecursionError):
        want = None
    if want is None:
        n_err += 1
        c.check(g.startswith("ERR"), "Python refuses %r, megatron.c gave %r" % (t, g))
        c.check(re.search(r" rec:\d+:\d+: invalid JSON: ", g) is not None, "message names line:column: %r" % g)
    else:
        c.check(g == want, "%r: got %r want %r" % (t, g, want))
c.check(len(got) == len(docs), "one line per document")
c.check(n_err > 300, "enough invalid documents (%d)" % n_err)
print("%d documents, %d invalid" % (len(docs), n_err))
c.finish()
