"""HuggingFace `tokenizers` GPT-2 BPE (same vocab/merges, ByteLevel pre-tokenizer, no prefix
space) over a JSONL corpus's "text" values, in batches of 1024 documents with encode_batch;
prints the token count. Run as a child of bench_preprocess.py, which times it.
usage: /usr/bin/python3 bench_hf.py CORPUS.jsonl GPT2_DIR THREADS"""
import json
import os
import sys

os.environ["RAYON_NUM_THREADS"] = sys.argv[3]
os.environ["TOKENIZERS_PARALLELISM"] = "true"
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

corpus, gpt2 = sys.argv[1], sys.argv[2]
tok = Tokenizer(models.BPE.from_file(gpt2 + "/vocab.json", gpt2 + "/merges.txt"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
total, batch = 0, []
with open(corpus, encoding="utf-8") as f:
    for line in f:
        batch.append(json.loads(line)["text"])
        if len(batch) == 1024:
            total += sum(len(e.ids) for e in tok.encode_batch(batch))
            batch = []
if batch:
    total += sum(len(e.ids) for e in tok.encode_batch(batch))
print("tokens", total)
