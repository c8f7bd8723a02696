"""torch_dist checkpoints (Megatron-LM core_v0.12.1's default --ckpt-format) against Megatron itself:
- Megatron saves torch_dist at iteration 3 (GPT-2 style tp1 and tp2 x pp2, Llama style tp2 on a
  blended dataset); pretrain_gpt loads it
  with the same layout and continues: lm loss within 1e-5 relative of Megatron's own iterations 4-6,
  learning rate and consumed samples identical. The checkpoints are the goldens in
  tests/golden/checkpointing/dist_<case>/ (README there), or made live with MC_MEGATRON_ROOT set and
  PyPI's torch 2.x from bench/setup_torch.sh (build/bench-venv, or MC_TORCH2_PYTHON).
- Layout-free: the tp1 save loads at pp2, tp2 and tp2 x pp2 (each rank reads only its slices), with
  the same losses; the Llama tp2 save loads at tp1 and pp2.
- Broken input: a truncated .distcp, a missing rank file, a .metadata naming a class outside the
  whitelist, a padded vocabulary of another size: a clear error naming the file, on every rank.
- The ordinary optimizer's state loads into a --use-distributed-optimizer dp2 run with the same
  losses (its own torch_dist state: test_dist_ckpt_distopt.py).
- Saving with --ckpt-format torch_dist works (test_dist_ckpt_save.py, test_dist_ckpt_distopt.py,
  and the distributed optimizer's 'dp_zero_gather_scatter' of --no-ckpt-fully-parallel-save:
  test_dist_ckpt_dp_zero.py)."""
import os
import pickletools
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

DIST = ("--ckpt-format", "torch_dist")


def megatron_checkpoint(case, tmp):
    """(directory with Megatron's iteration-3 torch_dist checkpoint, Megatron's training lines)"""
    py = mcs.megatron_python(torch2=True)
    if mcs.megatron_root() and py:
        save = os.path.join(tmp, f"megatron_{case}")
        rcs, out = mcs.run_megatron(case, tmp, DIST + ("--save", save, "--save-interval", str(mcs.SAVE_AT)),
                                    port=29750 + list(mcs.DIST_CASES).index(case), python=py)
        check(not any(rcs), f"{case}: Megatron run {rcs}: {out[-500:]}")
        with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(mcs.SAVE_AT))
        return save, mcs.train_lines(out)
    gold = os.path.join(mcs.GOLDEN, f"dist_{case}")
    save = os.path.join(tmp, f"golden_{case}")
    shutil.copytree(os.path.join(gold, "save"), save)
    return save, mcs.train_lines(open(os.path.join(gold, "megatron_log.txt")).read())


def continue_from(case, save, theirs, tmp, extra=(), tag=""):
    r = mcs.run_ours(case, tmp, ("--load", save) + DIST + tuple(extra))
    ours = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(ours) == [4, 5, 6], f"{case}{tag}: resumed at 4: {r.stderr[-600:]}")
    check(" loading distributed checkpoint from %s at iteration 3" % save in r.stdout,
          f"{case}{tag}: Megatron's loading line")
    for it in sorted(ours):
        a, b = mcs.numbers(ours[it][1]), mcs.numbers(theirs.get(it, ("", ""))[1])
        check(ours[it][0] == theirs.get(it, ("?",))[0], f"{case}{tag} {it}: consumed samples {ours[it][0]}")
        check(a.get("learning rate") == b.get("learning rate"), f"{case}{tag} {it}: lr {a} vs {b}")
        la, lb = a.get("lm loss", float("nan")), b.get("lm loss", float("nan"))
        check(abs(la - lb) <= 1e-5 * abs(lb), f"{case}{tag} {it}: lm loss {la} vs Megatron {lb}")
    print(f"{case}{tag}: Megatron torch_dist -> megatron.c, iterations 4-6 (ours, Megatron's):",
          [(mcs.numbers(ours[i][1]).get("lm loss"), mcs.numbers(theirs[i][1]).get("lm loss"))
           for i in sorted(ours) if i in theirs])
    return r


# other layouts of the tp1 checkpoint: (case of that layout's world, extra arguments). tp2 pads the
# vocabulary to a multiple of 128 by default; --make-vocab-size-divisible-by 32 keeps tp1's 576 rows.
RELAYOUTS = {
    "pp2": ("gpt_pp2", ()),
    "tp2": ("gpt_tp2", ("--make-vocab-size-divisible-by", "32")),
    "tp2pp2": ("gpt_tp2pp2", ("--make-vocab-size-divisible-by", "32")),
}
mcs.ALL_CASES.setdefault("gpt_tp2", (2, mcs.GPT2 + ("--tensor-model-parallel-size", "2"),
                                     ("--data-path", mcs.CORPUS_A)))
# the Llama tp2 save (GQA, SwiGLU's fc1 stored as [gate; up] of the whole layer) at tp1 and pp2;
# tp2 padded the vocabulary to a multiple of 128 (640 rows)
LLAMA_DATA = mcs.DIST_CASES["llama_tp2"][2]
mcs.ALL_CASES.setdefault("llama_tp1", (1, mcs.LLAMA, LLAMA_DATA))
mcs.ALL_CASES.setdefault("llama_pp2", (2, mcs.LLAMA + ("--pipeline-model-parallel-size", "2"), LLAMA_DATA))
LLAMA_RELAYOUTS = {
    "tp1": ("llama_tp1", ("--make-vocab-size-divisible-by", "128")),
    "pp2": ("llama_pp2", ("--make-vocab-size-divisible-by", "128")),
}


def expect_error(case, save, tmp, want, tag, extra=()):
    r = mcs.run_ours(case, tmp, ("--load", save) + DIST + tuple(extra), timeout=120)
    check(r.returncode != 0 and all(w in r.stderr for w in want),
          f"{tag}: expected an error naming {want}: rc {r.returncode} {r.stderr[-700:]}")
    print(f"{tag}: refused:", [l for l in r.stderr.splitlines() if any(w in l for w in want)][:1])


def test_broken(save, tmp):
    it = os.path.join(save, "iter_0000003")
    # a truncated data file
    bad = os.path.join(tmp, "truncated")
    shutil.copytree(save, bad)
    f = os.path.join(bad, "iter_0000003", "__0_1.distcp")
    with open(f, "r+b") as fh:
        fh.truncate(os.path.getsize(f) // 2)
    expect_error("gpt_tp1", bad, tmp, ["__0_1.distcp", "outside the file"], "truncated .distcp")
    # a missing rank file
    bad = os.path.join(tmp, "missing")
    shutil.copytree(save, bad)
    os.remove(os.path.join(bad, "iter_0000003", "__0_0.distcp"))
    expect_error("gpt_tp1", bad, tmp, ["__0_0.distcp", "cannot open"], "missing rank file")
    # a class outside the whitelist (same length, so the pickle's frames stay valid)
    bad = os.path.join(tmp, "badclass")
    shutil.copytree(save, bad)
    m = os.path.join(bad, "iter_0000003", ".metadata")
    data = open(m, "rb").read()
    check(b"_StorageInfo" in data, ".metadata names _StorageInfo")
    open(m, "wb").write(data.replace(b"_StorageInfo", b"_StorageInfZ", 1))
    expect_error("gpt_tp1", bad, tmp, [".metadata", "_StorageInfZ", "runs no code"], "unexpected class")
    # a chunk outside the tensor: decoder.final_layernorm.weight's (size 16) chunk made 17 long
    bad = os.path.join(tmp, "badsize")
    shutil.copytree(save, bad)
    m = os.path.join(bad, "iter_0000003", ".metadata")
    data = bytearray(open(m, "rb").read())
    after, seen = 0, 0
    for op, arg, pos in pickletools.genops(bytes(data)):
        if op.name == "SHORT_BINUNICODE" and arg == "decoder.final_layernorm.weight" and not after:
            after = pos
        elif after and op.name == "BININT1" and arg == 16:
            seen += 1
            if seen == 2:  # size (16,), then the chunk's sizes (16,)
                data[pos + 1] = 17
                break
    open(m, "wb").write(bytes(data))
    expect_error("gpt_tp1", bad, tmp, [".metadata", "decoder.final_layernorm.weight", "outside the tensor"],
                 "chunk outside the tensor")
    # tp2 with the default padding: 640 vocabulary rows against the checkpoint's 576
    expect_error("gpt_tp2", save, tmp, ["word_embeddings", "padded vocabulary", ".metadata"], "padded vocab")
    # --ckpt-format torch does not read torch_dist (as Megatron), --auto-detect-ckpt-format does
    expect_error("gpt_tp1", save, tmp, ["is a torch_dist checkpoint", "--auto-detect-ckpt-format"],
                 "--ckpt-format torch", extra=("--ckpt-format", "torch"))
    r = mcs.run_ours("gpt_tp1", tmp, ("--load", save, "--ckpt-format", "torch", "--auto-detect-ckpt-format"))
    check(r.returncode == 0 and sorted(mcs.train_lines(r.stdout)) == [4, 5, 6],
          f"--auto-detect-ckpt-format loads torch_dist: {r.stderr[-300:]}")
    # the ordinary optimizer's state loads into a distributed-optimizer run (each rank keeps its
    # shard; Megatron core_v0.12.1 cannot load torch_dist with the distributed optimizer at all):
    # the same losses as the ordinary optimizer's resume; the weights alone (--no-load-optim) too
    mcs.ALL_CASES.setdefault("gpt_dp2", (2, mcs.GPT2, ("--data-path", mcs.CORPUS_A)))
    ref = mcs.train_lines(mcs.run_ours("gpt_tp1", tmp, ("--load", save) + DIST).stdout)
    r = mcs.run_ours("gpt_dp2", tmp, ("--load", save, "--use-distributed-optimizer") + DIST)
    ours = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(ours) == [4, 5, 6] and sorted(ref) == [4, 5, 6],
          f"distopt loads the ordinary optimizer's state: {r.stderr[-300:]}")
    for it in sorted(ours):
        a, b = mcs.numbers(ours[it][1])["lm loss"], mcs.numbers(ref[it][1])["lm loss"]
        check(abs(a - b) <= 1e-6 * abs(b), f"distopt from the ordinary optimizer's state {it}: {a} vs {b}")
    r = mcs.run_ours("gpt_dp2", tmp, ("--load", save, "--use-distributed-optimizer", "--no-load-optim") + DIST)
    ours = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(ours) == [4, 5, 6], f"distopt --no-load-optim: {r.stderr[-300:]}")
    # saving the distributed optimizer's state: test_dist_ckpt_distopt.py (Megatron's default
    # 'fully_sharded_model_space') and test_dist_ckpt_dp_zero.py ('dp_zero_gather_scatter')
    r = mcs.run_ours("gpt_tp1", tmp, DIST + ("--save", os.path.join(tmp, "s1"), "--save-interval", "3"),
                     iters=3, timeout=120)
    check(r.returncode == 0 and os.path.exists(os.path.join(tmp, "s1", "iter_0000003", ".metadata")),
          f"torch_dist save written: {r.stderr[-300:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="mc_dist_ckpt_")
    try:
        saves = {}
        for case in mcs.DIST_CASES:
            save, theirs = megatron_checkpoint(case, tmp)
            continue_from(case, save, theirs, tmp)
            saves[case] = (save, theirs)
        save, theirs = saves["gpt_tp1"]
        for tag, (case, extra) in RELAYOUTS.items():
            continue_from(case, save, theirs, tmp, extra, tag=f" (tp1 save loaded at {tag})")
        lsave, ltheirs = saves["llama_tp2"]
        for tag, (case, extra) in LLAMA_RELAYOUTS.items():
            continue_from(case, lsave, ltheirs, tmp, extra, tag=f" (Llama tp2 save loaded at {tag})")
        test_broken(save, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt")


if __name__ == "__main__":
    sys.exit(main())
