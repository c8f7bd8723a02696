#!/usr/bin/env python3
"""Regenerates tests/golden/cli/mindspeed/mindspeed_cli.json: the pretrain_gpt argument lists
of MindSpeed-LLM's dense GPT/Llama-family pretraining example scripts, and what Megatron-LM
core_v0.12.1's own parse_args + validate_args make of their Megatron part.

Usage: MINDSPEED_LLM_GIT=<git dir of Ascend/MindSpeed-LLM> \\
       MEGATRON_ROOT=/work/ref/Megatron-LM /usr/bin/python3 tests/golden/cli/mindspeed/make_mindspeed_goldens.py

Each script is read from the MindSpeed-LLM git history (COMMIT below), its placeholder paths
("your data path" ...) are replaced by /path/to/<VAR>, and it is run by bash with torchrun,
python, tee, mkdir and source replaced by shell functions, so that only the expanded argument
list of pretrain_gpt.py (and the script's WORLD_SIZE, else NPUS_PER_NODE * NNODES) comes out. Nothing of
MindSpeed-LLM is stored but those argument lists (configuration data). The Megatron outcome
comes from make_goldens.run_case (Megatron's Python, live) on the list with the options
Megatron's parser does not know removed, and MindSpeed-only tokenizer types mapped
(PretrainedFromHF -> HuggingFaceTokenizer with --tokenizer-model = --tokenizer-name-or-path)."""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import make_goldens as MG  # noqa: E402  (Megatron's parser, live)

# The CP > 1 rule asks the GPU architecture; on this CPU answer "Hopper" (before Blackwell, so
# the CUDA_DEVICE_MAX_CONNECTIONS=1 that run_case sets is what is checked).
MG.MA.get_device_arch_version = lambda: 9

GIT = os.environ.get('MINDSPEED_LLM_GIT', '/work/.mirror/Ascend+MindSpeed-LLM/repo')
COMMIT = 'dfe2e3b0040acc4beb81d7cf48553ff14a8a7390'  # MindSpeed-LLM master, 2026-02-03
SCRIPTS = '''
examples/mcore/llama2/pretrain_llama2_7b_ptd.sh
examples/mcore/llama2/pretrain_llama2_13b_ptd.sh
examples/mcore/llama2/pretrain_llama2_34B_ptd_16p.sh
examples/mcore/llama2/pretrain_llama2_70b_ptd.sh
examples/mcore/llama2/pretrain_llama2_7b_pack_ptd.sh
examples/mcore/llama3/pretrain_llama3_8b_ptd.sh
examples/mcore/llama3/pretrain_llama3_70b_ptd.sh
examples/mcore/llama31/pretrain_llama31_8b_8k_ptd.sh
examples/mcore/llama31/pretrain_llama31_70b_8k_ptd.sh
examples/mcore/llama31/pretrain_llama31_8b_128k_ptd.sh
examples/mcore/llama32/pretrain_llama32_1b_8k_ptd.sh
examples/mcore/llama32/pretrain_llama32_3b_8k_ptd.sh
examples/mcore/llama33/pretrain_llama33_70b_8k_ptd.sh
examples/mcore/qwen25/pretrain_qwen25_0point5_32k_ptd.sh
examples/mcore/qwen25/pretrain_qwen25_1point5b_32k_ptd.sh
examples/mcore/qwen25/pretrain_qwen25_3b_32k_ptd.sh
examples/mcore/qwen25/pretrain_qwen25_7b_32k_ptd.sh
examples/mcore/qwen25/pretrain_qwen25_14b_32k_ptd.sh
examples/mcore/qwen25/pretrain_qwen25_32b_32k_ptd.sh
examples/mcore/qwen3/pretrain_qwen3_0point6b_4K_ptd.sh
examples/mcore/qwen3/pretrain_qwen3_1point7b_4K_ptd.sh
examples/mcore/qwen3/pretrain_qwen3_8b_4K_ptd.sh
examples/mcore/qwen3/pretrain_qwen3_32b_4K_ptd.sh
examples/mcore/internlm25/pretrain_internlm25_7b_32k_ptd.sh
examples/mcore/baichuan2/pretrain_baichuan2_13b_ptd.sh
examples/mcore/gemma2/pretrain_gemma2_9b_ptd.sh
examples/mcore/phi35/pretrain_phi35_mini_A3_ptd.sh
examples/mcore/magistral/pretrain_magistral_small_24b_A3_ptd.sh
'''.split()
# The legacy (non-mcore) examples, as they were just before their removal.
LEGACY_COMMIT = '330ce601683b20c51aa26827aeb98b24f336bcc3'  # 2025-07-12
LEGACY_SCRIPTS = '''
examples/legacy/llama2/pretrain_llama2_7b_ptd.sh
examples/legacy/llama2/pretrain_llama2_13B_ptd_8p.sh
examples/legacy/llama2/pretrain_llama2_70b_ptd.sh
examples/legacy/llama3/pretrain_llama3_8b_ptd.sh
examples/legacy/llama/pretrain_llama_7b_ptd.sh
examples/legacy/mistral/pretrain_mistral_7b_ptd.sh
examples/legacy/qwen/pretrain_qwen_7b_ptd.sh
examples/legacy/qwen15/pretrain_qwen15_7b_ptd.sh
examples/legacy/gemma/pretrain_gemma_7b_ptd.sh
examples/legacy/gpt3/pretrain_gpt3_15B_ptd.sh
examples/legacy/codellama/pretrain_codellama_34b_ptd_16p.sh
examples/legacy/yi/pretrain_yi_34b_ptd_16p.sh
examples/legacy/aquila2/pretrain_aquila2_7b_ptd.sh
'''.split()

# What megatron.c makes of MindSpeed-only options (docs/cli-differences.md): fused-kernel and
# compute-communication-overlap flags ask for what megatron.c always computes, so they are
# accepted with a one-line note; every other MindSpeed option changes the model or needs a
# feature megatron.c lacks and is refused by name. MindSpeed-LLM values of Megatron options are
# refused by name too; for Megatron's run they are mapped (None: the option is left out).
ACCEPTED = {'--use-fused-rmsnorm', '--use-fused-swiglu', '--use-fused-rotary-pos-emb',
            '--use-fused-ring-attention-update', '--use-mc2', '--use-ascend-mc2',
            '--use-fused-moe-token-permute-and-unpermute', '--use-ascend-coc',
            '--coc-fused-kernel', '--reuse-fp32-param'}
# MindSpeed-LLM options and values megatron.c implements (no note, not refused).
IMPLEMENTED = {'--tokenizer-name-or-path', '--padded-vocab-size', '--rope-scaling-type',
               '--low-freq-factor', '--high-freq-factor', '--original-max-position-embeddings',
               '--num-layer-list', '--sliding-window', '--square-alibi-mask', '--fill-neg-inf'}
IMPLEMENTED_VALUES = {('--tokenizer-type', 'PretrainedFromHF'), ('--position-embedding-type', 'alibi')}
VALUE_MAP = {('--tokenizer-type', 'PretrainedFromHF'): 'HuggingFaceTokenizer',
             ('--tokenizer-type', 'MagistralTokenizer'): 'HuggingFaceTokenizer',
             ('--position-embedding-type', 'alibi'): None}

STUBS = r'''
__emit() { printf '%s\0' "$@" > "$MS_OUT"; printf '%s\0' "${WORLD_SIZE:-$((${NPUS_PER_NODE:-1} * ${NNODES:-1}))}" 1 > "$MS_OUT.ws"; }
torchrun() { __emit "$@"; }
python() { __emit "$@"; }
python3() { __emit "$@"; }
tee() { cat > /dev/null; }
mkdir() { :; }
source() { :; }
'''


def extract(commit, path):
    """(pretrain_gpt argv, world size) of one example script."""
    text = subprocess.run(['git', '-C', GIT, 'show', commit + ':' + path], check=True,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout
    # Placeholders: "your data path", "vocab file for gpt" (quoted words, no expansion).
    text = re.sub(r'^(\w+)=(["\']?your[^\n]*|"[^"$\n]* [^"$\n]*")$', r'\1=/path/to/\1', text,
                  flags=re.M)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'argv')
        subprocess.run(['bash', '-c', STUBS + text], cwd=d, check=True,
                       env={'PATH': '/usr/bin:/bin', 'MS_OUT': out})
        argv = open(out).read().split('\0')[:-1]
        npus, nnodes = open(out + '.ws').read().split('\0')[:2]
    i = next(k for k, a in enumerate(argv) if a.endswith('.py'))
    return argv[i + 1:], int(npus) * int(nnodes)


def megatron_options():
    """Every option string of Megatron's pretrain_gpt parser."""
    import argparse
    seen = {}
    orig = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        seen['p'] = self
        raise SystemExit(0)
    argparse.ArgumentParser.parse_args = grab
    try:
        MG.MA.parse_args()
    except SystemExit:
        pass
    argparse.ArgumentParser.parse_args = orig
    return set(seen['p']._option_string_actions)


def split_options(argv, known):
    """[(option, [values])] in order; values run up to the next --option token."""
    groups = []
    for a in argv:
        if a.startswith('--') and not re.match(r'^--?\d', a):
            groups.append((a, []))
        else:
            groups[-1][1].append(a)
    return groups


def megatron_argv(groups, known, keep=()):
    """The Megatron options of the script (plus those in keep), MindSpeed values mapped."""
    out = []
    tok_path = next((v[0] for o, v in groups if o == '--tokenizer-name-or-path' and v), None)
    for o, v in groups:
        if o not in known and o not in keep:
            continue
        key = (o, v[0] if len(v) == 1 else None)
        if key in VALUE_MAP:
            if VALUE_MAP[key] is None:
                continue
            v = [VALUE_MAP[key]]
            if o == '--tokenizer-type':
                v += ['--tokenizer-model', tok_path or '/path/to/TOKENIZER']
        out += [o] + v
    return out


def expectation(groups, known):
    """megatron.c's answer to the whole script: a MindSpeed value fails while parsing, a
    refused option once parsing is done (both exit 2, the first such one named); else the
    Megatron outcome of the script without its refused options, after one note per accepted
    flag."""
    values = ['%s %s' % (o, v[0]) for o, v in groups if len(v) == 1 and (o, v[0]) in VALUE_MAP
              and (o, v[0]) not in IMPLEMENTED_VALUES]
    refused = [o for o, _ in groups
               if o not in known and o not in ACCEPTED and o not in IMPLEMENTED]
    accepted = [o for o, _ in groups if o in ACCEPTED]
    if values:
        err = '%s is a MindSpeed option value that megatron.c does not support yet' % values[0]
    elif refused:
        err = '%s is a MindSpeed option that megatron.c does not support yet' % refused[0]
    else:
        return {'exit': None, 'accepted': accepted}
    return {'exit': 2, 'error': 'pretrain_gpt.py: error: ' + err, 'accepted': accepted,
            'refused': refused, 'refused_values': values}


def one_line_lists(text):
    """json's indented text with each list of strings (the argument lists) on one line."""
    item = r'"(?:[^"\\]|\\.)*"'
    pat = r'\[\s*\n\s*(%s(?:,\s*\n\s*%s)*)\s*\n\s*\]' % (item, item)
    return re.sub(pat, lambda m: '[' + re.sub(r',\s*\n\s*', ', ', m.group(1)) + ']', text)


def compact(cases):
    """Keeps the first case's dump whole; the others store what differs from it (Megatron
    prints the dump sorted by lower-cased name, so the order is not stored)."""
    base = dict(cases[0]['megatron']['dump'] or {})
    assert list(base) == sorted(base, key=str.lower)
    for c in cases:
        m = c['megatron']
        dump = m.pop('dump')
        if dump is None:
            continue
        assert list(dump) == sorted(dump, key=str.lower)
        m['dump_changed'] = {k: v for k, v in dump.items() if base.get(k) != v}
        m['dump_removed'] = [k for k in base if k not in dump]
    return base


def main():
    known = megatron_options()
    cases = []
    for commit, path in [(COMMIT, p) for p in SCRIPTS] + [(LEGACY_COMMIT, p) for p in LEGACY_SCRIPTS]:
        argv, ws = extract(commit, path)
        groups = split_options(argv, known)
        mindspeed = [o for o, _ in groups if o not in known]
        margv = megatron_argv(groups, known)
        keep_argv = megatron_argv(groups, known, keep=ACCEPTED)
        mapped_argv = megatron_argv(groups, known, keep={o for o, _ in groups})
        name = ('legacy_' if commit == LEGACY_COMMIT else '') + os.path.basename(path)[:-3]
        res = MG.run_case(name, margv, ws)
        case = {'name': name, 'source': 'Ascend/MindSpeed-LLM@%s:%s' % (commit, path),
                'world_size': ws, 'argv': argv, 'mindspeed_only': mindspeed,
                'megatron_argv': margv, 'accepted_argv': keep_argv, 'mapped_argv': mapped_argv,
                'expect': expectation(groups, known), 'megatron': {
                    'exit': res['exit'], 'error': res.get('error'),
                    'stderr_last': res['stderr_last'], 'system_exit': res.get('system_exit', False)}}
        pre, dump, _ = MG.split_stdout(res['stdout'])
        case['megatron']['stdout_pre'] = pre
        case['megatron']['dump'] = dump
        cases.append(case)
        print('%-40s ws=%-4d exit=%d mindspeed=%d %s' % (name, ws, res['exit'], len(mindspeed),
                                                         res.get('error') or res['stderr_last']))
    base = compact(cases)
    doc = {'megatron': 'Megatron-LM core_v0.12.1',
           'mindspeed_llm': 'Ascend/MindSpeed-LLM@%s, legacy examples @%s' % (COMMIT, LEGACY_COMMIT),
           'baseline_dump': base, 'cases': cases}
    dst = os.path.join(HERE, 'mindspeed_cli.json')
    with open(dst + '.tmp', 'w') as f:
        f.write(one_line_lists(json.dumps(doc, indent=1)) + '\n')
    os.replace(dst + '.tmp', dst)
    print('make_mindspeed_goldens: %d cases -> %s' % (len(cases), dst))


if __name__ == '__main__':
    main()
