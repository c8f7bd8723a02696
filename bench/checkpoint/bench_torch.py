"""torch.save / torch.load (torch 1.13) of the same GPT-2-124M-sized state dict bench_ckpt.c
writes (mcore names, fp32 model + Adam exp_avg / exp_avg_sq / step), best of REPEATS.
Save is timed alone and followed by fsync (timed apart) as our writer does.
Usage: bench_torch.py FILE REPEATS; prints JSON."""
import collections
import json
import os
import sys
import time

import torch

path, reps = sys.argv[1], int(sys.argv[2])
h, f = 768, 3072
shapes = [("embedding.word_embeddings.weight", (50304, h)),
          ("embedding.position_embeddings.weight", (1024, h))]
layer = [("self_attention.linear_qkv.layer_norm_weight", (h,)),
         ("self_attention.linear_qkv.layer_norm_bias", (h,)),
         ("self_attention.linear_qkv.weight", (3 * h, h)), ("self_attention.linear_qkv.bias", (3 * h,)),
         ("self_attention.linear_proj.weight", (h, h)), ("self_attention.linear_proj.bias", (h,)),
         ("mlp.linear_fc1.layer_norm_weight", (h,)), ("mlp.linear_fc1.layer_norm_bias", (h,)),
         ("mlp.linear_fc1.weight", (f, h)), ("mlp.linear_fc1.bias", (f,)),
         ("mlp.linear_fc2.weight", (h, f)), ("mlp.linear_fc2.bias", (h,))]
for l in range(12):
    shapes += [("decoder.layers.%d.%s" % (l, n), s) for n, s in layer]
shapes += [("decoder.final_layernorm.weight", (h,)), ("decoder.final_layernorm.bias", (h,))]


def fill(s):
    n = 1
    for x in s:
        n *= x
    return ((torch.arange(n) % 1000).float() * 1e-3).view(s)


model = collections.OrderedDict((n, fill(s)) for n, s in shapes)
state = {i: {"step": torch.tensor(10.0), "exp_avg": fill(s), "exp_avg_sq": fill(s)}
         for i, (n, s) in enumerate(shapes)}
sd = {"iteration": 10, "model": model,
      "optimizer": {"state": state, "param_groups": [{"lr": 6e-4, "params": list(range(len(shapes)))}]}}
nbytes = sum(t.numel() * 4 for t in model.values()) * 3
best_save = best_load = best_nosync = best_sync = 1e30
for _ in range(reps):
    if os.path.exists(path):
        os.remove(path)  # a new file, as in a new iter_* directory (bench_ckpt.c does too)
    t0 = time.perf_counter()
    with open(path, "wb") as fh:
        torch.save(sd, fh)
        fh.flush()
        ts = time.perf_counter()
        os.fsync(fh.fileno())
    t1 = time.perf_counter()
    back = torch.load(path)
    t2 = time.perf_counter()
    best_save, best_load = min(best_save, t1 - t0), min(best_load, t2 - t1)
    best_nosync, best_sync = min(best_nosync, ts - t0), min(best_sync, t1 - ts)
assert torch.equal(back["model"]["decoder.layers.3.mlp.linear_fc1.weight"],
                   model["decoder.layers.3.mlp.linear_fc1.weight"])
print(json.dumps({"tensors": 3 * len(shapes), "gb": round(nbytes / 1e9, 4),
                  "save_s": round(best_save, 4), "save_nosync_s": round(best_nosync, 4),
                  "sync_s": round(best_sync, 4), "load_s": round(best_load, 4)}))
