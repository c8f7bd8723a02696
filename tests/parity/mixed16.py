"""Shared pieces of the 16-bit parity tests (bf16 / fp16, issue 11): the twin in a 16-bit mode
(reference/gpt_twin.py Precision), its forward/backward and Megatron's mixed-precision train
step, and an error measure that also counts 16-bit rounding flips."""
import copy

import numpy as np
import torch

from parity import common
from reference import gpt_twin as T

# fp16 runs take a constant loss scale (Megatron's --loss-scale): the per-token dloss is
# ~1/count, and without a scale the deeper fp16 gradients fall into fp16's subnormal range.
LOSS_SCALE = {'bf16': 1.0, 'fp16': 1024.0}
# mc_dtype codes (include/megatron.h) of config.params_dtype in the driver's dump
DTYPE_CODE = {'fp32': 0, 'bf16': 1, 'fp16': 2}


def make_case16(name, seed, dtype, native=False, fused=True):
    """common.make_case with the twin switched to `dtype` (weights rounded to it) and dloss
    multiplied by the dtype's loss scale."""
    case = common.make_case(name, seed)
    case['twin'].set_precision(T.Precision(dtype, native=native, fused=fused))
    case['dtype'] = dtype
    case['loss_scale'] = LOSS_SCALE[dtype]
    case['batch']['dloss'] = case['batch']['dloss'] * case['loss_scale']
    return case


def with_precision(case, prec):
    """A copy of the case whose twin runs with `prec` (same rounded weights)."""
    twin = copy.deepcopy(case['twin'])
    twin.set_precision(prec)
    return dict(case, twin=twin)


def forward_backward16(case, hooks=None):
    """logits [s, b, V] (eval), per-token loss [b, s] and float(param.grad) of
    sum(loss * dloss), all as fp32 tensors. `hooks` (a dict) receives the eval forward's hook
    points (include/megatron/dump.h names: embedding.output, decoder.layers.<i>.output, ...)."""
    twin, b = case['twin'], case['batch']
    twin.zero_grad(set_to_none=True)
    twin.eval()
    twin.hooks = hooks
    with torch.no_grad():
        logits, _ = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'))
    twin.hooks = None
    twin.train()
    twin.set_dropout('philox', step=0)
    _, loss = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'), b['labels'])
    (loss * b['dloss']).sum().backward()
    return logits.detach().float(), loss.detach().float(), twin.param_grads()


def train16(case, steps, lr, wd):
    """Megatron's Float16OptimizerWithFloat16Params train step at one micro-batch, `steps` times:
    fp32 main params = float(16-bit model params); main grads = float(param.grad) / loss scale;
    clip on the main grads; AdamW on the main params; model params = round(main). Returns (loss
    curve, grad norms, final main params)."""
    twin = copy.deepcopy(case['twin'])
    prec, b, scale = twin.prec, case['batch'], case['loss_scale']
    names = [n for n, _ in twin.named_parameters()]
    model = dict(twin.named_parameters())
    holder = torch.nn.Module()  # the main params, in Megatron's two groups
    main = {n: torch.nn.Parameter(model[n].detach().float().clone()) for n in names}
    hp = {k: T.f32(v) for k, v in common.ADAM.items()}
    decay = [main[n] for n in names if not T.no_weight_decay(n, main[n])]
    no_decay = [main[n] for n in names if T.no_weight_decay(n, main[n])]
    opt = torch.optim.AdamW([dict(params=decay, wd_mult=1.0), dict(params=no_decay, wd_mult=0.0)],
                            lr=0.0, betas=(hp['beta1'], hp['beta2']), eps=hp['eps'], weight_decay=0.0)
    del holder
    lr, wd = [T.f32(v) for v in lr], [T.f32(v) for v in wd]
    curve, norms = [], []
    twin.train()
    for it in range(steps):
        twin.set_dropout('philox', step=it)
        twin.zero_grad(set_to_none=True)
        _, loss = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'), b['labels'])
        total = (loss * b['dloss']).sum()
        total.backward()
        curve.append(float(total) / scale)
        grads = twin.param_grads()
        for n in names:
            main[n].grad = grads[n] / scale if scale != 1.0 else grads[n]
        norms.append(T.grad_norm_and_clip([main[n] for n in names], hp['clip_grad']))
        T.set_lr_wd(opt, lr[it], wd[it])
        opt.step()
        with torch.no_grad():
            for n in names:
                model[n].data = main[n].detach().to(prec.dt) if prec.native else \
                    main[n].detach().to(prec.dt).float()
    return curve, norms, {n: main[n].detach().clone() for n in names}


def widen(a):
    """A dump tensor as float32: bf16 arrives as raw uint16 words (mcdump), fp16 as float16."""
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def rounding_to(x, dtype):
    return torch.as_tensor(np.asarray(x, dtype=np.float32)).to(T.DTYPES[dtype]).float().numpy()


class Stats:
    """Per tensor kind: typical (RMS) and worst |got - want| / max|want| and the fraction of
    elements that differ at all (16-bit rounding flips), gathered over configs."""

    def __init__(self):
        self.rows = {}

    def add(self, kind, got, want):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        scale = max(np.abs(want).max(initial=0.0), 1e-30)
        d = np.abs(got - want)
        r = self.rows.setdefault(kind, dict(n=0, sq=0.0, worst=0.0, diff=0))
        r['n'] += d.size
        r['sq'] += float(((d / scale) ** 2).sum())
        r['worst'] = max(r['worst'], float(d.max(initial=0.0) / scale))
        r['diff'] += int((d > 0).sum())
        return float(d.max(initial=0.0) / scale)

    def lines(self, label):
        out = []
        for kind, r in self.rows.items():
            out.append('%s %-10s typical %.1e worst %.1e differing %.2f%% of %d' % (
                label, kind, np.sqrt(r['sq'] / max(r['n'], 1)), r['worst'],
                100.0 * r['diff'] / max(r['n'], 1), r['n']))
        return out


def kind_of(name):
    """Tensor kind for the report: logits, loss, or the grad's parameter kind."""
    if name in ('logits', 'loss'):
        return name
    if name.endswith('.output'):
        return 'layer.out'
    if 'layernorm' in name:
        return 'grad.norm'
    if name.endswith('bias'):
        return 'grad.bias'
    if 'embeddings' in name or 'output_layer' in name:
        return 'grad.embed'
    return 'grad.linear'
