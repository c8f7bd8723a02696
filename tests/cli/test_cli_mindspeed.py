"""MindSpeed-LLM's launch scripts through pretrain_gpt --dry-run (the second dialect of
issue 4): 28 dense GPT/Llama-family example scripts of Ascend/MindSpeed-LLM, their argument
lists in tests/golden/cli/mindspeed/mindspeed_cli.json (made by make_mindspeed_goldens.py with
Megatron-LM core_v0.12.1's own parse_args + validate_args run live).

Per script: (1) the whole argument list: exit 2 naming the first MindSpeed option (or MindSpeed
value of a Megatron option) that megatron.c refuses, or, when there is none, Megatron's
outcome (with PretrainedFromHF / --tokenizer-name-or-path / --padded-vocab-size, which
megatron.c implements, kept); with MindSpeed values mapped to Megatron's, exit 2 naming the first refused
option; (2) the list without its refused options (accepted fused-kernel flags kept): one
`note:` line per accepted flag, then Megatron's start-up lines and arguments dump, exactly;
(3) the Megatron options alone: Megatron's exit, error line, start-up lines and dump."""
import json
import os
import sys

from cli_common import (PRETRAIN, SRC, Checker, dump_line, fix_typos, megatron_rc, run,
                        split_stdout)

GOLDEN = os.path.join(SRC, 'tests', 'golden', 'cli', 'mindspeed', 'mindspeed_cli.json')
NOTE = {'--use-ascend-coc': 'MindSpeed compute-communication overlap',
        '--coc-fused-kernel': 'MindSpeed compute-communication overlap',
        '--use-mc2': 'MindSpeed matmul+collective fusion',
        '--use-ascend-mc2': 'MindSpeed matmul+collective fusion'}


# a memory layout with the same results (docs/cli-differences.md): its own note
REUSE_NOTE = ("note: --reuse-fp32-param accepted: MindSpeed memory saving (bf16 only): shares "
              "the bf16 weights' and fp32 main weights' storage, 2 bytes a parameter (/ DP with "
              "the distributed optimizer); megatron.c keeps both copies, same results as "
              "MindSpeed with --npu-deterministic (docs/cli-differences.md)")


def note_line(opt):
    if opt == '--reuse-fp32-param':
        return REUSE_NOTE
    what = NOTE.get(opt, 'MindSpeed fused kernel')
    return 'note: %s accepted: %s: same results, no effect in megatron.c' % (opt, what)


def last_error(err):
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith('UserWarning')]
    return lines[-1] if lines else ''


def expected_dump(golden, meg, argv=()):
    """The case's Megatron dump: the baseline with its differences, sorted as Megatron's
    _print_args sorts (by lower-cased name). Megatron ran with PretrainedFromHF mapped to
    HuggingFaceTokenizer + --tokenizer-model; argv that keeps MindSpeed's value dumps it as given
    (and no --tokenizer-model: the directory is in --tokenizer-name-or-path, which, like every
    MindSpeed option, the Megatron dump does not list)."""
    d = dict(golden['baseline_dump'])
    for k in meg['dump_removed']:
        d.pop(k, None)
    d.update(meg['dump_changed'])
    argv = list(argv)
    if '--tokenizer-type' in argv and argv[argv.index('--tokenizer-type') + 1] == 'PretrainedFromHF':
        d['tokenizer_type'], d['tokenizer_model'] = 'PretrainedFromHF', 'None'
    if '--position-embedding-type' in argv and argv[argv.index('--position-embedding-type') + 1] == 'alibi':
        d['position_embedding_type'] = 'alibi'  # left out of Megatron's run (not its choice)
    return sorted(d.items(), key=lambda kv: kv[0].lower())


def check_megatron(c, golden, label, case, argv, notes):
    """argv must give Megatron's outcome for the case, after the given note lines."""
    meg = case['megatron']
    rc, out, err = run([PRETRAIN, '--dry-run'] + argv, world_size=case['world_size'])
    rc = megatron_rc(rc, out, err)  # megatron.c's refusals (exit 1) on a run Megatron accepts
    if not c.check(rc == meg['exit'], '%s: exit %d, Megatron %d (%s)' % (label, rc, meg['exit'],
                                                                       err[-300:])):
        return
    if rc != 0:
        want = fix_typos(meg['error'] or meg['stderr_last'])
        c.check(last_error(err) == want, '%s: error line\n  got:  %s\n  want: %s' % (
            label, last_error(err), want))
        return
    pre, dump, _ = split_stdout(out)
    got_notes = [l for l in pre if l.startswith('note: ')]
    c.check(got_notes == notes, '%s: notes %s, want %s' % (label, got_notes, notes))
    pre = [l for l in pre if not l.startswith('note: ')]
    want_pre = [fix_typos(l) for l in meg['stdout_pre'] if l]
    if dict(expected_dump(golden, meg, argv))['tokenizer_type'] == 'PretrainedFromHF':
        want_pre = [l.replace('with tokenizer_type:HuggingFaceTokenizer',
                              'with tokenizer_type:PretrainedFromHF') for l in want_pre]
    pre = [l for l in pre if l]
    c.check(pre == want_pre, '%s: start-up lines\n  got:  %s\n  want: %s' % (label, pre, want_pre))
    if not c.check(dump is not None and 'dump_changed' in meg, '%s: no arguments dump' % label):
        return
    got = [l for _, _, l in dump]
    want = [dump_line(k, v) for k, v in expected_dump(golden, meg, argv)]
    if not c.check(got == want, '%s: dump differs: extra %s missing %s' % (
            label, sorted(set(got) - set(want))[:6], sorted(set(want) - set(got))[:6])):
        return


def check_case(c, golden, case):
    name, exp = case['name'], case['expect']
    if exp['exit'] == 2:
        rc, out, err = run([PRETRAIN, '--dry-run'] + case['argv'], world_size=case['world_size'])
        c.check(rc == 2 and last_error(err) == exp['error'],
                '%s: whole script: exit %d, %r; want exit 2, %r' % (name, rc, last_error(err),
                                                                    exp['error']))
        c.check('Traceback' not in err and 'unrecognized arguments' not in err,
                '%s: refusal is by name, not a crash or unknown option' % name)
    else:
        check_megatron(c, golden, name + ' (whole script)', case, case['argv'],
                       [note_line(o) for o in exp['accepted']])
    if exp.get('refused'):
        # MindSpeed values mapped to Megatron's: the first refused option is named.
        want = ('pretrain_gpt.py: error: %s is a MindSpeed option that megatron.c does not '
                'support yet' % exp['refused'][0])
        rc, out, err = run([PRETRAIN, '--dry-run'] + case['mapped_argv'],
                           world_size=case['world_size'])
        c.check(rc == 2 and last_error(err) == want,
                '%s: values mapped: exit %d, %r; want exit 2, %r' % (name, rc, last_error(err),
                                                                     want))
    check_megatron(c, golden, name + ' (refused options removed)', case, case['accepted_argv'],
                   [note_line(o) for o in exp['accepted']])
    check_megatron(c, golden, name + ' (Megatron options)', case, case['megatron_argv'], [])


def check_backends(c, golden, case):
    """--distributed-backend hccl / mpi / gloo all mean the MPI backend: the script runs as
    with Megatron's nccl, the dump showing the spelling given."""
    argv = list(case['argv'])
    at = argv.index('--distributed-backend') + 1
    for b in ('hccl', 'mpi', 'gloo'):
        argv[at] = b
        rc, out, err = run([PRETRAIN, '--dry-run'] + argv, world_size=case['world_size'])
        rc = megatron_rc(rc, out, err)
        _, dump, _ = split_stdout(out)
        want = [dump_line(k, b if k == 'distributed_backend' else v)
                for k, v in expected_dump(golden, case['megatron'])]
        c.check(rc == 0 and dump is not None and [l for _, _, l in dump] == want,
                '%s --distributed-backend %s: exit %d (%s)' % (case['name'], b, rc, err[-200:]))


def main():
    with open(GOLDEN) as f:
        golden = json.load(f)
    c = Checker('test_cli_mindspeed')
    c.check(len(golden['cases']) >= 20, 'at least 20 MindSpeed-LLM scripts')
    for case in golden['cases']:
        check_case(c, golden, case)
    check_backends(c, golden, next(x for x in golden['cases']
                                   if x['expect']['exit'] is None and
                                   '--distributed-backend' in x['argv']))
    return c.summary()


if __name__ == '__main__':
    sys.exit(main())
