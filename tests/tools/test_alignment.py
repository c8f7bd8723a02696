"""The precision-alignment loop end to end (docs/alignment.md): megatron.c and Megatron-LM
core_v0.12.1 (run live on this CPU with tools/megatron_dump_hooks.py) start from the same
checkpoint (ours, torch format, loaded by both with --finetune --no-load-optim --no-load-rng)
and read the same batches with dropout off; both dump every point of iterations 1-2.
build/bin/compare_dumps finds the same names on both sides and every tensor within fp32
tolerance; a megatron.c run with a wrong layer-norm epsilon in one layer
(MC_TEST_PERTURB_LN_EPS) is reported as first diverging exactly at that layer's output.
Both again with 2 pipeline stages (the checkpoint resharded by convert_checkpoint): the same
names and agreement. tools/compare_loss.py on Megatron's logs (1 and 2 stages), ours and our
TensorBoard directory, and on hand-made logs at the criteria's edges; its PNG is read back. Without MC_MEGATRON_ROOT the Megatron runs are skipped (said so); the rest runs.
Also: the --dump-* options' errors."""
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "checkpointing"))
import megatron_cases as mcs  # noqa: E402
from mc_test import check, llama, summary  # noqa: E402

SRC, BUILD = mcs.SRC, mcs.BUILD
COMPARE = os.path.join(BUILD, "bin", "compare_dumps")
COMPARE_LOSS = os.path.join(SRC, "tools", "compare_loss.py")
sys.path.insert(0, os.path.join(SRC, "tools"))
import mcdump  # noqa: E402

ITERS = 4
MODEL = ("--num-layers", "4", "--hidden-size", "16", "--num-attention-heads", "4",
         "--data-path", mcs.CORPUS_A, "--transformer-impl", "local")
LOAD = ("--finetune", "--no-load-optim", "--no-load-rng")
PREFIXES = ("param.", "batch.tokens", "batch.labels", "batch.loss_mask", "batch.position_ids",
            "forward.embedding.output", "forward.decoder.layers.3.input",
            "forward.output_layer.output", "backward.decoder.layers.0.input", "grad.",
            "grad_reduced.", "grad_clipped.", "optimizer.exp_avg.", "optimizer.exp_avg_sq.",
            "optimizer.param.", "loss")


def common(tmp, iters):
    # global batch 4 of micro-batches of 2: two micro-batches, so the @1 names are exercised
    return list(MODEL + mcs.common(tmp, iters)[:]) + ["--global-batch-size", "4"]


def ours(tmp, args, env=None, timeout=300):
    p = subprocess.run([mcs.EXE] + list(args), capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
    return p.returncode, p.stdout + p.stderr


def megatron_start(name, args, port, hooks, world=1):
    """Starts Megatron's pretrain_gpt.py with the hook script (its options: hooks) through
    tests/tools/megatron_cpu_dump.py, `world` ranks; megatron_wait collects it (two runs go
    side by side: most of their time is Python's start-up)."""
    py = mcs.megatron_python(True) or "/usr/bin/python3"
    cmd = ([py, os.path.join(HERE, "megatron_cpu_dump.py")] + list(hooks) + ["--"] + list(args) +
           list(mcs.MEGATRON_ONLY))
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                                       WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), MEGATRON_ROOT=mcs.megatron_root(),
                                       OMP_NUM_THREADS="1", CUDA_DEVICE_MAX_CONNECTIONS="1"))
             for r in range(world)]
    return name, procs


def megatron_wait(tmp, run):
    """The ranks' output joined (the last rank prints the training lines), also written to
    tmp/name.log."""
    name, procs = run
    outs = [p.communicate(timeout=900)[0] for p in procs]
    out = "\n".join(outs)
    if any(p.returncode for p in procs):
        print(out[-3000:])
    check(not any(p.returncode for p in procs), f"Megatron {name} exits 0")
    with open(os.path.join(tmp, name + ".log"), "w") as f:
        f.write(out)
    return out


def compare(a, b, *extra):
    p = subprocess.run([COMPARE, *extra, a, b], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def last_line(out):
    lines = [l for l in out.splitlines() if l.startswith("first divergence") or
             l.startswith("no divergence")]
    return lines[-1] if lines else ""


def test_dumps_line_up(tmp, ref, ours_dir):
    """Same names, every point present, every tensor within fp32 tolerance."""
    for it in (1, 2):
        a = mcdump.read(os.path.join(ours_dir, "iter_%07d" % it, "rank_00000.dump"))
        b = mcdump.read(os.path.join(ref, "iter_%07d" % it, "rank_00000.dump"))
        # (the order differs: Megatron's hooks on a tensor shared by two layers fire together)
        check(sorted(a) == sorted(b), f"iteration {it}: the same names "
              f"({len(a)} vs {len(b)}; only ours {[k for k in a if k not in b][:3]}, only "
              f"Megatron's {[k for k in b if k not in a][:3]})")
        for p in PREFIXES:
            check(any(k.startswith(p) for k in b), f"iteration {it}: Megatron's dump has {p}*")
        check("batch.tokens@1" in b and "forward.decoder.layers.2.output@1" in b,
              f"iteration {it}: the second micro-batch is recorded as @1")
        check(b["batch.tokens"].dtype.kind == "i" and (a["batch.tokens"] == b["batch.tokens"]).all(),
              f"iteration {it}: the same tokens")
    rc, out, err = compare(ours_dir, ref)
    verdicts = [l.split()[0] for l in out.splitlines() if l.split() and
                l.split()[0] in ("ok", "exact", "BEYOND")]
    print(last_line(out))
    check(rc == 0, f"compare_dumps ours Megatron: exit 0 (got {rc}: "
          f"{[l for l in out.splitlines() if l.startswith('BEYOND') or 'only in' in l][:3]} {err})")
    check(len(verdicts) > 800 and "BEYOND" not in verdicts,
          f"every one of {len(verdicts)} tensors within fp32 tolerance")
    check("within what fp32 explains" in last_line(out) and "0 of" in last_line(out),
          f"the last line says within fp32: {last_line(out)!r}")
    # data-flow order: forward layers ascending, then backward descending
    names = [l.split()[1] for l in out.splitlines() if l.split()[:1] in (["ok"], ["exact"])]
    fw = [n for n in names if re.match(r"forward\.decoder\.layers\.\d+\.output$", n)]
    bw = [n for n in names if re.match(r"backward\.decoder\.layers\.\d+\.input$", n)]
    check(fw[:4] == [f"forward.decoder.layers.{i}.output" for i in range(4)] and
          bw[:4] == [f"backward.decoder.layers.{i}.input" for i in (3, 2, 1, 0)] and
          names.index(fw[0]) < names.index(bw[0]), f"data-flow order: {fw[:4]} then {bw[:4]}")


def test_perturbed(tmp, ref, ckpt, port):
    """The wrong epsilon in layer L is found at layer L, for two layers."""
    for layer in (1, 2):
        d = os.path.join(tmp, f"perturbed{layer}")
        rc, out = ours(tmp, common(tmp, 1) + ["--load", ckpt, *LOAD, "--dump-dir", d],
                       env={"MC_TEST_PERTURB_LN_EPS": f"decoder.layers.{layer}"})
        check(rc == 0, f"perturbed run {layer} exits 0")
        rc, out, _ = compare(os.path.join(d, "iter_0000001", "rank_00000.dump"),
                             os.path.join(ref, "iter_0000001", "rank_00000.dump"))
        line = last_line(out)
        print(line)
        check(rc == 1, f"perturbed layer {layer}: compare_dumps exits 1 (got {rc})")
        check(line.startswith(f"first divergence at forward.decoder.layers.{layer}.output: "
                              "beyond what fp32 explains"),
              f"perturbed layer {layer}: first divergence at its output: {line!r}")
        check(f"exact  forward.decoder.layers.{layer}.input " in out or
              re.search(rf"^ok +forward\.decoder\.layers\.{layer}\.input ", out, re.M),
              f"perturbed layer {layer}: its input still agrees")


LOG_LINE = (" [2026-01-01 00:00:00] iteration {it:8d}/ {n:7d} | consumed samples: {s:12d} | "
            "elapsed time per iteration (ms): 1.0 | learning rate: 1.000000E-02 | global batch "
            "size:     4 | lm loss: {loss:E} | loss scale: 1.0 | grad norm: 1.000 | number of "
            "skipped iterations:   0 | number of nan iterations:   0 |")


def write_log(path, losses):
    with open(path, "w") as f:
        for i, v in enumerate(losses, 1):
            f.write(LOG_LINE.format(it=i, n=len(losses), s=4 * i, loss=v) + "\n")


def run_loss(*args):
    p = subprocess.run(["/usr/bin/python3", COMPARE_LOSS, *args], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


def check_png(path, colours):
    """A valid 800x600 RGB PNG (chunks, CRCs, zlib stream) holding the curves' colours."""
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: PNG signature")
    i, idat, w, h = 8, b"", 0, 0
    while i < len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        (crc,) = struct.unpack(">I", data[i + 8 + n:i + 12 + n])
        check(crc == zlib.crc32(kind + body) & 0xFFFFFFFF, f"{path}: CRC of {kind}")
        if kind == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
        if kind == b"IDAT":
            idat += body
        i += 12 + n
    raw = zlib.decompress(idat)
    check((w, h) == (800, 600) and len(raw) == h * (1 + 3 * w), f"{path}: 800x600 RGB")
    px = {raw[y * (1 + 3 * w) + 1 + 3 * x:y * (1 + 3 * w) + 4 + 3 * x]
          for y in range(0, h, 2) for x in range(0, w, 2)}
    for c in colours:
        check(bytes(c) in px, f"{path}: has colour {c}")


def parse_losses(path):
    return {int(m.group(1)): float(m.group(2)) for m in
            re.finditer(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([-0-9.E+]+) \|", open(path).read())}


def test_compare_loss_synthetic(tmp):
    ref = [6.0, 5.5, 5.0, 4.5]
    write_log(os.path.join(tmp, "ref.log"), ref)
    write_log(os.path.join(tmp, "first.log"), [6.0 * 1.006] + ref[1:])    # 0.6 % at step 1
    write_log(os.path.join(tmp, "mean.log"), [6.0 * 1.004, 5.5 * 1.013, 5.0 * 1.013, 4.5 * 1.013])
    write_log(os.path.join(tmp, "good.log"), [6.0 * 1.004, 5.5 * 1.009, 5.0 * 0.991, 4.5])
    rc, out = run_loss(os.path.join(tmp, "first.log"), os.path.join(tmp, "ref.log"))
    check(rc == 1 and "first step (iteration 1): |relative difference| 0.6000 % > 0.50 %: NOT met"
          in out, f"0.6 % first step fails the first criterion: {out[-400:]}")
    rc, out = run_loss(os.path.join(tmp, "mean.log"), os.path.join(tmp, "ref.log"))
    first = [l for l in out.splitlines() if l.startswith("first step")]
    mean = [l for l in out.splitlines() if l.startswith("mean over")]
    check(rc == 1 and first and first[0].endswith(": met") and mean and
          "|relative difference| 1.0750 % > 1.00 %: NOT met" in mean[0],
          f"0.4/1.3/1.3/1.3 %: first step met, mean (1.075 %) not: {out[-400:]}")
    rc, out = run_loss(os.path.join(tmp, "good.log"), os.path.join(tmp, "ref.log"))
    check(rc == 0 and "loss alignment: within the criteria" in out, f"0.4/0.9/0.9/0 % passes: {out[-300:]}")
    rc, out = run_loss(os.path.join(tmp, "nothere.log"), os.path.join(tmp, "ref.log"))
    check(rc == 2 and "nothere.log" in out, f"a missing log: exit 2 naming it: {out[-200:]}")
    write_log(os.path.join(tmp, "empty.log"), [])
    rc, out = run_loss(os.path.join(tmp, "empty.log"), os.path.join(tmp, "ref.log"))
    check(rc == 2 and "no training lines" in out, f"a log without training lines: exit 2: {out[-200:]}")


def test_compare_loss_runs(tmp, a, b, tb=None, expect_ok=None, png=None):
    rc, out = run_loss(a, b, *(["--png", png] if png else []))
    print(out)
    la, lb = parse_losses(a) if tb is None else None, parse_losses(b)
    if la is None:
        la = {int(m.group(1)): float(m.group(2)) for m in
              re.finditer(r"^ +(\d+) +(\S+) +\S+ +\S+$", out, re.M)}
    its = sorted(set(la) & set(lb))
    rels = [abs(la[i] - lb[i]) / abs(lb[i]) for i in its]
    first_ok, mean_ok = rels[0] <= 0.005, sum(rels) / len(rels) <= 0.01
    check(len(its) == ITERS, f"{a} vs {b}: {ITERS} common iterations ({its})")
    check(rc == (0 if first_ok and mean_ok else 1), f"{a} vs {b}: exit {rc} follows the criteria "
          f"(first {rels[0]:.2e}, mean {sum(rels) / len(rels):.2e})")
    check(f"mean over {ITERS} iterations: |relative difference| {100 * sum(rels) / len(rels):.4f} %"
          in out, f"{a} vs {b}: the printed mean is the logs' mean")
    if expect_ok is not None:
        check((rc == 0) == expect_ok, f"{a} vs {b}: {'within' if expect_ok else 'beyond'} the criteria")
    if png:
        check_png(png, [(31, 119, 180), (255, 127, 14), (214, 39, 40)])
    return la


def test_pipeline_layout(tmp):
    """A 2-stage pipeline's dump (two rank files, global layer numbers) lines up with a single
    process's from the same seed: everything within fp32 tolerance except the tied word
    embedding's grad before finalize_model_grads, which on stage 0 lacks the output layer's part
    until the embedding-group all-reduce (as Megatron's main_grad does)."""
    single, pp2 = os.path.join(tmp, "seed_single"), os.path.join(tmp, "seed_pp2")
    rc, out = ours(tmp, common(tmp, 1) + ["--dump-dir", single])
    check(rc == 0, f"single-process seed run exits 0 ({out[-300:]})")
    p = subprocess.run(mcs.mpirun(2) + [mcs.EXE] + common(tmp, 1) +
                       ["--dump-dir", pp2, "--pipeline-model-parallel-size", "2"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"pp 2 seed run exits 0 ({(p.stdout + p.stderr)[-300:]})")
    r1 = mcdump.read(os.path.join(pp2, "iter_0000001", "rank_00001.dump"))
    check("forward.decoder.layers.3.output" in r1 and "param.decoder.layers.2.mlp.linear_fc1.weight"
          in r1 and not any(".layers.0." in k or ".layers.1." in k for k in r1),
          "stage 1 names its layers 2 and 3 (global numbers)")
    check("param.embedding.word_embeddings.weight" not in r1 and "loss" in r1,
          "stage 1 leaves out its shared embedding copy and holds the loss")
    rc, out, _ = compare(pp2, single)
    beyond = sorted({l.split()[1] for l in out.splitlines() if l.startswith("BEYOND")})
    check(rc == 1 and beyond == ["grad.embedding.word_embeddings.weight"] and
          "only in" not in out, f"pp 2 vs single: only the tied embedding's pre-reduction grad "
          f"differs ({beyond}, rc {rc})")


def test_tensor_parallel(tmp, ckpt, single):
    """tp 2, and tp 2 with sequence parallelism, from the checkpoint resharded by
    convert_checkpoint: each rank's dump holds every tensor whole, the names and shapes of the
    single-process dump, and every tensor of iteration 1 within fp32 of it (the grads before
    finalize_model_grads too: under sequence parallelism a norm's grad is summed over the
    group). The vocabulary is padded to a multiple of 32 x 2, tp 1's 64 (576). Starts Megatron's tp 2
    run (without sequence parallelism: it does not run on a CPU); test_tensor_parallel_check
    compares it."""
    ck2 = os.path.join(tmp, "ckpt_tp2")
    p = subprocess.run([os.path.join(BUILD, "bin", "convert_checkpoint"), "--model-type", "GPT",
                        "--loader", "core", "--saver", "core", "--saver-transformer-impl", "local",
                        "--load-dir", ckpt, "--save-dir", ck2, "--target-tensor-parallel-size",
                        "2", "--target-pipeline-parallel-size", "1"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"convert_checkpoint to tp 2 ({p.stdout[-300:]}{p.stderr[-300:]})")
    args = common(tmp, ITERS) + ["--load", ck2, *LOAD, "--tensor-model-parallel-size", "2",
                                 "--make-vocab-size-divisible-by", "32"]
    ref1 = os.path.join(single, "iter_0000001", "rank_00000.dump")
    for sp in ([], ["--sequence-parallel"]):
        mine = os.path.join(tmp, "ours_tp2" + ("_sp" if sp else ""))
        p = subprocess.run(mcs.mpirun(2) + [mcs.EXE] + args + sp +
                           ["--dump-dir", mine, "--dump-iters", "1"],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"our tp 2 {sp} run ({(p.stdout + p.stderr)[-300:]})")
        r0, r1 = (mcdump.read(os.path.join(mine, "iter_0000001", "rank_%05d.dump" % r))
                  for r in (0, 1))
        one = mcdump.read(ref1)
        check(list(r0) == list(r1) and sorted(r0) == sorted(one) and
              all(r0[k].shape == one[k].shape for k in one),
              f"tp 2 {sp}: both ranks hold every tensor whole, with tp 1's names and shapes")
        rc, out, err = compare(os.path.join(mine, "iter_0000001", "rank_00000.dump"), ref1)
        print("tp 2 %s vs tp 1: %s" % (sp, last_line(out)))
        check(rc == 0 and "within what fp32 explains" in last_line(out) and
              " 0 of 411 " in last_line(out), f"tp 2 {sp} vs tp 1: every tensor within fp32 "
              f"({[l for l in out.splitlines() if l.startswith('BEYOND')][:3]} {err})")
    if not mcs.megatron_root():
        return None
    ref = os.path.join(tmp, "megatron_tp2")
    return megatron_start("megatron_tp2", args, 29785, ["--dump-dir", ref, "--dump-iters", "1"],
                          world=2), os.path.join(tmp, "ours_tp2"), ref


def test_tensor_parallel_swiglu(tmp):
    """A Llama-shaped model (SwiGLU: each rank's fc1 rows are [gate_r; up_r]; GQA; RMSNorm;
    untied) at tp 2 with sequence parallelism, from its tp 1 checkpoint resharded: every point
    of iteration 1 within fp32 of the tp 1 run's; --dump-ranks 1: rank 0 gathers with rank 1
    but writes nothing."""
    args = llama(2) + ["--data-path", mcs.CORPUS_A, "--transformer-impl", "local"] + \
        list(mcs.common(tmp, 1)) + ["--global-batch-size", "4"]
    ck, ck2 = os.path.join(tmp, "llama_ckpt"), os.path.join(tmp, "llama_ckpt_tp2")
    rc, out = ours(tmp, args + ["--save", ck, "--save-interval", "1"])
    check(rc == 0, f"llama checkpoint saved ({out[-300:]})")
    p = subprocess.run([os.path.join(BUILD, "bin", "convert_checkpoint"), "--model-type", "GPT",
                        "--loader", "core", "--saver", "core", "--saver-transformer-impl", "local",
                        "--load-dir", ck, "--save-dir", ck2, "--target-tensor-parallel-size", "2"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"llama checkpoint to tp 2 ({p.stdout[-300:]}{p.stderr[-300:]})")
    one, two = os.path.join(tmp, "llama_tp1"), os.path.join(tmp, "llama_tp2_sp")
    rc, out = ours(tmp, args + ["--load", ck, *LOAD, "--dump-dir", one])
    check(rc == 0, f"llama tp 1 dump ({out[-300:]})")
    p = subprocess.run(mcs.mpirun(2) + [mcs.EXE] + args +
                       ["--load", ck2, *LOAD, "--dump-dir", two, "--tensor-model-parallel-size",
                        "2", "--sequence-parallel", "--make-vocab-size-divisible-by", "32",
                        "--dump-ranks", "1"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"llama tp 2 dump ({(p.stdout + p.stderr)[-300:]})")
    files = sorted(os.listdir(os.path.join(two, "iter_0000001")))
    check(files == ["rank_00001.dump"], f"--dump-ranks 1: rank 1 alone writes ({files})")
    rc, out, err = compare(two, one)
    print("llama tp 2 (sequence parallel) vs tp 1: " + last_line(out))
    check(rc == 0 and "within what fp32 explains" in last_line(out) and "only in" not in out,
          f"llama tp 2 vs tp 1: every tensor within fp32 "
          f"({[l for l in out.splitlines() if l.startswith('BEYOND')][:3]} {err})")


def test_tensor_parallel_check(tmp, run, mine, ref):
    megatron_wait(tmp, run)
    b = mcdump.read(os.path.join(ref, "iter_0000001", "rank_00001.dump"))
    check(b["param.decoder.layers.0.self_attention.linear_qkv.weight"].shape == (48, 16) and
          b["forward.output_layer.output"].shape[2] == 576,
          "Megatron's tp 2 dump holds whole tensors (qkv [48, 16], logits over 576)")
    rc, out, err = compare(mine, ref)
    print("ours vs Megatron, tp 2: " + last_line(out))
    check(rc == 0 and "within what fp32 explains" in last_line(out) and " 0 of 411 " in last_line(out),
          f"ours vs Megatron, both tp 2: every tensor within fp32 ({last_line(out)} {err})")


def test_distributed_optimizer(tmp, ckpt):
    """--use-distributed-optimizer at dp 2, every point: each rank holds a shard of the reduced
    grads and of the optimizer state, and both sides put them together over the data-parallel
    group. Our dump against our dp 2 dump without it: every tensor within fp32, the reduced
    grads and the optimizer state identical (the same two-term sums, the same Adam). Megatron's
    dp 2 run with the hook script: distributed_optimizer_megatron, then
    test_distributed_optimizer_check."""
    args = common(tmp, ITERS) + ["--load", ckpt, *LOAD, "--use-distributed-optimizer"]
    dump = ["--dump-iters", "1-2", "--dump-ranks", "0"]
    mine, plain = os.path.join(tmp, "ours_distopt"), os.path.join(tmp, "ours_dp2")
    for d, a in ((mine, args), (plain, args[:-1])):
        p = subprocess.run(mcs.mpirun(2) + [mcs.EXE] + a + dump + ["--dump-dir", d],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"our dp 2 run {a[-1]} ({(p.stdout + p.stderr)[-300:]})")
    rc, out, err = compare(mine, plain)
    verdicts = (["ok"], ["exact"], ["BEYOND"])
    lines = [l.split() for l in out.splitlines() if l.split()[:1] in verdicts]
    sharded = [l for l in lines if l[1].startswith(("grad_reduced.", "optimizer.exp_avg"))]
    print("distributed optimizer vs not, dp 2: " + last_line(out))
    check(rc == 0 and "only in" not in out and len(sharded) >= 4 * 36 and
          all(l[0] == "exact" for l in sharded), f"dp 2, distributed optimizer vs not: every "
          f"tensor within fp32, {len(sharded)} reduced grads and states identical "
          f"({last_line(out)} {[l[1] for l in sharded if l[0] != 'exact'][:3]} {err})")
    return args, dump, mine


def distributed_optimizer_megatron(tmp, args, dump, mine):
    ref = os.path.join(tmp, "megatron_distopt")
    return megatron_start("megatron_distopt", args, 29786, ["--dump-dir", ref] + dump,
                          world=2), mine, ref


def test_distributed_optimizer_check(tmp, run, mine, ref):
    megatron_wait(tmp, run)
    rc, out, err = compare(mine, ref)
    n = len(mcdump.read(os.path.join(mine, "iter_0000001", "rank_00000.dump")))
    names = mcdump.read(os.path.join(ref, "iter_0000002", "rank_00000.dump"))
    print("ours vs Megatron, distributed optimizer, dp 2: " + last_line(out))
    check(all(any(k.startswith(p) for k in names) for p in PREFIXES) and
          not os.path.exists(os.path.join(ref, "iter_0000001", "rank_00001.dump")),
          "Megatron's distributed-optimizer dump has every point (rank 0 only)")
    check(rc == 0 and "only in" not in out and f" 0 of {2 * n} " in last_line(out),
          f"distributed optimizer, dp 2: ours and Megatron's within fp32, reduced and clipped "
          f"grads and optimizer state included ({last_line(out)} {err})")


def test_tool_errors(tmp, good):
    """compare_dumps and the hook script on bad input: exit 2 (or a SystemExit) naming it."""
    data = open(good, "rb").read()
    bad = os.path.join(tmp, "truncated.dump")
    with open(bad, "wb") as f:
        f.write(data[:len(data) // 2])
    rc, out, err = compare(bad, good)
    check(rc == 2 and "truncated.dump: truncated" in err, f"a truncated dump: exit 2 ({rc}: {err})")
    with open(bad, "wb") as f:
        f.write(b"not a dump at all, just text")
    rc, out, err = compare(good, bad)
    check(rc == 2 and "bad magic" in err, f"not a dump: exit 2 ({rc}: {err})")
    rc, out, err = compare(tmp, good)
    check(rc == 2 and "no iter_NNNNNNN" in err, f"a directory without iterations: exit 2 ({err})")
    rc, out, err = compare(good, good, "--precision", "fp8")
    check(rc == 2 and "--precision" in err, f"--precision fp8: exit 2 ({err})")
    rc, out, err = compare(good, good)
    check(rc == 0 and last_line(out).startswith("no divergence: all"), f"a dump against itself: {last_line(out)}")
    hooks = os.path.join(SRC, "tools", "megatron_dump_hooks.py")
    for args, want in ((["--dump-iters", "1", "--", "--num-layers", "2"], "--dump-dir DIR is required"),
                       (["--dump-dir", tmp, "--megatron-root", tmp, "--", "x"], "no pretrain_gpt.py in"),
                       (["--dump-dir", tmp, "--bogus", "1", "--", "x"], "unknown option")):
        p = subprocess.run(["/usr/bin/python3", hooks] + args, capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and want in p.stderr, f"megatron_dump_hooks {args}: {want!r} ({p.stderr[-200:]})")


def test_pipeline_megatron(tmp, ckpt):
    """Megatron and megatron.c both with 2 pipeline stages, from the checkpoint resharded by
    convert_checkpoint: the hook script renumbers stage 1's layers 2 and 3 and leaves out its
    shared embedding copy, as ours does, and every tensor agrees within fp32."""
    ck2 = os.path.join(tmp, "ckpt_pp2")
    p = subprocess.run([os.path.join(BUILD, "bin", "convert_checkpoint"), "--model-type", "GPT",
                        "--loader", "core", "--saver", "core", "--saver-transformer-impl", "local",
                        "--load-dir", ckpt, "--save-dir", ck2, "--target-tensor-parallel-size",
                        "1", "--target-pipeline-parallel-size", "2"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"convert_checkpoint to pp 2 ({p.stdout[-300:]}{p.stderr[-300:]})")
    args = common(tmp, ITERS) + ["--load", ck2, *LOAD, "--pipeline-model-parallel-size", "2"]
    mine, ref = os.path.join(tmp, "ours_pp2"), os.path.join(tmp, "megatron_pp2")
    p = subprocess.run(mcs.mpirun(2) + [mcs.EXE] + args + ["--dump-dir", mine, "--dump-iters", "1"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"our pp 2 run ({(p.stdout + p.stderr)[-300:]})")
    return megatron_start("megatron_pp2", args, 29784, ["--dump-dir", ref, "--dump-iters", "1"],
                          world=2), mine, ref


def test_pipeline_megatron_check(tmp, run, mine, ref):
    megatron_wait(tmp, run)
    r1 = mcdump.read(os.path.join(ref, "iter_0000001", "rank_00001.dump"))
    check("forward.decoder.layers.3.output" in r1 and
          not any(".layers.0." in k or ".layers.1." in k for k in r1) and
          "param.embedding.word_embeddings.weight" not in r1,
          "Megatron's stage 1 dump: layers 2 and 3 by global number, no shared embedding copy")
    rc, out, err = compare(mine, ref)
    print(last_line(out))
    check(rc == 0 and "within what fp32 explains" in last_line(out) and "0 of 411" in last_line(out),
          f"ours vs Megatron, both pp 2: every tensor within fp32 ({last_line(out)} {err})")


def test_option_errors(tmp):
    base = common(tmp, 1)
    for extra, want in ((["--dump-iters", "1"], "--dump-iters needs --dump-dir"),
                        (["--dump-dir", tmp, "--dump-iters", "3-1"], "--dump-iters '3-1'"),
                        (["--dump-dir", tmp, "--dump-ranks", "x"], "--dump-ranks 'x'"),
                        (["--dump-dir", tmp, "--dump-points", "forward,weights"],
                         "unknown point 'weights'")):
        rc, out = ours(tmp, base + extra)
        check(rc != 0 and want in out, f"{extra}: refused with {want!r} (rc {rc}: {out[-300:]})")
    rc, out = ours(tmp, ["--help"])
    check("--dump-dir" in out and "--dump-points" in out, "--help lists the --dump-* options")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "ckpt")
        rc, out = ours(tmp, common(tmp, 1) + ["--save", ckpt, "--save-interval", "1"])
        check(rc == 0, f"the shared checkpoint is saved (rc {rc}: {out[-500:]})")
        mine = os.path.join(tmp, "ours")
        tb = os.path.join(tmp, "tb")
        rc, out = ours(tmp, common(tmp, ITERS) + ["--load", ckpt, *LOAD, "--dump-dir", mine,
                                                  "--dump-iters", "1-2", "--tensorboard-dir", tb])
        check(rc == 0, f"our dumped run exits 0 (rc {rc}: {out[-500:]})")
        with open(os.path.join(tmp, "ours.log"), "w") as f:
            f.write(out)
        check(sorted(os.listdir(mine)) == ["iter_0000001", "iter_0000002"],
              f"--dump-iters 1-2 writes iterations 1 and 2: {sorted(os.listdir(mine))}")
        check(not any(f.endswith(".tmp") for r, _, fs in os.walk(mine) for f in fs), "no .tmp left")
        test_option_errors(tmp)
        test_tool_errors(tmp, os.path.join(mine, "iter_0000001", "rank_00000.dump"))
        test_pipeline_layout(tmp)
        tp2 = test_tensor_parallel(tmp, ckpt, mine)
        test_tensor_parallel_swiglu(tmp)
        test_compare_loss_synthetic(tmp)
        distopt = test_distributed_optimizer(tmp, ckpt)
        if not mcs.megatron_root():
            print("Megatron-LM runs skipped: set MC_MEGATRON_ROOT (and MC_TORCH2_PYTHON) to run "
                  "the alignment against Megatron itself; the perturbed runs are compared with "
                  "our own unperturbed dump instead")
            test_perturbed(tmp, mine, ckpt, 0)
            return summary("test_alignment", "(Megatron skipped)")
        ref = os.path.join(tmp, "megatron")
        run = megatron_start("megatron", common(tmp, ITERS) + ["--load", ckpt, *LOAD], 29781,
                             hooks=["--dump-dir", ref, "--dump-iters", "1-2"])
        pp2 = test_pipeline_megatron(tmp, ckpt)
        distopt = distributed_optimizer_megatron(tmp, *distopt)
        megatron_wait(tmp, run)
        test_dumps_line_up(tmp, ref, mine)
        test_perturbed(tmp, ref, ckpt, 29782)
        test_pipeline_megatron_check(tmp, *pp2)
        test_tensor_parallel_check(tmp, *tp2)
        test_distributed_optimizer_check(tmp, *distopt)
        a, b = os.path.join(tmp, "ours.log"), os.path.join(tmp, "megatron.log")
        test_compare_loss_runs(tmp, a, b, expect_ok=True, png=os.path.join(tmp, "loss.png"))
        la = test_compare_loss_runs(tmp, tb, b, tb=True, expect_ok=True)
        lo = parse_losses(a)
        check(all(math.isclose(la[i], lo[i], rel_tol=1e-6) for i in lo),
              f"our TensorBoard losses are our log's: {la} {lo}")
        png2 = os.path.join(SRC, "build", "alignment_loss_pp2.png") if os.environ.get(
            "MC_KEEP_PNG") else os.path.join(tmp, "loss_pp2.png")
        test_compare_loss_runs(tmp, os.path.join(tmp, "megatron_pp2.log"), b, expect_ok=True,
                               png=png2)
        if os.environ.get("MC_KEEP_PNG"):
            import shutil
            shutil.copy(os.path.join(tmp, "loss.png"), os.path.join(SRC, "build", "alignment_loss.png"))
    return summary("test_alignment")


if __name__ == "__main__":
    sys.exit(main())
