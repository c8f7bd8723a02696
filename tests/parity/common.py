"""Shared pieces of the parity tests: random cases (fresh twin weights + batch), the dump
protocol of tests/drivers/gpt_parity_driver.c, running the driver, and error reports."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from parity.configs import CONFIGS, CONFIGS16
from reference import gpt_twin as T
from reference import mcdump

# The twin's tensors are tiny: torch's intra-op threads only add synchronisation, which on a
# loaded 2-core machine made a test 8x slower (50 s vs 6 s). The C driver keeps OMP_NUM_THREADS.
torch.set_num_threads(1)

# what travels to the driver: every struct mc_gpt_config field the twin knows, derived values
# included, so both sides build exactly the same model
CONFIG_FIELDS = [k for k in T.DEFAULTS]

ADAM = dict(beta1=0.9, beta2=0.95, eps=1e-8, clip_grad=1.0)


def make_case(name, seed):
    """Twin with fresh random weights and a random batch for CONFIGS[name]."""
    cfg, opts = CONFIGS[name] if name in CONFIGS else CONFIGS16[name]
    gen = torch.Generator().manual_seed(seed)
    twin = T.GPTTwin(cfg)
    T.randomize(twin, gen)
    c = twin.c
    b, s = opts.get('b', c['micro_batch_size']), opts.get('s', c['seq_length'])
    tokens = torch.randint(0, c['vocab_size'], (b, s), generator=gen)
    labels = torch.randint(0, c['vocab_size'], (b, s), generator=gen)
    loss_mask = (torch.rand(b, s, generator=gen) > 0.2).float()
    loss_mask[0, 0] = 1.0
    batch = dict(tokens=tokens, labels=labels, dloss=loss_mask / loss_mask.sum())
    if opts.get('mask'):
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)[None, None].repeat(b, 1, 1, 1)
        extra = torch.rand(b, 1, s, s, generator=gen) < 0.25
        mask = causal | extra
        mask[0, 0, 3, :] = True  # a fully masked row: Megatron's -10000 fill gives uniform probs
        batch['attention_mask'] = mask
    if opts.get('pos'):
        batch['position_ids'] = torch.randint(0, c['max_position_embeddings'], (b, s), generator=gen)
    return dict(name=name, seed=seed, twin=twin, batch=batch)


def write_input(path, case, steps=0, lr=None, wd=None, sgd_momentum=None, extra=None):
    """The driver's input dump; `extra` adds entries (e.g. config.params_dtype)."""
    c = case['twin'].c
    t = dict(extra or {})
    for k in CONFIG_FIELDS:
        v = c[k]
        t['config.' + k] = np.float32(v) if k in T.FLOAT_FIELDS else np.int64(int(v))
    for name, p in case['twin'].named_parameters():
        t['param.' + name] = p.detach().numpy().astype(np.float32)
    b = case['batch']
    t['tokens'] = b['tokens'].numpy()
    t['labels'] = b['labels'].numpy()
    t['dloss'] = b['dloss'].numpy().astype(np.float32)
    if 'attention_mask' in b:
        t['attention_mask'] = b['attention_mask'].numpy().astype(np.uint8)
    if 'position_ids' in b:
        t['position_ids'] = b['position_ids'].numpy()
    t['opt.steps'] = np.int64(steps)
    if steps:
        t['opt.lr'] = np.asarray(lr, dtype=np.float32)
        t['opt.weight_decay'] = np.asarray(wd, dtype=np.float32)
    for k, v in ADAM.items():
        t['opt.' + k] = np.float32(v)
    if sgd_momentum is not None:
        t['opt.optimizer'] = np.int64(1)
        t['opt.sgd_momentum'] = np.float32(sgd_momentum)
    mcdump.write(path, t)


def driver_path():
    build = os.environ.get('MC_BUILD_DIR', os.path.join(os.environ.get('MC_SOURCE_DIR', '.'), 'build'))
    return os.path.join(build, 'tests', 'gpt_parity_driver')


def driver_command():
    """The C driver, or MC_PARITY_DRIVER (a command line, e.g. the twin's stand-in
    "/usr/bin/python3 tests/reference/twin_driver.py") to check the harness itself."""
    if os.environ.get('MC_PARITY_DRIVER'):
        return os.environ['MC_PARITY_DRIVER'].split()
    exe = driver_path()
    if not os.path.exists(exe):
        sys.exit('FAIL: %s is not built (the C GPTModel engine is missing from this build)' % exe)
    return [exe]


def run_driver(in_path, out_path, threads=None, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    if threads is not None:
        env['OMP_NUM_THREADS'] = str(threads)
    r = subprocess.run(driver_command() + [in_path, out_path], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError('driver failed (rc %d): %s%s' % (r.returncode, r.stdout, r.stderr))
    return mcdump.read(out_path)


def twin_forward_backward(case):
    """What the driver's first two passes compute, from the twin: logits [s,b,V] (eval), per-token
    loss [b,s] and parameter grads of sum(loss * dloss)."""
    twin, b = case['twin'], case['batch']
    twin.zero_grad(set_to_none=True)
    twin.eval()
    with torch.no_grad():
        logits, _ = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'))
    # the driver's gradient pass: training forward at mc_gpt_set_step(0), first micro-batch
    twin.train()
    twin.set_dropout('philox', step=0)
    _, loss = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'), b['labels'])
    (loss * b['dloss']).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in twin.named_parameters()}
    return logits.detach(), loss.detach(), grads


def twin_train(case, steps, lr, wd, sgd_momentum=None):
    """Megatron's train_step at one micro-batch, `steps` times: returns (loss curve, grad norms,
    final params). Runs on a copy of the twin's weights."""
    import copy
    twin = copy.deepcopy(case['twin'])
    b = case['batch']
    params = list(twin.parameters())
    # hyper-parameters as the driver sees them (f32 in the dump)
    hp = {k: T.f32(v) for k, v in ADAM.items()}
    lr, wd = [T.f32(v) for v in lr], [T.f32(v) for v in wd]
    if sgd_momentum is None:
        opt = T.make_adamw(twin, hp['beta1'], hp['beta2'], hp['eps'])
    else:
        opt = T.make_sgd(twin, T.f32(sgd_momentum))
    curve, norms = [], []
    twin.train()
    for it in range(steps):
        twin.set_dropout('philox', step=it)  # the driver calls mc_gpt_set_step(it)
        opt.zero_grad(set_to_none=False)
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        _, loss = twin(b['tokens'], b.get('position_ids'), b.get('attention_mask'), b['labels'])
        total = (loss * b['dloss']).sum()
        total.backward()
        curve.append(float(total))
        norms.append(T.grad_norm_and_clip(params, hp['clip_grad']))
        T.set_lr_wd(opt, lr[it], wd[it])
        opt.step()
    return curve, norms, {n: p.detach().clone() for n, p in twin.named_parameters()}


class Report:
    """Collects per-tensor errors: |got - want| <= rtol * max|want| (the issue's max-relative
    measure); prints typical (RMS) and worst error relative to max|want| for each tensor."""

    def __init__(self, label, rtol, verbose):
        self.label, self.rtol, self.verbose = label, rtol, verbose
        self.passed, self.failed, self.lines = 0, 0, []

    def close(self, name, got, want, rtol=None):
        rtol = self.rtol if rtol is None else rtol
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        if got.shape != want.shape:
            self.failed += 1
            self.lines.append('FAIL %s %s: shape %s, want %s' % (self.label, name, got.shape, want.shape))
            return False
        scale = max(np.abs(want).max(initial=0.0), 1e-30)
        d = np.abs(got - want)
        worst = d.max(initial=0.0) / scale
        typical = np.sqrt((d ** 2).mean()) / scale if d.size else 0.0
        ok = bool(np.all(np.isfinite(got))) and worst <= rtol
        line = '%s %s %-60s typical %.1e worst %.1e (rtol %.0e)' % (
            'ok  ' if ok else 'FAIL', self.label, name, typical, worst, rtol)
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            i = np.unravel_index(np.argmax(d), d.shape) if d.size else ()
            line += ' at %s got %.9g want %.9g' % (i, got[i], want[i])
        if self.verbose or not ok:
            self.lines.append(line)
        return ok

    def check(self, name, cond, detail=''):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            self.lines.append('FAIL %s %s %s' % (self.label, name, detail))


def tmpdir():
    return tempfile.mkdtemp(prefix='mc_parity_')


def key_bias_mask(c):
    """Boolean mask of the key-bias rows of linear_qkv.bias. Adding a constant to every key
    shifts each score row by q.b_k, which softmax ignores: their gradient is exactly zero in
    exact arithmetic and pure rounding noise (~1e-9) in fp32, on Megatron as here."""
    np_, ng, hn = c['num_attention_heads'], c['num_query_groups'], c['kv_channels']
    per = (np_ // ng + 2) * hn
    m = np.zeros(ng * per, dtype=bool)
    for g in range(ng):
        m[g * per + np_ // ng * hn: g * per + (np_ // ng + 1) * hn] = True
    return m
