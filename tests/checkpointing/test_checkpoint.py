"""pretrain_gpt --save/--load in Megatron's torch checkpoint format: torch.load reads every entry
Megatron writes (compared with a checkpoint Megatron core_v0.12.1 wrote, tests/golden/checkpointing),
resuming is bit-exact (N iterations straight == N/2, save, load, N/2: same loss lines, same final
weights and optimizer state), a Megatron checkpoint loads and continues with Megatron's losses and
is written back unchanged, and broken inputs give clear errors."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402
import torch_stubs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import mpirun_cmd, check, run_cmd, summary  # noqa: E402

torch_stubs.install()
BUILD = os.environ.get("MC_BUILD_DIR", "build")
SRC = os.environ.get("MC_SOURCE_DIR", ".")
EXE = os.path.join(BUILD, "bin", "pretrain_gpt")
GOLDEN = os.path.join(SRC, "tests", "golden", "checkpointing")


def args(tmp, iters, extra=(), hidden=32, heads=4, seq=32, mbs=4, gbs=8, lr="1e-3", warm="2",
         dropout="0.1", decay=("--lr-decay-iters", "6")):
    return [EXE, *decay, "--num-layers", "2", "--hidden-size", str(hidden), "--num-attention-heads", str(heads),
            "--seq-length", str(seq), "--max-position-embeddings", str(seq),
            "--micro-batch-size", str(mbs), "--global-batch-size", str(gbs),
            "--train-iters", str(iters), "--lr", lr, "--lr-decay-style", "cosine",
            "--lr-warmup-iters", warm, "--log-interval", "1", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", dropout,
            "--hidden-dropout", dropout, "--ckpt-format", "torch", "--transformer-impl", "local", *extra]


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return run_cmd(cmd, env, 300)


TRAIN = re.compile(r"^ \[[^]]*\] iteration +(\d+)/ +\d+ \| consumed samples: +(\d+) \| "
                   r"elapsed time per iteration \(ms\): [\d.]+ \| (.*)$")


def train_lines(out):
    """iteration -> the line without its time stamp and elapsed time"""
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in map(TRAIN.match, out.splitlines()) if m}


def ckpt(d, it):
    return torch.load(os.path.join(d, f"iter_{it:07d}", "mp_rank_00", "model_optim_rng.pt"))


def same_tensors(a, b, where):
    if isinstance(a, torch.Tensor):
        check(isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
              and torch.equal(a, b), f"{where}: tensors differ")
    elif isinstance(a, dict):
        check(isinstance(b, dict) and list(a) == list(b), f"{where}: keys {list(a)[:4]} vs {list(b)[:4] if isinstance(b, dict) else b}")
        for k in a:
            if isinstance(b, dict) and k in b:
                same_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        check(type(a) is type(b) and len(a) == len(b), f"{where}: sequence")
        for i, (x, y) in enumerate(zip(a, b)):
            same_tensors(x, y, f"{where}[{i}]")
    else:
        check(a == b, f"{where}: {a!r} != {b!r}")


def test_resume_bit_exact(tmp):
    full_dir, part_dir = os.path.join(tmp, "full"), os.path.join(tmp, "part")
    extra = ("--eval-interval", "3", "--eval-iters", "1")
    full = run(args(tmp, 6, extra + ("--save", full_dir, "--save-interval", "100")))
    check(full.returncode == 0, f"straight run: {full.stderr[-400:]}")
    first = run(args(tmp, 6, extra + ("--save", part_dir, "--save-interval", "3", "--exit-interval", "3")))
    check(first.returncode == 0, f"first half: {first.stderr[-400:]}")
    check("saving checkpoint at iteration       3 to " + part_dir + " in torch format" in first.stdout,
          "Megatron's saving message")
    check(f"  successfully saved checkpoint from iteration       3 to {part_dir} [ t 1/1, p 1/1 ]"
          in first.stdout, "Megatron's saved message")
    check("    save-checkpoint ..." in first.stdout, "save-checkpoint timer")
    tracker = open(os.path.join(part_dir, "latest_checkpointed_iteration.txt")).read()
    check(tracker == "3", f"tracker file holds '3' without newline: {tracker!r}")
    check(not [f for r, _, fs in os.walk(part_dir) for f in fs if f.endswith(".tmp")], "no temporary files left")
    second = run(args(tmp, 6, extra + ("--load", part_dir, "--save", part_dir, "--save-interval", "100")))
    check(second.returncode == 0, f"second half: {second.stderr[-400:]}")
    check(f" loading checkpoint from {part_dir} at iteration 3" in second.stdout, "loading message")
    check(f"  successfully loaded checkpoint from {part_dir} [ t 1/1, p 1/1 ] at iteration 3"
          in second.stdout, "loaded message")
    a, b, c = train_lines(full.stdout), train_lines(first.stdout), train_lines(second.stdout)
    check(sorted(a) == [1, 2, 3, 4, 5, 6] and sorted(b) == [1, 2, 3] and sorted(c) == [4, 5, 6],
          f"iterations {sorted(a)} / {sorted(b)} / {sorted(c)}")
    for it in a:
        check(a[it] == (b.get(it) or c.get(it)), f"iteration {it}: {a[it]} vs {b.get(it) or c.get(it)}")
    va = [l for l in full.stdout.splitlines() if "validation loss at iteration 6" in l]
    vb = [l for l in second.stdout.splitlines() if "validation loss at iteration 6" in l]
    check(va and va == vb, "validation at iteration 6 equal")
    x, y = ckpt(full_dir, 6), ckpt(part_dir, 6)
    same_tensors(x["model"], y["model"], "model")
    same_tensors(x["optimizer"], y["optimizer"], "optimizer")
    check(x["opt_param_scheduler"] == y["opt_param_scheduler"], "scheduler")
    check(x["num_floating_point_operations_so_far"] == y["num_floating_point_operations_so_far"], "FLOPs")
    check(x["args"].consumed_train_samples == y["args"].consumed_train_samples == 48, "consumed samples")
    check(x["args"].consumed_valid_samples == y["args"].consumed_valid_samples, "consumed valid samples")
    # --finetune: weights only, iteration and counters from zero
    ft = run(args(tmp, 6, extra + ("--load", part_dir, "--finetune", "--exit-interval", "2")))
    lines = train_lines(ft.stdout)
    check(ft.returncode == 0 and sorted(lines) == [1, 2] and lines[1][0] == "8",
          f"--finetune restarts at iteration 1: {ft.stderr[-300:]}")
    # --ckpt-step picks an older iteration
    st = run(args(tmp, 6, extra + ("--load", part_dir, "--ckpt-step", "3", "--exit-interval", "4")))
    check(st.returncode == 0 and f"at iteration 3" in st.stdout and sorted(train_lines(st.stdout)) == [4],
          "--ckpt-step 3")
    # --no-save-optim writes no optimizer/scheduler; --no-load-optim loads such a checkpoint
    nso = os.path.join(tmp, "nso")
    r = run(args(tmp, 6, extra + ("--save", nso, "--save-interval", "100", "--no-save-optim", "--exit-interval", "1")))
    k = list(ckpt(nso, 1)) if r.returncode == 0 else []
    check(k == ["args", "checkpoint_version", "iteration", "model", "rerun_state_machine", "rng_state",
                "num_floating_point_operations_so_far"], f"--no-save-optim keys {k}")
    # --no-save-rng leaves the rng_state out (generate_state_dict)
    nsr = os.path.join(tmp, "nsr")
    r = run(args(tmp, 6, extra + ("--save", nsr, "--save-interval", "100", "--no-save-optim", "--no-save-rng",
                                  "--exit-interval", "1")))
    sd = ckpt(nsr, 1) if r.returncode == 0 else {}
    check(list(sd) == ["args", "checkpoint_version", "iteration", "model", "rerun_state_machine",
                       "num_floating_point_operations_so_far"] and sd["args"].no_save_rng is True,
          f"--no-save-rng keys {list(sd)}")
    r = run(args(tmp, 6, extra + ("--load", nso, "--exit-interval", "2")))
    check(r.returncode != 0 and "--no-load-optim" in r.stderr + r.stdout, "missing optimizer names --no-load-optim")
    r = run(args(tmp, 6, extra + ("--load", nso, "--no-load-optim", "--exit-interval", "2")))
    check(r.returncode == 0 and sorted(train_lines(r.stdout)) == [2], "--no-load-optim resumes")


def test_resume_sgd(tmp):
    """SGD with momentum: the momentum buffers resume (torch keeps no step for SGD)."""
    extra = ("--optimizer", "sgd", "--save-interval", "100")
    a = run(args(tmp, 6, extra + ("--save", os.path.join(tmp, "sgd_full"))))
    b = run(args(tmp, 6, extra + ("--save", os.path.join(tmp, "sgd"), "--exit-interval", "3")))
    c = run(args(tmp, 6, extra + ("--load", os.path.join(tmp, "sgd"))))
    la, lb, lc = train_lines(a.stdout), train_lines(b.stdout), train_lines(c.stdout)
    check(sorted(la) == [1, 2, 3, 4, 5, 6] and {**lb, **lc} == la, f"SGD resume: {la} vs {lb} + {lc}")
    x = ckpt(os.path.join(tmp, "sgd_full"), 6)
    check(list(x["optimizer"]["state"][0]) == ["momentum_buffer"], "SGD state holds momentum_buffer")


def test_resume_parallel(tmp):
    """tp 2 x dp 2 under mpirun: one file per tensor-parallel rank (mp_rank_00, mp_rank_01),
    written by data-parallel rank 0; resuming is bit-exact."""
    if not shutil.which("mpirun"):
        print("test_resume_parallel: skipped (no mpirun)")
        return
    mpi = mpirun_cmd(4, [], ("OMP_NUM_THREADS=1",))
    extra = ("--tensor-model-parallel-size", "2", "--make-vocab-size-divisible-by", "64",
             "--save-interval", "100", "--eval-interval", "3", "--eval-iters", "1")
    full, part = os.path.join(tmp, "tp_full"), os.path.join(tmp, "tp_part")
    a = run(mpi + args(tmp, 6, extra + ("--save", full), mbs=2))
    b = run(mpi + args(tmp, 6, extra + ("--save", part, "--exit-interval", "3"), mbs=2))
    c = run(mpi + args(tmp, 6, extra + ("--save", part, "--load", part), mbs=2))
    la, lb, lc = train_lines(a.stdout), train_lines(b.stdout), train_lines(c.stdout)
    check(a.returncode == b.returncode == c.returncode == 0, f"mpirun runs: {c.stderr[-400:]}")
    check(sorted(la) == [1, 2, 3, 4, 5, 6] and {**lb, **lc} == la, f"tp2 x dp2 resume: {la} vs {lb} + {lc}")
    check(f"  successfully saved checkpoint from iteration       3 to {part} [ t 1/2, p 1/1 ]" in b.stdout
          and f"  successfully loaded checkpoint from {part} [ t 1/2, p 1/1 ] at iteration 3" in c.stdout,
          "t 1/2 in the messages")
    check(sorted(os.listdir(os.path.join(part, "iter_0000003"))) == ["mp_rank_00", "mp_rank_01"],
          "one file per tensor-parallel rank")
    for r in ("mp_rank_00", "mp_rank_01"):
        p = os.path.join("iter_0000006", r, "model_optim_rng.pt")
        x, y = torch.load(os.path.join(full, p)), torch.load(os.path.join(part, p))
        same_tensors(x["model"], y["model"], f"{r} model")
        same_tensors(x["optimizer"]["state"], y["optimizer"]["state"], f"{r} optimizer")
        check(x["args"].tensor_model_parallel_size == 2, "args: tp 2")
    w0 = torch.load(os.path.join(full, "iter_0000006", "mp_rank_00", "model_optim_rng.pt"))["model"]
    check(w0["decoder.layers.0.self_attention.linear_qkv.weight"].shape == (48, 32)
          and w0["embedding.word_embeddings.weight"].shape == (2112, 32), "shards: half the rows")


def test_structure_vs_megatron(tmp):
    """Our checkpoint of the golden's configuration has Megatron's keys, types and shapes."""
    gold = torch.load(os.path.join(GOLDEN, "save", "iter_0000002", "mp_rank_00", "model_optim_rng.pt"))
    out = os.path.join(tmp, "ours")
    r = run(args(tmp, 4, ("--save", out, "--save-interval", "2", "--exit-interval", "2", "--eval-interval", "100",
                          "--eval-iters", "0", "--use-cpu-initialization"),
                 hidden=8, heads=2, seq=16, mbs=2, gbs=4, lr="1e-2", warm="1", dropout="0", decay=()))
    check(r.returncode == 0, f"save run: {r.stderr[-400:]}")
    ours = ckpt(out, 2)
    check(list(ours) == list(gold), f"top-level keys {list(ours)}")
    bad = mcs.rng_state_diffs(ours["rng_state"], gold["rng_state"])
    check(not bad, f"rng_state differs from Megatron's (seed 1234): {bad}")
    check(ours["checkpoint_version"] == 3.0 and ours["iteration"] == 2, "version 3.0, iteration 2")
    check(list(ours["model"]) == list(gold["model"]), "model keys in Megatron's order (with _extra_state)")
    check(type(ours["model"]) is type(gold["model"]), "model is an OrderedDict")
    for k, v in gold["model"].items():
        w = ours["model"].get(k)
        check((v is None and w is None) or (w is not None and w.shape == v.shape and w.dtype == v.dtype),
              f"model {k}")
    go, oo = gold["optimizer"], ours["optimizer"]
    check(list(oo) == list(go) == ["state", "param_groups"], "optimizer keys")
    check(list(oo["state"]) == list(go["state"]), "optimizer state indices")
    for i in go["state"]:
        for k, v in go["state"][i].items():
            w = oo["state"][i].get(k)
            check(w is not None and w.shape == v.shape and w.dtype == v.dtype, f"optimizer state {i}.{k}")
    check(oo["state"][0]["step"].item() == 2.0, "Adam step 2")
    check([g["params"] for g in oo["param_groups"]] == [g["params"] for g in go["param_groups"]], "group params")
    for g, h in zip(oo["param_groups"], go["param_groups"]):
        check(list(g) == list(h), f"param group keys {list(g)}")
        check({k: v for k, v in g.items()} == {k: v for k, v in h.items()}, f"param group values {g} vs {h}")
    check(ours["opt_param_scheduler"] == gold["opt_param_scheduler"], f"scheduler {ours['opt_param_scheduler']} vs {gold['opt_param_scheduler']}")
    check(str(ours["rerun_state_machine"]) == str(gold["rerun_state_machine"]), "rerun state")
    check(ours["num_floating_point_operations_so_far"] == gold["num_floating_point_operations_so_far"],
          f"FLOPs {ours['num_floating_point_operations_so_far']} vs {gold['num_floating_point_operations_so_far']}")
    va, vg = vars(ours["args"]), vars(gold["args"])
    check(sorted(va) == sorted(vg), f"args attributes: missing {[k for k in vg if k not in va]}, "
                                    f"extra {[k for k in va if k not in vg]}")
    skip = {"save", "load", "data_cache_path", "rank", "local_rank", "world_size", "distributed_backend",
            "transformer_impl", "gradient_accumulation_fusion", "persist_layer_norm", "use_cpu_initialization",
            "no_persist_layer_norm", "exit_interval"}
    bad = [(k, va[k], vg[k]) for k in vg if k in va and k not in skip and (type(va[k]) is not type(vg[k]) or va[k] != vg[k])]
    check(not bad, f"args values differ from Megatron's: {bad[:8]}")


def megatron_losses():
    lines = open(os.path.join(GOLDEN, "megatron_log.txt")).read().splitlines()
    return {int(m.group(1)): m.group(3) for m in map(TRAIN.match, lines) if m}


def test_megatron_checkpoint_continues(tmp):
    """Megatron's iteration-2 checkpoint loads; iterations 3-4 match Megatron's own log; and with
    no iteration left to run our final save writes Megatron's tensors back unchanged."""
    load = os.path.join(tmp, "golden_copy")
    shutil.copytree(os.path.join(GOLDEN, "save"), load)
    common = dict(hidden=8, heads=2, seq=16, mbs=2, gbs=4, lr="1e-2", warm="1", dropout="0", decay=())
    base = ("--eval-interval", "100", "--eval-iters", "0", "--use-cpu-initialization")
    r = run(args(tmp, 4, base + ("--load", load), **common))
    check(r.returncode == 0, f"loading Megatron's checkpoint: {r.stderr[-400:]}")
    ours, ref = train_lines(r.stdout), megatron_losses()
    check(sorted(ours) == [3, 4], f"resumed at iteration 3: {sorted(ours)}")
    want = [l.replace("/tmp/ckref/ours2", load) for l in
            open(os.path.join(GOLDEN, "megatron_load_log.txt")).read().splitlines()]
    out = r.stdout.splitlines()
    got = out[out.index(want[0]):out.index(want[0]) + len(want)] if want[0] in out else []
    check(got == want, "loading lines as Megatron prints them:\n" + "\n".join(got))
    num = re.compile(r"(learning rate|lm loss|grad norm): ([\d.E+-]+)")
    for it in (3, 4):
        got = dict(num.findall(ours.get(it, ("", ""))[1]))
        want = dict(num.findall(ref.get(it, "")))
        check(got.get("learning rate") == want.get("learning rate"), f"iteration {it} lr {got} vs {want}")
        for k, tol in (("lm loss", 2e-6), ("grad norm", 2e-3)):
            g, w = float(got.get(k, "nan")), float(want.get(k, "nan"))
            check(abs(g - w) <= tol * max(1.0, abs(w)), f"iteration {it} {k}: {g} vs Megatron {w}")
    out = os.path.join(tmp, "rewritten")
    r = run(args(tmp, 2, base + ("--load", load, "--save", out, "--save-interval", "1000",
                                 "--use-checkpoint-opt_param-scheduler"), **common))
    check(r.returncode == 0 and os.path.exists(os.path.join(out, "iter_0000002")),
          f"final save after loading: {r.stderr[-300:]}")
    if r.returncode == 0:
        gold, back = ckpt(load, 2), ckpt(out, 2)
        same_tensors(gold["model"], back["model"], "model round trip")
        same_tensors(gold["optimizer"]["state"], back["optimizer"]["state"], "optimizer round trip")
        check(gold["opt_param_scheduler"] == back["opt_param_scheduler"], "scheduler round trip")


def test_broken(tmp):
    d = os.path.join(tmp, "broken")
    r = run(args(tmp, 6, ("--save", d, "--save-interval", "100", "--exit-interval", "1")))
    check(r.returncode == 0, "save for the broken-input tests")
    base = args(tmp, 6, ("--load", d, "--exit-interval", "2"))
    tracker = os.path.join(d, "latest_checkpointed_iteration.txt")
    with open(tracker, "w") as f:
        f.write("7")
    r = run(base)
    check(r.returncode != 0 and "iter_0000007" in r.stderr and tracker in r.stderr,
          f"tracker pointing at a missing iteration: {r.stderr.strip()[-300:]}")
    with open(tracker, "w") as f:
        f.write("seven")
    r = run(base)
    check(r.returncode != 0 and "Invalid metadata file" in r.stderr, f"bad tracker: {r.stderr.strip()[-200:]}")
    with open(tracker, "w") as f:
        f.write("1")
    pt = os.path.join(d, "iter_0000001", "mp_rank_00", "model_optim_rng.pt")
    raw = open(pt, "rb").read()
    open(pt, "wb").write(raw[: len(raw) * 2 // 3])
    r = run(base)
    check(r.returncode != 0 and pt in r.stderr and "truncated" in r.stderr, f"truncated: {r.stderr.strip()[-300:]}")
    open(pt, "wb").write(raw)
    r = run(args(tmp, 6, ("--load", d, "--exit-interval", "2"), hidden=64))
    check(r.returncode != 0 and "hidden_size value from checkpoint (32) is not equal to the input argument value (64)"
          in r.stderr, f"different model: {r.stderr.strip()[-300:]}")
    # Megatron's default --ckpt-format torch_dist detects a torch checkpoint and loads it
    # (torch_dist checkpoints themselves: test_dist_ckpt.py)
    r = run([a for a in base if a not in ("--ckpt-format", "torch")])
    check(r.returncode == 0 and f" loading checkpoint from {d} at iteration" in r.stdout,
          f"a torch checkpoint loaded with the default --ckpt-format torch_dist: {r.stderr.strip()[-200:]}")
    os.makedirs(os.path.join(d, "iter_0000009", "mp_rank_00_000"))
    with open(tracker, "w") as f:
        f.write("9")
    r = run(base)
    check(r.returncode != 0 and "iter_0000009/mp_rank_00/model_optim_rng.pt" in r.stderr,
          f"an empty pp>1 directory: the missing file named: {r.stderr.strip()[-300:]}")
    # a release checkpoint: iteration 0, weights only (Megatron still restores the counters)
    shutil.copytree(os.path.join(d, "iter_0000001"), os.path.join(d, "release"))
    with open(tracker, "w") as f:
        f.write("release")
    r = run(base)
    lines = train_lines(r.stdout)
    check(r.returncode == 0 and f" loading release checkpoint from {d}" in r.stdout
          and sorted(lines) == [1, 2] and lines[1][0] == "16", f"release checkpoint: {r.stderr[-300:]}")
    os.remove(tracker)
    r = run(args(tmp, 6, ("--load", d, "--ckpt-step", "1", "--exit-interval", "2")))
    check(r.returncode == 0 and sorted(train_lines(r.stdout)) == [2], "--ckpt-step without a tracker file")
    r = run(args(tmp, 6, ("--load", os.path.join(tmp, "nothing"), "--exit-interval", "1")))
    check(r.returncode == 0 and "WARNING: could not find the metadata file" in r.stdout
          and "will not load any checkpoints and will start from random" in r.stdout, "missing --load dir warns")


def test_sigterm_saves(tmp):
    d = os.path.join(tmp, "sigterm")
    cmd = args(tmp, 100000, ("--save", d, "--save-interval", "100000", "--exit-signal-handler"),
               decay=("--lr-decay-iters", "100000"))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    seen = []
    for line in p.stdout:
        seen.append(line)
        if TRAIN.match(line.rstrip("\n")):
            break
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    out = "".join(seen) + out
    it = max(train_lines(out) or [0])
    check(p.returncode == 0 and f"  successfully saved checkpoint from iteration {it:7d}" in out
          and out.index("successfully saved") < out.index("exiting program after receiving SIGTERM."),
          "SIGTERM saves before exiting")
    check(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read() == str(it), "tracker after SIGTERM")


def test_megatron_loads_ours(tmp):
    """Optional (MC_MEGATRON_ROOT: a Megatron-LM core_v0.12.1 checkout with its dataset helpers
    built, and /work/shared/megatron-cpu): Megatron resumes from our iteration-2 checkpoint
    with its default flags (it restores our rng_state: without one it exits before training,
    "Unable to load rng state") and prints our losses for iterations 3 and 4."""
    root, cpu = os.environ.get("MC_MEGATRON_ROOT"), "/work/shared/megatron-cpu/run_pretrain.py"
    if not root or not os.path.exists(cpu):
        print("test_megatron_loads_ours: skipped (set MC_MEGATRON_ROOT)")
        return
    common = dict(hidden=8, heads=2, seq=16, mbs=2, gbs=4, lr="1e-2", warm="1", dropout="0", decay=())
    base = ("--eval-interval", "100", "--eval-iters", "0", "--use-cpu-initialization")
    d = os.path.join(tmp, "for_megatron")
    r = run(args(tmp, 4, base + ("--save", d, "--save-interval", "2"), **common))
    ours = train_lines(r.stdout)
    meg_args = args(tmp, 4, base + ("--load", d, "--ckpt-step", "2",
                                    "--distributed-backend", "gloo", "--transformer-impl", "local",
                                    "--no-gradient-accumulation-fusion", "--no-persist-layer-norm"),
                    **common)[1:]
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT="29561", MEGATRON_ROOT=root, OMP_NUM_THREADS="1")
    m = subprocess.run(["/usr/bin/python3", cpu, os.path.join(tmp, "rec.json"), *meg_args],
                       capture_output=True, text=True, env=env, timeout=600)
    theirs = train_lines(m.stdout)
    print("megatron from ours:", {k: v[1][:60] for k, v in theirs.items()})
    check(m.returncode == 0 and sorted(theirs) == [3, 4] and "Unable to load rng state" not in m.stdout,
          f"Megatron resumes from ours: {m.stdout[-500:]}")
    num = re.compile(r"lm loss: ([\d.E+-]+)")
    for it in (3, 4):
        a = float(num.search(ours[it][1]).group(1)) if it in ours else float("nan")
        b = float(num.search(theirs[it][1]).group(1)) if it in theirs else float("nan")
        check(abs(a - b) <= 2e-6 * abs(b), f"iteration {it}: ours {a} vs Megatron from our checkpoint {b}")


def test_megatron_tp2_checkpoint(tmp):
    """Optional (MC_MEGATRON_ROOT, mpirun): Megatron with --tensor-model-parallel-size 2 saves at
    iteration 2; megatron.c with tp 2 loads mp_rank_00/01 and prints Megatron's losses for 3, 4."""
    root, cpu = os.environ.get("MC_MEGATRON_ROOT"), "/work/shared/megatron-cpu/run_pretrain.py"
    if not root or not os.path.exists(cpu) or not shutil.which("mpirun"):
        print("test_megatron_tp2_checkpoint: skipped (set MC_MEGATRON_ROOT)")
        return
    common = dict(hidden=16, heads=4, seq=16, mbs=2, gbs=4, lr="1e-2", warm="1", dropout="0", decay=())
    base = ("--eval-interval", "100", "--eval-iters", "0", "--use-cpu-initialization",
            "--tensor-model-parallel-size", "2", "--make-vocab-size-divisible-by", "64")
    d = os.path.join(tmp, "megatron_tp2")
    meg = args(tmp, 4, base + ("--save", d, "--save-interval", "2", "--distributed-backend", "gloo",
                               "--transformer-impl", "local", "--no-gradient-accumulation-fusion",
                               "--no-persist-layer-norm"), **common)[1:]
    procs = []
    for r in (0, 1):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT="29563", MEGATRON_ROOT=root, OMP_NUM_THREADS="1",
                   CUDA_DEVICE_MAX_CONNECTIONS="1")
        procs.append(subprocess.Popen(["/usr/bin/python3", cpu, os.path.join(tmp, f"rec{r}.json"), *meg],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    theirs = train_lines(outs[0] + outs[1])
    with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("2")
    mpi = mpirun_cmd(2, [], ("OMP_NUM_THREADS=1",))
    r = run(mpi + args(tmp, 4, base + ("--load", d), **common))
    ours = train_lines(r.stdout)
    check(sorted(ours) == [3, 4] and all(procs[k].returncode == 0 for k in (0, 1)),
          f"tp2: Megatron saved, megatron.c resumed: {r.stderr[-300:]}")
    num = re.compile(r"lm loss: ([\d.E+-]+)")
    for it in (3, 4):
        a = float(num.search(ours[it][1]).group(1)) if it in ours else float("nan")
        b = float(num.search(theirs[it][1]).group(1)) if it in theirs else float("nan")
        check(abs(a - b) <= 2e-6 * abs(b), f"tp2 iteration {it}: ours {a} vs Megatron {b}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_resume_bit_exact(tmp)
        test_resume_sgd(tmp)
        test_resume_parallel(tmp)
        test_broken(tmp)
        test_sigterm_saves(tmp)
        test_megatron_loads_ours(tmp)
        test_megatron_tp2_checkpoint(tmp)
        if os.path.exists(GOLDEN):
            test_structure_vs_megatron(tmp)
            test_megatron_checkpoint_continues(tmp)
        else:
            check(False, f"golden checkpoint missing: {GOLDEN}")
    return summary("test_checkpoint")


if __name__ == "__main__":
    sys.exit(main())
