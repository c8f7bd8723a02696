"""Self-checks of the PyTorch twin's own pieces against independent references (the whole twin is
checked against Megatron's GPTModel by test_twin_megatron.py where Megatron is available):
Philox4x32-10 known answers (Random123's kat_vectors), the dropout keep rate, the fused
bias-GELU forward/backward against autograd of the tanh formula, the vocab cross-entropy against
torch.nn.functional.cross_entropy, RoPE against complex rotation, and GQA attention against a
per-head loop."""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

from reference import gpt_twin as T

torch.set_num_threads(1)

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print('FAIL', what)


def words(ctr, key):
    return ['%08x' % int(w[0]) for w in T.philox4x32_10(*[[c] for c in ctr], key[0] | (key[1] << 32))]


check(words((0, 0, 0, 0), (0, 0)) == ['6627e8d5', 'e169c58d', 'bc57ac4c', '9b00dbd8'], 'philox KAT zero')
check(words((0xffffffff,) * 4, (0xffffffff, 0xffffffff)) == ['408f276d', '41c83b0e', 'a20bc7c6', '6d5451fd'],
      'philox KAT ones')
check(words((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0)) ==
      ['d16cfe09', '94fdcceb', '5001e420', '24126ea1'], 'philox KAT pi')
keep = T.philox_keep(200000, 1234, 3, 7, 0.3).float()
check(abs(keep.mean().item() - 0.7) < 5 * math.sqrt(0.21 / 200000), 'keep rate %.4f' % keep.mean().item())
check(not torch.equal(keep[:1000], T.philox_keep(1000, 1234, 4, 7, 0.3).float()), 'step changes masks')

x = torch.randn(1000, dtype=torch.float64, requires_grad=True)
y = T.BiasGeluTanh.apply(x)
x2 = x.detach().clone().requires_grad_(True)
ref = 0.5 * x2 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x2 + 0.044715 * x2 ** 3)))
check((y - ref).abs().max().item() < 1e-8, 'tanh gelu forward')
g = torch.randn(1000, dtype=torch.float64)
y.backward(g)
ref.backward(g)
check((x.grad - x2.grad).abs().max().item() < 1e-7, 'tanh gelu backward %.2e' % (x.grad - x2.grad).abs().max().item())
check((y - F.gelu(x)).abs().max().item() > 1e-5, 'tanh gelu differs from erf gelu')

logits = torch.randn(7, 3, 50, dtype=torch.float64, requires_grad=True)
target = torch.randint(0, 50, (7, 3))
loss = T.VocabCrossEntropy.apply(logits, target)
l2 = logits.detach().clone().requires_grad_(True)
ref = F.cross_entropy(l2.reshape(-1, 50), target.reshape(-1), reduction='none').view(7, 3)
check((loss - ref).abs().max().item() < 1e-12, 'cross entropy forward')
g = torch.rand(7, 3, dtype=torch.float64)
loss.backward(g)
ref.backward(g)
check((logits.grad - l2.grad).abs().max().item() < 1e-12, 'cross entropy backward')

# RoPE: rotate-half pairs (i, i + d/2), interleaved pairs (2i, 2i + 1), as complex rotations
c = T.derive(dict(hidden_size=32, num_attention_heads=2, position_embedding_type=T.POS_ROPE))
s, d = 5, c['kv_channels']
t = torch.randn(s, 2, 2, d)
inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
ang = torch.arange(s, dtype=torch.float64)[:, None] * inv[None]
rot = torch.polar(torch.ones_like(ang), ang)[:, None, None, :]
for inter in (0, 1):
    c['rotary_interleaved'] = inter
    got = T.apply_rope(t, T.rope_freqs(c, s), inter).double()
    td = t.double()
    if inter:
        z = torch.complex(td[..., 0::2], td[..., 1::2]) * rot
        want = torch.stack((z.real, z.imag), -1).reshape(td.shape)
    else:
        z = torch.complex(td[..., :d // 2], td[..., d // 2:]) * rot
        want = torch.cat((z.real, z.imag), -1)
    check((got - want).abs().max().item() < 1e-5, 'rope interleaved=%d' % inter)

# GQA attention of one layer against a per-head loop over the grouped QKV layout
c = T.derive(dict(hidden_size=24, num_attention_heads=6, num_query_groups=2, kv_channels=5,
                  position_embedding_type=T.POS_NONE, add_bias_linear=0))
att = T.SelfAttention(c, 1, T.Dropout())
torch.nn.init.normal_(att.linear_qkv.weight)
torch.nn.init.normal_(att.linear_proj.weight)
s, b = 6, 2
xin = torch.randn(s, b, 24)
mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None]
out, _ = att(xin, mask, None)
W = att.linear_qkv.weight.view(2, 5, 5, 24)  # [group, (3 q heads, k, v), hn, h]
ctx = torch.zeros(s, b, 6, 5)
for h in range(6):
    grp = h // 3
    q = xin @ W[grp, h % 3].t()
    k = xin @ W[grp, 3].t()
    v = xin @ W[grp, 4].t()
    for bi in range(b):
        sc = (q[:, bi] @ k[:, bi].t()) / math.sqrt(5)
        sc = sc.masked_fill(mask[0, 0], -10000.0)
        ctx[:, bi, h] = torch.softmax(sc, -1) @ v[:, bi]
want = ctx.reshape(s, b, 30) @ att.linear_proj.weight.t()
check((out - want).abs().max().item() < 1e-4 * want.abs().max().item(), 'gqa attention')

# hook points: names and the repeat rule of mc_dump_hook; consistent with the logits
twin = T.GPTTwin(dict(num_layers=2))
T.randomize(twin, torch.Generator().manual_seed(3))
twin.hooks = {}
tok = torch.randint(0, 100, (2, 16))
logits, _ = twin(tok)
twin(tok)
names = ['embedding.output', 'decoder.layers.0.output', 'decoder.layers.1.output',
         'decoder.final_layernorm.output', 'output_layer.output']
check(list(twin.hooks) == names + [n + '@1' for n in names], 'hook names %s' % list(twin.hooks))
check(torch.equal(twin.hooks['output_layer.output'], logits), 'logits hook')
check(twin.hooks['decoder.layers.1.output'].shape == (16, 2, 32), 'hook [s, b, h]')

print('test_twin_reference: %d passed, %d failed' % (passed, failed))
sys.exit(1 if failed else 0)
