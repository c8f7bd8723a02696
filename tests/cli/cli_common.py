"""Shared helpers for the pretrain_gpt command-line tests: paths, running the binaries, the
Megatron golden file and the table of Megatron typos that megatron.c prints corrected."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))
from mc_test import Checks  # noqa: E402

SRC = os.environ.get('MC_SOURCE_DIR', os.path.join(os.path.dirname(__file__), '..', '..'))
BUILD = os.environ.get('MC_BUILD_DIR', os.path.join(SRC, 'build'))
PRETRAIN = os.path.join(BUILD, 'bin', 'pretrain_gpt')
DRIVER = os.path.join(BUILD, 'tests', 'cli_driver')
GOLDEN = os.path.join(SRC, 'tests', 'golden', 'cli', 'megatron_cli.json')

# Megatron's misspellings, as megatron.c prints them fixed (docs/cli-differences.md).
TYPO_FIXES = [
    (r'sizes: (None|\[[^\]]*\])tensor-model-parallel', r'sizes: \1, tensor-model-parallel'),
    (r'learnig', 'learning'),
    (r'type\.The supported', 'type. The supported'),
    (r'with batchsize increments', 'with batch size increments'),
    (r'incerement', 'increment'),
    (r'(\d)to keep divisiblity', r'\1 to keep divisibility'),
    (r'divisiblity', 'divisibility'),
    (r'timesdata', 'times data'),
    (r'checkpointvalue', 'checkpoint value'),
]


def fix_typos(s):
    for a, b in TYPO_FIXES:
        s = re.sub(a, b, s)
    return s


def load_golden():
    with open(GOLDEN) as f:
        return json.load(f)


def run(cmd, world_size=1, rank=0, extra_env=None):
    env = dict(os.environ)
    env['WORLD_SIZE'] = str(world_size)
    env['RANK'] = str(rank)
    env.pop('LOCAL_RANK', None)
    if extra_env:
        env.update(extra_env)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                       universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


Checker = Checks  # the tests' pass/fail counter: Checker(name).check(...), .summary()


HEADER = '------------------------ arguments ------------------------'
FOOTER = '-------------------- end of arguments ---------------------'


def split_stdout(text):
    """(lines before the arguments dump, [(name, value, line)] of the dump, lines after)."""
    lines = text.split('\n')
    if HEADER not in lines:
        return lines, None, []
    a, b = lines.index(HEADER), lines.index(FOOTER)
    dump = []
    for l in lines[a + 1:b]:
        name = l[2:].split(' ', 1)[0]
        rest = l[2 + len(name) + 1:]
        value = rest.lstrip('.')[1:] if rest.startswith('.') else rest[1:]
        dump.append((name, value, l))
    return lines[:a], dump, lines[b + 1:]


def dump_line(name, value):
    """Megatron's _print_args entry: two spaces, name, dots up to column 48, value."""
    return '  {} {} {}'.format(name, '.' * (48 - len(name)), value)


REFUSAL = 'NotImplementedError: '
REPORTED = 'megatron.c: a real run would stop here: '


def refusals(out, err):
    """(refusal messages on stderr, refusal messages the dry-run report lists on stdout)."""
    on_err = [l[len(REFUSAL):] for l in err.splitlines() if l.startswith(REFUSAL)]
    on_out = [l[len(REPORTED):] for l in out.splitlines() if l.startswith(REPORTED)]
    return on_err, on_out


def megatron_rc(rc, out, err):
    """The exit status Megatron's parse_args + validate_args would give for a --dry-run of
    megatron.c: a dry run that stops only on megatron.c's own refusals (exit 1, stderr nothing
    but the refusal lines, each of them listed by the report) is one Megatron accepts (0)."""
    on_err, on_out = refusals(out, err)
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith('UserWarning')]
    if rc == 1 and on_err and on_err == on_out and len(lines) == len(on_err):
        return 0
    return rc
