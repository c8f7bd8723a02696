"""convert_checkpoint --saver hf / --loader hf against transformers (4.44.2 in build/hf-venv,
made by scripts/setup_hf_venv.sh; transformers is never installed system-wide).

Export: pretrain_gpt checkpoints of a GPT-2-like model (tied embeddings, learned positions,
tanh-GELU; saved at tp2 after a reshard, so the export merges shards) and of a Llama-like model
(GQA 4 heads / 2 groups, SwiGLU, RMSNorm, RoPE base 5e5 with Llama-3 rope scaling, untied) are
exported; GPT2LMHeadModel / LlamaForCausalLM.from_pretrained give our logits (the C GPTModel of
pretrain_gpt, run by tests/drivers/gpt_parity_driver on the checkpoint's weights) within 1e-5
of max |logit|, over the true vocabulary (padding removed: NullTokenizer 4096 + EOD = 4097 rows).
Import: random tiny transformers models (save_pretrained, safetensors; GPT-2 (also as a
pytorch_model.bin), Llama with GQA and Llama-3 rope scaling, Llama with tied embeddings) are imported at tp1 and
tp2 (the Llama one from a sharded save: model.safetensors.index.json); our forward on the tp1 checkpoint gives transformers' logits within 1e-5; the tp2 checkpoint
merges back to the tp1 one bit-exactly; the vocabulary is padded to a multiple of 128 x tp;
--bf16 rounds every weight as torch does and --tokenizer-model sets the true vocabulary.
Export -> import -> export round trip gives the same safetensors tensors. Refusals by name:
GPT-2 export of a RoPE model, an unknown architecture."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

from common import GPT, PRETRAIN, SRC, BUILD, Counter, convert, load_rank, run, train_args

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from reference import mcdump  # noqa: E402

C = Counter("test_convert_hf")
VENV_PY = os.path.join(BUILD, "hf-venv", "bin", "python")
HF_SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_side.py")
DRIVER = os.path.join(BUILD, "tests", "gpt_parity_driver")
LLAMA = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
         "--group-query-attention", "--num-query-groups", "2", "--ffn-hidden-size", "48",
         "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
         "--rotary-base", "500000", "--use-rope-scaling", "--disable-bias-linear",
         "--untie-embeddings-and-output-weights"]


def hf(*args):
    p = subprocess.run([VENV_PY, HF_SIDE, *args], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1", TRANSFORMERS_OFFLINE="1",
                                HF_HUB_OFFLINE="1"))
    if p.returncode:
        raise RuntimeError("hf_side %s: %s" % (args[0], p.stderr[-3000:]))


def hf_logits(tmp, path, tokens):
    tp, out = os.path.join(tmp, "tokens.pt"), os.path.join(tmp, "hf_logits.pt")
    torch.save(tokens, tp)
    hf("logits", path, tp, out)
    return torch.load(out)


def our_logits(tmp, ckpt, tokens):
    """logits [b, s, V_padded] of the C GPTModel on the tp1 checkpoint's weights"""
    sd = load_rank(ckpt, 0, 0, 1)
    a = sd["args"]
    b, s = tokens.shape
    swiglu = a.swiglu
    cfg = dict(num_layers=a.num_layers, hidden_size=a.hidden_size, num_attention_heads=a.num_attention_heads,
               num_query_groups=a.num_query_groups or a.num_attention_heads, kv_channels=a.kv_channels,
               ffn_hidden_size=a.ffn_hidden_size, vocab_size=a.padded_vocab_size,
               padded_vocab_size=a.padded_vocab_size, make_vocab_size_divisible_by=1,
               max_position_embeddings=a.max_position_embeddings, seq_length=s, micro_batch_size=b,
               normalization=1 if a.normalization == "RMSNorm" else 0,
               position_embedding_type={"learned_absolute": 0, "rope": 1}.get(a.position_embedding_type, 2),
               rotary_percent=a.rotary_percent, rotary_base=a.rotary_base,
               rotary_interleaved=int(a.rotary_interleaved), use_rope_scaling=int(a.use_rope_scaling),
               rope_scaling_factor=a.rope_scaling_factor,
               activation=2 if swiglu else (0 if a.bias_gelu_fusion else 1),
               add_bias_linear=int(a.add_bias_linear), add_qkv_bias=int(a.add_qkv_bias),
               apply_query_key_layer_scaling=0, attention_softmax_in_fp32=0,
               untie_embeddings_and_output_weights=int(a.untie_embeddings_and_output_weights),
               fp32_residual_connection=0, hidden_dropout=0.0, attention_dropout=0.0,
               init_method_std=0.02, seed=1234)
    floats = {"norm_epsilon", "rotary_percent", "rotary_base", "rope_scaling_factor", "hidden_dropout",
              "attention_dropout", "init_method_std"}
    t = {"config." + k: (np.float32(v) if k in floats else np.int64(v)) for k, v in cfg.items()}
    t["config.norm_epsilon"] = np.float32(a.norm_epsilon)
    for k, v in sd["model"].items():
        if v is not None:
            t["param." + k] = v.float().numpy()
    t["tokens"] = tokens.numpy().astype(np.int64)
    t["labels"] = tokens.numpy().astype(np.int64)
    t["dloss"] = np.full((b, s), 1.0 / (b * s), np.float32)
    t["opt.steps"] = np.int64(0)
    for k, v in dict(beta1=0.9, beta2=0.95, eps=1e-8, clip_grad=1.0).items():
        t["opt." + k] = np.float32(v)
    inp, out = os.path.join(tmp, "drv_in.dump"), os.path.join(tmp, "drv_out.dump")
    mcdump.write(inp, t)
    p = subprocess.run([DRIVER, inp, out], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode:
        raise RuntimeError("gpt_parity_driver: " + p.stderr)
    return torch.from_numpy(mcdump.read(out)["logits"]).transpose(0, 1)  # [s,b,V] -> [b,s,V]


def close(got, want, what, rtol=1e-5):
    err = (got.double() - want.double()).abs().max().item() / want.abs().max().item()
    print("  %s: max |diff| / max |logit| = %.2e" % (what, err))
    return C.check(got.shape == want.shape and err <= rtol, "%s: %s vs %s, rel err %.2e" %
                   (what, tuple(got.shape), tuple(want.shape), err))


def export_case(tmp, model, label, tp, vocab_div):
    save = os.path.join(tmp, label + "_ck")
    p = run([PRETRAIN, *train_args(model, tmp, 2, extra=["--save", save, "--save-interval", "2"],
                                   vocab_div=vocab_div)])
    if not C.check(p.returncode == 0, "pretrain_gpt %s: %s" % (label, p.stderr[-2000:])):
        return
    src = save
    if tp > 1:  # export from a resharded checkpoint: the HF saver merges the shards
        src = save + "_tp%d" % tp
        q = convert(save, src, "--loader", "core", "--saver", "core", "--saver-transformer-impl",
                    "local", "--target-tensor-parallel-size", str(tp))
        C.check(q.returncode == 0, "%s reshard: %s" % (label, q.stderr))
    out = os.path.join(tmp, label + "_hf")
    q = convert(src, out, "--loader", "core", "--saver", "hf")
    if not C.check(q.returncode == 0, "%s export: %s %s" % (label, q.stdout, q.stderr)):
        return
    cfg = json.load(open(os.path.join(out, "config.json")))
    C.check(cfg["vocab_size"] == 4097, "%s: exported vocab_size %s (want 4097)" % (label, cfg["vocab_size"]))
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 4097, (2, 16), generator=g)
    want = hf_logits(tmp, out, tokens)
    C.check(want["class"] == ("LlamaForCausalLM" if "--swiglu" in model else "GPT2LMHeadModel"),
            "%s: class %s" % (label, want["class"]))
    C.check(want["tied"] == ("--untie-embeddings-and-output-weights" not in model), "%s: tying" % label)
    ours = our_logits(tmp, save, tokens)
    close(ours[..., :4097], want["logits"], "%s export: our logits vs transformers" % label)
    # HF -> Megatron -> HF gives the same tensors
    back, again = out + "_mc", out + "_again"
    q = convert(out, back, "--loader", "hf", "--saver", "core", "--saver-transformer-impl", "local",
                "--target-tensor-parallel-size", "2")
    # an imported checkpoint records no tokenizer size: --true-vocab-size undoes the padding
    r = convert(back, again, "--loader", "core", "--saver", "hf", "--true-vocab-size", "4097") \
        if q.returncode == 0 else q
    if C.check(q.returncode == 0 and r.returncode == 0, "%s round trip: %s %s" % (label, q.stderr, r.stderr)):
        from_st = read_safetensors(os.path.join(out, "model.safetensors"))
        again_st = read_safetensors(os.path.join(again, "model.safetensors"))
        C.check(list(from_st) == list(again_st) and all(np.array_equal(from_st[k], again_st[k]) for k in from_st),
                "%s: export -> import -> export changed tensors" % label)


def read_safetensors(path):
    """independent minimal reader: header JSON + raw float32 data"""
    with open(path, "rb") as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    hdr = json.loads(buf[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", v
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(buf[8 + n + b:8 + n + e], np.float32).reshape(v["shape"])
    return out


def import_case(tmp, kind):
    src = os.path.join(tmp, "hf_" + kind)
    hf("make", kind, src, "3")
    if kind == "gpt2_bin":
        C.check(os.path.exists(os.path.join(src, "pytorch_model.bin")), "gpt2_bin: %s" % os.listdir(src))
    if kind == "llama":  # save_pretrained sharded it: the importer follows the index
        shards = [f for f in os.listdir(src) if f.endswith(".safetensors")]
        C.check(os.path.exists(os.path.join(src, "model.safetensors.index.json")) and len(shards) > 1,
                "llama: expected a sharded save_pretrained, got %s" % os.listdir(src))
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, 1000, (2, 12), generator=g)
    want = hf_logits(tmp, src, tokens)["logits"]
    ck1, ck2 = src + "_tp1", src + "_tp2"
    p = convert(src, ck1, "--loader", "hf", "--saver", "core", "--saver-transformer-impl", "local")
    q = convert(src, ck2, "--loader", "llama_mistral" if kind.startswith("llama") else "hf", "--saver", "mcore",
                "--saver-transformer-impl", "local", "--target-tensor-parallel-size", "2")
    if not C.check(p.returncode == 0 and q.returncode == 0, "%s import: %s %s" % (kind, p.stderr, q.stderr)):
        return
    a = load_rank(ck1, 0, 0, 1)["args"]
    C.check(a.padded_vocab_size == 1024 and load_rank(ck2, 0, 0, 1)["args"].padded_vocab_size == 1024,
            "%s: padded vocab %s" % (kind, a.padded_vocab_size))
    ours = our_logits(tmp, ck1, tokens)
    close(ours[..., :1000], want, "%s import: our logits vs transformers" % kind)
    if kind == "llama":
        bf16_tokenizer(src, ck1)
    back = ck2 + "_tp1"
    r = convert(ck2, back, "--loader", "core", "--saver", "core", "--saver-transformer-impl", "local",
                "--target-tensor-parallel-size", "1")
    if C.check(r.returncode == 0, "%s tp2 -> tp1: %s" % (kind, r.stderr)):
        x, y = load_rank(ck1, 0, 0, 1)["model"], load_rank(back, 0, 0, 1)["model"]
        C.check(list(x) == list(y) and all(x[k] is None or torch.equal(x[k], y[k]) for k in x),
                "%s: tp2 import merged back differs from the tp1 import" % kind)


def bf16_tokenizer(src, ck1):
    """--bf16 and --tokenizer-model (loader_llama_mistral's options): weights rounded as torch
    rounds to bfloat16; the vocabulary padded for the tokenizer's size with added tokens."""
    tok_dir = os.path.join(SRC, "tests", "golden", "tokenizer", "hf_llama3")
    tj = json.load(open(os.path.join(tok_dir, "tokenizer.json")))
    vocab = tj["model"]["vocab"]
    n = len(vocab) + len([t for t in tj.get("added_tokens", []) if t["content"] not in vocab])
    out = ck1 + "_bf16"
    p = convert(src, out, "--loader", "llama_mistral", "--checkpoint-type", "hf", "--model-size", "llama3",
                "--tokenizer-model", tok_dir, "--bf16", "--saver", "core", "--saver-transformer-impl", "local")
    if not C.check(p.returncode == 0, "--bf16 --tokenizer-model: " + p.stderr):
        return
    sd, ref = load_rank(out, 0, 0, 1), load_rank(ck1, 0, 0, 1)["model"]
    padded = (n + 127) // 128 * 128
    C.check(sd["args"].padded_vocab_size == padded and sd["args"].bf16 and
            sd["args"].params_dtype == torch.bfloat16,
            "--bf16 --tokenizer-model: padded vocab %s (tokenizer %d -> %d), bf16 %s" %
            (sd["args"].padded_vocab_size, n, padded, sd["args"].bf16))
    rows = min(n, 1000)
    for k, v in sd["model"].items():
        if v is None:
            continue
        want = ref[k].to(torch.bfloat16)
        if "word_embeddings" in k or k == "output_layer.weight":
            v, want = v[:rows], want[:rows]
        C.check(v.dtype == torch.bfloat16 and torch.equal(v, want), "--bf16: %s differs from torch's rounding" % k)


def refusals(tmp):
    # GPT-2 export of a RoPE model: the Llama-like checkpoint has SwiGLU, so build a RoPE GPT
    save = os.path.join(tmp, "rope_ck")
    model = GPT[:1] + ["2"] + GPT[2:] + ["--position-embedding-type", "rope"]
    p = run([PRETRAIN, *train_args(model, tmp, 1, extra=["--save", save, "--save-interval", "1"])])
    if C.check(p.returncode == 0, "rope GPT training: " + p.stderr[-1000:]):
        out = os.path.join(tmp, "rope_hf")
        q = convert(save, out, "--loader", "core", "--saver", "hf")
        C.check(q.returncode != 0 and "not GPT2LMHeadModel (it has a RoPE" in q.stderr and
                "not LlamaForCausalLM (it has LayerNorm" in q.stderr,
                "RoPE GPT export must be refused by name: " + q.stderr)
        C.check(not os.path.exists(out) and not [f for f in os.listdir(tmp) if f.startswith("rope_hf.tmp")],
                "refused export left output behind")
    bad = os.path.join(tmp, "bert_hf")
    os.makedirs(bad)
    json.dump({"model_type": "bert", "architectures": ["BertForMaskedLM"]}, open(os.path.join(bad, "config.json"), "w"))
    q = convert(bad, bad + "_out", "--loader", "hf", "--saver", "core")
    C.check(q.returncode != 0 and "BertForMaskedLM" in q.stderr, "unknown architecture: " + q.stderr)
    q = convert(bad, bad + "_out", "--loader", "llama_mistral", "--checkpoint-type", "meta", "--saver", "core")
    C.check(q.returncode != 0 and "Meta-format" in q.stderr, "--checkpoint-type meta: " + q.stderr)


def main():
    if not os.path.exists(VENV_PY):
        print("FAIL: %s missing: run scripts/setup_hf_venv.sh (transformers lives only in that venv)" % VENV_PY)
        C.failed += 1
        C.finish()
    tmp = tempfile.mkdtemp(prefix="mc_convert_hf_")
    try:
        export_case(tmp, GPT[:1] + ["2"] + GPT[2:], "gpt2", 2, 64)
        export_case(tmp, LLAMA, "llama", 1, 128)
        import_case(tmp, "gpt2")
        import_case(tmp, "llama")
        import_case(tmp, "llama_tied")
        import_case(tmp, "gpt2_bin")
        refusals(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    C.finish()


if __name__ == "__main__":
    main()
