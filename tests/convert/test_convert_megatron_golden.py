"""convert_checkpoint against Megatron-LM core_v0.12.1's own tools/checkpoint/convert.py (run on a
CPU, tests/golden/convert/README.md): converting the same Megatron-made checkpoint
(tests/golden/checkpointing/save: tp1, 2 layers, hidden 8, tied, learned positions) to tp2, to
pp2, to legacy-model tp2 (nested state dicts), Megatron's tp2 result back to tp1, and a tiny
HuggingFace Llama (GQA, tests/golden/convert/hf_llama) through the llama_mistral loader to tp2 give, rank by rank, Megatron's files: the same
top-level entries, the same model keys in the same order, bit-identical tensors, the same
iteration / checkpoint_version / rerun_state_machine, and the same args Namespace except for the
documented differences (save path; the fusion flags, which megatron.c carries over from the
source checkpoint instead of writing False; rotary_base / use_rope_scaling of an HF Llama, which
megatron.c takes from config.json)."""
import os
import shutil
import tempfile

import torch

from common import SRC, Counter, convert, iteration_dir

C = Counter("test_convert_megatron_golden")
GOLDEN = os.path.join(SRC, "tests", "golden", "convert")
SOURCE = os.path.join(SRC, "tests", "golden", "checkpointing", "save")
ALLOWED = {"save", "masked_softmax_fusion", "bias_gelu_fusion", "bias_dropout_fusion"}


def rank_dirs(ckpt):
    d = iteration_dir(ckpt)
    return sorted(os.listdir(d)), d


def same_tree(x, y, where):
    """nested dicts (legacy models) with the same keys in the same order, equal tensors, Nones"""
    if isinstance(y, dict):
        if not C.check(isinstance(x, dict) and list(x) == list(y),
                       "%s: keys %s vs %s" % (where, list(x) if isinstance(x, dict) else x, list(y))):
            return
        for k in y:
            same_tree(x[k], y[k], where + "." + k)
    elif y is None:
        C.check(x is None, "%s should be None" % where)
    else:
        C.check(isinstance(x, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape
                and torch.equal(x, y), "%s differs" % where)


def compare(ours, theirs, label, allowed=ALLOWED):
    names, d_ours = rank_dirs(ours)
    want, d_theirs = rank_dirs(theirs)
    C.check(names == want, "%s: rank directories %s, Megatron %s" % (label, names, want))
    with open(os.path.join(ours, "latest_checkpointed_iteration.txt")) as f, \
            open(os.path.join(theirs, "latest_checkpointed_iteration.txt")) as g:
        C.check(f.read() == g.read(), "%s: tracker file" % label)
    for r in want:
        if r not in names:
            continue
        a = torch.load(os.path.join(d_ours, r, "model_optim_rng.pt"))
        b = torch.load(os.path.join(d_theirs, r, "model_optim_rng.pt"))
        C.check(list(a) == list(b), "%s %s: top-level keys %s vs %s" % (label, r, list(a), list(b)))
        for k in ("iteration", "checkpoint_version", "num_floating_point_operations_so_far",
                  "rerun_state_machine"):
            C.check(a.get(k) == b.get(k), "%s %s: %s %r vs %r" % (label, r, k, a.get(k), b.get(k)))
        same_tree(a["model"], b["model"], "%s %s: model" % (label, r))
        va, vb = vars(a["args"]), vars(b["args"])
        diff = sorted(k for k in set(va) | set(vb) if k not in allowed and
                      (k not in va or k not in vb or va[k] != vb[k]))
        C.check(not diff, "%s %s: args differ: %s" % (
            label, r, [(k, va.get(k, "<absent>"), vb.get(k, "<absent>")) for k in diff]))


def main():
    tmp = tempfile.mkdtemp(prefix="mc_convert_golden_")
    try:
        cases = [("tp2", SOURCE, "megatron_tp2", ["--target-tensor-parallel-size", "2"]),
                 ("pp2", SOURCE, "megatron_pp2", ["--target-pipeline-parallel-size", "2"]),
                 ("tp2 -> tp1", os.path.join(GOLDEN, "megatron_tp2"), "megatron_tp2_to_tp1",
                  ["--target-tensor-parallel-size", "1"]),
                 ("legacy tp2", SOURCE, "megatron_legacy_tp2",
                  ["--saver", "legacy", "--target-tensor-parallel-size", "2"])]
        hf = os.path.join(GOLDEN, "hf_llama")
        cases.append(("llama_mistral tp2", hf, "megatron_from_hf_tp2",
                      ["--loader", "llama_mistral", "--checkpoint-type", "hf", "--model-size", "llama3",
                       "--tokenizer-model", os.path.join(hf, "tokenizer"), "--target-tensor-parallel-size", "2"]))
        for label, src, golden, opts in cases:
            out = os.path.join(tmp, golden)
            saver = [] if "--saver" in opts else ["--saver", "core", "--saver-transformer-impl", "local"]
            loader = [] if "--loader" in opts else ["--loader", "core", "--loader-transformer-impl", "local"]
            p = convert(src, out, *loader, *saver, *opts)
            # Megatron's llama_mistral loader leaves rope_theta and the Llama-3 rope scaling out of the
            # args (rotary_base 10000, use_rope_scaling False); megatron.c records the config's
            allowed = ALLOWED | ({"rotary_base", "use_rope_scaling"} if "llama" in label else set())
            if C.check(p.returncode == 0, "%s: %s" % (label, p.stderr)):
                compare(out, os.path.join(GOLDEN, golden), label, allowed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    C.finish()


if __name__ == "__main__":
    main()
