"""convert_checkpoint --loader core/legacy --saver core/legacy: resharding Megatron torch
checkpoints. A pretrain_gpt checkpoint (GPT-2-like: tied, learned positions, LayerNorm, GELU;
Llama-like: GQA 8 heads / 4 groups, SwiGLU, RMSNorm, RoPE, untied, no biases) goes through
tp1pp1 -> tp2pp2 -> tp1pp1, -> tp4 -> tp1, -> pp4 -> pp1, -> tp2 (legacy names) -> tp1 and
-> tp2 (transformer_engine names) -> tp1: the final model dict is bit-identical to the original
(same keys in the same order). Every intermediate checkpoint is merged back here with an
independent Python implementation of Megatron's merge rules (column-parallel: dim 0, row-parallel:
dim 1, SwiGLU fc1 gate/up halves per rank, replicated tensors from rank 0, pipeline stages'
layers renumbered) and must equal the original full model. Vocabulary re-padding with
--true-vocab-size repeats the last row, as Megatron's saver does. The resharded checkpoints
(tp2, pp2, and tp2 x pp2 with transformer_engine names), loaded by pretrain_gpt at the target
layout (mpirun), give the original layout's loss at the next step within 1e-5. A pipeline x virtual-pipeline checkpoint (model0/model1) converts back too."""
import os
import re
import shutil
import tempfile

import torch

from common import (GPT, LLAMA, PRETRAIN, Counter, convert, iteration_dir, load_rank, run,
                    train_args)

C = Counter("test_convert_reshard")
LEGACY_LAYER = {"input_norm": "input_layernorm", "self_attention.query_key_value": "self_attention.linear_qkv",
                "self_attention.dense": "self_attention.linear_proj",
                "post_attention_norm": "pre_mlp_layernorm", "mlp.dense_h_to_4h": "mlp.linear_fc1",
                "mlp.dense_4h_to_h": "mlp.linear_fc2"}
TE = {"self_attention.linear_qkv.layer_norm_": "input_layernorm.",
      "mlp.linear_fc1.layer_norm_": "pre_mlp_layernorm."}


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = prefix + k
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def mcore_name(key):
    """local-spec mcore name of a key of any layout (None: not a parameter)"""
    if key.endswith("_extra_state") or key == "word_embeddings_for_head.weight":
        return None
    if key.startswith("language_model."):
        key = key[len("language_model."):]
        if key.startswith("embedding."):
            return key
        if key == "output_layer.weight":
            return key
        key = key[len("encoder."):]
        if key.startswith("final_norm."):
            return "decoder.final_layernorm." + key.split(".")[-1]
        m = re.match(r"layers\.(\d+)\.(.*)\.(weight|bias)$", key)
        return "decoder.layers.%s.%s.%s" % (m.group(1), LEGACY_LAYER[m.group(2)], m.group(3))
    for te, local in TE.items():
        key = key.replace(te, local)
    return key


def split_kind(name, swiglu):
    if "word_embeddings" in name or name.startswith("output_layer") or "linear_qkv" in name:
        return "col"
    if "linear_fc1" in name:
        return "gated" if swiglu else "col"
    if name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
        return "row"
    return "rep"


def full_model(ckpt):
    """{mcore local name with global layer number: full tensor}, merged as Megatron's loader does"""
    first = load_rank(ckpt, 0, 0, 1 if os.path.isdir(os.path.join(iteration_dir(ckpt), "mp_rank_00")) else 2)
    a = first["args"]
    tp, pp, L = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.num_layers
    tied = not a.untie_embeddings_and_output_weights
    parts = {}
    for p in range(pp):
        for t in range(tp):
            sd = load_rank(ckpt, t, p, pp)
            for k, v in flatten(sd["model"]).items():
                n = mcore_name(k)
                if n is None or (tied and n == "output_layer.weight"):
                    continue
                m = re.match(r"decoder\.layers\.(\d+)\.(.*)", n)
                if m:
                    n = "decoder.layers.%d.%s" % (p * (L // pp) + int(m.group(1)), m.group(2))
                parts.setdefault(n, [None] * tp)[t] = v
    full = {}
    for n, shards in parts.items():
        kind = split_kind(n, a.swiglu)
        if kind == "rep":
            full[n] = shards[0]
        elif kind == "row":
            full[n] = torch.cat(shards, 1)
        elif kind == "col":
            full[n] = torch.cat(shards, 0)
        else:
            halves = [torch.chunk(s, 2, 0) for s in shards]
            full[n] = torch.cat([h[0] for h in halves] + [h[1] for h in halves], 0)
    return full, a


def same_full(x, y, what, vocab_rows=None):
    ok = C.check(sorted(x) == sorted(y), "%s: parameter names differ: %s" % (what, sorted(set(x) ^ set(y))))
    for n in x:
        if n not in y:
            continue
        a, b = x[n], y[n]
        if vocab_rows and ("word_embeddings" in n or n == "output_layer.weight"):
            a, b = a[:vocab_rows], b[:vocab_rows]
        ok &= C.check(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b),
                      "%s: %s differs (%s vs %s)" % (what, n, tuple(a.shape), tuple(b.shape)))
    return ok


def same_dict(ckpt_a, ckpt_b, what):
    a, b = load_rank(ckpt_a, 0, 0, 1)["model"], load_rank(ckpt_b, 0, 0, 1)["model"]
    C.check(list(a) == list(b), "%s: key order differs" % what)
    C.check(all((a[k] is None and b.get(k) is None) or torch.equal(a[k], b[k]) for k in a),
            "%s: tensors differ" % what)


def train(tmp, model, name, tp=1, np=1, iters=2, extra=(), div=128):
    save = os.path.join(tmp, name)
    p = run([PRETRAIN, *train_args(model, tmp, iters, tp=tp, vocab_div=div, extra=["--save", save,
             "--save-interval", str(iters), *extra])], np=np)
    C.check(p.returncode == 0, "pretrain_gpt %s: %s" % (name, p.stderr[-2000:] + p.stdout[-2000:]))
    return save, p


EXACT = re.compile(r"^\[exact\] iteration (\d+) \| lm loss: (\S+) \|")


def loss_at(p, it):
    for m in map(EXACT.match, p.stdout.splitlines()):
        if m and int(m.group(1)) == it:
            return float(m.group(2))
    return None


def chains(tmp, model, label):
    src, _ = train(tmp, model, label)
    orig, args = full_model(src)
    swiglu = args.swiglu
    steps = [("tp2pp2", ["--target-tensor-parallel-size", "2", "--target-pipeline-parallel-size", "2",
                         "--saver-transformer-impl", "local"]),
             ("tp4", ["--target-tensor-parallel-size", "4", "--target-pipeline-parallel-size", "1",
                      "--saver-transformer-impl", "local"]),
             ("pp4", ["--target-tensor-parallel-size", "1", "--target-pipeline-parallel-size", "4",
                      "--saver-transformer-impl", "local"]),
             ("tp2legacy", ["--saver", "legacy", "--target-tensor-parallel-size", "2",
                            "--target-pipeline-parallel-size", "2"]),
             ("tp2te", ["--target-tensor-parallel-size", "2", "--target-pipeline-parallel-size", "1"])]
    for name, opts in steps:
        mid = os.path.join(tmp, "%s_%s" % (label, name))
        back = mid + "_back"
        p = convert(src, mid, "--loader", "core", "--saver", "core", *opts) if "--saver" not in opts \
            else convert(src, mid, "--loader", "core", *opts)
        if not C.check(p.returncode == 0, "%s %s: %s" % (label, name, p.stderr + p.stdout)):
            continue
        full, a = full_model(mid)
        same_full(orig, full, "%s %s (independent merge)" % (label, name))
        want_tp = int(opts[opts.index("--target-tensor-parallel-size") + 1])
        want_pp = int(opts[opts.index("--target-pipeline-parallel-size") + 1])
        C.check((a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.world_size) ==
                (want_tp, want_pp, want_tp * want_pp), "%s %s: args layout" % (label, name))
        C.check(a.no_save_optim and a.no_save_rng and a.ckpt_format == "torch",
                "%s %s: saver args" % (label, name))
        sd = load_rank(mid, 0, 0, want_pp)
        C.check("optimizer" not in sd and sd["checkpoint_version"] == 3.0 and sd["iteration"] == 2,
                "%s %s: top-level entries %s" % (label, name, list(sd)))
        loader = "legacy" if "legacy" in name else "core"
        p = convert(mid, back, "--loader", loader, "--saver", "core", "--saver-transformer-impl", "local",
                    "--target-tensor-parallel-size", "1", "--target-pipeline-parallel-size", "1")
        if C.check(p.returncode == 0, "%s %s back: %s" % (label, name, p.stderr + p.stdout)):
            same_dict(src, back, "%s %s -> tp1pp1" % (label, name))
    # re-padding the vocabulary: 4097 true tokens, tp 4 -> padded to a multiple of 512
    mid = os.path.join(tmp, label + "_pad")
    p = convert(src, mid, "--loader", "core", "--saver", "core", "--saver-transformer-impl", "local",
                "--target-tensor-parallel-size", "4", "--true-vocab-size", "4097")
    if C.check(p.returncode == 0, "%s pad: %s" % (label, p.stderr)):
        full, a = full_model(mid)
        w, o = full["embedding.word_embeddings.weight"], orig["embedding.word_embeddings.weight"]
        C.check(w.shape[0] == 4608 and a.padded_vocab_size == 4608, "%s pad: %s rows" % (label, w.shape))
        C.check(torch.equal(w[:4224], o) and torch.equal(w[4224:], o[-1:].expand(384, -1)),
                "%s pad: rows are the original's, then its last row repeated" % label)
        if swiglu:
            C.check(torch.equal(full["output_layer.weight"][:4224], orig["output_layer.weight"]),
                    "%s pad: output layer" % label)
    return src


def virtual_pipeline(tmp, label, src):
    """A pp2 x vp2 checkpoint (model0/model1 per file, chunk c of stage p holding layer 2c + p),
    assembled here from the pp4 reshard's per-layer files, converts back to the original."""
    pp4 = os.path.join(tmp, "%s_pp4" % label)
    vp = os.path.join(tmp, "%s_vp" % label)
    for p in range(2):
        stages = [load_rank(pp4, 0, 2 * c + p, 4) for c in range(2)]
        models = [st.pop("model") for st in stages]
        sd = stages[0]
        sd["args"].pipeline_model_parallel_size = 2
        sd["args"].virtual_pipeline_model_parallel_size = 2
        for c in range(2):
            sd["model%d" % c] = models[c]
        # torch_stubs' stand-in enum classes cannot be pickled again: keep their names as strings
        sd.pop("rerun_state_machine", None)
        for k, v in vars(sd["args"]).items():
            if "<locals>" in type(v).__qualname__:
                setattr(sd["args"], k, str(v))
        d = os.path.join(iteration_dir(pp4).replace(pp4, vp), "mp_rank_00_%03d" % p)
        os.makedirs(d)
        torch.save(sd, os.path.join(d, "model_optim_rng.pt"))
    shutil.copy(os.path.join(pp4, "latest_checkpointed_iteration.txt"), vp)
    back = vp + "_back"
    p = convert(vp, back, "--loader", "core", "--saver", "core", "--saver-transformer-impl", "local",
                "--target-tensor-parallel-size", "1", "--target-pipeline-parallel-size", "1")
    if C.check(p.returncode == 0, "%s vp: %s" % (label, p.stderr + p.stdout)):
        C.check("vp 2" in p.stdout, "%s vp: not read as a virtual pipeline: %s" % (label, p.stdout))
        same_dict(src, back, "%s pp2 x vp2 -> tp1pp1" % label)


def next_step_loss(tmp, model, label, src):
    """The original checkpoint continued at tp1 and its reshards continued at their layouts under
    mpirun: the same loss at iteration 3 (no optimizer state in either: --no-load-optim)."""
    cont = ["--load", src, "--no-load-optim", "--no-load-rng", "--exit-on-missing-checkpoint"]
    _, p1 = train(tmp, model, label + "_cont1", iters=3, extra=cont)
    want = loss_at(p1, 3)
    for tp, pp in ((2, 1), (1, 2), (2, 2)):
        name = "%s_tp%dpp%d_loss" % (label, tp, pp)
        mid = os.path.join(tmp, name)
        # tp2 x pp2 with the saver's default transformer_engine names (pretrain_gpt reads both)
        impl = [] if (tp, pp) == (2, 2) else ["--saver-transformer-impl", "local"]
        p = convert(src, mid, "--loader", "core", "--saver", "core", *impl,
                    "--target-tensor-parallel-size", str(tp), "--target-pipeline-parallel-size", str(pp))
        C.check(p.returncode == 0, "%s: %s" % (name, p.stderr))
        save = os.path.join(tmp, name + "_cont")
        q = run([PRETRAIN, *train_args(model, tmp, 3, tp=tp, pp=pp, vocab_div=128 // tp,
                                       extra=["--load", mid, "--no-load-optim", "--no-load-rng",
                                              "--exit-on-missing-checkpoint", "--save", save,
                                              "--save-interval", "3"])], np=tp * pp)
        got = loss_at(q, 3)
        C.check(q.returncode == 0 and want is not None and got is not None and
                abs(want - got) <= 1e-5 * abs(want),
                "%s: loss at the next step %s (tp1) vs %s: %s" % (name, want, got, q.stderr[-1500:]))
        print("%s: next-step loss tp1 %.9g, tp%d pp%d reshard %.9g" % (label, want or 0, tp, pp, got or 0))


def main():
    tmp = tempfile.mkdtemp(prefix="mc_convert_")
    try:
        for model, label in ((GPT, "gpt"), (LLAMA, "llama")):
            src = chains(tmp, model, label)
            virtual_pipeline(tmp, label, src)
            if shutil.which("mpirun"):
                next_step_loss(tmp, model, label, src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    C.finish()


if __name__ == "__main__":
    main()
