#!/usr/bin/env python3
"""megatron.c's grad scalers (src/optimizer/grad_scaler.c) against Megatron-LM core_v0.12.1's
own megatron/core/optimizer/grad_scaler.py: the same configs (constant, dynamic with several
hysteresis / window / min-scale settings, bf16 and fp32 without a scaler) fed the same
found-inf sequences; scale, growth tracker and hysteresis tracker compared after every update.

Megatron's module runs live when MC_MEGATRON_ROOT names a Megatron-LM checkout (or
/work/ref/Megatron-LM exists): it is loaded from its file alone (it imports only torch) with
its `device='cuda'` tensors made on the CPU, and the choice of scaler is
get_megatron_optimizer's rule restated here. Without Megatron the committed golden
tests/golden/optimizer/grad_scaler.json is used, written by this script with --update from
such a live run (Debian torch 1.13, /usr/bin/python3)."""
import importlib.util
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mc_test  # noqa: E402

DRIVER = os.path.join(mc_test.BUILD, "tests", "grad_scaler_driver")
GOLDEN = os.path.join(mc_test.SRC, "tests", "golden", "optimizer", "grad_scaler.json")


def cases():
    """(name, config, found_inf string). Sequences mix runs of overflows (to reach hysteresis
    and the minimum) with clean runs (to reach the window)."""
    rnd = random.Random(1234)

    def seq(n, p):
        return "".join("1" if rnd.random() < p else "0" for _ in range(n))

    base = dict(fp16=1, bf16=0, mixed=1, loss_scale=0.0, initial=2.0 ** 32, min=1.0,
                window=1000.0, hysteresis=2)
    out = []

    def add(name, s, **kw):
        out.append((name, dict(base, **kw), s))

    add("fp16_defaults_startup", "1" * 40 + "0" * 5)            # 2^32 down to 1, stays at min
    add("fp16_window3_hyst2", seq(200, 0.3), window=3.0)
    add("fp16_window1_hyst1", seq(120, 0.5), window=1.0, hysteresis=1)
    add("fp16_window4_hyst3", "1101100" + seq(150, 0.25), window=4.0, hysteresis=3,
        initial=4096.0)
    add("fp16_min_4", "1" * 30 + "0" * 8 + "1" * 6, initial=65536.0, min=4.0, window=5.0)
    add("fp16_window_fraction", seq(30, 0.1), window=2.5)        # never equal: never grows
    add("fp16_min_equals_initial", "1111" + "0" * 4, initial=8.0, min=8.0, window=2.0)
    add("fp16_constant", seq(20, 0.5), loss_scale=4096.0)
    add("bf16_constant", seq(10, 0.5), fp16=0, bf16=1, loss_scale=128.0)
    add("bf16_none", seq(10, 0.5), fp16=0, bf16=1)
    add("fp32_distopt_constant", seq(6, 0.5), fp16=0, mixed=1, loss_scale=8.0)
    add("fp32_distopt_none", seq(6, 0.5), fp16=0)
    add("fp32_optimizer_loss_scale", seq(6, 0.5), fp16=0, mixed=0, loss_scale=8.0)
    add("fp16_mindspeed_4096", "1" * 14 + seq(60, 0.2), initial=4096.0, window=10.0)
    return out


def run_ours(cfg, s):
    args = [DRIVER] + [str(cfg[k]) for k in ("fp16", "bf16", "mixed", "loss_scale", "initial",
                                               "min", "window", "hysteresis")] + [s]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if r.returncode:
        return ["rc %d: %s%s" % (r.returncode, r.stdout, r.stderr)]
    return [line.split() for line in r.stdout.splitlines()]


def megatron_root():
    root = os.environ.get("MC_MEGATRON_ROOT") or "/work/ref/Megatron-LM"
    f = os.path.join(root, "megatron", "core", "optimizer", "grad_scaler.py")
    return f if os.path.exists(f) else None


def load_megatron(path):
    """Megatron's grad_scaler module with every torch.tensor(..., device='cuda') on the CPU."""
    import torch
    real = torch.tensor

    def cpu_tensor(*a, device=None, **k):
        return real(*a, **k)

    torch.tensor = cpu_tensor
    spec = importlib.util.spec_from_file_location("megatron_grad_scaler", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, real


def run_megatron(mod, cfg, s):
    """get_megatron_optimizer's choice, then update() per step; rows as the driver prints."""
    scaler = None
    if cfg["mixed"]:
        if cfg["loss_scale"]:
            scaler = mod.ConstantGradScaler(cfg["loss_scale"])
        elif cfg["fp16"]:
            scaler = mod.DynamicGradScaler(initial_scale=cfg["initial"], min_scale=cfg["min"],
                                           growth_factor=2.0, backoff_factor=0.5,
                                           growth_interval=cfg["window"],
                                           hysteresis=cfg["hysteresis"])

    def row():
        if scaler is None:
            return ["0", "0", "1", "0", "0"]
        dyn = isinstance(scaler, mod.DynamicGradScaler)
        st = scaler.state_dict()
        return ["1", "1" if dyn else "0", "%.17g" % scaler.scale.item(),
                str(st.get("growth_tracker", 0)), str(st.get("hysteresis_tracker", 0))]

    rows = [row()]
    for c in s:
        if scaler is not None:
            scaler.update(c == "1")
        rows.append(row())
    return rows


def main():
    update = "--update" in sys.argv
    path = megatron_root()
    ref, source = None, "golden"
    if path:
        import torch  # noqa: F401  (Debian torch 1.13 under /usr/bin/python3)
        mod, real = load_megatron(path)
        try:
            ref = {name: run_megatron(mod, cfg, s) for name, cfg, s in cases()}
        finally:
            torch.tensor = real
        source = "megatron live (%s)" % path
        if update:
            tmp = GOLDEN + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"made_by": "tests/optimizer/test_grad_scaler.py --update with "
                           "Megatron-LM core_v0.12.1 grad_scaler.py on Debian torch 1.13",
                           "cases": ref}, f, indent=0)
            os.replace(tmp, GOLDEN)
    if ref is None:
        with open(GOLDEN) as f:
            ref = json.load(f)["cases"]
    steps = 0
    for name, cfg, s in cases():
        ours = run_ours(cfg, s)
        want = ref[name]
        mc_test.check(len(ours) == len(want), "%s: %d rows, Megatron %d (%s)" %
                      (name, len(ours), len(want), ours[:1]))
        bad = [(i, o, w) for i, (o, w) in enumerate(zip(ours, want)) if list(o) != list(w)]
        mc_test.check(not bad, "%s: first differences (step, ours, Megatron): %s" %
                      (name, bad[:3]))
        steps += len(s)
    # the sequences reach what they are meant to: back-off to the minimum, growth, hysteresis
    fp16 = ref["fp16_defaults_startup"]
    mc_test.check(float(fp16[0][2]) == 2.0 ** 32 and float(fp16[-1][2]) == 1.0,
                  "startup 2^32 -> 1")
    grew = any(float(b[2]) > float(a[2]) for a, b in zip(ref["fp16_window3_hyst2"],
                                                       ref["fp16_window3_hyst2"][1:]))
    mc_test.check(grew, "window 3 sequence grows the scale at least once")
    # bad values are refused as Megatron's asserts do
    for bad_cfg in (dict(min=0.0), dict(min=2.0 ** 40), dict(window=0.0), dict(hysteresis=0),
                    dict(initial=0.0)):
        cfg = dict(cases()[0][1], **bad_cfg)
        r = run_ours(cfg, "0")
        mc_test.check(r and "error:" in str(r[0]), "refused %s: %s" % (bad_cfg, r[:1]))
    return mc_test.summary("test_grad_scaler", "(%d steps vs %s)" % (steps, source))


if __name__ == "__main__":
    sys.exit(main())
