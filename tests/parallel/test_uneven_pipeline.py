"""Uneven pipeline stages (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-
layers) against Megatron-LM core_v0.12.1 itself, through tests/training/megatron_continue.py:
Megatron's get_num_layers_to_build / get_transformer_layer_offset give each stage (and each
virtual stage) its layers; the files number them per chunk from 0 as Megatron's do, and the
global offsets set the init streams and dropout sites. Cases: pp2 with 1 + 3 of 4 layers (GPT),
pp3 with 1 + 2 + 1 of 4 (Llama-style), pp2 x vpp2 with 2 of 6 on the first rank (chunks of 1, 2,
1, 2 layers). For each: Megatron's iteration-3 checkpoint continued by megatron.c with Megatron's
lm loss (1e-5 relative), our checkpoint with Megatron's keys, shapes and param groups per rank,
and (MC_MEGATRON_ROOT set) Megatron continuing from ours with our losses. Also the rules of
TransformerConfig / validate_args, with their messages.
MindSpeed-LLM's --num-layer-list (NumLayerListFeature: stage r builds entry r, its offset the sum
before it; no Megatron to run it against): "1,2,1" at pp3 trains exactly as the first 1 / last 1
split (same lines, same files), and MindSpeed's validation messages."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "training"))
import megatron_continue as mc  # noqa: E402
from megatron_continue import mcs  # noqa: E402
from mc_test import check, run_cmd, summary  # noqa: E402

FIRST, LAST = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
CASES = {
    "gpt_pp2_uneven": (2, mcs.GPT2 + ("--pipeline-model-parallel-size", "2", FIRST, "1"),
                       ("--data-path", mcs.CORPUS_A)),
    "llama_pp3_uneven": (3, mcs.LLAMA + ("--pipeline-model-parallel-size", "3", FIRST, "1", LAST, "1"),
                         ("--data-path", mcs.CORPUS_A)),
    "gpt_pp2vpp2_uneven": (2, mcs.GPT2 + ("--num-layers", "6", "--pipeline-model-parallel-size", "2",
                                          "--num-virtual-stages-per-pipeline-rank", "2", FIRST, "2"),
                           ("--data-path", mcs.CORPUS_A)),
}
RANKS = {"gpt_pp2_uneven": ["mp_rank_00_000", "mp_rank_00_001"],
         "llama_pp3_uneven": ["mp_rank_00_000", "mp_rank_00_001", "mp_rank_00_002"],
         "gpt_pp2vpp2_uneven": ["mp_rank_00_000", "mp_rank_00_001"]}
mc.use(CASES, os.path.join(mcs.SRC, "tests", "golden", "parallel", "uneven_pipeline"), RANKS)
# layers per file (chunk by chunk) as Megatron assigns them
LAYERS = {"gpt_pp2_uneven": [[1], [3]], "llama_pp3_uneven": [[1], [2], [1]],
          "gpt_pp2vpp2_uneven": [[1, 1], [2, 2]]}


def layer_counts(d, case):
    import torch
    out = []
    for rank in RANKS[case]:
        sd = torch.load(os.path.join(d, "iter_0000003", rank, "model_optim_rng.pt"))
        out.append([len({k.split(".")[2] for k in sd[m] if k.startswith("decoder.layers.")})
                    for m in sorted(k for k in sd if k.startswith("model"))])
    return out


def test_rules(tmp):
    """TransformerConfig.__post_init__ / validate_args on uneven splits: Megatron's messages."""
    cases = [
        (("--num-layers", "4", "--pipeline-model-parallel-size", "3", FIRST, "1"),
         "number of layers at middle stage: 3 must be divisible bythe middle pipeline model parallel size 2"),
        ((FIRST, "0"), "num_layers_in_first_pipeline_stage must be larger than 0"),
        (("--num-layers", "8", "--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
          FIRST, "3"), "number of layers at first stage: 3must be divisible by virtual pipelineparallel degree 2"),
        # valid for Megatron (empty middle stages), refused by name here
        (("--num-layers", "2", "--pipeline-model-parallel-size", "3", FIRST, "1",
          "--decoder-last-pipeline-num-layers", "1"), "leaving the middle pipeline stages empty"),
    ]
    for extra, want in cases:
        pp = int(extra[extra.index("--pipeline-model-parallel-size") + 1]) if "--pipeline-model-parallel-size" in extra else 2
        r = run_cmd(mcs.mpirun(pp) + [mcs.EXE] + mcs.case_args("gpt_pp2_uneven", tmp, extra, 1) +
                    ["--dry-run"], dict(os.environ, OMP_NUM_THREADS="1"), 120)
        check(r.returncode != 0 and want in r.stdout + r.stderr,
              f"rule {extra}: want {want!r}: {(r.stdout + r.stderr)[-400:]}")
    # the dry run names the per-stage layer counts the model builds
    for case, want in (("llama_pp3_uneven", "4 layers, 1, 2, 1 per pipeline stage"),
                       ("gpt_pp2vpp2_uneven", "6 layers, 2, 4 per pipeline stage")):
        r = run_cmd(mcs.mpirun(CASES[case][0]) + [mcs.EXE] + mcs.case_args(case, tmp, (), 1) +
                    ["--dry-run"], dict(os.environ, OMP_NUM_THREADS="1"), 120)
        check(r.returncode == 0 and want in r.stdout, f"{case} dry run: {want!r}: {r.stdout[-300:]}")


def test_num_layer_list(tmp):
    a = mcs.run_ours("llama_pp3_uneven", tmp, ("--save", os.path.join(tmp, "a"), "--save-interval", "3"), iters=3)
    args = [w for w in mcs.case_args("llama_pp3_uneven", tmp, (), 3)]
    for opt in (FIRST, LAST):
        i = args.index(opt)
        del args[i:i + 2]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    b = run_cmd(mcs.mpirun(3) + [mcs.EXE] + args + ["--num-layer-list", "1,2,1", "--save",
                                                     os.path.join(tmp, "b"), "--save-interval", "3"], env, 300)
    la, lb = mcs.train_lines(a.stdout), mcs.train_lines(b.stdout)
    check(a.returncode == 0 and b.returncode == 0 and len(la) == 3 and
          [mcs.numbers(x[1]) for x in la.values()] == [mcs.numbers(x[1]) for x in lb.values()],
          f"--num-layer-list 1,2,1 == first 1 / last 1: {b.stderr[-400:]}")
    import torch
    for rank in RANKS["llama_pp3_uneven"]:
        x = torch.load(os.path.join(tmp, "a", "iter_0000003", rank, "model_optim_rng.pt"))["model"]
        y = torch.load(os.path.join(tmp, "b", "iter_0000003", rank, "model_optim_rng.pt"))["model"]
        check(list(x) == list(y) and all(torch.equal(x[k], y[k]) for k in x if hasattr(x[k], "shape")),
              f"--num-layer-list files equal the first/last split's: {rank}")
    d = run_cmd(mcs.mpirun(3) + [mcs.EXE] + args + ["--num-layer-list", "1,2,1", "--dry-run"], env, 120)
    check(d.returncode == 0 and "4 layers, 1, 2, 1 per pipeline stage" in d.stdout, f"dry run: {d.stdout[-300:]}")
    for lst, want in (("1,2", "len(args.num_layer_list) != args.pipeline_model_parallel_size"),
                      ("1,2,2", "Incorrect num_layer_list config since its sum(5 is unequal to total num layers(4)."),
                      ("1,x,3", "invalid literal for int() with base 10: 'x'"),
                      ("2,0,2", "--num-layer-list: no layers for pipeline stage 1")):
        r = run_cmd(mcs.mpirun(3) + [mcs.EXE] + args + ["--num-layer-list", lst, "--dry-run"], env, 120)
        check(r.returncode != 0 and want in r.stdout + r.stderr, f"--num-layer-list {lst}: {want!r}: {(r.stdout + r.stderr)[-300:]}")


def main():
    if "--make-goldens" in sys.argv:
        if not mcs.megatron_root():
            raise SystemExit("set MC_MEGATRON_ROOT")
        return mc.make_goldens()
    import torch_stubs
    torch_stubs.install()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            mc.run_case(case, tmp, 29740 + 4 * i)
            got = layer_counts(os.path.join(tmp, f"ours_{case}"), case)
            check(got == LAYERS[case], f"{case}: layers per file {got}, expected {LAYERS[case]}")
        test_rules(tmp)
        test_num_layer_list(tmp)
    return summary("test_uneven_pipeline")


if __name__ == "__main__":
    sys.exit(main())
