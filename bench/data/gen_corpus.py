"""Writes a JSONL corpus of at least SIZE_MB megabytes for the preprocessing benchmark from the
text on this machine (/usr/share/common-licenses, /usr/share/doc: copyright files, READMEs,
changelogs, gzipped or not). Paragraphs are shuffled with a fixed seed and grouped into
documents of 1..40 paragraphs, so the corpus is deterministic for one machine's set of files.
usage: /usr/bin/python3 gen_corpus.py OUT.jsonl [SIZE_MB=110]"""
import gzip
import json
import os
import random
import sys


def paragraphs():
    roots = ["/usr/share/common-licenses", "/usr/share/doc"]
    out = []
    for root in roots:
        for d, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                p = os.path.join(d, f)
                if os.path.islink(p) or os.path.getsize(p) > 8 << 20:
                    continue
                try:
                    raw = gzip.open(p).read() if f.endswith(".gz") else open(p, "rb").read()
                    text = raw.decode("utf-8")
                except (OSError, UnicodeDecodeError, EOFError):
                    continue
                if "\x00" in text:
                    continue
                out += [x for x in text.split("\n\n") if x.strip()]
    return out


def main():
    out_path = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 110
    paras = paragraphs()
    rng = random.Random(1234)
    written = 0
    with open(out_path, "w", encoding="utf-8") as f:
        while written < size << 20:
            rng.shuffle(paras)
            i = 0
            while i < len(paras) and written < size << 20:
                k = rng.randint(1, 40)
                line = json.dumps({"text": "\n\n".join(paras[i:i + k])}, ensure_ascii=False) + "\n"
                f.write(line)
                written += len(line.encode("utf-8"))
                i += k
    print("gen_corpus: %s: %.1f MB from %d paragraphs" % (out_path, written / 2**20, len(paras)))


if __name__ == "__main__":
    main()
