"""The second backend runs the whole model (issue 10): MC_BACKEND=cpu-sim, the scalar reference
kernels on memory of its own, where every op stops the process when a tensor argument is not a
block of its alloc and every host byte moves through its counted copy ops. The engine golden's
configurations (tests/training/test_engine_golden.py: GPT-2 and Llama with dropout, tensor +
sequence parallel, pipeline with virtual stages, data parallel with the distributed optimizer)
run on it and must give bit for bit the [exact] lines and checkpoint tensors of the same runs on
the CPU backend with MC_KERNELS=ref; rank 0 (the rank that logs info lines) must log that
cpu-sim ran, that bytes went through its copy ops and that no block was left live. A model
buffer left in host memory, or host data handed to an op directly, makes the run stop with the
op and argument named (e.g. RoPE tables left host-side: "op rope_fwd: argument cos")."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from mc_test import check, parse_exact, run_pretrain, summary  # noqa: E402
from test_engine_golden import ITERS, RUNS, run_args, tensor_digest  # noqa: E402

COUNTERS = re.compile(r"backend cpu-sim: (\d+) allocations \(peak [0-9.]+ MiB, (\d+) still live\), "
                      r"copy_to_backend (\d+) bytes, copy_to_host (\d+) bytes, copy (\d+) bytes")


def run(name, tmp, env):
    np_, style, extra = RUNS[name]
    d = tempfile.mkdtemp(dir=tmp)
    p = run_pretrain(run_args(style, extra, d), np_, env=env)
    ok = check(p.returncode == 0, f"{name} {env}: exit 0 (got {p.returncode}: {p.stderr[-800:]})")
    return p, (tensor_digest(os.path.join(d, "ckpt"))[0] if ok else None)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, _, extra) in RUNS.items():
            ref, ref_digest = run(name, tmp, {"MC_KERNELS": "ref", "MC_BACKEND": None})
            sim, sim_digest = run(name, tmp, {"MC_BACKEND": "cpu-sim", "MC_KERNELS": None})
            want, got = parse_exact(ref.stdout), parse_exact(sim.stdout)
            check(len(want) == ITERS and got == want,
                  f"{name}: cpu-sim [exact] lines bit-identical to MC_KERNELS=ref "
                  f"(ref {want}, sim {got})")
            check(ref_digest is not None and sim_digest == ref_digest,
                  f"{name}: checkpoint tensors bit-identical ({ref_digest} vs {sim_digest})")
            check(sim.stderr.count("backend: cpu-sim (cpu-ref kernels") == 1,
                  f"{name}: rank 0 logs that cpu-sim runs")
            counters = [tuple(map(int, m.groups())) for m in COUNTERS.finditer(sim.stderr)]
            check(len(counters) == 1, f"{name}: rank 0 logs its counters ({counters})")
            check(all(c[0] > 0 and c[1] == 0 and c[2] > 0 for c in counters),
                  f"{name}: blocks allocated, none left live, bytes copied in ({counters})")
            # what leaves the backend goes through copy_to_host: the loss and dloss where rank 0
            # holds the last stage, the stage output (staged by the schedule) where it holds the
            # first of a pipeline
            check(counters and counters[0][3] > 0, f"{name}: bytes copied out ({counters})")
            check("cpu-sim" not in ref.stderr, f"{name}: the reference run is not on cpu-sim")
    return summary("test_backend_sim")


if __name__ == "__main__":
    sys.exit(main())
