"""PyTorch fp32 baseline for bench/gpt_bench.c: a GPT-2 124M-shaped model (pre-norm, tanh
GELU, tied embeddings, vocab 50304) timed for forward + backward (+ AdamW) on b x s tokens.
Usage: /usr/bin/python3 bench/torch_gpt_bench.py B S [iters]"""
import os
import sys
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.proj = torch.nn.Linear(h, h)
        self.ln2 = torch.nn.LayerNorm(h)
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h)

    def forward(self, x, mask):
        s, b, h = x.shape
        hn = h // self.heads
        q, k, v = self.qkv(self.ln1(x)).view(s, b, self.heads, 3 * hn).split(hn, dim=-1)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / hn ** 0.5
        p = torch.softmax(scores.masked_fill(mask, -10000.0), dim=-1)
        ctx = (p @ v).permute(2, 0, 1, 3).reshape(s, b, h)
        x = x + self.proj(ctx)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, L=12, h=768, heads=12, V=50304, maxpos=1024):
        super().__init__()
        self.wte = torch.nn.Embedding(V, h)
        self.wpe = torch.nn.Embedding(maxpos, h)
        self.blocks = torch.nn.ModuleList(Block(h, heads) for _ in range(L))
        self.lnf = torch.nn.LayerNorm(h)

    def forward(self, tok, lab):
        b, s = tok.shape
        x = (self.wte(tok) + self.wpe(torch.arange(s))).transpose(0, 1)
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        for blk in self.blocks:
            x = blk(x, mask)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.t().reshape(-1))


def main():
    b, s = int(sys.argv[1]), int(sys.argv[2])
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tok = torch.randint(0, 50257, (b, s))
    lab = torch.randint(0, 50257, (b, s))
    tf = tb = to = 0.0
    for it in range(iters + 1):
        t0 = time.perf_counter()
        loss = model(tok, lab)
        t1 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        if it > 0:
            tf += t1 - t0
            tb += t2 - t1
            to += t3 - t2
    print(f"torch gpt2-124M b={b} s={s} threads={torch.get_num_threads()}: forward {1e3*tf/iters:.1f} ms, "
          f"backward {1e3*tb/iters:.1f} ms, adamw {1e3*to/iters:.1f} ms, fwd+bwd {1e3*(tf+tb)/iters:.1f} ms, "
          f"{b*s*iters/(tf+tb):.0f} tokens/s (fwd+bwd)")


if __name__ == "__main__":
    main()
