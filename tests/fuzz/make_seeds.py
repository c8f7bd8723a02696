"""Writes small torch.save (torch 1.13) files as fuzzing seeds: a few dtypes, views over a
shared storage, non-contiguous strides, a Namespace and OrderedDict like a Megatron
checkpoint, numpy arrays, an Adam-like optimizer state. Usage: make_seeds.py OUTDIR"""
import argparse
import collections
import os
import sys

import numpy as np
import torch

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
base = torch.arange(12, dtype=torch.float32)
seeds = {
    "f32.pt": {"w": torch.randn(2, 3)},
    "dtypes.pt": {str(dt): torch.ones(3, dtype=dt) for dt in
                  (torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                   torch.int16, torch.int8, torch.uint8, torch.bool)},
    "views.pt": {"a": base, "v": base[2:5], "t": base.view(3, 4).t(), "c": base.view(3, 4)[:, 1]},
    "scalars.pt": [None, True, 1, -5000000000, 2.5, "s\u00e9", b"\x00\xff", (1, 2), [3]],
    "ckpt.pt": {
        "args": argparse.Namespace(num_layers=2, lr=6e-4, params_dtype=torch.float32),
        "checkpoint_version": 3.0, "iteration": 10,
        "model": collections.OrderedDict([("embedding.word_embeddings.weight", torch.randn(4, 2)),
                                          ("decoder.layers.0._extra_state", None)]),
        "optimizer": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(4, 2),
                                    "exp_avg_sq": torch.zeros(4, 2)}},
                      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95), "params": [0]}]},
        "rng_state": [{"random_rng_state": (3, tuple(range(5)), None),
                       "np_rng_state": ("MT19937", np.arange(4, dtype=np.uint32), 0, 0, 0.0),
                       "torch_rng_state": torch.zeros(8, dtype=torch.uint8)}],
    },
    "empty.pt": {"e": torch.zeros(0, 3), "d": {}},
}
for name, obj in seeds.items():
    torch.save(obj, os.path.join(out, name))
print("make_seeds: wrote %d seeds to %s" % (len(seeds), out))
