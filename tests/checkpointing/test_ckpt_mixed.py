"""16-bit checkpoints on the format level (src/checkpointing with params_dtype bf16/fp16), checked
by torch 1.13 and against a checkpoint Megatron-LM core_v0.12.1 wrote itself with --bf16
(tests/golden/checkpointing/mixed_bf16/). tests/drivers/ckpt16_driver.c saves and loads the
gpt_tp1 case's model as a --bf16 / --fp16 run would:
  - model tensors in params_dtype, equal to torch's own rounding of the fp32 main params
    (main.bfloat16() / main.half()), the main params exact in optimizer['fp32_from_fp16_params'];
  - optimizer = Float16OptimizerWithFloat16Params.state_dict(): keys, types, dtypes and shapes as
    Megatron's file; 'grad_scaler' {} (constant) or scale/growth/hysteresis (dynamic);
  - loading: the main params come back bit for bit (ours and Megatron's); --no-load-optim gives
    float(model tensor in the run's dtype); an optimizer state of the other precision is refused
    as Megatron fails on it; the scaler state is restored or skipped with Megatron's warnings."""
import os
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
import torch_stubs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

SRC = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MC_BUILD_DIR", "build")
DRIVER = os.path.join(BUILD, "tests", "ckpt16_driver")
GOLDEN = os.path.join(SRC, "tests", "golden", "checkpointing", "mixed_bf16", "save")
GOLDEN16 = os.path.join(SRC, "tests", "golden", "checkpointing", "mixed_fp16", "save")  # torch 2.x
FILE = os.path.join("iter_0000002", "mp_rank_00", "model_optim_rng.pt")
DISTOPT = os.path.join("iter_0000002", "mp_rank_00", "distrib_optim.pt")
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def driver(*argv):
    p = subprocess.run([DRIVER, *argv], capture_output=True, text=True, timeout=120)
    params, info = {}, {}
    for line in p.stdout.splitlines():
        w = line.split()
        if w and w[0] in ("step", "scaler"):
            info[w[0]] = " ".join(w[1:])
        elif len(w) >= 2 and w[1].isdigit() and len(w) == 2 + int(w[1]):
            bits = struct.pack(f"{len(w) - 2}I", *(int(x, 16) for x in w[2:]))
            params[w[0]] = torch.frombuffer(bytearray(bits), dtype=torch.float32)
    return p.returncode, params, info, p.stdout, p.stderr


def load(path):
    torch_stubs.install()
    import numpy.core.multiarray  # a torch 2.x checkpoint's RNG state names numpy 2's modules
    sys.modules.setdefault("numpy._core", numpy.core)
    sys.modules.setdefault("numpy._core.multiarray", numpy.core.multiarray)
    return torch.load(path)


def main_params(sd):
    """name -> fp32 main param: fp32_from_fp16_params follows the param groups (Megatron's
    _get_param_groups: decayed first here, as the word embeddings lead), each in model order."""
    m = sd["model"]
    names = [k for k, v in m.items() if v is not None]
    decay = [n for n in names if not (n.endswith(".bias") or m[n].dim() == 1)]
    rest = [n for n in names if n not in decay]
    f = sd["optimizer"]["fp32_from_fp16_params"]
    check(len(f) == 2 and len(f[0]) == len(decay) and len(f[1]) == len(rest),
          f"fp32_from_fp16_params: {[len(g) for g in f]} tensors, want {len(decay)} + {len(rest)}")
    return dict(zip(decay, f[0])) | dict(zip(rest, f[1]))


def same_structure(ours, gold, path):
    """Keys in order, container types, tensor dtypes and shapes, plain value types."""
    if isinstance(gold, dict):
        if type(ours) is not type(gold) or list(ours) != list(gold):
            return [f"{path}: keys {list(ours)[:5]} vs {list(gold)[:5]} ({type(ours).__name__} vs "
                    f"{type(gold).__name__})"]
        return [e for k in gold for e in same_structure(ours[k], gold[k], f"{path}.{k}")]
    if isinstance(gold, (list, tuple)):
        if type(ours) is not type(gold) or len(ours) != len(gold):
            return [f"{path}: {type(ours).__name__} of {len(ours)} vs {len(gold)}"]
        return [e for i, (a, b) in enumerate(zip(ours, gold)) for e in same_structure(a, b, f"{path}[{i}]")]
    if torch.is_tensor(gold):
        if not torch.is_tensor(ours) or ours.dtype != gold.dtype or ours.shape != gold.shape:
            return [f"{path}: {getattr(ours, 'dtype', ours)} {getattr(ours, 'shape', '')} vs "
                    f"{gold.dtype} {tuple(gold.shape)}"]
        return []
    return [] if type(ours) is type(gold) else [f"{path}: {type(ours).__name__} vs {type(gold).__name__}"]


def bits_equal(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def test_bf16_file(tmp):
    d = os.path.join(tmp, "bf16")
    rc, saved, _, _, err = driver("save", d, "bf16", "none")
    check(rc == 0, f"bf16 save: {err[-300:]}")
    sd, gold = load(os.path.join(d, FILE)), load(os.path.join(GOLDEN, FILE))
    bad = same_structure(sd["model"], gold["model"], "model") + \
        same_structure(sd["optimizer"], gold["optimizer"], "optimizer")
    check(not bad, f"model and optimizer as Megatron's --bf16 checkpoint: {bad[:4]}")
    check(list(sd["optimizer"]) == ["optimizer", "fp32_from_fp16_params"], "bf16: no grad_scaler")
    main = main_params(sd)
    check(all(bits_equal(main[n].flatten(), saved[n]) for n in main), "fp32_from_fp16_params = our main params")
    wrong = [n for n in main if not torch.equal(sd["model"][n], main[n].bfloat16())]
    check(not wrong, f"model tensors = torch's bf16 rounding of the main params: {wrong[:3]}")
    check(any(not torch.equal(main[n], sd["model"][n].float()) for n in main),
          "the main params are not all bf16 values (the test sees the rounding)")
    gm = main_params(gold)  # the same rule holds in Megatron's own file
    check(all(torch.equal(gold["model"][n], gm[n].bfloat16()) for n in gm),
          "Megatron's file: model = fp32_from_fp16_params.bfloat16() under the same mapping")
    return d, saved


def test_fp16_scalers(tmp):
    d = os.path.join(tmp, "fp16")
    rc, saved, _, _, err = driver("save", d, "fp16", "dynamic")
    check(rc == 0, f"fp16 save: {err[-300:]}")
    sd = load(os.path.join(d, FILE))
    o = sd["optimizer"]
    check(list(o) == ["optimizer", "grad_scaler", "fp32_from_fp16_params"], f"fp16 optimizer keys {list(o)}")
    gs = o["grad_scaler"]
    check(list(gs) == ["scale", "growth_tracker", "hysteresis_tracker"] and gs["scale"].dtype == torch.float32
          and gs["scale"].shape == (1,) and gs["scale"].item() == 32768.0 and gs["growth_tracker"] == 3
          and gs["hysteresis_tracker"] == 1, f"dynamic scaler state {gs}")
    check({v.dtype for v in sd["model"].values() if v is not None} == {torch.float16}, "model tensors float16")
    main = main_params(sd)
    check(all(torch.equal(sd["model"][n], main[n].half()) for n in main), "model = main.half()")
    c = os.path.join(tmp, "const")
    rc, _, _, _, err = driver("save", c, "bf16", "constant")
    check(rc == 0 and load(os.path.join(c, FILE))["optimizer"]["grad_scaler"] == {},
          f"--bf16 --loss-scale: grad_scaler {{}}: {err[-200:]}")
    # round trip: main params, step and scaler state come back exactly
    rc, got, info, _, err = driver("load", d, "fp16", "dynamic", "optim")
    check(rc == 0, f"fp16 load: {err[-300:]}")
    check(got.keys() == saved.keys() and all(bits_equal(got[n], saved[n]) for n in saved),
          "fp16 round trip: main params bit-exact")
    check(info.get("step") == "2" and info.get("scaler") == "loaded=1 scale=32768 growth=3 hysteresis=1",
          f"step and scaler restored: {info}")
    rc, got, _, out, err = driver("load", d, "fp16", "dynamic", "nooptim")
    check(rc == 0 and all(bits_equal(got[n], sd["model"][n].float().flatten()) for n in saved),
          f"--no-load-optim: main = float(fp16 weights): {err[-200:]}")
    # bf16 run, fp16 checkpoint: Megatron loads it, skipping the scaler with its warning; the
    # main params are exact, the 16-bit weights follow them
    rc, got, info, out, err = driver("load", d, "bf16", "none", "optim")
    check(rc == 0 and "INFO:megatron.core.optimizer.optimizer:***WARNING*** fould the grad scaler in the "
          "checkpoint but it is None in the class. Skipping loading grad scaler ..." in out,
          f"bf16 run loads the fp16 checkpoint: {err[-300:]}")
    check(all(bits_equal(got[n], saved[n]) for n in saved), "cross-precision load: main params exact")
    rc, got, _, _, err = driver("load", d, "bf16", "none", "nooptim")
    check(rc == 0 and all(bits_equal(got[n], sd["model"][n].bfloat16().float().flatten()) for n in saved),
          "--no-load-optim into bf16: float(bf16(fp16 weight)), torch's conversion")


def test_precision_refusals(tmp, bf16_dir):
    rc, _, _, _, err = driver("load", bf16_dir, "fp32", "none", "optim")
    check(rc != 0 and "saved by a --bf16/--fp16 run" in err and "--no-load-optim" in err
          and "KeyError 'state'" in err, f"fp32 run, bf16 optimizer: {err.strip()[-400:]}")
    f32 = os.path.join(tmp, "fp32")
    rc, saved32, _, _, err = driver("save", f32, "fp32", "none")
    sd = load(os.path.join(f32, FILE))
    check(rc == 0 and list(sd["optimizer"]) == ["state", "param_groups"]
          and {v.dtype for v in sd["model"].values() if v is not None} == {torch.float32},
          f"fp32 checkpoint unchanged: torch optimizer state, float32 model: {err[-200:]}")
    rc, _, _, _, err = driver("load", f32, "bf16", "none", "optim")
    check(rc != 0 and "saved by an fp32 run" in err and "optimizer_state_dict" in err,
          f"bf16 run, fp32 optimizer: {err.strip()[-400:]}")
    rc, got, _, _, err = driver("load", f32, "bf16", "none", "nooptim")
    check(rc == 0 and all(bits_equal(got[n], sd["model"][n].bfloat16().float().flatten()) for n in got),
          f"fp32 checkpoint, --bf16 --no-load-optim: main = float(bf16(w)): {err[-200:]}")


def test_megatron_bf16_loads(tmp):
    gold = load(os.path.join(GOLDEN, FILE))
    gm = main_params(gold)
    rc, got, info, out, err = driver("load", GOLDEN, "bf16", "none", "optim")
    check(rc == 0, f"Megatron's bf16 checkpoint loads: {err[-300:]}")
    check(got.keys() == gm.keys() and all(bits_equal(got[n], gm[n].flatten()) for n in gm),
          "its fp32_from_fp16_params become our main params bit for bit")
    check(info.get("step") == "2", f"Adam step 2: {info}")
    rc, got, _, _, err = driver("load", GOLDEN, "bf16", "none", "nooptim")
    check(rc == 0 and all(bits_equal(got[n], gold["model"][n].float().flatten()) for n in gm),
          f"--no-load-optim: main = float(Megatron's bf16 weights): {err[-200:]}")
    rc, got, _, _, err = driver("load", GOLDEN, "fp32", "none", "nooptim")
    check(rc == 0 and all(bits_equal(got[n], gold["model"][n].float().flatten()) for n in gm),
          f"fp32 run, --no-load-optim: the bf16 weights widened: {err[-200:]}")
    rc, _, _, out, err = driver("load", GOLDEN, "fp16", "dynamic", "optim")
    check(rc == 0 and "INFO:megatron.core.optimizer.optimizer:***WARNING*** found an old checkpoint, "
          "will not load grad scaler ..." in out, f"fp16 run, bf16 checkpoint: {err[-300:]}")


def test_megatron_fp16_loads(tmp):
    """Megatron's --fp16 checkpoint (torch 2.x): our fp16 file has its optimizer layout, and it
    loads with the main params, the Adam step and the dynamic scaler's state."""
    gold = load(os.path.join(GOLDEN16, FILE))
    gm = main_params(gold)
    d = os.path.join(tmp, "fp16_vs")
    rc, _, _, _, err = driver("save", d, "fp16", "dynamic")
    ours = load(os.path.join(d, FILE))
    go, oo = gold["optimizer"], ours["optimizer"]
    bad = same_structure(ours["model"], gold["model"], "model") + \
        same_structure(oo["grad_scaler"], go["grad_scaler"], "grad_scaler") + \
        same_structure(oo["fp32_from_fp16_params"], go["fp32_from_fp16_params"], "fp32_from_fp16_params")
    check(rc == 0 and list(oo) == list(go) and not bad, f"fp16 layout as Megatron's: {list(go)} {bad[:4]}")
    rc, got, info, out, err = driver("load", GOLDEN16, "fp16", "dynamic", "optim")
    check(rc == 0, f"Megatron's fp16 checkpoint loads: {err[-300:]}")
    check(got.keys() == gm.keys() and all(bits_equal(got[n], gm[n].flatten()) for n in gm),
          "its fp32_from_fp16_params become our main params bit for bit")
    gs = go["grad_scaler"]
    want = "loaded=1 scale=%.17g growth=%d hysteresis=%d" % (gs["scale"].item(), gs["growth_tracker"],
                                                             gs["hysteresis_tracker"])
    check(info.get("step") == "2" and info.get("scaler") == want, f"step 2, scaler {want}: {info}")


def test_megatron_distopt(tmp):
    """Megatron's --use-distributed-optimizer checkpoints (dp 2) in bf16 and fp16, loaded on one
    process and saved again: distrib_optim.pt (buffer key, fp32 main params and moments) and the
    16-bit model come back bit-identical, the optimizer dict as Megatron's; the scaler state
    loads; a run of another precision is refused as Megatron fails on the buffer key."""
    for prec, scaler, grad in (("bf16", "none", "fp32"), ("fp16", "dynamic", "fp16")):
        src = os.path.join(SRC, "tests", "golden", "checkpointing", f"mixed_{prec}_distopt", "save")
        out = os.path.join(tmp, f"distopt_{prec}")
        rc, _, info, _, err = driver("distopt", src, prec, scaler, grad, out)
        check(rc == 0, f"{prec} distopt: load and save: {err[-300:]}")
        if rc:
            continue
        a, b = load(os.path.join(out, DISTOPT)), load(os.path.join(src, DISTOPT))
        check(list(a) == list(b) and list(a[0]) == list(b[0]), f"{prec} distrib_optim.pt keys {list(a[0])} vs {list(b[0])}")
        ka, kb = next(iter(a[0])), next(iter(b[0]))
        check(all(torch.equal(a[0][ka][k], b[0][kb][k]) and a[0][ka][k].dtype == torch.float32
                  for k in ("param", "exp_avg", "exp_avg_sq")) and a[0][ka]["numel_unpadded"] == b[0][kb]["numel_unpadded"],
              f"{prec} distrib_optim.pt tensors bit-identical to Megatron's")
        x, y = load(os.path.join(out, FILE)), load(os.path.join(src, FILE))
        check(all(torch.equal(x["model"][k], y["model"][k]) for k in y["model"] if y["model"][k] is not None),
              f"{prec} model tensors bit-identical")
        xo, yo = x["optimizer"], y["optimizer"]
        check(list(xo) == list(yo) and [g["step"] for g in xo["optimizer"]["param_groups"]] ==
              [g["step"] for g in yo["optimizer"]["param_groups"]], f"{prec} optimizer keys {list(xo)} vs {list(yo)}, step")
        if prec == "bf16":  # torch 1.13 both (torch 2 adds param group keys)
            check(xo["optimizer"]["param_groups"] == yo["optimizer"]["param_groups"], "bf16 param groups equal")
        else:
            check(str(xo["grad_scaler"]) == str(yo["grad_scaler"]) and "loaded=1" in info.get("scaler", ""),
                  f"fp16 scaler state loaded and saved: {xo['grad_scaler']}")
    rc, _, _, _, err = driver("distopt", os.path.join(SRC, "tests", "golden", "checkpointing", "mixed_bf16_distopt", "save"),
                              "fp32", "none", "fp32", os.path.join(tmp, "distopt_x"))
    check(rc != 0 and "(torch.bfloat16, torch.float32), this run's is (torch.float32, torch.float32)" in err
          and "--no-load-optim" in err, f"fp32 run, bf16 distrib_optim.pt refused: {err.strip()[-300:]}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        bf16_dir, _ = test_bf16_file(tmp)
        test_fp16_scalers(tmp)
        test_precision_refusals(tmp, bf16_dir)
        test_megatron_bf16_loads(tmp)
        test_megatron_fp16_loads(tmp)
        test_megatron_distopt(tmp)
    return summary("test_ckpt_mixed")


if __name__ == "__main__":
    sys.exit(main())
