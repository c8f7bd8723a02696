"""Parity of the C GPTModel (tests/drivers/gpt_parity_driver.c) with the PyTorch twin of Megatron
core's GPTModel (tests/reference/gpt_twin.py) in fp32: for the GPT-2 and Llama configs and every
variant flag in parity/configs.py, on fresh random weights and a random batch, the logits
[s, b, V], the per-token loss [b, s] and the gradient of every parameter must agree.

Measure (the issue's): |got - want| <= 1e-4 * max|want| per tensor. Typical and worst errors are
printed per tensor (-q or MC_PARITY_VERBOSE=0: failures only).
The seed is random per run and printed; rerun one with MC_PARITY_SEED=<seed> [config names...]."""
import os
import random
import sys

import numpy as np

from parity import common
from parity.configs import CONFIGS, REFUSED
from reference import gpt_twin as T
from reference import mcdump

RTOL = 1e-4


def check_config(name, seed, tmp, verbose, kernels=None):
    case = common.make_case(name, seed)
    label = name + ('' if kernels is None else '/MC_KERNELS=' + kernels)
    rep = common.Report(label, RTOL, verbose)
    inp, out = os.path.join(tmp, name + '.in.dump'), os.path.join(tmp, name + '.out.dump')
    common.write_input(inp, case)
    try:
        got = common.run_driver(inp, out, env_extra=None if kernels is None else {'MC_KERNELS': kernels})
    except RuntimeError as e:
        rep.check('driver', False, str(e))
        return rep
    logits, loss, grads = common.twin_forward_backward(case)
    rep.close('logits', got.get('logits'), logits.numpy()) if 'logits' in got else rep.check('logits', False, 'missing')
    rep.close('loss', got.get('loss'), loss.numpy()) if 'loss' in got else rep.check('loss', False, 'missing')
    names = set()
    for pname, g in grads.items():
        key = 'grad.' + pname
        names.add(key)
        if key not in got:
            rep.check(key, False, 'missing from the C model')
            continue
        rep.close(key, got[key], g.numpy())
    extra = [k for k in got if k.startswith('grad.') and k not in names]
    rep.check('parameter set', not extra, 'C model has parameters the twin lacks: %s' % extra)
    return rep


def check_refused(name, tmp):
    """The driver must exit non-zero with MC_ERR_CONFIG and a message naming the option."""
    cfg, text = REFUSED[name]
    rep = common.Report('refused/' + name, RTOL, False)
    c = dict(T.DEFAULTS)
    c.update(cfg)
    inp, out = os.path.join(tmp, name + '.in.dump'), os.path.join(tmp, name + '.out.dump')
    # config only (derived fields left 0 = "Megatron's default"); no weights needed to refuse
    mcdump.write(inp, {('config.' + k): (np.float32(v) if k in T.FLOAT_FIELDS else np.int64(int(v)))
                       for k, v in c.items()})
    try:
        common.run_driver(inp, out)
        rep.check('refused', False, 'the C model accepted a configuration Megatron refuses')
    except RuntimeError as e:
        msg = str(e)
        rep.check('refused', 'MC_ERR_CONFIG' in msg and text in msg,
                  'expected MC_ERR_CONFIG naming %r, got: %s' % (text, msg.strip()[-300:]))
    return rep


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('-')]
    verbose = '-q' not in sys.argv and os.environ.get('MC_PARITY_VERBOSE') != '0'
    seed = int(os.environ.get('MC_PARITY_SEED', random.SystemRandom().randrange(1 << 31)))
    names = args or list(CONFIGS)
    tmp = common.tmpdir()
    passed = failed = 0
    bad = []
    for i, name in enumerate(names):
        rep = check_config(name, seed + i, tmp, verbose)
        for line in rep.lines:
            print(line)
        passed += rep.passed
        failed += rep.failed
        if rep.failed:
            bad.append('%s (MC_PARITY_SEED=%d)' % (name, seed + i))
    if not args:
        # the scalar reference kernels and the AVX2 table too (the default is the fastest table
        # the CPU supports; MC_KERNELS=avx2 falls back to it where AVX2 + FMA cannot run)
        for k, kernels in enumerate(['ref', 'avx2']):
            for i, name in enumerate(['gpt2', 'llama']):
                s = seed + 100 * (k + 1) + i
                rep = check_config(name, s, tmp, verbose, kernels=kernels)
                for line in rep.lines:
                    print(line)
                passed += rep.passed
                failed += rep.failed
                if rep.failed:
                    bad.append('%s/%s (MC_PARITY_SEED=%d)' % (name, kernels, s))
        for name in REFUSED:
            rep = check_refused(name, tmp)
            for line in rep.lines:
                print(line)
            passed += rep.passed
            failed += rep.failed
            if rep.failed:
                bad.append('refused/' + name)
    print('test_gpt_parity: %d passed, %d failed; seed %d; %d configs%s' % (
        passed, failed, seed, len(names), ('; failing: ' + ', '.join(bad)) if bad else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
