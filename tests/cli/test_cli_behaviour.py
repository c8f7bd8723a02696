"""pretrain_gpt behaviour that Megatron's goldens do not cover: --help, refusing unsupported
options by name, a real run getting past the front end, MindSpeed options,
Python float repr, and the training-log / validation-box text against the spec's examples
(Megatron fixtures) and against Python's own formatting of the same values."""
import math
import random
import struct
import sys

import numpy as np

from cli_common import DRIVER, PRETRAIN, SRC, Checker, load_golden, run

TINY = ['--num-layers', '4', '--hidden-size', '64', '--num-attention-heads', '4',
        '--seq-length', '128', '--max-position-embeddings', '128', '--micro-batch-size', '2',
        '--train-iters', '20', '--lr', '1e-3']


def last(err):
    lines = [l for l in err.splitlines() if l.strip()]
    return lines[-1] if lines else ''


def check_usage(c):
    """argparse's usage text, line for line, apart from our extensions."""
    want = load_golden()['usage'].replace('[--distributed-backend {nccl,gloo}]',
                                          '[--distributed-backend {nccl,gloo,hccl,mpi}]')
    # MindSpeed-LLM adds PretrainedFromHF to the choices (as its parser does)
    want = want.replace('NullTokenizer,NullMultimodalTokenizer}',
                        'NullTokenizer,NullMultimodalTokenizer,PretrainedFromHF}')
    # and alibi to the position embedding types (MindSpeed-LLM's ALiBi)
    want = want.replace('{learned_absolute,rope,mrope,relative,none}',
                        '{learned_absolute,rope,mrope,relative,none,alibi}')
    rc, out, err = run([PRETRAIN, '--lr', 'x'], extra_env={'COLUMNS': '80'})
    lines = err.splitlines()
    k = [i for i, l in enumerate(lines) if '[--dry-run]' in l]
    if k:  # drop the megatron.c extension options at the end of the usage
        j = k[0]
        while j < len(lines) and not lines[j].startswith('pretrain_gpt.py: error'):
            j += 1
        lines = lines[:k[0]] + lines[j:]
    got = '\n'.join(lines) + '\n'
    c.check(rc == 2 and got == want, 'usage text differs from argparse\'s')


def check_cli(c):
    rc, out, err = run([PRETRAIN, '--help'])
    opts = {l.split()[0] for l in out.splitlines() if l.startswith('  --')}
    c.check(rc == 0 and out.startswith('usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS]'),
            '--help: exit %d' % rc)
    c.check(len(opts) >= 455 + 8, '--help lists %d options' % len(opts))
    for g in ('network size:', 'learning rate:', 'distributed:', 'megatron.c extensions:'):
        c.check('\n' + g + '\n' in out, '--help has group %s' % g)

    # A real run passes the front end and reaches the training setup (which stops here for
    # want of tokenizer files).
    rc, out, err = run([PRETRAIN] + TINY)
    c.check(rc == 1 and '--vocab-file' in err and 'not supported' not in err,
            'real run reaches the loop: %s' % err[-300:])
    rc, out, err = run([PRETRAIN] + TINY + ['--init-method-xavier-uniform'])
    c.check(rc == 1 and last(err) == 'NotImplementedError: --init-method-xavier-uniform is not '
            'supported by megatron.c yet', 'unsupported flag refused: %s' % err)
    # MoE trains (tests/moe/); its grouped-GEMM checkpoint naming is still refused
    rc, out, err = run([PRETRAIN] + TINY + ['--bf16', '--num-experts', '8', '--moe-grouped-gemm'])
    c.check(rc == 1 and last(err).startswith('NotImplementedError: --moe-grouped-gemm is not '
            'supported by megatron.c yet'), 'MoE grouped GEMM refused: %s' % err)
    rc, out, err = run([PRETRAIN] + TINY + ['--yaml-cfg', 'x.yaml'])
    c.check(rc == 1 and last(err).startswith('FileNotFoundError: --yaml-cfg x.yaml'),
            'missing yaml file named: %s' % err)
    # A non-default value is refused, the default value is not.
    rc, out, err = run([PRETRAIN] + TINY + ['--rerun-mode', 'disabled'])
    c.check(rc == 1 and 'not supported' not in err, 'default value accepted: %s' % err[-300:])
    # Accepted no-op knobs and the MindSpeed dialect.
    rc, out, err = run([PRETRAIN, '--dry-run'] + TINY + [
        '--use-flash-attn', '--transformer-impl', 'local', '--no-masked-softmax-fusion',
        '--use-fused-rmsnorm', '--use-mc2', '--distributed-backend', 'hccl'])
    c.check(rc == 0, 'MindSpeed dialect dry run: %s' % err)
    c.check('note: --use-fused-rmsnorm accepted: MindSpeed fused kernel' in out and
            'note: --use-mc2 accepted' in out, 'MindSpeed notes printed')
    c.check('  distributed_backend ............................. hccl' in out, 'hccl kept')
    c.check('use_fused_rmsnorm' not in out.split('arguments ---')[1].split('end of')[0],
            'extensions absent from the arguments dump')
    rc, out, err = run([PRETRAIN] + TINY + ['--context-parallel-algo', 'ulysses_cp_algo'])
    c.check(rc == 2 and last(err) == 'pretrain_gpt.py: error: --context-parallel-algo is a '
            'MindSpeed option that megatron.c does not support yet', 'MindSpeed refusal: %s' % err)
    # The dry run reports what a real run would refuse, finishes its report, and exits 1.
    rc, out, err = run([PRETRAIN, '--dry-run'] + TINY + ['--log-straggler'])
    c.check(rc == 1 and 'a real run would stop here: --log-straggler is not supported' in out
            and 'floating-point operations per iteration' in out and
            last(err) == 'NotImplementedError: --log-straggler is not supported by '
            'megatron.c yet', 'dry run lists refusals: %d %s' % (rc, err[-200:]))
    # The checks that follow validate_args in Megatron's start-up (calculator, scheduler).
    no_iters = TINY[:-4]
    rc, out, err = run([PRETRAIN, '--dry-run'] + no_iters + ['--lr', '1e-3'])
    c.check(rc == 1 and last(err) == 'Exception: either train-iters or train-samples should be '
            'provided.', 'no train-iters/samples: %s' % err)
    rc, out, err = run([PRETRAIN] + TINY + ['--global-batch-size', '3'])
    c.check(rc == 1 and last(err).endswith('global batch size (3) is not divisible by micro batch '
            'size (2) times data parallel size (1)'), 'real run gbs check: %s' % err)
    rc, out, err = run([PRETRAIN, '--dry-run'] + TINY + ['--lr-warmup-iters', '20'])
    c.check(rc == 1 and last(err).startswith('AssertionError: warmup steps'), 'warmup >= decay')
    # The dry run builds the real tokenizer when its files load (HuggingFace goldens of the
    # tokenizer tests; vocab sizes recorded there by the `tokenizers` package).
    import json, os
    gold = os.path.join(SRC, 'tests', 'golden', 'tokenizer')
    with open(os.path.join(gold, 'hf_cases.json')) as f:
        sizes = {k: v['vocab_size'] for k, v in json.load(f)['cases'].items()}
    for name in ('hf_gpt2', 'hf_llama3'):
        rc, out, err = run([PRETRAIN, '--dry-run'] + TINY + [
            '--tokenizer-type', 'HuggingFaceTokenizer', '--tensor-model-parallel-size', '2',
            '--tokenizer-model', os.path.join(gold, name, 'tokenizer.json')], world_size=2)
        n = sizes[name]
        padded = -(-n // 256) * 256
        c.check(' > padded vocab (size: %d) with %d dummy tokens (new size: %d)' % (
            n, padded - n, padded) in out, '%s vocab padding: %s' % (name, err[-200:]))
    # initialize_megatron's lines and its seed check.
    rc, out, err = run([PRETRAIN, '--dry-run'] + TINY + ['--tensor-model-parallel-size', '2',
                                                         '--logging-level', '30'], world_size=4)
    want = ['INFO:megatron.training.initialize:Setting logging level to 30',
            '> initializing torch distributed ...',
            '> initialized tensor model parallel with size 2',
            '> initialized pipeline model parallel with size 1',
            '> setting random seeds to 1234 ...']
    lines = out.splitlines()
    c.check(rc == 0 and all(w in lines for w in want) and
            lines.index(want[0]) < lines.index(want[-1]), 'initialize lines')
    c.check(not any('optimizer_param_scheduler' in l for l in lines), 'INFO dropped at level 30')
    rc, out, err = run([PRETRAIN, '--dry-run'] + TINY + ['--seed', '0'])
    c.check(rc == 1 and last(err) == 'ValueError: Seed (0) should be a positive integer.', 'seed 0')
    # Rank != 0 prints nothing on stdout.
    rc, out, err = run([PRETRAIN, '--dry-run'] + TINY, world_size=2, rank=1)
    c.check(rc == 0 and out == '', 'rank 1 silent: %r' % out[:200])
    # Under mpirun (no RANK/WORLD_SIZE) the launcher's variables give the layout.
    import os, subprocess
    env = {k: v for k, v in os.environ.items() if k not in ('RANK', 'WORLD_SIZE')}
    env.update({'OMPI_COMM_WORLD_RANK': '0', 'OMPI_COMM_WORLD_SIZE': '4'})
    out = subprocess.run([PRETRAIN, '--dry-run'] + TINY, stdout=subprocess.PIPE, env=env,
                         universal_newlines=True).stdout
    c.check(out.startswith('using world size: 4, data-parallel size: 4'), 'OpenMPI layout: %s' % out[:80])
    # LOCAL_RANK sets the --local-rank default, as Megatron's parser does.
    rc, out, err = run([PRETRAIN, '--dry-run'] + TINY, extra_env={'LOCAL_RANK': '3'})
    c.check('  local_rank ...................................... 3' in out, 'LOCAL_RANK default')


def check_pyfloat(c):
    rnd = random.Random(5)
    vals = [0.0, -0.0, 1.0, 0.1, 1e-5, 1e-4, 0.0001234, 1e16, 1e15, 123456789012345678.0,
            4294967296.0, 2.5e-4, 6e-05, 1.7976931348623157e308, 5e-324, float('inf'),
            -float('inf'), float('nan'), 51380224.0, 9.0]
    for _ in range(300):
        vals.append(struct.unpack('<d', struct.pack('<Q', rnd.getrandbits(63)))[0])
        vals.append(rnd.uniform(-1e6, 1e6))
        vals.append(float(np.float32(rnd.uniform(0, 1e-2))))
    vals = [v for v in vals if not (isinstance(v, float) and math.isnan(v) and v is not vals[17])]
    rc, out, err = run([DRIVER, 'pyfloat'] + [repr(v) for v in vals])
    got = out.split()
    bad = [(v, g) for v, g in zip(vals, got) if repr(v) != g]
    c.check(rc == 0 and len(got) == len(vals) and not bad, 'python float repr: %s' % bad[:5])


SPEC_LINE = (' [2025-01-01 12:00:04] iteration        5/      20 | consumed samples:           40 |'
             ' elapsed time per iteration (ms): 134.0 | learning rate: 9.913534E-04 |'
             ' global batch size:     8 | lm loss: 7.631606E+00 | loss scale: 1.0 |'
             ' grad norm: 0.474 | num zeros: 9.0 | number of skipped iterations:   0 |'
             ' number of nan iterations:   0 |')
SPEC_FP16 = (' | global batch size:     4 | loss scale: 2147483648.0 | number of skipped '
             'iterations:   2 | number of nan iterations:   2 |')
SPEC_BOX = ('----------------------------------------------------------------------------------------------\n'
            ' validation loss at iteration 10 | lm loss value: 3.867381E+00 | lm loss PPL: 4.781697E+01 | \n'
            '----------------------------------------------------------------------------------------------\n')


def python_line(f):
    """The training line built with Python's formatting of the same values (float32 where
    Megatron's values pass through float32 tensors)."""
    s = ' [2025-01-01 12:00:04]'
    s += ' iteration {:8d}/{:8d} |'.format(f['iteration'], f['train_iters'])
    s += ' consumed samples: {:12d} |'.format(f['consumed'])
    if f['skipped_samples'] > 0:
        s += ' skipped samples: {:12d} |'.format(f['skipped_samples'])
    s += ' elapsed time per iteration (ms): {:.1f} |'.format(f['elapsed'] * 1000.0)
    s += ' learning rate: {:.6E} |'.format(float(np.float32(f['lr'])))
    s += ' global batch size: {:5d} |'.format(f['batch'])
    avg = float(np.float32(f['loss0'])) / float(max(1, f['advanced']))
    if avg > 0.0:
        s += ' lm loss: {:.6E} |'.format(avg)
    s += ' loss scale: {:.1f} |'.format(f['loss_scale'])
    s += ' grad norm: {:.3f} |'.format(float(np.float32(f['grad_norm'])))
    s += ' num zeros: {} |'.format(float(f['num_zeros']))
    s += ' number of skipped iterations: {:3d} |'.format(f['skipped'])
    s += ' number of nan iterations: {:3d} |'.format(f['nan'])
    return s


def check_log(c):
    utc = {'TZ': 'UTC'}
    rc, out, err = run([DRIVER, 'logline', 'now=1735732804', 'iteration=5', 'train_iters=20',
                        'consumed=40', 'elapsed=0.134', 'lr=9.913534e-4', 'batch=8',
                        'loss0=7.631606', 'advanced=1', 'loss_scale=1.0', 'grad_norm=0.474',
                        'num_zeros=9'], extra_env=utc)
    c.check(out.rstrip('\n') == SPEC_LINE, 'spec training line:\n%s\n%s' % (out, SPEC_LINE))
    rc, out, err = run([DRIVER, 'logline', 'now=1735732804', 'iteration=4', 'train_iters=4',
                        'consumed=16', 'elapsed=0.1', 'lr=1e-3', 'batch=4', 'loss0=0',
                        'advanced=0', 'skipped=2', 'nan=2', 'loss_scale=2147483648'], extra_env=utc)
    c.check(out.rstrip('\n').endswith(SPEC_FP16), 'fp16 overflow line: %s' % out)
    rc, out, err = run([DRIVER, 'valbox', 'iteration 10', 'lm loss=3.8673805974128967'])
    c.check(out == SPEC_BOX, 'validation box:\n%s' % out)
    rnd = random.Random(3)
    bad = 0
    for _ in range(40):
        f = {'iteration': rnd.randint(1, 10**6), 'train_iters': rnd.randint(1, 10**7),
             'consumed': rnd.randint(0, 10**11), 'skipped_samples': rnd.choice([0, 0, 5]),
             'elapsed': rnd.uniform(0.001, 100), 'lr': rnd.uniform(1e-7, 1e-2),
             'batch': rnd.randint(1, 99999), 'loss0': rnd.uniform(0.5, 80),
             'advanced': rnd.randint(1, 100), 'loss_scale': rnd.choice([1.0, 65536.0]),
             'grad_norm': rnd.uniform(0, 50), 'num_zeros': rnd.randint(0, 10**9),
             'skipped': rnd.randint(0, 3), 'nan': rnd.randint(0, 3)}
        argv = [DRIVER, 'logline', 'now=1735732804'] + ['%s=%r' % (k, v) for k, v in f.items()]
        rc, out, err = run(argv, extra_env=utc)
        want = python_line(f)
        if out.rstrip('\n') != want:
            bad += 1
            if bad < 3:
                print('  got  %s\n  want %s' % (out.rstrip(), want))
    c.check(bad == 0, 'random training lines: %d differ' % bad)


def main():
    c = Checker('test_cli_behaviour')
    check_cli(c)
    check_usage(c)
    check_pyfloat(c)
    check_log(c)
    return c.summary()


if __name__ == '__main__':
    sys.exit(main())
