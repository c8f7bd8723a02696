"""Shared pieces of the convert_checkpoint tests: running pretrain_gpt / convert_checkpoint,
reading torch checkpoints (any TP/PP layout) back with torch, and a pass/fail counter."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "checkpointing"))
import torch_stubs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, SRC, Checks, gpt2, mpirun_cmd, run_cmd  # noqa: E402,F401

torch_stubs.install()
torch.set_num_threads(1)

PRETRAIN = os.path.join(BUILD, "bin", "pretrain_gpt")
CONVERT = os.path.join(BUILD, "bin", "convert_checkpoint")

GPT = gpt2(4)
LLAMA = ["--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "8",
         "--group-query-attention", "--num-query-groups", "4", "--ffn-hidden-size", "48",
         "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
         "--disable-bias-linear", "--untie-embeddings-and-output-weights"]


class Counter(Checks):
    def finish(self):
        sys.exit(self.summary())


def train_args(model, tmp, iters, tp=1, pp=1, extra=(), vocab_div=128):
    return [*model, "--seq-length", "16", "--max-position-embeddings", "16",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(iters),
            "--lr", "1e-3", "--mock-data", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", "4096", "--make-vocab-size-divisible-by", str(vocab_div),
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
            "--hidden-dropout", "0", "--ckpt-format", "torch", "--transformer-impl", "local",
            "--log-interval", "1", "--eval-iters", "0",
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            *extra]


def run(cmd, np=1, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS="1", MC_TEST_LOG_EXACT="1")
    return run_cmd(cmd if np == 1 else mpirun_cmd(np, cmd), env, timeout)


def convert(load, save, *opts):
    return run([CONVERT, "--model-type", "GPT", "--load-dir", load, "--save-dir", save, *opts])


def iteration_dir(ckpt):
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")) as f:
        it = f.read().strip()
    return os.path.join(ckpt, "release" if it == "release" else "iter_%07d" % int(it))


def load_rank(ckpt, tp_rank, pp_rank, pp):
    name = "mp_rank_%02d" % tp_rank + ("_%03d" % pp_rank if pp > 1 else "")
    return torch.load(os.path.join(iteration_dir(ckpt), name, "model_optim_rng.pt"))


def layout(ckpt):
    a = load_rank(ckpt, 0, 0, 2 if os.path.isdir(os.path.join(iteration_dir(ckpt), "mp_rank_00_000")) else 1)["args"]
    return a.tensor_model_parallel_size, a.pipeline_model_parallel_size
