"""Megatron-LM core_v0.12.1 against megatron.c for a table of cases (megatron_cases.py style:
world size, model arguments, data arguments): Megatron trains 6 iterations saving at 3; we
continue from its iteration-3 checkpoint (lm loss within 1e-5 relative, lr and consumed samples
identical); our checkpoint of the same run has Megatron's model keys, shapes, dtypes and param
groups; with MC_MEGATRON_ROOT Megatron continues from ours with our losses. Without
MC_MEGATRON_ROOT, Megatron's side comes from goldens (GOLDEN/<case>/save, megatron_log.txt)
written by make_goldens. Used by tests/training/test_qk_layernorm.py and
tests/parallel/test_uneven_pipeline.py."""
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checkpointing"))
sys.path.insert(0, os.path.join(HERE, ".."))
import megatron_cases as mcs  # noqa: E402
from mc_test import check  # noqa: E402

CASES, RANKS = {}, {}
GOLDEN = None


def use(cases, golden, ranks):
    """Registers the caller's cases, golden directory and checkpoint rank directories."""
    global GOLDEN
    CASES.clear()
    CASES.update(cases)
    mcs.ALL_CASES.update(cases)
    RANKS.update(ranks)
    GOLDEN = golden


def megatron_save(case, tmp, port, extra=()):
    save = os.path.join(tmp, f"megatron_{case}")
    rcs, out = mcs.run_megatron(case, tmp, ("--save", save, "--save-interval", str(mcs.SAVE_AT)) +
                                tuple(extra), port=port)
    lines = mcs.train_lines(out)
    if any(rcs) or len(lines) != mcs.ITERS:
        print(out[-3000:])
        raise SystemExit(f"{case}: Megatron failed {rcs}")
    with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(mcs.SAVE_AT))  # it saved at 3 and 6; continue from 3
    return save, lines, out


def make_goldens():
    for i, case in enumerate(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            save, _, out = megatron_save(case, tmp, 29710 + 3 * i)
            dst = os.path.join(GOLDEN, case)
            shutil.rmtree(dst, ignore_errors=True)
            mcs.copy_checkpoint(save, os.path.join(dst, "save"), mcs.SAVE_AT)
            with open(os.path.join(dst, "megatron_log.txt"), "w") as f:
                f.write("\n".join(l for l in out.splitlines() if mcs.TRAIN.match(l)) + "\n")
            print(case, "written")


def megatron_checkpoint(case, tmp, port):
    if mcs.megatron_root():
        save, lines, _ = megatron_save(case, tmp, port)
        return save, lines
    save = os.path.join(tmp, f"golden_{case}")
    shutil.copytree(os.path.join(GOLDEN, case, "save"), save)
    return save, mcs.train_lines(open(os.path.join(GOLDEN, case, "megatron_log.txt")).read())


def compare_lines(case, ours, theirs, what):
    check(sorted(ours) == [4, 5, 6], f"{case} {what}: iterations {sorted(ours)}")
    for it in sorted(ours):
        a, b = mcs.numbers(ours[it][1]), mcs.numbers(theirs.get(it, ("", ""))[1])
        check(ours[it][0] == theirs.get(it, ("?",))[0], f"{case} {what} {it}: consumed samples")
        check(a.get("learning rate") == b.get("learning rate"), f"{case} {what} {it}: lr {a} {b}")
        da, db = (re.findall(r"decoupled learning rate: ([\d.E+-]+)", x[1]) for x in (ours[it], theirs.get(it, ("", ""))))
        check(da == db, f"{case} {what} {it}: decoupled learning rate {da} vs {db}")
        la, lb = a.get("lm loss", float("nan")), b.get("lm loss", float("nan"))
        check(abs(la - lb) <= 1e-5 * abs(lb), f"{case} {what} {it}: lm loss {la} vs {lb}")
    print(f"{case} {what}:", [(mcs.numbers(ours[i][1]).get("lm loss"),
                               mcs.numbers(theirs[i][1]).get("lm loss")) for i in sorted(ours) if i in theirs])


def compare_files(case, ours_dir, theirs_dir):
    import torch
    import torch_stubs
    torch_stubs.install()
    for rank in RANKS[case]:
        o = torch.load(os.path.join(ours_dir, "iter_0000003", rank, "model_optim_rng.pt"))
        g = torch.load(os.path.join(theirs_dir, "iter_0000003", rank, "model_optim_rng.pt"))
        def keys(sd):  # "model", or "model0", "model1", ... with interleaving
            return [(m, k, tuple(v.shape), v.dtype) for m in sd if m.startswith("model")
                    for k, v in sd[m].items() if hasattr(v, "shape")]
        ko, kg = keys(o), keys(g)
        check(ko == kg, f"{case} {rank}: model keys/shapes/dtypes {ko[:6]} vs {kg[:6]}")
        for k in ("qk_layernorm", "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
            check(str(getattr(o["args"], k)) == str(getattr(g["args"], k)), f"{case} {rank}: args.{k}")
        def pg(sd):  # torch's param_groups (the distributed optimizer's: under 'optimizer')
            inner = sd["optimizer"].get("optimizer", sd["optimizer"])
            return [{k: p.get(k) for k in ("params", "weight_decay", "wd_mult", "is_decoupled_lr",
                                           "max_lr", "min_lr", "lr")} for p in inner["param_groups"]]
        po, pgm = pg(o), pg(g)
        same = len(po) == len(pgm) and all(
            all(x[k] == y[k] if not isinstance(y[k], float) else abs(x[k] - y[k]) <= 1e-12 * abs(y[k])
                for k in y) for x, y in zip(po, pgm))
        check(same, f"{case} {rank}: param groups {po} vs Megatron {pgm}")


def run_case(case, tmp, port):
    save, theirs = megatron_checkpoint(case, tmp, port)
    # Megatron -> megatron.c
    r = mcs.run_ours(case, tmp, ("--load", save, "--transformer-impl", "local"))
    check(r.returncode == 0, f"{case}: resume from Megatron: {r.stderr[-600:]}")
    compare_lines(case, mcs.train_lines(r.stdout), theirs, "Megatron -> megatron.c")
    # our own run of the same 6 iterations, saved at 3
    mine = os.path.join(tmp, f"ours_{case}")
    r = mcs.run_ours(case, tmp, ("--save", mine, "--save-interval", "3", "--transformer-impl", "local"))
    check(r.returncode == 0, f"{case}: our run: {r.stderr[-600:]}")
    compare_files(case, mine, save)
    if mcs.megatron_root():  # megatron.c -> Megatron
        with open(os.path.join(mine, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("3")
        # Megatron's own distributed-optimizer fp32 load needs the helper's workarounds
        variant = "fixload" if "--use-distributed-optimizer" in CASES[case][1] else None
        rcs, out = mcs.run_megatron(case, tmp, ("--load", mine, "--ckpt-step", "3"),
                                    port=port + 1, variant=variant)
        check(not any(rcs), f"{case}: Megatron from our checkpoint {rcs}: {out[-600:]}")
        ours = {i: v for i, v in mcs.train_lines(r.stdout).items() if i > 3}
        compare_lines(case, mcs.train_lines(out), ours, "megatron.c -> Megatron")


