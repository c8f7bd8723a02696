#!/usr/bin/env python3
"""Regenerates the preprocess_data goldens in this directory with Megatron-LM's own
tools/preprocess_data.py (core_v0.12.1).

usage: MEGATRON_ROOT=/path/to/Megatron-LM \
       /usr/bin/python3 tests/golden/data/make_goldens.py /path/to/shared

`shared` holds tokenizers/gpt2/{vocab.json,merges.txt}; megatron_preprocess.py (beside this
file) runs the unchanged tool under torch 1.13. SentencePiece models and the tiktoken
vocab come from tests/golden/tokenizer ({TOKGOLD}); needs PyPI sentencepiece and tiktoken. The corpora in inputs/ are written by
this script (deterministic); each case of cases.json is run in a scratch directory and the
files it lists under "outputs" are copied to <case>/.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def unicode_corpus():
    """Lines exercising the JSON reader and the GPT-2 pre-tokenizer."""
    docs = [
        {"text": "Hello world! It's a test; they'll say \"we've\" done it.", "title": "Plain"},
        {"text": "", "title": "empty text"},
        {"text": " ", "title": ""},
        {"text": "   leading spaces and trailing   ", "title": "ws"},
        {"text": "tab\there\nnewline\n\nand  double  spaces \u00a0nbsp", "title": "controls"},
        {"text": "caf\u00e9 na\u0131\u0308ve \u00c5ngstr\u00f6m \u00df \ufb01", "title": "latin"},
        {"text": "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u4e2d\u6587\u5b57\u7b26",
         "title": "cjk"},
        {"text": "emoji \U0001F600\U0001F469\u200d\U0001F469\u200d\U0001F467 flags "
                 "\U0001F1EB\U0001F1F7 skin \U0001F44D\U0001F3FD", "title": "emoji"},
        {"text": "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u202eRTL\u202c",
         "title": "rtl"},
        {"text": "\u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
         "title": "indic"},
        {"text": "zero\u200bwidth\ufeffbom\u2028line\u2029para\u0085nel", "title": "seps"},
        {"text": "<|endoftext|> is plain text here", "title": "eot"},
        {"text": "numbers 3.14159 1,000,000 \u00bd \u2463 \u0663\u0664", "title": "nums"},
        {"text": "'s 't 're 've 'm 'll 'd 'S IT'S don't ''s !'s", "title": "apos"},
        {"text": ["First sentence.", "", "Second one.", " "], "title": "pre-split"},
        {"text": [], "title": "empty list"},
        {"text": "\x01\x02\x7f\u0080\u009f control bytes", "title": "c0c1"},
        {"text": "long " + " ".join("w%d" % (i % 997) for i in range(4000)), "title": "long"},
        {"text": "\U00010348\U0001D11E\U0010FFFD astral", "title": "astral"},
    ]
    lines = []
    for i, d in enumerate(docs):
        # alternate escaped (\uXXXX, surrogate pairs) and raw UTF-8 spellings
        lines.append(json.dumps(d, ensure_ascii=(i % 2 == 0)))
    # hand-written JSON: duplicate keys (last wins), unused odd values, whitespace
    lines.append('{"text": "first", "title": "t", "text": "duplicate key: last wins"}')
    lines.append('  {"title":"spaces\\/slash","n":NaN,"m":-Infinity,"o":{"a":[1,2.5e3,null,true]},'
                 '"text":"escapes \\"\\\\\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00"}  ')
    return "\n".join(lines) + "\n"


def crlf_corpus():
    body = ['{"text": "windows line %d \\u00e9"}' % i for i in range(6)]
    # CRLF, then LF, then a lone CR: Python's universal newlines treat all three as line ends
    return body[0] + "\r\n" + body[1] + "\r\n" + body[2] + "\n" + body[3] + "\r" + body[4] + \
        "\r\n" + body[5]  # no final newline


def null_corpus(big):
    lines = []
    for i in range(40):
        n = (i * 7) % 13 + 1
        ids = [((i * 131 + k * 17) % (70000 if big else 500)) for k in range(n)]
        if i % 5 == 0:
            lines.append(json.dumps({"text": [" ".join(map(str, ids[:3])),
                                              " ".join(map(str, ids[3:] or [1]))]}))
        else:
            lines.append(json.dumps({"text": " ".join(map(str, ids))}))
    return "\n".join(lines) + "\n"


def many_corpus():
    return "".join(json.dumps({"text": "doc %d " % i + "word " * (i % 9)}) + "\n"
                   for i in range(101))


def main():
    shared = sys.argv[1]
    gpt2 = os.path.join(shared, "tokenizers", "gpt2")
    runner = os.path.join(HERE, "megatron_preprocess.py")
    tokgold = os.path.join(os.path.dirname(HERE), "tokenizer")
    inputs = os.path.join(HERE, "inputs")
    os.makedirs(inputs, exist_ok=True)
    corpora = {"unicode.jsonl": unicode_corpus(), "crlf.jsonl": crlf_corpus(),
               "null.jsonl": null_corpus(False), "null_big.jsonl": null_corpus(True),
               "many.jsonl": many_corpus()}
    for name, text in corpora.items():
        with open(os.path.join(inputs, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
    for case in cases:
        out_dir = os.path.join(HERE, case["name"])
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(inputs, case["input"]), tmp)
            args = [a.replace("{GPT2}", gpt2).replace("{TOKGOLD}", tokgold) for a in case["args"]]
            cmd = [sys.executable, runner, "--input", case["input"], "--output-prefix",
                   "out"] + args
            subprocess.run(cmd, cwd=tmp, check=True, stdout=subprocess.DEVNULL)
            for o in case["outputs"]:
                shutil.copy(os.path.join(tmp, "out_" + o), os.path.join(out_dir, o))
        print("made", case["name"])


if __name__ == "__main__":
    main()
