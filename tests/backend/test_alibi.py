"""MindSpeed-LLM's ALiBi (--position-embedding-type alibi, --square-alibi-mask, --fill-neg-inf)
in the CPU attention op pairs (desc.alibi_slopes: backend/cpu/attention_cpu.c, the unfused
composition, and flash_attention_cpu.c, the tiles), against PyTorch run live on fresh random
inputs (tests/drivers/flash_driver; the seed is printed, MC_FLASH_SEED repeats a run).

The reference is written here from MindSpeed's documented formula (alibi_feature.py,
tasks/models/common/alibi.py, core/transformer/alibi_attention.py), in float64 by autograd:
- slopes: for n heads with p = 2^floor(log2 n), heads 0 .. p - 1 get 2^(-8 (k + 1) / p) and
  heads p .. n - 1 the odd-numbered ones of the 2p set, 2^(-8 (2m + 1) / (2p)); a
  tensor-parallel rank takes the slopes of its global heads (checked to 1 fp32 ulp, including
  Baichuan2's 40 heads split over 8 ranks);
- the bias of query i, key j: slope * (j - i) for --square-alibi-mask, else slope * j (the
  [1, s] row form);
- the row form (MindSpeed's unfused non-square path): scores = q k^T / norm_factor + bias / layer,
  FusedScaleMaskSoftmax (x layer, masked_fill -10000, softmax); with --fill-neg-inf the bias
  also holds -inf on the future keys first;
- the square form with --fill-neg-inf (MindSpeed's square path): the mask is in the bias as
  -inf (every masked key, documents too), scores clamped at finfo.min, softmax; without
  --fill-neg-inf the causal mask is applied as by the row form (MindSpeed's flash path does;
  its unfused square path would attend to future keys: COMPATIBILITY.md).
Checked: fp32 ctx, lse and dqkv of both op pairs within 1e-5 relative (2.5e-5 for the row
form's ctx and dqkv, whose scores are ~50); flash = unfused within
1e-6 / 4e-6 (sum orders; 5e-6 / 8e-6 for the row form, whose scores carry slope * j); --fill-neg-inf on and off bit for bit the same; the row and square
forms within 1e-5 of each other (softmax ignores a row's constant); causal, documents, GQA,
dropout, query-key layer scaling, head counts that are not powers of two, heads of a
tensor-parallel rank (head_first > 0), tiles crossing (s 150, 64-wide tiles). bf16 (Baichuan2's
dtype): both op pairs within 2e-2 (max error over max |value|) of the float64 formula on the
rounded inputs with the bias rounded to bf16 as MindSpeed's tensor."""
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import test_flash_attention as F  # noqa: E402
from mc_test import check, summary  # noqa: E402

# (heads of this rank, groups, heads_total, head_first, mask kind, square, dropout, mult, s)
CASES = [
    (5, 5, 5, 0, "causal", True, 0.0, 1.0, 150),     # 5 heads: not a power of two
    (6, 2, 6, 0, "causal", False, 0.0, 1.0, 100),    # GQA, row form
    (4, 4, 12, 4, "doc", True, 0.0, 1.0, 130),       # tp rank 1 of 3 (12 heads)
    (3, 3, 6, 3, "causal", False, 0.1, 2.0, 100),    # tp rank 1 of 2, dropout, layer scaling
    (5, 1, 40, 35, "causal", True, 0.0, 1.0, 70),    # Baichuan2: rank 7 of 8, MQA
]


def slopes_ref(n):
    """float64 slopes of n heads from the closed form (see the module notes)."""
    p = 2 ** int(math.floor(math.log2(n)))
    out = [2.0 ** (-8.0 * (k + 1) / p) for k in range(p)]
    out += [2.0 ** (-8.0 * (2 * m + 1) / (2 * p)) for m in range(n - p)]
    return out


def reference(qkv, dctx, c, mask, keep, slopes, square, neg_inf):
    """ctx, lse and dqkv in float64; mask [b, s, s] True = masked (causal or documents)."""
    b, s, heads, groups, hn = c["b"], c["s"], c["heads"], c["groups"], c["hn"]
    pg = heads // groups
    x = qkv.double().requires_grad_(True)
    q, k, v = torch.split(x.view(s, b, groups, (pg + 2) * hn), [pg * hn, hn, hn], dim=3)
    q = q.reshape(s, b, heads, hn).permute(1, 2, 0, 3)
    k = k.repeat_interleave(pg, dim=2).permute(1, 2, 0, 3)
    v = v.repeat_interleave(pg, dim=2).permute(1, 2, 0, 3)
    # MindSpeed's bias is an fp32 tensor (fp32 slopes times the integer distances): made so,
    # then widened
    sl = torch.tensor(slopes, dtype=torch.float32).view(heads, 1, 1)
    i = torch.arange(s).view(s, 1)
    j = torch.arange(s).view(1, s)
    bias = (sl * (j - i) if square else sl * j.expand(s, s)).double()      # [heads, s, s]
    future = torch.ones(s, s, dtype=torch.bool).triu(1)
    mult = c["mult"]
    raw = (q @ k.transpose(-1, -2)) * c["alpha"]                 # q k^T / norm_factor
    if square and neg_inf:
        pse = bias[None].masked_fill(mask[:, None], float("-inf"))  # the mask inside the bias
        sc = (raw + pse / mult) * mult
        lse_in = sc.masked_fill(mask[:, None], -10000.0)         # what the op's lse sums
        sc = torch.max(sc, torch.tensor(torch.finfo(torch.float64).min, dtype=torch.float64))
    else:
        if neg_inf:
            bias = bias.masked_fill(future, float("-inf"))
        sc = (raw + bias[None] / mult) * mult
        sc = sc.masked_fill(mask[:, None], -10000.0)
        lse_in = sc
    lse = torch.logsumexp(lse_in, dim=-1)
    p = torch.softmax(sc, dim=-1)
    if c["p"] > 0:
        p = p * keep.double() / (1.0 - c["p"])
    ctx = (p @ v).permute(2, 0, 1, 3).reshape(s, b, heads * hn)
    ctx.backward(dctx.double())
    return ctx.detach(), lse.detach(), x.grad


def check_slopes(tmp):
    """The C slopes (mc_tfm_alibi_slopes via the driver) against the closed form: every head of
    n heads, and the heads of a tensor-parallel rank (Baichuan2: 40 heads, tp 8)."""
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for total, heads, first in [(n, n, 0) for n in (1, 2, 5, 6, 8, 12, 16, 40, 48, 96)] + \
            [(40, 5, 35), (40, 5, 5), (12, 4, 8), (6, 3, 3)]:
        c = dict(F.make_case(heads, 1, "causal", 0.0, 1.0, s=2, b=1, hn=2), alibi=2,
                 heads_total=total, head_first=first)
        qkv, dctx = F.inputs(gen, c)
        F.put(tmp, "qkv", qkv, "float32")
        F.put(tmp, "dctx", dctx, "float32")
        if not F.run(tmp, "float32", c, 1):
            check(False, "flash_driver failed (slopes of %d heads)" % total)
            continue
        got = np.fromfile(os.path.join(tmp, "out_slopes.bin"), dtype=np.float32).astype(float)
        ref = slopes_ref(total)[first:first + heads]
        err = max(abs(g - r) / r for g, r in zip(got, ref))
        worst = max(worst, err)
        check(len(got) == heads and err <= 1.2e-7, "slopes of heads %d.. of %d: %s, want %s" % (
            first, total, got[:6], ref[:6]))
    print("slopes (1..96 heads, tp slices): worst relative error %.2e (bound 1.2e-07)" % worst)


def one_case(tmp, gen, kernel_sets, heads, groups, total, first, kind, square, p, mult, s):
    c = F.make_case(heads, groups, kind, p, mult, s=s)
    b, hn = c["b"], c["hn"]
    qkv, dctx = F.inputs(gen, c)
    mask = F.mask_of(kind, c, gen)
    F.put(tmp, "qkv", qkv, "float32")
    F.put(tmp, "dctx", dctx, "float32")
    F.put(tmp, "mask", mask.to(torch.uint8).contiguous(), "u8")
    slopes = slopes_ref(total)[first:first + heads]
    what = "h%d/%d from %d g%d %s %s p=%g mult=%g s%d" % (
        heads, total, first, groups, kind, "square" if square else "row", p, mult, s)
    shp_ctx, shp_qkv = (s, b, heads * hn), (s, b, (heads + 2 * groups) * hn)
    ac = dict(c, alibi=2 if square else 1, heads_total=total, head_first=first)
    for kern in kernel_sets:
        print("fp32 %s, %s tile kernels" % (what, kern or "default"))
        if not F.run(tmp, "float32", ac, 2, unfused=1, kernels=kern):
            check(False, "flash_driver failed: " + what)
            continue
        keep = F.get(tmp, "u_keep", (b, heads, s, s), "u8")
        got = {n: F.get(tmp, n, shp, "float32") for n, shp in
               (("ctx", shp_ctx), ("dqkv", shp_qkv), ("u_ctx", shp_ctx), ("u_dqkv", shp_qkv))}
        lse = F.get(tmp, "lse", (b, heads, s), "float32")
        # the row form's scores reach slope * j * mult (~50 here), where one fp32 ulp is 3.8e-6:
        # each probability carries that rounding, twice in the flash backward (the score and the
        # stored lse it recomputes P from), and dS = P (dP - D) cancels, so the element-wise
        # error reaches 1.2e-5 on some seeds (48109: flash dqkv; typical 4e-6 to 8e-6)
        rtol = 1e-5 if square else 2.5e-5
        for neg_inf in (False, True):
            r_ctx, r_lse, r_dq = reference(qkv, dctx, c, mask, keep, slopes, square, neg_inf)
            tag = " (fill-neg-inf)" if neg_inf else ""
            F.close("flash ctx vs torch" + tag, got["ctx"], r_ctx, rtol)
            F.close("flash lse vs torch" + tag, lse, r_lse, 1e-5)
            F.close("flash dqkv vs torch" + tag, got["dqkv"], r_dq, rtol)
            F.close("unfused ctx vs torch" + tag, got["u_ctx"], r_ctx, rtol)
            F.close("unfused dqkv vs torch" + tag, got["u_dqkv"], r_dq, rtol)
        # the row form's scores carry slope * j (up to ~25 here): its fp32 sums round at that
        # magnitude, a few 1e-6 of a probability, in a different order in the two op pairs
        F.normwise("flash ctx vs unfused", got["ctx"], got["u_ctx"], 1e-6 if square else 5e-6)
        F.normwise("flash dqkv vs unfused", got["dqkv"], got["u_dqkv"], 4e-6 if square else 8e-6)
        # the other form: the same softmax up to rounding
        other = dict(ac, alibi=1 if square else 2)
        if F.run(tmp, "float32", other, 2, unfused=1, kernels=kern):
            F.normwise("ctx, row form vs square form", F.get(tmp, "u_ctx", shp_ctx, "float32"),
                       got["u_ctx"], 1e-5)
            F.normwise("dqkv, row form vs square form", F.get(tmp, "u_dqkv", shp_qkv, "float32"),
                       got["u_dqkv"], 1e-5)
        # without ALiBi the results differ (the bias is really added)
        if F.run(tmp, "float32", dict(c), 2, unfused=1, kernels=kern):
            plain = F.get(tmp, "u_ctx", shp_ctx, "float32")
            diff = float((plain - got["u_ctx"]).abs().max() / got["u_ctx"].abs().max())
            check(diff > 1e-3, "%s: ctx without ALiBi differs (%.2e)" % (what, diff))


def bf16_case(tmp, gen):
    """bf16 (Baichuan2's --bf16): both op pairs against the float64 formula on the rounded
    inputs with the bias rounded to bf16 (MindSpeed's alibi.to(params_dtype)): max error over
    max |value| within 2e-2 (bf16's 8 bits, rounded scores and probabilities), and flash within
    2e-2 of unfused."""
    heads, groups, s = 5, 5, 70
    c = F.make_case(heads, groups, "causal", 0.0, 1.0, s=s)
    b, hn = c["b"], c["hn"]
    qkv, dctx = F.inputs(gen, c)
    qkv, dctx = qkv.bfloat16().float(), dctx.bfloat16().float()
    F.put(tmp, "qkv", qkv, "bfloat16")
    F.put(tmp, "dctx", dctx, "bfloat16")
    shp_ctx, shp_qkv = (s, b, heads * hn), (s, b, (heads + 2 * groups) * hn)
    ok = F.run(tmp, "bfloat16", dict(c, alibi=2, heads_total=40, head_first=35), 2, unfused=1)
    check(ok, "flash_driver bf16 failed")
    if not ok:
        return
    slopes = slopes_ref(40)[35:40]
    sl = torch.tensor(slopes, dtype=torch.float32).view(heads, 1, 1)
    ar = torch.arange(s)
    bias16 = (sl * (ar.view(1, s) - ar.view(s, 1))).bfloat16().double()
    mask = F.mask_of("causal", c, gen)
    ref = reference_bias(qkv, dctx, c, mask, bias16)
    print("bf16 h5/40 from 35 causal square s70")
    for name, got, want in (("ctx", F.get(tmp, "ctx", shp_ctx, "bfloat16"), ref[0]),
                            ("dqkv", F.get(tmp, "dqkv", shp_qkv, "bfloat16"), ref[1]),
                            ("unfused ctx", F.get(tmp, "u_ctx", shp_ctx, "bfloat16"), ref[0]),
                            ("unfused dqkv", F.get(tmp, "u_dqkv", shp_qkv, "bfloat16"), ref[1])):
        F.normwise("bf16 %s vs torch float64" % name, got, want, 2e-2)


def reference_bias(qkv, dctx, c, mask, bias):
    """ctx and dqkv in float64 with a given [heads, s, s] bias (causal masked_fill -10000)."""
    b, s, heads, groups, hn = c["b"], c["s"], c["heads"], c["groups"], c["hn"]
    pg = heads // groups
    x = qkv.double().requires_grad_(True)
    q, k, v = torch.split(x.view(s, b, groups, (pg + 2) * hn), [pg * hn, hn, hn], dim=3)
    q = q.reshape(s, b, heads, hn).permute(1, 2, 0, 3)
    k = k.repeat_interleave(pg, dim=2).permute(1, 2, 0, 3)
    v = v.repeat_interleave(pg, dim=2).permute(1, 2, 0, 3)
    sc = (q @ k.transpose(-1, -2)) * c["alpha"] + bias[None]
    p = torch.softmax(sc.masked_fill(mask[:, None], -10000.0), dim=-1)
    ctx = (p @ v).permute(2, 0, 1, 3).reshape(s, b, heads * hn)
    ctx.backward(dctx.double())
    return ctx.detach(), x.grad


def main():
    print("seed %d (MC_FLASH_SEED=%d repeats this run)" % (F.SEED, F.SEED))
    gen = torch.Generator().manual_seed(F.SEED)
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    kernel_sets = ["ref"] + ([None] if " avx2" in flags and " fma" in flags else [])
    with tempfile.TemporaryDirectory() as tmp:
        check_slopes(tmp)
        for i, case in enumerate(CASES):
            one_case(tmp, gen, kernel_sets if i % 2 == 0 else kernel_sets[-1:], *case)
        bf16_case(tmp, gen)
    return summary("test_alibi")


if __name__ == "__main__":
    sys.exit(main())
