"""pretrain_gpt --dry-run against Megatron-LM core_v0.12.1's own parse_args + validate_args
(tests/golden/cli/megatron_cli.json, made by tests/golden/cli/make_goldens.py): exit status,
the error line, every start-up message, the whole arguments dump (values and order), the
micro-batch calculator's lines, report_theoretical_memory's lines and the FLOP count."""
import sys

from cli_common import (PRETRAIN, Checker, dump_line, fix_typos, load_golden, megatron_rc, run,
                        split_stdout)

# Where megatron.c deliberately differs (docs/cli-differences.md): (exit, stderr last line).
DIFFERENT = {
    # MindSpeed's fused-kernel flag is accepted (no effect); the other option stays unknown.
    'arg_unknown': (2, 'pretrain_gpt.py: error: unrecognized arguments: --DDP-impl local'),
    # hccl/mpi are accepted as MPI backends.
    'arg_backend_hccl': (0, None),
}


def expected_dump(golden, case):
    d = dict(golden['baseline_dump'])
    for k in case.get('dump_removed', []):
        d.pop(k, None)
    d.update(case.get('dump_changed', {}))
    lines = [dump_line(k, v) for k, v in d.items()]
    return sorted(lines, key=lambda x: x.lower())  # Megatron's order, computed by Python


def check_case(c, golden, case):
    name = case['name']
    rc, out, err = run([PRETRAIN, '--dry-run'] + case['argv'], world_size=case['world_size'])
    rc = megatron_rc(rc, out, err)  # megatron.c's refusals (exit 1) on a run Megatron accepts
    want_rc = case['exit']
    want_err = fix_typos(case.get('error') or case['stderr_last'])
    if name in DIFFERENT:
        want_rc, want_err = DIFFERENT[name]
    errl = [l for l in err.splitlines() if l.strip() and not l.startswith('UserWarning')]
    c.check(rc == want_rc, '%s: exit %d, Megatron %d (stderr: %s)' % (name, rc, want_rc, err[-300:]))
    if want_rc != 0 and want_err is not None:
        got = errl[-1] if errl else ''
        c.check(got == want_err, '%s: error line\n  got:  %s\n  want: %s' % (name, got, want_err))
    if want_rc != 0 or name in DIFFERENT:
        return
    pre, dump, post = split_stdout(out)
    want_pre = [fix_typos(l) for l in case['stdout_pre']]
    c.check(pre == want_pre, '%s: start-up lines\n  got:  %s\n  want: %s' % (name, pre, want_pre))
    if case.get('system_exit'):
        c.check(dump is None, '%s: no dump after an early exit' % name)
        return
    if not c.check(dump is not None, '%s: no arguments dump' % name):
        return
    got_lines = [l for _, _, l in dump]
    want_lines = expected_dump(golden, case)
    if got_lines != want_lines:
        gs, ws = set(got_lines), set(want_lines)
        c.check(False, '%s: dump differs: extra %s missing %s' % (
            name, sorted(gs - ws)[:6], sorted(ws - gs)[:6]))
    else:
        c.check(True, '')
    text = '\n'.join(post)
    for l in (case.get('microbatches_log', '') + case.get('scheduler_log', '')).splitlines():
        c.check(fix_typos(l) in post, '%s: calculator/scheduler line %r missing' % (name, l))
    if 'memory_report' in case:
        c.check(case['memory_report'].rstrip('\n') in text,
                '%s: memory report\n%s\n  want:\n%s' % (name, text, case['memory_report']))
        c.check(' > padded vocab (size: ' in text and
                'new size: %d)' % case['padded_vocab_size'] in text,
                '%s: padded vocab %d' % (name, case['padded_vocab_size']))
    if 'flops' in case:
        flops = [l.rsplit(': ', 1)[1] for l in post if 'floating-point operations' in l]
        c.check(flops == [repr(float(case['flops']))],
                '%s: FLOPs %s, Megatron %r' % (name, flops, case['flops']))


def main():
    golden = load_golden()
    c = Checker('test_cli_validate')
    for case in golden['cases']:
        check_case(c, golden, case)
    base = golden['cases'][0]
    c.check(base['dump_order'] is not None and
            [dump_line(k, golden['baseline_dump'][k]) for k in base['dump_order']] ==
            expected_dump(golden, base), 'golden baseline order is Python-sorted')
    return c.summary()


if __name__ == '__main__':
    sys.exit(main())
