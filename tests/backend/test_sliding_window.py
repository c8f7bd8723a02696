"""MindSpeed-LLM's --sliding-window W in the CPU flash attention op pair (desc.window,
backend/cpu/flash_attention_cpu.c), against PyTorch run live (tests/drivers/flash_driver):
query i sees keys i - W .. i, MindSpeed's band (npu_fusion_attention sparse_mode 4 with
pre_tokens W, next_tokens 0; its unfused fallback masks tril(diagonal=-(W+1))).

- fp32 forward (ctx, lse) and backward (dqkv) against DotProductAttention's formula in float64
  by torch autograd with that band mask: within 1e-5 relative, for windows inside one tile,
  across tile edges and wider than a tile (BR = BC = 64), with GQA, dropout and
  --reset-attention-mask style documents (window and documents both apply); both tile kernel
  sets.
- the same results as the unfused op given the band as an explicit mask (what attention.c
  builds for it): 1e-6 for ctx, 4e-6 for dqkv (two fp32 sums in different orders).
- a window of s - 1 keys or more is plain causal attention, bit for bit.
The model (attention.c's mask, both paths) is checked against the PyTorch twin in
tests/parity (configs sliding_window, sliding_window_docs) and in tests/training/
test_sliding_window_train.py."""
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import test_flash_attention as F  # noqa: E402
from mc_test import check, summary  # noqa: E402

CASES = [  # (heads, groups, s, window, documents, dropout)
    (4, 4, 150, 5, False, 0.0),
    (6, 2, 150, 70, False, 0.0),
    (4, 1, 200, 130, True, 0.0),
    (4, 2, 150, 64, False, 0.1),
    (6, 3, 130, 63, True, 0.1),
]


def band(b, s, w, docs):
    causal = torch.ones(s, s, dtype=torch.bool).triu(1)
    outside = torch.ones(s, s, dtype=torch.bool).tril(-(w + 1))
    m = (causal | outside)[None].expand(b, s, s).clone()
    return m | docs if docs is not None else m


def outputs(tmp, shp_ctx, shp_qkv, b, heads, s, prefix=""):
    return (F.get(tmp, prefix + "ctx", shp_ctx, "float32"),
            F.get(tmp, prefix + "lse", (b, heads, s), "float32") if not prefix else None,
            F.get(tmp, prefix + "dqkv", shp_qkv, "float32"))


def one_case(tmp, gen, kernel_sets, heads, groups, s, w, docs, p):
    c = F.make_case(heads, groups, "causal" if not docs else "doc", p, 1.0, s=s)
    b, hn = c["b"], c["hn"]
    qkv, dctx = F.inputs(gen, c)
    dmask = F.doc_mask(b, s, gen) if docs else None
    mask = band(b, s, w, dmask)
    F.put(tmp, "qkv", qkv, "float32")
    F.put(tmp, "dctx", dctx, "float32")
    what = "h%d g%d s%d W=%d%s p=%g" % (heads, groups, s, w, " docs" if docs else "", p)
    shp_ctx, shp_qkv = (s, b, heads * hn), (s, b, (heads + 2 * groups) * hn)
    for kern in kernel_sets:
        print("fp32 %s, %s tile kernels" % (what, kern or "default"))
        # the unfused op with the band as its explicit mask: its keep mask and results
        F.put(tmp, "mask", mask.to(torch.uint8).contiguous(), "u8")
        ok = F.run(tmp, "float32", dict(c, causal=0), 2, unfused=1, kernels=kern)
        check(ok, "flash_driver (band mask) failed: " + what)
        if not ok:
            continue
        keep = F.get(tmp, "u_keep", (b, heads, s, s), "u8")
        u_ctx, _, u_dq = outputs(tmp, shp_ctx, shp_qkv, b, heads, s, "u_")
        # the flash op with window=W (and the documents as its mask)
        if docs:
            F.put(tmp, "mask", dmask.to(torch.uint8).contiguous(), "u8")
        ok = F.run(tmp, "float32", dict(c, causal=0 if docs else 1, window=w), 2, kernels=kern)
        check(ok, "flash_driver (window) failed: " + what)
        if not ok:
            continue
        ctx, lse, dq = outputs(tmp, shp_ctx, shp_qkv, b, heads, s)
        r_ctx, r_lse, r_dq = F.reference(qkv, dctx, c, mask, keep)
        F.close("ctx vs torch float64", ctx, r_ctx, 1e-5)
        F.close("lse vs torch float64", lse, r_lse, 1e-5)
        F.close("dqkv vs torch float64", dq, r_dq, 1e-5)
        F.normwise("ctx vs unfused op + band mask", ctx, u_ctx, 1e-6)
        F.normwise("dqkv vs unfused op + band mask", dq, u_dq, 4e-6)


def wide_window_is_causal(tmp, gen):
    c = F.make_case(4, 2, "causal", 0.0, 1.0, s=150)
    qkv, dctx = F.inputs(gen, c)
    F.put(tmp, "qkv", qkv, "float32")
    F.put(tmp, "dctx", dctx, "float32")
    outs = []
    for w in (0, 149, 1000):
        F.run(tmp, "float32", dict(c, window=w), 2)
        outs.append(b"".join(open(os.path.join(tmp, "out_%s.bin" % n), "rb").read()
                             for n in ("ctx", "lse", "dqkv")))
    check(outs[0] == outs[1] == outs[2], "window >= s - 1 is causal attention bit for bit")
    F.run(tmp, "float32", dict(c, window=148), 2)
    changed = b"".join(open(os.path.join(tmp, "out_%s.bin" % n), "rb").read()
                       for n in ("ctx", "lse", "dqkv"))
    check(changed != outs[0], "window s - 2 masks the first key of the last query")


def main():
    print("seed %d (MC_FLASH_SEED=%d repeats this run)" % (F.SEED, F.SEED))
    gen = torch.Generator().manual_seed(F.SEED)
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    kernel_sets = ["ref"] + ([None] if " avx2" in flags and " fma" in flags else [])
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            one_case(tmp, gen, kernel_sets if i % 2 == 0 else kernel_sets[-1:], *case)
        wide_window_is_causal(tmp, gen)
    return summary("test_sliding_window")


if __name__ == "__main__":
    sys.exit(main())
