"""torch_dist checkpoints loaded at another tensor x pipeline layout, checked against Megatron-LM
core_v0.12.1 loading the same checkpoint at the same target layout (not only ours against ours):
- Megatron's own tp2 x pp2 save at iteration 3 (tests/golden/checkpointing/dist_gpt_tp2pp2/save,
  GPT-2 style, ordinary optimizer): Megatron loads it at tp1 and at tp1 x pp2 and continues to
  iteration 6; megatron.c loads it at the same layouts and continues: lm loss within 1e-5
  relative of Megatron's at that layout, learning rate and consumed samples identical;
- the same with the distributed optimizer: Megatron's tp2 x pp2 --use-distributed-optimizer save
  ('fully_sharded_model_space', dist_gpt_tp2pp2_distopt/save) loaded at tp1 by Megatron (with
  the megatron-cpu shim's fixload workaround: Megatron core_v0.12.1 cannot load a torch_dist
  distributed-optimizer state without it) and by megatron.c;
- the other direction: Megatron loads OUR tp2 x pp2 torch_dist save at tp1 and continues as ours
  does from it at tp1.
Megatron runs live with MC_MEGATRON_ROOT and PyPI torch 2.x (MC_TORCH2_PYTHON); else its logged
runs, dist_gpt_tp2pp2*/megatron_at_*_log.txt (our saves are byte-stable, so the checkpoint
Megatron read is the one this test writes). Megatron ignores the rng state at another layout
but still exits on a missing one ("Unable to load rng state"), hence --no-load-rng throughout."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

DIST = ("--ckpt-format", "torch_dist", "--no-load-rng")
# tp2 padded the 513-token vocabulary to 640 rows (a multiple of 128); tp1 keeps them with 128
PAD = ("--make-vocab-size-divisible-by", "128")
mcs.ALL_CASES.setdefault("gpt_tp1pp2", (2, mcs.GPT2 + ("--pipeline-model-parallel-size", "2"),
                                        ("--data-path", mcs.CORPUS_A)))
mcs.ALL_CASES.setdefault("gpt_tp2pp2_distopt", (4, mcs.DIST_CASES["gpt_tp2pp2"][1] + ("--use-distributed-optimizer",),
                                                ("--data-path", mcs.CORPUS_A)))
TP2PP2 = os.path.join(mcs.GOLDEN, "dist_gpt_tp2pp2")
DISTOPT = os.path.join(mcs.GOLDEN, "dist_gpt_tp2pp2_distopt")
# (tag, case at the target layout, extra arguments, golden directory, Megatron's log there,
#  port); Megatron's fixload for pipeline-parallel targets and the distributed optimizer
TARGETS = [
    ("tp1", "gpt_tp1", (), TP2PP2, "megatron_at_tp1_log.txt", 29961),
    ("tp1 x pp2", "gpt_tp1pp2", (), TP2PP2, "megatron_at_tp1pp2_log.txt", 29963),
    ("tp1, distributed optimizer", "gpt_tp1", ("--use-distributed-optimizer",), DISTOPT,
     "megatron_at_tp1_log.txt", 29965),
]


def live():
    return mcs.megatron_root() and mcs.megatron_python(torch2=True)


def megatron_at(case, save, extra, port, gold_log, tmp):
    """Megatron's training lines of iterations 4-6 after loading `save` at `case`'s layout."""
    if not live():
        return mcs.train_lines(open(gold_log).read()), "its logged run"
    fix = "fixload" if "pp2" in case or "--use-distributed-optimizer" in extra else None
    rcs, out = mcs.run_megatron(case, tmp, DIST + PAD + ("--load", save, "--ckpt-step", "3") + tuple(extra),
                                port=port, python=mcs.megatron_python(torch2=True), variant=fix)
    check(not any(rcs), f"Megatron loading {save} at {case}: {rcs} {out[-600:]}")
    return mcs.train_lines(out), "live"


MISMATCH = "mismatch after resume"


def ours_at(case, save, extra, tmp, gold_log):
    """Our training lines after loading `save` at `case`'s layout; our lines saying what is
    ignored at another layout (and the loading line) as Megatron's, in its order."""
    r = mcs.run_ours(case, tmp, DIST + PAD + ("--load", save, "--ckpt-step", "3") + tuple(extra))
    mine = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(mine) == [4, 5, 6], f"ours loading {save} at {case}: {r.stderr[-600:]}")
    want = [l for l in open(gold_log).read().splitlines() if MISMATCH in l]
    got = [l for l in r.stdout.splitlines() if MISMATCH in l or l.startswith(" loading distributed checkpoint")]
    check(len(want) == 2 and got == want + [" loading distributed checkpoint from %s at iteration 3" % save],
          f"{case}: Megatron's lines before loading: {got} vs {want}")
    if "--use-distributed-optimizer" in extra:
        check("INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of type "
              "fully_sharded_model_space" in r.stdout, "Megatron's 'Loading distributed optimizer' line")
    return mine


def compare(tag, ours, theirs, how):
    check(sorted(theirs) == [4, 5, 6], f"{tag}: Megatron resumed at 4: {sorted(theirs)}")
    pairs = []
    for it in sorted(theirs):
        if it not in ours:
            continue
        a, b = mcs.numbers(ours[it][1]), mcs.numbers(theirs[it][1])
        check(ours[it][0] == theirs[it][0], f"{tag} {it}: consumed samples {ours[it][0]} vs {theirs[it][0]}")
        check(a.get("learning rate") == b.get("learning rate"), f"{tag} {it}: learning rate {a} vs {b}")
        la, lb = a.get("lm loss", float("nan")), b.get("lm loss", float("nan"))
        check(abs(la - lb) <= 1e-5 * abs(lb), f"{tag} {it}: lm loss {la} vs Megatron {lb}")
        pairs.append((la, lb, f"{abs(la - lb) / abs(lb):.1e}"))
    print(f"{tag}: iterations 4-6 (ours, Megatron ({how}), relative difference):", pairs)


def main():
    tmp = tempfile.mkdtemp(prefix="mc_dist_relayout_")
    try:
        # Megatron's tp2 x pp2 saves, loaded at other layouts by Megatron and by us
        for tag, case, extra, gold, log, port in TARGETS:
            save = os.path.join(tmp, os.path.basename(gold))
            if not os.path.exists(save):
                shutil.copytree(os.path.join(gold, "save"), save)
            theirs, how = megatron_at(case, save, extra, port, os.path.join(gold, log), tmp)
            mine = ours_at(case, save, extra, tmp, os.path.join(gold, log))
            compare(f"Megatron's tp2 x pp2 save at {tag}", mine, theirs, how)
        # our tp2 x pp2 save, loaded at tp1 by Megatron and by us
        ours_save = os.path.join(tmp, "ours_tp2pp2")
        r = mcs.run_ours("gpt_tp2pp2", tmp, ("--ckpt-format", "torch_dist", "--save", ours_save, "--save-interval", "3"))
        check(r.returncode == 0, f"our tp2 x pp2 save: {r.stderr[-600:]}")
        gold_log = os.path.join(TP2PP2, "megatron_at_tp1_loads_ours_log.txt")
        theirs, how = megatron_at("gpt_tp1", ours_save, (), 29967, gold_log, tmp)
        compare("our tp2 x pp2 save at tp1", ours_at("gpt_tp1", ours_save, (), tmp, gold_log), theirs, how)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt_relayout")


if __name__ == "__main__":
    sys.exit(main())
