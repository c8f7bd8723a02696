"""LR / weight-decay schedules and the micro-batch calculator against Megatron-LM core_v0.12.1's
OptimizerParamScheduler and num_microbatches_calculator (values recorded by
tests/golden/cli/make_goldens.py from a simulated train loop: update the calculator, step the
scheduler by num_micro x mbs x dp, for up to 200 iterations). Covers every decay style
(constant, linear, cosine, inverse-square-root, WSD exponential/linear/cosine), warmup by
iterations / samples / fraction, lr_warmup_init, min_lr, weight-decay increment styles, and
batch-size ramp-up with and without --decrease-batch-size-if-needed."""
import sys

from cli_common import DRIVER, Checker, fix_typos, load_golden, run


def close(a, b):
    return a == b or abs(a - b) <= 1e-15 * max(abs(a), abs(b))


def main():
    c = Checker('test_cli_schedules')
    styles = set()
    for case in load_golden()['cases']:
        if 'steps' not in case:
            continue
        name = case['name']
        rc, out, err = run([DRIVER, 'sched'] + case['argv'], world_size=case['world_size'])
        if not c.check(rc == 0, '%s: driver failed: %s' % (name, err)):
            continue
        got = [l.split() for l in out.splitlines() if l.startswith('step ')]
        want = case['steps']  # the golden keeps the first 10 (Megatron CI lines) or 200 steps
        c.check(len(got) >= len(want), '%s: %d steps, Megatron %d' % (name, len(got), len(want)))
        got = got[:len(want)]
        bad = 0
        for g, w in zip(got, want):
            it, nmb, consumed, lr, wd = int(g[1]), int(g[2]), int(g[3]), float(g[4]), float(g[5])
            ok = (it, nmb, consumed) == tuple(w[:3]) and close(lr, w[3]) and close(wd, w[4])
            if not ok and bad < 3:
                print('  %s step %d: got %s want %s' % (name, it, g[1:], w))
            bad += not ok
        c.check(bad == 0, '%s: %d of %d steps differ' % (name, bad, len(want)))
        # The scheduler's and ramp-up's log lines (with Megatron's typos fixed).
        lines = out.splitlines()
        for l in (case.get('scheduler_log', '') + case.get('microbatches_log', '')).splitlines():
            c.check(fix_typos(l) in lines, '%s: missing log line %r' % (name, l))
        for l in lines:
            if 'decay style' in l:
                styles.add(l.rsplit(' ', 1)[1])
    c.check(styles >= {'constant', 'linear', 'cosine', 'inverse-square-root', 'WSD'},
            'all decay styles covered: %s' % sorted(styles))
    return c.summary()


if __name__ == '__main__':
    sys.exit(main())
