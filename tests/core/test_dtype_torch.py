"""src/core/dtype.c's conversions against the real torch 1.13, bit for bit (through
tests/drivers/dtype_driver): float32 -> bfloat16 and -> float16 as Tensor.to gives them on
random bit patterns of every exponent and on the edge values (ties, the largest finite values
and what rounds past them, subnormals and the subnormal/normal seam, signed zeros, infinities,
quiet and signalling NaNs with payloads), every one of the 65536 bfloat16 and float16 patterns
back to float32 as Tensor.float gives them, and every integer dtype to float32."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

BUILD = os.environ.get("MC_BUILD_DIR", "build")
DRIVER = os.path.join(BUILD, "tests", "dtype_driver")


def run(op, arr, out_dtype, tmp):
    src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
    arr.tofile(src)
    p = subprocess.run([DRIVER, op, src, dst], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "%s: driver failed: %s" % (op, p.stderr))
    return np.fromfile(dst, dtype=out_dtype) if p.returncode == 0 else None


def same_bits(op, got, want, inputs):
    bad = np.nonzero(got != want)[0] if got is not None and got.shape == want.shape else [0]
    for i in bad[:5]:
        print("  %s: input 0x%x -> ours 0x%x, torch 0x%x" % (op, int(inputs[i]),
              int(got[i]) if got is not None and i < len(got) else -1, int(want[i])))
    check(len(bad) == 0, "%s: %d of %d differ from torch" % (op, len(bad), len(want)))


def f32_inputs():
    """Bit patterns of float32: random over all exponents, plus the edges of both formats."""
    rng = np.random.default_rng(1234)
    edges = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x00800000, 0x3f800000,
             0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, 0x7f800000, 0xff800000,
             0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fa12345, 0xffbfffff, 0x7fffffff,
             0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff,          # bf16 ties and neighbours
             0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000,  # f16 65504 .. inf
             0x38800000, 0x387fffff, 0x387fe000, 0x387ff000, 0x33800000,  # f16 normal/subnormal
             0x33000000, 0x33000001, 0x32ffffff, 0x33c00000, 0x34400000,  # f16 2^-25 ties
             0x3f801000, 0x3f803000, 0x3f801001, 0x3f800fff]              # f16 ties at 1
    near = []
    for e in edges:  # every neighbour within 2 ulps
        near += [(e + d) & 0xffffffff for d in range(-2, 3)]
    every_exp = (np.arange(512, dtype=np.uint32) << 23) | rng.integers(0, 1 << 23, 512, dtype=np.uint32)
    ties = (rng.integers(0, 1 << 16, 20000, dtype=np.uint32) << 16) | 0x8000   # bf16 halfway
    ties16 = (rng.integers(0, 1 << 19, 20000, dtype=np.uint32) << 13) | 0x1000  # f16 halfway
    rand = rng.integers(0, 1 << 32, 400000, dtype=np.uint64).astype(np.uint32)
    sub16 = rng.integers(0x33000000, 0x38800000, 50000, dtype=np.uint32)      # f16 subnormal range
    return np.concatenate([np.array(edges + near, dtype=np.uint32), every_exp, ties,
                           ties16, rand, sub16]).astype('<u4')


def main():
    with tempfile.TemporaryDirectory() as tmp:
        bits = f32_inputs()
        x = torch.from_numpy(bits.view(np.float32).copy())
        for op, tdt in (("f32_to_bf16", torch.bfloat16), ("f32_to_f16", torch.float16)):
            want = x.to(tdt).view(torch.int16).numpy().view('<u2')
            same_bits(op, run(op, bits, '<u2', tmp), want, bits)
        words = np.arange(65536, dtype=np.uint32).astype('<u2')
        for op, tdt in (("bf16_to_f32", torch.bfloat16), ("f16_to_f32", torch.float16)):
            want = torch.from_numpy(words.view(np.int16).copy()).view(tdt).float().numpy().view('<u4')
            same_bits(op, run(op, words, '<u4', tmp), want, words)
        rng = np.random.default_rng(7)
        ints = {"int64": np.concatenate([rng.integers(-2**63, 2**63 - 1, 5000, dtype=np.int64),
                                         np.array([2**24 + 1, 2**53 + 1, -2**63, 2**63 - 1,
                                                   (1 << 40) + (1 << 16)], dtype=np.int64)]),
                "int32": rng.integers(-2**31, 2**31 - 1, 5000, dtype=np.int64).astype(np.int32),
                "int16": np.arange(-2**15, 2**15, dtype=np.int16),
                "int8": np.arange(-128, 128, dtype=np.int8),
                "uint8": np.arange(256, dtype=np.uint8),
                "bool": np.array([0, 1, 1, 0], dtype=np.bool_),
                "float64": np.concatenate([rng.standard_normal(5000) * 1e3,
                                           np.array([1e300, -1e300, 1e-300, 2.0**-149 * 1.5,
                                                     np.inf, -np.inf, 3.4028235677973366e38],
                                                    dtype=np.float64)])}
        for name, a in ints.items():
            want = torch.from_numpy(a.copy()).float().numpy().view('<u4')
            same_bits(name + "_to_f32", run(name + "_to_f32", a, '<u4', tmp), want,
                      a.view(np.uint8) if a.dtype == np.bool_ else a)
    return summary("test_dtype_torch", "(%d float32 patterns)" % len(bits))


if __name__ == "__main__":
    sys.exit(main())
