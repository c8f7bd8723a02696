"""--rounding-points torch-cpu (backend.h: MC_ROUNDING_TORCH_CPU) op by op against PyTorch run
live on fresh random inputs (the seed is printed; MC_OPS_SEED repeats a run), in bfloat16 and
float16, through tests/drivers/op_driver with MC_ROUNDING=torch-cpu.

The reference is what Megatron core_v0.12.1 executes on a CPU, where jit does not fuse: its
bias-GELU and bias-SwiGLU functions with their hand-written backwards (fusions/
fused_bias_gelu.py, fused_bias_swiglu.py) and bias-dropout-add (fused_bias_dropout.py) as
plain 16-bit torch expressions, the unfused rotary embedding (rope_utils.py, with autograd for
its backward), and torch's own layer_norm (autograd). The expressions below are written in the
same order as Megatron's, so every intermediate rounds where Megatron's does. The elementwise
functions must match bit for bit (0 differing elements), except the erf of F.gelu (our fp32
kernel's, 1 ulp in a few percent of elements). LayerNorm's db must match bit for bit; y, dx and
dw may differ slightly in a few rows (torch sums a row's moments in a vectorized order of its
own, so a mean or rstd rounded to the dtype can land one step apart; bounds at each check).

A second pass runs the default rounding (fused) and checks that the elementwise functions then
differ from these references: a test of the switch itself.

torch 1.13's 16-bit CPU kernels compute some of these in 16 bits (layer_norm, tanh), so the test
runs under a PyTorch 2.x interpreter when one exists (MC_TORCH2, /work/torch2-venv,
build/bench-venv); without one, LayerNorm is skipped (said in the output) and the
elementwise functions run in fp32 torch with each op's result rounded to the dtype, which is the
same computation."""
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


class Run:
    """One dtype's inputs, the driver, and the rounding of each torch op (emulated on 1.13)."""

    def __init__(self, dt, tmp, rounding):
        self.dt, self.tmp, self.rounding = dt, tmp, rounding
        self.t = torch.bfloat16 if dt == "bfloat16" else torch.float16

    def r(self, x):
        """One torch op's output: already 16-bit on torch 2.x; rounded here from fp32 on 1.13."""
        return x if TORCH2 else x.to(self.t).float()

    def c(self, x):
        """x as the dtype torch computes in: the 16-bit dtype, or fp32 holding its values."""
        x = x.to(self.t)
        return x if TORCH2 else x.float()

    def put(self, name, t):
        t.detach().contiguous().to(self.t).view(torch.int16).numpy().tofile(
            os.path.join(self.tmp, name + ".bin"))

    def run(self, op, **params):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if self.rounding:
            env["MC_ROUNDING"] = self.rounding
        cmd = [DRIVER, op, self.dt, self.tmp] + ["%s=%r" % kv for kv in params.items()]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        check(p.returncode == 0, "%s: op_driver failed: %s" % (op, p.stderr[-2000:]))
        return p.returncode == 0

    def get(self, name, shape):
        a = np.fromfile(os.path.join(self.tmp, "out_%s.bin" % name), dtype=np.int16)
        return torch.from_numpy(a).view(self.t).reshape(shape).float()


def differing(got, want, mant):
    """(elements that differ, worst difference in ulps of the reference's magnitude)"""
    want = want.detach().float()
    d = (got != want) & ~(torch.isnan(got) & torch.isnan(want))
    if not bool(d.any()):
        return 0, 0.0
    # below 2^-10 of the tensor's largest magnitude, in ulps of that floor (test_ops_torch.py)
    floor = max(2.0 ** -10 * float(want.abs().max()), 1e-30)
    ulp = torch.pow(2.0, torch.floor(torch.log2(want.abs().clamp(min=floor))) - mant)
    return int(d.sum()), float(((got - want).abs() / ulp)[d].max())


RESULTS = {}  # (dtype, rounding, what) -> differing elements


def compare(run, what, got, want, share=0.0, ulps=1.0):
    n, worst = differing(got, want, 7 if run.dt == "bfloat16" else 10)
    RESULTS[(run.dt, run.rounding, what)] = n
    line = "%-9s %-9s %-24s %6d of %7d elements differ (worst %.1f ulp)" % (
        run.dt, run.rounding or "fused", what, n, got.numel(), worst)
    print(line)
    if run.rounding:
        check(n == 0 or (n <= share * got.numel() and worst <= ulps + 1e-9),
              "%s torch-cpu %s: %d of %d elements differ from torch (worst %.1f ulp), bound %d" % (
                  run.dt, what, n, got.numel(), worst, int(share * got.numel())))


def rnd(run, *shape, scale=1.0):
    return (torch.randn(*shape) * scale).to(run.t)


# ---- Megatron's functions, op for op -------------------------------------------------------

def bias_gelu(run, bias, y):
    x = run.r(bias + y)
    k = run.r(run.r(0.79788456 * x) * run.r(1 + run.r(run.r(0.044715 * x) * x)))
    return run.r(run.r(x * 0.5) * run.r(1.0 + run.r(torch.tanh(k))))


def bias_gelu_back(run, g, bias, y):
    x = run.r(bias + y)
    k = run.r(run.r(0.79788456 * x) * run.r(1 + run.r(run.r(0.044715 * x) * x)))
    t = run.r(torch.tanh(k))
    # torch rounds an added Python scalar to the tensor's dtype (0.79788456 + tensor)
    c = run.c(torch.tensor(0.79788456))
    s = run.r(c + run.r(run.r(0.1070322243 * x) * x))
    ff = run.r(run.r(run.r(0.5 * x) * run.r(run.r(1 - run.r(t * t)) * s)) +
               run.r(0.5 * run.r(1 + t)))
    return run.r(ff * g)


def swiglu(run, y):
    a, b = torch.chunk(y, 2, -1)
    return run.r(run.r(F.silu(a)) * b)


def swiglu_back(run, g, y):
    a, b = torch.chunk(y, 2, -1)
    s = run.r(torch.sigmoid(a))
    da = run.r(run.r(run.r(g * s) * run.r(1 + run.r(a * run.r(1 - s)))) * b)
    db = run.r(g * run.r(F.silu(a)))
    return torch.cat((da, db), -1)


def rope(run, t, cos, sin):
    """_apply_rotary_pos_emb_bshd (non-interleaved): the 16-bit cos/sin, products, sum"""
    c, s = run.c(cos), run.c(sin)
    t1, t2 = torch.chunk(t, 2, -1)
    return run.r(run.r(t * c) + run.r(torch.cat((-t2, t1), -1) * s))


# ---- the ops ---------------------------------------------------------------------------------

def act_inputs(run, rows, xw, cols):
    """x [rows, xw], bias [xw], dy [rows, cols]: made and handed to the driver"""
    x, bias, dy = rnd(run, rows, xw, scale=2), rnd(run, xw), rnd(run, rows, cols)
    for n, t in (("x", x), ("bias", bias), ("dy", dy)):
        run.put(n, t)
    return x, bias, dy


def op_gelu(run):
    rows, cols = 48, 80
    x, bias, dy = act_inputs(run, rows, cols, cols)
    if not run.run("gelu_tanh", rows=rows, cols=cols, bias=1):
        return
    xc, bc, gc = run.c(x), run.c(bias), run.c(dy)
    compare(run, "bias_gelu", run.get("y", (rows, cols)), bias_gelu(run, bc, xc))
    compare(run, "bias_gelu_back", run.get("dx", (rows, cols)), bias_gelu_back(run, gc, bc, xc))


def op_swiglu(run, with_bias):
    rows, cols = 48, 40
    x, bias, dy = act_inputs(run, rows, 2 * cols, cols)
    if not run.run("swiglu", rows=rows, cols=cols, bias=int(with_bias)):
        return
    y = run.r(run.c(x) + run.c(bias)) if with_bias else run.c(x)
    tag = " (bias)" if with_bias else ""
    compare(run, "swiglu" + tag, run.get("y", (rows, cols)), swiglu(run, y))
    compare(run, "swiglu_back" + tag, run.get("dx", (rows, 2 * cols)),
            swiglu_back(run, run.c(dy), y))


def op_gelu_erf(run):
    """--no-bias-gelu-fusion: Megatron adds the bias (one rounded op), then F.gelu"""
    rows, cols = 48, 80
    x, bias, dy = act_inputs(run, rows, cols, cols)
    if not run.run("gelu_erf", rows=rows, cols=cols, bias=1):
        return
    v = run.r(run.c(x) + run.c(bias)).detach().requires_grad_(True)
    y = F.gelu(v.to(run.t) if TORCH2 else v)
    y.backward(run.c(dy).to(y.dtype))
    # the bias add's rounding is the point here; erf itself is our fp32 kernel's, not torch's
    # vectorized one (1 ulp apart in a few percent of elements, in either rounding mode)
    compare(run, "bias + gelu", run.get("y", (rows, cols)), run.r(y.float()).float(), 0.04)
    compare(run, "bias + gelu backward", run.get("dx", (rows, cols)), run.r(v.grad.float()), 0.04)


def op_bias_dropout_add(run):
    rows, cols, p = 40, 72, 0.25
    x, bias, res = rnd(run, rows, cols), rnd(run, cols), rnd(run, rows, cols)
    keep = (torch.rand(rows, cols) >= p).to(torch.uint8)
    for n, t in (("x", x), ("bias", bias), ("residual", res)):
        run.put(n, t)
    keep.numpy().tofile(os.path.join(run.tmp, "keep.bin"))
    if not run.run("bias_dropout_add", rows=rows, cols=cols, p=p):
        return
    scale = run.c(torch.tensor(1.0 / (1.0 - p)))  # torch's dropout noise holds it in the dtype
    v = run.r(run.c(x) + run.c(bias))
    v = run.r(v * (keep.to(v.dtype) * scale))
    compare(run, "bias_dropout_add", run.get("y", (rows, cols)), run.r(run.c(res) + v))


def op_rope(run):
    s, bh, hn = 12, 6, 16
    t, dy = rnd(run, s, bh, hn), rnd(run, s, bh, hn)
    freqs = torch.outer(torch.arange(s, dtype=torch.float32),
                        1.0 / 10000 ** (torch.arange(0, hn, 2, dtype=torch.float32) / hn))
    freqs = torch.cat((freqs, freqs), -1)  # [s, hn], Megatron's layout
    cos, sin = torch.cos(freqs), torch.sin(freqs)
    for n, v in (("t", t), ("dy", dy)):
        run.put(n, v)
    cos.contiguous().numpy().tofile(os.path.join(run.tmp, "cos.bin"))
    sin.contiguous().numpy().tofile(os.path.join(run.tmp, "sin.bin"))
    if not run.run("rope", s=s, bh=bh, hn=hn, rot=hn, interleaved=0):
        return
    tl = run.c(t).detach().requires_grad_(True)
    y = rope(run, tl, cos[:, None, :], sin[:, None, :])
    if TORCH2:
        y.backward(dy)
        grad = tl.grad
    else:  # 1.13: autograd in fp32 would not round; the backward's ops written out
        g = run.c(dy)
        c, sn = run.c(cos[:, None, :]), run.c(sin[:, None, :])
        u = run.r(g * sn)
        u1, u2 = torch.chunk(u, 2, -1)
        grad = run.r(run.r(g * c) + torch.cat((u2, -u1), -1))
    compare(run, "rope", run.get("y", (s, bh, hn)), y.detach().float())
    compare(run, "rope backward", run.get("dx", (s, bh, hn)), grad.float())


def op_layernorm(run):
    if not TORCH2:
        print("%s layernorm: skipped (torch 1.13's 16-bit CPU layer_norm is not torch 2.x's)" %
              run.dt)
        return
    for rows, h in ((256, 16), (300, 96)):
        x, w, b, dy = rnd(run, rows, h, scale=2), rnd(run, h), rnd(run, h), rnd(run, rows, h)
        for n, t in (("x", x), ("w", w), ("b", b), ("dy", dy)):
            run.put(n, t)
        if not run.run("layernorm", rows=rows, h=h, eps=1e-5, bias=1):
            continue
        xl, wl, bl = (t.clone().requires_grad_(True) for t in (x, w, b))
        y = F.layer_norm(xl, (h,), wl, bl, 1e-5)
        y.backward(dy)
        tag = " [%d, %d]" % (rows, h)
        # torch sums a row's moments in its own vectorized order: mean and rstd, rounded to the
        # dtype, come out one 16-bit step apart in a few rows (more often in fp16, which has
        # more bits to flip), and those rows' y, dx and their share of dw differ slightly
        compare(run, "layer_norm" + tag, run.get("y", (rows, h)), y, 0.005)
        compare(run, "layer_norm dx" + tag, run.get("dx", (rows, h)), xl.grad, 0.01, 128)
        compare(run, "layer_norm dw" + tag, run.get("dw", (h,)), wl.grad, 0.2, 64)
        compare(run, "layer_norm db" + tag, run.get("db", (h,)), bl.grad)


OPS = (op_gelu, lambda r: op_swiglu(r, False), lambda r: op_swiglu(r, True), op_gelu_erf,
       op_bias_dropout_add, op_rope, op_layernorm)
# what the default (fused) rounding must get wrong, or the switch is not switching
SWITCHED = ("bias_gelu", "bias_gelu_back", "swiglu", "swiglu_back", "bias_dropout_add", "rope",
            "rope backward")


def main():
    seed = int(os.environ.get("MC_OPS_SEED", int(time.time()) % 100000))
    if not TORCH2 and os.environ.get("MC_OPS_CHILD") is None:
        py = torch2_python()
        if py:
            env = dict(os.environ, MC_OPS_SEED=str(seed), MC_OPS_CHILD="1")
            env.pop("PYTHONPATH", None)
            return subprocess.run([py, os.path.abspath(__file__)] + sys.argv[1:], env=env,
                                  timeout=600).returncode
        print("no PyTorch 2.x found: torch 1.13 in fp32 with each op rounded to the dtype")
    print("seed %d (MC_OPS_SEED=%d repeats it), torch %s" % (seed, seed, torch.__version__))
    torch.set_num_threads(1)
    for dt in ("bfloat16", "float16"):
        for rounding in ("torch-cpu", None):
            torch.manual_seed(seed)  # the same inputs in both passes
            with tempfile.TemporaryDirectory() as tmp:
                run = Run(dt, tmp, rounding)
                for op in OPS:
                    op(run)
        for what in SWITCHED:
            check(RESULTS.get((dt, None, what), 0) > 0,
                  "%s %s: the fused rounding matches torch's op-by-op result too: the test "
                  "cannot tell the modes apart" % (dt, what))
    return summary("test_rounding_torch_cpu")


if __name__ == "__main__":
    sys.exit(main())
