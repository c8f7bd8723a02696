"""PyTorch peer for bench/mixed: bench/train_step/torch_gpt.py's GPT (the same model as
bench_mixed_step) trained the way a PyTorch user gets the best bf16 speed on a CPU: fp32 master
weights and AdamW, the forward under torch.autocast("cpu", dtype=torch.bfloat16) (matmuls and
linears in bf16, reductions in fp32), backward outside it. Needs torch >= 1.10; best with 2.x.

usage: torch_autocast.py DTYPE LAYERS HIDDEN HEADS VOCAB SEQ BATCH ITERS WARMUP THREADS
  DTYPE: float32 (no autocast) or bfloat16
prints: "pytorch <version> <dtype> tokens_per_s=<x> step_ms=<y>"
"""
import contextlib
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "train_step"))
from torch_gpt import GPT  # noqa: E402


def main():
    dtype = sys.argv[1]
    layers, h, heads, vocab, seq, batch, iters, warmup, threads = map(int, sys.argv[2:11])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(layers, h, heads, vocab, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tokens = torch.randint(0, vocab, (batch, seq))
    labels = torch.randint(0, vocab, (batch, seq))
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if dtype == "bfloat16" \
        else contextlib.nullcontext
    for it in range(warmup + iters):
        if it == warmup:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = model(tokens, labels)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dt = (time.perf_counter() - t0) / iters
    print(f"pytorch {torch.__version__} {dtype} tokens_per_s={batch * seq / dt:.1f} "
          f"step_ms={dt * 1e3:.2f}")


if __name__ == "__main__":
    main()
