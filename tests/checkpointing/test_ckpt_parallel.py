"""Checkpoints of every parallel layout against Megatron-LM core_v0.12.1 (megatron_cases.py):
- Megatron saves at iteration 3 (pp2, tp2 Llama on a blended dataset, dp2 + distributed optimizer,
  tp2 x pp2 Llama, dp2 x pp2 + distributed optimizer, the legacy model with pp2); pretrain_gpt
  loads it with the same arguments and continues: lm loss within 1e-5 relative of Megatron's own
  iterations 4-6, learning rate and consumed samples identical. Megatron's checkpoints are the
  goldens in tests/golden/checkpointing/<case>/, or made live with MC_MEGATRON_ROOT set.
- Resume is bit-exact (6 straight == 3, save, load, 3: same training lines, identical final files)
  for pp2, dp2 x pp2 with the distributed optimizer, tp2 x pp2, and with TE / legacy names.
- torch.load of our files: every key, shape and dtype (and every optimizer / scheduler value) as in
  Megatron's file of the same layout, distrib_optim.pt included; a Megatron distrib_optim.pt read
  and written back is unchanged.
- TE-spec names (--transformer-impl transformer_engine) and legacy names are written and read.
- Broken input: a missing shard, a tracker naming a missing iteration, another TP/PP layout: a
  clear error on every rank, no hang.
- With MC_MEGATRON_ROOT: Megatron continues from our pp2, tp2 and dp2 distributed-optimizer
  checkpoints with our losses."""
import io
import os
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402
import torch_stubs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, run_cmd, summary  # noqa: E402

torch_stubs.install()


def rank_dirs(case):
    world, model, _ = mcs.CASES[case]
    tp = int(model[model.index("--tensor-model-parallel-size") + 1]) if "--tensor-model-parallel-size" in model else 1
    pp = int(model[model.index("--pipeline-model-parallel-size") + 1]) if "--pipeline-model-parallel-size" in model else 1
    return [f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") for p in range(pp) for t in range(tp)]


def load(d, it, rank, name="model_optim_rng.pt"):
    return torch.load(os.path.join(d, f"iter_{it:07d}", rank, name))


def megatron_checkpoint(case, tmp):
    """(directory with Megatron's iteration-3 checkpoint, Megatron's training lines)"""
    if mcs.megatron_root():
        save = os.path.join(tmp, f"megatron_{case}")
        rcs, out = mcs.run_megatron(case, tmp, ("--save", save, "--save-interval", str(mcs.SAVE_AT)),
                                    port=29650 + list(mcs.CASES).index(case))
        check(not any(rcs), f"{case}: Megatron run {rcs}: {out[-500:]}")
        with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(mcs.SAVE_AT))  # it saved at 3 and 6; continue from 3
        return save, mcs.train_lines(out)
    gold = os.path.join(mcs.GOLDEN, case)
    save = os.path.join(tmp, f"golden_{case}")
    shutil.copytree(os.path.join(gold, "save"), save)
    return save, mcs.train_lines(open(os.path.join(gold, "megatron_log.txt")).read())


def test_continue_megatron(case, tmp):
    save, theirs = megatron_checkpoint(case, tmp)
    r = mcs.run_ours(case, tmp, ("--load", save, "--transformer-impl", "local"))
    ours = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(ours) == [4, 5, 6], f"{case}: resumed at 4: {r.stderr[-600:]}")
    for it in sorted(ours):
        a, b = mcs.numbers(ours[it][1]), mcs.numbers(theirs.get(it, ("", ""))[1])
        check(ours[it][0] == theirs.get(it, ("?",))[0], f"{case} {it}: consumed samples {ours[it][0]}")
        check(a.get("learning rate") == b.get("learning rate"), f"{case} {it}: lr {a} vs {b}")
        la, lb = a.get("lm loss", float("nan")), b.get("lm loss", float("nan"))
        check(abs(la - lb) <= 1e-5 * abs(lb), f"{case} {it}: lm loss {la} vs Megatron {lb}")
    print(f"{case}: Megatron -> megatron.c, iterations 4-6:",
          [(mcs.numbers(ours[i][1]).get("lm loss"), mcs.numbers(theirs[i][1]).get("lm loss"))
           for i in sorted(ours) if i in theirs])
    return save


def same(a, b, where, values=True):
    """Structure (keys in order, types, shapes, dtypes) and, with values, equal tensors and scalars."""
    if isinstance(b, torch.Tensor):
        ok = isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
        check(ok and (not values or torch.equal(a, b)), f"{where}: {getattr(a, 'shape', a)} vs {b.shape} {b.dtype}")
    elif isinstance(b, dict):
        check(type(a) is type(b) and list(a) == list(b),
              f"{where}: {type(a).__name__} keys {list(a)[:6] if isinstance(a, dict) else a} vs {type(b).__name__} {list(b)[:6]}")
        for k in b:
            if isinstance(a, dict) and k in a:
                same(a[k], b[k], f"{where}.{k}", values)
    elif isinstance(b, (list, tuple)):
        check(type(a) is type(b) and len(a) == len(b), f"{where}: sequence {a} vs {b}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]", values)
    elif values:
        check(type(a) is type(b) and (a == b or str(a) == str(b)), f"{where}: {a!r} vs {b!r}")


ARGS_SKIP = {"save", "load", "data_cache_path", "rank", "local_rank", "distributed_backend",
             "transformer_impl", "gradient_accumulation_fusion", "persist_layer_norm",
             "no_persist_layer_norm", "exit_interval", "apply_rope_fusion", "data_path", "save_interval"}


def compare_files(ours_dir, gold_dir, case):
    """Our iteration-3 files of `case` against Megatron's: every key, shape and dtype; optimizer
    param groups, scheduler, rerun state and args values."""
    for rank in rank_dirs(case):
        o, g = load(ours_dir, 3, rank), load(gold_dir, 3, rank)
        check(list(o) == list(g), f"{case} {rank}: top-level keys {list(o)}")
        bad = mcs.rng_state_diffs(o["rng_state"], g["rng_state"])
        check(not bad, f"{case} {rank}: rng_state differs from Megatron's: {bad}")
        same(o["model"], g["model"], f"{case} {rank} model", values=False)
        if "state" in g["optimizer"]:
            same(o["optimizer"]["state"], g["optimizer"]["state"], f"{case} {rank} optimizer.state", values=False)
            same([{k: v for k, v in pg.items()} for pg in o["optimizer"]["param_groups"]],
                 g["optimizer"]["param_groups"], f"{case} {rank} param_groups")
        else:
            same(o["optimizer"], g["optimizer"], f"{case} {rank} optimizer")
        same(o["opt_param_scheduler"], g["opt_param_scheduler"], f"{case} {rank} scheduler")
        check(str(o["rerun_state_machine"]) == str(g["rerun_state_machine"]), f"{case} {rank} rerun")
        va, vg = vars(o["args"]), vars(g["args"])
        check(sorted(va) == sorted(vg), f"{case} {rank} args: missing {[k for k in vg if k not in va][:5]}, "
                                        f"extra {[k for k in va if k not in vg][:5]}")
        bad = [(k, va[k], vg[k]) for k in vg if k in va and k not in ARGS_SKIP and str(va[k]) != str(vg[k])]
        check(not bad, f"{case} {rank} args values differ: {bad[:6]}")
        gd = os.path.join(gold_dir, "iter_0000003", rank, "distrib_optim.pt")
        if os.path.exists(gd):
            same(load(ours_dir, 3, rank, "distrib_optim.pt"), torch.load(gd), f"{case} {rank} distrib_optim",
                 values=False)
    print(f"{case}: our iteration-3 files have Megatron's keys, shapes and dtypes ({len(rank_dirs(case))} ranks)")


def split_run(case, tmp, extra=(), tag=""):
    """6 iterations straight (save at 6) and 3 + save + load + 3: (straight, split dirs, lines)."""
    a, b = os.path.join(tmp, f"{case}{tag}_straight"), os.path.join(tmp, f"{case}{tag}_split")
    r1 = mcs.run_ours(case, tmp, extra + ("--save", a, "--save-interval", "6"))
    r2 = mcs.run_ours(case, tmp, extra + ("--save", b, "--save-interval", "3", "--exit-interval", "3"))
    r3 = mcs.run_ours(case, tmp, extra + ("--save", b, "--load", b, "--save-interval", "3"))
    check(r1.returncode == r2.returncode == r3.returncode == 0,
          f"{case}{tag} runs: {r1.stderr[-300:]} {r2.stderr[-300:]} {r3.stderr[-300:]}")
    return a, b, mcs.train_lines(r1.stdout), {**mcs.train_lines(r2.stdout), **mcs.train_lines(r3.stdout)}


def test_resume_bit_exact(case, tmp, extra=(), tag=""):
    a, b, straight, split = split_run(case, tmp, extra, tag)
    check(straight and straight == split, f"{case}{tag}: training lines straight vs split")
    for rank in rank_dirs(case):
        for name in ("model_optim_rng.pt", "distrib_optim.pt"):
            pa = os.path.join(a, "iter_0000006", rank, name)
            if name == "model_optim_rng.pt" or os.path.exists(pa):
                x, y = torch.load(pa), load(b, 6, rank, name)
                for k in ("model", "optimizer", "opt_param_scheduler") if "model" in x else (0,):
                    same(y[k], x[k], f"{case}{tag} {rank} {name} {k}")
    print(f"{case}{tag}: resume bit-exact ({len(straight)} lines, {len(rank_dirs(case))} ranks)")
    return b, straight


def test_distopt_round_trip(tmp, save):
    """Megatron's distrib_optim.pt read and written back (no iteration left to run): unchanged."""
    out = os.path.join(tmp, "distopt_rewritten")
    r = mcs.run_ours("gpt_dp2_distopt", tmp, ("--load", save, "--save", out, "--save-interval", "1000",
                                              "--transformer-impl", "local",
                                              "--use-checkpoint-opt_param-scheduler"), iters=3)
    check(r.returncode == 0, f"re-save: {r.stderr[-400:]}")
    if r.returncode == 0:
        same(load(out, 3, "mp_rank_00", "distrib_optim.pt"), load(save, 3, "mp_rank_00", "distrib_optim.pt"),
             "distrib_optim.pt round trip")
        same(load(out, 3, "mp_rank_00")["model"], load(save, 3, "mp_rank_00")["model"], "model round trip")
        same(load(out, 3, "mp_rank_00")["optimizer"], load(save, 3, "mp_rank_00")["optimizer"],
             "distributed optimizer param_groups round trip")


def test_names(tmp, te_dir, straight_te, legacy_dir):
    """TE-spec and legacy names in our files; each loads back."""
    m0 = load(te_dir, 3, "mp_rank_00_000")["model"]
    keys = list(m0)
    check("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight" in keys and
          "decoder.layers.0.mlp.linear_fc1.layer_norm_bias" in keys and
          "decoder.layers.0.self_attention.core_attention._extra_state" in keys and
          not any("input_layernorm" in k or "pre_mlp_layernorm" in k for k in keys), f"TE names: {keys[:8]}")
    i = keys.index
    check(i("decoder.layers.0.self_attention.core_attention._extra_state") <
          i("decoder.layers.0.self_attention.linear_proj.weight") <
          i("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight") <
          i("decoder.layers.0.self_attention.linear_qkv.weight"), "TE state_dict order")
    gold = load(os.path.join(mcs.GOLDEN, "gpt_legacy_pp2", "save"), 3, "mp_rank_00_001")
    ours = load(legacy_dir, 3, "mp_rank_00_001")
    same(ours["model"], gold["model"], "legacy model names and nesting", values=False)
    # a TE checkpoint loads into a local-spec run, also with TE's _extra_state as TE writes it
    # (an io.BytesIO of its serialized fp8 metadata, or a uint8 tensor in newer TE)
    for rank in rank_dirs("gpt_dp2pp2_distopt"):
        p = os.path.join(te_dir, "iter_0000003", rank, "model_optim_rng.pt")
        sd = torch.load(p)
        for j, k in enumerate([k for k in sd["model"] if k.endswith("._extra_state")]):
            sd["model"][k] = io.BytesIO(b"\x80\x02N.") if j % 2 else torch.zeros(0, dtype=torch.uint8)
        torch.save(sd, p)
    # (--use-flash-attn: the TE run's attention kernel, flash attention, in the local spec)
    r = mcs.run_ours("gpt_dp2pp2_distopt", tmp, ("--load", te_dir, "--ckpt-step", "3", "--transformer-impl", "local",
                                                 "--use-flash-attn"))
    ours = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(ours) == [4, 5, 6] and ours == {k: v for k, v in straight_te.items() if k > 3},
          f"TE files (with TE _extra_state) into a local run, same lines: {r.stderr[-300:]}")


def broken(case, tmp, extra, want, what):
    try:
        r = mcs.run_ours(case, tmp, extra, timeout=120)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: hung")
        return
    # every rank fails (the outcome is agreed on by all ranks); the first rank to report aborts
    # the job, which may cut the other ranks' messages short, but the ranks that only learned of
    # the failure wait before reporting, so the message that says why is there
    errs = [l for l in r.stderr.splitlines() if "pretrain_gpt: rank" in l]
    check(r.returncode != 0 and any(want in l for l in errs),
          f"{what}: an error naming {want!r}: {errs[:4]} {r.stderr[-300:]}")


def test_broken(tmp, pp2_dir, tp2pp2_dir):
    d = os.path.join(tmp, "broken_pp2")
    shutil.copytree(pp2_dir, d)
    shutil.rmtree(os.path.join(d, "iter_0000003", "mp_rank_00_001"))
    with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("3")
    broken("gpt_pp2", tmp, ("--load", d), "missing shard", "a missing pipeline shard")
    with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("9")
    broken("gpt_pp2", tmp, ("--load", d), "iter_0000009", "tracker naming a missing iteration")
    # a virtual-pipeline checkpoint (model0, model1): refused by name
    v = os.path.join(tmp, "vpp_like")
    shutil.copytree(pp2_dir, v)
    for rank in rank_dirs("gpt_pp2"):
        p = os.path.join(v, "iter_0000006", rank, "model_optim_rng.pt")
        sd = torch.load(p)
        sd = {("model0" if k == "model" else k): x for k, x in sd.items()}
        torch.save(sd, p)
    broken("gpt_pp2", tmp, ("--load", v), "this run uses no virtual pipeline", "model0/model1 chunks")
    # the writer cannot create its directory: every rank fails, none waits in the moments' gather
    blocker = os.path.join(tmp, "not_a_directory")
    open(blocker, "w").close()
    broken("gpt_dp2_distopt", tmp, ("--save", os.path.join(blocker, "ckpt"), "--save-interval", "1",
                                    "--exit-interval", "1"), "cannot create directory", "save into a file")
    # another layout: pp2 files into a pp1 run, tp2 x pp2 files into tp2 x pp1 and tp1 x pp2 runs
    want = "convert_checkpoint --model-type GPT --loader core --saver core"
    broken("llama_tp2_blend", tmp, ("--load", tp2pp2_dir), want, "tp2 x pp2 checkpoint into tp2 x pp1")
    broken("llama_tp2pp2", tmp, ("--load", tp2pp2_dir, "--tensor-model-parallel-size", "1"), want,
           "tp2 x pp2 checkpoint into tp1 x pp2")
    r = run_cmd([mcs.EXE] + mcs.case_args("gpt_pp2", tmp, ("--load", pp2_dir, "--pipeline-model-parallel-size", "1")),
                dict(os.environ, OMP_NUM_THREADS="1"), 120)
    check(r.returncode != 0 and "--pipeline-model-parallel-size 2" in r.stderr and want in r.stderr
          and "--target-pipeline-parallel-size 1" in r.stderr, f"pp2 checkpoint into pp1: {r.stderr[-400:]}")


def test_megatron_loads_ours(tmp, case, ours_dir, ours_lines, variant=None):
    """Megatron continues from our iteration-3 checkpoint (its default flags: our rng_state
    restored) with our losses."""
    rcs, out = mcs.run_megatron(case, tmp, ("--load", ours_dir, "--ckpt-step", "3"),
                                port=29700 + list(mcs.CASES).index(case), variant=variant)
    theirs = mcs.train_lines(out)
    check(not any(rcs) and sorted(theirs) == [4, 5, 6] and "Unable to load rng state" not in out,
          f"{case}: Megatron from ours {rcs}: {out[-800:]}")
    for it in sorted(theirs):
        a, b = mcs.numbers(ours_lines[it][1]), mcs.numbers(theirs[it][1])
        check(abs(a["lm loss"] - b["lm loss"]) <= 1e-5 * abs(b["lm loss"]) and a["learning rate"] == b["learning rate"]
              and ours_lines[it][0] == theirs[it][0], f"{case} {it}: ours {a} vs Megatron from ours {b}")
    print(f"{case}: megatron.c -> Megatron, iterations 4-6:",
          [(mcs.numbers(ours_lines[i][1])["lm loss"], mcs.numbers(theirs[i][1])["lm loss"]) for i in sorted(theirs)])


def main():
    if not shutil.which("mpirun"):
        print("test_ckpt_parallel: skipped (no mpirun)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        golden = {}
        for case in mcs.CASES:
            if case not in mcs.VPP:  # test_ckpt_vpp.py
                golden[case] = test_continue_megatron(case, tmp)
        test_distopt_round_trip(tmp, golden["gpt_dp2_distopt"])
        local = ("--transformer-impl", "local")
        split = {}
        for case in ("gpt_pp2", "gpt_dp2pp2_distopt", "llama_tp2pp2"):
            split[case] = test_resume_bit_exact(case, tmp, local)[0]
        te, straight_te = test_resume_bit_exact("gpt_dp2pp2_distopt", tmp, ("--transformer-impl", "transformer_engine"), "_te")
        # optimizer state indices in the TE and legacy models' parameter order
        test_resume_bit_exact("llama_tp2pp2", tmp, ("--transformer-impl", "transformer_engine"), "_te")
        test_resume_bit_exact("gpt_legacy_pp2", tmp, local)
        for case in ("gpt_pp2", "gpt_dp2pp2_distopt", "llama_tp2pp2"):
            compare_files(split[case], golden[case], case)
        for case in ("gpt_dp2_distopt", "gpt_tp2dp2_distopt", "llama_tp2_blend", "gpt_legacy_pp2"):
            out = os.path.join(tmp, f"{case}_ours")
            r = mcs.run_ours(case, tmp, local + ("--save", out, "--save-interval", "3", "--exit-interval", "3"))
            check(r.returncode == 0, f"{case}: save: {r.stderr[-300:]}")
            compare_files(out, golden[case], case)
            split[case] = out
        test_names(tmp, te, straight_te, split["gpt_legacy_pp2"])
        test_broken(tmp, split["gpt_pp2"], split["llama_tp2pp2"])
        if mcs.megatron_root():
            for case in ("gpt_pp2", "llama_tp2_blend"):
                straight = mcs.run_ours(case, tmp, local)
                test_megatron_loads_ours(tmp, case, split[case], mcs.train_lines(straight.stdout))
            straight = mcs.run_ours("gpt_dp2_distopt", tmp, local)
            test_megatron_loads_ours(tmp, "gpt_dp2_distopt", split["gpt_dp2_distopt"],
                                     mcs.train_lines(straight.stdout), variant="fixload")
        else:
            print("Megatron loading ours: skipped (set MC_MEGATRON_ROOT)")
    return summary("test_ckpt_parallel")


if __name__ == "__main__":
    sys.exit(main())
