"""The Megatron-LM core_v0.12.1 runs behind tests/golden/checkpointing/<case>/ and the live
end-to-end checks of test_ckpt_parallel.py: each case is a tiny GPT trained by Megatron itself
(/work/shared/megatron-cpu/run_pretrain.py: real pretrain_gpt.py, real GPTDataset on a small
preprocessed corpus, CPU + gloo, one process per rank) with the same arguments megatron.c takes.

run_megatron(case, ...) launches the ranks; ours(case, ...) is megatron.c's command line for the
same run. Used by make_megatron_goldens.py (writes the goldens) and the tests."""
import os
import re
import shutil
import subprocess
import sys

SRC = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MC_BUILD_DIR", os.path.join(SRC, "build"))
EXE = os.path.join(BUILD, "bin", "pretrain_gpt")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import mpirun_cmd, run_cmd  # noqa: E402
RUN_PRETRAIN = "/work/shared/megatron-cpu/run_pretrain.py"
GOLDEN = os.path.join(SRC, "tests", "golden", "checkpointing")
DATA = os.path.join(SRC, "tests", "golden", "data")
CORPUS_A = os.path.join(DATA, "null_eod_uint16", "text_document")
CORPUS_B = os.path.join(GOLDEN, "corpus_b", "text_document")  # null_int32 tokens mod 509, uint16

GPT2 = ("--num-layers", "4", "--hidden-size", "16", "--num-attention-heads", "4")
LLAMA = ("--num-layers", "4", "--hidden-size", "16", "--num-attention-heads", "4",
         "--group-query-attention", "--num-query-groups", "2", "--ffn-hidden-size", "40",
         "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
         "--disable-bias-linear", "--untie-embeddings-and-output-weights")

# case -> (world size, model/parallel arguments, data arguments)
CASES = {
    "gpt_pp2": (2, GPT2 + ("--pipeline-model-parallel-size", "2"), ("--data-path", CORPUS_A)),
    "llama_tp2_blend": (2, LLAMA + ("--tensor-model-parallel-size", "2"),
                        ("--data-path", "0.3", CORPUS_A, "0.7", CORPUS_B)),
    "gpt_dp2_distopt": (2, GPT2 + ("--use-distributed-optimizer",), ("--data-path", CORPUS_A)),
    "llama_tp2pp2": (4, LLAMA + ("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"),
                     ("--data-path", CORPUS_A)),
    "gpt_dp2pp2_distopt": (4, GPT2 + ("--pipeline-model-parallel-size", "2", "--use-distributed-optimizer"),
                           ("--data-path", CORPUS_B)),
    "gpt_tp2dp2_distopt": (4, GPT2 + ("--tensor-model-parallel-size", "2", "--use-distributed-optimizer"),
                           ("--data-path", CORPUS_A)),
    "gpt_legacy_pp2": (2, GPT2 + ("--pipeline-model-parallel-size", "2", "--use-legacy-models"),
                       ("--data-path", CORPUS_A)),
    # interleaved pipelining: model0/model1 per file, one distrib_optim.pt buffer per chunk
    "gpt_pp2vpp2": (2, GPT2 + ("--pipeline-model-parallel-size", "2",
                               "--num-virtual-stages-per-pipeline-rank", "2"), ("--data-path", CORPUS_A)),
    "gpt_dp2pp2vpp2_distopt": (4, GPT2 + ("--pipeline-model-parallel-size", "2",
                                          "--num-virtual-stages-per-pipeline-rank", "2",
                                          "--use-distributed-optimizer"), ("--data-path", CORPUS_B)),
    "llama_pp2vpp2": (2, LLAMA + ("--pipeline-model-parallel-size", "2",
                                  "--num-virtual-stages-per-pipeline-rank", "2"), ("--data-path", CORPUS_A)),
}
# torch_dist checkpoints (tests/checkpointing/test_dist_ckpt.py, goldens in
# tests/golden/checkpointing/dist_<case>/): Megatron runs them with --ckpt-format torch_dist
DIST_CASES = {
    "gpt_tp1": (1, GPT2, ("--data-path", CORPUS_A)),
    "gpt_tp2pp2": (4, GPT2 + ("--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"),
                   ("--data-path", CORPUS_A)),
    "llama_tp2": (2, LLAMA + ("--tensor-model-parallel-size", "2"),
                  ("--data-path", "0.3", CORPUS_A, "0.7", CORPUS_B)),
}
ALL_CASES = {**CASES, **DIST_CASES}
# the virtual-pipeline cases (test_ckpt_vpp.py; test_ckpt_parallel.py runs the others)
VPP = ("gpt_pp2vpp2", "gpt_dp2pp2vpp2_distopt", "llama_pp2vpp2")

ITERS, SAVE_AT = 6, 3


def common(tmp, iters=ITERS):
    return ("--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
            "--global-batch-size", "8", "--train-iters", str(iters), "--lr", "1e-2",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", "1", "--lr-decay-iters", "8", "--log-interval", "1",
            "--eval-interval", "100", "--eval-iters", "0", "--split", "100,0,0",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "512",
            "--make-vocab-size-divisible-by", "64", "--data-cache-path", os.path.join(tmp, "cache"),
            "--attention-dropout", "0", "--hidden-dropout", "0", "--use-cpu-initialization",
            "--ckpt-format", "torch", "--seed", "1234")


MEGATRON_ONLY = ("--distributed-backend", "gloo", "--transformer-impl", "local",
                 "--no-gradient-accumulation-fusion", "--no-persist-layer-norm", "--no-rope-fusion")


def case_args(case, tmp, extra=(), iters=ITERS):
    world, model, data = ALL_CASES[case]
    return list(model + data + common(tmp, iters) + tuple(extra))


def megatron_root():
    root = os.environ.get("MC_MEGATRON_ROOT")
    return root if root and os.path.exists(RUN_PRETRAIN) else None


def megatron_python(torch2=False):
    """The interpreter Megatron runs under: Debian's torch 1.13, or with torch2 (torch_dist
    checkpoints need torch.distributed.checkpoint) PyPI's torch 2.x from bench/setup_torch.sh
    (MC_TORCH2_PYTHON, default build/bench-venv); None when that one is absent."""
    if not torch2:
        return "/usr/bin/python3"
    py = os.environ.get("MC_TORCH2_PYTHON", os.path.join(BUILD, "bench-venv", "bin", "python"))
    return py if os.path.exists(py) else None


def run_megatron(case, tmp, extra=(), port=29600, iters=ITERS, variant=None, timeout=900, python=None):
    """All ranks of Megatron for `case`; returns (return codes, stdout of all ranks joined).
    `python`: the interpreter (default Debian's torch 1.13)."""
    world = ALL_CASES[case][0]
    argv = case_args(case, tmp, tuple(extra) + MEGATRON_ONLY, iters)
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), MEGATRON_ROOT=megatron_root(),
                   OMP_NUM_THREADS="1", CUDA_DEVICE_MAX_CONNECTIONS="1")
        if variant:
            env["E2E_VARIANT"] = variant
        procs.append(subprocess.Popen([python or "/usr/bin/python3", RUN_PRETRAIN, os.path.join(tmp, f"rec{r}.json"),
                                       *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    rcs = [p.returncode for p in procs]
    for r, (rc, out) in enumerate(zip(rcs, outs)):
        if rc:  # every failing rank's own tail: the joined output's tail shows the last rank only
            print(f"Megatron {case} rank {r} exited {rc}; its last lines:\n{out[-1500:]}", flush=True)
    return rcs, "\n".join(outs)


def mpirun(n):
    return mpirun_cmd(n, [], ("OMP_NUM_THREADS=1",))


def run_ours(case, tmp, extra=(), iters=ITERS, timeout=600):
    world = ALL_CASES[case][0]
    cmd = ([] if world == 1 else mpirun(world)) + [EXE] + case_args(case, tmp, extra, iters)
    return run_cmd(cmd, dict(os.environ, OMP_NUM_THREADS="1"), timeout)


TRAIN = re.compile(r"^ \[[^]]*\] iteration +(\d+)/ +\d+ \| consumed samples: +(\d+) \| "
                   r"elapsed time per iteration \(ms\): [\d.]+ \| (.*)$")


def train_lines(out):
    """iteration -> (consumed samples, the rest of the line after the elapsed time)"""
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in map(TRAIN.match, out.splitlines()) if m}


NUM = re.compile(r"(learning rate|lm loss|grad norm): ([\d.E+-]+)")


def numbers(rest):
    return {k: float(v) for k, v in NUM.findall(rest)}


def copy_checkpoint(src, dst, iteration):
    """The iteration's directory and a tracker naming it."""
    os.makedirs(dst, exist_ok=True)
    it = f"iter_{iteration:07d}"
    shutil.copytree(os.path.join(src, it), os.path.join(dst, it))
    with open(os.path.join(dst, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


def rng_state_diffs(ours, gold):
    """The entries of our rng_state (one rank's list) that differ from Megatron's for the same seed
    and rank. Megatron saves the states at save time; ours are those right after its seeding,
    which Megatron's runs here leave unchanged but for the torch CPU generator
    (--use-cpu-initialization draws from it): there only its layout, seed and seeded flag count."""
    import numpy as np
    import torch
    if type(ours) is not list or type(gold) is not list or len(ours) != len(gold):
        return [f"a list of {len(gold)}: {type(ours).__name__}"]
    bad = []
    for o, g in zip(ours, gold):
        if list(o) != list(g):
            return bad + [f"keys {list(o)}"]
        if o["random_rng_state"] != g["random_rng_state"]:
            bad.append("random_rng_state")
        on, gn = o["np_rng_state"], g["np_rng_state"]
        if not (on[0] == gn[0] and on[1].dtype == gn[1].dtype and on[1].shape == gn[1].shape and
                np.array_equal(on[1], gn[1]) and on[2:] == gn[2:] and [type(x) for x in on] == [type(x) for x in gn]):
            bad.append("np_rng_state")
        ot, gt = o["torch_rng_state"], g["torch_rng_state"]
        if not (ot.dtype == gt.dtype == torch.uint8 and ot.shape == gt.shape and
                torch.equal(ot[:8], gt[:8]) and torch.equal(ot[12:16], gt[12:16])):
            bad.append("torch_rng_state (layout, seed)")
        if not torch.equal(o["cuda_rng_state"], g["cuda_rng_state"]):
            bad.append("cuda_rng_state")
        ok, gk = o["rng_tracker_states"], g["rng_tracker_states"]
        if list(ok) != list(gk) or not all(torch.equal(ok[k], gk[k]) for k in gk):
            bad.append("rng_tracker_states")
    return bad


def megatron_continues(case, save, ours, tmp, extra, port, gold_log, what, check, every=True):
    """Megatron loads our iteration-3 torch_dist save `save` at `case` (with `extra`, the
    megatron-cpu shim's fixload) and continues: consumed samples and learning rate as ours, lm
    loss within 1e-5 relative, at iterations 4-6 (`every`; else those Megatron printed, from 4).
    Live with MC_MEGATRON_ROOT and a torch 2 python, else from its logged run `gold_log`."""
    py = megatron_python(torch2=True)
    if megatron_root() and py:
        rcs, out = run_megatron(case, tmp, tuple(extra) + ("--load", save, "--ckpt-step", "3"),
                                port=port, python=py, variant="fixload")
        check(not any(rcs), f"Megatron loading ours: {rcs} {out[-800:]}")
        how = "live"
    else:
        out, how = open(gold_log).read(), "its logged run"
    theirs = train_lines(out)
    check(sorted(theirs) == [4, 5, 6] if every else bool(theirs) and min(theirs) == 4,
          f"Megatron resumed at 4: {sorted(theirs)}")
    loss = {k: {it: numbers(rest).get("lm loss", float("nan")) for it, (_, rest) in v.items()}
            for k, v in (("ours", ours), ("theirs", theirs))}
    lo, lt = loss["ours"], loss["theirs"]
    for it in sorted(theirs):
        check(theirs[it][0] == ours[it][0], f"Megatron {it}: consumed samples {theirs[it][0]} vs {ours[it][0]}")
        check(numbers(theirs[it][1]).get("learning rate") == numbers(ours[it][1]).get("learning rate"),
              f"Megatron {it}: learning rate")
        check(abs(lt[it] - lo[it]) <= 1e-5 * abs(lo[it]), f"Megatron {it}: lm loss {lt[it]} vs ours {lo[it]}")
    print(f"Megatron ({how}) continues from our {what} (Megatron, ours):", [(lt[i], lo[i]) for i in sorted(theirs)])
