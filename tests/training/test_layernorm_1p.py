"""--apply-layernorm-1p end to end (its math is in tests/parity: configs layernorm_1p and
rmsnorm_1p against the PyTorch twin): pretrain_gpt initializes every norm weight to zero (the
zero-centered value FusedLayerNorm / TENorm store), saves it under Megatron's usual names with
args.apply_layernorm_1p = True, and a model whose norms scale by 1 + 0 trains exactly as the
plain model with its norm weights at one (same loss, iteration by iteration, at lr 0)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mc_test  # noqa: E402
from mc_test import check, summary  # noqa: E402


def args(tmp, norm, extra=()):
    return [*mc_test.gpt2(2), "--seq-length", "32", "--max-position-embeddings", "32",
            "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2",
            "--lr", "0.0", "--min-lr", "0.0", "--log-interval", "1", "--eval-iters", "0",
            "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), "--normalization", norm,
            "--attention-dropout", "0", "--hidden-dropout", "0", *extra]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for norm in ("LayerNorm", "RMSNorm"):
            save = os.path.join(tmp, "ckpt-" + norm)
            p = mc_test.run_pretrain(args(tmp, norm, ["--apply-layernorm-1p", "--save", save,
                                                      "--save-interval", "2",
                                                      "--ckpt-format", "torch"]))
            check(p.returncode == 0, "%s --apply-layernorm-1p run: %s" % (norm, p.stderr[-400:]))
            q = mc_test.run_pretrain(args(tmp, norm))
            a, b = mc_test.parse_exact(p.stdout), mc_test.parse_exact(q.stdout)
            check(len(a) == 2 and [x[:2] for x in a] == [x[:2] for x in b],
                  "%s: 1 + zero weights give the plain model's losses: %s %s" % (norm, a, b))
            try:
                import torch
            except ImportError:
                print("torch not installed: checkpoint contents not read")
                continue
            sys.path.insert(0, os.path.join(mc_test.SRC, "tests", "checkpointing"))
            import torch_stubs
            torch_stubs.install()
            sd = torch.load(os.path.join(save, "iter_0000002", "mp_rank_00", "model_optim_rng.pt"),
                            map_location="cpu")
            norms = {k: v for k, v in sd["model"].items()
                     if "layernorm.weight" in k or "layer_norm_weight" in k}
            check(len(norms) == 5 and all(float(v.abs().max()) == 0.0 for v in norms.values()),
                  "%s: the 5 norm weights are stored zero-centered (zeros at init): %s" % (
                      norm, {k: float(v.abs().max()) for k, v in norms.items()}))
            check(sd["args"].apply_layernorm_1p is True, "args.apply_layernorm_1p saved")
    return summary("test_layernorm_1p")


if __name__ == "__main__":
    sys.exit(main())
