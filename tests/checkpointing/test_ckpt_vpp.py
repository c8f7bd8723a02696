"""Checkpoints with interleaved (virtual) pipelining against Megatron-LM core_v0.12.1
(megatron_cases.VPP: GPT pp2 x vpp2, dp2 x pp2 x vpp2 with the distributed optimizer, Llama
pp2 x vpp2):
- Resume is bit-exact (6 straight == 3, save, load, 3: same training lines, identical final
  model0/model1, optimizer, scheduler and distrib_optim.pt).
- torch.load of our iteration-3 files: every key, shape and dtype as in Megatron's file of the
  same layout (model0, model1 with chunk-local layer numbers; the optimizer over both chunks,
  param groups and state indices; distrib_optim.pt with one buffer per chunk), scheduler and
  args values.
- Megatron's checkpoint continues in pretrain_gpt: lm loss within 1e-5 relative of Megatron's own
  iterations 4-6, learning rate and consumed samples identical (goldens in
  tests/golden/checkpointing/<case>/, or live with MC_MEGATRON_ROOT).
- Another virtual-pipeline layout (a vpp checkpoint into a run without it, and the reverse): a
  clear error naming both layouts and the convert_checkpoint command.
- With MC_MEGATRON_ROOT: Megatron continues from our checkpoints with our losses (the
  distributed-optimizer case in the helper's fixload mode, as test_ckpt_parallel.py does)."""
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402
import test_ckpt_parallel as tcp  # noqa: E402  (its checks)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import run_cmd, summary  # noqa: E402

check, same, load, rank_dirs = tcp.check, tcp.same, tcp.load, tcp.rank_dirs
LOCAL = ("--transformer-impl", "local")
CHUNKS = ("model0", "model1")


def test_resume_bit_exact(case, tmp):
    a, b, straight, split = tcp.split_run(case, tmp, LOCAL)
    check(straight and sorted(straight) == [1, 2, 3, 4, 5, 6] and straight == split,
          f"{case}: training lines straight vs split")
    for rank in rank_dirs(case):
        x, y = load(a, 6, rank), load(b, 6, rank)
        check("model" not in x and all(k in x for k in CHUNKS), f"{case} {rank}: keys {list(x)}")
        for k in CHUNKS + ("optimizer", "opt_param_scheduler"):
            if k in x:
                same(y.get(k), x[k], f"{case} {rank} {k}")
        pa = os.path.join(a, "iter_0000006", rank, "distrib_optim.pt")
        if os.path.exists(pa):
            same(load(b, 6, rank, "distrib_optim.pt"), torch.load(pa), f"{case} {rank} distrib_optim.pt")
    print(f"{case}: resume bit-exact ({len(straight)} lines, {len(rank_dirs(case))} ranks)")
    return b, straight


def compare_files(ours_dir, gold_dir, case):
    """Our iteration-3 files against Megatron's: keys, shapes, dtypes; groups, scheduler, args."""
    for rank in rank_dirs(case):
        o, g = load(ours_dir, 3, rank), load(gold_dir, 3, rank)
        check(list(o) == list(g), f"{case} {rank}: top-level keys {list(o)} vs {list(g)}")
        bad = mcs.rng_state_diffs(o["rng_state"], g["rng_state"])
        check(not bad, f"{case} {rank}: rng_state differs from Megatron's: {bad}")
        for k in CHUNKS:
            same(o.get(k), g[k], f"{case} {rank} {k}", values=False)
        if "state" in g["optimizer"]:
            same(o["optimizer"]["state"], g["optimizer"]["state"], f"{case} {rank} optimizer.state", values=False)
            same(o["optimizer"]["param_groups"], g["optimizer"]["param_groups"], f"{case} {rank} param_groups")
        else:
            same(o["optimizer"], g["optimizer"], f"{case} {rank} optimizer")
        same(o["opt_param_scheduler"], g["opt_param_scheduler"], f"{case} {rank} scheduler")
        va, vg = vars(o["args"]), vars(g["args"])
        bad = [(k, va.get(k), vg[k]) for k in vg if k not in tcp.ARGS_SKIP and str(va.get(k)) != str(vg[k])]
        check(not bad, f"{case} {rank} args values differ: {bad[:6]}")
        gd = os.path.join(gold_dir, "iter_0000003", rank, "distrib_optim.pt")
        if os.path.exists(gd):
            od, gdd = load(ours_dir, 3, rank, "distrib_optim.pt"), torch.load(gd)
            check(list(gdd) == ["buckets_coalesced", 0, 1], f"{case} {rank}: Megatron's buffers {list(gdd)}")
            same(od, gdd, f"{case} {rank} distrib_optim", values=False)
    print(f"{case}: our iteration-3 files have Megatron's keys, shapes and dtypes ({len(rank_dirs(case))} ranks)")


def test_other_layout(tmp, vpp_dir, pp2_dir):
    """A vpp checkpoint into a run without vpp, and a pp2 one into a vpp run: both layouts named."""
    want = "convert_checkpoint --model-type GPT --loader core --saver core"
    args = mcs.case_args("gpt_pp2", tmp, ("--load", vpp_dir) + LOCAL)
    r = run_cmd(mcs.mpirun(2) + [mcs.EXE] + args, dict(os.environ, OMP_NUM_THREADS="1"), 120)
    check(r.returncode != 0 and "--num-virtual-stages-per-pipeline-rank 2 (model0 .. model1)" in r.stderr
          and "this run uses no virtual pipeline" in r.stderr and want in r.stderr,
          f"vpp checkpoint into a pp2 run: {r.stderr[-500:]}")
    args = mcs.case_args("gpt_pp2vpp2", tmp, ("--load", pp2_dir, "--ckpt-step", "3") + LOCAL)
    r = run_cmd(mcs.mpirun(2) + [mcs.EXE] + args, dict(os.environ, OMP_NUM_THREADS="1"), 120)
    check(r.returncode != 0 and "saved with no virtual pipeline" in r.stderr and
          "this run uses --num-virtual-stages-per-pipeline-rank 2" in r.stderr and want in r.stderr,
          f"pp2 checkpoint into a vpp run: {r.stderr[-500:]}")
    print("another virtual-pipeline layout: refused, naming both layouts and convert_checkpoint")


def main():
    if not shutil.which("mpirun"):
        print("test_ckpt_vpp: skipped (no mpirun)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        golden, split, straight = {}, {}, {}
        for case in mcs.VPP:
            golden[case] = tcp.test_continue_megatron(case, tmp)
        for case in mcs.VPP:
            split[case], straight[case] = test_resume_bit_exact(case, tmp)
            compare_files(split[case], golden[case], case)
        pp2 = os.path.join(tmp, "pp2")
        r = mcs.run_ours("gpt_pp2", tmp, LOCAL + ("--save", pp2, "--save-interval", "3", "--exit-interval", "3"))
        check(r.returncode == 0, f"gpt_pp2 save: {r.stderr[-300:]}")
        test_other_layout(tmp, split["gpt_pp2vpp2"], pp2)
        if mcs.megatron_root():
            for case in mcs.VPP:
                # iteration 3 alone: Megatron's distributed-optimizer load in the helper's fixload
                # mode loads the tracker's iteration (6) whatever --ckpt-step says
                only3 = os.path.join(tmp, f"{case}_iter3")
                mcs.copy_checkpoint(split[case], only3, 3)
                tcp.test_megatron_loads_ours(tmp, case, only3, straight[case],
                                             variant="fixload" if "distopt" in case else None)
        else:
            print("Megatron loading ours: skipped (set MC_MEGATRON_ROOT)")
    return summary("test_ckpt_vpp")


if __name__ == "__main__":
    sys.exit(main())
