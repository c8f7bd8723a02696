"""convert_checkpoint keeps 16-bit checkpoints 16-bit, checked with torch 1.13 reading the files
(the safetensors files parsed here: 8-byte header length, JSON header, raw little-endian data).
Source: Megatron-LM core_v0.12.1's own --bf16 checkpoint (tests/golden/checkpointing/mixed_bf16).
  - --saver hf: model.safetensors in BF16, config.json torch_dtype "bfloat16", the tensors
    bit-equal to Megatron's (vocabulary padding dropped);
  - --loader hf --bf16 back to Megatron: every model tensor bit-equal to the original (bf16
    Megatron -> HF -> Megatron round trip), args bf16 / params_dtype torch.bfloat16; without
    --bf16 the weights are widened to float32 (loader_llama_mistral's float32 default);
  - --loader hf --fp16 then --saver hf: F16 safetensors, torch_dtype "float16", torch's
    bfloat16 -> float16 conversion;
  - core -> core at tp2 and back to tp1: bf16 shards, the merge bit-equal to the original."""
import json
import os
import struct
import sys
import tempfile

import torch

from common import SRC, Counter, convert, load_rank

C = Counter("test_convert_mixed")
GOLDEN = os.path.join(SRC, "tests", "golden", "checkpointing", "mixed_bf16", "save")
GOLDEN16 = os.path.join(SRC, "tests", "golden", "checkpointing", "mixed_fp16", "save")  # torch 2.x wrote it
ST_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
VOCAB = 513  # NullTokenizer --vocab-size 512 plus EOD; Megatron pads it to 576


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=ST_DTYPES[h["dtype"]]) if e > b else torch.empty(0)
        out[name] = (h["dtype"], t.reshape(h["shape"]))
    return out


def model_of(ckpt):
    return {k: v for k, v in load_rank(ckpt, 0, 0, 1)["model"].items() if v is not None}


def unpadded(name, t):
    return t[:VOCAB] if "word_embeddings" in name or name.startswith("output_layer") else t


def main():
    gold = model_of(GOLDEN)
    with tempfile.TemporaryDirectory() as tmp:
        hf = os.path.join(tmp, "hf")
        p = convert(GOLDEN, hf, "--loader", "core", "--saver", "hf")
        C.check(p.returncode == 0, "bf16 Megatron -> HF: " + p.stderr[-300:])
        cfg = json.load(open(os.path.join(hf, "config.json")))
        st = read_safetensors(os.path.join(hf, "model.safetensors"))
        C.check(cfg.get("torch_dtype") == "bfloat16", "config.json torch_dtype %s" % cfg.get("torch_dtype"))
        C.check({d for d, _ in st.values()} == {"BF16"}, "safetensors dtypes %s" % {d for d, _ in st.values()})
        pairs = [("transformer.wte.weight", "embedding.word_embeddings.weight"),
                 ("transformer.wpe.weight", "embedding.position_embeddings.weight"),
                 ("transformer.ln_f.weight", "decoder.final_layernorm.weight"),
                 ("transformer.h.1.mlp.c_fc.weight", "decoder.layers.1.mlp.linear_fc1.weight")]
        for h, m in pairs:
            want = unpadded(m, gold[m])
            got = st[h][1].t() if "c_fc" in h else st[h][1]  # GPT-2's Conv1D keeps [in, out]
            C.check(torch.equal(got, want), "HF %s = Megatron's %s, bf16 bits" % (h, m))

        back = os.path.join(tmp, "back")
        p = convert(hf, back, "--loader", "hf", "--saver", "core", "--bf16",
                    "--make-vocab-size-divisible-by", "64", "--saver-transformer-impl", "local")
        C.check(p.returncode == 0, "HF -> Megatron --bf16: " + p.stderr[-300:])
        sd = load_rank(back, 0, 0, 1)
        m = {k: v for k, v in sd["model"].items() if v is not None}
        C.check(sd["args"].bf16 and sd["args"].params_dtype == torch.bfloat16, "args bf16, params_dtype bf16")
        C.check(list(m) == list(gold), "the same model keys")
        bad = [k for k in gold if m[k].dtype != torch.bfloat16 or not torch.equal(unpadded(k, m[k]), unpadded(k, gold[k]))]
        C.check(not bad, "bf16 Megatron -> HF -> Megatron bit-exact: %s" % bad[:3])

        f32 = os.path.join(tmp, "f32")
        p = convert(hf, f32, "--loader", "hf", "--saver", "core", "--make-vocab-size-divisible-by", "64",
                    "--saver-transformer-impl", "local")
        m32 = model_of(f32) if p.returncode == 0 else {}
        C.check(p.returncode == 0 and all(m32[k].dtype == torch.float32 and
                                          torch.equal(unpadded(k, m32[k]), unpadded(k, gold[k]).float()) for k in gold),
                "HF bf16 -> Megatron without --bf16: float32, widened exactly " + p.stderr[-200:])

        h16, m16 = os.path.join(tmp, "hf16"), os.path.join(tmp, "m16")
        p = convert(hf, m16, "--loader", "hf", "--saver", "core", "--fp16", "--make-vocab-size-divisible-by", "64")
        p2 = convert(m16, h16, "--loader", "core", "--saver", "hf", "--true-vocab-size", str(VOCAB)) \
            if p.returncode == 0 else p
        C.check(p2.returncode == 0, "--fp16 import, HF export: " + (p.stderr + p2.stderr)[-300:])
        if p2.returncode == 0:
            st16 = read_safetensors(os.path.join(h16, "model.safetensors"))
            C.check(json.load(open(os.path.join(h16, "config.json")))["torch_dtype"] == "float16" and
                    {d for d, _ in st16.values()} == {"F16"}, "fp16 export: F16, torch_dtype float16")
            C.check(all(torch.equal(st16[k][1], st[k][1].half()) for k in st),
                    "fp16 weights = torch's bfloat16 -> float16 conversion")

        meg16 = os.path.join(tmp, "meg16")
        p = convert(GOLDEN16, meg16, "--loader", "core", "--saver", "hf")
        C.check(p.returncode == 0, "Megatron's fp16 checkpoint (torch 2.x pickle) -> HF: " + p.stderr[-300:])
        if p.returncode == 0:
            import numpy.core.multiarray  # its RNG state names numpy 2's modules
            sys.modules.setdefault("numpy._core", numpy.core)
            sys.modules.setdefault("numpy._core.multiarray", numpy.core.multiarray)
            g16 = {k: v for k, v in load_rank(GOLDEN16, 0, 0, 1)["model"].items() if v is not None}
            s16 = read_safetensors(os.path.join(meg16, "model.safetensors"))
            C.check({d for d, _ in s16.values()} == {"F16"} and
                    torch.equal(s16["transformer.wte.weight"][1], g16["embedding.word_embeddings.weight"][:VOCAB]),
                    "fp16 export: F16 tensors, Megatron's fp16 bits")

        tp2, tp1 = os.path.join(tmp, "tp2"), os.path.join(tmp, "tp1")
        p = convert(GOLDEN, tp2, "--loader", "core", "--saver", "core", "--target-tensor-parallel-size", "2",
                    "--saver-transformer-impl", "local")
        p2 = convert(tp2, tp1, "--loader", "core", "--saver", "core", "--target-tensor-parallel-size", "1",
                     "--saver-transformer-impl", "local") if p.returncode == 0 else p
        C.check(p2.returncode == 0, "bf16 reshard tp1 -> tp2 -> tp1: " + (p.stderr + p2.stderr)[-300:])
        if p2.returncode == 0:
            shard = load_rank(tp2, 1, 0, 1)["model"]
            C.check({v.dtype for v in shard.values() if v is not None} == {torch.bfloat16}, "tp2 shards are bf16")
            r = model_of(tp1)
            C.check(all(torch.equal(r[k], gold[k]) for k in gold), "resharded back: bit-equal to Megatron's")
    C.finish()


if __name__ == "__main__":
    main()
