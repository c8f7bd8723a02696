"""megatron.c's torch.save/torch.load (src/checkpointing/torch_zip.c, torch_pickle.c) against the
real torch 1.13: torch.load opens what we write (every dtype, a view sharing a storage,
Namespace, OrderedDict, enums, ints of every width, bytes), our reader reads what torch.save
writes (the same and more), and broken files give clear errors."""
import collections
import io
import json
import os
import argparse
import subprocess
import sys
import tempfile
import zipfile

import torch

sys.path.insert(0, os.path.dirname(__file__))
import torch_stubs  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import check, summary  # noqa: E402

BUILD = os.environ.get("MC_BUILD_DIR", "build")
DRIVER = os.path.join(BUILD, "tests", "ckpt_driver")


def dump(path):
    p = subprocess.run([DRIVER, "dump", path], capture_output=True, text=True, timeout=60)
    return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr


def test_torch_loads_ours(tmp, mode="write"):
    path = os.path.join(tmp, "ours.pt")
    p = subprocess.run([DRIVER, mode, path], capture_output=True, text=True)
    check(p.returncode == 0, f"driver write: {p.stderr}")
    torch_stubs.install()
    d = torch.load(path)
    want_keys = ["f32", "view", "scalar", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "u8",
                 "bool", "empty", "args", "od", "nested", "betas", "ints", "bytes", "empty_list",
                 "empty_tuple", "empty_dict", "pi"]
    check(type(d) is dict and list(d) == want_keys, f"keys in order: {list(d)}")
    f32 = torch.tensor([[1.5, -2.25, 3.0], [1e-30, -0.0, 65504.0]], dtype=torch.float32)
    check(torch.equal(d["f32"], f32) and d["f32"].dtype == torch.float32, "f32 2x3")
    check(torch.equal(d["view"], f32[:, 1]) and d["view"].stride() == (3,)
          and d["view"].storage_offset() == 1, "view: offset 1, stride 3")
    check(d["view"].storage().data_ptr() == d["f32"].storage().data_ptr(), "view shares f32's storage")
    check(d["scalar"].dim() == 0 and d["scalar"].item() == 3.0, "0-dim tensor")
    exp = {"f64": (torch.float64, [1 / 3, -1e300, 2.5]), "f16": (torch.float16, [1, -2, 0.333251953125]),
           "bf16": (torch.bfloat16, [1, -3, 3.140625]), "i64": (torch.int64, [-(1 << 40), 7]),
           "i32": (torch.int32, [-5, 123456]), "i16": (torch.int16, [-300, 300]),
           "i8": (torch.int8, [-128, 127]), "u8": (torch.uint8, [0, 200, 255]),
           "bool": (torch.bool, [True, False]), "empty": (torch.float32, [])}
    for k, (dt, vals) in exp.items():
        check(d[k].dtype == dt and d[k].tolist() == vals, f"{k}: {d[k]} want {dt} {vals}")
    a = d["args"]
    check(isinstance(a, argparse.Namespace), "args is a Namespace")
    check(list(vars(a)) == ["num_layers", "lr", "name", "load", "flag", "items", "params_dtype",
                             "model_type"], f"Namespace attributes in order: {list(vars(a))}")
    check(a.num_layers == 2 and a.lr == 1e-3 and a.name == 'gpt "x" \u00e9' and a.load is None
          and a.flag is True and a.items == [1, "a"], f"Namespace values {a}")
    check(a.params_dtype is torch.bfloat16, "torch.bfloat16 global")
    check(a.model_type.name == "encoder_or_decoder", "ModelType enum")
    check(type(d["od"]) is collections.OrderedDict and list(d["od"].items()) == [("z", 1), ("a", None)],
          "OrderedDict")
    check(list(d["nested"]) == [0] and torch.equal(d["nested"][0]["step"], torch.tensor([1.5])),
          "int-keyed nested dict")
    check(d["betas"] == (0.9, 0.999), "tuple of floats")
    check(d["ints"] == (0, 255, 256, 65535, 65536, -1, -129, 2147483647, 2147483648, -2147483648,
                        -2147483649, 1 << 40, 2**63 - 1, -2**63), f"ints {d['ints']}")
    check(d["bytes"] == b"\x00\x7f\x80\xff", "bytes")
    check(d["empty_list"] == [] and d["empty_tuple"] == () and d["empty_dict"] == {}, "empties")
    check(d["pi"] == 3.141592653589793, "float bits")
    # the container: torch's own layout
    z = zipfile.ZipFile(path)
    names = z.namelist()
    check(names[0] == "ours/data.pkl" and names[-1] == "ours/version", f"entries {names[:3]}..")
    check(z.read("ours/version") == b"3\n", "version 3")
    raw = open(path, "rb").read()
    for info in z.infolist():
        start = info.header_offset + 30 + len(info.filename) + int.from_bytes(
            raw[info.header_offset + 28:info.header_offset + 30], "little")
        check(start % 64 == 0 and info.compress_type == 0 and info.flag_bits & 0x08,
              f"{info.filename}: stored, data descriptor, data at {start} (64-aligned)")
    check(raw[-22:-18] == b"PK\x05\x06" and raw[-42:-38] == b"PK\x06\x07", "zip64 locator + end record")
    check(z.testzip() is None, "CRCs")
    rc, ours, err = dump(path)
    check(rc == 0, f"our reader reads our file: {err}")


def tensor_json(t):
    return {"tensor": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "stride": list(t.stride()), "offset": t.storage_offset(),
            "values": [float(x) for x in t.flatten().tolist()]}


def compare(ours, ref, where):
    """ours: the driver's JSON; ref: the Python object torch.load returns."""
    if isinstance(ref, torch.Tensor):
        want = tensor_json(ref)
        got = {k: ours.get(k) for k in want} if isinstance(ours, dict) else ours
        check(got == want, f"{where}: {str(got)[:200]} != {str(want)[:200]}")
        return
    if isinstance(ref, argparse.Namespace):
        return compare_pairs(ours, "namespace", list(vars(ref).items()), where)
    if isinstance(ref, collections.OrderedDict):
        return compare_pairs(ours, "odict", list(ref.items()), where)
    if isinstance(ref, dict):
        return compare_pairs(ours, "dict", list(ref.items()), where)
    if isinstance(ref, tuple):
        check(isinstance(ours, dict) and len(ours.get("tuple", [])) == len(ref), f"{where}: tuple")
        for i, r in enumerate(ref):
            compare(ours["tuple"][i] if isinstance(ours, dict) and i < len(ours.get("tuple", [])) else None, r, f"{where}[{i}]")
        return
    if isinstance(ref, list):
        check(isinstance(ours, list) and len(ours) == len(ref), f"{where}: list")
        for i, r in enumerate(ref):
            compare(ours[i] if isinstance(ours, list) and i < len(ours) else None, r, f"{where}[{i}]")
        return
    if isinstance(ref, torch.dtype):
        check(ours == {"global": "torch " + str(ref).replace("torch.", "")}, f"{where}: dtype {ours}")
        return
    if isinstance(ref, bytes):
        check(ours == {"bytes": ref.hex()}, f"{where}: bytes")
        return
    check(type(ours) is type(ref) and ours == ref, f"{where}: {ours!r} != {ref!r}")


def compare_pairs(ours, tag, items, where):
    pairs = ours.get(tag) if isinstance(ours, dict) else None
    check(pairs is not None and len(pairs) == len(items), f"{where}: {tag} with {len(items)} items")
    for i, (k, v) in enumerate(items):
        if pairs is None or i >= len(pairs):
            return
        check(pairs[i][0] == k, f"{where}: key {i} {pairs[i][0]!r} != {k!r}")
        compare(pairs[i][1], v, f"{where}.{k}")


def test_we_load_torch(tmp):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7
    obj = {
        "args": argparse.Namespace(num_layers=3, lr=3e-4, name="x", load=None, on=False,
                                   dt=torch.float16, lst=[1, 2.5, "s"]),
        "model": collections.OrderedDict([("w", base), ("w_T", base.t()), ("row", base[2]),
                                          ("col", base[:, 3]), ("x._extra_state", None)]),
        "dtypes": {str(dt): (torch.arange(5) - 2).to(dt) for dt in
                   (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)},
        "nested": {0: {"step": torch.tensor(4.0), "exp_avg": torch.ones(2, 2)},
                   1: {"deep": {"deeper": [1, (2, 3), {"k": -7}]}}},
        "ints": [0, 300, 70000, -1, -2**31 - 1, 2**40, 2**63 - 1],
        "floats": [0.1, -1e-300, float("inf")],
        "b": b"\x00\xff",
        "same": None,
    }
    obj["same"] = obj["model"]["w"]  # the same tensor twice: memo BINGET
    path = os.path.join(tmp, "torch.pt")
    torch.save(obj, path)
    rc, ours, err = dump(path)
    check(rc == 0, f"our reader loads torch.save output: {err}")
    if rc == 0:
        ref = torch.load(path)
        compare(ours, ref, "root")
        m = dict(ours["dict"])["model"]["odict"]
        keys = [dict(m)[k]["storage"] for k in ("w", "w_T", "row", "col")]
        check(len(set(keys)) == 1, f"views share one storage: {keys}")


def corrupt(tmp, name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return dump(path)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_broken(tmp):
    path = os.path.join(tmp, "good.pt")
    torch.save({"w": torch.ones(1000)}, path)
    raw = open(path, "rb").read()
    rc, _, err = corrupt(tmp, "trunc.pt", raw[:len(raw) // 2])
    check(rc != 0 and "trunc.pt" in err and ("truncated" in err or "end-of-central" in err),
          f"truncated file: {err.strip()}")
    rc, _, err = corrupt(tmp, "empty.pt", b"")
    check(rc != 0 and "empty.pt" in err, f"empty file: {err.strip()}")
    cd = raw.rfind(b"PK\x01\x02")
    bad = raw[:cd] + b"XX\x01\x02" + raw[cd + 4:]
    rc, _, err = corrupt(tmp, "cdir.pt", bad)
    check(rc != 0 and "central directory" in err, f"corrupted central directory: {err.strip()}")
    at = raw.find(b"\x00\x00\x80\x3f")  # inside the tensor data (1.0f)
    bad = raw[:at] + b"\x00\x00\x80\x40" + raw[at + 4:]
    rc, _, err = corrupt(tmp, "crc.pt", bad)
    check(rc != 0 and "CRC" in err, f"flipped data byte: {err.strip()}")
    evil = os.path.join(tmp, "evil.pt")
    torch.save({"x": Evil()}, evil)
    rc, out, err = dump(evil)
    check(rc != 0 and "posix.system" in err and "pwned" not in err, f"unknown GLOBAL: {err.strip()}")
    torch.save({"c": collections.Counter("ab")}, os.path.join(tmp, "counter.pt"))
    rc, _, err = dump(os.path.join(tmp, "counter.pt"))
    check(rc != 0 and "collections.Counter" in err, f"unknown class: {err.strip()}")
    rc, _, err = dump(os.path.join(tmp, "missing.pt"))
    check(rc != 0 and "missing.pt" in err, f"missing file: {err.strip()}")


TORCH2_SAVE = """
import sys, numpy, torch
t = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.float16)
t.tensor_model_parallel, t.partition_dim = True, 0  # as Megatron's fp32 main params carry them
torch.save({"main": t, "plain": torch.arange(3.0), "np": numpy.arange(4, dtype=numpy.int64)}, sys.argv[1])
"""


def test_torch2_pickles(tmp):
    """torch 2.x pickles a tensor with Python attributes through _rebuild_from_type_v2 and numpy 2
    arrays through numpy._core (Megatron's --fp16 checkpoints, which need torch 2 on a CPU, have
    both): read as the plain tensor and array."""
    sys.path.insert(0, os.path.dirname(__file__))
    import megatron_cases
    py = megatron_cases.megatron_python(torch2=True)
    if py is None and os.path.exists("/work/torch2-venv/bin/python"):
        py = "/work/torch2-venv/bin/python"
    if py is None:
        print("SKIP test_torch2_pickles: no torch 2.x interpreter (bench/setup_torch.sh, MC_TORCH2_PYTHON)")
        return
    path = os.path.join(tmp, "torch2.pt")
    p = subprocess.run([py, "-c", TORCH2_SAVE, path], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"torch 2 save: {p.stderr[-300:]}")
    with zipfile.ZipFile(path) as z:
        pkl = z.read([n for n in z.namelist() if n.endswith("data.pkl")][0])
    check(b"_rebuild_from_type_v2" in pkl and b"numpy._core" in pkl, "torch 2 used both (the test sees them)")
    rc, d, err = dump(path)
    check(rc == 0, f"our reader: {err.strip()}")
    if rc == 0:
        items = dict(d["dict"])
        m = items["main"]
        check(m["tensor"] == "float16" and m["shape"] == [2, 2] and m["values"] == [1.5, -2.0, 0.25, 3.0],
              f"attributed fp16 tensor read as a tensor: {m}")
        check(items["plain"]["values"] == [0.0, 1.0, 2.0], "plain tensor")
        check(items["np"].get("ndarray") is not None and items["np"]["shape"] == [4], f"numpy 2 array: {items['np']}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_torch2_pickles(tmp)
        test_torch_loads_ours(tmp)
        test_torch_loads_ours(tmp, "write64")  # the zip64 form files past 4 GiB take
        test_we_load_torch(tmp)
        test_broken(tmp)
    return summary("test_torch_format")


if __name__ == "__main__":
    sys.exit(main())
