"""Compare two megatron.c dumps tensor by tensor (docs/formats/dump.md): for every name in both,
the typical (RMS) and worst |a - b| relative to max|b|, and the worst element. Names in only one
file are listed. Exit status 1 when any common tensor's worst relative difference exceeds --rtol
(default 1e-4) or shapes differ.

Usage: /usr/bin/python3 tests/reference/compare_dumps.py A.dump B.dump [--rtol 1e-4] [PREFIX...]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402

from reference import mcdump  # noqa: E402


def main(argv):
    rtol = 1e-4
    if '--rtol' in argv:
        i = argv.index('--rtol')
        rtol = float(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if len(argv) < 2:
        sys.exit(__doc__)
    a, b = mcdump.read(argv[0]), mcdump.read(argv[1])
    prefixes = argv[2:]
    bad = 0
    for name in b:
        if prefixes and not any(name.startswith(p) for p in prefixes):
            continue
        if name not in a:
            print('only in %s: %s' % (argv[1], name))
            continue
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        if x.shape != y.shape:
            print('%-60s shape %s vs %s' % (name, x.shape, y.shape))
            bad += 1
            continue
        d = np.abs(x - y)
        scale = max(np.abs(y).max(initial=0.0), 1e-30)
        worst = d.max(initial=0.0) / scale
        typ = np.sqrt((d ** 2).mean()) / scale if d.size else 0.0
        at = np.unravel_index(np.argmax(d), d.shape) if d.size else ()
        flag = 'DIFF' if worst > rtol else 'ok  '
        bad += worst > rtol
        print('%s %-60s typical %.2e worst %.2e%s' % (
            flag, name, typ, worst, (' at %s: %.9g vs %.9g' % (at, x[at], y[at])) if worst > rtol else ''))
    for name in a:
        if name not in b and (not prefixes or any(name.startswith(p) for p in prefixes)):
            print('only in %s: %s' % (argv[0], name))
    print('compare_dumps: %d tensors over rtol %g' % (bad, rtol))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
