"""The twin's explicit 16-bit mode (fp32 torch ops, rounded to the dtype at each of Megatron's
rounding points: reference/gpt_twin.py Precision) against the same module code run on real
16-bit torch tensors (torch's own CPU bf16 kernels round), both with the fused rounding points
of design16 section 3 that the C engine follows. This proves that the explicit rounding (which
also runs fp16 on Debian's torch 1.13, where Half has no CPU GEMM) is what torch computes in
that dtype.

Both sides round the same exact values, so they differ only where an fp32 accumulation order
differs before a rounding (GEMM blocking, the embedding and GQA gradient sums, softmax/norm
reductions) and the 16-bit result falls on the other side of a rounding boundary: a flip of one
16-bit ulp, which later ops carry along. Measured (torch 2.x, 5 configs, several seeds): bf16
logits/loss typical <= 4e-4, worst <= 7.5e-3 relative to max|want| (0-5% of elements differ),
grads typical <= 8e-4, worst <= 1.2e-2; fp16 (finer ulp, more flips: 10-60% of elements) logits
typical 7e-5 worst 1.1e-3, grads worst 1.8e-3. Bounds: typical 2e-3 (logits, loss) / 5e-3
(grads), worst 2.5e-2 / 4e-2. A wrong rounding point (one left out or added) moves the typical
error of every element to ~1e-3..1e-2 in bf16.

The native side needs torch >= 2: torch 1.13 has no CPU Half GEMM, and its CPU bf16 bmm
accumulates in bf16 (each product and partial sum rounded) while its bf16 layer_norm / GELU
kernels round inside, unlike torch 2's CPU kernels and a GPU's. So the comparison runs under
MC_TORCH2_PYTHON (default $MC_BUILD_DIR/bench-venv/bin/python, bench/setup_torch.sh). Under
Debian's torch 1.13 (always) the explicit mode is checked on its own: every logit, activation and
grad it produces is a 16-bit value, and bf16 / fp16 differ from the fp32 twin by a 16-bit-sized
amount (typical between eps/40 and 1e-1 of max|fp32|, eps = 2^-7 bf16, 2^-10 fp16; a mode that
forgot to round sits near 1e-7).
The seed is random per run and printed; rerun with MC_PARITY_SEED=<seed> [config names]."""
import os
import random
import sys

import numpy as np
import torch

from parity import mixed16
from reference import gpt_twin as T

BOUNDS = {'logits': (2e-3, 2.5e-2), 'loss': (2e-3, 2.5e-2), 'grad': (5e-3, 4e-2)}
NAMES = ['gpt2', 'llama', 'qkv_bias_only', 'softmax_fp32', 'untied']


def dtypes():
    out = ['bf16']
    if int(torch.__version__.split('.')[0]) >= 2:
        out.append('fp16')
    return out


def compare(name, seed, dtype, stats):
    case = mixed16.make_case16(name, seed, dtype)
    native = mixed16.with_precision(case, T.Precision(dtype, native=True))
    want = mixed16.forward_backward16(native)
    got = mixed16.forward_backward16(case)
    bad = []
    tensors = [('logits', got[0], want[0]), ('loss', got[1], want[1])]
    tensors += [('grad.' + n, got[2][n], want[2][n]) for n in want[2]]
    for tname, g, w in tensors:
        g, w = g.numpy(), w.numpy()
        stats.add(mixed16.kind_of(tname.replace('grad.', '')), g, w)
        scale = max(np.abs(w).max(initial=0.0), 1e-30)
        d = np.abs(g - w) / scale
        typ_b, worst_b = BOUNDS['grad' if tname.startswith('grad.') else tname]
        typical, worst = float(np.sqrt((d ** 2).mean())), float(d.max())
        if not (np.all(np.isfinite(g)) and typical <= typ_b and worst <= worst_b):
            bad.append('%s %s: typical %.1e (bound %.0e) worst %.1e (bound %.0e)' % (
                name, tname, typical, typ_b, worst, worst_b))
    return bad


def torch2_python():
    py = os.environ.get('MC_TORCH2_PYTHON') or os.path.join(
        os.environ.get('MC_BUILD_DIR', 'build'), 'bench-venv', 'bin', 'python')
    return py if os.path.exists(py) else None


def self_check(name, seed, dtype):
    """The explicit mode alone: 16-bit values everywhere, and a 16-bit-sized distance from fp32."""
    case = mixed16.make_case16(name, seed, dtype)
    fp32 = mixed16.with_precision(case, T.Precision('fp32'))
    fp32['batch'] = dict(case['batch'])
    hooks = {}
    got = mixed16.forward_backward16(case, hooks=hooks)
    want = mixed16.forward_backward16(fp32)
    bad = []
    tensors = [('logits', got[0]), ('loss', None)] + [('grad.' + n, g) for n, g in got[2].items()]
    tensors += [('hook.' + k, v) for k, v in hooks.items()]
    if len(hooks) < 3:
        bad.append('%s %s: the eval forward recorded %d hook points' % (dtype, name, len(hooks)))
    for tname, t in tensors:
        if t is not None and not torch.equal(t, t.to(T.DTYPES[dtype]).float()):
            bad.append('%s %s %s: not a %s tensor' % (dtype, name, tname, dtype))
    for tname, g, w in [('logits', got[0], want[0]), ('loss', got[1], want[1])] + \
            [('grad.' + n, got[2][n], want[2][n]) for n in want[2]]:
        d = (g.double() - w.double()).abs() / w.double().abs().max().clamp_min(1e-30)
        typical = float(d.pow(2).mean().sqrt())
        low = float(torch.finfo(T.DTYPES[dtype]).eps) / 40
        if not low <= typical <= 1e-1:
            bad.append('%s %s %s: typical distance from fp32 %.1e, expected a 16-bit-sized %.0e..1e-1'
                       % (dtype, name, tname, typical, low))
    return bad


def main():
    names = [a for a in sys.argv[1:] if not a.startswith('-')] or NAMES
    seed = int(os.environ.get('MC_PARITY_SEED', random.SystemRandom().randrange(1 << 31)))
    failed, checked = [], 0
    if int(torch.__version__.split('.')[0]) < 2:
        for dtype in ('bf16', 'fp16'):
            for i, name in enumerate(names):
                for line in self_check(name, seed + i, dtype):
                    print('FAIL %s (MC_PARITY_SEED=%d)' % (line, seed + i))
                    failed.append(line)
                checked += 1
        py = torch2_python()
        if py is None:
            print('test_twin16_native: explicit mode self-check %d configs x dtypes, %d failed; '
                  'explicit vs native skipped: no torch >= 2 (set MC_TORCH2_PYTHON or run '
                  'bench/setup_torch.sh)' % (checked, len(failed)))
            return 1 if failed else 0
        import subprocess
        env = dict(os.environ, MC_PARITY_SEED=str(seed))
        r = subprocess.run([py, os.path.abspath(__file__)] + sys.argv[1:], env=env)
        print('test_twin16_native: explicit mode self-check (torch %s) %d configs x dtypes, %d failed' % (
            torch.__version__, checked, len(failed)))
        return 1 if failed or r.returncode else 0
    for dtype in dtypes():
        stats = mixed16.Stats()
        for i, name in enumerate(names):
            bad = compare(name, seed + i, dtype, stats)
            checked += 1
            for line in bad:
                print('FAIL %s %s (MC_PARITY_SEED=%d)' % (dtype, line, seed + i))
            failed += bad
        for line in stats.lines('%s explicit vs native' % dtype):
            print(line)
    print('test_twin16_native: %d configs x dtypes, %d failed; seed %d; torch %s' % (
        checked, len(failed), seed, torch.__version__))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
