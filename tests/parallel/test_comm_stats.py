"""MC_COMM_STATS=1: pretrain_gpt under mpirun prints per-rank communication counters whose
bytes equal the volumes computed here from the layout (tp2 x pp2: TP all-reduces of s*b*h
per layer and micro-batch: the minimum, as every stage keeps its in-flight micro-batches'
activations; with MC_ACTIVATION_MEMORY_LIMIT_MB=0 the stages before the last fall back to
re-running each forward before its backward and pay for it), pipeline sends,
the tied-embedding all-reduce; dp2 with the distributed optimizer: reduce-scatter +
all-gather of every parameter; tp2 x pp2 and tp4 with --sequence-parallel: all-gathers and
reduce-scatters of s*b*h along the sequence instead of the activation all-reduces, each moving
the ring minimum (tp-1)/tp of its payload, the norm/row-bias grads all-reduced over tp once per
step, pipeline messages of s/tp*b*h); without the variable nothing is printed."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, run_pretrain, summary  # noqa: E402

STAT = re.compile(r"comm-stats rank=(\d+) group=(\S+) op=(\S+) calls=(\d+) "
                  r"payload_bytes=(\d+) wire_bytes=(\d+)")
L, H, S, B, GBS, V, ITERS = 2, 32, 32, 2, 8, 4096, 3
VPAD = 4224  # NullTokenizer's V + 1 (EOD) padded to a multiple of 128


def run(tmp, np, tp, pp, extra=(), stats=True, limit=None):
    args = ["--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", "4",
            "--seq-length", str(S), "--max-position-embeddings", str(S), "--mock-data",
            "--vocab-size", str(V), "--tokenizer-type", "NullTokenizer",
            "--micro-batch-size", str(B), "--global-batch-size", str(GBS),
            "--train-iters", str(ITERS), "--lr", "1e-3", "--eval-iters", "0",
            "--eval-interval", "1000", "--tensor-model-parallel-size", str(tp),
            "--pipeline-model-parallel-size", str(pp),
            "--make-vocab-size-divisible-by", str(128 // tp),
            "--data-cache-path", os.path.join(tmp, "cache"), *extra]
    assert np > 1  # the counters are read under mpirun
    p = run_pretrain(args, np, timeout=240, exact=False,
                     env={"MC_ACTIVATION_MEMORY_LIMIT_MB": limit,
                          "MC_COMM_STATS": 1 if stats else None})
    check(p.returncode == 0, f"np={np} tp={tp} pp={pp} exits 0: {p.stderr[-400:]}")
    got = {}
    for r, g, op, calls, pay, wire in STAT.findall(p.stdout):
        got[(int(r), g, op)] = (int(calls), int(pay), int(wire))
    return got


def tp2_pp2(tmp, recompute=False):
    got = run(tmp, 4, 2, 2, limit=0 if recompute else None)
    act = S * B * H * 4
    m = GBS // B
    for r in range(4):
        stage = r // 2  # tp-dp-pp order with dp=1
        first, last = stage == 0, stage == 1
        n_act = m * (4 * (L // 2) + first + last)
        if not last and recompute:  # the fallback re-runs each forward before its backward
            n_act += m * (2 * (L // 2) + first)
        ce = m * 3 * S * B * 4 if last else 0
        tp_pay = ITERS * (n_act * act + ce)
        c = got.get((r, "tp", "all-reduce"))
        check(c and c[1] == tp_pay and c[2] == tp_pay,  # ring wire = 2(n-1)/n = 1x for n=2
              f"rank {r} tp all-reduce bytes {c} == {tp_pay} (recompute {recompute})")
        s = got.get((r, "pp", "send"))
        check(s and s[1] == ITERS * m * act and s[0] == ITERS * m,
              f"rank {r} pp sends {s} == {ITERS * m} x {act} B")
        e = got.get((r, "embedding", "all-reduce"))
        emb = VPAD * H // 2 * 4
        check(e and e[1] == (ITERS + 1) * emb,  # + the one-time initial sync
              f"rank {r} embedding all-reduce {e} == {ITERS + 1} x {emb} B")
        check((r, "dp", "all-reduce") not in got or got[(r, "dp", "all-reduce")][2] == 0,
              f"rank {r}: no dp wire bytes with dp=1")


def sp_layout(tmp, np, tp, pp):
    """Per micro-batch and layer: forward all-gathers before linear_qkv and linear_fc1 and
    reduce-scatters after linear_proj and linear_fc2; backward all-gathers the grads of the two
    row-parallel outputs, re-gathers the two column-parallel inputs for the weight grads (as
    Megatron does, instead of keeping them) and reduce-scatters their input grads. The first
    stage reduce-scatters the embedding and all-gathers its grad; the last all-gathers the final
    norm output for the output layer (again in backward) and reduce-scatters its grad."""
    got = run(tmp, np, tp, pp, ["--sequence-parallel"])
    act = S * B * H * 4
    m = GBS // B
    lp = L // pp
    f = (tp - 1) / tp
    for r in range(np):
        stage = r // tp
        first, last = stage == 0, stage == pp - 1
        ag = 6 * lp + first + 2 * last
        rs = 4 * lp + first + last
        for op, n in (("all-gather", ag), ("reduce-scatter", rs)):
            c = got.get((r, "tp", op))
            want = ITERS * m * n
            check(c and c[0] == want and c[1] == want * act and c[2] == want * act * f,
                  f"sp tp{tp} pp{pp} rank {r} {op} {c} == {want} x {act} B, wire x {f}")
        # all-reduces left on tp: the loss's three per micro-batch, the sequence-parallel grads
        # (per layer 2 norms x (w, b) + 2 row biases, + the final norm) once per step
        ce = m * 3 * S * B * 4 if last else 0
        sp = (6 * H * lp + 2 * H * last) * 4
        c = got.get((r, "tp", "all-reduce"))
        if pp > 1:  # with pp 1 the grad norm's reductions also run over tp
            check(c and c[1] == ITERS * (ce + sp) and c[0] == ITERS * (3 * m * last + 1),
                  f"sp tp{tp} pp{pp} rank {r} tp all-reduce {c} == {ITERS} x {ce + sp} B")
            s = got.get((r, "pp", "send"))
            check(s and s[1] == ITERS * m * act // tp,
                  f"sp rank {r} pp sends {s} == {ITERS * m} x {act // tp} B ([s/tp, b, h])")
        else:
            check(c and c[1] >= ITERS * (ce + sp) and c[1] < ITERS * (ce + sp + 64),
                  f"sp tp{tp} rank {r} tp all-reduce {c}: loss, SP grads and the grad norm")


def dp2_distopt(tmp):
    got = run(tmp, 2, 1, 1, ["--use-distributed-optimizer"])
    for r in range(2):
        rs, ag = got.get((r, "dp", "reduce-scatter")), got.get((r, "dp", "all-gather"))
        check(rs and ag and rs[1] == ag[1] and rs[2] * 2 == rs[1] and ag[2] * 2 == ag[1],
              f"rank {r}: reduce-scatter {rs} and all-gather {ag} move half of the buffer")
        # the buffer holds every parameter; each param starts 64-aligned, buckets split evenly
        nparam = 12 * L * H * H + 13 * L * H + VPAD * H + S * H + 2 * H
        check(rs and nparam * 4 * ITERS <= rs[1] < (nparam + 40 * 64) * 4 * ITERS,
              f"rank {r}: reduce-scatter payload {rs} ~ {ITERS} x {nparam} params")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tp2_pp2(tmp)
        tp2_pp2(tmp, recompute=True)
        dp2_distopt(tmp)
        sp_layout(tmp, 4, 2, 2)
        sp_layout(tmp, 4, 4, 1)
        check(not run(tmp, 2, 2, 1, stats=False), "no comm-stats lines without MC_COMM_STATS")
    return summary("test_comm_stats")


if __name__ == "__main__":
    sys.exit(main())
