"""Megatron's IndexedDatasetBuilder on the same documents as bench_index.c (one sequence per
document, length 1 + (i*7919) % 64, tokens (i+k) % 50257, uint16), the way
tools/preprocess_data.py drives it (add_document per document), then IndexedDataset open and
add_index merge. usage: MEGATRON_ROOT=... /usr/bin/python3 bench_index_megatron.py PREFIX N"""
import os
import sys
import time
import types

import numpy as np

M = os.environ["MEGATRON_ROOT"]
sys.path.insert(0, M)
for name, sub in [("megatron", "megatron"), ("megatron.core", "megatron/core")]:
    mod = types.ModuleType(name)
    mod.__path__ = [os.path.join(M, sub)]
    sys.modules[name] = mod
import megatron.core.parallel_state  # noqa: E402,F401 (must precede megatron.core.utils)
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder  # noqa

prefix, n = sys.argv[1], int(sys.argv[2])
t0 = time.time()
b = IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
total = 0
for i in range(n):
    length = 1 + (i * 7919) % 64
    toks = [(i + k) % 50257 for k in range(length)]
    total += length
    b.add_document(toks, [length])
b.finalize(prefix + ".idx")
t1 = time.time()
ds = IndexedDataset(prefix)
_ = ds.index.sequence_lengths[-1]
t2 = time.time()
m = IndexedDatasetBuilder(prefix + "_merged.bin", dtype=np.uint16)
m.add_index(prefix)
m.add_index(prefix)
m.finalize(prefix + "_merged.idx")
t3 = time.time()
print("Megatron build: %d docs, %d tokens in %.3f s (%.3f M docs/s)" % (n, total, t1 - t0,
                                                                        n / (t1 - t0) / 1e6))
print("Megatron open: %.3f s" % (t2 - t1))
print("Megatron merge (add_index x2): %.3f s" % (t3 - t2))
print("RESULT py_build_s=%.4f py_open_s=%.4f py_merge_s=%.4f" % (t1 - t0, t2 - t1, t3 - t2))
