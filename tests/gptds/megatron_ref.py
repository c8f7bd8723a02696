"""Runs Megatron-LM core_v0.12.1's own GPT dataset code (BlendedMegatronDatasetBuilder,
GPTDataset, MockGPTDataset, BlendedDataset and the compiled helpers.cpp) on the CPU, as the
reference for megatron.c's datasets. Megatron is read from MEGATRON_ROOT (default
/work/ref/Megatron-LM); its megatron/ package is copied to a scratch directory outside the source
tree and helpers.cpp is compiled there with pybind11 (once per checkout, reused afterwards).

Usage as a script (a JSON list of jobs on stdin, a JSON list of results on stdout; one
process serves them all, so Megatron is imported once). A job:
  {"cache": DIR, "sizes": [..], "seq": N, "seed": S, "split": "969,30,1" | null,
   "blend": [tokens] | null, "blend_per_split": [[tokens] | null, x3] | null,
   "tokenizer": ["_GPT2BPETokenizer", ["vocab.json", "merges.txt"], {}], "eod": E, "pad": P,
   "flags": {"reset_position_ids": .., ...}, "dump": N, "dump_path": P}
"""
import hashlib, json, os, shutil, subprocess, sys, tempfile, types, contextlib

SYS_PY = '/usr/bin/python3'


def megatron_root():
    return os.environ.get('MEGATRON_ROOT', '/work/ref/Megatron-LM')


def available():
    return os.path.isfile(os.path.join(megatron_root(), 'megatron/core/datasets/helpers.cpp'))


def prepared_copy():
    """A scratch copy of megatron/ with helpers compiled; keyed by the helpers.cpp hash."""
    src = os.path.join(megatron_root(), 'megatron')
    h = hashlib.md5(open(os.path.join(src, 'core/datasets/helpers.cpp'), 'rb').read()).hexdigest()[:12]
    dst = os.path.join(tempfile.gettempdir(), f'mc_gptds_megatron_{h}')
    ds = os.path.join(dst, 'megatron/core/datasets')
    if os.path.isdir(ds) and any(f.startswith('helpers_cpp') and f.endswith('.so') for f in os.listdir(ds)):
        return dst
    tmp = dst + f'.tmp{os.getpid()}'
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, os.path.join(tmp, 'megatron'), ignore=shutil.ignore_patterns('*.so', '__pycache__'))
    env = dict(os.environ, PATH='/usr/bin:' + os.environ.get('PATH', ''))
    subprocess.run(['make', '-C', os.path.join(tmp, 'megatron/core/datasets')], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        os.rename(tmp, dst)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process won the race
    return dst


def _shims():
    """Only what importing megatron.core needs on this interpreter (no numerics involved)."""
    try:
        import packaging.version  # noqa: F401
    except ImportError:
        import re
        m = types.ModuleType('packaging'); v = types.ModuleType('packaging.version')
        class Version:
            def __init__(self, s): self.t = tuple(int(x) for x in re.findall(r'\d+', s.split('+')[0])[:3])
            def __lt__(s, o): return s.t < o.t
            def __le__(s, o): return s.t <= o.t
            def __gt__(s, o): return s.t > o.t
            def __ge__(s, o): return s.t >= o.t
            def __eq__(s, o): return s.t == o.t
        v.Version = Version; m.version = v
        sys.modules['packaging'] = m; sys.modules['packaging.version'] = v
    import torch, torch.distributed as dist
    if not hasattr(dist, '_coalescing_manager'):
        @contextlib.contextmanager
        def _cm(*a, **k):
            yield None
        dist._coalescing_manager = _cm
    torch.jit.script = lambda f=None, *a, **k: f
    # BlendedDataset asks for the rank even in a single process; rank 0 is what a one-process
    # torchrun would answer
    _get_rank = dist.get_rank
    dist.get_rank = lambda *a, **k: _get_rank(*a, **k) if dist.is_initialized() else 0


_ready = False


def run(job):
    global _ready
    if not _ready:
        sys.path.insert(0, prepared_copy())
        _shims()
        import logging
        logging.disable(logging.WARNING)
        _ready = True
    import numpy
    from megatron.core.datasets.megatron_tokenizer import MegatronTokenizer
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.utils import get_blend_from_list

    cls_name, paths, opts = job['tokenizer']
    eod, pad = job['eod'], job['pad']

    def _init(self, *a, **k):
        MegatronTokenizer.__init__(self, *a, **k)
    props = dict(__init__=_init, vocab_size=property(lambda s: 1 << 20),
                 vocab=property(lambda s: {}), inv_vocab=property(lambda s: {}),
                 tokenize=lambda s, t: [], detokenize=lambda s, i: '',
                 eod=property(lambda s: eod))
    if pad is not None:
        props['pad'] = property(lambda s: pad)
    Tok = type(cls_name, (MegatronTokenizer,), props)  # the class name is what gets hashed
    tok = Tok(*paths, **opts)

    flags = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    flags.update(job.get('flags', {}))
    bps = job.get('blend_per_split')
    cfg = GPTDatasetConfig(
        random_seed=job['seed'], sequence_length=job['seq'],
        blend=get_blend_from_list(job['blend']) if job.get('blend') else None,
        blend_per_split=[get_blend_from_list(b) if b else None for b in bps] if bps else None,
        split=job.get('split'), path_to_cache=job['cache'], tokenizer=tok,
        mmap_bin_files=True, **flags)
    cls = MockGPTDataset if cfg.mock else GPTDataset
    sizes = [None if s is None or s < 0 else s for s in job['sizes']]
    ds = BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, cfg).build()
    out = {'lens': [None if d is None else len(d) for d in ds],
           'hashes': [None if d is None else d.unique_description_hash for d in ds]}
    if job.get('dump'):
        for i, name in enumerate(['train', 'valid', 'test']):
            if ds[i] is None:
                continue
            with open(f"{job['dump_path']}.{name}.bin", 'wb') as f:
                for k in range(min(job['dump'], len(ds[i]))):
                    it = ds[i][k]
                    f.write(numpy.int32(int(it.get('dataset_id', 0))).tobytes())
                    f.write(it['tokens'].numpy().astype('<i8').tobytes())
                    f.write(it['labels'].numpy().astype('<i8').tobytes())
                    f.write(it['loss_mask'].numpy().astype('<f4').tobytes())
                    f.write(it['position_ids'].numpy().astype('<i8').tobytes())
                    if 'attention_mask' in it:
                        f.write(it['attention_mask'].numpy().astype('u1').tobytes())
    return out


if __name__ == '__main__':
    print(json.dumps([run(j) for j in json.load(sys.stdin)]))
