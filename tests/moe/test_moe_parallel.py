"""Mixture of experts under pipeline and data parallelism against the single-rank run of the same
model (megatron.c's init is the same for every layout): a 4-layer SwiGLU model with MoE layers
0, 2, 3 (--moe-layer-freq [1,0,1,1]), top-2 routing, aux loss and z-loss, 3 iterations.
- pipeline 2 (1F1B) and pipeline 2 x 2 virtual stages (interleaved): lm loss, z_loss and
  load_balancing_loss of each log line within 1e-6 relative of the single-rank run's (the
  tracker is summed over the pipeline group, as track_moe_metrics does) and grad norm equal;
- data parallel 2: lm loss within 1e-6 and the parameters after 3 steps within 1e-6 of the
  single-rank run's (the experts' grads averaged over the data-parallel group: Megatron's
  expert data-parallel group at expert-parallel size 1). Its aux losses are the last rank's own
  micro-batches' (Megatron does not reduce the tracker over data-parallel ranks): they differ."""
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checkpointing"))
sys.path.insert(0, os.path.join(HERE, ".."))
import megatron_cases as mcs  # noqa: E402
from mc_test import check, summary  # noqa: E402

MODEL = ("--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4",
         "--ffn-hidden-size", "48", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
         "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights",
         "--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "1e-2",
         "--moe-z-loss-coeff", "1e-3", "--moe-layer-freq", "[1,0,1,1]")
ITERS = 3
VALS = re.compile(r"(lm loss|z_loss|load_balancing_loss|grad norm): ([\d.E+-]+)")


def run(tmp, name, world, extra=()):
    mcs.ALL_CASES[name] = (world, MODEL, ("--data-path", mcs.CORPUS_A))
    save = os.path.join(tmp, name)
    r = mcs.run_ours(name, tmp, ("--tensorboard-dir", os.path.join(tmp, "tb_" + name), "--save", save,
                                 "--save-interval", str(ITERS), "--transformer-impl", "local") + tuple(extra),
                     iters=ITERS)
    check(r.returncode == 0, f"{name}: {r.stderr[-600:]}")
    lines = mcs.train_lines(r.stdout)
    return {i: dict(VALS.findall(v[1])) for i, v in lines.items()}, save


def params(save):
    import torch
    import torch_stubs
    torch_stubs.install()
    out = {}
    d = os.path.join(save, f"iter_{ITERS:07d}")
    for rank in sorted(os.listdir(d)):
        sd = torch.load(os.path.join(d, rank, "model_optim_rng.pt"))["model"]
        out.update({(rank[-3:] if rank.count("_") == 3 else "", k): v for k, v in sd.items()
                    if hasattr(v, "shape")})
    return out


def close(a, b, keys, tol):
    return all(k in a and k in b and abs(float(a[k]) - float(b[k])) <= tol * abs(float(b[k]))
               for k in keys)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        base, base_save = run(tmp, "single", 1)
        check(sorted(base) == list(range(1, ITERS + 1)) and "load_balancing_loss" in base[1] and
              list(base[1])[:3] == ["lm loss", "z_loss", "load_balancing_loss"],
              f"single-rank lines {base}")
        for name, world, extra in (("pp2", 2, ("--pipeline-model-parallel-size", "2")),
                                   ("pp2_vp2", 2, ("--pipeline-model-parallel-size", "2",
                                                   "--num-layers-per-virtual-pipeline-stage", "1"))):
            got, _ = run(tmp, name, world, extra)
            for it in base:
                check(close(got.get(it, {}), base[it], ("lm loss", "z_loss", "load_balancing_loss"), 1e-6)
                      and got[it].get("grad norm") == base[it].get("grad norm"),
                      f"{name} {it}: {got.get(it)} vs {base[it]}")
        got, save = run(tmp, "dp2", 2)
        for it in base:
            check(close(got.get(it, {}), base[it], ("lm loss",), 1e-6), f"dp2 {it}: {got.get(it)} vs {base[it]}")
        a, b = params(save), params(base_save)
        worst = max(float((a[k] - b[k]).abs().max()) for k in b if k in a)
        check(a.keys() == b.keys() and worst <= 1e-6, f"dp2 params after {ITERS} steps: {worst:.3g}")
        print(f"dp2: params within {worst:.3g} of the single-rank run")
    return summary("test_moe_parallel")


if __name__ == "__main__":
    sys.exit(main())
