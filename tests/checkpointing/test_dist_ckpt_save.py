"""megatron.c writes torch_dist checkpoints (Megatron-LM core_v0.12.1's default --ckpt-format), for
the cases of megatron_cases.DIST_CASES (GPT-2 style tp1 and tp2 x pp2, Llama style tp2), fp32 with
the ordinary optimizer:
- the layout is Megatron's: every key, global shape and chunk of Megatron's own torch_dist save of
  the same case (tests/golden/checkpointing/dist_<case>/), each chunk in the same .distcp file at
  the same place in the file's order, the rng_state and rerun_state_machine_state objects
  included (and common.pt's keys in Megatron's order, its rerun_state_machine {'mode': DISABLED}
  as Megatron's);
- Megatron loads ours with its default flags (restoring our rng_state) and continues: iterations
  4-6 within 1e-5 relative of ours (Megatron run live with MC_MEGATRON_ROOT and PyPI torch 2.x,
  MC_TORCH2_PYTHON; else its logged continuation from our checkpoint,
  dist_<case>/megatron_loads_ours_log.txt, and the pipeline case with the megatron-cpu shim's fix
  for Megatron's swapped parameter groups);
- PyTorch's own torch.distributed.checkpoint (torch 2.x, without Megatron) reads our .metadata and
  every tensor, and they equal the tensors of our torch-format save of the same run exactly;
- ours resumes at its own layout and at others (tp1 -> tp2 x pp2, tp2 x pp2 -> tp1, Llama tp2 ->
  tp1, pp2 x vpp2 -> tp1, dp2 -> tp1) with the same next losses;
- the save is byte-stable: the resumed run's iteration-6 .metadata and .distcp files equal those of
  the uninterrupted run (Megatron's are not: a random save_id and torch 2's random
  serialization_id in every archive);
- a failed save leaves no iteration directory and no temporary one behind."""
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

DIST = ("--ckpt-format", "torch_dist")
PORTS = {"gpt_tp1": 29841, "gpt_tp2pp2": 29843, "llama_tp2": 29845}
mcs.ALL_CASES.setdefault("llama_tp1", (1, mcs.LLAMA, mcs.DIST_CASES["llama_tp2"][2]))
mcs.ALL_CASES.setdefault("gpt_dp2", (2, mcs.GPT2, ("--data-path", mcs.CORPUS_A)))


def losses(lines):
    return {it: mcs.numbers(rest).get("lm loss", float("nan")) for it, (_, rest) in lines.items()}


def close(a, b, tol):
    return abs(a - b) <= tol * abs(b)


def train_and_save(case, tmp):
    """Our 6 iterations saving torch_dist at 3 and 6; (save directory, our training lines)."""
    save = os.path.join(tmp, f"ours_{case}")
    r = mcs.run_ours(case, tmp, DIST + ("--save", save, "--save-interval", str(mcs.SAVE_AT)))
    ours = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(ours) == [1, 2, 3, 4, 5, 6], f"{case}: our run: {r.stderr[-600:]}")
    check("saving checkpoint at iteration       3 to %s in torch_dist format" % save in r.stdout and
          "  successfully saved checkpoint from iteration       3 to %s [ t 1/" % save in r.stdout,
          f"{case}: Megatron's torch_dist save lines")
    it = os.path.join(save, "iter_0000003")
    check(sorted(os.listdir(save)) == ["iter_0000003", "iter_0000006", "latest_checkpointed_iteration.txt"],
          f"{case}: the save directory holds {os.listdir(save)}")
    check(open(os.path.join(it, "metadata.json")).read() ==
          open(os.path.join(mcs.GOLDEN, f"dist_{case}", "save", "iter_0000003", "metadata.json")).read(),
          f"{case}: metadata.json as Megatron's")
    return save, ours


TORCH2_LAYOUT = r'''
import pickle, sys, types
from torch.distributed.checkpoint.planner import SavePlan
# Megatron's .metadata pickles its MCoreSavePlan objects (all_local_plans): a stand-in class
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", "megatron.core.dist_checkpointing.strategies.torch"):
    sys.modules[n] = types.ModuleType(n)
sys.modules["megatron.core.dist_checkpointing.strategies.torch"].MCoreSavePlan = type("MCoreSavePlan", (), {})
RNG = "rng_state/"
def load(d, drop=()):
    m = pickle.load(open(d + "/.metadata", "rb"))
    md = {k: (type(v).__name__, tuple(getattr(v, "size", ()) or ()),
              sorted((tuple(c.offsets), tuple(c.sizes)) for c in getattr(v, "chunks", [])))
          for k, v in m.state_dict_metadata.items() if not k.startswith(drop)}
    files, rng = {}, {}
    for k, v in sorted(m.storage_data.items(), key=lambda kv: (kv[1].relative_path, kv[1].offset)):
        if k.fqn.startswith(RNG):
            rng[k.fqn] = v.relative_path.split("_")[2]
        if not k.fqn.startswith(drop):
            files.setdefault(v.relative_path, []).append((k.fqn, tuple(k.offset) if k.offset is not None else None))
    return md, files, rng
ours, theirs = load(sys.argv[1]), load(sys.argv[2])
import torch
sys.path.insert(0, sys.argv[3])
import torch_stubs  # the Megatron classes common.pt names
torch_stubs.install()
commons = [torch.load(d + "/common.pt", weights_only=False) for d in sys.argv[1:3]]
rerun = [c.get("rerun_state_machine") for c in commons]
print("rerun", str(rerun[0]) == str(rerun[1]) and rerun[0] is not None, rerun[0])
print("common.pt keys", list(commons[0]) == list(commons[1]), list(commons[0]))
bad = [k for k in set(ours[0]) | set(theirs[0]) if ours[0].get(k) != theirs[0].get(k)]
print("keys", len(ours[0]), "differ", sorted(bad)[:5])
print("files", sorted(ours[1]) == sorted(theirs[1]) and all(ours[1][f] == theirs[1][f] for f in ours[1]))
print("rng_state", len(ours[2]), "objects, by the same ranks", ours[2] == theirs[2] and len(ours[2]) > 0)
'''


def check_layout(case, save, tmp):
    """Every key, shape and chunk, and each chunk's file and place, as Megatron's own save."""
    py = mcs.megatron_python(torch2=True)
    if not py:
        print(f"{case}: layout vs Megatron's save skipped (no torch 2 python: MC_TORCH2_PYTHON or "
              "bench/setup_torch.sh)")
        return
    gold = os.path.join(mcs.GOLDEN, f"dist_{case}", "save", "iter_0000003")
    r = subprocess.run([py, "-c", TORCH2_LAYOUT, os.path.join(save, "iter_0000003"), gold,
                        os.path.dirname(os.path.abspath(__file__))],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and "differ []" in r.stdout and "files True" in r.stdout and
          "by the same ranks True" in r.stdout and "rerun True" in r.stdout and
          "common.pt keys True" in r.stdout,
          f"{case}: layout as Megatron's: {r.stdout} {r.stderr[-500:]}")
    print(f"{case}: layout as Megatron's:", r.stdout.split("\n")[0])


def megatron_continues(case, save, ours, tmp):
    """Megatron loads our iteration-3 checkpoint and continues as we do."""
    py = mcs.megatron_python(torch2=True)
    gold = os.path.join(mcs.GOLDEN, f"dist_{case}", "megatron_loads_ours_log.txt")
    if mcs.megatron_root() and py:
        rcs, out = mcs.run_megatron(case, tmp, DIST + ("--load", save, "--ckpt-step", "3"),
                                    port=PORTS[case], python=py,
                                    variant="fixload" if "pp" in case else None)
        check(not any(rcs) and "Unable to load rng state" not in out, f"{case}: Megatron loading ours: {rcs} {out[-800:]}")
        how = "live"
    else:
        out, how = open(gold).read(), "its logged run"
    theirs = mcs.train_lines(out)
    check(sorted(theirs) == [4, 5, 6], f"{case}: Megatron resumed at 4: {sorted(theirs)}")
    lo, lt = losses(ours), losses(theirs)
    for it in sorted(theirs):
        check(theirs[it][0] == ours[it][0], f"{case} {it}: consumed samples {theirs[it][0]} vs {ours[it][0]}")
        check(mcs.numbers(theirs[it][1]).get("learning rate") == mcs.numbers(ours[it][1]).get("learning rate"),
              f"{case} {it}: learning rate")
        check(close(lt[it], lo[it], 1e-5), f"{case} {it}: Megatron's lm loss {lt[it]} vs ours {lo[it]}")
    print(f"{case}: Megatron ({how}) continues from our torch_dist save, iterations 4-6 (Megatron, ours):",
          [(lt[i], lo[i]) for i in sorted(theirs)])


TORCH2_READ = r'''
import sys, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
d, case = sys.argv[1], sys.argv[2]
md = FileSystemReader(d).read_metadata()
sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
      if type(v).__name__ == "TensorStorageMetadata"}
dcp.load(sd, storage_reader=FileSystemReader(d), no_dist=True)
torch.save(sd, sys.argv[3])
print("read", len(sd), "tensors")
'''


def dcp_reads(case, save, tmp):
    """torch.distributed.checkpoint reads every tensor; each equals our torch-format save's."""
    py = mcs.megatron_python(torch2=True)
    if not py:
        print(f"{case}: DCP read skipped (no torch 2 python: MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return
    dump = os.path.join(tmp, f"dcp_{case}.pt")
    r = subprocess.run([py, "-W", "ignore", "-c", TORCH2_READ, os.path.join(save, "iter_0000003"), case, dump],
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"{case}: DCP reads our checkpoint: {r.stderr[-800:]}")
    if r.returncode:
        return
    # the same run saved in the torch format: every rank's tensors, put at their global places
    tsave = os.path.join(tmp, f"torch_{case}")
    r2 = mcs.run_ours(case, tmp, ("--save", tsave, "--save-interval", "3"))
    check(r2.returncode == 0, f"{case}: torch-format save: {r2.stderr[-400:]}")
    import torch
    import torch_stubs
    torch_stubs.install()  # the Megatron enums our torch-format args name
    g = torch.load(dump)
    world, model, _ = mcs.ALL_CASES[case]
    tp = int(model[model.index("--tensor-model-parallel-size") + 1]) if "--tensor-model-parallel-size" in model else 1
    pp = int(model[model.index("--pipeline-model-parallel-size") + 1]) if "--pipeline-model-parallel-size" in model else 1
    per = 4 // pp
    rows = {"linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "linear_fc1.bias", "word_embeddings.weight",
            "output_layer.weight"}
    seen, bad = set(), []
    for t in range(tp):
        for p in range(pp):
            f = os.path.join(tsave, "iter_0000003", f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else ""),
                             "model_optim_rng.pt")
            for name, v in torch.load(f)["model"].items():
                if name.endswith("_extra_state"):
                    continue
                key, layer = name, None
                if name.startswith("decoder.layers."):
                    parts = name.split(".")
                    layer = p * per + int(parts[2])
                    key = ".".join(parts[:2] + parts[3:])
                if key == "output_layer.weight" and key not in g:
                    key = "embedding.word_embeddings.weight"  # tied
                full = g[key][layer] if layer is not None else g[key]
                dim = 0 if any(key.endswith(s) for s in rows) else 1 if key.endswith(("linear_proj.weight", "linear_fc2.weight")) else -1
                if dim >= 0 and tp > 1:
                    n = v.shape[dim]
                    if key.endswith("linear_fc1.weight") and "--swiglu" in model:
                        h, gh = n // 2, full.shape[0] // 2
                        part = torch.cat([full[t * h:(t + 1) * h], full[gh + t * h:gh + (t + 1) * h]])
                    else:
                        part = full.narrow(dim, t * n, n)
                else:
                    part = full
                seen.add(key)
                if not torch.equal(part, v):
                    bad.append(name)
    check(not bad and seen == {k for k in g if not k.startswith("optimizer.")},
          f"{case}: DCP's tensors equal our torch-format save's: differing {bad[:4]}, unseen "
          f"{sorted({k for k in g if not k.startswith('optimizer.')} - seen)[:4]}")
    print(f"{case}: torch.distributed.checkpoint read {len(g)} tensors; the model's equal our torch-format "
          f"save's exactly ({len(seen)} keys)")


def resume(case, save, ours, tmp, extra=(), tag="", tol=1e-6, stable=False):
    """Ours loads the iteration-3 checkpoint (at another layout with `case`) and continues."""
    r = mcs.run_ours(case, tmp, ("--load", save, "--ckpt-step", "3", "--save", save, "--save-interval", "3")
                     + DIST + tuple(extra))
    mine = mcs.train_lines(r.stdout)
    check(r.returncode == 0 and sorted(mine) == [4, 5, 6], f"{case}{tag}: resumed: {r.stderr[-600:]}")
    lo, lm = losses(ours), losses(mine)
    for it in sorted(mine):
        check(close(lm[it], lo[it], tol), f"{case}{tag} {it}: lm loss {lm[it]} vs {lo[it]}")
    print(f"{case}{tag}: resumed from our torch_dist save, iterations 4-6 (resumed, uninterrupted):",
          [(lm[i], lo[i]) for i in sorted(mine)])
    return r


def byte_stable(case, save, before, tag):
    """The resumed run's iteration-6 data files and .metadata equal the uninterrupted run's."""
    after = os.path.join(save, "iter_0000006")
    names = sorted(n for n in os.listdir(before) if n != "common.pt")
    same = [n for n in names if filecmp.cmp(os.path.join(before, n), os.path.join(after, n), shallow=False)]
    check(names and same == names, f"{case}{tag}: byte-stable save: {sorted(set(names) - set(same))} differ")
    print(f"{case}{tag}: iteration-6 files of the resumed and the uninterrupted run identical:", same)


def failed_save(tmp):
    """A save that fails while writing its data files (a file-size limit: the write fails with
    EFBIG) is an error naming the file, and leaves no iteration directory, no temporary one and no
    tracker behind."""
    import resource
    import signal
    save = os.path.join(tmp, "limited")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (150000, 150000))  # the .distcp files are larger
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    cmd = [mcs.EXE] + mcs.case_args("gpt_tp1", tmp, DIST + ("--save", save, "--save-interval", "3"), iters=3)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=limit,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    left = sorted(os.listdir(save)) if os.path.isdir(save) else []
    check(r.returncode != 0 and ".distcp" in r.stderr and left == [],
          f"failed save: rc {r.returncode}, left {left}: {r.stderr[-400:]}")
    print("failed save: refused with", [l for l in r.stderr.splitlines() if ".distcp" in l][:1], "and left", left)


def main():
    tmp = tempfile.mkdtemp(prefix="mc_dist_save_")
    try:
        saves = {}
        for case in mcs.DIST_CASES:
            save, ours = train_and_save(case, tmp)
            saves[case] = (save, ours)
            check_layout(case, save, tmp)
            megatron_continues(case, save, ours, tmp)
            dcp_reads(case, save, tmp)
        # our own resume at the same layout (which rewrites iteration 6: byte-stable), then others
        for case in mcs.DIST_CASES:
            save, ours = saves[case]
            before = os.path.join(tmp, f"iter6_{case}")
            shutil.copytree(os.path.join(save, "iter_0000006"), before)
            resume(case, save, ours, tmp)
            byte_stable(case, save, before, "")
        save, ours = saves["gpt_tp1"]
        resume("gpt_tp2pp2", save, ours, tmp, ("--make-vocab-size-divisible-by", "32"),
               " (tp1 save loaded at tp2 x pp2)", tol=1e-5)
        save, ours = saves["gpt_tp2pp2"]
        resume("gpt_tp1", save, ours, tmp, ("--make-vocab-size-divisible-by", "128"),
               " (tp2 x pp2 save loaded at tp1)", tol=1e-5)
        save, ours = saves["llama_tp2"]
        resume("llama_tp1", save, ours, tmp, ("--make-vocab-size-divisible-by", "128"),
               " (Llama tp2 save loaded at tp1)", tol=1e-5)
        # interleaved pipelining (model0/model1 per rank) and data parallelism (dp rank 0 writes)
        for case in ("gpt_pp2vpp2", "gpt_dp2"):
            save = os.path.join(tmp, f"ours_{case}")
            r = mcs.run_ours(case, tmp, DIST + ("--save", save, "--save-interval", "3"))
            ours = mcs.train_lines(r.stdout)
            check(r.returncode == 0 and sorted(ours) == [1, 2, 3, 4, 5, 6], f"{case}: our run: {r.stderr[-400:]}")
            resume("gpt_tp1", save, ours, tmp, (), f" ({case} save loaded at tp1)", tol=1e-5)
        failed_save(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary("test_dist_ckpt_save")


if __name__ == "__main__":
    sys.exit(main())
