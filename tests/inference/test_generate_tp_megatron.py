"""Tensor-parallel generation from a checkpoint Megatron-LM itself saved: Megatron core_v0.12.1
(on the CPU, /work/shared/megatron-cpu) trains the Llama-style GQA case llama_tp2_blend of
tests/checkpointing/megatron_cases.py (4 layers, 4 heads in 2 query groups, SwiGLU, RoPE,
RMSNorm) at TP 2 and saves --ckpt-format torch: live for 2 iterations when MC_MEGATRON_ROOT (or
/work/ref/Megatron-LM) holds a checkout, else the committed golden of that case
(tests/golden/checkpointing/llama_tp2_blend/save, Megatron's own iteration-3 save). build/bin/generate at TP 2
under mpirun, each rank reading only its own mp_rank_NN file through the training loader,
gives the greedy tokens of the one-process run (the converter's loader merging both files) and
logits within 1e-5 of max |logit|."""
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "checkpointing"))
from mc_test import BUILD, Checks, mpirun_cmd, run_cmd  # noqa: E402
import megatron_cases as mcs  # noqa: E402

C = Checks("test_generate_tp_megatron")
GEN = os.path.join(BUILD, "bin", "generate")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
PROMPTS = ["5 6 7 8", "9 10", "300 1 2 3 4 5"]


def gen(np_, ck, logits):
    cmd = [GEN, "--load", ck, "--output-format", "json", "--max-tokens", "6", "--greedy",
           "--dump-logits", logits, *sum((["--prompt", p] for p in PROMPTS), [])]
    if np_ > 1:
        cmd = mpirun_cmd(np_, cmd + ["--tensor-model-parallel-size", str(np_)], ("OMP_NUM_THREADS=1",))
    p = run_cmd(cmd, ENV, 300)
    C.check(p.returncode == 0, "generate np %d: %s" % (np_, p.stderr[-2000:]))
    return [json.loads(x)["generated_tokens"] for x in p.stdout.splitlines() if x.startswith("{")], p


def megatron_checkpoint(tmp):
    """Megatron's TP 2 save: made live when a checkout is at hand, else the committed golden."""
    root = os.environ.get("MC_MEGATRON_ROOT", "/work/ref/Megatron-LM")
    if not os.path.isdir(os.path.join(root, "megatron")):
        print("  no Megatron-LM checkout at %s: Megatron's committed iteration-3 save" % root)
        return os.path.join(mcs.GOLDEN, "llama_tp2_blend", "save")
    os.environ["MC_MEGATRON_ROOT"] = root
    ck = os.path.join(tmp, "ck")
    rc, out = mcs.run_megatron("llama_tp2_blend", tmp, extra=("--save", ck, "--save-interval", "2"),
                               iters=2, port=29641, timeout=600)
    ok = rc == [0, 0] and os.path.isdir(os.path.join(ck, "iter_0000002", "mp_rank_01"))
    C.check(ok, "Megatron llama_tp2_blend: %s %s" % (rc, out[-2000:]))
    return ck if ok else None


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ck = megatron_checkpoint(tmp)
        if ck is None:
            sys.exit(C.summary())
        l1, l2 = os.path.join(tmp, "l1.npy"), os.path.join(tmp, "l2.npy")
        t1, _ = gen(1, ck, l1)
        t2, p = gen(2, ck, l2)
        C.check("loading torch checkpoint" in p.stderr and "this rank's tensor-parallel shard" in p.stderr,
                "TP 2 did not read its own file: %s" % p.stderr[-800:])
        C.check(t1 and t1 == t2, "TP 2 tokens %s, TP 1 %s" % (t2, t1))
        if os.path.exists(l1) and os.path.exists(l2):
            a, b = np.load(l1), np.load(l2)
            rel = float(np.abs(a - b).max() / np.abs(a).max()) if a.shape == b.shape else 1.0
            C.check(rel < 1e-5, "logits: shapes %s / %s, max diff %.3g of max |logit|" % (a.shape, b.shape, rel))
            print("  Megatron's TP 2 checkpoint: tokens %s at TP 1 and 2, logits %.2g of max |logit|" % (t1, rel))
    sys.exit(C.summary())


if __name__ == "__main__":
    main()
