"""The Megatron-LM core_v0.12.1 runs behind tests/golden/mixed/<case>/ (bf16 and fp16): tiny
GPT-2 style and Llama style models of tests/checkpointing/megatron_cases.py (reused by import:
model arguments, the shared arguments, the corpora, the log-line parser), trained by Megatron
itself through run_pretrain_mixed.py (the megatron-cpu runner with an fp32-internal RMSNorm).

Megatron runs under PyPI's torch 2.x (MC_TORCH2_PYTHON, default /work/torch2-venv/bin/python):
torch 1.13 has no fp16 LayerNorm on the CPU, and its CPU bf16 matmul accumulates in bf16 in three
of the four transpose layouts (x @ W^T alone accumulates in fp32), so its backward GEMMs are not
what Megatron computes on a GPU (cuBLAS: fp32 accumulation) nor what megatron.c does; torch 2.x's
CPU bf16 / fp16 matmuls accumulate in fp32 and round once.
Used by make_megatron_mixed_goldens.py (writes the goldens) and test_megatron_mixed.py."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checkpointing"))
import megatron_cases as mcs  # noqa: E402

GOLDEN = os.path.join(mcs.SRC, "tests", "golden", "mixed")
RUNNER = os.path.join(HERE, "run_pretrain_mixed.py")
BF16 = ("--bf16", "--no-masked-softmax-fusion")
# fp16 with fp32 main-grad accumulation (the *_fp16_grad16 cases below keep Megatron's default
# for fp16, an fp16 grad buffer)
FP16 = ("--fp16", "--accumulate-allreduce-grads-in-fp32", "--no-masked-softmax-fusion")
STATIC_SCALE = "4096"
# Megatron's default for fp16: the DDP gradient buffer (main_grad) in fp16, so every micro-batch's
# weight grad is added in fp16 and the data-parallel reduce sums fp16
FP16_GRAD16 = ("--fp16", "--no-masked-softmax-fusion")
# a dynamic scale that grows and backs off within 6 iterations (hysteresis 1, window 2)
WINDOW = ("--initial-loss-scale", "262144", "--hysteresis", "1", "--loss-scale-window", "2")

# case -> (world size, model/parallel arguments, precision arguments, data arguments)
CASES = {
    "gpt_bf16": (1, mcs.GPT2, BF16, ("--data-path", mcs.CORPUS_A)),
    "llama_bf16": (1, mcs.LLAMA, BF16, ("--data-path", mcs.CORPUS_A)),
    "gpt_tp2_bf16": (2, mcs.GPT2 + ("--tensor-model-parallel-size", "2"), BF16, ("--data-path", mcs.CORPUS_A)),
    "gpt_pp2_bf16": (2, mcs.GPT2 + ("--pipeline-model-parallel-size", "2"), BF16, ("--data-path", mcs.CORPUS_A)),
    "gpt_dp2_distopt_bf16": (2, mcs.GPT2 + ("--use-distributed-optimizer",), BF16, ("--data-path", mcs.CORPUS_A)),
    # Megatron's default dynamic scale: 2^32 initial, hysteresis 2, window 1000
    "gpt_fp16_dynamic": (1, mcs.GPT2, FP16, ("--data-path", mcs.CORPUS_A)),
    # a dynamic scale that moves both ways after the iteration-3 checkpoint: with hysteresis 1 and
    # window 2, iterations 1-4 succeed (growth to 2^19 at 2, 2^20 at 4), 5 overflows (back to 2^19), 6 succeeds
    "gpt_fp16_dynamic_window": (1, mcs.GPT2, FP16 + ("--initial-loss-scale", "262144", "--hysteresis", "1",
                                                      "--loss-scale-window", "2"), ("--data-path", mcs.CORPUS_A)),
    "gpt_fp16_static": (1, mcs.GPT2, FP16 + ("--loss-scale", STATIC_SCALE), ("--data-path", mcs.CORPUS_A)),
    # fp16 gradient buffers (Megatron's fp16 default): one process, dp 2, dp 2 with the
    # distributed optimizer (reduce-scatter of the fp16 buffer)
    "gpt_fp16_grad16": (1, mcs.GPT2, FP16_GRAD16 + WINDOW, ("--data-path", mcs.CORPUS_A)),
    "gpt_dp2_fp16_grad16": (2, mcs.GPT2, FP16_GRAD16 + WINDOW, ("--data-path", mcs.CORPUS_A)),
    "gpt_dp2_distopt_fp16_grad16": (2, mcs.GPT2 + ("--use-distributed-optimizer",), FP16_GRAD16 + WINDOW,
                                    ("--data-path", mcs.CORPUS_A)),
}
# Megatron cannot resume a distributed-optimizer checkpoint without Apex/TE (KeyError: 'step'):
# the shim's opt-in workaround for reference runs
VARIANT = {"gpt_dp2_distopt_bf16": "fixload", "gpt_dp2_distopt_fp16_grad16": "fixload"}


def is_fp16(case):
    return "--fp16" in CASES[case][2]


def torch2_python():
    py = os.environ.get("MC_TORCH2_PYTHON", "/work/torch2-venv/bin/python")
    return py if os.path.exists(py) else None


def python_for(case):
    """Megatron's interpreter for the case (torch 2.x); None when it is not installed."""
    return torch2_python()


def args(case, tmp, extra=(), fp32=False):
    """The command line both programs take (fp32: the same run without --bf16/--fp16)."""
    _, model, prec, data = CASES[case]
    prec = () if fp32 else prec
    return list(model + prec + data + mcs.common(tmp) + tuple(extra))


def run_megatron(case, tmp, extra=(), port=29800, fp32=False, rmsnorm="fp32", timeout=900):
    """All ranks of Megatron for `case`; (return codes, the ranks' output joined)."""
    world = CASES[case][0]
    argv = args(case, tmp, tuple(extra) + mcs.MEGATRON_ONLY, fp32)
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), MEGATRON_ROOT=mcs.megatron_root(),
                   OMP_NUM_THREADS="1", CUDA_DEVICE_MAX_CONNECTIONS="1", MC_RMSNORM=rmsnorm)
        if case in VARIANT:
            env["E2E_VARIANT"] = VARIANT[case]
        procs.append(subprocess.Popen([python_for(case), RUNNER, os.path.join(tmp, f"rec{r}.json"), *argv],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    return [p.returncode for p in procs], "\n".join(outs)


def run_ours(case, tmp, extra=(), timeout=600):
    world = CASES[case][0]
    cmd = ([] if world == 1 else mcs.mpirun(world)) + [mcs.EXE] + args(case, tmp, extra)
    return mcs.run_cmd(cmd, dict(os.environ, OMP_NUM_THREADS="1"), timeout)


FIELDS = re.compile(r"(learning rate|lm loss|grad norm|loss scale|number of skipped iterations|"
                    r"number of nan iterations): +([\d.E+-]+)")


def fields(rest):
    """The numbers of a training line (after the elapsed time) by name."""
    return {k: float(v) for k, v in FIELDS.findall(rest)}


train_lines = mcs.train_lines
