#!/usr/bin/env python3
"""Writes a JSONL corpus ({"text": ...} per line) from text files every Debian machine has:
the licenses in /usr/share/common-licenses and this project's own sources and docs. Each
blank-line-separated paragraph of at least 200 characters becomes one document.
usage: make_corpus.py OUT.jsonl [ROOT...]"""
import json
import os
import sys


def files(roots):
    for root in roots:
        for dirpath, _, names in sorted(os.walk(root, followlinks=False)):
            for n in sorted(names):
                p = os.path.join(dirpath, n)
                if os.path.isfile(p) and not os.path.islink(p) and not n.startswith("."):
                    yield p  # files that are not UTF-8 text are skipped by the reader


def main():
    out, roots = sys.argv[1], sys.argv[2:] or ["/usr/share/common-licenses"]
    n = 0
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        for p in files(roots):
            try:
                text = open(p, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            for para in text.split("\n\n"):
                if len(para.strip()) >= 200:
                    f.write(json.dumps({"text": para.strip()}) + "\n")
                    n += 1
    os.replace(out + ".tmp", out)
    print(f"make_corpus: {n} documents -> {out}")


if __name__ == "__main__":
    main()
