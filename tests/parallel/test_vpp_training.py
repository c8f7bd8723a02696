"""pretrain_gpt with interleaved (virtual) pipeline parallelism under mpirun (oversubscribed,
OMP_NUM_THREADS=1): a GPT-2-style model (tied embeddings: chunk 0 of the first stage embeds,
chunk vp-1 of the last stage holds the output-layer copy, their grads summed over the embedding
group) and a Llama-style one (SwiGLU, RMSNorm, RoPE, GQA, untied), 4 layers, trained 20
iterations with pp2 x vpp2, pp2 x vpp2 x dp2 with and without --use-distributed-optimizer, and
tp2 x pp2 x vpp2, print the same 'lm loss', 'grad norm' and 'params norm' at every iteration
and the same validation/test losses as the single-process run with the same global batch
(within 1e-5 relative, from the [exact] lines of MC_TEST_LOG_EXACT=1); reruns are
bit-identical. Also matched: --num-layers-per-virtual-pipeline-stage, the distributed optimizer
with --overlap-grad-reduce / --overlap-param-gather (a DDP and buckets per chunk, chunk 0 with
several buckets), --sequence-parallel
(tp2 x pp2 x vpp2: [s/tp, b, h] messages, layernorm grads summed per chunk), an 8-layer pp4 x vpp2 run
with --no-overlap-p2p-communication (batched exchanges), a micro-batch group of 4, dropout
(chunks recompute a micro-batch's forward before its backward, so the masks must repeat) and
--calculate-per-token-loss, and a pp2 x vpp2 x dp2 run on a real indexed dataset with
--eod-mask-loss, --reset-attention-mask and --reset-position-ids. Configurations Megatron refuses are refused with its message."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import (SRC, check, compare_curves, gpt2, llama, parse_exact, parse_train,  # noqa: E402
                     parse_valid, run_pretrain, summary)

ITERS = 20

GPT2 = gpt2(4)
LLAMA = llama(4)
NO_DROPOUT = ["--attention-dropout", "0", "--hidden-dropout", "0"]
VPP2 = ["--num-virtual-stages-per-pipeline-rank", "2"]
MOCK = ["--mock-data", "--vocab-size", "4096", "--seq-length", "32",
        "--max-position-embeddings", "32"]
# a real indexed dataset with EOD-reset attention masks and position ids: each chunk's
# backward needs its own micro-batch's mask while the chunks of a rank share one batch buffer
REAL = ["--data-path", os.path.join(SRC, "tests", "golden", "data", "null_eod_uint16",
                                    "text_document"),
        "--split", "80,10,10", "--vocab-size", "500", "--eod-mask-loss", "--reset-attention-mask",
        "--reset-position-ids", "--seq-length", "16", "--max-position-embeddings", "16"]


def run(model, tmp, np=1, tp=1, pp=1, extra=(), gbs=8, data=MOCK):
    args = [*model, *data, "--micro-batch-size", "2",
            "--global-batch-size", str(gbs), "--train-iters", str(ITERS), "--lr", "1e-3",
            "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--weight-decay", "0.1",
            "--clip-grad", "0.5", "--log-params-norm", "--log-interval", "1",
            "--eval-interval", "10", "--eval-iters", "2", "--tokenizer-type", "NullTokenizer",
            "--make-vocab-size-divisible-by", str(128 // tp),
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            "--data-cache-path", os.path.join(tmp, "cache"), *NO_DROPOUT, *extra]
    p = run_pretrain(args, np, timeout=240)
    return p, parse_exact(p.stdout), parse_valid(p.stdout), parse_train(p.stdout)


def compare(name, ref, got):
    p, exact, valid, train = got
    check(p.returncode == 0, f"{name}: exit 0 (got {p.returncode}: {p.stderr[-800:]})")
    check(len(exact) == ITERS, f"{name}: {ITERS} [exact] lines, printed once (got {len(exact)})")
    check(train == ref[3], f"{name}: one training line per iteration, same consumed samples")
    check(len(valid) == len(ref[2]) == 4, f"{name}: 4 validation lines (got {len(valid)})")
    return compare_curves(name, exact, ref[1], valid, ref[2])


def refused(tmp, np, pp, extra, message, gbs=8):
    p = run(GPT2, tmp, np, 1, pp, extra, gbs)[0]
    out = p.stdout + p.stderr
    check(p.returncode != 0 and message in out,
          f"pp{pp} {extra} gbs {gbs}: refused with '{message}' (rc {p.returncode}: {out[-600:]})")


def main():
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        for mname, model in (("gpt2", GPT2), ("llama-gqa", LLAMA)):
            ref = run(model, tmp)
            check(ref[0].returncode == 0 and len(ref[1]) == ITERS,
                  f"{mname} single process runs ({ref[0].stderr[-800:]})")
            for np, tp, extra in ((2, 1, VPP2), (4, 1, VPP2),
                                  (4, 1, [*VPP2, "--use-distributed-optimizer"]),
                                  (8, 2, VPP2)):
                name = f"{mname} tp{tp} pp2 vpp2 dp{np // (2 * tp)}" + (
                    " distopt" if "--use-distributed-optimizer" in extra else "")
                got = run(model, tmp, np, tp, 2, extra)
                report.append(f"{name}: max rel diff {compare(name, ref, got):.1e}")
                if np == 4 and "--use-distributed-optimizer" in extra:
                    again = run(model, tmp, np, tp, 2, extra)
                    check(again[1] == got[1] and again[2] == got[2],
                          f"{name}: rerun bit-identical")
                if np == 2:
                    out = got[0].stdout
                    check(all(out.count(f"model parallel rank (0, {s})") == 1 for s in range(2)),
                          f"{name}: each stage prints its parameter count (both chunks)")
        ref = run(GPT2, tmp)
        got = run(GPT2, tmp, 2, 1, 2, ["--num-layers-per-virtual-pipeline-stage", "1"])
        report.append("gpt2 pp2 --num-layers-per-virtual-pipeline-stage 1: max rel diff "
                      f"{compare('gpt2 layers-per-virtual-stage', ref, got):.1e}")
        got = run(GPT2, tmp, 2, 1, 2, [*VPP2, "--microbatch-group-size-per-virtual-pipeline-"
                                       "stage", "4"])
        report.append("gpt2 pp2 vpp2 group 4: max rel diff "
                      f"{compare('gpt2 pp2 vpp2 group 4', ref, got):.1e}")
        got = run(GPT2, tmp, 4, 1, 2, [*VPP2, "--use-distributed-optimizer",
                                       "--overlap-grad-reduce", "--overlap-param-gather",
                                       "--ddp-bucket-size", "2000"])
        report.append("gpt2 pp2 vpp2 dp2 distopt, overlapped grad reduce / param gather: max "
                      f"rel diff {compare('gpt2 pp2 vpp2 dp2 overlap', ref, got):.1e}")
        got = run(GPT2, tmp, 4, 2, 2, [*VPP2, "--sequence-parallel"])
        report.append("gpt2 tp2 sp pp2 vpp2: max rel diff "
                      f"{compare('gpt2 tp2 sp pp2 vpp2', ref, got):.1e}")
        ref = run(GPT2, os.path.join(tmp, "real-ref"), data=REAL)
        got = run(GPT2, os.path.join(tmp, "real"), 4, 1, 2, VPP2, data=REAL)
        report.append("gpt2 pp2 vpp2 dp2 indexed dataset, reset masks: max rel diff "
                      f"{compare('gpt2 pp2 vpp2 dp2 indexed dataset', ref, got):.1e}")
        deep = ["--num-layers", "8", *GPT2[2:]]
        ref = run(deep, tmp)
        got = run(deep, tmp, 4, 1, 4, [*VPP2, "--no-overlap-p2p-communication"])
        report.append("gpt2 8 layers pp4 vpp2 batched p2p: max rel diff "
                      f"{compare('gpt2 pp4 vpp2 batched', ref, got):.1e}")
        dropout = ["--attention-dropout", "0.1", "--hidden-dropout", "0.1"]
        ref = run(GPT2, tmp, extra=dropout)
        got = run(GPT2, tmp, 2, 1, 2, [*dropout, *VPP2])
        report.append(f"gpt2 pp2 vpp2 with dropout: max rel diff "
                      f"{compare('gpt2 pp2 vpp2 dropout', ref, got):.1e}")
        per_token = ["--calculate-per-token-loss"]
        ref = run(GPT2, tmp, extra=per_token)
        got = run(GPT2, tmp, 4, 1, 2, [*per_token, *VPP2])
        report.append("gpt2 pp2 vpp2 dp2 per-token loss: max rel diff "
                      f"{compare('gpt2 pp2 vpp2 dp2 per-token', ref, got):.1e}")
        # Megatron's schedule errors (3 and 1 micro-batches for pp 2, group 2)
        refused(tmp, 2, 2, VPP2, "The remainder of M (the total micro-batches) divided by N "
                "(number of contiguous micro-batches in a virtual pipeline stage) should be 0, "
                "or larger than or equal to the pipeline-parallel size, but it is 1.", gbs=6)
        refused(tmp, 2, 2, VPP2, "The number of contiguous micro-batches in a virtual pipeline "
                "stageshould range in [PP=2 , M=1]", gbs=2)
        # validate_args' assertions
        refused(tmp, 2, 2, [*VPP2, "--no-overlap-p2p-communication"],
                "When interleaved schedule is used and p2p communication overlap is disabled, "
                "pipeline-model-parallel size should be greater than 2")
        refused(tmp, 2, 2, ["--num-layers-per-virtual-pipeline-stage", "3"],
                "number of layers per pipeline stage must be divisible number of layers per "
                "virtual pipeline stage")
        refused(tmp, 2, 2, [*VPP2, "--num-layers-per-virtual-pipeline-stage", "1"],
                "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-"
                "rank cannot be set at the same time")
        refused(tmp, 1, 1, VPP2, "When interleaved schedule is used, pipeline-model-parallel "
                "size should be greater than 1")
        # megatron.c's own refusals: one chunk (Megatron's schedule crashes), chunks of
        # unequal size (checkpoints: tests/checkpointing/test_ckpt_vpp.py)
        refused(tmp, 2, 2, ["--num-layers-per-virtual-pipeline-stage", "2"],
                "giving 1 model chunk per pipeline rank")
        refused(tmp, 2, 2, ["--num-virtual-stages-per-pipeline-rank", "3"],
                "--num-layers 4 is not divisible by --pipeline-model-parallel-size 2 x 3")
    print("\n".join(report))
    return summary("test_vpp_training")


if __name__ == "__main__":
    sys.exit(main())
