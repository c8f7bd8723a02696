"""--bf16 / --fp16 --fp32-residual-connection through pretrain_gpt (the layer-level parity against
the PyTorch twin is tests/parity/test_mixed_parity.py, configs gpt2_fp32res / llama_fp32res).

On the tiny GPT-2 and Llama cases of megatron_mixed_cases.py (6 iterations, [exact] lines):
- the option changes the run (the residual stream is fp32, not the 16-bit one of plain --bf16),
  and the whole curve stays within 1e-2 relative of the plain 16-bit run's and of fp32's;
- full recompute (--recompute-granularity full, uniform, 1 layer) and selective recompute are
  bit-identical to the run without (the fp32 layer inputs kept and rerun);
- dp 2 with the distributed optimizer within 2e-6 relative of the one-process run (plain bf16
  differs from its one-process run by as much: the grad sums' order); tp 2 runs and stays within
  1e-3 of plain bf16 tp 2 (tp 2 and tp 1 start from different weights here, plain bf16 too, so
  they are not compared with each other); pp 2 and interleaved pp 2 x vpp 2 (fp32 stage
  messages) on the Llama-style case within 2e-7 of one process (measured: equal);
- with hidden dropout 0.1 it trains (finite losses, the fp32 dropout of the residual adds)."""
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_mixed_cases as mx  # noqa: E402
mcs = mx.mcs
from mc_test import check, parse_exact, summary  # noqa: E402

RES = ("--fp32-residual-connection",)
LOCAL = ("--transformer-impl", "local")


def losses(case, tmp, extra=(), world=None, fp32=False):
    world = world or mx.CASES[case][0]
    cmd = ([] if world == 1 else mcs.mpirun(world)) + [mcs.EXE] + mx.args(case, tmp, LOCAL + tuple(extra), fp32=fp32)
    r = mcs.run_cmd(cmd, dict(os.environ, OMP_NUM_THREADS="1", MC_TEST_LOG_EXACT="1"), 600)
    check(r.returncode == 0, f"{case} {' '.join(extra)}: rc {r.returncode}: {r.stderr[-500:]}")
    return [float(x[1]) for x in parse_exact(r.stdout)] if r.returncode == 0 else []


def close(a, b, rel):
    return len(a) == len(b) == 6 and all(abs(x - y) <= rel * abs(y) for x, y in zip(a, b))


def test_case(case, tmp, dtype_flags):
    base = losses(case, tmp)
    res = losses(case, tmp, RES)
    fp32 = losses(case, tmp, fp32=True)
    print(f"{case}: plain {base}\n  fp32 residual {res}\n  fp32 {fp32}")
    check(len(res) == 6 and res != base, f"{case}: --fp32-residual-connection changes the run")
    check(close(res, base, 1e-2) and close(res, fp32, 1e-2), f"{case}: curves within 1e-2")
    full = losses(case, tmp, RES + ("--recompute-granularity", "full", "--recompute-method", "uniform",
                                    "--recompute-num-layers", "1"))
    check(full == res, f"{case}: full recompute bit-identical {full} vs {res}")
    sel = losses(case, tmp, RES + ("--recompute-granularity", "selective"))
    check(sel == res, f"{case}: selective recompute bit-identical {sel} vs {res}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_case("gpt_bf16", tmp, mx.BF16)
        test_case("llama_bf16", tmp, mx.BF16)
        one = losses("gpt_bf16", tmp, RES)
        dp = losses("gpt_bf16", tmp, RES + ("--use-distributed-optimizer",), world=2)
        check(close(dp, one, 2e-6), f"dp2 distributed optimizer within 2e-6: {dp} vs {one}")
        tp2 = ("--tensor-model-parallel-size", "2")
        tp = losses("gpt_bf16", tmp, RES + tp2, world=2)
        tp_plain = losses("gpt_bf16", tmp, tp2, world=2)
        check(tp != tp_plain and close(tp, tp_plain, 1e-3), f"tp2 within 1e-3 of plain: {tp} vs {tp_plain}")
        # pp 2 (fp32 stage messages, upstream's pipeline_dtype): the Llama-style case (untied, so
        # no tied-embedding grad sum whose order differs) equals one process
        lone = losses("llama_bf16", tmp, RES)
        lpp = losses("llama_bf16", tmp, RES + ("--pipeline-model-parallel-size", "2"), world=2)
        check(close(lpp, lone, 2e-7), f"llama pp2 within 2e-7: {lpp} vs {lone}")
        vpp = losses("llama_bf16", tmp, RES + ("--pipeline-model-parallel-size", "2",
                                               "--num-layers-per-virtual-pipeline-stage", "1"), world=2)
        check(close(vpp, lone, 2e-7), f"llama pp2 x vpp2 within 2e-7: {vpp} vs {lone}")
        fp16 = losses("gpt_fp16_static", tmp, RES)
        check(len(fp16) == 6 and all(math.isfinite(x) for x in fp16), f"fp16 static scale: {fp16}")
        drop = losses("gpt_bf16", tmp, RES + ("--hidden-dropout", "0.1"))
        check(len(drop) == 6 and all(math.isfinite(x) for x in drop) and drop != one,
              f"hidden dropout 0.1: {drop}")
    return summary("test_fp32_residual")


if __name__ == "__main__":
    sys.exit(main())
