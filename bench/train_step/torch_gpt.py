"""PyTorch peer for bench/train_step: the same GPT as bench_train_step (Megatron's default GPT:
learned positions, LayerNorm, tanh-GELU, biases, tied output, no dropout) written the way a
PyTorch user would write it at its best (fused scaled_dot_product_attention where the installed
torch has it), timed for one full step (forward + backward + AdamW).

usage: torch_gpt.py LAYERS HIDDEN HEADS VOCAB SEQ BATCH ITERS WARMUP THREADS
prints: "pytorch <version> tokens_per_s=<x> step_ms=<y> cpu_ms_per_step=<z>"
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def attention(self, x):
        s, b, h = x.shape
        hn = h // self.heads
        q, k, v = self.qkv(x).view(s, b, self.heads, 3 * hn).split(hn, dim=-1)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, heads, s, hn]
        if hasattr(F, "scaled_dot_product_attention"):
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0: the classic masked softmax
            scores = q @ k.transpose(-1, -2) / math.sqrt(hn)
            mask = torch.ones(s, s, dtype=torch.bool).triu(1)
            ctx = scores.masked_fill(mask, -10000.0).softmax(-1) @ v
        return self.proj(ctx.permute(2, 0, 1, 3).reshape(s, b, h))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, heads, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)

    def forward(self, tokens, labels):
        b, s = tokens.shape
        x = (self.wte(tokens) + self.wpe(torch.arange(s))).transpose(0, 1)  # [s, b, h]
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(s * b, -1), labels.t().reshape(-1))


def main():
    layers, h, heads, vocab, seq, batch, iters, warmup, threads = map(int, sys.argv[1:10])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = GPT(layers, h, heads, vocab, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tokens = torch.randint(0, vocab, (batch, seq))
    labels = torch.randint(0, vocab, (batch, seq))
    for it in range(warmup + iters):
        if it == warmup:
            t0 = time.perf_counter()
            c0 = time.process_time()  # every thread's CPU time, beside the wall time
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    dt = (time.perf_counter() - t0) / iters
    cpu = (time.process_time() - c0) / iters
    print(f"pytorch {torch.__version__} tokens_per_s={batch * seq / dt:.1f} step_ms={dt * 1e3:.2f} "
          f"cpu_ms_per_step={cpu * 1e3:.2f}")


if __name__ == "__main__":
    main()
