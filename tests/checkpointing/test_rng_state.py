"""Megatron's rng_state in our checkpoints (src/checkpointing/rng_state.c, src/core/host_rng.c),
against Python, numpy and torch run live for fresh seeds:
- torch format, tp2 x pp2: torch.load opens every rank's model_optim_rng.pt, with Debian's torch
  1.13 / numpy 1.x (its default loading) and PyPI's torch 2.x / numpy 2.x (its default,
  weights_only, refuses ours for exactly the globals it refuses in Megatron's own checkpoint,
  the numpy ones included; then loaded as Megatron loads, weights_only=False, with numpy's
  DeprecationWarnings as errors); rng_state is [state] with random.getstate(),
  np.random.get_state(), torch.get_rng_state() after seeding with --seed + 100 * pp rank, the CUDA
  Philox states (seed, offset 0) of torch.cuda.manual_seed for the seed, the seed + 2718 + tp rank
  and the seed + 1024 + tp rank (CUDAGeneratorImpl::get_state's 16 bytes: no GPU here), and each
  restores into the live generators (random.setstate, np.random.set_state, torch.set_rng_state);
- torch_dist, dp2 with --data-parallel-random-init: the rng_state sharded object
  (rng_state/shard_0.0_1.1, BytesStorageMetadata, written once by data-parallel rank 0) holds
  [[state(dp 0), state(dp 1)]] with the seeds + 10 * dp rank;
- --no-save-rng: torch_dist writes no rng_state object (the torch format: test_checkpoint.py);
- ours ignores the rng_state it loads: a malformed one (wrong types in the torch format, junk
  bytes in the torch_dist object) still loads and training continues with the same loss.
Megatron itself loading ours without --no-load-rng: test_checkpoint.py (torch) and
test_dist_ckpt_save.py (torch_dist)."""
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import megatron_cases as mcs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

mcs.ALL_CASES.setdefault("gpt_dp2", (2, mcs.GPT2, ("--data-path", mcs.CORPUS_A)))
DIST = ("--ckpt-format", "torch_dist")
TORCH1 = "/usr/bin/python3"

# Run under each torch: argv = [mode, seed, dp_random_init, then (pp, tp, dp_size, path) ...];
# mode "pt": path is a model_optim_rng.pt; "obj": the bytes of a torch_dist rng_state object.
CHECKER = r'''
import io, random, struct, sys, warnings
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
import torch_stubs
torch_stubs.install()
warnings.simplefilter("error", DeprecationWarning)  # numpy 2 on a numpy.core path would warn
mode, seed, dpri = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
T2 = int(torch.__version__.split(".")[0]) >= 2

def philox(s):  # CUDAGeneratorImpl::get_state after manual_seed(s): seed, offset 0
    return struct.pack("<Qq", s, 0)

def expected(s, tp):
    random.seed(s); np.random.seed(s); torch.manual_seed(s)
    return (random.getstate(), np.random.get_state(), torch.get_rng_state(),
            philox(s), [("data-parallel-rng", philox(s)), ("model-parallel-rng", philox(s + 2718 + tp)),
                        ("expert-parallel-rng", philox(s + 1024 + tp))])

def same(st, s, tp):
    r, n, t, cuda, tracker = expected(s, tp)
    keys = ["random_rng_state", "np_rng_state", "torch_rng_state", "cuda_rng_state", "rng_tracker_states"]
    o = st["np_rng_state"]
    ok = [list(st) == keys, st["random_rng_state"] == r,
          o[0] == n[0] and o[1].dtype == n[1].dtype and o[1].shape == n[1].shape and np.array_equal(o[1], n[1])
          and o[2:] == n[2:] and [type(x) for x in o] == [type(x) for x in n],
          st["torch_rng_state"].dtype == torch.uint8 and torch.equal(st["torch_rng_state"], t),
          st["cuda_rng_state"].dtype == torch.uint8 and bytes(st["cuda_rng_state"].tolist()) == cuda,
          [(k, bytes(v.tolist())) for k, v in st["rng_tracker_states"].items()] == tracker]
    # Megatron's load_checkpoint restores them (the CUDA ones need a GPU)
    random.seed(0); np.random.seed(0); torch.manual_seed(0)
    random.setstate(st["random_rng_state"]); np.random.set_state(st["np_rng_state"])
    torch.set_rng_state(st["torch_rng_state"])
    a = (random.random(), np.random.rand(), torch.rand(3).tolist())
    random.seed(s); np.random.seed(s); torch.manual_seed(s)
    ok.append(a == (random.random(), np.random.rand(), torch.rand(3).tolist()))
    return ok

def load(path):
    if mode == "obj":
        return torch.load(io.BytesIO(open(path, "rb").read()), weights_only=False)[0]
    if not T2:
        return torch.load(path)["rng_state"]  # torch 1.x: its default, full unpickling
    try:
        torch.load(path)
        print("weights_only default loaded a checkpoint with an args Namespace")
    except Exception as e:
        if type(e).__name__ != "UnpicklingError":
            raise
    print("unsafe", sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path)))
    return torch.load(path, weights_only=False)["rng_state"]  # as Megatron loads

rest = sys.argv[5:]
for i in range(0, len(rest), 4):
    pp, tp, dp, path = int(rest[i]), int(rest[i + 1]), int(rest[i + 2]), rest[i + 3]
    lst = load(path)
    n = dp if dpri else 1
    good = type(lst) is list and len(lst) == n
    for d in range(n if good else 0):
        good &= all(same(lst[d], seed + 100 * pp + (10 * d if dpri else 0), tp))
    print(f"rank pp {pp} tp {tp}: {'ok' if good else 'DIFFERS'}")
'''

GOLD_CKPT = os.path.join(mcs.GOLDEN, "save", "iter_0000002", "mp_rank_00", "model_optim_rng.pt")


def run_checker(py, mode, seed, dpri, ranks):
    argv = [py, "-c", CHECKER, os.path.dirname(os.path.abspath(__file__)), mode, str(seed), "1" if dpri else "0"]
    for pp, tp, dp, path in ranks:
        argv += [str(pp), str(tp), str(dp), path]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def unsafe_globals_of_megatron(py):
    """torch 2's weights_only refusals for Megatron's own checkpoint (tests/golden)."""
    r = subprocess.run([py, "-W", "ignore", "-c", "import sys, torch; print('unsafe', sorted("
                        "torch.serialization.get_unsafe_globals_in_checkpoint(sys.argv[1])))", GOLD_CKPT],
                       capture_output=True, text=True, timeout=120)
    return r.stdout.strip()


def torch_format(tmp):
    """tp2 x pp2: every rank's rng_state under torch 1.13 and torch 2."""
    seed = random.randrange(1, 2 ** 31)
    save = os.path.join(tmp, "tp2pp2")
    r = mcs.run_ours("gpt_tp2pp2", tmp, ("--save", save, "--save-interval", "1", "--seed", str(seed)), iters=1)
    check(r.returncode == 0, f"tp2pp2 save: {r.stderr[-500:]}")
    ranks = [(p, t, 1, os.path.join(save, "iter_0000001", f"mp_rank_{t:02d}_{p:03d}", "model_optim_rng.pt"))
             for t in (0, 1) for p in (0, 1)]
    rc, out, err = run_checker(TORCH1, "pt", seed, False, ranks)
    check(rc == 0 and out.count(": ok") == 4, f"torch 1.13 (seed {seed}): {out} {err[-800:]}")
    print(f"torch 1.13 / numpy 1.x, seed {seed}:", out.strip().replace("\n", "; "))
    py2 = mcs.megatron_python(torch2=True)
    if not py2:
        print("torch 2 check skipped (no torch 2 python: MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return
    rc, out, err = run_checker(py2, "pt", seed, False, ranks)
    check(rc == 0 and out.count(": ok") == 4, f"torch 2 (seed {seed}): {out} {err[-800:]}")
    theirs = unsafe_globals_of_megatron(py2)
    mine = sorted({line for line in out.splitlines() if line.startswith("unsafe")})
    check(mine == [theirs] and "numpy.core.multiarray._reconstruct" in theirs,
          f"torch 2 weights_only refuses ours as Megatron's: {mine} vs {theirs}")
    print(f"torch 2 / numpy 2, seed {seed}:", [l for l in out.splitlines() if l.startswith("rank")],
          "; weights_only refuses the globals it refuses in Megatron's own checkpoint:", theirs)


EXTRACT = r'''
import pickle, sys, types
for n in ("megatron", "megatron.core", "megatron.core.dist_checkpointing",
          "megatron.core.dist_checkpointing.strategies", "megatron.core.dist_checkpointing.strategies.torch"):
    sys.modules[n] = types.ModuleType(n)
sys.modules["megatron.core.dist_checkpointing.strategies.torch"].MCoreSavePlan = type("MCoreSavePlan", (), {})
d, out = sys.argv[1], sys.argv[2]
m = pickle.load(open(d + "/.metadata", "rb"))
keys = [k for k in m.state_dict_metadata if k.startswith("rng_state")]
print("keys", keys, [type(m.state_dict_metadata[k]).__name__ for k in keys])
for k, v in m.storage_data.items():
    if k.fqn.startswith("rng_state"):
        print("at", k.fqn, v.relative_path, v.offset, v.length)
        with open(d + "/" + v.relative_path, "rb") as f:
            f.seek(v.offset)
            open(out, "wb").write(f.read(v.length))
'''


def extract(py, it_dir, out):
    r = subprocess.run([py, "-W", "ignore", "-c", EXTRACT, it_dir, out], capture_output=True, text=True,
                       timeout=120)
    return r.returncode, r.stdout, r.stderr


def torch_dist(tmp):
    """dp2 --data-parallel-random-init: one object holding both data-parallel ranks' states;
    --no-save-rng: none."""
    py2 = mcs.megatron_python(torch2=True)
    if not py2:
        print("torch_dist checks skipped (no torch 2 python: MC_TORCH2_PYTHON or bench/setup_torch.sh)")
        return
    seed = random.randrange(1, 2 ** 31)
    save = os.path.join(tmp, "dp2")
    r = mcs.run_ours("gpt_dp2", tmp, DIST + ("--save", save, "--save-interval", "1", "--seed", str(seed),
                                             "--data-parallel-random-init"), iters=1)
    check(r.returncode == 0, f"dp2 torch_dist save: {r.stderr[-500:]}")
    blob = os.path.join(tmp, "rng_obj.pt")
    rc, out, err = extract(py2, os.path.join(save, "iter_0000001"), blob)
    check(rc == 0 and "keys ['rng_state/shard_0.0_1.1'] ['BytesStorageMetadata']" in out and
          out.count("at rng_state/") == 1 and "__0_" in out, f"dp2: one rng_state object by rank 0: {out} {err[-500:]}")
    for py, name in ((py2, "torch 2"), (TORCH1, "torch 1.13")):
        rc, res, err = run_checker(py, "obj", seed, True, [(0, 0, 2, blob)])
        check(rc == 0 and res.count(": ok") == 1, f"dp2 object under {name} (seed {seed}): {res} {err[-800:]}")
    print(f"torch_dist dp2 --data-parallel-random-init, seed {seed}:", out.strip().splitlines()[-1],
          "holds both data-parallel ranks' states")
    none = os.path.join(tmp, "nsr")
    r = mcs.run_ours("gpt_tp1", tmp, DIST + ("--save", none, "--save-interval", "1", "--no-save-rng"), iters=1)
    rc, out, err = extract(py2, os.path.join(none, "iter_0000001"), blob + ".none")
    check(r.returncode == 0 and rc == 0 and "keys [] []" in out and "at " not in out,
          f"--no-save-rng: no rng_state object: {out} {err[-300:]}")
    print("torch_dist --no-save-rng: no rng_state object")


MALFORM = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
import torch_stubs
torch_stubs.install()
sd = torch.load(sys.argv[2])
sd["rng_state"] = [{"random_rng_state": "not a state", "np_rng_state": (1, 2), "torch_rng_state": torch.zeros(3),
                    "cuda_rng_state": None, "rng_tracker_states": {}}, 7]
torch.save(sd, sys.argv[2])
'''


def malformed(tmp):
    """A malformed rng_state does not stop ours loading: it ignores it."""
    here = os.path.dirname(os.path.abspath(__file__))
    for fmt in ("torch", "torch_dist"):
        save = os.path.join(tmp, f"bad_{fmt}")
        base = ("--ckpt-format", fmt)
        r = mcs.run_ours("gpt_tp1", tmp, base + ("--save", save, "--save-interval", "1"), iters=2)
        straight = mcs.train_lines(r.stdout)
        check(r.returncode == 0 and sorted(straight) == [1, 2], f"{fmt}: save run: {r.stderr[-400:]}")
        it = os.path.join(save, "iter_0000001")
        if fmt == "torch":
            p = subprocess.run([TORCH1, "-c", MALFORM, here, os.path.join(it, "mp_rank_00", "model_optim_rng.pt")],
                               capture_output=True, text=True, timeout=120)
            check(p.returncode == 0, f"rewriting rng_state: {p.stderr[-400:]}")
        else:
            py2 = mcs.megatron_python(torch2=True)
            if not py2:
                continue
            rc, out, _ = extract(py2, it, os.path.join(tmp, "junk"))
            f, off, n = out.strip().splitlines()[-1].split()[2:5]
            with open(os.path.join(it, f), "r+b") as fh:  # the object's archive overwritten with junk
                fh.seek(int(off))
                fh.write(b"\xff junk " * (int(n) // 7) + b"\xff" * (int(n) % 7))
        r = mcs.run_ours("gpt_tp1", tmp, base + ("--load", save, "--ckpt-step", "1"), iters=2)
        resumed = mcs.train_lines(r.stdout)
        loss = {k: mcs.numbers(v[1]).get("lm loss") for k, v in resumed.items()}
        want = mcs.numbers(straight.get(2, ("", ""))[1]).get("lm loss")
        check(r.returncode == 0 and sorted(resumed) == [2] and loss[2] == want,
              f"{fmt}: loads past a malformed rng_state: rc {r.returncode} {loss} vs {want} {r.stderr[-400:]}")
        print(f"{fmt}: a malformed rng_state is ignored; iteration 2's lm loss as without the "
              f"interruption: {loss.get(2)} vs {want}")


def main():
    with tempfile.TemporaryDirectory(prefix="mc_rng_state_") as tmp:
        torch_format(tmp)
        torch_dist(tmp)
        malformed(tmp)
    return summary("test_rng_state")


if __name__ == "__main__":
    sys.exit(main())
