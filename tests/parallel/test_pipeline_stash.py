"""Pipeline stages keep each in-flight micro-batch's activations (min(pp - rank, M) activation
slots on stage `rank`, as Megatron keeps its autograd graphs) instead of re-running a forward
before its backward. Both are the same math, so pretrain_gpt under mpirun must print
bit-identical full-precision lm loss, grad norm and params norm ([exact] lines of
MC_TEST_LOG_EXACT=1) for 20 iterations, and identical validation losses, with the slots
(default) and with the recompute fallback (MC_ACTIVATION_MEMORY_LIMIT_MB=0): pp2, pp4 and
tp2 x pp2 (also with --sequence-parallel: each slot keeps its [s/tp, b, h] shards) with
dropout on (each slot keeps its micro-batch's dropout stream), a Llama-style
model on pp4, and pp4 on a real indexed dataset with reset attention masks (each slot keeps its
micro-batch's mask), and pp2 x dp2 with --overlap-grad-reduce (the grad hooks run in the
backward of each slot), and interleaved pp2 x vpp2 (also tp2 x pp2 x vpp2 Llama-style, and on
the indexed dataset), where each model chunk keeps what Megatron's interleaved order leaves in
flight on it (mc_pp_in_flight). The fallback is announced once per stage that needed more than one slot,
and only then."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, run_pretrain, summary  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from test_pipeline_training import GPT2, LLAMA, MOCK, REAL  # noqa: E402

DROPOUT = ["--attention-dropout", "0.1", "--hidden-dropout", "0.1"]
VPP2 = ["--num-virtual-stages-per-pipeline-rank", "2"]
FALLBACK = "recomputing each forward before its backward"


def run(model, tmp, np, tp, pp, data, limit=None, extra=()):
    args = [*model, *data, *DROPOUT, *extra, "--micro-batch-size", "2", "--global-batch-size", "16",
            "--train-iters", "20", "--lr", "1e-3", "--lr-decay-style", "cosine",
            "--lr-warmup-iters", "2", "--weight-decay", "0.1", "--clip-grad", "0.5",
            "--log-params-norm", "--log-interval", "1", "--eval-interval", "10",
            "--eval-iters", "2", "--tokenizer-type", "NullTokenizer",
            "--make-vocab-size-divisible-by", str(128 // tp),
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            "--data-cache-path", os.path.join(tmp, "cache")]
    assert np > 1  # every pair runs under mpirun
    p = run_pretrain(args, np, timeout=240, env={"MC_ACTIVATION_MEMORY_LIMIT_MB": limit})
    lines = p.stdout.splitlines()
    exact = [ln for ln in lines if ln.startswith("[exact]")]
    valid = [ln for ln in lines if "validation loss at" in ln or "lm loss value" in ln]
    return p, exact, valid


def pair(name, model, tmp, np, tp, pp, data=MOCK, extra=()):
    stash = run(model, tmp, np, tp, pp, data, extra=extra)
    recompute = run(model, tmp, np, tp, pp, data, limit=0, extra=extra)
    for label, (p, exact, _) in (("slots", stash), ("recompute", recompute)):
        check(p.returncode == 0 and len(exact) == 20,
              f"{name} {label}: exits 0 with 20 [exact] lines (rc {p.returncode}, "
              f"{len(exact)} lines): {p.stderr[-600:]}")
    check(stash[1] == recompute[1], f"{name}: slots and recompute print the same [exact] lines"
                                    f"\n{stash[1][-1:]}\n{recompute[1][-1:]}")
    check(stash[2] == recompute[2] and len(stash[2]) > 0,
          f"{name}: same validation lines {stash[2][:1]} {recompute[2][:1]}")
    check(FALLBACK not in stash[0].stdout, f"{name}: no fallback message with the slots")
    # 1F1B: stages 0..pp-2 keep min(pp - rank, M = 8) > 1 micro-batches; interleaved: every
    # stage has a chunk with more than one in flight. One tp rank per stage announces it.
    want = pp if VPP2[0] in extra else pp - 1
    got = recompute[0].stdout.count(FALLBACK)
    check(got == want, f"{name}: the fallback is announced by {want} stages (got {got})")
    return stash[1][-1] if stash[1] else ""


def main():
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        overlap = ["--overlap-grad-reduce"]
        for name, model, np, tp, pp, data, extra in (
                ("gpt2 pp2", GPT2, 2, 1, 2, MOCK, ()),
                ("gpt2 pp4", GPT2, 4, 1, 4, MOCK, ()),
                ("gpt2 tp2 x pp2", GPT2, 4, 2, 2, MOCK, ()),
                ("gpt2 tp2 x pp2 --sequence-parallel", GPT2, 4, 2, 2, MOCK,
                 ["--sequence-parallel"]),
                ("llama pp4", LLAMA, 4, 1, 4, MOCK, ()),
                ("gpt2 pp4 indexed dataset, reset masks", GPT2, 4, 1, 4, REAL, ()),
                ("gpt2 pp2 x dp2 --overlap-grad-reduce", GPT2, 4, 1, 2, MOCK, overlap),
                ("gpt2 pp2 x vpp2", GPT2, 2, 1, 2, MOCK, VPP2),
                ("llama tp2 x pp2 x vpp2", LLAMA, 4, 2, 2, MOCK, VPP2),
                ("gpt2 pp2 x vpp2 indexed dataset, reset masks", GPT2, 2, 1, 2, REAL, VPP2)):
            sub = os.path.join(tmp, "real" if data is REAL else "mock")
            report.append(f"{name}: {pair(name, model, sub, np, tp, pp, data, extra)}")
    print("\n".join(report))
    return summary("test_pipeline_stash")


if __name__ == "__main__":
    sys.exit(main())
