"""torch.distributed.checkpoint (torch 2) save / load of the same GPT-2-124M-sized state dict
bench_dist.c writes in torch_dist format (fp32 model + Adam exp_avg / exp_avg_sq + step), one
process, the FileSystemWriter with thread_count=2 as Megatron's torch_dist strategy configures
it (fsync'ed, its default); load is in place into preallocated tensors. Best of REPEATS each,
a fresh directory per save.
Usage: bench_dist_torch.py DIR REPEATS (torch >= 2.2); prints JSON."""
import json
import shutil
import sys
import time

import torch
import torch.distributed.checkpoint as dcp

path, reps = sys.argv[1], int(sys.argv[2])
h, f, v, p = 768, 3072, 50304, 1024
layer = [("self_attention.linear_qkv.layer_norm_weight", (h,)),
         ("self_attention.linear_qkv.layer_norm_bias", (h,)),
         ("self_attention.linear_qkv.weight", (3 * h, h)), ("self_attention.linear_qkv.bias", (3 * h,)),
         ("self_attention.linear_proj.weight", (h, h)), ("self_attention.linear_proj.bias", (h,)),
         ("mlp.linear_fc1.layer_norm_weight", (h,)), ("mlp.linear_fc1.layer_norm_bias", (h,)),
         ("mlp.linear_fc1.weight", (f, h)), ("mlp.linear_fc1.bias", (f,)),
         ("mlp.linear_fc2.weight", (h, f)), ("mlp.linear_fc2.bias", (h,))]
shapes = [("embedding.word_embeddings.weight", (v, h)), ("embedding.position_embeddings.weight", (p, h))]
for i in range(12):
    shapes += [("decoder.layers.%d.%s" % (i, n), s) for n, s in layer]
shapes += [("decoder.final_layernorm.weight", (h,)), ("decoder.final_layernorm.bias", (h,))]


def state(fill):
    model = {n: fill(s) for n, s in shapes}
    optim = {n: {"exp_avg": fill(s), "exp_avg_sq": fill(s), "step": torch.tensor(10.0)}
             for n, s in shapes}
    return {"iteration": 10, "model": model, "optimizer": {"state": optim}}


sd = state(lambda s: torch.randn(s))
nbytes = sum(t.numel() * 4 for t in sd["model"].values()) * 3
best_save = best_load = 1e30
for _ in range(reps):
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(path, thread_count=2))
    t1 = time.perf_counter()
    back = state(torch.empty)
    t2 = time.perf_counter()
    dcp.load(back, storage_reader=dcp.FileSystemReader(path))
    t3 = time.perf_counter()
    best_save, best_load = min(best_save, t1 - t0), min(best_load, t3 - t2)
    assert torch.equal(back["model"]["decoder.layers.3.mlp.linear_fc1.weight"],
                       sd["model"]["decoder.layers.3.mlp.linear_fc1.weight"])
shutil.rmtree(path, ignore_errors=True)
print(json.dumps({"tensors": 3 * len(shapes), "gb": round(nbytes / 1e9, 4), "torch": torch.__version__,
                  "save_s": round(best_save, 4), "load_s": round(best_load, 4)}))
