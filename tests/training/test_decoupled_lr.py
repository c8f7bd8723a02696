"""--decoupled-lr / --decoupled-min-lr against Megatron-LM core_v0.12.1 itself, through
megatron_continue.py: the word embeddings and the output layer (is_embedding_or_output_parameter:
the first stage's embedding, the last stage's output_layer.weight, a tied copy too) form their
own param groups (is_decoupled_lr, first appearance order of _get_param_groups) whose lr follows
the same schedule between --decoupled-min-lr and --decoupled-lr. Cases: GPT with tied
embeddings at pp2 (the last stage's copy is decoupled too), Llama-style untied at dp2 with the
distributed optimizer. For each: Megatron's iteration-3 checkpoint continued by megatron.c with
Megatron's lm loss (1e-5 relative), learning rate and decoupled learning rate (the log line);
our checkpoint's param groups (params, weight decay, is_decoupled_lr, max_lr, min_lr, lr) as
Megatron's; with MC_MEGATRON_ROOT Megatron continues from ours with our losses. Also: a
checkpoint saved without --decoupled-lr refused with it (its param groups do not match)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_continue as mc  # noqa: E402
from megatron_continue import mcs  # noqa: E402
from mc_test import check, run_cmd, summary  # noqa: E402

DEC = ("--decoupled-lr", "3e-2", "--decoupled-min-lr", "1e-3")
CASES = {
    "gpt_pp2_declr": (2, mcs.GPT2 + ("--pipeline-model-parallel-size", "2") + DEC,
                      ("--data-path", mcs.CORPUS_A)),
    "llama_dp2_distopt_declr": (2, mcs.LLAMA + ("--use-distributed-optimizer", "--decoupled-lr", "2e-2"),
                                ("--data-path", mcs.CORPUS_A)),
}
RANKS = {"gpt_pp2_declr": ["mp_rank_00_000", "mp_rank_00_001"],
         "llama_dp2_distopt_declr": ["mp_rank_00"]}
mc.use(CASES, os.path.join(mcs.SRC, "tests", "golden", "training", "decoupled_lr"), RANKS)


def test_refused_without(tmp):
    """A checkpoint whose optimizer has no decoupled groups, loaded with --decoupled-lr."""
    args = mcs.case_args("gpt_pp2_declr", tmp)
    i = args.index("--decoupled-lr")
    del args[i:i + 4]  # saved without --decoupled-lr / --decoupled-min-lr
    nodec = os.path.join(tmp, "nodec")
    r1 = run_cmd(mcs.mpirun(2) + [mcs.EXE] + args + ["--save", nodec, "--save-interval", "3",
                                                      "--exit-interval", "3", "--transformer-impl", "local"],
                 dict(os.environ, OMP_NUM_THREADS="1"), 300)
    r2 = mcs.run_ours("gpt_pp2_declr", tmp, ("--load", nodec, "--transformer-impl", "local"))
    err = r2.stdout + r2.stderr
    check(r1.returncode == 0 and r2.returncode != 0 and "param_groups: expected 3 groups" in err,
          f"groups without decoupled LR refused: {r1.stderr[-300:]} {err[-500:]}")


def main():
    if "--make-goldens" in sys.argv:
        if not mcs.megatron_root():
            raise SystemExit("set MC_MEGATRON_ROOT")
        return mc.make_goldens()
    import torch_stubs
    torch_stubs.install()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            mc.run_case(case, tmp, 29780 + 4 * i)
        test_refused_without(tmp)
    return summary("test_decoupled_lr")


if __name__ == "__main__":
    sys.exit(main())
