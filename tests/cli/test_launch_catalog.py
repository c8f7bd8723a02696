"""The catalog of real launch scripts (tests/cli/launch_catalog/*.args, made by extract.py from
Megatron-LM core_v0.12.1's examples and GPT functional-test configs, MindSpeed-LLM's mcore
examples and the MindSpeed migration sample) through pretrain_gpt, as a migrating user runs them.

Per script, with its data/tokenizer/checkpoint paths pointed at small local data made here:
  1. `pretrain_gpt --dry-run` with the script's world size (WORLD_SIZE). Every refusal it reports
     is collected: the "a real run would stop here: ..." lines (one or many per run) and a failing
     exit's error line. Each refused option is then taken out and the dry run repeated, so the
     whole list is known even while the dry run names one refusal per run.
  2. When the dry run accepts the script unchanged: its shrunk copy (only layers, hidden/FFN size,
     heads, sequence length, batch sizes and iterations reduced: 3 iterations) trained under
     mpirun with the script's world size and TP/PP layout. A real-run refusal is recorded.
     (--probe-all: also for the scripts the dry run refuses, with those refusals taken out, for
     a fuller table; slow, printed only, not compared.)
The table (script: refusals) and the counts (accepted, refused by reason) are printed.

Fails when a script listed as accepted in launch_catalog/expected.json is refused, when an
expected refusal disappears or a script newly passes (update the file: progress is recorded;
run this test with --update to rewrite it), or when a script's refusals appear from nowhere
(a refused script whose expected list shares none of them). Refusals beyond the expected ones
are printed, not failed: the dry run is growing to report all of them at once.

Separately, labelled "precision/format flags removed" (a check of the shrunk-copy mechanism,
not a claim that those scripts pass): SHRINK_CHECKS scripts with --bf16/--fp16 (and options that
only mean something with them) and --ckpt-format torch_dist taken out (with --async-save, which needs it), trained 3 iterations."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from cli_common import BUILD, PRETRAIN, SRC, Checker
from mc_test import mpirun_cmd, run_cmd

HERE = os.path.join(SRC, 'tests', 'cli', 'launch_catalog')
EXPECTED = os.path.join(HERE, 'expected.json')
PREPROCESS = os.path.join(BUILD, 'bin', 'preprocess_data')
GPT2_DIRS = [os.path.join(SRC, '..', 'shared', 'tokenizers', 'gpt2'), '/work/shared/tokenizers/gpt2']
SPM_MODEL = os.path.join(SRC, 'tests', 'golden', 'tokenizer', 'spm', 'bpe_llama.model')
HF_DIR = os.path.join(SRC, 'tests', 'golden', 'tokenizer', 'hf_llama2')
STOP = 'megatron.c: a real run would stop here: '
LAST_STDOUT = []  # stdout lines of the latest dry run

# The mechanism check: scripts whose only refusals are precision / checkpoint format.
SHRINK_CHECKS = [
    'megatron__ft_gpt3_mr_mcore_te_tp1_pp4_swiglu_dgx_a100_1N8G',
    'megatron__ft_gpt3_mr_mcore_te_tp1_pp4_vp1_dgx_a100_1N8G',
    'megatron__ft_gpt3_mr_tp2_pp2_dgx_a100_1N8G',
    'megatron__ft_gpt3_345m_nightly_dgx_a100_1N8G_mcore_tp4_pp1',
    'mindspeed_llm__llama2_7b_ptd',
]
# Options that only mean something with --bf16/--fp16 (loss scaling, reduced-precision reduce).
PRECISION = {'--bf16': 0, '--fp16': 0, '--initial-loss-scale': 1, '--loss-scale': 1,
             '--min-loss-scale': 1, '--loss-scale-window': 1, '--hysteresis': 1,
             '--grad-reduce-in-bf16': 0, '--accumulate-allreduce-grads-in-fp32': 0}


# ---------------------------------------------------------------- catalog files

def load_catalog():
    """{name: (header dict, [(option, [values])])} of every *.args file."""
    import shlex
    cat = {}
    for f in sorted(os.listdir(HERE)):
        if not f.endswith('.args'):
            continue
        header, opts = {}, []
        for line in open(os.path.join(HERE, f)):
            line = line.rstrip('\n')
            if line.startswith('# '):
                k, v = line[2:].split(': ', 1)
                header[k] = v
            elif line:
                words = shlex.split(line)
                opts.append((words[0], words[1:]))
        cat[f[:-5]] = (header, opts)
    return cat


def flat(opts):
    return [w for o, v in opts for w in [o] + v]


def without(opts, names):
    return [(o, v) for o, v in opts if o not in names]


def setv(opts, name, *values):
    """opts with name set to values (appended when absent)."""
    out, done = [], False
    for o, v in opts:
        if o == name:
            if not done:
                out.append((o, list(values)))
            done = True
        else:
            out.append((o, v))
    return out if done else out + [(name, list(values))]


def get(opts, name, default=None):
    for o, v in opts:
        if o == name:
            return v[0] if v else True
    return default


# ---------------------------------------------------------------- local data

def gpt2_dir():
    for d in GPT2_DIRS:
        if os.path.exists(os.path.join(d, 'vocab.json')):
            return d
    raise SystemExit('GPT-2 vocab.json/merges.txt not found in %s' % GPT2_DIRS)


def make_data(tmp):
    """Tiny preprocessed datasets (GPT-2 BPE, a Llama-style sentencepiece model and a HuggingFace
    tokenizer.json) of the same deterministic corpus; returns {tokenizer kind: prefix}."""
    words = ('the model trains on small local data made by the test while every launch script '
             'keeps its own options layout and world size one two three four five six seven').split()
    corpus = os.path.join(tmp, 'corpus.jsonl')
    with open(corpus, 'w') as f:
        x = 12345
        for doc in range(3000):
            text = []
            for _ in range(12):
                x = (x * 1103515245 + 12345) % 2 ** 31
                text.append(words[x % len(words)])
            f.write(json.dumps({'text': ' '.join(text)}) + '\n')
    g = gpt2_dir()
    out = {}
    for kind, tok in [('gpt2', ['--tokenizer-type', 'GPT2BPETokenizer', '--vocab-file',
                                os.path.join(g, 'vocab.json'), '--merge-file',
                                os.path.join(g, 'merges.txt')]),
                      ('spm', ['--tokenizer-type', 'Llama2Tokenizer', '--tokenizer-model',
                               SPM_MODEL]),
                      ('hf', ['--tokenizer-type', 'HuggingFaceTokenizer', '--tokenizer-model',
                              HF_DIR])]:
        prefix = os.path.join(tmp, 'data_' + kind)
        p = subprocess.run([PREPROCESS, '--input', corpus, '--output-prefix', prefix,
                            '--append-eod', '--workers', '1', *tok],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode:
            raise SystemExit('preprocess_data (%s) failed:\n%s' % (kind, p.stdout[-2000:]))
        out[kind] = prefix + '_text_document'
    return out


def localize(opts, data, tmp):
    """The script's paths pointed at the local data, tokenizer files and fresh directories."""
    g = gpt2_dir()
    tok = get(opts, '--tokenizer-type', 'GPT2BPETokenizer')
    # the data is tokenized as the script's tokenizer reads it (ids past a small HF vocab fail
    # the out-of-vocabulary check)
    kind = {'Llama2Tokenizer': 'spm', 'PretrainedFromHF': 'hf', 'HuggingFaceTokenizer': 'hf'}
    repl = {'--data-path': [data[kind.get(tok, 'gpt2')]],
            '--vocab-file': [os.path.join(g, 'vocab.json')],
            '--merge-file': [os.path.join(g, 'merges.txt')],
            '--tokenizer-model': [SPM_MODEL if tok == 'Llama2Tokenizer' else HF_DIR],
            '--tokenizer-name-or-path': [HF_DIR],
            '--save': [os.path.join(tmp, 'ckpt')], '--load': [os.path.join(tmp, 'ckpt')],
            '--tensorboard-dir': [os.path.join(tmp, 'tb')],
            '--data-cache-path': [os.path.join(tmp, 'cache')]}
    return [(o, repl.get(o, v)) for o, v in opts]


# ---------------------------------------------------------------- dry run

def option_of(msg):
    """The option a refusal message names (its first --option), else the message itself."""
    m = re.search(r'(--[a-z0-9][a-z0-9-]*)', msg)
    return m.group(1) if m else msg


def reason_of(msg):
    """The key a refusal is counted under: "--opt VALUE" for a refused value, the text before
    the colon for a real-run refusal ("--bf16/--fp16", "--ckpt-format torch_dist"), else the
    option named."""
    m = re.match(r'^(--\S+ \S+) is a .*option value', msg)
    if m:
        return m.group(1)
    m = re.match(r'^(--[^:]{1,40}): ', msg)
    if m:
        return m.group(1)
    return option_of(msg)


def dry_refusals(opts, world):
    """[(key, message)] of one dry run: the stop lines, then a failing exit's error line."""
    env = dict(os.environ, WORLD_SIZE=str(world), RANK='0')
    env.pop('LOCAL_RANK', None)
    p = subprocess.run([PRETRAIN, '--dry-run', *flat(opts)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env)
    LAST_STDOUT[:] = p.stdout.split('\n')
    found = [(reason_of(l[len(STOP):]), l[len(STOP):]) for l in p.stdout.split('\n')
             if l.startswith(STOP)]
    if p.returncode:
        err = [l for l in p.stderr.split('\n') if l.strip() and not l.startswith('UserWarning')
               and not l.startswith(' ') and not l.startswith('usage:')]
        msg = err[-1] if err else 'exit %d' % p.returncode
        msg = re.sub(r'^pretrain_gpt(\.py)?: (error: )?', '', msg)
        msg = re.sub(r'^NotImplementedError: ', '', msg)
        key = reason_of(msg) if 'megatron.c' in msg else 'error: ' + msg
        if 'unrecognized arguments' in msg:
            key = 'error: ' + msg
        if key not in [k for k, _ in found]:
            found.append((key, msg))
    return found


def all_dry_refusals(opts, world):
    """Every dry-run refusal of the script: refused options taken out one run at a time (an
    error that names no refused option ends the list)."""
    found = []
    for _ in range(40):
        now = [(k, m) for k, m in dry_refusals(opts, world) if k not in [x for x, _ in found]]
        if not now:
            return found
        found += now
        # A run that printed its refusal list ("a real run would stop here" lines) named them
        # all; taking options out would only turn them into their defaults (e.g. --ckpt-format).
        # A parse error stops at one: take it out and ask again.
        if any(l.startswith(STOP) for l in LAST_STDOUT):
            return found
        names = {k.split(' ')[0] for k, _ in now if k.startswith('--')}
        if any(not k.startswith('--') for k, _ in now) or not names & {o for o, _ in opts}:
            return found
        opts = without(opts, names)
    return found


# ---------------------------------------------------------------- shrunk copy

def shrink(opts):
    """The script with only the model size, sequence length, batch sizes and iterations reduced
    (3 iterations); parallel layout, model features and everything else as written."""
    tp = int(get(opts, '--tensor-model-parallel-size', 1))
    pp = int(get(opts, '--pipeline-model-parallel-size', 1))
    vp = get(opts, '--num-layers-per-virtual-pipeline-stage')
    heads = 2 * tp
    groups = tp if get(opts, '--num-query-groups') else None
    hidden = 16 * heads
    layers = pp * (2 if vp else 1)
    first = int(get(opts, '--decoder-first-pipeline-num-layers', 0) or 0)
    last = int(get(opts, '--decoder-last-pipeline-num-layers', 0) or 0)
    if (first or last) and pp > 1:
        # an uneven split as written, with one layer on each other stage: shrinking to one layer
        # per stage would leave those stages empty, which the real script's never are
        layers = first + last + (pp - (first > 0) - (last > 0))
    lst = get(opts, '--num-layer-list')
    if lst and pp > 1:
        # MindSpeed-LLM's per-stage list: one layer a stage, two on the stage the script gives
        # the most (still uneven, summing to --num-layers)
        counts = [int(x) for x in lst.split(',')]
        counts = [2 if k == counts.index(max(counts)) else 1 for k in range(len(counts))]
        layers = sum(counts)
        opts = setv(opts, '--num-layer-list', ','.join(map(str, counts)))
    o = setv(opts, '--num-layers', str(layers))
    o = setv(o, '--hidden-size', str(hidden))
    o = setv(o, '--num-attention-heads', str(heads))
    if groups:
        o = setv(o, '--num-query-groups', str(groups))
    if get(o, '--ffn-hidden-size'):
        o = setv(o, '--ffn-hidden-size', str(2 * hidden))
    if get(o, '--kv-channels'):
        o = setv(o, '--kv-channels', str(hidden // heads))
    if vp:
        o = setv(o, '--num-layers-per-virtual-pipeline-stage', '1')
    o = setv(o, '--seq-length', '32')
    if get(o, '--max-position-embeddings'):
        o = setv(o, '--max-position-embeddings', '32')
    o = without(o, {'--rampup-batch-size', '--train-samples', '--lr-decay-samples',
                    '--lr-warmup-samples', '--exit-interval'})
    o = setv(o, '--micro-batch-size', '1')
    return o, tp, pp


def train_shrunk(opts, world, tmp):
    """(rc, output, lm losses) of the shrunk copy: 3 iterations under mpirun."""
    o, tp, pp = shrink(opts)
    dp = world // (tp * pp) if world % (tp * pp) == 0 else 1
    o = setv(o, '--global-batch-size', str(dp * pp))
    o = setv(o, '--train-iters', '3')
    o = setv(o, '--eval-interval', '3')
    o = setv(o, '--eval-iters', '1')
    o = setv(o, '--log-interval', '1')
    o = setv(o, '--save-interval', '3')
    if get(o, '--lr-decay-iters'):
        o = setv(o, '--lr-decay-iters', '3')
    if get(o, '--lr-warmup-iters'):
        o = setv(o, '--lr-warmup-iters', '1')
    for d in ('ckpt', 'tb', 'cache'):
        shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS='1')
    try:
        p = run_cmd(mpirun_cmd(world, [PRETRAIN, *flat(o)], ('OMP_NUM_THREADS=1',)), env, 400)
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or '') + '\n(timed out)', []
    out = p.stdout + '\n' + p.stderr
    # an iteration the fp16 loss scaler skipped (inf/nan grads: Megatron's default initial
    # scale 2^32 overflows at first) prints no lm loss
    lines = re.findall(r'iteration +\d+/ +3 \|(.*)', p.stdout)
    losses = [m.group(1) if m else 'skipped'
              for m in (re.search(r'lm loss: (\S+)', l) for l in lines)]
    return p.returncode, out, losses


def real_refusal(out):
    """The refusal line of a failed real run (pretrain_gpt: ... / pretrain_gpt.py: error: ...)."""
    for l in out.split('\n'):
        if l.startswith('NotImplementedError: '):  # the refusal list of a real run
            return l[len('NotImplementedError: '):]
        m = re.search(r'pretrain_gpt(?:\.py)?: (?:rank \d+: )?(?:error: )?(.*)', l)
        if m and not l.startswith('usage'):
            return re.sub(r'^[\w/]+\.c:\d+: ', '', m.group(1))  # the source location
    lines = [l for l in out.split('\n') if l.strip()]
    return lines[-1] if lines else 'no output'


# ---------------------------------------------------------------- the check

def classify(name, header, opts, data, tmp, probe_all):
    """([(key, message, where)], lm losses or None) of the script: its dry-run refusals; when
    there are none (or probe_all, unless the dry run ended on an error), the first refusal of
    the real run of its shrunk copy with the dry-run refusals taken out; no refusal at all: the
    shrunk copy trained."""
    world = int(header['world_size'])
    local = localize(opts, data, tmp)
    found = [(k, m, 'dry run') for k, m in all_dry_refusals(local, world)]
    if any(not k.startswith('--') for k, _, _ in found) or (found and not probe_all):
        return found, None
    left = without(local, {k.split(' ')[0] for k, _, _ in found})
    rc, out, losses = train_shrunk(left, world, tmp)
    if rc == 0 and len(losses) == 3:
        return found, losses
    msg = real_refusal(out)
    key = reason_of(msg) if msg.startswith('--') else 'error: ' + msg
    return found + [(key, msg, 'real run (shrunk copy, dry-run refusals taken out)')], None


def short(key):
    return key if len(key) <= 90 else key[:87] + '...'


def main():
    update = '--update' in sys.argv
    probe_all = '--probe-all' in sys.argv  # a fuller table, too slow for CTest; not compared
    if update and probe_all:
        raise SystemExit('--update records the default mode; run it without --probe-all')
    c = Checker('launch_catalog')
    cat = load_catalog()
    c.check(len(cat) >= 35, '%d scripts in the catalog (want >= 35)' % len(cat))
    expected = json.load(open(EXPECTED)) if os.path.exists(EXPECTED) else {}
    tmp = tempfile.mkdtemp(prefix='mc_catalog_')
    results = {}
    try:
        data = make_data(tmp)
        print('%-78s %5s  %s' % ('script', 'world', 'refused (first: where)'))
        for name, (header, opts) in cat.items():
            found, losses = classify(name, header, opts, data, tmp, probe_all)
            results[name] = [k for k, _, _ in found]
            if not found:
                print('%-78s %5s  ACCEPTED: shrunk copy trained 3 iterations, lm loss %s'
                      % (name, header['world_size'], ' '.join(losses)))
            else:
                print('%-78s %5s  %s' % (name, header['world_size'], ', '.join(
                    short(k) for k, _, _ in found)))
                for k, m, where in found:
                    print('    %s: %s' % (where, m))
                if losses:
                    print('    with those taken out, the shrunk copy trained 3 iterations: lm '
                          'loss %s' % ' '.join(losses))
        if probe_all:
            print('(--probe-all: real runs probed after the dry-run refusals; not compared with '
                  'expected.json)')
        else:
            compare(c, expected, results, update)
        counts(results)
        shrink_checks(c, cat, data, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if update:
        tmpf = EXPECTED + '.tmp'
        with open(tmpf, 'w') as f:
            json.dump(results, f, indent=1, sort_keys=True)
            f.write('\n')
        os.replace(tmpf, EXPECTED)
        print('updated', EXPECTED)
    return c.summary()


def compare(c, expected, results, update):
    hint = ' (if intended, update the file: python3 tests/cli/test_launch_catalog.py --update)'
    for name, got in results.items():
        if name not in expected:
            c.check(update, '%s: not in expected.json%s' % (name, hint))
            continue
        want = expected[name]
        if not want:
            c.check(not got, '%s: accepted before, now refused: %s' % (name, got))
            continue
        if not got:
            c.check(update, '%s: NEWLY PASSES (expected refusals %s)%s' % (name, want, hint))
            continue
        gone = [k for k in want if k not in got]
        c.check(update or not gone, '%s: no longer refused: %s (now: %s)%s' % (
            name, gone, got, hint))
        extra = [k for k in got if k not in want]
        if extra:
            print('note: %s: refusals beyond the expected ones: %s' % (name, extra))
    for name in expected:
        c.check(update or name in results, '%s: in expected.json but not in the catalog' % name)


def counts(results):
    accepted = [n for n, r in results.items() if not r]
    by = {}
    for n, r in results.items():
        for k in r:
            by.setdefault(k, []).append(n)
    print('\ncounts: %d scripts, %d accepted, %d refused' % (
        len(results), len(accepted), len(results) - len(accepted)))
    print('refused by reason (a script counts once per reason):')
    for k, names in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print('  %3d  %s' % (len(names), short(k)))


def shrink_checks(c, cat, data, tmp):
    print('\n== shrunk copies with precision/format flags removed (--bf16/--fp16 and their '
          'dependents, --ckpt-format torch_dist -> torch): a check of the mechanism, NOT a '
          'claim that these scripts pass ==')
    for name in SHRINK_CHECKS:
        header, opts = cat[name]
        world = int(header['world_size'])
        o = [(k, v) for k, v in localize(opts, data, tmp) if k not in PRECISION]
        if get(o, '--ckpt-format', 'torch_dist') == 'torch_dist' and (
                get(o, '--save') or get(o, '--load')):  # torch_dist: Megatron's default
            o = setv(o, '--ckpt-format', 'torch')
            o = without(o, {'--async-save'})  # torch_dist only (Megatron: not for legacy ones)
        left = [k for k, _ in all_dry_refusals(o, world)]
        o = without(o, {k for k in left if k.startswith('--')})
        tp = get(o, '--tensor-model-parallel-size', 1)
        pp = get(o, '--pipeline-model-parallel-size', 1)
        rc, out, losses = train_shrunk(o, world, tmp)
        ok = rc == 0 and len(losses) == 3 and all(0 < float(x) < 20 for x in losses)
        extra = ' (also removed, refused by the dry run: %s)' % left if left else ''
        c.check(ok, '%s [precision/format flags removed%s]: world %d tp%s pp%s, 3 iterations '
                'under mpirun: rc %d, lm loss %s%s' % (name, extra, world, tp, pp, rc, losses,
                                                       '' if ok else '\n' + out[-3000:]))
        if ok:
            print('  %s [precision/format flags removed%s]: world %d tp%s pp%s: lm loss %s' % (
                name, extra, world, tp, pp, ' '.join(losses)))


if __name__ == '__main__':
    sys.exit(main())
