"""tests/reference/mcdump.py: round trip of every dtype, and rejection of damaged files
(truncation at every byte, bad magic, bad version, trailing bytes). The C reader is checked by
tests/unit/debug/test_dump.c and against this writer by every parity test."""
import os
import struct
import sys
import tempfile

import numpy as np

from reference import mcdump

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print('FAIL', what)


d = tempfile.mkdtemp(prefix='mc_dump_')
p = os.path.join(d, 'a.dump')
src = {'w': np.random.RandomState(0).randn(3, 4).astype(np.float32),
       'tokens': np.arange(6, dtype=np.int64).reshape(2, 3),
       'i32': np.array([1, -2], dtype=np.int32), 'mask': np.array([[1, 0]], dtype=np.uint8),
       'half': np.array([1.5], dtype=np.float16), 'scalar': np.float32(1e-5), 'n': np.int64(7),
       'empty': np.zeros((0, 3), dtype=np.float32)}
mcdump.write(p, src)
got = mcdump.read(p)
check(list(got) == list(src), 'order kept')
for k, v in src.items():
    v = np.asarray(v)
    check(got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v), 'round trip ' + k)
raw = open(p, 'rb').read()
check(raw[:8] == b'MCDUMP\x00\x1a' and struct.unpack_from('<IIQ', raw, 8) == (1, 0, len(src)), 'header')
bad = os.path.join(d, 'bad.dump')
for cut in range(len(raw)):
    open(bad, 'wb').write(raw[:cut])
    try:
        mcdump.read(bad)
        check(False, 'truncated at %d accepted' % cut)
    except mcdump.DumpError:
        check(True, '')
for name, data in [('trailing', raw + b'\0'), ('magic', b'X' + raw[1:]),
                   ('version', raw[:8] + struct.pack('<I', 2) + raw[12:])]:
    open(bad, 'wb').write(data)
    try:
        mcdump.read(bad)
        check(False, name + ' accepted')
    except mcdump.DumpError as e:
        check(bad in str(e), name + ' message names the file')
print('test_mcdump: %d passed, %d failed' % (passed, failed))
sys.exit(1 if failed else 0)
