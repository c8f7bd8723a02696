#!/usr/bin/env python3
"""--fp16 training with Megatron's dynamic loss scale (initial 2^24 here, hysteresis 2): the first
iterations overflow and are skipped, as in Megatron's own fp16 runs. Checked on the printed
training lines of a tiny GPT (Megatron-LM core_v0.12.1 training.py train_step/training_log,
optimizer.py MixedPrecisionOptimizer.step, grad_scaler.py):
  - a skipped iteration prints no lm loss, grad norm or num zeros, counts 1 skipped and 0 nan
    iterations; params (params norm) stay as they were;
  - the learning-rate scheduler steps only after successful iterations: the learning rates
    printed after successful iterations are the fp32 run's sequence, and a skipped iteration
    prints the previous value;
  - the loss scale printed after each iteration is Megatron's DynamicGradScaler rule applied
    to the observed skip sequence (restated here: hysteresis, back-off 0.5, growth 2 after
    --loss-scale-window clean steps);
  - with --log-interval 3 the skipped iterations of an interval are summed into one line.
The scaler itself is compared with Megatron's grad_scaler.py in tests/optimizer/."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mc_test  # noqa: E402

TINY = ['--num-layers', '2', '--hidden-size', '32', '--num-attention-heads', '4',
        '--seq-length', '32', '--max-position-embeddings', '32', '--micro-batch-size', '2',
        '--global-batch-size', '4', '--lr', '1e-3', '--min-lr', '1e-4',
        '--lr-warmup-iters', '3', '--lr-decay-style', 'linear',
        '--tokenizer-type', 'NullTokenizer', '--vocab-size', '8192', '--mock-data',
        '--eval-iters', '0', '--use-cpu-initialization', '--hidden-dropout', '0',
        '--attention-dropout', '0', '--log-params-norm', '--log-num-zeros-in-grad', '--seed', '7']
ITERS = 24
LINE = re.compile(r'\] iteration +(\d+)/ *\d+ \|.*? learning rate: (\S+) \|(.*)$')


def parse(out):
    rows = []
    for line in out.splitlines():
        m = LINE.search(line)
        if not m:
            continue
        rest = m.group(3)

        def field(name):
            f = re.search(r' %s: +(\S+) \|' % name, rest)
            return f.group(1) if f else None
        rows.append(dict(it=int(m.group(1)), lr=m.group(2), loss=field('lm loss'),
                         scale=float(field('loss scale')), gnorm=field('grad norm'),
                         zeros=field('num zeros'), pnorm=field('params norm'),
                         skipped=int(field('number of skipped iterations')),
                         nan=int(field('number of nan iterations'))))
    return rows


def run(extra):
    p = mc_test.run_pretrain(TINY + extra, exact=False, timeout=300)
    mc_test.check(p.returncode == 0, 'run %s: exit %d %s' % (extra, p.returncode,
                                                            p.stderr[-400:]))
    return parse(p.stdout)


def megatron_scales(skips, initial, hysteresis, window):
    """DynamicGradScaler.update per iteration (grad_scaler.py), the scale after each."""
    scale, growth, hyst, out = initial, 0, hysteresis, []
    for s in skips:
        if s:
            growth, hyst = 0, hyst - 1
            if hyst <= 0:
                scale = max(scale * 0.5, 1.0)
        else:
            growth += 1
            if growth == window:
                growth, hyst, scale = 0, hysteresis, scale * 2.0
        out.append(scale)
    return out


def main():
    common = ['--train-iters', str(ITERS), '--log-interval', '1']
    fp32 = run(common)
    fp16_args = ['--fp16', '--accumulate-allreduce-grads-in-fp32', '--loss-scale-window', '5',
                 '--initial-loss-scale', str(2 ** 24)]
    fp16 = run(common + fp16_args)
    mc_test.check(len(fp16) == ITERS and len(fp32) == ITERS, 'lines: %d %d' % (len(fp16),
                                                                             len(fp32)))
    skips = [r['skipped'] for r in fp16]
    n_skip = sum(skips)
    mc_test.check(n_skip >= 2 and n_skip < ITERS - 5 and skips[0] == 1,
                  'the run starts with overflows and then trains: %s' % skips)
    for r in fp16:
        if r['skipped']:
            mc_test.check(r['loss'] is None and r['gnorm'] is None and r['zeros'] is None,
                          'iteration %d skipped: no loss / grad norm / num zeros: %s' % (
                              r['it'], r))
        else:
            mc_test.check(r['loss'] and r['gnorm'] and r['zeros'] is not None,
                          'iteration %d: loss, grad norm, zeros printed' % r['it'])
        mc_test.check(r['nan'] == 0, 'iteration %d: no nan iteration' % r['it'])
        mc_test.check(r['pnorm'] is not None, 'iteration %d: params norm printed (Megatron '
                      'prints it on skipped iterations too)' % r['it'])
    # params unchanged over skipped iterations; every successful one moves them
    first_ok = skips.index(0)
    pn = [r['pnorm'] for r in fp16]
    mc_test.check(len(set(pn[:first_ok])) == 1, 'params norm constant while skipping: %s' %
                  pn[:first_ok])
    # the first update has warmup's lr 0; the next one moves them
    second_ok = first_ok + 1 + skips[first_ok + 1:].index(0)
    mc_test.check(pn[second_ok] != pn[first_ok], 'a successful step with lr > 0 moves params')
    # scheduler: only successful iterations advance it
    ok_lrs = [r['lr'] for r in fp16 if not r['skipped']]
    mc_test.check(ok_lrs == [r['lr'] for r in fp32][:len(ok_lrs)],
                  'lr after successful iterations = fp32 sequence: %s vs %s' % (
                      ok_lrs[:6], [r['lr'] for r in fp32][:6]))
    for i, r in enumerate(fp16):
        if r['skipped']:
            want = fp16[i - 1]['lr'] if i else '0.000000E+00'
            mc_test.check(r['lr'] == want, 'iteration %d skipped: lr %s stays %s' % (
                r['it'], r['lr'], want))
    want = megatron_scales(skips, 2.0 ** 24, 2, 5)
    mc_test.check([r['scale'] for r in fp16] == want, 'loss scale sequence %s, Megatron rule %s'
                  % ([r['scale'] for r in fp16][:12], want[:12]))
    # --log-interval 3: the interval's skipped iterations summed in one line
    every3 = run(['--train-iters', '12', '--log-interval', '3'] + fp16_args)
    sums = [sum(skips[k:k + 3]) for k in range(0, 12, 3)]
    mc_test.check([r['skipped'] for r in every3] == sums, 'skipped per 3-iteration line %s, '
                  'from the per-iteration run %s' % ([r['skipped'] for r in every3], sums))
    return mc_test.summary('test_fp16_skip', '(%d of %d iterations skipped, scale %g at the '
                           'end)' % (n_skip, ITERS, fp16[-1]['scale']))


if __name__ == '__main__':
    sys.exit(main())
