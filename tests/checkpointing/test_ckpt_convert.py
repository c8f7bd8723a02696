"""--ckpt-convert-format / --ckpt-convert-save (issue 13), as Megatron-LM core_v0.12.1 does them
(megatron/training/initialize.py: the asserts, exit_on_missing_checkpoint forced on;
megatron/training/training.py setup_model_and_optimizer: the loaded state saved at the loaded
iteration into CKPT_CONVERT_SAVE/FORMAT, "> converted checkpoint: OLD -> NEW.", exit):
- torch -> torch_dist, one process: the converted checkpoint resumes to the same losses, bit for
  bit, as resuming the original; its .distcp/.metadata/metadata.json are byte-identical to a
  direct torch_dist save of the same state, and its common.pt equals that save's but for the
  args the conversion changes; nothing is trained;
- torch_dist -> torch under mpirun, two data-parallel ranks with the distributed optimizer:
  the same resumed losses, distrib_optim.pt byte-identical to a direct torch save;
- --auto-detect-ckpt-format with --ckpt-format torch reads the torch_dist directory;
- the refusals: no --ckpt-convert-save or no --load (Megatron's bare AssertionError), zarr;
- with Megatron itself at hand (MC_MEGATRON_ROOT, MC_TORCH2_PYTHON): Megatron converts the same
  torch checkpoint of ours to torch_dist; its log line, files, tracker and common.pt (every saved
  arg, the scheduler, the iteration) are ours but for the paths and its CPU-only flags."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import megatron_cases as mcs  # noqa: E402
from mc_test import check, file_hashes, parse_exact, run_pretrain, summary  # noqa: E402

MEGATRON = os.environ.get("MC_MEGATRON_ROOT", "/work/ref/Megatron-LM")
LINE = "> converted checkpoint: {} -> {}."
# what the conversion changes in the saved args (and what Megatron's Namespace lacks then:
# do_train etc. come with the data iterators, curr_iteration with train())
CHANGED = {"save", "load", "ckpt_format", "use_dist_ckpt", "ckpt_convert_format",
           "ckpt_convert_save", "exit_on_missing_checkpoint", "save_interval", "exit_interval", "do_train",
           "do_valid", "do_test", "curr_iteration", "iteration", "num_floating_point_operations_so_far",
           "num_query_groups"}  # set to the heads by the FLOPs count of the training loop


def base(tmp, iters, fmt, extra=()):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "2",
            "--seq-length", "16", "--max-position-embeddings", "16", "--micro-batch-size", "2",
            "--global-batch-size", "4", "--train-iters", str(iters), "--lr", "1e-3",
            "--lr-decay-iters", "8", "--log-interval", "1", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--ckpt-format", fmt,
            "--transformer-impl", "local", "--eval-iters", "0", *extra]




def load_pt(path):
    import torch
    import torch_stubs
    torch_stubs.install()
    sd = torch.load(path, weights_only=False)
    return vars(sd.pop("args")), sd


def args_differ(a, b):
    return {k for k in set(a) | set(b) if a.get(k, "<absent>") != b.get(k, "<absent>")}


def run_ok(name, args, np=1):
    r = run_pretrain(args, np=np)
    check(r.returncode == 0, f"{name}: exit 0: {r.stderr[-500:]}")
    return r


def convert(name, tmp, load, fmt_from, fmt_to, dest, np=1, extra=()):
    r = run_ok(name, base(tmp, 6, fmt_from, ["--load", load, "--ckpt-convert-format", fmt_to,
                                            "--ckpt-convert-save", dest, *extra]), np)
    line = LINE.format(fmt_from, fmt_to)
    check(r.stdout.splitlines().count(line) == 1, f"{name}: '{line}' once (rank 0)")
    check(not parse_exact(r.stdout) and "training ..." not in r.stdout.splitlines(), f"{name}: nothing trained")
    saved = os.path.join(dest, fmt_to)
    check(open(os.path.join(saved, "latest_checkpointed_iteration.txt")).read() == "3",
          f"{name}: saved at the loaded iteration 3 into {saved}")
    return saved


def resume(name, tmp, load, fmt, np=1, extra=()):
    r = run_ok(name, base(tmp, 6, fmt, ["--load", load, *extra]), np)
    losses = parse_exact(r.stdout)
    check(len(losses) == 3, f"{name}: iterations 4-6 trained")
    return losses


# Megatron's line, from its source
src = os.path.join(MEGATRON, "megatron", "training", "training.py")
if os.path.exists(src):
    check('print_rank_0("> converted checkpoint: %s -> %s." % (load_ckpt_format, args.ckpt_format))'
          in open(src).read(), "Megatron's source prints the converted-checkpoint line")

with tempfile.TemporaryDirectory() as tmp:
    p = lambda *x: os.path.join(tmp, *x)  # noqa: E731
    # ---- torch -> torch_dist, one process ----
    run_ok("train, torch save", base(tmp, 6, "torch", ["--save", p("t"), "--save-interval", "3",
                                                        "--exit-interval", "3"]))
    # the direct save where the conversion will write (.metadata names its directory), moved away
    run_ok("train, torch_dist save", base(tmp, 6, "torch_dist", ["--save", p("c", "torch_dist"),
                                                                 "--save-interval", "3", "--exit-interval", "3"]))
    os.rename(p("c", "torch_dist"), p("d"))
    conv = convert("torch -> torch_dist", tmp, p("t"), "torch", "torch_dist", p("c"))
    ref = resume("resume torch", tmp, p("t"), "torch")
    check(resume("resume converted", tmp, conv, "torch_dist") == ref,
          "torch -> torch_dist: the same losses as resuming the original, bit for bit")
    check(resume("resume converted, auto-detect", tmp, conv, "torch",
                 extra=["--auto-detect-ckpt-format"]) == ref,
          "--ckpt-format torch --auto-detect-ckpt-format reads the torch_dist directory")
    direct, converted = file_hashes(p("d", "iter_0000003")), file_hashes(os.path.join(conv, "iter_0000003"))
    check(sorted(direct) == sorted(converted), f"the files of a torch_dist save: {sorted(converted)}")
    diff = [k for k in direct if k != "common.pt" and direct[k] != converted.get(k)]
    check(not diff and any(k.endswith(".distcp") for k in direct),
          f".distcp, .metadata, metadata.json byte-identical to a direct save to the same place: {diff}")
    (da, dsd), (ca, csd) = (load_pt(p("d", "iter_0000003", "common.pt")),
                            load_pt(os.path.join(conv, "iter_0000003", "common.pt")))
    check(repr(dsd) == repr(csd), "common.pt equal to a direct save's but for the args")
    changed = args_differ(da, ca)
    check(changed <= CHANGED, f"args differ only where the conversion changes them: {changed - CHANGED}")
    check(ca["ckpt_format"] == "torch_dist" and ca["save"] == conv and da["save"] == conv and ca["exit_on_missing_checkpoint"]
          and "do_train" not in ca and ca["iteration"] == 3 and ca["num_query_groups"] == 1,
          "the saved args: the new format and directory, exit_on_missing_checkpoint, no do_train")

    # --no-save-optim: the converted checkpoint without the optimizer and the scheduler
    convert("--no-save-optim", tmp, p("t"), "torch", "torch", p("n"), extra=["--no-save-optim"])
    _, nsd = load_pt(p("n", "torch", "iter_0000003", "mp_rank_00", "model_optim_rng.pt"))
    check("model" in nsd and "optimizer" not in nsd and "opt_param_scheduler" not in nsd,
          f"--no-save-optim: no optimizer, no scheduler: {sorted(nsd)}")

    # ---- torch_dist -> torch, two data-parallel ranks, distributed optimizer ----
    dopt = ["--use-distributed-optimizer"]
    save3 = ["--save-interval", "3", "--exit-interval", "3", *dopt]
    run_ok("dp2 train, torch_dist save", base(tmp, 6, "torch_dist", ["--save", p("d2"), *save3]), 2)
    run_ok("dp2 train, torch save", base(tmp, 6, "torch", ["--save", p("t2"), *save3]), 2)
    conv2 = convert("dp2 torch_dist -> torch", tmp, p("d2"), "torch_dist", "torch", p("c2"), 2, dopt)
    ref2 = resume("dp2 resume torch_dist", tmp, p("d2"), "torch_dist", 2, dopt)
    check(resume("dp2 resume converted", tmp, conv2, "torch", 2, dopt) == ref2,
          "torch_dist -> torch, dp2 + distributed optimizer: the same losses, bit for bit")
    it = os.path.join("iter_0000003", "mp_rank_00")
    direct, converted = file_hashes(p("t2", it)), file_hashes(os.path.join(conv2, it))
    check(sorted(direct) == sorted(converted) == ["distrib_optim.pt", "model_optim_rng.pt"],
          f"the files of a torch save: {sorted(converted)}")
    check(direct["distrib_optim.pt"] == converted["distrib_optim.pt"],
          "distrib_optim.pt byte-identical to a direct torch save")
    (da, dsd), (ca, csd) = (load_pt(p("t2", it, "model_optim_rng.pt")),
                            load_pt(os.path.join(conv2, it, "model_optim_rng.pt")))
    check(repr(dsd) == repr(csd), "model_optim_rng.pt equal to a direct save's but for the args")

    # ---- refusals ----
    for name, extra in (("no --ckpt-convert-save", ["--load", p("t"), "--ckpt-convert-format", "torch"]),
                        ("no --load", ["--ckpt-convert-format", "torch", "--ckpt-convert-save", p("x")])):
        r = run_pretrain(base(tmp, 6, "torch", extra))
        check(r.returncode == 1 and r.stderr.strip().splitlines()[-1:] == ["AssertionError"],
              f"{name}: Megatron's bare AssertionError: {r.stderr[-300:]}")
    r = run_pretrain(base(tmp, 6, "torch", ["--load", p("t"), "--ckpt-convert-format", "zarr",
                                            "--ckpt-convert-save", p("z")]))
    check(r.returncode == 1 and "--ckpt-convert-format zarr is not supported by megatron.c yet"
          in r.stderr and not os.path.exists(p("z")), f"zarr refused by name: {r.stderr[-300:]}")
    r = run_pretrain(base(tmp, 6, "torch", ["--load", p("missing"), "--ckpt-convert-format",
                                            "torch_dist", "--ckpt-convert-save", p("m")]))
    check(r.returncode != 0 and not os.path.exists(p("m")),
          f"a missing checkpoint stops the conversion (exit_on_missing_checkpoint): {r.stderr[-300:]}")


def against_megatron(tmp):
    """Megatron's conversion of our torch checkpoint beside ours (the gpt_tp1 case)."""
    py = mcs.megatron_python(torch2=True)
    if not (mcs.megatron_root() and py):
        print("Megatron (MC_MEGATRON_ROOT, MC_TORCH2_PYTHON) not at hand: its line checked in its source only")
        return
    local = ("--transformer-impl", "local")
    ck = os.path.join(tmp, "mt")
    r = mcs.run_ours("gpt_tp1", tmp, ("--save", ck, "--save-interval", "3") + local, iters=3)
    check(r.returncode == 0, f"gpt_tp1 torch save: {r.stderr[-300:]}")
    conv = ("--load", ck, "--ckpt-convert-format", "torch_dist", "--ckpt-convert-save")
    r = mcs.run_ours("gpt_tp1", tmp, conv + (os.path.join(tmp, "oc"),) + local, iters=3)
    check(r.returncode == 0, f"gpt_tp1 conversion: {r.stderr[-300:]}")
    rcs, out = mcs.run_megatron("gpt_tp1", tmp, conv + (os.path.join(tmp, "mc"),), iters=3,
                                python=py, port=29790)
    check(not any(rcs), f"Megatron's conversion {rcs}: {out[-500:]}")
    line = LINE.format("torch", "torch_dist")
    check(line in out.splitlines() and line in r.stdout.splitlines(), f"'{line}' from both")
    # the lines from the load to the end, the timer's value and the directory aside
    def tail(text, d):
        ls = text.splitlines()
        k = [i for i, x in enumerate(ls) if x.startswith(" loading checkpoint from")]
        ls = ls[k[0]:] if k else []
        return [re.sub(r": \(\d+\.\d\d, \d+\.\d\d\)$", ": (T, T)", x.replace(d, "DIR"))
                for x in ls[:ls.index(line) + 1 if line in ls else len(ls)]]
    mine, theirs = tail(r.stdout, os.path.join(tmp, "oc")), tail(out, os.path.join(tmp, "mc"))
    check(mine == theirs and len(mine) > 5, f"Megatron's lines from the load on: {mine} vs {theirs}")
    it = os.path.join("torch_dist", "iter_0000003")
    m, o = os.path.join(tmp, "mc", it), os.path.join(tmp, "oc", it)
    check(sorted(os.listdir(m)) == sorted(os.listdir(o)), f"the same files as Megatron's: {sorted(os.listdir(o))}")
    check(open(os.path.join(tmp, "mc", "torch_dist", "latest_checkpointed_iteration.txt")).read() ==
          open(os.path.join(tmp, "oc", "torch_dist", "latest_checkpointed_iteration.txt")).read() == "3",
          "the tracker: iteration 3")
    (ma, msd), (oa, osd) = load_pt(os.path.join(m, "common.pt")), load_pt(os.path.join(o, "common.pt"))
    # the paths, and what Megatron needs on a CPU (megatron_cases.MEGATRON_ONLY)
    skip = {"save", "ckpt_convert_save", "load", "data_cache_path", "distributed_backend",
            "no_persist_layer_norm", "gradient_accumulation_fusion", "apply_rope_fusion"}
    diff = {k: (ma.get(k, "<absent>"), oa.get(k, "<absent>")) for k in set(ma) | set(oa)
            if k not in skip and repr(ma.get(k, "<absent>")) != repr(oa.get(k, "<absent>"))}
    check(not diff, f"the saved args are Megatron's: {diff}")
    for k in ("iteration", "opt_param_scheduler", "num_floating_point_operations_so_far"):
        check(repr(msd.get(k)) == repr(osd.get(k)), f"common.pt {k}: {osd.get(k)} as Megatron's {msd.get(k)}")


with tempfile.TemporaryDirectory() as tmp:
    against_megatron(tmp)

summary("test_ckpt_convert")
