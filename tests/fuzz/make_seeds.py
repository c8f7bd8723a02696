"""Writes the fuzzing seeds of every target into OUTDIR/<target>/, with the Python standard
library only (no torch, no numpy): small valid files of each format, built from the project's
golden files (shrunk) or by hand from the format's definition, plus a few near-misses. The torch
checkpoint seeds come from tests/fuzz/seed_torch_load.c (our writer); tests/fuzz/make_corpus.sh
runs both, then minimizes the result into tests/fuzz/corpus/. Usage: make_seeds.py OUTDIR"""
import base64
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLD = os.path.join(ROOT, 'tests', 'golden')
SEP = b'\n#MCFUZZ#\n'  # MC_FUZZ_SEP of tests/fuzz/fuzz_common.h
out = sys.argv[1]


def put(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), 'wb') as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def gold(*p):
    with open(os.path.join(GOLD, *p), 'rb') as f:
        return f.read()


def small_bpe(tok, keep=320):
    """A tokenizer.json's BPE model cut to its first `keep` ids and the merges among them."""
    m = tok['model']
    vocab = {k: v for k, v in m['vocab'].items() if v < keep}
    merges = []
    for mg in m.get('merges', []):
        a, b = mg.split(' ', 1) if isinstance(mg, str) else mg
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(mg)
    m['vocab'], m['merges'] = vocab, merges
    tok['added_tokens'] = [t for t in tok.get('added_tokens', []) if t['id'] < keep or True][:4]
    return tok


# ---- JSON / JSONL --------------------------------------------------------------------------
for i, t in enumerate([
        '{"a": [1, -2.5e+3, true, false, null, "\\u00e9\\ud83d\\ude00\\n"], "b": {"c": {}}}',
        '[NaN, Infinity, -Infinity, 1e400, -0.0, 123456789012345678901234567890]',
        '{"k": 1, "k": 2, "\\u0000": "x\\"\\\\\\/\\b\\f\\r\\t"}', '"\xc3\xa9\xe4\xb8\xad"',
        '  [[[[[]]]]]  ']):
    put('json', f'seed{i}.json', t)
put('json', 'config.json', gold('convert', 'hf_llama', 'config.json'))
put('jsonl', 'lines.jsonl', '{"text": "Hello world, it\'s 2024!", "title": "t"}\n'
    '{"text": ["One sentence.", "", "Two \\u00e9"], "title": ["a"]}\r\n{"text": 5}\r'
    '{"title": "no text"}\n[1]\n{"text": "\xc3\xa9\xf0\x9f\x98\x80 <|endoftext|>"}')
put('jsonl', 'bad.jsonl', b'{"text": "\xff\xfe"}\n{"text": "a\\ud800"}\n{"text": "x",}\n')

# ---- .idx/.bin (Megatron's MMapIndexedDataset._Index layout) ---------------------------------
DT = {1: 'B', 2: 'b', 3: 'h', 4: 'i', 5: 'q', 6: 'd', 7: 'f', 8: 'H'}
for code, fmt in DT.items():
    lens, docs = [3, 1, 4], [0, 2, 3]
    size = struct.calcsize(fmt)
    ptrs = [0, 3 * size, 4 * size]
    idx = (b'MMIDIDX\x00\x00' + struct.pack('<QBQQ', 1, code, len(lens), len(docs)) +
           struct.pack(f'<{len(lens)}i', *lens) + struct.pack(f'<{len(ptrs)}q', *ptrs) +
           struct.pack(f'<{len(docs)}q', *docs))
    bin_ = struct.pack(f'<8{fmt}', *([1.5, 0, 7, 2, 9, 1, 4, 3] if fmt in 'df' else [1, 0, 7, 2, 9, 1, 4, 3]))
    put('indexed_dataset', f'dtype{code}', idx + SEP + bin_)

# ---- .npy (format 1.0, numpy.save's header padding) ------------------------------------------
def npy(descr, shape, data):
    shp = '(%s)' % (', '.join(map(str, shape)) + (',' if len(shape) == 1 else ''))
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shp)
    h += ' ' * (63 - (10 + len(h)) % 64) + '\n'
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() + data


put('npy', 'i4.npy', npy('<i4', [4], struct.pack('<4i', 0, 1, 2, -1)))
put('npy', 'i8_2d.npy', npy('<i8', [3, 2], struct.pack('<6q', 0, 0, 0, 5, 1, 2)))
put('npy', 'u4.npy', npy('<u4', [2], struct.pack('<2I', 1, 0xffffffff)))
put('npy', 'i2.npy', npy('<i2', [0], b''))

# ---- GPT-2 BPE vocab.json + merges.txt, HF tokenizer.json, tiktoken ---------------------------
# (each at two sizes: the small ones keep the committed corpora small, -merge=1 taking the
# smallest input that reaches an edge; the larger ones reach the merges between longer tokens)
for name in ('hf_gpt2', 'hf_llama3', 'hf_metaspace', 'hf_split_prefix'):
    for keep in (320, 48):
        tok = small_bpe(json.loads(gold('tokenizer', name, 'tokenizer.json')), keep)
        text = json.dumps(tok, ensure_ascii=False)
        tag = '' if keep == 320 else f'_{keep}'
        put('hf_tokenizer', name + tag, text.encode() + SEP + gold('tokenizer', name, 'tokenizer_config.json'))
        if name == 'hf_gpt2':
            m = tok['model']
            merges = '#version: 0.2\n' + ''.join(
                (mg if isinstance(mg, str) else ' '.join(mg)) + '\n' for mg in m['merges'])
            put('gpt2_bpe', 'gpt2' + tag, json.dumps(m['vocab']).encode() + SEP + merges.encode())
tt = json.loads(gold('tokenizer', 'tiktoken_vocab.json'))[:300]
put('tiktoken', 'ranks300.json', json.dumps(tt))
put('tiktoken', 'ranks40.json', json.dumps(tt[:40]))
put('tiktoken', 'short.json', json.dumps(tt[:5] + [{'rank': 5, 'token_bytes': base64.b64encode(b'\xff').decode(),
                                                    'token_str': ''}]))

# ---- SentencePiece .model (the project's goldens, the small ones) -----------------------------
for name in ('bpe_llama.model', 'bpe_suffix.model', 'uni_user.model'):
    put('sentencepiece', name, gold('tokenizer', 'spm', name))

# ---- --yaml-cfg ------------------------------------------------------------------------------
put('yaml_cfg', 'tiny_gpt.yaml', gold('cli', 'yaml', 'tiny_gpt.yaml'))
put('yaml_cfg', 'lists.yaml', 'num_layers: 2 # comment\nlr: 1.e-3\nsplit: "98,2,0"\n'
    'data_path: [1.0, a, "b"]\neval_iters:\n  - 3\nlanguage_model:\n  hidden_size: ${HOME}\n'
    'model_parallel:\n  tensor_model_parallel_size: 2\nfp16: yes\n')
put('yaml_cfg', 'flow_map.yaml', 'num_layers: 2\nbad: {x: 1}\n')

# ---- tracker file ----------------------------------------------------------------------------
for i, t in enumerate(['1000\n', 'release', ' 7 \r\n', '0', '-3', '12x', '99999999999999999999999']):
    put('tracker', f't{i}', t)

# ---- safetensors (+ index.json with a shard) -------------------------------------------------
def safetensors(tensors, meta=True):
    hdr, data = {}, b''
    if meta:
        hdr['__metadata__'] = {'format': 'pt'}
    for name, dt, shape, raw in tensors:
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr).encode()
    h += b' ' * (-len(h) % 8)
    return struct.pack('<Q', len(h)) + h + data


st = safetensors([('a', 'F32', [2, 2], struct.pack('<4f', 1, 2, 3, 4)),
                  ('b', 'F16', [3], b'\x00\x3c\x00\x40\x00\xc0'), ('c', 'BF16', [1], b'\x80\x3f'),
                  ('d', 'F64', [], struct.pack('<d', 2.5)), ('e', 'I64', [0], b''),
                  ('f', 'I32', [1], b'\x01\0\0\0'), ('g', 'I16', [1], b'\1\0'), ('h', 'I8', [1], b'\xff'),
                  ('i', 'U8', [1], b'\x07'), ('j', 'BOOL', [2], b'\x01\x00')])
put('safetensors', 'dtypes.safetensors', st)
put('safetensors', 'nometa.safetensors', safetensors([('x', 'F32', [1, 1, 1], b'\0\0\x80\x3f')], False))
idx = json.dumps({'metadata': {'total_size': 16},
                  'weight_map': {'model.embed_tokens.weight': 'model-00001-of-00002.safetensors',
                                 'model.norm.weight': 'model-00001-of-00002.safetensors'}})
# (the shard leaves the embedding out: 16 KB of it in every mutation would bloat the corpus)
put('hf_index', 'index', idx.encode() + SEP +
    safetensors([('model.norm.weight', 'F32', [16], bytes(64)), ('lm_head.weight', 'BF16', [1], b'\0\0')]))

# ---- HF config.json --------------------------------------------------------------------------
put('hf_config', 'llama.json', gold('convert', 'hf_llama', 'config.json'))
put('hf_config', 'gpt2.json', json.dumps({
    'architectures': ['GPT2LMHeadModel'], 'model_type': 'gpt2', 'n_embd': 16, 'n_head': 4,
    'n_layer': 2, 'n_positions': 32, 'n_inner': None, 'vocab_size': 256, 'layer_norm_epsilon': 1e-5,
    'activation_function': 'gelu_new', 'tie_word_embeddings': True}))

# ---- torch_dist checkpoint (.metadata pickle + .distcp chunks) -------------------------------
# The DCP classes are unpickled as stand-ins (no torch) that pickle back under their own names,
# so the goldens' .metadata can be cut down: without the save plans (planner_data,
# all_local_plans, mcore_data, which the reader never looks at), and with a few of the smallest
# chunks moved into fuzz.distcp, the input's second part, so that mutations reach chunk bytes.
import copyreg  # noqa: E402
import io  # noqa: E402
import pickle  # noqa: E402
import types  # noqa: E402


class _Stub:
    def __new__(cls, *a):
        o = object.__new__(cls)
        o._a, o._called, o._st = a, False, None
        return o

    def __init__(self, *a):
        self._called = True  # built by REDUCE (a call), not NEWOBJ

    def __setstate__(self, st):
        self._st = st

    def __reduce_ex__(self, proto):
        if self._called:
            return (type(self), self._a, self._st)
        return (copyreg.__newobj__, (type(self),) + self._a, self._st)


class _StubUnpickler(pickle.Unpickler):
    classes = {}

    def find_class(self, mod, name):
        if (mod, name) not in self.classes:
            c = type(name, (_Stub,), {'__module__': mod, '__qualname__': name})
            self.classes[(mod, name)] = c
            parts = mod.split('.')
            for i in range(1, len(parts) + 1):  # importable for the pickler: stand-in modules
                m = '.'.join(parts[:i])
                if m not in sys.modules or hasattr(sys.modules[m], '__file__'):
                    sys.modules[m] = types.ModuleType(m)
            setattr(sys.modules[mod], name, c)
        return self.classes[(mod, name)]


def dist_seed(case, moved_bytes):
    d = os.path.join('checkpointing', f'dist_{case}', 'save', 'iter_0000003')
    meta = _StubUnpickler(io.BytesIO(gold(d, '.metadata'))).load()
    for k in ('planner_data', 'all_local_plans', 'mcore_data'):
        meta._st[k] = None
    moved = b''
    for idx, info in sorted(meta._st['storage_data'].items(), key=lambda kv: kv[1]._st['length']):
        s = info._st
        if '_extra_state' in idx._st['fqn'] or len(moved) + s['length'] > moved_bytes:
            continue
        blob = gold(d, s['relative_path'])[s['offset']:s['offset'] + s['length']]
        s['relative_path'], s['offset'] = 'fuzz.distcp', len(moved)
        moved += blob
    return pickle.dumps(meta, protocol=4) + (SEP + moved if moved else b'')


put('dist_ckpt', 'metadata_tp1', gold('checkpointing', 'dist_gpt_tp1', 'save', 'iter_0000003', '.metadata'))
put('dist_ckpt', 'moved_tp1', dist_seed('gpt_tp1', 24000))
put('dist_ckpt', 'stripped_llama_tp2', dist_seed('llama_tp2', 0))
