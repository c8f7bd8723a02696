"""--qk-layernorm against Megatron-LM core_v0.12.1 itself (SelfAttention's q_layernorm /
k_layernorm on every query and key head over kv_channels, after linear_qkv and before RoPE; the
q/k norm grads summed over tensor-parallel ranks by finalize_model_grads):
- Megatron trains 3 iterations and saves (GPT with LayerNorm at tp2; Llama-style RMSNorm + RoPE
  + GQA at pp2); pretrain_gpt loads that checkpoint and continues: lm loss of iterations 4-6
  within 1e-5 relative of Megatron's own, learning rate and consumed samples identical.
- Our checkpoint of the same run: every model key (self_attention.q_layernorm.weight [kv_channels]
  etc.), in Megatron's order, with Megatron's shapes and dtypes; args.qk_layernorm saved.
- With MC_MEGATRON_ROOT: Megatron continues from our iteration-3 checkpoint with our losses.
Megatron's checkpoints are the goldens in tests/golden/training/qk_layernorm/<case>/ (made by
`--make-goldens` with MC_MEGATRON_ROOT set), or made live with MC_MEGATRON_ROOT set."""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "checkpointing"))
sys.path.insert(0, os.path.join(HERE, ".."))
import megatron_cases as mcs  # noqa: E402
from mc_test import check, summary  # noqa: E402

CASES = {
    "gpt_qkln_tp2": (2, mcs.GPT2 + ("--qk-layernorm", "--tensor-model-parallel-size", "2"),
                     ("--data-path", mcs.CORPUS_A)),
    "llama_qkln_pp2": (2, mcs.LLAMA + ("--qk-layernorm", "--pipeline-model-parallel-size", "2"),
                       ("--data-path", mcs.CORPUS_A)),
}
mcs.ALL_CASES.update(CASES)
GOLDEN = os.path.join(mcs.SRC, "tests", "golden", "training", "qk_layernorm")
RANKS = {"gpt_qkln_tp2": ["mp_rank_00", "mp_rank_01"],
         "llama_qkln_pp2": ["mp_rank_00_000", "mp_rank_00_001"]}


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
            save, _, out = megatron_save(case, tmp, 29710 + i)
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
        ko = [(k, tuple(v.shape), v.dtype) for k, v in o["model"].items() if hasattr(v, "shape")]
        kg = [(k, tuple(v.shape), v.dtype) for k, v in g["model"].items() if hasattr(v, "shape")]
        check(ko == kg, f"{case} {rank}: model keys/shapes/dtypes {ko[:6]} vs {kg[:6]}")
        qk = [k for k, _, _ in ko if "q_layernorm" in k or "k_layernorm" in k]
        check(len(qk) > 0, f"{case} {rank}: q/k layernorm entries {qk}")
        check(o["args"].qk_layernorm is True, f"{case} {rank}: args.qk_layernorm")
        pg = lambda sd: [(p["params"], p["weight_decay"]) for p in sd["optimizer"]["param_groups"]]
        check(pg(o) == pg(g), f"{case} {rank}: param groups {pg(o)} vs {pg(g)}")


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
        rcs, out = mcs.run_megatron(case, tmp, ("--load", mine, "--ckpt-step", "3", "--no-load-rng"),
                                    port=port + 1)
        check(not any(rcs), f"{case}: Megatron from our checkpoint {rcs}: {out[-600:]}")
        ours = {i: v for i, v in mcs.train_lines(r.stdout).items() if i > 3}
        compare_lines(case, mcs.train_lines(out), ours, "megatron.c -> Megatron")


def main():
    if "--make-goldens" in sys.argv:
        if not mcs.megatron_root():
            raise SystemExit("set MC_MEGATRON_ROOT")
        return make_goldens()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            run_case(case, tmp, 29720 + 4 * i)
    return summary("test_qk_layernorm")


if __name__ == "__main__":
    sys.exit(main())
