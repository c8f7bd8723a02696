"""megatron.c's GPT datasets against Megatron-LM core_v0.12.1 run live (tests/gptds/megatron_ref.py):
for several seeds, sequence lengths, splits, epoch counts and blends, prepare_cache must write
exactly Megatron's cache files (names = MD5 of the description, description text, .npy bytes),
serve the same samples (tokens, labels, loss_mask, position_ids, attention_mask, dataset_id),
reuse Megatron's cache without rebuilding (and Megatron must reuse ours), and stop with an error
where Megatron would hang (a split without tokens)."""
import hashlib, json, os, shutil, subprocess, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_ref  # noqa: E402

BUILD = os.environ.get('MC_BUILD_DIR', 'build')
TOOL = os.path.abspath(os.path.join(BUILD, 'bin', 'prepare_cache'))
GOLDEN = os.path.join(os.environ.get('MC_SOURCE_DIR', os.path.join(os.path.dirname(__file__), '..', '..')),
                      'tests', 'golden', 'gptds', 'caches.json')
PY = '/usr/bin/python3'
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print('FAIL:', what, flush=True)


def write_indexed(prefix, lengths, rng, dtype=np.uint16, eod=50256):
    """A .bin/.idx pair in Megatron's format (spec 1.2); every non-empty sequence ends in eod."""
    code = {np.uint16: 8, np.int32: 4}[dtype]
    toks = []
    for n in lengths:
        t = rng.integers(0, 50000, size=n)
        if n:
            t[-1] = eod
        if n > 6:
            t[n // 2] = eod  # an eod inside: exercises reset_position_ids / reset_attention_mask
        toks.append(t.astype(dtype))
    data = np.concatenate(toks) if toks else np.zeros(0, dtype)
    with open(prefix + '.bin', 'wb') as f:
        f.write(data.tobytes())
    lens = np.array(lengths, dtype=np.int32)
    ptr = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        ptr[1:] = np.cumsum(lens[:-1].astype(np.int64)) * np.dtype(dtype).itemsize
    docs = np.arange(len(lengths) + 1, dtype=np.int64)
    with open(prefix + '.idx', 'wb') as f:
        f.write(b'MMIDIDX\x00\x00')
        f.write(np.uint64(1).tobytes())
        f.write(np.uint8(code).tobytes())
        f.write(np.uint64(len(lengths)).tobytes())
        f.write(np.uint64(len(docs)).tobytes())
        f.write(lens.tobytes()); f.write(ptr.tobytes()); f.write(docs.tobytes())


def sizes_for(train_iters, gbs, eval_interval, eval_iters):
    return [train_iters * gbs, (train_iters // eval_interval + 1) * eval_iters * gbs, eval_iters * gbs]


def run_megatron(jobs):
    """All jobs in one Megatron process (a hang, e.g. an empty split, times out)."""
    r = subprocess.run([PY, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'megatron_ref.py')],
                       input=json.dumps(jobs), capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(r.stderr[-3000:])
        raise SystemExit('Megatron reference run failed')
    return json.loads(r.stdout.strip().splitlines()[-1])


# prepare_cache takes pretrain_gpt's whole command line (validate_args needs a model shape).
MODEL = ['--num-layers', '1', '--hidden-size', '8', '--num-attention-heads', '1',
         '--max-position-embeddings', '4096', '--micro-batch-size', '1']


# Mock data, which prepare_cache refuses as Megatron's does, goes through the dataset driver.
DRIVER = os.path.abspath(os.path.join(BUILD, 'tests', 'gptds_driver'))


def run_c(args):
    if '--mock-data' in args:
        return subprocess.run([DRIVER] + args, capture_output=True, text=True)
    return subprocess.run([TOOL] + MODEL + args, capture_output=True, text=True)


def snapshot(d):
    if not os.path.isdir(d):
        return {}
    return {f: open(os.path.join(d, f), 'rb').read() for f in sorted(os.listdir(d))}


def compare_dumps(a, b, what):
    for split in ['train', 'valid', 'test']:
        pa, pb = f'{a}.{split}.bin', f'{b}.{split}.bin'
        ea, eb = os.path.exists(pa), os.path.exists(pb)
        check(ea == eb, f'{what}: {split} dump presence {ea} vs {eb}')
        if ea and eb:
            da, db = open(pa, 'rb').read(), open(pb, 'rb').read()
            check(len(da) > 0 and da == db, f'{what}: {split} samples differ ({len(da)} vs {len(db)} bytes)')


CASES = []


def case(name, work, c_args, job, n_dump=24):
    """Queued; see verify()."""
    dm = os.path.join(work, name, 'meg')
    os.makedirs(os.path.dirname(dm), exist_ok=True)
    CASES.append((name, work, c_args, dict(job, cache=dm, dump=n_dump,
                                           dump_path=os.path.join(work, name, 'dm')), n_dump))


def verify(name, work, c_args, job, n_dump, ref):
    """Megatron and megatron.c build caches in separate directories: same files, same bytes,
    same samples; megatron.c reuses Megatron's cache (Megatron reusing ours: reuse_by_megatron)."""
    dm, dc = os.path.join(work, name, 'meg'), os.path.join(work, name, 'c')
    r = run_c(c_args + ['--data-cache-path', dc, '--dump-samples', str(n_dump),
                        '--dump-path', os.path.join(work, name, 'dc')])
    check(r.returncode == 0, f'{name}: prepare_cache failed: {r.stderr}')
    if r.returncode:
        return
    got = {}
    for line in r.stdout.splitlines():
        if not line.startswith(('train:', 'valid:', 'test:')):
            continue  # validate_args' report
        split, rest = line.split(':', 1)
        got[split] = None if 'not built' in rest else (int(rest.split()[0]), rest.split()[-1])
    for i, split in enumerate(['train', 'valid', 'test']):
        want = None if ref['lens'][i] is None else (ref['lens'][i], ref['hashes'][i])
        check(got.get(split) == want, f'{name}: {split} length/hash {got.get(split)} vs Megatron {want}')
    sm, sc = snapshot(dm), snapshot(dc)
    check(sorted(sm) == sorted(sc), f'{name}: cache file names differ:\n  {sorted(sm)}\n  {sorted(sc)}')
    for f in sm:
        if f in sc:
            check(sm[f] == sc[f], f'{name}: {f} bytes differ')
    compare_dumps(os.path.join(work, name, 'dm'), os.path.join(work, name, 'dc'), name)
    # megatron.c loads Megatron's cache: nothing rebuilt or rewritten, same samples
    dx = os.path.join(work, name, 'x')
    shutil.copytree(dm, dx)
    before = {f: os.stat(os.path.join(dx, f)).st_mtime_ns for f in os.listdir(dx)}
    r = run_c(c_args + ['--data-cache-path', dx, '--dump-samples', str(n_dump),
                        '--dump-path', os.path.join(work, name, 'dx')])
    check(r.returncode == 0, f'{name}: prepare_cache on Megatron cache failed: {r.stderr}')
    after = {f: os.stat(os.path.join(dx, f)).st_mtime_ns for f in os.listdir(dx)}
    check(before == after, f'{name}: megatron.c rewrote files of a Megatron cache')
    compare_dumps(os.path.join(work, name, 'dm'), os.path.join(work, name, 'dx'), name + ' (loaded)')


def reuse_by_megatron(results):
    """Megatron loads megatron.c's caches (copies) without rebuilding or rewriting a file."""
    jobs, stamps = [], []
    for (name, work, _, job, _), ref in zip(CASES, results):
        dc, dy = os.path.join(work, name, 'c'), os.path.join(work, name, 'y')
        if not os.path.isdir(dc):
            continue
        shutil.copytree(dc, dy)
        stamps.append((name, dy, ref, {f: os.stat(os.path.join(dy, f)).st_mtime_ns for f in os.listdir(dy)}))
        jobs.append(dict(job, cache=dy, dump=0))
    for (name, dy, ref, before), ref2 in zip(stamps, run_megatron(jobs)):
        after = {f: os.stat(os.path.join(dy, f)).st_mtime_ns for f in os.listdir(dy)}
        check(before == after and ref2['hashes'] == ref['hashes'], f'{name}: Megatron rebuilt from our cache')


def digest(work, name, cache, dump):
    """sha256 of every cache file and sample dump of one side of a case."""
    out, d = {}, os.path.join(work, name, cache)
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        out[f] = hashlib.sha256(open(os.path.join(d, f), 'rb').read()).hexdigest()
    for split in ['train', 'valid', 'test']:
        p = os.path.join(work, name, f'{dump}.{split}.bin')
        if os.path.exists(p):
            out[f'samples.{split}'] = hashlib.sha256(open(p, 'rb').read()).hexdigest()
    return out


def c_only(name, work, c_args, job, n_dump):
    """Without Megatron: run megatron.c alone (compared with the committed goldens)."""
    r = run_c(c_args + ['--data-cache-path', os.path.join(work, name, 'c'), '--dump-samples',
                        str(n_dump), '--dump-path', os.path.join(work, name, 'dc')])
    check(r.returncode == 0, f'{name}: prepare_cache failed: {r.stderr}')


def main():
    live = megatron_ref.available()
    if not os.path.exists(TOOL):
        print(f'missing {TOOL}: build first'); return 1
    golden = json.load(open(GOLDEN)) if os.path.exists(GOLDEN) else None
    if not live and golden is None:
        print(f'test_gptds_megatron: SKIPPED (no Megatron-LM at {megatron_ref.megatron_root()} and no {GOLDEN})')
        return 0
    if live:
        megatron_ref.prepared_copy()
    else:
        print(f'no Megatron-LM at {megatron_ref.megatron_root()}: comparing with the goldens only')
    work = tempfile.mkdtemp(prefix='mc_gptds_')
    cwd = os.getcwd()
    os.chdir(work)  # relative data prefixes: the descriptions (and hashes) do not depend on work
    try:
        rng = np.random.default_rng(5)
        a, b, c = 'a', 'b', 'c'
        la = list(rng.integers(1, 200, size=700)); la[3] = 0; la[50] = 0  # empty sequences too
        write_indexed(a, la, rng)
        write_indexed(b, list(rng.integers(1, 90, size=1200)), rng, dtype=np.int32)
        write_indexed(c, list(rng.integers(20, 100, size=600)), rng)
        gpt2 = ['--tokenizer-type', 'GPT2BPETokenizer', '--vocab-file', 'vocab.json', '--merge-file', 'merges.txt']
        tok = ['_GPT2BPETokenizer', ['vocab.json', 'merges.txt'], {}]
        base = dict(tokenizer=tok, eod=50256, pad=None)

        def std(name, data_c, data_job, seq, seed, iters, gbs, interval, evals, split='969,30,1',
                extra=(), flags=None, per_split=None, pad=None, n_dump=24):
            args = ['--seq-length', str(seq), '--seed', str(seed), '--train-iters', str(iters),
                    '--global-batch-size', str(gbs), '--eval-interval', str(interval),
                    '--eval-iters', str(evals)] + gpt2 + list(extra)
            job = dict(base, seq=seq, seed=seed, sizes=sizes_for(iters, gbs, interval, evals),
                       flags=flags or {}, pad=pad)
            if per_split:
                for opt, toks in zip(['--train-data-path', '--valid-data-path', '--test-data-path'], per_split):
                    if toks:
                        args += [opt] + toks
                job.update(blend_per_split=per_split, split=None)
            else:
                args += ['--data-path'] + data_c + ['--split', split]
                job.update(blend=data_job, split=split)
            case(name, work, args, job, n_dump=n_dump)

        # single dataset: one epoch, several epochs with and without a separate final epoch
        std('single_1epoch', [a], [a], 32, 1234, 20, 8, 10, 2)
        std('single_epochs_sep', [a], [a], 64, 7, 300, 8, 100, 2, split='98,2,0')
        std('single_epochs_nosep', [b], [b], 16, 42, 800, 8, 1000, 1, split='100,0,0')
        std('split_spaces', [a], [a], 48, 31337, 30, 4, 10, 3, split='969, 30, 1')
        std('flags', [a], [a], 32, 3, 10, 4, 5, 2,
            extra=['--reset-position-ids', '--reset-attention-mask', '--eod-mask-loss'],
            flags=dict(reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True))
        std('no_attn_mask', [c], [c], 24, 11, 10, 4, 5, 2, split='8,1,1',
            extra=['--no-create-attention-mask-in-dataloader'], flags=dict(create_attention_mask=False))
        # blends: weighted (margins, double normalization), unweighted (lengths), with one weight
        std('blend_weighted', ['0.3', a, '0.5', b, '0.2', c], ['0.3', a, '0.5', b, '0.2', c], 32, 1234, 40, 8, 20, 2)
        std('blend_unweighted', [a, b, c], [a, b, c], 16, 99, 20, 8, 10, 2, split='90,5,5')
        std('blend_single_weight', ['2', b], ['2', b], 32, 5, 10, 8, 5, 1)
        # blend per split: single prefix (plain GPTDataset even with a weight) and weighted blends
        std('per_split', None, None, 32, 17, 20, 4, 10, 2,
            per_split=[['0.7', a, '0.3', b], [c], ['1', b]])
        std('per_split_unweighted', None, None, 16, 8, 20, 4, 10, 2, per_split=[[a, c], [b, c], None])
        # GPTDatasetConfig fields the CLI does not expose: no extra token (samples do not share
        # a token) and a kept partial validation sequence (float32 ceil, padding), with a real pad
        # id (it also masks and zeroes genuine tokens of that id); eod_mask_loss keeps Megatron
        # off its cached-mask path (spec 4.6)
        std('no_extra_token', [a], [a], 32, 77, 20, 4, 10, 2,
            extra=['--no-add-extra-token-to-sequence', '--eod-mask-loss'],
            flags=dict(add_extra_token_to_sequence=False, eod_mask_loss=True))
        std('partial_valid', [b], [b], 24, 78, 20, 4, 10, 5, split='90,9,1',
            extra=['--keep-partial-validation-sequence', '--pad-id', '17', '--eod-mask-loss'],
            flags=dict(drop_last_partial_validation_sequence=False, eod_mask_loss=True), pad=17,
            n_dump=400)
        # other tokenizers' descriptions (NullTokenizer: eod = V; SentencePiece: its model path)
        job = dict(base, seq=16, seed=5, sizes=sizes_for(10, 4, 5, 1), flags={}, split='969,30,1',
                   blend=[a], tokenizer=['_NullTokenizer', [None], {'vocab_size': 50300}], eod=50300)
        case('null_tokenizer', work, ['--data-path', a, '--split', '969,30,1', '--seq-length', '16',
                                      '--seed', '5', '--train-iters', '10', '--global-batch-size', '4',
                                      '--eval-interval', '5', '--eval-iters', '1',
                                      '--tokenizer-type', 'NullTokenizer', '--vocab-size', '50300'], job)
        job = dict(base, seq=16, seed=6, sizes=sizes_for(10, 4, 5, 1), flags={}, split='969,30,1',
                   blend=[a], tokenizer=['_Llama2Tokenizer', ['tok/llama.model'], {'vocab_extra_ids': 0}])
        case('llama2_tokenizer', work, ['--data-path', a, '--split', '969,30,1', '--seq-length', '16',
                                        '--seed', '6', '--train-iters', '10', '--global-batch-size', '4',
                                        '--eval-interval', '5', '--eval-iters', '1', '--eod-id', '50256',
                                        '--tokenizer-type', 'Llama2Tokenizer',
                                        '--tokenizer-model', 'tok/llama.model'], job)
        # blends read from files (--data-args-path, --per-split-data-args-path)
        fa = 'blend.txt'
        open(fa, 'w').write(f'0.25 {a}\n 0.75\t{c}\n')
        job = dict(base, seq=32, seed=21, sizes=sizes_for(20, 4, 10, 2), flags={}, split='969,30,1',
                   blend=['0.25', a, '0.75', c])
        case('data_args_path', work, ['--data-args-path', fa, '--split', '969,30,1', '--seq-length', '32',
                                      '--seed', '21', '--train-iters', '20', '--global-batch-size', '4',
                                      '--eval-interval', '10', '--eval-iters', '2'] + gpt2, job)
        fj = 'per_split.json'
        json.dump({'train': f'0.5 {a} 0.5 {c}', 'valid': [b], 'test': None}, open(fj, 'w'))
        job = dict(base, seq=16, seed=22, sizes=sizes_for(20, 4, 10, 2), flags={}, split=None,
                   blend_per_split=[['0.5', a, '0.5', c], [b], None])
        case('per_split_args_path', work, ['--per-split-data-args-path', fj, '--seq-length', '16',
                                           '--seed', '22', '--train-iters', '20', '--global-batch-size', '4',
                                           '--eval-interval', '10', '--eval-iters', '2'] + gpt2, job)
        # mock data: MockGPTDataset from numpy's default_rng(0) document lengths
        d = os.path.join(work, 'mock')
        job = dict(base, seq=16, seed=1234, sizes=sizes_for(10, 4, 5, 2), flags={}, split=None, blend=None)
        case('mock', work, ['--mock-data', '--seq-length', '16', '--seed', '1234', '--train-iters', '10',
                            '--global-batch-size', '4', '--eval-interval', '5', '--eval-iters', '2'] + gpt2,
             job, n_dump=8)
        # prepare_cache refuses mock data and a missing cache path with Megatron's messages
        # (main's tools/prepare_cache.py), after parsing and validating the whole command line
        r = subprocess.run([TOOL] + MODEL + ['--mock-data', '--seq-length', '16', '--train-iters', '10',
                            '--data-cache-path', 'mc'] + gpt2, capture_output=True, text=True)
        check(r.returncode == 1 and r.stderr.splitlines()[-1:] ==
              ['ValueError: --mock-data is not supported by tools/prepare_cache.py'],
              f'--mock-data refused: rc {r.returncode}, stderr {r.stderr[-300:]!r}')
        r = subprocess.run([TOOL] + MODEL + ['--data-path', 'e', '--seq-length', '16', '--train-iters',
                            '10'] + gpt2, capture_output=True, text=True)
        check(r.returncode == 1 and r.stderr.splitlines()[-1:] ==
              ['ValueError: --data-cache-path must be provided for cache preparation'],
              f'--data-cache-path required: rc {r.returncode}, stderr {r.stderr[-300:]!r}')
        r = subprocess.run([TOOL, '--data-path', 'e', '--seq-length', '16', '--train-iters', '10',
                            '--data-cache-path', 'mc'] + gpt2, capture_output=True, text=True)
        # (without a model shape: validate_args' first check, Megatron's bare micro-batch assert)
        check(r.returncode == 1 and r.stderr.splitlines()[-1:] == ['AssertionError'],
              f'validate_args runs: rc {r.returncode}, stderr {r.stderr[-300:]!r}')
        # an empty split (round(0.999 * 300) == 300): Megatron hangs, we stop with an error
        e = 'e'
        write_indexed(e, [10] * 300, rng)
        r = run_c(['--data-path', e, '--split', '969,30,1', '--seq-length', '8', '--train-iters', '5',
                   '--global-batch-size', '2', '--eval-iters', '1', '--eval-interval', '5',
                   '--data-cache-path', os.path.join(work, 'ecache')] + gpt2)
        check(r.returncode != 0 and 'test split' in r.stderr and '0 tokens' in r.stderr,
              f'empty split: rc {r.returncode}, stderr {r.stderr!r}')
        if live:
            results = run_megatron([cs[3] for cs in CASES])
            for cs, ref in zip(CASES, results):
                verify(*cs, ref)
            reuse_by_megatron(results)
        else:
            for cs in CASES:
                c_only(*cs)
        if live and os.environ.get('MC_GPTDS_WRITE_GOLDEN'):
            golden = {cs[0]: digest(work, cs[0], 'meg', 'dm') for cs in CASES}
            with open(GOLDEN + '.tmp', 'w') as f:
                json.dump(golden, f, indent=1, sort_keys=True)
            os.replace(GOLDEN + '.tmp', GOLDEN)
            print('wrote', GOLDEN)
        if golden is not None:  # megatron.c against Megatron's recorded outputs
            for cs in CASES:
                got, want = digest(work, cs[0], 'c', 'dc'), golden.get(cs[0])
                check(got == want, f'{cs[0]}: differs from the golden {GOLDEN}')
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)
    print(f'test_gptds_megatron: {passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
