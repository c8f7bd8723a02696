"""pretrain_gpt --yaml-cfg (Megatron's experimental YAML arguments, yaml_arguments.py):
the YAML fixture gives the same arguments dump as the equivalent command line, errors are clear
(file:line, key) with a non-zero exit, and a short --mock-data training run configured by YAML
trains. If Megatron's own examples/gpt3/gpt_config.yaml is present under /work/ref it is read as
well (its MoE/bf16/sequence-parallel settings are then refused or rejected clearly, not crash)."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_common import PRETRAIN, SRC, Checker, megatron_rc, run  # noqa: E402

FIXTURE = os.path.join(SRC, 'tests', 'golden', 'cli', 'yaml', 'tiny_gpt.yaml')
MEGATRON_EXAMPLE = '/work/ref/Megatron-LM/examples/gpt3/gpt_config.yaml'
WARNING = ('warning using experimental yaml arguments feature, argparse arguments will be '
           'ignored')


def equivalent_cli(cache):
    """The command line that the fixture stands for (written independently of the reader)."""
    return ['--num-layers', '2', '--hidden-size', '32', '--num-attention-heads', '4',
            '--hidden-dropout', '0.0', '--attention-dropout', '0.0', '--norm-epsilon', '1e-5',
            '--init-method-std', '0.02', '--normalization', 'LayerNorm',
            '--tensor-model-parallel-size', '1', '--pipeline-model-parallel-size', '1',
            '--context-parallel-size', '1',
            '--micro-batch-size', '4', '--global-batch-size', '8', '--seq-length', '32',
            '--max-position-embeddings', '32', '--train-iters', '6', '--lr', '1.0e-3',
            '--min-lr', '0.0', '--lr-decay-style', 'cosine', '--lr-warmup-iters', '2',
            '--weight-decay', '0.01', '--adam-beta2', '0.95', '--log-interval', '1',
            '--eval-interval', '3', '--eval-iters', '1', '--mock-data', '--split', '969,30,1',
            '--tokenizer-type', 'NullTokenizer', '--vocab-size', '4096',
            '--data-cache-path', cache, '--seed', '1234']


def dump(out):
    """The arguments block, without the yaml_cfg line."""
    m = re.search(r'-+ arguments -+\n(.*?)\n-+ end of arguments', out, re.S)
    if not m:
        return None
    return [l for l in m.group(1).splitlines() if not l.strip().startswith('yaml_cfg ')]


def write(tmp, name, text):
    p = os.path.join(tmp, name)
    with open(p, 'w') as f:
        f.write(text)
    return p


def last(err):
    lines = [l for l in err.splitlines() if l.strip()]
    return lines[-1] if lines else ''


def test_same_dump(c, tmp):
    cache = os.path.join(tmp, 'cache')
    env = {'MC_YAML_CACHE': cache}
    rc, yout, yerr = run([PRETRAIN, '--yaml-cfg', FIXTURE, '--dry-run'], extra_env=env)
    c.check(rc == 0, 'yaml dry run: %s' % yerr[-500:])
    c.check(yout.splitlines()[:1] == [WARNING], 'warning first: %r' % yout[:200])
    # validate_yaml's world-size line (Megatron's missing ', ' restored).
    c.check(yout.splitlines()[1:2] == ['using world size: 1, data-parallel size: 1, '
            'context-parallel size: 1, tensor-model-parallel size: 1, pipeline-model-parallel '
            'size: 1'], 'yaml world-size line: %r' % yout.splitlines()[1:2])
    rc, cout, cerr = run([PRETRAIN, '--dry-run'] + equivalent_cli(cache))
    c.check(rc == 0, 'cli dry run: %s' % cerr[-500:])
    yd, cd = dump(yout), dump(cout)
    c.check(yd is not None and yd == cd,
            'dumps differ: %s' % sorted(set(yd or []) ^ set(cd or []))[:10])
    c.check(any(l.strip().startswith('yaml_cfg ') and l.endswith(FIXTURE)
                for l in yout.splitlines()), 'yaml_cfg in the dump')
    # Everything after the dump (micro-batches, padding, memory, FLOPs) is the same too.
    def tail(s):
        return [l for l in s.split('end of arguments', 1)[-1].splitlines()
                if 'time to initialize' not in l and 'datetime' not in l]
    c.check(tail(yout) == tail(cout), 'start-up report after the dump differs')
    # Other command-line options are ignored, as in Megatron.
    rc, out2, _ = run([PRETRAIN, '--yaml-cfg', FIXTURE, '--dry-run', '--num-layers', '7'],
                      extra_env=env)
    c.check(rc == 0 and dump(out2) == yd, 'argparse options ignored')
    # Core spellings map to the argparse dests; environment variables are substituted.
    c.check(any(re.match(r'\s+norm_epsilon \.+ 1e-05$', l) for l in yd or []), 'norm_epsilon')
    c.check(any(re.match(r'\s+data_cache_path \.+ %s$' % re.escape(cache), l)
                for l in yd or []), 'env var substituted')


def test_types_and_lists(c, tmp):
    """Flow and block lists, quoted strings, booleans, None, activation_func, TP clamping."""
    p = write(tmp, 'lists.yaml', '''\
language_model:
  num_layers: 2
  hidden_size: 32
  num_attention_heads: 4
  activation_func: swiglu
model_parallel:
  tensor_model_parallel_size: 4   # clamped to the world size (1), as validate_yaml does
  pipeline_model_parallel_size: 2
seq_length: 32
max_position_embeddings: 32
micro_batch_size: 2
global_batch_size: 8
train_samples: 1000
rampup_batch_size: [2, 2, 100]
lr: 2.5e-4
lr_decay_style: 'linear'
data_path:
  - "0.5"
  - /data/a_text_document
  - 0.5
  - /data/b_text_document
untie_embeddings_and_output_weights: yes
tokenizer_type: NullTokenizer
vocab_size: 1000
load: ~
''')
    rc, out, err = run([PRETRAIN, '--yaml-cfg', p, '--dry-run'])
    cli = ['--num-layers', '2', '--hidden-size', '32', '--num-attention-heads', '4', '--swiglu',
           '--seq-length', '32', '--max-position-embeddings', '32', '--micro-batch-size', '2',
           '--global-batch-size', '8', '--train-samples', '1000', '--rampup-batch-size', '2', '2', '100', '--lr', '2.5e-4',
           '--lr-decay-style', 'linear', '--data-path', '0.5', '/data/a_text_document', '0.5',
           '/data/b_text_document', '--untie-embeddings-and-output-weights',
           '--tokenizer-type', 'NullTokenizer',
           '--vocab-size', '1000']
    rc2, out2, err2 = run([PRETRAIN, '--dry-run'] + cli)
    c.check(rc == 0 and rc2 == 0, 'lists: %s | %s' % (err[-400:], err2[-400:]))
    # A variable whose value contains ${...} is not expanded again; quoted strings are too.
    p2 = write(tmp, 'env.yaml', 'num_layers: 2\nhidden_size: 32\nnum_attention_heads: 4\n'
               'seq_length: 32\nmax_position_embeddings: 32\nmicro_batch_size: 1\n'
               'train_iters: 10\nlr: 0.001\nsave: a${MC_Y1}b${MC_Y2}c\nsave_interval: 5\nload: "${MC_Y2}/x"\n')
    rc3, out3, err3 = run([PRETRAIN, '--yaml-cfg', p2, '--dry-run'],
                          extra_env={'MC_Y1': '${MC_Y1}', 'MC_Y2': 'z'})
    rc3 = megatron_rc(rc3, out3, err3)  # --save without --ckpt-format torch: refused, listed
    c.check(rc3 == 0 and '  save ' + '.' * 44 + ' a${MC_Y1}bzc' in out3.splitlines() and
            '  load ' + '.' * 44 + ' z/x' in out3.splitlines(), 'env: %s' % err3[-300:])
    c.check('tensor-model-parallel size: 1, pipeline-model-parallel size: 1' in out,
            'TP 4 and PP 2 clamped to world size 1')
    c.check(dump(out) is not None and dump(out) == dump(out2),
            'list dumps differ: %s' % sorted(set(dump(out) or []) ^ set(dump(out2) or []))[:10])


def test_errors(c, tmp):
    cases = [
        ('bad.yaml', 'num_layers: 2\nhidden_size 32\n', ':2: expected \'key: value\''),
        ('unknown.yaml', 'num_layers: 2\n\nnot_an_option: 3\n',
         ":3: unknown key 'not_an_option'"),
        ('nested.yaml', 'optimizer_cfg:\n  lr: 1\n', "nested section 'optimizer_cfg'"),
        ('deep.yaml', 'language_model:\n  num_layers: 2\n    hidden_size: 3\n',
         ':3: unexpected indentation'),
        ('flow.yaml', 'rampup_batch_size: [1, 2\n', ':1: a flow list must end'),
        ('map.yaml', 'seed: {a: 1}\n', ':1: unsupported YAML syntax'),
        ('badint.yaml', 'num_layers: two\n', "num_layers: argument --num-layers: invalid int "
         "value: 'two'"),
        ('badbool.yaml', 'mock_data: 3\n', ':1: mock_data: expected true or false'),
        ('tab.yaml', 'language_model:\n\tnum_layers: 2\n', ':2: tabs are not allowed'),
        ('dup.yaml', 'seed: 1\nseed: 2\n', ":2: key 'seed' repeats line 1"),
        ('choice.yaml', 'lr_decay_style: steep\n', 'invalid choice'),
        ('env.yaml', 'save: ${MC_YAML_SURELY_UNSET_VAR}/ckpt\n',
         'AssertionError: environment variable MC_YAML_SURELY_UNSET_VAR in yaml not found'),
        ('act.yaml', 'language_model:\n  activation_func: relu\n',
         ':2: activation_func must be swiglu'),
        ('off.yaml', 'language_model:\n  window_size: [4, 4]\n',
         'window_size is not supported by megatron.c yet'),
    ]
    for name, text, want in cases:
        p = write(tmp, name, text)
        rc, out, err = run([PRETRAIN, '--yaml-cfg', p, '--dry-run'])
        c.check(rc != 0 and want in last(err) and 'Traceback' not in err and
                (want.startswith('AssertionError') or p in last(err) or 'invalid' in want),
                '%s: rc=%d err=%r' % (name, rc, err[-300:]))
    rc, out, err = run([PRETRAIN, '--yaml-cfg', os.path.join(tmp, 'missing.yaml'), '--dry-run'])
    c.check(rc == 1 and 'missing.yaml' in last(err), 'missing file: %r' % err)
    rc, out, err = run([PRETRAIN, '--yaml-cfg', FIXTURE, '--use-legacy-models', '--dry-run'])
    c.check(rc == 1 and last(err) == 'AssertionError: Yaml config is not supported with legacy '
            'models.', 'legacy models: %r' % err)


def test_megatron_example(c):
    """Megatron's own example reads without a syntax or unknown-key error (it is then refused
    for what megatron.c does not implement: MoE router settings, bf16 on a CPU run...)."""
    if not os.path.exists(MEGATRON_EXAMPLE):
        return
    rc, out, err = run([PRETRAIN, '--yaml-cfg', MEGATRON_EXAMPLE, '--dry-run'], world_size=8)
    c.check('YAMLError' not in err and 'Traceback' not in err and 'unknown key' not in err,
            'Megatron example: %s' % err[-400:])


def test_training(c, tmp):
    cache = os.path.join(tmp, 'train_cache')
    env = {'MC_YAML_CACHE': cache, 'OMP_NUM_THREADS': '1'}
    rc, out, err = run([PRETRAIN, '--yaml-cfg', FIXTURE], extra_env=env)
    losses = re.findall(r'iteration +\d+/ +6 \|.*lm loss: (\d\.\d+E[+-]\d\d)', out)
    c.check(rc == 0 and len(losses) == 6, 'training: rc=%d %s' % (rc, (err or out)[-600:]))
    c.check(len(losses) == 6 and float(losses[-1]) < float(losses[0]),
            'loss goes down: %s' % losses)
    # The same run from the command line gives the same losses (same seed, same data).
    rc, out2, err2 = run([PRETRAIN] + equivalent_cli(cache), extra_env=env)
    losses2 = re.findall(r'iteration +\d+/ +6 \|.*lm loss: (\d\.\d+E[+-]\d\d)', out2)
    c.check(rc == 0 and losses2 == losses, 'cli losses %s vs yaml %s' % (losses2, losses))


def main():
    c = Checker('test_cli_yaml')
    with tempfile.TemporaryDirectory() as tmp:
        test_same_dump(c, tmp)
        test_types_and_lists(c, tmp)
        test_errors(c, tmp)
        test_megatron_example(c)
        test_training(c, tmp)
    sys.exit(c.summary())


if __name__ == '__main__':
    main()
