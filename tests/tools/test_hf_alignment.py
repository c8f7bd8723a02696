"""The HuggingFace side of the alignment tools (docs/alignment.md): tools/hf_dump_hooks.py run
with transformers 4.44.2 (build/hf-venv, made by scripts/setup_hf_venv.sh) against megatron.c's
forward on the same weights and tokens.

A GPT-2-style model (LayerNorm, learned positions, GELU, biases, tied embeddings; vocabulary
4096, not padded) and a Llama-style one (RMSNorm, RoPE with Llama-3 scaling, SwiGLU, GQA, no
biases, untied; vocabulary 4097, padded to 4224) are trained for 2 iterations by pretrain_gpt,
saved --ckpt-format torch and exported with convert_checkpoint --saver hf. pretrain_gpt loads
the checkpoint (--finetune) and dumps iteration 1 (two micro-batches of 2 x 32 mock tokens):
the batch, the forward and the loss; hf_dump_hooks.py reads that batch and dumps the HF
model's forward under the same names. Checks:
  - compare_dumps: the same names on both sides, every tensor within fp32 tolerance (exit 0),
    the logits of the padded vocabulary compared over the 4097 columns HF holds, and the loss
    (GPT-2: no padded columns in Megatron's softmax);
  - a megatron.c run with a 1e4 times too large norm epsilon in one layer
    (MC_TEST_PERTURB_LN_EPS) is reported as first diverging exactly at that layer's output;
  - hf_dump_hooks.py --tokens/--labels gives the same tensors as --batch-from for the first
    micro-batch, and its errors (no batch in the dump, ragged --tokens) name what is wrong.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from mc_test import BUILD, SRC, Checks, gpt2, llama, run_cmd  # noqa: E402

sys.path.insert(0, os.path.join(SRC, "tools"))
import mcdump  # noqa: E402

C = Checks("test_hf_alignment")
PRETRAIN = os.path.join(BUILD, "bin", "pretrain_gpt")
CONVERT = os.path.join(BUILD, "bin", "convert_checkpoint")
COMPARE = os.path.join(BUILD, "bin", "compare_dumps")
VENV_PY = os.path.join(BUILD, "hf-venv", "bin", "python")
HOOKS = os.path.join(SRC, "tools", "hf_dump_hooks.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1")
LLAMA = llama(2) + ["--rotary-base", "500000", "--use-rope-scaling"]
FIRST = re.compile(r"^first divergence at (\S+)(?: \(iteration \d+\))?: (within|beyond)", re.M)


def run(cmd, env=None, timeout=300):
    return run_cmd(cmd, env or ENV, timeout)


def pretrain(tmp, model, vocab, *extra, env=None):
    return run([PRETRAIN, *model, "--seq-length", "32", "--max-position-embeddings", "32",
                "--micro-batch-size", "2", "--global-batch-size", "4", "--lr", "1e-3",
                "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(vocab),
                "--data-cache-path", os.path.join(tmp, "cache"), "--attention-dropout", "0",
                "--hidden-dropout", "0", "--init-method-std", "0.3", "--ckpt-format", "torch",
                "--transformer-impl", "local", "--eval-iters", "0", *extra], env=env)


def dump_ours(tmp, label, model, vocab, ckpt, points, env=None):
    out = os.path.join(tmp, "%s_ours%s" % (label, "_perturbed" if env else ""))
    p = pretrain(tmp, model, vocab, "--train-iters", "1", "--load", ckpt, "--finetune",
                 "--no-load-optim", "--no-load-rng", "--dump-dir", out, "--dump-points", points,
                 env=dict(ENV, **env) if env else None)
    C.check(p.returncode == 0, "%s: pretrain_gpt --dump-dir: %s" % (label, p.stderr[-2000:]))
    return out


def compare(a, b):
    p = run([COMPARE, a, b])
    m = FIRST.search(p.stdout)
    return p, (m.group(1), m.group(2)) if m else (None, None)


def case(tmp, label, model, vocab, points, perturb_layer, want_names):
    ckpt = os.path.join(tmp, label)
    p = pretrain(tmp, model, vocab, "--train-iters", "2", "--save", ckpt, "--save-interval", "2")
    if not C.check(p.returncode == 0, "%s: pretrain_gpt: %s" % (label, p.stderr[-2000:])):
        return
    hf_dir = ckpt + "_hf"
    p = run([CONVERT, "--model-type", "GPT", "--loader", "core", "--saver", "hf",
             "--load-dir", ckpt, "--save-dir", hf_dir])
    if not C.check(p.returncode == 0, "%s: export: %s" % (label, p.stderr[-2000:])):
        return
    ours = dump_ours(tmp, label, model, vocab, ckpt, points)
    hf = os.path.join(tmp, label + "_hf_dump")
    p = run([VENV_PY, HOOKS, "--model", hf_dir, "--dump-dir", hf, "--dump-points", points,
             "--batch-from", os.path.join(ours, "iter_0000001")])
    if not C.check(p.returncode == 0, "%s: hf_dump_hooks: %s" % (label, p.stderr[-3000:])):
        return
    names = list(mcdump.read(os.path.join(hf, "iter_0000001", "rank_00000.dump")))
    C.check(sorted(names) == sorted(want_names), "%s: HF dump names %s, want %s"
            % (label, sorted(names), sorted(want_names)))
    p, (first, verdict) = compare(ours, hf)
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr
    print("  %s: %s" % (label, tail))
    C.check(p.returncode == 0 and " 0 of %d tensors beyond" % len(want_names) in p.stdout,
            "%s: compare_dumps ours vs HF: exit %d\n%s" % (label, p.returncode, p.stdout[-4000:]))
    C.check("only in" not in p.stdout, "%s: names on one side only" % label)
    logits = [ln for ln in p.stdout.splitlines() if " forward.output_layer.output " in ln]
    padded = vocab + 1 != (vocab + 1 + 127) // 128 * 128
    C.check(bool(logits) and (("the first %d of" % (vocab + 1)) in logits[0]) == padded,
            "%s: the logits line should %smention the padded vocabulary: %s"
            % (label, "" if padded else "not ", logits))
    # the perturbed run: first beyond tolerance exactly at that layer's output
    env = {"MC_TEST_PERTURB_LN_EPS": "decoder.layers.%d" % perturb_layer}
    bad = dump_ours(tmp, label, model, vocab, ckpt, points, env=env)
    p, (first, verdict) = compare(bad, hf)
    want = "forward.decoder.layers.%d.output" % perturb_layer
    print("  %s perturbed: %s" % (label, p.stdout.strip().splitlines()[-1:]))
    C.check(p.returncode == 1 and first == want and verdict == "beyond",
            "%s: perturbed layer %d reported as %s (%s), exit %d" % (label, perturb_layer, first,
                                                                     verdict, p.returncode))
    return ours, hf_dir


def tokens_option(tmp, ours, hf_dir):
    """--tokens/--labels of the first micro-batch give the same tensors as --batch-from."""
    d = mcdump.read(os.path.join(ours, "iter_0000001", "rank_00000.dump"))
    cmd = [VENV_PY, HOOKS, "--model", hf_dir, "--dump-dir", os.path.join(tmp, "tok"),
           "--dump-points", "batch,forward,loss"]
    for t, lab in zip(d["batch.tokens"], d["batch.labels"]):
        cmd += ["--tokens", " ".join(map(str, t)), "--labels", " ".join(map(str, lab))]
    p = run(cmd)
    if not C.check(p.returncode == 0, "hf_dump_hooks --tokens: %s" % p.stderr[-2000:]):
        return
    a = mcdump.read(os.path.join(tmp, "tok", "iter_0000001", "rank_00000.dump"))
    b = mcdump.read(os.path.join(tmp, "gpt2_hf_dump", "iter_0000001", "rank_00000.dump"))
    same = all(n in b and (a[n] == b[n]).all() for n in a if n != "loss")
    C.check(same and "loss" in a and "forward.decoder.layers.1.output@1" not in a,
            "--tokens gives other tensors than the first micro-batch of --batch-from")
    # errors name what is wrong
    nobatch = os.path.join(tmp, "nobatch.dump")
    mcdump.write(nobatch, {"loss": d["loss"]})
    p = run([VENV_PY, HOOKS, "--model", hf_dir, "--dump-dir", os.path.join(tmp, "x"),
             "--batch-from", nobatch])
    C.check(p.returncode != 0 and "no batch.tokens" in p.stderr and nobatch in p.stderr,
            "a dump without a batch: %s" % p.stderr[-500:])
    p = run([VENV_PY, HOOKS, "--model", hf_dir, "--dump-dir", os.path.join(tmp, "x"),
             "--tokens", "1 2 3", "--tokens", "4 5"])
    C.check(p.returncode != 0 and "same length" in p.stderr, "ragged --tokens: %s" % p.stderr[-500:])


def main():
    if not os.path.exists(VENV_PY):
        print("test_hf_alignment: no %s: run scripts/setup_hf_venv.sh %s" % (VENV_PY, BUILD))
        sys.exit(1)
    fwd = ["forward.embedding.output", "forward.decoder.final_layernorm.output",
           "forward.output_layer.output"]
    fwd += ["forward.decoder.layers.%d.%s" % (i, w) for i in range(2) for w in ("input", "output")]
    batch = ["batch.tokens", "batch.labels", "batch.loss_mask", "batch.position_ids"]
    both = lambda names: names + [n + "@1" for n in names]  # noqa: E731 (two micro-batches)
    with tempfile.TemporaryDirectory() as tmp:
        # GPT-2: NullTokenizer 4095 + EOD = 4096 = the padded size, so the loss agrees too
        r = case(tmp, "gpt2", gpt2(2), 4095, "batch,forward,loss", 1, both(batch + fwd) + ["loss"])
        # Llama: 4097 padded to 4224; the padded columns enter Megatron's softmax, not HF's,
        # so the loss is not compared
        case(tmp, "llama", LLAMA, 4096, "batch,forward", 0, both(batch + fwd))
        if r:
            tokens_option(tmp, *r)
    sys.exit(C.summary())


if __name__ == "__main__":
    main()
