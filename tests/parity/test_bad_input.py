"""Bad input to the C model through gpt_parity_driver gets a clear error, never a crash:
micro-batches larger than configured, token / label / position ids outside their tables
(Megatron would index out of range or assert on the GPU), a parameter of the wrong shape or
missing, and a damaged dump. Each must exit with status 1 and a message naming the tensor or
option (a signal, e.g. a segfault, fails)."""
import os
import sys

import numpy as np
import torch

from parity import common
from reference import mcdump


def cat(b, dim):
    for k in ('tokens', 'labels', 'dloss'):
        b[k] = torch.cat([b[k], b[k].narrow(dim, 0, 1)], dim)


CASES = [
    # name, batch/input mutation, text the message must contain
    ('micro-batch above --micro-batch-size', lambda b, t: cat(b, 0), 'micro-batch-size'),
    ('sequence above --seq-length', lambda b, t: cat(b, 1), 'seq-length'),
    ('token id = padded vocab', lambda b, t: b['tokens'].__setitem__((1, 3), 128), 'tokens'),
    ('negative token id', lambda b, t: b['tokens'].__setitem__((0, 0), -5), 'tokens'),
    ('label = padded vocab', lambda b, t: b['labels'].__setitem__((0, 2), 128), 'labels'),
    ('position id = max positions', lambda b, t: b.__setitem__('position_ids', torch.full_like(b['tokens'], 32)),
     'position_ids'),
]


def run(tmp, name, case, mutate_dump=None):
    inp, out = os.path.join(tmp, 'bad.in.dump'), os.path.join(tmp, 'bad.out.dump')
    common.write_input(inp, case)
    if mutate_dump:
        mutate_dump(inp)
    try:
        common.run_driver(inp, out)
        return None
    except RuntimeError as e:
        return str(e)


def main():
    tmp = common.tmpdir()
    rep = common.Report('bad-input', 0, False)
    for name, mutate, text in CASES:
        case = common.make_case('gpt2', 1)
        mutate(case['batch'], case['twin'])
        msg = run(tmp, name, case)
        rep.check(name, msg is not None and 'rc 1)' in msg and text in msg,
                  'expected exit 1 naming %r, got: %s' % (text, (msg or 'accepted').strip()[-300:]))

    def wrong_shape(path):
        d = mcdump.read(path)
        d['param.decoder.layers.0.mlp.linear_fc1.weight'] = np.zeros((3, 3), np.float32)
        mcdump.write(path, d)

    def missing(path):
        d = mcdump.read(path)
        del d['param.decoder.final_layernorm.bias']
        mcdump.write(path, d)

    def unknown(path):
        d = mcdump.read(path)
        d['param.decoder.layers.7.mlp.linear_fc1.weight'] = np.zeros((3, 3), np.float32)
        mcdump.write(path, d)

    def truncated(path):
        raw = open(path, 'rb').read()
        open(path, 'wb').write(raw[:len(raw) // 2])

    for name, mut, text in [('parameter of the wrong shape', wrong_shape, 'linear_fc1.weight'),
                            ('missing parameter', missing, 'final_layernorm.bias'),
                            ('parameter the model lacks', unknown, 'layers.7'),
                            ('truncated dump', truncated, 'MC_ERR_FORMAT')]:
        msg = run(tmp, name, common.make_case('gpt2', 2), mut)
        rep.check(name, msg is not None and 'rc 1)' in msg and text in msg,
                  'expected exit 1 naming %r, got: %s' % (text, (msg or 'accepted').strip()[-300:]))
    for line in rep.lines:
        print(line)
    print('test_bad_input: %d passed, %d failed' % (rep.passed, rep.failed))
    return 1 if rep.failed else 0


if __name__ == '__main__':
    sys.exit(main())
