#!/usr/bin/env python3
"""megatron.c's Transformer Engine FusedAdam update (src/optimizer/te_fused_adam_ref.c, what
--use-precision-aware-optimizer steps with) against a PyTorch twin written here from TE 2.1-2.3's
fused_adam.py and multi_tensor_adam.cu, run live on fresh random inputs for several steps:

- states kept in fp16 are widened and multiplied by their fp32 scale before the step, and
  stored after it as fp16(value * (1 / scale)) with scale = absmax / 32752 (a zero tensor keeps
  scale 0 and zeros);
- the kernel computes in fp32: m = b1 m + (1 - b1) g, v = b2 v + ((1 - b2) g) g,
  update = (m / bc1) / (sqrt(v / bc2) + eps) + wd p, p -= lr update, with bc = 1 - beta^step in
  double rounded to float;
- bf16 params with fp32 masters (store_param_remainders, which Megatron turns on with TE >= 2.1):
  the twin keeps what TE keeps, the bf16 param and an int16 remainder, and rebuilds the master
  from their bits (high half one lower when the remainder is negative); megatron.c keeps the
  fp32 master, so the bf16 weights and the masters must agree bit for bit;
- fp16 masters of bf16 / fp16 params; fp32 params (updated in place, no master); bf16 and fp32
  grads.
Every value (model weight, master, exp_avg, exp_avg_sq as stored, scales) must be bit-identical
after every step. The rounding of the remainder path (half away from zero) is also checked on
exact ties, where it differs from round-to-nearest-even."""
import os
import random
import struct
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mc_test  # noqa: E402

DRIVER = os.path.join(mc_test.BUILD, "tests", "te_adam_driver")
F32, BF16, F16 = 0, 1, 2  # enum mc_dtype
TORCH = {F32: torch.float32, BF16: torch.bfloat16, F16: torch.float16}
F16_RANGE = torch.tensor(65504.0 / 2.0, dtype=torch.float32)


def f32(x):
    return torch.tensor(x, dtype=torch.float32)


def master_from_remainder(param16, rem):
    """fp32 master from the bf16 param's bits and the int16 remainder (TE undoes its rounding
    when the remainder is negative)."""
    hi = param16.view(torch.int16).to(torch.int32)
    hi = torch.where(rem < 0, hi - 1, hi)
    bits = (hi << 16) | (rem.to(torch.int32) & 0xFFFF)
    return bits.view(torch.float32)


def split_master(master):
    """(bf16 param, int16 remainder) of an fp32 master: high half, plus one when the low
    half's top bit is set."""
    bits = master.view(torch.int32)
    hi = ((bits >> 16) & 0xFFFF).to(torch.int32)
    lo = bits & 0xFFFF
    rem = torch.where(lo >= 0x8000, lo - 0x10000, lo).to(torch.int16)
    hi = torch.where(lo >= 0x8000, hi + 1, hi) & 0xFFFF
    hi = torch.where(hi >= 0x8000, hi - 0x10000, hi).to(torch.int16)
    return hi.view(torch.bfloat16), rem


def quantize(x):
    """(fp16 values, scale) as FusedAdam._apply_scale stores x."""
    lo, hi = torch.aminmax(x)
    scale = torch.maximum(-lo, hi) / F16_RANGE
    rscale = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    return (x * rscale).to(torch.float16), scale


class Twin:
    """One FusedAdam parameter with master_weights, in the dtypes TE stores."""

    def __init__(self, p0, param_dt, master_dt, m_dt, v_dt, b1, b2, eps):
        self.param_dt, self.master_dt, self.m_dt, self.v_dt = param_dt, master_dt, m_dt, v_dt
        self.b1, self.b2, self.eps = f32(b1), f32(b2), f32(eps)
        self.b1d, self.b2d = float(self.b1), float(self.b2)
        self.param = p0.to(TORCH[param_dt])
        self.remainders = param_dt == BF16 and master_dt == F32
        n = p0.numel()
        self.scale = {k: f32(1.0) for k in ("master", "m", "v")}
        self.m = torch.zeros(n, dtype=TORCH[m_dt])
        self.v = torch.zeros(n, dtype=TORCH[v_dt])
        self.master = None
        if param_dt != F32:
            if self.remainders:
                self.rem = torch.zeros(n, dtype=torch.int16)
            elif master_dt == F16:
                self.master, self.scale["master"] = quantize(self.param.float())
            else:
                self.master = self.param.float()

    def unscaled(self, x, dt, key):
        return x.float() * self.scale[key] if dt == F16 else x.clone()

    def store(self, x, dt, key):
        if dt == F16:
            q, self.scale[key] = quantize(x)
            return q
        return x

    def step(self, g, lr, wd, t):
        m = self.unscaled(self.m, self.m_dt, "m")
        v = self.unscaled(self.v, self.v_dt, "v")
        if self.param_dt == F32:
            p = self.param.clone()
        elif self.remainders:
            p = master_from_remainder(self.param, self.rem)
        else:
            p = self.unscaled(self.master, self.master_dt, "master")
        one = f32(1.0)
        bc1 = f32(1.0 - self.b1d ** t)
        bc2 = f32(1.0 - self.b2d ** t)
        g = g.float()
        m = self.b1 * m + (one - self.b1) * g
        v = self.b2 * v + ((one - self.b2) * g) * g
        update = (m / bc1) / (torch.sqrt(v / bc2) + self.eps) + f32(wd) * p
        p = p - f32(lr) * update
        self.m = self.store(m, self.m_dt, "m")
        self.v = self.store(v, self.v_dt, "v")
        if self.param_dt == F32:
            self.param = p
        elif self.remainders:
            self.param, self.rem = split_master(p)
        else:
            self.param = p.to(TORCH[self.param_dt])
            self.master = self.store(p, self.master_dt, "master")
        return p

    def outputs(self, p):
        n = p.numel()
        master = (self.master.float() if self.master is not None and self.master_dt == F16
                  else torch.zeros(n))
        return dict(weight=self.param.float(), p=p, master=master, m=self.m.float(),
                    v=self.v.float(),
                    scale=torch.stack([self.scale["master"], self.scale["m"], self.scale["v"]]))


def run_driver(case, p0, steps):
    n = p0.numel()
    head = struct.pack("<i4iqq3f", 1, case["param"], case["master"], case["m"], case["v"], n,
                       len(steps), case["b1"], case["b2"], case["eps"])
    body = [p0.numpy().astype("<f4").tobytes()]
    for lr, wd, g in steps:
        body.append(struct.pack("<2f", lr, wd) + g.float().numpy().astype("<f4").tobytes())
    out = subprocess.run([DRIVER], input=head + b"".join(body), capture_output=True,
                         timeout=120).stdout
    per = 5 * n * 4 + 12
    mc_test.check(len(out) == per * len(steps), f"{case['name']}: driver output size")
    res = []
    for s in range(len(steps)):
        blob = out[s * per:(s + 1) * per]
        arr = torch.frombuffer(bytearray(blob), dtype=torch.float32)
        keys = ("weight", "p", "master", "m", "v")
        d = {k: arr[i * n:(i + 1) * n] for i, k in enumerate(keys)}
        d["scale"] = arr[5 * n:5 * n + 3]
        res.append(d)
    return res


def same_bits(a, b):
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def run_case(case, rnd, gen):
    n = case["n"]
    p0 = (torch.randn(n, generator=gen) * 0.05).to(TORCH[case["param"]]).float()
    steps = []
    for _ in range(case["steps"]):
        g = torch.randn(n, generator=gen) * rnd.choice([1e-3, 3e-2, 0.5])
        g[torch.rand(n, generator=gen) < 0.02] = 0.0
        g = g.to(TORCH[case["grad"]]).float()
        steps.append((rnd.uniform(1e-4, 3e-3), rnd.choice([0.0, 0.1]), g))
    twin = Twin(p0, case["param"], case["master"], case["m"], case["v"], case["b1"], case["b2"],
                case["eps"])
    got = run_driver(case, p0, steps)
    worst = ""
    for t, ((lr, wd, g), ours) in enumerate(zip(steps, got), start=1):
        want = twin.outputs(twin.step(g, lr, wd, t))
        for k in ("weight", "p", "master", "m", "v", "scale"):
            if k == "p" and case["param"] == BF16 and case["master"] == F16:
                continue  # the fp32 value the weight is rounded from: checked through weight
            ok = same_bits(ours[k], want[k])
            if not ok:
                bad = (ours[k].view(torch.int32) != want[k].view(torch.int32)).sum().item()
                worst = f" first mismatch: step {t} {k} ({bad} elements)"
            mc_test.check(ok, f"{case['name']} step {t}: {k} bit-identical")
            if not ok:
                return worst
    return worst


def tie_rounding():
    """mc_te_adam_bf16_of on exact ties and neighbours: half away from zero, unlike RNE."""
    vals = []
    for hi in (0x3F80, 0x3F81, 0xBF80, 0xBF81, 0x0001, 0x7F7E):
        for lo in (0x0000, 0x7FFF, 0x8000, 0x8001, 0xFFFF):
            vals.append(struct.unpack("<f", struct.pack("<I", (hi << 16) | lo))[0])
    x = torch.tensor(vals, dtype=torch.float32)
    out = subprocess.run([DRIVER], input=struct.pack("<iq", 2, len(vals)) +
                         x.numpy().astype("<f4").tobytes(), capture_output=True,
                         timeout=60).stdout
    got = torch.frombuffer(bytearray(out), dtype=torch.int16)
    want, _ = split_master(x)
    mc_test.check(torch.equal(got, want.view(torch.int16)), "remainder rounding of ties")
    rne = x.to(torch.bfloat16).view(torch.int16)
    differs = int((got != rne).sum())
    # ties with an even high half round down under RNE, up here: 0x3F80, 0xBF80, 0x7F7E
    mc_test.check(differs == 3, f"remainder rounding differs from RNE on 3 ties (got {differs})")


def main():
    rnd = random.Random()
    seed = rnd.randrange(1 << 30)
    gen = torch.Generator().manual_seed(seed)
    print(f"seed {seed}")
    base = dict(n=3000, steps=6, b1=0.9, b2=0.95, eps=1e-8, grad=F32)
    cases = [
        dict(base, name="bf16 params, fp32 master (remainders), fp32 states", param=BF16,
             master=F32, m=F32, v=F32),
        dict(base, name="bf16 params, remainders, bf16 grads, fp16 states", param=BF16,
             master=F32, m=F16, v=F16, grad=BF16),
        dict(base, name="bf16 params, fp16 master, fp16 exp_avg", param=BF16, master=F16,
             m=F16, v=F32, b2=0.999),
        dict(base, name="bf16 params, fp16 master and states, bf16 grads", param=BF16,
             master=F16, m=F16, v=F16, grad=BF16),
        dict(base, name="fp16 params, fp32 master, fp16 exp_avg_sq", param=F16, master=F32,
             m=F32, v=F16),
        dict(base, name="fp16 params, fp16 master", param=F16, master=F16, m=F32, v=F32),
        dict(base, name="fp32 params, fp16 states", param=F32, master=F16, m=F16, v=F16),
        dict(base, name="fp32 params, fp32 states", param=F32, master=F32, m=F32, v=F32,
             n=257, steps=9, eps=1e-5),
    ]
    for c in cases:
        detail = run_case(c, rnd, gen)
        print(f"{c['name']}: {c['steps']} steps x {c['n']} elements{detail}")
    tie_rounding()
    return mc_test.summary("test_te_fused_adam")


if __name__ == "__main__":
    sys.exit(main())
