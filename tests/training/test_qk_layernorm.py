"""--qk-layernorm against Megatron-LM core_v0.12.1 itself (SelfAttention's q_layernorm /
k_layernorm on every query and key head over kv_channels, after linear_qkv and before RoPE; the
q/k norm grads summed over tensor-parallel ranks by finalize_model_grads), through
megatron_continue.py:
- Megatron trains 3 iterations and saves (GPT with LayerNorm at tp2; Llama-style RMSNorm + RoPE
  + GQA at pp2); pretrain_gpt loads that checkpoint and continues: lm loss of iterations 4-6
  within 1e-5 relative of Megatron's own, learning rate and consumed samples identical.
- Our checkpoint of the same run: every model key (self_attention.q_layernorm.weight [kv_channels]
  etc.), in Megatron's order, with Megatron's shapes and dtypes; args.qk_layernorm saved.
- With MC_MEGATRON_ROOT: Megatron continues from our iteration-3 checkpoint with our losses.
Megatron's checkpoints are the goldens in tests/golden/training/qk_layernorm/<case>/ (made by
`--make-goldens` with MC_MEGATRON_ROOT set), or made live with MC_MEGATRON_ROOT set."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_continue as mc  # noqa: E402
from megatron_continue import mcs  # noqa: E402
from mc_test import check, run_cmd, summary  # noqa: E402

CASES = {
    "gpt_qkln_tp2": (2, mcs.GPT2 + ("--qk-layernorm", "--tensor-model-parallel-size", "2"),
                     ("--data-path", mcs.CORPUS_A)),
    "llama_qkln_pp2": (2, mcs.LLAMA + ("--qk-layernorm", "--pipeline-model-parallel-size", "2"),
                       ("--data-path", mcs.CORPUS_A)),
}
RANKS = {"gpt_qkln_tp2": ["mp_rank_00", "mp_rank_01"],
         "llama_qkln_pp2": ["mp_rank_00_000", "mp_rank_00_001"]}
mc.use(CASES, os.path.join(mcs.SRC, "tests", "golden", "training", "qk_layernorm"), RANKS)


def test_mode(tmp):
    """--test-mode (Attention.run_realtime_tests): the q/k layernorms agree across the tp2 ranks
    (their grads are summed over tp), so the run trains as without it; one rank's q_layernorm
    weight perturbed after iteration 1 stops iteration 2 with Megatron's AssertionError."""
    a = mcs.run_ours("gpt_qkln_tp2", tmp, ("--test-mode",), iters=3)
    b = mcs.run_ours("gpt_qkln_tp2", tmp, (), iters=3)
    check(a.returncode == 0 and mcs.train_lines(a.stdout).keys() == {1, 2, 3} and
          [mcs.numbers(x[1]) for x in mcs.train_lines(a.stdout).values()] ==
          [mcs.numbers(x[1]) for x in mcs.train_lines(b.stdout).values()],
          f"--test-mode run: {a.stderr[-400:]}")
    env = dict(os.environ, MC_TEST_PERTURB_WEIGHT_RANK="1", MC_TEST_PERTURB_AT_ITER="1",
               MC_TEST_PERTURB_PARAM="decoder.layers.0.self_attention.q_layernorm.weight",
               OMP_NUM_THREADS="1")
    r = run_cmd(mcs.mpirun(2) + [mcs.EXE] + mcs.case_args("gpt_qkln_tp2", tmp, ("--test-mode",), 3), env, 300)
    err = r.stdout + r.stderr
    check(r.returncode != 0 and "AssertionError: Discrepancy between q_w in TP ranks" in err and
          sorted(mcs.train_lines(r.stdout)) == [1], f"perturbed q_layernorm caught: {err[-600:]}")


def main():
    if "--make-goldens" in sys.argv:
        if not mcs.megatron_root():
            raise SystemExit("set MC_MEGATRON_ROOT")
        return mc.make_goldens()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            mc.run_case(case, tmp, 29720 + 4 * i)
        # the q/k norms are in our files (compare_files checked them against Megatron's)
        import torch
        sd = torch.load(os.path.join(tmp, "ours_llama_qkln_pp2", "iter_0000003", "mp_rank_00_001",
                                     "model_optim_rng.pt"))
        qk = {k: tuple(v.shape) for k, v in sd["model"].items() if "_layernorm" in k and "self_attention" in k}
        check(qk.get("decoder.layers.0.self_attention.q_layernorm.weight") == (4,) and
              qk.get("decoder.layers.1.self_attention.k_layernorm.weight") == (4,) and len(qk) == 4,
              f"q/k layernorm entries [kv_channels] {qk}")
        test_mode(tmp)
    return summary("test_qk_layernorm")


if __name__ == "__main__":
    sys.exit(main())
