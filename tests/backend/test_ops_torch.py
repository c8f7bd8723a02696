"""Every backend op in bfloat16 and float16 against PyTorch run live (through
tests/drivers/op_driver), forward and backward, on fresh random inputs (the seed is printed;
MC_OPS_SEED repeats a run). PyTorch's side is Megatron's computation on 16-bit tensors: torch's
16-bit ops where Megatron calls them (addmm, layer_norm, gelu, softmax on masked 16-bit scores,
embedding, DotProductAttention's baddbmm/softmax/dropout/bmm with repeat_interleave for GQA,
autograd for every backward), with our dropout keep masks fed to torch's formula (input *
noise, noise of the input's dtype).

bfloat16 runs in this interpreter (Debian's torch 1.13 has bf16 CPU kernels). float16 runs in a
PyTorch 2.x interpreter when one exists (MC_TORCH2, /work/torch2-venv, build/bench-venv; the
script re-runs itself there): torch 1.13 has no fp16 CPU matmul, and its bf16 CPU kernels
accumulate in bf16 in places (addmm NN: 18% of elements equal, worst 500+ ulps; GELU, LayerNorm
likewise), where torch 2.x, like us and like GPUs, computes in fp32 and rounds once. Without a
torch 2.x both dtypes are checked against the same computations in fp32 torch with the outputs
rounded (said in the output); the attention pair and the softmax backward, whose 16-bit rounding
points fp32 torch does not have, are then only reported. Every op is also checked against its
float64 evaluation rounded once (within 1 ulp).

Errors are in units in the last place of the 16-bit format at the reference value, with values
below 2^-10 of the tensor's largest magnitude measured in ulps of that floor (so cancellation
near zero does not count as a large relative error). Each op prints the mean and the worst
error and the share of elements that match exactly; an op fails when its worst error exceeds
the bound given next to it: 1 ulp where torch, like us, computes in fp32 and rounds once; more
where Megatron's torch code rounds after each elementwise op and ours rounds once (the
approximation backend.h documents), or where fp32 sums run in a different order."""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary, torch2_python  # noqa: E402

BUILD = os.environ.get("MC_BUILD_DIR", "build")
DRIVER = os.path.join(BUILD, "tests", "op_driver")
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


class Case:
    def __init__(self, dt, tmp, emulate):
        self.dt, self.tmp, self.emulate = dt, tmp, emulate
        self.tdt = torch.bfloat16 if dt == "bfloat16" else torch.float16
        # the dtype torch computes in: the 16-bit one, or fp32 when emulating fp16
        self.cdt = torch.float32 if emulate else self.tdt

    def r16(self, x):
        """x rounded to the 16-bit dtype, as a tensor of that dtype."""
        return x.to(self.tdt)

    def put(self, name, t):
        t = t.detach().contiguous()
        if t.dtype == self.tdt:
            t.view(torch.int16).numpy().tofile(os.path.join(self.tmp, name + ".bin"))
        else:
            t.numpy().tofile(os.path.join(self.tmp, name + ".bin"))

    def run(self, op, **params):
        cmd = [DRIVER, op, self.dt, self.tmp] + ["%s=%r" % kv for kv in params.items()]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, "%s: op_driver failed: %s" % (op, p.stderr[-2000:]))
        return p.returncode == 0

    def get(self, name, shape, kind="16"):
        path = os.path.join(self.tmp, "out_%s.bin" % name)
        if kind == "16":
            a = np.fromfile(path, dtype=np.int16)
            return torch.from_numpy(a).view(self.tdt).reshape(shape).float()
        dtype = {"f32": np.float32, "u8": np.uint8}[kind]
        return torch.from_numpy(np.fromfile(path, dtype=dtype)).reshape(shape)

    def ref(self, t):
        """A torch result as float32 holding 16-bit values (rounded here when emulating)."""
        return t.detach().to(self.tdt).float()


def ulp_errors(got, want, mant_bits, emin):
    got, want = got.double().flatten(), want.double().flatten()
    if want.numel() == 0:
        return torch.zeros(0, dtype=torch.float64)
    floor = 2.0 ** -10 * float(want.abs().max())
    base = torch.clamp(want.abs(), min=max(floor, 2.0 ** emin))
    e = torch.floor(torch.log2(base))
    ulp = torch.pow(2.0, e - mant_bits)
    err = (got - want).abs() / ulp
    err[torch.isnan(got) != torch.isnan(want)] = float("inf")
    err[torch.isnan(got) & torch.isnan(want)] = 0
    return err


REPORT = []


def stats(c, got, want):
    mant, emin = (7, -126) if c.dt == "bfloat16" else (10, -14)
    err = ulp_errors(got, want, mant, emin)
    if err.numel() == 0:
        return 0.0, 0.0, 1.0
    return float(err.mean()), float(err.max()), float((err == 0).double().mean())


def compare(c, what, got, torch_ref, bound, truth=None, truth_bound=1, mean_bound=None):
    """got against torch's 16-bit result (bound in ulps, None: reported only; mean_bound on the
    mean) and against the float64 evaluation of the same formula rounded once (truth_bound)."""
    mean, worst, exact = stats(c, got, torch_ref)
    if c.emulate and what.startswith(("attn", "masked_softmax bwd")):
        bound = mean_bound = None  # fp32 torch has none of the 16-bit rounding points inside
    if mean_bound is not None:
        check(mean <= mean_bound, "%s %s: mean error %.3f ulp from torch > %g" % (
            c.dt, what, mean, mean_bound))
    if c.emulate and bound is not None and bound > 0:
        bound = max(bound, 2)
    line = "%-9s %-38s torch: mean %.3f worst %6.2f ulp exact %5.1f%% (bound %s)" % (
        c.dt, what, mean, worst, 100 * exact, "-" if bound is None else "%g" % bound)
    if bound is not None:
        check(worst <= bound, "%s %s: worst error %.2f ulp from torch > %g" % (c.dt, what, worst,
                                                                                bound))
    if truth is not None:
        tm, tw, _ = stats(c, got, truth)
        line += "; fp64: mean %.3f worst %.2f (bound %g)" % (tm, tw, truth_bound)
        check(tw <= truth_bound, "%s %s: worst error %.2f ulp from fp64 > %g" % (c.dt, what, tw,
                                                                                truth_bound))
    print(line)
    REPORT.append(line)


def refs(c, fn):
    """fn(dtype) -> {name: tensor} run in torch's 16-bit dtype (or fp32 when emulating) and in
    float64; both returned as float32 tensors of 16-bit values."""
    a, b = fn(c.cdt), fn(torch.float64)
    return ({k: c.ref(v) for k, v in a.items()}, {k: c.ref(v) for k, v in b.items()})


def leaf(x, dtype):
    return x.detach().to(dtype).requires_grad_(True)


def rnd(c, *shape, scale=1.0):
    return c.r16(torch.randn(*shape) * scale)


# ---- ops ----------------------------------------------------------------------------------

def op_gemm(c):
    M, N, K = 48, 80, 72
    for ta in (0, 1):
        for tb in (0, 1):
            beta = 0.5 if ta == tb else 0.0
            A = rnd(c, *((K, M) if ta else (M, K)))
            B = rnd(c, *((N, K) if tb else (K, N)))
            C = rnd(c, M, N)
            for n, t in (("A", A), ("B", B), ("C", C)):
                c.put(n, t)
            if not c.run("gemm", ta=ta, tb=tb, M=M, N=N, K=K, alpha=0.75, beta=beta, c_f32=0):
                continue

            def f(dt):
                opA = A.t() if ta else A
                opB = B.t() if tb else B
                return {"C": torch.addmm(C.to(dt), opA.to(dt), opB.to(dt), beta=beta, alpha=0.75)}
            T, X = refs(c, f)
            compare(c, "gemm %s%s (addmm)" % ("T" if ta else "N", "T" if tb else "N"),
                    c.get("C", (M, N)), T["C"], 1, X["C"])


def op_norm(c, layer):
    rows, h = 64, 96
    x, w, b, dy = rnd(c, rows, h, scale=2), rnd(c, h), rnd(c, h), rnd(c, rows, h)
    for n, t in (("x", x), ("w", w), ("b", b), ("dy", dy)):
        c.put(n, t)
    name = "layernorm" if layer else "rmsnorm"
    if not c.run(name, rows=rows, h=h, eps=1e-5, bias=1):
        return

    def f(dt):
        xl, wl, bl = leaf(x, dt), leaf(w, dt), leaf(b, dt)
        if layer:
            y = F.layer_norm(xl, (h,), wl, bl, 1e-5)
        elif hasattr(F, "rms_norm"):
            y = F.rms_norm(xl, (h,), wl, 1e-5)
        else:  # torch 1.13: the formula in fp32 (or fp64), rounded at the output
            xf = xl.float() if dt != torch.float64 else xl
            y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * wl.to(xf.dtype))
            y = y.to(dt)
        y.backward(dy.to(dt))
        return {"y": y, "dx": xl.grad, "dw": wl.grad, "db": bl.grad if layer else wl.grad}
    T, X = refs(c, f)
    compare(c, name + " fwd", c.get("y", (rows, h)), T["y"], 1, X["y"])
    # torch's CPU 16-bit layer_norm backward sums in reduced precision: checked against fp64
    tb = None if layer else 1
    compare(c, name + " bwd dx", c.get("dx", (rows, h)), T["dx"], tb, X["dx"])
    compare(c, name + " bwd dw", c.get("dw", (h,)), T["dw"], tb, X["dw"])
    if layer:
        compare(c, name + " bwd db", c.get("db", (h,)), T["db"], tb, X["db"])


def op_act(c, name):
    rows, cols = 64, 96
    xw = 2 * cols if name == "swiglu" else cols
    x, dy = rnd(c, rows, xw, scale=2), rnd(c, rows, cols)
    c.put("x", x)
    c.put("dy", dy)
    if not c.run(name, rows=rows, cols=cols, bias=0):
        return

    def f(dt):
        xl = leaf(x, dt)
        if name == "gelu_tanh":
            y = F.gelu(xl, approximate="tanh")
        elif name == "gelu_erf":
            y = F.gelu(xl)
        elif name == "squared_relu":
            y = torch.pow(F.relu(xl), 2)
        else:
            g, u = torch.chunk(xl, 2, dim=-1)
            y = F.silu(g) * u  # Megatron's unfused SwiGLU: silu rounded, then the product
        y.backward(dy.to(dt))
        return {"y": y, "dx": xl.grad}
    T, X = refs(c, f)
    # SwiGLU: torch rounds silu(gate) before the product (and autograd likewise)
    # (torch's GELU derivatives are other fp32 formulas: within 2 ulps of ours)
    bf, bb = (2, None) if name == "swiglu" else (1, 2)
    compare(c, name + " fwd", c.get("y", (rows, cols)), T["y"], bf, X["y"])
    compare(c, name + " bwd", c.get("dx", (rows, xw)), T["dx"], bb, X["dx"])


def op_bias(c):
    rows, cols = 96, 64
    dy = rnd(c, rows, cols)
    c.put("dy", dy)
    if c.run("bias_grad", rows=rows, cols=cols):
        T, X = refs(c, lambda dt: {"db": dy.to(dt).sum(0)})
        compare(c, "bias_grad (sum over rows)", c.get("db", (cols,)), T["db"], 1, X["db"])
    x, b, r = rnd(c, rows, cols), rnd(c, cols), rnd(c, rows, cols)
    keep = (torch.rand(rows, cols) >= 0.1).to(torch.uint8)
    for n, t in (("x", x), ("bias", b), ("residual", r), ("keep", keep)):
        c.put(n, t)
    if c.run("bias_dropout_add", rows=rows, cols=cols, p=0.1):
        noise = (keep.float() * (1.0 / 0.9)).to(c.tdt)  # torch's noise tensor, 16-bit

        def f(dt):
            return {"y": r.to(dt) + (x.to(dt) + b.to(dt)) * noise.to(dt)}
        T, X = refs(c, f)
        # torch rounds after each of its three ops, ours once: reported, checked against fp64
        compare(c, "bias_dropout_add", c.get("y", (rows, cols)), T["y"], None, X["y"])


def causal_mask(s):
    return torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)


def op_softmax(c):
    bh, s = 8, 48
    for causal in (1, 0):
        scores, dp = rnd(c, bh, s, s, scale=3), rnd(c, bh, s, s)
        mask = causal_mask(s) if causal else torch.rand(s, s) < 0.2
        mask[:, 0] = False  # no fully masked row
        c.put("scores", scores)
        c.put("dp", dp)
        c.put("mask", mask.to(torch.uint8))
        if not c.run("softmax", bh=bh, sq=s, sk=s, mult=1.0, causal=causal):
            continue

        def f(dt):
            sl = leaf(scores, dt)
            p = torch.softmax(sl.masked_fill(mask, -10000.0), dim=-1)  # Megatron, softmax in dt
            if dt == torch.float64:  # the backward reads the 16-bit probs, as torch's does
                p = p.to(c.tdt).to(dt) + (p - p.detach())
            p.backward(dp.to(dt))
            return {"p": p, "ds": sl.grad}
        T, X = refs(c, f)
        what = "causal" if causal else "mask"
        compare(c, "masked_softmax fwd (%s)" % what, c.get("p", (bh, s, s)), T["p"], 1, X["p"])
        # ds = p * (dp - sum(dp * p)): the fp32 sum in another order than torch's, then a
        # cancelling subtraction; fp16's finer ulp shows it as up to 9 ulp on a few elements
        # (MC_OPS_SEED=51208), bf16's stays within 2. The mean bound holds the rest.
        loose = c.dt == "float16"
        compare(c, "masked_softmax bwd (%s)" % what, c.get("ds", (bh, s, s)), T["ds"],
                16 if loose else 2, None, mean_bound=0.02 if loose else 0.01)


def op_rope(c):
    s, bh, hn, rot = 16, 6, 32, 32
    t, dy = rnd(c, s, bh, hn), rnd(c, s, bh, hn)
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
    freqs = torch.outer(torch.arange(s).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    # Megatron casts cos/sin to the tensor's dtype: the tables hold 16-bit values
    cos, sin = c.r16(torch.cos(emb)).float(), c.r16(torch.sin(emb)).float()
    c.put("t", t)
    c.put("dy", dy)
    c.put("cos", cos)
    c.put("sin", sin)
    if not c.run("rope", s=s, bh=bh, hn=hn, rot=rot, interleaved=0):
        return

    def f(dt):
        tl = leaf(t, dt)
        cs, sn = cos.to(dt)[:, None, :], sin.to(dt)[:, None, :]
        t1, t2 = torch.chunk(tl, 2, dim=-1)
        y = tl * cs + torch.cat((-t2, t1), dim=-1) * sn  # _apply_rotary_pos_emb_bshd
        y.backward(dy.to(dt))
        return {"y": y, "dx": tl.grad}
    T, X = refs(c, f)
    # torch rounds both products and the sum, ours once: reported, checked against fp64
    compare(c, "rope fwd", c.get("y", (s, bh, hn)), T["y"], None, X["y"])
    compare(c, "rope bwd", c.get("dx", (s, bh, hn)), T["dx"], None, X["dx"])


def op_embedding(c):
    n, h, vocab = 256, 64, 40
    w, dy = rnd(c, vocab, h), rnd(c, n, h)
    ids = torch.randint(0, vocab, (n,), dtype=torch.int64)
    c.put("w", w)
    c.put("dy", dy)
    c.put("ids", ids)
    if not c.run("embedding", n=n, h=h, vstart=0, vlocal=vocab):
        return

    def f(dt):
        wl = leaf(w, dt)
        y = F.embedding(ids, wl)
        y.backward(dy.to(dt))
        return {"y": y, "dw": wl.grad}
    T, X = refs(c, f)
    compare(c, "embedding fwd", c.get("y", (n, h)), T["y"], 0, X["y"], 0)
    # torch adds each token's row with its own rounding, in token order; so do we (fp64 and
    # the fp32 emulation sum first: reported only)
    compare(c, "embedding bwd (repeated ids)", c.get("dw", (vocab, h)), T["dw"],
            None if c.emulate else 0)


def op_xent(c):
    n, v = 32, 3000
    logits = rnd(c, n, v, scale=4)
    target = torch.randint(0, v, (n,), dtype=torch.int64)
    dloss = torch.rand(n)
    c.put("logits", logits)
    c.put("target", target)
    c.put("dloss", dloss)
    if not c.run("xent", n=n, v=v):
        return
    # Megatron widens the 16-bit logits (output.float()) for the fp32 cross-entropy
    ll = logits.float().requires_grad_(True)
    loss = F.cross_entropy(ll, target, reduction="none")
    loss.backward(dloss)
    mx, se, tl = (c.get(k, (n,), "f32") for k in ("max", "sumexp", "target_logit"))
    ours = torch.log(se) - tl
    err = float(((ours - loss.detach()).abs() / loss.detach().abs().clamp(min=1e-6)).max())
    line = "%-9s %-38s worst relative error %.2e (fp32)" % (c.dt, "cross-entropy loss", err)
    print(line)
    REPORT.append(line)
    check(err < 1e-5, "%s cross-entropy loss: relative error %.2e" % (c.dt, err))
    compare(c, "cross-entropy dlogits", c.get("dlogits", (n, v)), c.ref(ll.grad), 1)


def megatron_attention(qkv, b, s, heads, groups, hn, alpha, mask, keep, p, fp32_softmax, mult,
                       tdt):
    """DotProductAttention.forward on 16-bit tensors, from the fused qkv rows [s, b, ...]."""
    pg = heads // groups
    x = qkv.view(s, b, groups, (pg + 2) * hn)
    q, k, v = torch.split(x, [pg * hn, hn, hn], dim=3)
    q = q.reshape(s, b, heads, hn)
    if pg > 1:
        k = k.repeat_interleave(pg, dim=2)
        v = v.repeat_interleave(pg, dim=2)
    q2 = q.reshape(s, b * heads, hn).transpose(0, 1)
    k2 = k.reshape(s, b * heads, hn).transpose(0, 1)
    buf = torch.empty(b * heads, s, s, dtype=q.dtype)
    scores = torch.baddbmm(buf, q2, k2.transpose(1, 2), beta=0.0, alpha=alpha).view(b, heads, s, s)
    sc = scores.float() * mult if fp32_softmax else scores
    probs = torch.softmax(sc.masked_fill(mask, -10000.0), dim=-1)
    if fp32_softmax:
        probs = probs.to(qkv.dtype)
    if p > 0:
        noise = (keep.float() * (1.0 / (1.0 - p))).to(tdt).to(probs.dtype)
        pd = probs * noise
    else:
        pd = probs
    v2 = v.reshape(s, b * heads, hn).transpose(0, 1)
    ctx = torch.bmm(pd.view(b * heads, s, s), v2).view(b, heads, s, hn)
    return probs, ctx.permute(2, 0, 1, 3).reshape(s, b, heads * hn)


def op_attention(c):
    b, s, hn = 2, 24, 16
    for heads, groups, causal, p, fp32 in ((4, 4, 1, 0.0, 0), (6, 2, 0, 0.1, 0), (6, 2, 1, 0.1, 1),
                                           (6, 3, 1, 0.0, 1), (6, 2, 1, 0.0, 0)):
        mult = 2.0 if fp32 else 1.0  # query-key layer scaling: scores / coeff, softmax * coeff
        alpha = 1.0 / (hn ** 0.5) / mult
        qkv = rnd(c, s, b, (heads + 2 * groups) * hn)
        dctx = rnd(c, s, b, heads * hn)
        m = causal_mask(s)[None].expand(b, s, s).clone() if causal else torch.rand(b, s, s) < 0.2
        m[:, :, 0] = False
        c.put("qkv", qkv)
        c.put("dctx", dctx)
        c.put("mask", m.to(torch.uint8))
        if not c.run("attention", b=b, s=s, heads=heads, groups=groups, hn=hn, alpha=alpha,
                     mult=mult, p=p, seed=1234, causal=causal, softmax_fp32=fp32):
            continue
        keep = c.get("keep", (b, heads, s, s), "u8")
        ql = leaf(qkv, c.cdt)
        probs, ctx = megatron_attention(ql, b, s, heads, groups, hn, alpha, m[:, None], keep, p,
                                        fp32, mult, c.tdt)
        ctx.backward(dctx.to(c.cdt))
        what = "h%d g%d %s p=%g%s" % (heads, groups, "causal" if causal else "mask", p,
                                       " fp32sm" if fp32 else "")
        # bf16: the same bits as torch 2.x. fp16's 3 more mantissa bits make fp32 sums in a
        # different order flip roundings upstream (a prob, a score) now and then, which a
        # cancelling dot product downstream shows as tens of ulps in a few elements: the worst
        # bound is loose there, the mean bound is not.
        # (a score 1 fp16 ulp off moves its prob by several fp16 ulps: scores of size ~8)
        loose = c.dt == "float16"
        compare(c, "attn probs " + what, c.get("probs", (b, heads, s, s)), c.ref(probs),
                8 if loose else 1, mean_bound=0.02 if loose else 0.01)
        # bf16 too: a prob rounded the other way now and then moves a ctx element by a few
        # ulps (4 seen with MC_OPS_SEED=53024, fp32 softmax); the mean bound stays tight.
        # fp16: each flipped prob moves the hn ctx elements of its row, and where those cancel
        # towards zero the error is counted in ulps of ulp_errors' floor (2^-10 of the largest
        # element): MC_OPS_SEED=10078 (masked, dropout 0.1) had probs at most 2 ulps off and
        # 0.6% of ctx elements off, worst 408.5, mean 0.147 ulp. A wrong op is off everywhere.
        compare(c, "attn ctx " + what, c.get("ctx", (s, b, heads * hn)), c.ref(ctx),
                1024 if loose else 32, mean_bound=0.3 if loose else 0.01)
        # and so a dqkv element (3 ulps seen with MC_OPS_SEED=60710, masked, dropout 0.1; bf16
        # 10 ulps with MC_OPS_SEED=11013, causal, dropout 0.1, fp32 softmax, mean 0.003)
        compare(c, "attn dqkv " + what, c.get("dqkv", (s, b, (heads + 2 * groups) * hn)),
                c.ref(ql.grad), 1024 if loose else 32, mean_bound=0.3 if loose else 0.01)


def op_accumulate(c):
    n = 5000
    main, grad = torch.randn(n), rnd(c, n)
    c.put("main", main)
    c.put("grad", grad)
    if not c.run("accumulate", n=n):
        return
    want = main + grad.float()
    got = c.get("main", (n,), "f32")
    check(torch.equal(got, want), "%s accumulate: main_grad += grad differs from torch" % c.dt)
    compare(c, "convert fp32 -> 16 (Tensor.to)", c.get("rounded", (n,)), want.to(c.tdt).float(), 0)


def run_dtype(dt, emulate):
    with tempfile.TemporaryDirectory() as tmp:
        c = Case(dt, tmp, emulate)
        op_gemm(c)
        op_norm(c, True)
        op_norm(c, False)
        for a in ("gelu_tanh", "gelu_erf", "squared_relu", "swiglu"):
            op_act(c, a)
        op_bias(c)
        op_softmax(c)
        op_rope(c)
        op_embedding(c)
        op_xent(c)
        op_attention(c)
        op_accumulate(c)


def main():
    seed = int(os.environ.get("MC_OPS_SEED", int(time.time()) % 100000))
    if not TORCH2 and os.environ.get("MC_OPS_CHILD") is None:
        py = torch2_python()
        if py:  # torch 2.x's 16-bit CPU kernels compute in fp32 as ours do: run there
            env = dict(os.environ, MC_OPS_SEED=str(seed), MC_OPS_CHILD="1")
            env.pop("PYTHONPATH", None)
            p = subprocess.run([py, os.path.abspath(__file__)] + sys.argv[1:], env=env,
                               timeout=600)
            return p.returncode
        print("no PyTorch 2.x found (MC_TORCH2, /work/torch2-venv, build/bench-venv): torch "
              "1.13's 16-bit CPU kernels accumulate in 16 bits in places, so both dtypes are "
              "checked against fp32 torch with the outputs rounded")
    torch.manual_seed(seed)
    print("seed %d (MC_OPS_SEED=%d repeats it), torch %s" % (seed, seed, torch.__version__))
    torch.set_num_threads(1)
    only = sys.argv[1] if len(sys.argv) > 1 else None
    for dt in ("bfloat16", "float16"):
        if only in (None, dt):
            run_dtype(dt, not TORCH2)
    return summary("test_ops_torch")


if __name__ == "__main__":
    sys.exit(main())
