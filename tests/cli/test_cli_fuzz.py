"""Robustness: pretrain_gpt --dry-run on random command lines built from its own option list
(random subsets of options, values that are valid, out of range, of the wrong type or missing).
Every run must end with exit status 0, 1 or 2 and a message, never a crash or an abort."""
import random
import re
import sys

from cli_common import PRETRAIN, Checker, run

BASE = ['--num-layers', '4', '--hidden-size', '64', '--num-attention-heads', '4',
        '--seq-length', '128', '--max-position-embeddings', '128', '--micro-batch-size', '2',
        '--train-iters', '20', '--lr', '1e-3']
VALUES = ['0', '0', '-2', '1', '2', '3', '4', '8', '-1', '64', '0.5', '1e-3', 'x', '', 'None', 'inf',
          'nan', '1_000', '([0]+[1]*3)', 'True']


def options():
    rc, out, err = run([PRETRAIN, '--help'])
    opts = []
    for l in out.splitlines():
        m = re.match(r'  (--[\w-]+)( (\{[^}]*\}|[A-Z_0-9]+))?', l)
        if m and m.group(1) != '--help':
            choices = m.group(3)[1:-1].split(',') if m.group(3) and m.group(3).startswith('{') else None
            opts.append((m.group(1), m.group(2) is not None, choices))
    return opts


def main():
    c = Checker('test_cli_fuzz')
    opts = options()
    rnd = random.Random(11)
    bad = 0
    for trial in range(400):
        argv = [] if trial % 3 == 0 else list(BASE)
        for _ in range(rnd.randint(1, 6)):
            name, takes, choices = rnd.choice(opts)
            argv.append(name)
            if takes and rnd.random() < 0.95:
                argv.append(rnd.choice(choices) if choices and rnd.random() < 0.7 else rnd.choice(VALUES))
        ws = rnd.choice([1, 1, 2, 4, 8, 6])
        rc, out, err = run([PRETRAIN, '--dry-run'] + argv, world_size=ws)
        ok = rc in (0, 1, 2) and 'assertion failed' not in err and 'runtime error' not in err \
            and 'Sanitizer' not in err and (rc == 0 or err.strip())
        if not ok:
            bad += 1
            if bad <= 5:
                print('  rc %d for %s\n  %s' % (rc, ' '.join(argv), err[-400:]))
    c.check(bad == 0, '%d of 400 random command lines crashed' % bad)
    return c.summary()


if __name__ == '__main__':
    sys.exit(main())
