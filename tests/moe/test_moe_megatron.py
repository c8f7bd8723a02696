"""Mixture of experts against Megatron-LM core_v0.12.1 itself (transformer/moe/: TopKRouter,
SequentialMLP, the allgather / alltoall dispatchers at expert-parallel size 1, the aux losses
through MoEAuxLossAutoScaler, track_moe_metrics in the log line). For each case Megatron trains
6 iterations on the CPU (/work/shared/megatron-cpu/run_pretrain.py, with a recording TensorBoard
writer: Megatron prints the aux losses only when one exists) and saves at 3 and 6; pretrain_gpt
loads its iteration-3 checkpoint and trains 4-6 with --tensorboard-dir:
- lm loss, load_balancing_loss and z_loss of every log line within 1e-5 relative of Megatron's,
  at the same place in the line; learning rate and consumed samples identical;
- every model tensor of our iteration-6 checkpoint within 2e-6 of Megatron's (so the grads of
  the router, the experts and the aux losses were Megatron's), with Megatron's keys
  (mlp.router.weight, mlp.experts.local_experts.E.linear_fc1.weight, their _extra_state), order,
  shapes and dtypes;
- the same run without the aux loss's grad (--moe-aux-loss-coeff 0) lands outside that
  tolerance (the check can fail).
Cases: SwiGLU + RMSNorm + RoPE with top-2 softmax routing, aux loss and z-loss; GELU + LayerNorm
with a dense second layer (--moe-layer-freq 2), --moe-ffn-hidden-size, pre-softmax top-2,
seq_aux_loss; sigmoid top-1 routing at data-parallel size 2.
Megatron's side comes from tests/golden/moe/<case>/ (made by --make-goldens with MC_MEGATRON_ROOT
and MC_TORCH2_PYTHON set), or runs live when both are set."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checkpointing"))
sys.path.insert(0, os.path.join(HERE, ".."))
import megatron_cases as mcs  # noqa: E402
from mc_test import check, summary  # noqa: E402

GOLDEN = os.path.join(mcs.SRC, "tests", "golden", "moe")
SWIGLU = ("--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
          "--ffn-hidden-size", "48", "--position-embedding-type", "rope", "--normalization", "RMSNorm",
          "--swiglu", "--disable-bias-linear", "--untie-embeddings-and-output-weights")
GELU = ("--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
        "--ffn-hidden-size", "40", "--disable-bias-linear")
MOE = ("--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "1e-2")
CASES = {
    "swiglu_top2_zloss": (1, SWIGLU + MOE + ("--moe-z-loss-coeff", "1e-3"), ("--data-path", mcs.CORPUS_A)),
    "gelu_presoftmax_seqaux": (1, GELU + MOE + (
        "--moe-layer-freq", "2", "--moe-ffn-hidden-size", "24", "--moe-router-pre-softmax",
        "--moe-router-load-balancing-type", "seq_aux_loss"),
        ("--data-path", mcs.CORPUS_A)),
    "sigmoid_top1_dp2": (2, SWIGLU + ("--num-experts", "4", "--moe-router-topk", "1",
                                      "--moe-router-score-function", "sigmoid",
                                      "--moe-aux-loss-coeff", "1e-2"), ("--data-path", mcs.CORPUS_B)),
}
mcs.ALL_CASES.update(CASES)
RANK_DIR = "mp_rank_00"
AUX = re.compile(r"(load_balancing_loss|z_loss): ([\d.E+-]+)")


def live():
    return mcs.megatron_root() and mcs.megatron_python(torch2=True)


def run_megatron(case, tmp, port):
    """Megatron's 6 iterations saving at 3 and 6 (rank processes under the torch 2 interpreter,
    with the recording TensorBoard writer on the last rank): (save dir, joined output)."""
    world = CASES[case][0]
    save = os.path.join(tmp, f"megatron_{case}")
    argv = mcs.case_args(case, tmp, ("--save", save, "--save-interval", "3", "--tensorboard-dir",
                                     os.path.join(tmp, "tb_" + case)) + mcs.MEGATRON_ONLY)
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), MEGATRON_ROOT=mcs.megatron_root(),
                   OMP_NUM_THREADS="1", CUDA_DEVICE_MAX_CONNECTIONS="1",
                   MC_TB_RECORD=os.path.join(tmp, f"tb_{case}_{r}.jsonl"))
        procs.append(subprocess.Popen([mcs.megatron_python(torch2=True),
                                       os.path.join(HERE, "megatron_tb_record.py"), mcs.RUN_PRETRAIN,
                                       os.path.join(tmp, f"rec_{case}_{r}.json"), *argv],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    out = "\n".join(outs)
    if any(p.returncode for p in procs) or len(mcs.train_lines(out)) != mcs.ITERS:
        print(out[-3000:])
        raise SystemExit(f"{case}: Megatron failed {[p.returncode for p in procs]}")
    return save, out


def model_tensors(path, out):
    """Megatron's model tensors of one checkpoint file, saved as a plain dict (readable by torch
    1.13) with the torch 2 interpreter that wrote it."""
    code = ("import sys, torch; sd = torch.load(sys.argv[1], weights_only=False)['model']; "
            "torch.save({k: v.clone() for k, v in sd.items() if torch.is_tensor(v)}, sys.argv[2])")
    env = dict(os.environ, PYTHONPATH=mcs.megatron_root())
    r = subprocess.run([mcs.megatron_python(torch2=True), "-c", code, path, out], env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"reading {path}: {r.stderr[-600:]}")


def megatron_side(case, tmp, port):
    """(iteration-3 checkpoint dir, train lines, model tensors at 6) from a live run or the
    goldens."""
    if live():
        save, out = run_megatron(case, tmp, port)
        model6 = os.path.join(tmp, f"model6_{case}.pt")
        model_tensors(os.path.join(save, "iter_0000006", RANK_DIR, "model_optim_rng.pt"), model6)
        with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("3")
        return save, mcs.train_lines(out), model6, out
    g = os.path.join(GOLDEN, case)
    save = os.path.join(tmp, f"golden_{case}")
    shutil.copytree(os.path.join(g, "save"), save)
    with open(os.path.join(g, "megatron_log.txt")) as f:
        out = f.read()
    return save, mcs.train_lines(out), os.path.join(g, "model6.pt"), out


def make_goldens():
    for i, case in enumerate(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            save, lines, model6, out = megatron_side(case, tmp, 29760 + 3 * i)
            dst = os.path.join(GOLDEN, case)
            shutil.rmtree(dst, ignore_errors=True)
            mcs.copy_checkpoint(save, os.path.join(dst, "save"), 3)
            shutil.copy(model6, os.path.join(dst, "model6.pt"))
            with open(os.path.join(dst, "megatron_log.txt"), "w") as f:
                f.write("\n".join(l for l in out.splitlines() if mcs.TRAIN.match(l)) + "\n")
            print(case, "written")


def aux_values(rest):
    return [(k, float(v)) for k, v in AUX.findall(rest)]


def compare_lines(case, ours, theirs):
    check(sorted(ours) == [4, 5, 6], f"{case}: iterations {sorted(ours)}")
    for it in sorted(ours):
        a, b = ours[it], theirs.get(it, ("?", ""))
        check(a[0] == b[0], f"{case} {it}: consumed samples {a[0]} vs {b[0]}")
        na, nb = mcs.numbers(a[1]), mcs.numbers(b[1])
        check(na.get("learning rate") == nb.get("learning rate"), f"{case} {it}: lr {na} {nb}")
        la, lb = na.get("lm loss", float("nan")), nb.get("lm loss", float("nan"))
        check(abs(la - lb) <= 1e-5 * abs(lb), f"{case} {it}: lm loss {la} vs {lb}")
        xa, xb = aux_values(a[1]), aux_values(b[1])
        # the same keys, in Megatron's order, right after lm loss
        check([k for k, _ in xa] == [k for k, _ in xb] and xb and
              re.search(r"lm loss: [\d.E+-]+ \| " + xb[0][0], a[1]) is not None,
              f"{case} {it}: aux loss keys {xa} vs {xb}")
        for (k, va), (_, vb) in zip(xa, xb):
            check(abs(va - vb) <= 1e-5 * abs(vb), f"{case} {it}: {k} {va} vs {vb}")
    print(f"{case}:", [(mcs.numbers(ours[i][1]).get("lm loss"), aux_values(ours[i][1]),
                        aux_values(theirs[i][1])) for i in sorted(ours)])


def load_model(path):
    import torch
    import torch_stubs
    torch_stubs.install()
    sd = torch.load(path)
    return sd["model"] if "model" in sd else sd


def compare_params(case, ours_file, model6, tol=2e-6, expect_close=True):
    """Max |ours - Megatron| over the model tensors at iteration 6; checks keys when expected
    close. Returns the largest difference."""
    o, g = load_model(ours_file), load_model(model6)
    ot = {k: v for k, v in o.items() if hasattr(v, "shape")}
    if expect_close:
        keys_o = [(k, tuple(v.shape), v.dtype) for k, v in ot.items()]
        keys_g = [(k, tuple(v.shape), v.dtype) for k, v in g.items()]
        check(keys_o == keys_g, f"{case}: model keys/shapes/dtypes {keys_o[:8]} vs {keys_g[:8]}")
        extra = [k for k in o if k.endswith("._extra_state") and ".local_experts." in k]
        check(len(extra) == 2 * sum(1 for k in ot if ".local_experts." in k) // 2 and extra,
              f"{case}: experts' _extra_state entries {extra[:4]}")
    worst = 0.0
    for k, v in g.items():
        if k in ot and tuple(ot[k].shape) == tuple(v.shape):
            worst = max(worst, float((ot[k].float() - v.float()).abs().max()))
    if expect_close:
        check(worst <= tol, f"{case}: params at iteration 6 differ by {worst:.3g} (> {tol})")
    return worst


def run_case(case, tmp, port):
    save, theirs, model6, _ = megatron_side(case, tmp, port)
    mine = os.path.join(tmp, f"ours_{case}")
    r = mcs.run_ours(case, tmp, ("--load", save, "--transformer-impl", "local", "--save", mine,
                                 "--save-interval", "3", "--tensorboard-dir", os.path.join(tmp, "ourtb_" + case)))
    check(r.returncode == 0, f"{case}: resume from Megatron: {r.stderr[-800:]}")
    if r.returncode:
        return
    compare_lines(case, mcs.train_lines(r.stdout), theirs)
    ours6 = os.path.join(mine, "iter_0000006", RANK_DIR, "model_optim_rng.pt")
    worst = compare_params(case, ours6, model6)
    print(f"{case}: params at iteration 6 within {worst:.3g} of Megatron's")
    if case == "swiglu_top2_zloss":
        # without the aux loss's grad the parameters leave the tolerance: the check can fail
        other = os.path.join(tmp, f"noaux_{case}")
        r = mcs.run_ours(case, tmp, ("--load", save, "--transformer-impl", "local", "--save", other,
                                     "--save-interval", "3", "--moe-aux-loss-coeff", "0"))
        w = compare_params(case, os.path.join(other, "iter_0000006", RANK_DIR, "model_optim_rng.pt"),
                           model6, expect_close=False) if r.returncode == 0 else 0.0
        check(w > 2e-6 * 10, f"{case}: without the aux loss the params still match ({w:.3g})")
        # and without --tensorboard-dir Megatron's line has no aux losses (no writer)
        r = mcs.run_ours(case, tmp, ("--load", save, "--transformer-impl", "local", "--exit-interval", "4"))
        lines = mcs.train_lines(r.stdout)
        check(r.returncode == 0 and 4 in lines and not aux_values(lines[4][1]),
              f"{case}: no aux losses in the line without a TensorBoard writer: {lines} {r.stderr[-600:]}")


def main():
    if "--make-goldens" in sys.argv:
        if not live():
            raise SystemExit("set MC_MEGATRON_ROOT and MC_TORCH2_PYTHON")
        return make_goldens()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            run_case(case, tmp, 29760 + 3 * i)
    return summary("test_moe_megatron")


if __name__ == "__main__":
    sys.exit(main())
