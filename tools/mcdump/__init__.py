"""Reader/writer for megatron.c tensor dumps (docs/formats/dump.md; C side: src/debug/dump.c),
for users' scripts, tools/megatron_dump_hooks.py and the tests (tests/reference/mcdump.py loads it).

A dump is an ordered mapping name -> tensor. Here it is a dict of numpy arrays (insertion order
kept); bf16 tensors read back as uint16 bit patterns (to_float32 widens them). Standard library
+ numpy only; torch tensors (bf16 included) are accepted by write.
"""
import os
import struct

import numpy as np

MAGIC = b'MCDUMP\x00\x1a'
VERSION = 1
MAX_DIMS = 8
MAX_NAME = 1024

# mc_dtype codes (include/megatron.h). bf16 has no numpy dtype: kept as raw uint16 words.
DTYPES = {0: np.dtype('<f4'), 1: np.dtype('<u2'), 2: np.dtype('<f2'), 3: np.dtype('<i4'),
          4: np.dtype('<i8'), 5: np.dtype('u1'), 6: np.dtype('<f8'), 7: np.dtype('<i2'),
          8: np.dtype('i1'), 9: np.dtype('?')}
# what write() stores each numpy dtype as (float64 is written as float32, bool as uint8, as
# the committed goldens were made)
CODES = {np.dtype('float32'): 0, np.dtype('float16'): 2, np.dtype('int32'): 3,
         np.dtype('int64'): 4, np.dtype('uint8'): 5, np.dtype('bool'): 5, np.dtype('int16'): 7,
         np.dtype('int8'): 8}


class DumpError(Exception):
    pass


def write(path, tensors, bf16=()):
    """Write dict name -> array-like to `path` (via path.tmp + rename). Names in `bf16` are uint16
    arrays holding bfloat16 bit patterns. torch tensors are accepted (converted with .numpy())."""
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(MAGIC + struct.pack('<IIQ', VERSION, 0, len(tensors)))
        for name, a in tensors.items():
            if hasattr(a, 'detach'):
                a = a.detach().cpu()
                if str(a.dtype) == 'torch.bfloat16':  # no numpy bf16: its bit patterns
                    import torch
                    a = a.contiguous().view(torch.int16).numpy().view('<u2')
                    bf16 = set(bf16) | {name}
                else:
                    a = a.numpy()
            a = np.asarray(a)
            if not a.flags.c_contiguous:  # (np.ascontiguousarray would turn scalars into 1-D)
                a = a.copy(order='C')
            if name in bf16:
                code = 1
                a = a.astype('<u2')
            elif a.dtype == np.float64:
                a = a.astype('<f4')
                code = 0
            else:
                if a.dtype not in CODES:
                    raise DumpError('%s: dtype %s has no dump code' % (name, a.dtype))
                code = CODES[a.dtype]
                a = a.astype(DTYPES[code])
            nb = name.encode()
            if not 0 < len(nb) < MAX_NAME or a.ndim > MAX_DIMS:
                raise DumpError('%s: bad name length or ndim %d' % (name, a.ndim))
            f.write(struct.pack('<I', len(nb)) + nb + struct.pack('<II', code, a.ndim))
            f.write(struct.pack('<%dq' % a.ndim, *a.shape))
            data = a.tobytes()
            f.write(struct.pack('<Q', len(data)) + data)
    os.replace(tmp, path)


def read(path):
    """Read a dump into an ordered dict name -> numpy array; DumpError naming path and tensor."""
    with open(path, 'rb') as f:
        buf = f.read()
    size = len(buf)
    if buf[:8] != MAGIC:
        raise DumpError('%s: bad magic (not a megatron.c dump)' % path)
    if size < 24:
        raise DumpError('%s: header truncated (%d bytes)' % (path, size))
    version, flags, count = struct.unpack_from('<IIQ', buf, 8)
    if version != VERSION or flags != 0:
        raise DumpError('%s: version %d flags %d, expected %d and 0' % (path, version, flags, VERSION))
    off = 24
    out = {}

    def need(n, what, i):
        if off + n > size:
            raise DumpError('%s: truncated in %s of tensor %d at byte %d of %d' % (path, what, i, off, size))

    for i in range(count):
        need(4, 'name length', i)
        (ln,) = struct.unpack_from('<I', buf, off); off += 4
        if not 0 < ln < MAX_NAME:
            raise DumpError('%s: tensor %d has name length %d' % (path, i, ln))
        need(ln + 8, 'name', i)
        name = buf[off:off + ln].decode(); off += ln
        code, ndim = struct.unpack_from('<II', buf, off); off += 8
        if code not in DTYPES or ndim > MAX_DIMS:
            raise DumpError('%s: tensor %s has dtype %d ndim %d' % (path, name, code, ndim))
        need(8 * ndim + 8, 'shape', i)
        shape = struct.unpack_from('<%dq' % ndim, buf, off); off += 8 * ndim
        (nbytes,) = struct.unpack_from('<Q', buf, off); off += 8
        dt = DTYPES[code]
        want = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes != want:
            raise DumpError('%s: tensor %s says %d bytes, shape %s needs %d' % (path, name, nbytes, shape, want))
        need(nbytes, 'data', i)
        if name in out:
            raise DumpError('%s: duplicate tensor %s' % (path, name))
        out[name] = np.frombuffer(buf, dtype=dt, count=want // dt.itemsize, offset=off).reshape(shape).copy()
        off += nbytes
    if off != size:
        raise DumpError('%s: %d trailing bytes after %d tensors' % (path, size - off, count))
    return out


def to_float32(a, code_is_bf16=False):
    """float32 copy of an array read from a dump; uint16 bf16 bit patterns when code_is_bf16."""
    a = np.asarray(a)
    if code_is_bf16:
        return (a.astype('<u4') << 16).view('<f4')
    return a.astype(np.float32)


def dtype_codes(path):
    """name -> dump dtype code of every tensor of `path` (tells bf16 from uint16)."""
    with open(path, 'rb') as f:
        buf = f.read()
    off, out = 24, {}
    (count,) = struct.unpack_from('<Q', buf, 16)
    for _ in range(count):
        (ln,) = struct.unpack_from('<I', buf, off); off += 4
        name = buf[off:off + ln].decode(); off += ln
        code, ndim = struct.unpack_from('<II', buf, off); off += 8 + 8 * ndim
        (nbytes,) = struct.unpack_from('<Q', buf, off); off += 8 + nbytes
        out[name] = code
    return out
