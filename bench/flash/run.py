#!/usr/bin/env python3
"""Core attention forward + backward: megatron.c's flash attention (backend flash_attention op
pair) vs its unfused DotProductAttention op pair vs PyTorch 2.x scaled_dot_product_attention on
the CPU, at the same thread count, in the same run. GPT-2 124M's attention shape (12 heads of
64, micro-batch 1, causal, fp32, no dropout) at s = 1k, 2k, 4k (and 8k without the unfused op,
whose three s x s buffers take 9 GiB there). Prints best-of-N fwd and bwd wall milliseconds, the
best CPU time of fwd + bwd (all threads; the fairer figure on a shared machine), the peak
memory each added over its inputs, and the ratios; and the CPU name and load. A benchmark, not
a test.
    usage: bench/flash/run.py [THREADS] [SEQS...]      (default: nproc; 1024 2048 4096 8192)
Needs build/bench/bench_attention (cmake --build build) and a torch 2.x (MC_TORCH2,
/work/torch2-venv or bench/setup_torch.sh's build/bench-venv) for the SDPA column."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bench", "bench_attention")
HEADS, HN, B = 12, 64, 1

SDPA = r"""
import resource, sys, time, torch, torch.nn.functional as F
b, h, s, d, iters = map(int, sys.argv[1:6])
torch.set_num_threads(int(sys.argv[6]))
g = torch.Generator().manual_seed(0)
q, k, v = [torch.randn(b, h, s, d, generator=g).requires_grad_(True) for _ in range(3)]
go = torch.randn(b, h, s, d, generator=g)
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
base = rss_kib()
bf = bb = bc = 1e300
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
for it in range(iters + 1):
    c0 = cpu()
    t0 = time.perf_counter()
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t1 = time.perf_counter()
    o.backward(go)
    t2 = time.perf_counter()
    for x in (q, k, v):
        x.grad = None
    c = cpu() - c0
    if it > 0:
        bf, bb, bc = min(bf, t1 - t0), min(bb, t2 - t1), min(bc, c)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("fwd_ms=%.2f bwd_ms=%.2f peak_extra_mib=%.1f cpu_ms=%.1f torch=%s" % (bf * 1e3,
      bb * 1e3, (peak - base) / 1024.0, bc * 1e3, torch.__version__))
"""


def torch2():
    for p in (os.environ.get("MC_TORCH2", ""), "/work/torch2-venv/bin/python",
              os.path.join(ROOT, "build", "bench-venv", "bin", "python")):
        if p and os.path.exists(p):
            return p
    return None


def parse(out):
    m = re.search(r"fwd_ms=(\S+) bwd_ms=(\S+) peak_extra_mib=(\S+) cpu_ms=(\S+)", out or "")
    return tuple(float(x) for x in m.groups()) if m else None


def ours(kind, s, th, iters):
    env = dict(os.environ, OMP_NUM_THREADS=str(th))
    r = subprocess.run([BIN, kind, "float32", str(B), str(s), str(HEADS), str(HEADS), str(HN),
                        str(iters)], env=env, capture_output=True, text=True)
    return parse(r.stdout)


def sdpa(py, s, th, iters):
    r = subprocess.run([py, "-c", SDPA, str(B), str(HEADS), str(s), str(HN), str(iters),
                        str(th)], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(th)))
    v = re.search(r"torch=(\S+)", r.stdout)
    return parse(r.stdout), v.group(1) if v else None


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    th = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count()
    seqs = [int(x) for x in sys.argv[2:]] or [1024, 2048, 4096, 8192]
    py = torch2()
    print("CPU: %s, %d threads, load average before: %s" % (
        cpu_name(), th, open("/proc/loadavg").read().split()[:3]))
    print("attention: b=%d, %d heads x %d, causal, fp32; best of N after a warm-up" % (B, HEADS, HN))
    hdr = "%-6s %-9s %10s %10s %10s %10s %12s" % ("s", "impl", "fwd ms", "bwd ms", "total ms",
                                                   "CPU ms", "peak+ MiB")
    print(hdr)
    for s in seqs:
        iters = 2 if s <= 2048 else 1
        rows = {"flash": ours("flash", s, th, iters)}
        if s <= 4096:
            rows["unfused"] = ours("unfused", s, th, iters)
        if py:
            rows["sdpa"], ver = sdpa(py, s, th, iters)
        for name, r in rows.items():
            if r:
                print("%-6d %-9s %10.1f %10.1f %10.1f %10.1f %12.1f" % (
                    s, name, r[0], r[1], r[0] + r[1], r[3], r[2]))
            else:
                print("%-6d %-9s failed" % (s, name))
        f = rows["flash"]
        for other in ("unfused", "sdpa"):
            o = rows.get(other)
            if f and o:
                print("       flash vs %-7s wall x%.2f (fwd x%.2f, bwd x%.2f), CPU time x%.2f, "
                      "peak memory %.1f vs %.1f MiB" % (
                          other, (o[0] + o[1]) / (f[0] + f[1]), o[0] / f[0], o[1] / f[1],
                          o[3] / f[3], f[2], o[2]))
    print("load average after: %s" % open("/proc/loadavg").read().split()[:3])
    return 0


if __name__ == "__main__":
    sys.exit(main())
